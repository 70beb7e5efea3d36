"""mqbed testbed.brokers."""
