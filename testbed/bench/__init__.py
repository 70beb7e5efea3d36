"""The performance suite: `mqbed bench --suite performance` (docs/performance.md).

:mod:`~testbed.bench.figures` is the figure protocol the scripts of ``tests/bench/`` speak,
:mod:`~testbed.bench.catalogue` the figures and their targets, :mod:`~testbed.bench.runner`
runs the scripts and builds the document, :mod:`~testbed.bench.markdown` renders it.
"""

from testbed.bench.runner import BENCHMARKS, ROOT, run_benchmarks

__all__ = ["BENCHMARKS", "ROOT", "run_benchmarks"]
