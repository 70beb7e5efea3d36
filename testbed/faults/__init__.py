"""mqbed testbed.faults."""
