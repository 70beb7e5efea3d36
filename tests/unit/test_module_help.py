"""Every `python -m` entry point of the package answers `--help` with a usage line and a help
text for each of its options and arguments (issue: a module's help must say what each option
means, not only its name), and does nothing else: no file written, exit 0."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

import testbed

PACKAGE = Path(testbed.__file__).resolve().parent


def _entry_points() -> list[str]:
    """Modules with a ``__main__.py`` or an ``if __name__ == "__main__":`` block."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE.parent).with_suffix("")
        name = ".".join(rel.parts)
        if path.name == "__main__.py":
            found.append(name.removesuffix(".__main__"))
            continue
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if (
                isinstance(node, ast.If)
                and isinstance(node.test, ast.Compare)
                and isinstance(node.test.left, ast.Name)
                and node.test.left.id == "__name__"
            ):
                found.append(name)
    return found


ENTRY_POINTS = _entry_points()
_OPTION = re.compile(r"^  (-{1,2}[\w-]+|[a-z_]+)(?:[ ,][^ ].*?)?(?:  +(\S.*))?$")


def _undocumented(text: str) -> list[str]:
    """argparse/click option and argument lines with no help text after them or below."""
    lines = text.splitlines()
    missing = []
    section = False
    for i, line in enumerate(lines):
        if re.match(r"(?i)^(options|positional arguments|arguments|commands)( .*)?:$", line):
            section = True
            continue
        if not line.strip() or not line.startswith(" "):
            section = False
        m = _OPTION.match(line) if section else None
        if not m or m.group(1) in ("-h", "--help"):
            continue
        below = lines[i + 1] if i + 1 < len(lines) else ""
        if m.group(2) is None and not re.match(r"^ {6,}\S", below):
            missing.append(line.strip())
    return missing


def test_the_entry_points_are_found() -> None:
    """The discovery above finds every entry point the README and compose files use."""
    expected = {
        "testbed.cli",
        "testbed.calibration",
        "testbed.calibration.reassemble",
        "testbed.compare",
        "testbed.faults.proxy",
        "testbed.backends.compose",
        "testbed.backends.images",
        "testbed.workload.worker_service",
        "testbed.core.schema_doc",
    }
    assert expected <= set(ENTRY_POINTS), sorted(expected - set(ENTRY_POINTS))


def test_the_undocumented_check_sees_a_bare_option() -> None:
    bare = (
        "options:\n  -h, --help  show this help\n  --out FILE\n  --port N    the port\n"
        "  --level P   a level\n              (default 0.95)\n\nexamples:\n  python -m x\n"
    )
    assert _undocumented(bare) == ["--out FILE"]


@pytest.mark.parametrize("module", ENTRY_POINTS)
def test_module_help_documents_every_option(module: str, tmp_path: Path) -> None:
    shown = subprocess.run(
        [sys.executable, "-m", module, "--help"],
        capture_output=True, text=True, timeout=120, cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin", "COLUMNS": "100", "HOME": str(tmp_path)},
    )  # fmt: skip
    text = shown.stdout
    assert shown.returncode == 0, f"{module}: exit {shown.returncode}\n{shown.stderr[-2000:]}"
    assert re.search(r"(?i)^usage:", text, re.M), f"{module}: no usage line\n{text}"
    assert not _undocumented(text), f"{module}: options without help {_undocumented(text)}"
    assert list(tmp_path.iterdir()) == [], f"{module} --help wrote {list(tmp_path.iterdir())}"
