"""The correlation job: measured ⟷ predicted, as PySpark ``DataFrame -> DataFrame`` transforms.

I/O at the edges (:mod:`.readers` in, :mod:`.job` out); in between, pure transforms:

- :mod:`.session`  — the Spark session (quiet, UTC, loopback for local masters), stop by PID
- :mod:`.phases`   — load window per (source, replication) from the ``phase`` events
- :mod:`.windows`  — per-window rates, latency percentiles, queue depth, consumers
- :mod:`.metrics`  — per-replication summary figures over the load window
- :mod:`.latency`  — latency sample, log-bucket histograms, CDFs, KS, per-type table
- :mod:`.pairing`  — measured/predicted join per window and replication; MAPE, Pearson r
- :mod:`.stats`    — intervals (t, Poisson, moving-block bootstrap), relative errors (numpy)
- :mod:`.summary`  — ``analysis/summary.json`` (the verdict); a one-replication figure's
  interval by a moving-block bootstrap over its windows in :mod:`.window_bootstrap`
- :mod:`.capacity` — saturation point and SLA capacity of a sweep (plain numbers)

Entry point: :func:`testbed.analysis.job.analyse_run`; reports: :mod:`testbed.report`.
"""
