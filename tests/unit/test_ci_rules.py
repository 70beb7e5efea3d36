"""The suite's own rule: under CI=true a skipped test is reported as a failure."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def run_pytest(project: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """pytest on a small project in a child process (≤ 120 s), `env` on top of ours."""
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args, str(project)],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        timeout=120,
        cwd=project,
    )


def test_skip_fails_under_ci(tmp_path: Path) -> None:
    root = Path(__file__).resolve().parents[2]
    (tmp_path / "conftest.py").write_text((root / "tests" / "conftest.py").read_text())
    (tmp_path / "test_x.py").write_text(
        "import pytest\n\ndef test_needs_service():\n    pytest.skip('no broker')\n"
    )
    ci = run_pytest(tmp_path, CI="true")
    assert ci.returncode == 1, ci.stdout
    assert "1 failed" in ci.stdout and "counts as a failure: " in ci.stdout
    local = run_pytest(tmp_path, CI="false")
    assert "1 skipped" in local.stdout


def test_loadgroup_keeps_a_group_on_one_worker(tmp_path: Path) -> None:
    """``make test`` runs tests/docker as one xdist group (one dockerd, one image build): the
    installed pytest and pytest-xdist must honour a group mark added at collection (pytest 9.2
    silently stopped that: pytest-xdist#1386)."""
    (tmp_path / "conftest.py").write_text(
        "import pytest\n\n"
        "@pytest.hookimpl(tryfirst=True)\n"
        "def pytest_collection_modifyitems(items):\n"
        "    for item in items:\n"
        "        if 'grouped' in item.name:\n"
        "            item.add_marker(pytest.mark.xdist_group('docker'))\n"
    )
    (tmp_path / "test_g.py").write_text(
        "import os, time, pytest\n\n"
        "@pytest.mark.parametrize('i', range(6))\n"
        "def test_grouped(i):\n"
        "    time.sleep(0.2)\n"
        "    with open(os.path.join(os.environ['OUT'], f'w{i}'), 'w') as f:\n"
        "        f.write(os.environ['PYTEST_XDIST_WORKER'])\n\n"
        "@pytest.mark.parametrize('i', range(6))\n"
        "def test_free(i):\n"
        "    time.sleep(0.2)\n"
    )
    out = tmp_path / "out"
    out.mkdir()
    run = run_pytest(tmp_path, "-n", "2", "--dist", "loadgroup", OUT=str(out))
    assert run.returncode == 0, run.stdout + run.stderr
    workers = {(out / f"w{i}").read_text() for i in range(6)}
    assert len(workers) == 1, f"the group ran on {sorted(workers)}"
