"""How brokers are provisioned: local processes, docker containers, or external URLs."""
