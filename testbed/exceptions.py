"""One exception family for mqbed. Messages name the file, field and offending value."""

from __future__ import annotations

__all__ = [
    "MqbedError",
    "ScenarioError",
    "ScenarioIssue",
    "BackendError",
    "BrokerStartError",
    "NotOwnedError",
    "BrokerError",
    "ConfigurationError",
    "AccuracyMiss",
    "ThresholdMiss",
    "FaultError",
]

from dataclasses import dataclass


class MqbedError(Exception):
    """Base of every error mqbed raises on purpose. `exit_code` is what the CLI returns; the
    codes are listed and documented in `testbed.cli.exit_codes` (4: a run failure)."""

    exit_code = 4


@dataclass(frozen=True)
class ScenarioIssue:
    """One problem found in a scenario file, located as precisely as we can."""

    file: str
    line: int | None
    path: str  # dotted field path, e.g. "consumers[0].prefetch"
    message: str
    severity: str = "error"  # "error" | "warning"

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line else self.file
        field = f" {self.path}:" if self.path else ""
        prefix = "warning: " if self.severity == "warning" else ""
        return f"{where}:{field} {prefix}{self.message}"


class ScenarioError(MqbedError):
    """A scenario file is invalid. Carries every error found, not just the first."""

    exit_code = 3

    def __init__(self, issues: list[ScenarioIssue]):
        self.issues = issues
        super().__init__("\n".join(str(i) for i in issues))


class ConfigurationError(MqbedError):
    """Bad configuration outside a scenario file (CLI options, profiles, state files)."""

    exit_code = 3


class BackendError(MqbedError):
    """A backend could not provision, find or stop brokers."""


class BrokerStartError(BackendError):
    """A broker did not become healthy within its bounded wait."""


class NotOwnedError(BackendError):
    """The backend does not own the broker's lifecycle, so it cannot do this (kill, pause,
    stop, restart or ``rabbitmqctl`` on an external broker): not a failure, a refusal."""


class BrokerError(MqbedError):
    """A broker operation failed in a way the adapter could not hide."""


class AccuracyMiss(MqbedError):
    """A prediction missed: a whole-run metric outside its target and its measured interval
    (``mqbed bench --suite accuracy`` without ``--report-only``)."""

    exit_code = 5


class ThresholdMiss(MqbedError):
    """The measured run missed one of its thresholds (SLOs: ``thresholds:``, ``--threshold``)."""

    exit_code = 6


class FaultError(MqbedError):
    """A fault could not be validated, planned, injected or healed."""
