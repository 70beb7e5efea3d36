"""mqbed testbed: live runs against real brokers (see DESIGN.md)."""

__version__ = "0.1.0"
