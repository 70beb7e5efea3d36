"""mqbed testbed.observe: broker statistics pollers (and, beside them, exporters and ledger)."""

from __future__ import annotations

__all__ = [
    "ActiveMQStatsPoller",
    "BrokerStats",
    "QueueStats",
    "RabbitMQStatsPoller",
    "StatsPoller",
    "make_stats_poller",
]

from testbed.observe.stats import (
    ActiveMQStatsPoller,
    BrokerStats,
    QueueStats,
    RabbitMQStatsPoller,
    StatsPoller,
    make_stats_poller,
)
