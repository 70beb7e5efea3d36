"""Hostile scenario files: each is answered by the real `mqbed validate` with exit 3 and a
`file:line` message, quickly, in little memory, and never with a traceback.

The corpus runs the CLI in a subprocess (as a user would) under a 1 GiB address-space limit, so
a regression fails fast instead of eating the machine; its peak RSS comes from ``os.wait4``
for that one child. A Hypothesis fuzz test mutates the library scenarios in-process.
"""

from __future__ import annotations

import os
import random
import re
import resource
import signal
import subprocess
import sys
import tempfile
import time
import tracemalloc
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import testbed
from testbed.cli import main
from testbed.core.scenario_loader import load_scenario, validate_file
from testbed.exceptions import ScenarioError

REPO = Path(testbed.__file__).resolve().parents[1]
LIBRARY = sorted((REPO / "workloads" / "scenarios").glob("*.yaml"))
QUICKSTART = (REPO / "workloads" / "scenarios" / "quickstart.yaml").read_text()
TIME_LIMIT_S = 5.0
"""CPU seconds (user + system) a refusal may cost: a behaviour bound that a loaded machine
cannot break, unlike wall time (the suite runs beside live brokers)."""
WALL_KILL_S = 60.0
"""A child still running after this long is killed (a hang, e.g. a FIFO read)."""
RSS_LIMIT_MB = 200.0


@dataclass
class Result:
    code: int
    out: str
    err: str
    seconds: float
    peak_rss_mb: float


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))


def run_validate(*files: str | Path, cwd: Path, command: str = "validate") -> Result:
    """`python -m testbed.cli validate FILES`, killed after WALL_KILL_S; CPU time measured."""
    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t0 = time.monotonic()
        proc = subprocess.Popen(
            [sys.executable, "-m", "testbed.cli", command, *map(str, files)],
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=err,
            preexec_fn=_limit_memory,
            start_new_session=True,
        )
        peak_kb = 0
        while True:
            peak_kb = max(peak_kb, _vm_hwm_kb(proc.pid))
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() - t0 > WALL_KILL_S:
                os.killpg(proc.pid, signal.SIGKILL)
                pid, status, usage = os.wait4(proc.pid, 0)
                break
            time.sleep(0.02)
        seconds = usage.ru_utime + usage.ru_stime
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        text_out, text_err = (f.read().decode("utf-8", "replace") for f in (out, err))
    return Result(proc.returncode, text_out, text_err, seconds, peak_kb / 1024)


def _vm_hwm_kb(pid: int) -> int:
    """Peak RSS (kB) of the child's own program. After exec a process has a new address space
    whose high-water mark starts afresh; ``ru_maxrss`` instead also counts the pages of the
    forked parent (a pytest-xdist worker of 200+ MB), so it cannot bound the child."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0


def assert_refused(r: Result, name: str, line: int, fragment: str) -> None:
    assert "Traceback" not in r.err, r.err[-2000:]
    assert r.code == 3, (r.code, r.err[-500:])  # a scenario error
    assert r.seconds < TIME_LIMIT_S, f"took {r.seconds:.1f} CPU seconds"
    assert r.peak_rss_mb < RSS_LIMIT_MB, f"peak RSS {r.peak_rss_mb:.0f} MB"
    located = [x for x in r.err.splitlines() if x.startswith(f"{name}:{line}:")]
    assert located and any(fragment in x for x in located), r.err[-1000:]


def laughs() -> str:
    rows = ["a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    for prev, cur in zip("abcdefgh", "bcdefghi", strict=True):
        rows.append(f"{cur}: &{cur} [" + ", ".join([f"*{prev}"] * 9) + "]")
    return "\n".join(rows) + "\n"


def in_quickstart(old: str, new: str) -> str:
    assert old in QUICKSTART
    return QUICKSTART.replace(old, new, 1)


def line_of(text: str, fragment: str) -> int:
    return text[: text.index(fragment)].count("\n") + 1


NAME_LINE, SEED_LINE, DURATION_LINE, RATE_LINE = (
    line_of(QUICKSTART, key) for key in ("name:", "seed:", "duration:", "rate:")
)
BIG_SEED = in_quickstart("seed: 42", "seed: " + "1" * 5000).encode()
PYTHON_OBJECT = b"name: x\nseed: !!python/object/apply:os.system [echo hi]\n"
# (id, file content, line, message fragment)
CORPUS: list[tuple[str, bytes, int, str]] = [
    ("billion-laughs", laughs().encode(), 1, "aliases are expanded"),
    ("recursive-alias", b"name: x\nloop: &x [*x]\n", 2, "recursive alias"),
    ("recursive-merge", b"name: x\nloop: &x {<<: *x}\n", 2, "recursive alias"),
    ("nested-brackets", b"[" * 20_000, 1, "nested more than 64 levels"),
    ("nested-braces", b"{" * 20_000, 1, "nested more than 64 levels"),
    ("float-1e999", in_quickstart("100/s", "1.0e+999").encode(), RATE_LINE, "not finite"),
    ("duration-1e999", in_quickstart("60s", "1e999s").encode(), DURATION_LINE, "not a finite"),
    ("int-5000-digits", BIG_SEED, SEED_LINE, "too large"),
    ("non-utf8", b"name: q\ndescription: caf\xe9\n", 2, "not UTF-8"),
    ("control-char", b"name: q\n\x00\n", 2, "not valid YAML"),
    ("ten-megabytes", b"#" * 10_000_000, 1, "the limit is 1.0 MiB"),
    ("merge-a-list", b"name: x\nbase: &b [1]\nc:\n  <<: *b\n", 4, "merge key '<<' takes"),
    ("python-object", PYTHON_OBJECT, 2, "is not allowed"),
    ("python-name", b"name: !!python/name:os.system ''\n", 1, "is not allowed"),
]


@pytest.mark.parametrize(
    ("content", "line", "fragment"), [c[1:] for c in CORPUS], ids=[c[0] for c in CORPUS]
)
def test_hostile_file_is_refused_with_a_location(
    tmp_path: Path, content: bytes, line: int, fragment: str
) -> None:
    (tmp_path / "h.yaml").write_bytes(content)
    assert_refused(run_validate("h.yaml", cwd=tmp_path), "h.yaml", line, fragment)


def test_special_files_are_refused_unopened(tmp_path: Path) -> None:
    """A FIFO would block open() forever, /dev/zero never ends, a directory is no file."""
    os.mkfifo(tmp_path / "pipe.yaml")
    (tmp_path / "dir.yaml").mkdir()
    for name, fragment in (
        ("pipe.yaml", "FIFO"),
        ("/dev/zero", "character device"),
        ("dir.yaml", "directory"),
    ):
        assert_refused(run_validate(name, cwd=tmp_path), name, 1, fragment)


def test_one_bad_file_does_not_stop_the_others(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text(QUICKSTART)
    (tmp_path / "b.yaml").write_text(laughs())
    (tmp_path / "c.yaml").write_text(QUICKSTART.replace("quickstart", "c"))
    r = run_validate("a.yaml", "b.yaml", "c.yaml", cwd=tmp_path)
    assert_refused(r, "b.yaml", 1, "aliases are expanded")
    assert r.out.splitlines() == ["ok: a.yaml", "ok: c.yaml"]


def test_merge_keys_are_supported_with_lines(tmp_path: Path) -> None:
    """YAML 1.1 `<<`: the mapping's own keys win; an error in a merged key keeps its line."""
    merged = (
        "service_time:\n      <<:\n        kind: exponential\n        bogus: 1\n      mean: 4ms"
    )
    doc = in_quickstart("service_time: {kind: exponential, mean: 5ms}", merged)
    (tmp_path / "m.yaml").write_text(doc)
    scenario, issues = validate_file(tmp_path / "m.yaml")
    assert scenario is None
    assert [(i.line, i.path) for i in issues] == [
        (line_of(doc, "bogus"), "consumers[0].service_time.bogus")
    ], [str(i) for i in issues]
    (tmp_path / "m.yaml").write_text(doc.replace("        bogus: 1\n", "        mean: 1s\n"))
    s = load_scenario(tmp_path / "m.yaml")
    assert s.consumers[0].service_time.mean == pytest.approx(0.004)
    listed = "service_time: {<<: [{kind: exponential, mean: 2s}, {mean: 3s}]}"
    (tmp_path / "m.yaml").write_text(doc.replace(merged, listed))
    s = load_scenario(tmp_path / "m.yaml")
    assert s.consumers[0].service_time.mean == pytest.approx(2.0)


def test_user_text_is_printed_literally(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """No rich markup or emoji codes in error output: `[bold]` and `:x:` stay as written."""
    name = "[bold]:x:.yaml"
    (tmp_path / name).write_text(in_quickstart("name: quickstart", "name: ':x: [b]a[/b]'"))
    r = run_validate(name, cwd=tmp_path)
    assert f"{name}:{NAME_LINE}: name:" in r.err and "(got ':x: [b]a[/b]')" in r.err, r.err
    assert "\N{CROSS MARK}" not in r.err
    # main() prints a ScenarioError from any command (here `predict`) the same way
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["mqbed", "predict", name])
    with pytest.raises(SystemExit) as exit_:
        main()
    err = capsys.readouterr().err
    assert exit_.value.code == 3 and f"mqbed: {name}:{NAME_LINE}: name:" in err, err
    assert "(got ':x: [b]a[/b]')" in err and "\N{CROSS MARK}" not in err


# -- trace files ------------------------------------------------------------------------------


def trace_scenario(tmp_path: Path, file: str) -> Path:
    doc = in_quickstart("{kind: poisson, rate: 100/s}", f"{{kind: trace, file: '{file}'}}")
    (tmp_path / "s.yaml").write_text(doc)
    return tmp_path / "s.yaml"


def test_trace_outside_the_scenario_directory_is_refused(tmp_path: Path) -> None:
    secret = tmp_path / "secret.csv"
    secret.write_text("SECRET-first-line\n")
    (tmp_path / "dir").mkdir()
    (tmp_path / "dir" / "link.csv").symlink_to(secret)
    for name, fragment in (
        ("/etc/passwd", "is an absolute path"),
        (str(secret), "is an absolute path"),
        ("../secret.csv", "outside the scenario's directory"),
        ("link.csv", "outside the scenario's directory"),
        ("sub/../../secret.csv", "outside the scenario's directory"),
    ):
        scenario, issues = validate_file(trace_scenario(tmp_path / "dir", name))
        text = "\n".join(map(str, issues))
        assert scenario is None and fragment in text and "copy the trace into" in text, text
        assert "SECRET" not in text and "root:" not in text
        assert issues[0].line == RATE_LINE and issues[0].path == "producers[0].arrival.file"


def test_bad_trace_line_shows_only_the_cell(tmp_path: Path) -> None:
    (tmp_path / "times.csv").write_text("t,who\n0.5,alice\n  x" + "y" * 100 + ",SECRET\n2.0,bob\n")
    r = run_validate(trace_scenario(tmp_path, "times.csv").name, cwd=tmp_path)
    assert_refused(r, "s.yaml", RATE_LINE, "times.csv:3:3: 'x" + "y" * 39 + "…' is not a time")
    assert "SECRET" not in r.err and "y" * 41 not in r.err and "alice" not in r.err
    (tmp_path / "times.csv").write_text("0.5\n1.0\n1.25\n")
    assert load_scenario(tmp_path / "s.yaml").producers[0].arrival.times == [0.5, 1.0, 1.25]
    (tmp_path / "times.csv").write_text("0.5\nnan\n")
    assert "times.csv:2:1: 'nan' is not a finite time" in str(
        validate_file(tmp_path / "s.yaml")[1][0]
    )


# -- fuzzing ----------------------------------------------------------------------------------

SYNTAX = [
    "&a [*a]",
    "<<: *nowhere",
    "<<: [1, 2]",
    "{",
    "[",
    "- [",
    "]",
    "}",
    "? [a, b]\n: c",
    "*x",
    "!!python/object:os.system {}",
    "!!binary AAAA",
    "!!set {a}",
    "!!omap [a: 1]",
    "&b {x: *b}",
    "'unterminated",
    '"\\uZZZZ"',
    "\t",
    "%YAML 1.1\n---",
    "--- !x",
    "...",
    "@",
    "`",
    "|\n  x",
    "- &c x\n- *c",
    "{a: 1, a: 2}",
    "1.0e+999",
    ".nan",
    "-.inf",
    "0x" + "f" * 30,
    "9" * 50,
    "2001-13-45",
    "~",
    "yes",
    "on",
    "[]",
    "{}",
    "''",
]
VALUES = [
    "5ms",
    "-5s",
    "1e999s",
    "0s",
    "100/s",
    "0/s",
    "10/fortnight",
    "1KB",
    "1e308",
    "1e-320",
    "-1",
    "0",
    "2",
    "999999999999",
    "18446744073709551615",
    "true",
    "work",
    "rabbitmq",
    "activemq",
    "[1/s, 2/s]",
    "{kind: poisson, rate: 1/s}",
    "{kind: trace, file: x.csv}",
    "{kind: trace, file: /etc/passwd}",
    "{kind: trace, file: ../x.csv}",
    "{kind: closed, think_time: {kind: exponential, mean: 1ms}}",
    "{kind: exponential, mean: 0s}",
    "{kind: mmpp, rates: [1/s], mean_sojourns: [1s]}",
    "{kind: deterministic, value: 1ms}",
]
# an op is (kind, position 0..1, payload); most edits keep the YAML shape, to reach the checks
KINDS = ["flip", "truncate", "insert", "pair", "value"]
_AT = st.floats(0, 1)
_TEXT = st.text(st.characters(exclude_categories=("Cc", "Cs")), max_size=12)
OPS = st.one_of(
    st.tuples(st.just("value"), _AT, st.sampled_from(VALUES)),
    st.tuples(st.sampled_from(["value", "pair"]), _AT, st.one_of(st.sampled_from(VALUES), _TEXT)),
    st.tuples(st.sampled_from(KINDS), _AT, st.one_of(st.sampled_from(SYNTAX), _TEXT)),
)


def mutate(data: bytes, ops: list[tuple[str, float, str]]) -> bytes:
    """Apply byte flips, truncations, inserted lines, new `key: value` pairs (at the indent of
    the line they go before) and replaced values (of a `key: value` line) to a file."""
    for kind, where, payload in ops:
        text = payload.encode("utf-8", "surrogatepass")
        if kind in ("flip", "truncate"):
            at = min(int(where * len(data)), max(len(data) - 1, 0))
            flipped = bytes([(data[at] + len(text) + 1) % 256]) if data else b""
            data = data[:at] + (flipped + data[at + 1 :] if kind == "flip" else b"")
            continue
        lines = data.split(b"\n")
        if kind == "value":
            pairs = [k for k, line in enumerate(lines) if b": " in line and b"#" not in line[:1]]
            if not pairs:
                continue
            n = pairs[min(int(where * len(pairs)), len(pairs) - 1)]
            lines[n] = lines[n].split(b": ", 1)[0] + b": " + text
        else:
            n = min(int(where * len(lines)), len(lines) - 1)
            indent = re.match(rb"\s*-?\s*", lines[n])
            if kind == "pair":
                text = (indent.group(0) if indent else b"") + text + b": " + text
            lines.insert(n, text)
        data = b"\n".join(lines)
    return data


def check_file(path: Path) -> bool:
    """Loads to a Scenario (True) or raises ScenarioError whose every issue has file:line."""
    try:
        load_scenario(path)
        return True
    except ScenarioError as e:
        assert e.issues
        for issue in e.issues:
            assert issue.line is not None and issue.line >= 1, issue
            assert str(issue).startswith(f"{path}:{issue.line}:"), issue
        return False


@pytest.fixture(scope="module")
def fuzz_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fuzz")


@settings(
    max_examples=1000,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(source=st.sampled_from(LIBRARY), ops=st.lists(OPS, min_size=1, max_size=3))
def test_fuzzed_library_files_load_or_fail_located(
    fuzz_dir: Path, source: Path, ops: list[tuple[str, float, str]]
) -> None:
    target = fuzz_dir / "fuzz.yaml"
    target.write_bytes(mutate(source.read_bytes(), ops))
    # every generated case within the limits the CLI cases are held to: CPU time, and the
    # memory the loader allocates (traced in process; the CLI cases bound the whole RSS)
    tracemalloc.start()
    cpu = time.process_time()
    try:
        check_file(target)
        took = time.process_time() - cpu
        peak_mb = tracemalloc.get_traced_memory()[1] / 2**20
    finally:
        tracemalloc.stop()
    assert took < TIME_LIMIT_S, f"{ops}: {took:.1f} CPU seconds"
    assert peak_mb < RSS_LIMIT_MB, f"{ops}: {peak_mb:.0f} MB allocated"


def test_fuzzed_sample_through_the_cli(tmp_path: Path) -> None:
    rng = random.Random(20240611)
    names = []
    for i in range(20):
        ops = [
            (rng.choice(KINDS), rng.random(), rng.choice(SYNTAX + VALUES))
            for _ in range(rng.randint(1, 3))
        ]
        (tmp_path / f"f{i}.yaml").write_bytes(mutate(rng.choice(LIBRARY).read_bytes(), ops))
        names.append(f"f{i}.yaml")
    expected = {n: check_file(tmp_path / n) for n in names}
    r = run_validate(*names, cwd=tmp_path)
    assert (
        "Traceback" not in r.err and r.seconds < 3 * TIME_LIMIT_S and r.peak_rss_mb < RSS_LIMIT_MB
    )
    assert r.code == (0 if all(expected.values()) else 3)  # 3: a scenario error
    for n, ok in expected.items():
        assert (f"ok: {n}" in r.out.splitlines()) == ok, n
        assert ok or re.search(rf"^{re.escape(n)}:\d+: ", r.err, re.M), n
    assert not all(expected.values()), "the sample should hold bad files"
