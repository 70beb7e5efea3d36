"""Calibration: measuring a broker and client library on this machine (docs/models.md §9).

It drives live brokers, so it is on the live side; what it produces is a
:class:`testbed.core.profile.Profile`, the only measured input a prediction reads.

- :mod:`.fitting` — least squares with Pearson r and R², difference regressions, moments;
- :mod:`.bench` — the broker micro-benchmarks through the adapters (one producer and one
  consumer per queue in their own threads and connections, pipe bursts, memory, loopback);
- :mod:`.protocol` — the micro-benchmark plan (sizes 100 B–1 MB; base, prefetch1, confirms;
  1 and 100 msg/s; repeats; fan-out; bursts; memory) with progress and an ETA;
- :mod:`.assemble` / :mod:`.reassemble` — from measurements (or their sidecar) to the profile;
- :mod:`.api` — ``calibrate`` / ``calibrate_endpoint`` (``python -m testbed.calibration``);
- :mod:`.client_path` — the delivery path and the consumer's hold, measured through the live
  workload with the scenario's client library;
- :mod:`.machine` / :mod:`.choice` — this machine's profile cache under the testbed home, and
  which profile a prediction uses;
- :mod:`.restart` — how long the broker takes to come back after a kill (the profile's
  ``restart_time``).
"""
