"""Errors of the emulator, in mqbed's one exception family."""

from __future__ import annotations

__all__ = ["PredictionError"]

from testbed.exceptions import MqbedError


class PredictionError(MqbedError):
    """A prediction cannot be made as asked (e.g. the closed forms' assumptions fail).

    ``assumption`` names the assumption that fails (``"poisson arrivals"``, ``"one queue"``, ...);
    the message says which part of the scenario breaks it and how.
    """

    exit_code = 2

    def __init__(self, message: str, assumption: str = "") -> None:
        self.assumption = assumption
        super().__init__(message)
