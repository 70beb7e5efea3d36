"""Compare measured runs: did this change make it faster? (``mqbed compare``, issue 20 §3).

- :mod:`.runs`      — a run directory's measured side reduced by Spark (the report's metrics)
- :mod:`.intervals` — bootstrap intervals of the difference (replications, slices, Poisson)
- :mod:`.core`      — :func:`compare_runs`, the JSON document
- :mod:`.table`     — terminal and markdown tables
- :mod:`.page`      — ``compare.html`` (overlaid CDFs, time plots, the table)

Command line: ``python -m testbed.compare RUN_A RUN_B [...] [--page-dir DIR] [--json]``
(see docs/compare.md).
"""

from __future__ import annotations

__all__ = ["compare_runs"]

from testbed.compare.core import compare_runs
