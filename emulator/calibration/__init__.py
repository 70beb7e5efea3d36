"""Black-box calibration of a broker on this host (docs/models.md §9) → a calibration profile.

    from emulator.calibration import calibrate
    calibrate("rabbitmq", "deploy/calibration/rabbitmq-local.yaml", duration=60, repeats=3)

Modules:

- `fitting`: least squares with Pearson r and R², difference regressions, moments (pure maths);
- `bench`: the live micro-benchmarks through the broker adapters (streams of one producer and
  one consumer per queue in their own threads and connections, pipe bursts, memory, loopback);
- `protocol`: the §9 plan (sizes 100 B–1 MB; base, prefetch1, confirms; 1 and 100 msg/s;
  repeats; fan-out; bursts; memory) run step by step with progress and an ETA;
- `assemble`: from measurements to the `emulator.profile.Profile` YAML and the sidecar JSON;
- `api`: `calibrate` (starts its own broker unless a testbed home has one running) and
  `calibrate_endpoint`.

``python -m emulator.calibration --broker rabbitmq --out FILE`` runs it from a shell.
"""

from __future__ import annotations

__all__ = [
    "CalibrationData",
    "Protocol",
    "calibrate",
    "calibrate_endpoint",
    "linear_fit",
]

from emulator.calibration.api import calibrate, calibrate_endpoint
from emulator.calibration.fitting import linear_fit
from emulator.calibration.protocol import CalibrationData, Protocol
