"""Calibration entry point (docs/models.md §9); the implementation is `emulator.calibration`.

``calibrate(broker_kind, out_path, *, duration=60, repeats=3, quick=False, home=None,
progress=None) -> Path`` is what ``mqbed calibrate`` calls.
"""

from __future__ import annotations

__all__ = ["calibrate", "calibrate_endpoint"]

from emulator.calibration.api import calibrate, calibrate_endpoint
