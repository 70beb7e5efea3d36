"""Reports a person reads: ``report.html`` (self-contained: inline CSS, plots as base64 PNG,
no script), ``summary.md`` for CI logs, the cross-run table and the sweep page.

Entry points: :func:`testbed.report.build.build_report` and
:func:`testbed.report.build.report_after_run` (the end of ``mqbed run``).
"""
