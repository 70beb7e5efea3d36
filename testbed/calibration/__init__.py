"""Calibration on the live side: measuring the machine a prediction is for (docs/models.md §9).

- :mod:`.client_path` — the delivery path and the consumer's hold, measured through the live
  workload with the scenario's client library;
- :mod:`.machine` — the per-machine profile cache under the testbed home, and the quick
  calibration a run makes when the cache has no profile for this host, broker version and
  client library.
"""
