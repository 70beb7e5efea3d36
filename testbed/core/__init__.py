"""mqbed testbed.core."""
