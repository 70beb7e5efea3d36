"""`mqbed bench --quick` (the CI-sized subset): every benchmark runs and reports figures.
It fails only on broken machinery, never on a noisy number."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from testbed.cli import app

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_bench_quick_writes_every_section(tmp_path: Path) -> None:
    out = tmp_path / "performance.md"
    result = CliRunner().invoke(app, ["bench", "--quick", "--out", str(out)])
    assert result.exit_code == 0, result.output + (out.read_text() if out.exists() else "")
    text = out.read_text()
    for name in ("workload", "simulator", "fault-proxy", "correlation"):
        assert f"## {name}\n" in text
    assert text.count("exit 0,") == 4
    assert '"bare_pika_msg_s"' in text and '"ratio"' in text
