"""What the live integration tests share: run a scenario text quietly and read its measured
tables, and a factory of connected broker adapters closed after the test.

Every live test used to repeat these lines (write the file, `run_scenario` with the same four
arguments, read three parquet files and the ledger); one place now says how a test runs a
scenario, so a change of `run_scenario`'s signature or of the run layout is made once.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow.parquet as pq
import pytest
from rich.console import Console

from testbed.brokers import BrokerAdapter, make_adapter
from testbed.run import run_scenario


def run_quietly(
    text: str, tmp_path: Path, home: Path, *, name: str = "s.yaml", out: str = "runs",
    **options: Any,
) -> Path:  # fmt: skip
    """Write `text` to `tmp_path/name`, run it live (no prediction unless `predict=True` is
    given) with brokers from `home`, output under `tmp_path/out`; the run directory."""
    f = tmp_path / name
    f.write_text(text)
    options.setdefault("predict", False)
    result = run_scenario(
        f, home=home, out_dir=tmp_path / out, console=Console(stderr=True, quiet=True), **options
    )
    return result.run_dir


def measured(run_dir: Path) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame, dict[str, Any]]:
    """The run's measured messages, deliveries, events and ledger."""
    m = run_dir / "measured"
    frames = (pq.read_table(m / f"{t}.parquet").to_pandas() for t in ("messages", "deliveries"))
    events = pq.read_table(m / "events.parquet").to_pandas()
    ledger = json.loads((m / "ledger.json").read_text())
    return (*frames, events, ledger)  # type: ignore[return-value]


def adapters(
    request: pytest.FixtureRequest, kind: str, client: str
) -> Iterator[Callable[[], BrokerAdapter]]:
    """For a fixture: yields a factory of adapters connected to the session broker `kind`
    through `client`, and closes every one it made afterwards (one the test closed or aborted
    already is left as it is)."""
    made: list[BrokerAdapter] = []

    def factory() -> BrokerAdapter:
        adapter = make_adapter(request.getfixturevalue(kind), client)
        adapter.connect()
        made.append(adapter)
        return adapter

    yield factory
    for adapter in made:
        try:
            adapter.close()
        except Exception:  # closed or aborted by the test: its connection is gone already
            pass
