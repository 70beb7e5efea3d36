"""The documentation in docs/ stays true to the repository.

- docs/scenario.md is what `python -m testbed.core.schema_doc` renders from the models now;
- no file points at the background notes that used to live outside the repository;
- every `docs/models.md §N` reference names a section that docs/models.md has.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from testbed.core import schema_doc

ROOT = Path(__file__).resolve().parents[2]
MODELS = ROOT / "docs" / "models.md"
# spelt in pieces so that this file does not contain what it forbids
FORBIDDEN = ("MODELS" + ".md", "DESIGN" + ".md", "FACTS" + ".md", ".." + "/shared")
SKIP_DIRS = {".git", ".venv", ".mypy_cache", ".ruff_cache", ".pytest_cache", "__pycache__", "runs"}
REF = re.compile(r"docs/models\.md\s*((?:§\d+[a-z]?(?:\s*(?:,|–|-|and|to)\s*)?)+)")
HEADING = re.compile(r"^#{2,4} §(\d+[a-z]?)\b", re.MULTILINE)


def repository_files() -> list[Path]:
    """Files of the repository: tracked and new-but-not-ignored ones (git), else a plain walk."""
    try:
        out = subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            cwd=ROOT,
            capture_output=True,
            check=True,
            timeout=60,
        ).stdout
        names = [n for n in out.decode().split("\0") if n]
        return [ROOT / n for n in names if (ROOT / n).is_file()]
    except (OSError, subprocess.SubprocessError):
        found = []
        for top, dirs, files in os.walk(ROOT):
            dirs[:] = [d for d in dirs if d not in SKIP_DIRS and not d.startswith(".mqbed")]
            found += [Path(top) / f for f in files]
        return found


def text_of(path: Path) -> str | None:
    data = path.read_bytes()
    if b"\0" in data[:8192]:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


@pytest.fixture(scope="module")
def texts() -> dict[Path, str]:
    out = {}
    for path in repository_files():
        text = text_of(path)
        if text is not None:
            out[path] = text
    return out


# --- docs/scenario.md ---------------------------------------------------------------------------


def test_scenario_reference_is_current() -> None:
    committed = schema_doc.DOC_PATH.read_text(encoding="utf-8")
    assert committed == schema_doc.render(), (
        "docs/scenario.md is stale: run `python -m testbed.core.schema_doc --write`"
    )


def test_scenario_reference_lists_every_field_with_its_docstring() -> None:
    text = schema_doc.render()
    producer = text.split("## ProducerSpec", 1)[1].split("\n## ", 1)[0]
    for field in ("name", "count", "queue", "exchange", "routing_key", "arrival", "size",
                  "persistent", "confirms", "message_type", "start", "stop", "max_messages"):  # fmt: skip
        assert f"| `{field}` |" in producer, field
    assert "| `from` | rate | required | ≥ 0 |" in text  # the YAML alias, not `from_`
    assert "`times`" not in text.split("## TraceArrival", 1)[1].split("\n## ", 1)[0]  # excluded
    # a field docstring, and one inherited from a base class
    assert "Client library; defaults to pika for RabbitMQ and stomp for ActiveMQ." in text
    tracking = text.split("## TargetTracking", 1)[1].split("\n## ", 1)[0]
    assert "| `target` | string | required |  | Consumer group that is scaled. |" in tracking
    assert "| `duration` | duration | required | > 0 |" in text
    assert '`{"kind": "fixed", "value": 200.0}`' in producer
    assert "### Erlang" in text and "## Units" in text


def test_check_mode_reports_a_stale_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "scenario.md"
    monkeypatch.setattr(schema_doc, "DOC_PATH", target)
    target.write_text("# old\n", encoding="utf-8")
    assert schema_doc.main(["--check"]) == 1
    assert schema_doc.main(["--write"]) == 0
    assert target.read_text(encoding="utf-8") == schema_doc.render()
    assert schema_doc.main(["--check"]) == 0


# --- no pointers outside the repository ---------------------------------------------------------


def test_no_file_mentions_the_old_background_notes(texts: dict[Path, str]) -> None:
    assert len(texts) > 200, "the file listing found too few files to mean anything"
    hits = [
        f"{path.relative_to(ROOT)}:{n}: {line.strip()}"
        for path, text in texts.items()
        for n, line in enumerate(text.splitlines(), 1)
        if any(name in line for name in FORBIDDEN)
    ]
    assert not hits, "point into docs/ instead of notes outside the repository:\n" + "\n".join(hits)


# --- docs/models.md section references ----------------------------------------------------------


def test_every_models_reference_names_an_existing_section(texts: dict[Path, str]) -> None:
    sections = set(HEADING.findall(MODELS.read_text(encoding="utf-8")))
    assert {str(n) for n in range(1, 11)} | {"3a", "3b", "3c"} <= sections
    refs: list[tuple[str, str]] = []
    for path, text in texts.items():
        for match in REF.finditer(text):
            line = text.count("\n", 0, match.start()) + 1
            where = f"{path.relative_to(ROOT)}:{line}"
            refs += [(where, s) for s in re.findall(r"§(\d+[a-z]?)", match.group(1))]
    assert len(refs) > 100, f"only {len(refs)} references found: is the pattern broken?"
    missing = [f"{where}: §{s}" for where, s in refs if s not in sections]
    assert not missing, "docs/models.md has no such section:\n" + "\n".join(missing)


def test_reference_pattern_reads_lists_and_ranges() -> None:
    text = "see docs/models.md §3–§5, §7 and §9 here; docs/models.md\n§3c too"
    found = [re.findall(r"§(\d+[a-z]?)", m.group(1)) for m in REF.finditer(text)]
    assert found == [["3", "5", "7", "9"], ["3c"]]


def _sizes() -> tuple[dict[str, int], dict[str, int]]:
    """Modules of testbed/ and emulator/ over 400 lines, functions over 80 lines."""
    import ast

    modules: dict[str, int] = {}
    functions: dict[str, int] = {}
    for path in sorted([*ROOT.glob("testbed/**/*.py"), *ROOT.glob("emulator/**/*.py")]):
        text = path.read_text(encoding="utf-8")
        rel = path.relative_to(ROOT).as_posix()
        if text.count("\n") > 400:
            modules[rel] = text.count("\n")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > 80:
                    functions[f"{rel}::{node.name}"] = length
    return modules, functions


def test_architecture_lists_exactly_the_large_modules_and_long_functions() -> None:
    """docs/architecture.md's debts name every module over ~400 lines and function over ~80
    with its size, and nothing else: the list cannot go stale as code grows or is split."""
    text = " ".join((ROOT / "docs" / "architecture.md").read_text(encoding="utf-8").split())
    modules, functions = _sizes()

    def listed(heading: str) -> dict[str, int]:
        start = text.index(f"**{heading}.**")
        end = text.find("- **", start + 1)
        part = text[start : end if end > 0 else None]
        return {m[0]: int(m[1]) for m in re.findall(r"`([\w/.:]+)` \((\d+)\)", part)}

    assert listed("Large modules") == modules
    assert listed("Long functions") == functions


# --- paths named in README.md and docs/architecture.md ------------------------------------------

PATH_DOCS = ("README.md", "docs/architecture.md")
# backticked paths that name files made at run time or by the reader, not files of the repository
NOT_IN_REPOSITORY = {
    "compose/.env": "written by `python -m testbed.backends.compose env`",
    "workloads/scenarios/mine.yaml": "the README's name for a scenario the reader adds",
}
_BACKTICKED = re.compile(r"`([^`\s]+)`")


def named_paths(text: str, tops: set[str]) -> list[str]:
    """Backticked repository paths of `text`: the first part names a top-level entry of the
    repository (`tops`), and there is no placeholder or pattern (``<kind>``, ``*``, ``{a,b}``).
    ``path::name`` and ``path:line`` keep the path; a trailing punctuation mark is dropped."""
    found = []
    for raw in _BACKTICKED.findall(text):
        path = re.split(r"::|:(?=\d)", raw)[0].rstrip(".,;")
        if any(c in path for c in "<>*{}$~") or path.split("/")[0] not in tops:
            continue
        if "/" in path or path in tops:
            found.append(path)
    return found


def test_every_path_the_readme_and_architecture_name_exists() -> None:
    tops = {p.relative_to(ROOT).parts[0] for p in repository_files()}
    missing = []
    for doc in PATH_DOCS:
        paths = named_paths((ROOT / doc).read_text(encoding="utf-8"), tops)
        assert len(paths) > 20, f"{doc}: only {len(paths)} paths found: is the pattern broken?"
        missing += [
            f"{doc}: `{p}`" for p in paths if p not in NOT_IN_REPOSITORY and not (ROOT / p).exists()
        ]
    assert not missing, "named but not in the repository:\n" + "\n".join(missing)


def test_path_pattern_keeps_repository_paths_only() -> None:
    text = "`testbed/run.py::run_scenario` `docs/a.md:12`, `deploy/<kind>.yaml` `runs/x` `a/b`"
    assert named_paths(text, {"testbed", "docs", "deploy"}) == ["testbed/run.py", "docs/a.md"]
