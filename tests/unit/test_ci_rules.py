"""The suite's own rule: under CI=true a skipped test is reported as a failure."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def test_skip_fails_under_ci(tmp_path: Path) -> None:
    root = Path(__file__).resolve().parents[2]
    (tmp_path / "conftest.py").write_text((root / "tests" / "conftest.py").read_text())
    (tmp_path / "test_x.py").write_text(
        "import pytest\n\ndef test_needs_service():\n    pytest.skip('no broker')\n"
    )
    env = {**os.environ, "CI": "true"}
    ci = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)],
                        capture_output=True, text=True, env=env, timeout=120, cwd=tmp_path)
    assert ci.returncode == 1, ci.stdout
    assert "1 failed" in ci.stdout and "counts as a failure: " in ci.stdout
    env["CI"] = "false"
    local = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)],
                           capture_output=True, text=True, env=env, timeout=120, cwd=tmp_path)
    assert "1 skipped" in local.stdout
