"""mqbed testbed: live runs against real brokers (see docs/architecture.md)."""

__version__ = "0.1.0"
