"""mqbed testbed.analysis."""
