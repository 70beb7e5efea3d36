"""mqbed testbed.control."""
