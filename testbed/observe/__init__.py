"""mqbed testbed.observe."""
