"""mqbed testbed.report."""
