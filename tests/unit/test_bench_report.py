"""docs/performance.md and `mqbed bench --json` from the figures the scripts print: one table
per area, judged rows, "not measured" with the reason, the tail of a failed benchmark and no
path of the machine or JSON dump in the Markdown. The scripts here are stand-ins that print
canned output at once (no benchmark runs)."""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from testbed.bench import runner
from testbed.bench.figures import Anchor, Figure, Target, figure_line
from testbed.bench.markdown import markdown, number, scrub
from testbed.cli import app

HEADER = "| figure | target | measured | ratio to anchor | pass/fail | command |"
WORKLOAD_CMD = "`mqbed bench --suite performance --only workload`"


def _records(*figs: Figure) -> list[str]:
    return [figure_line(f) for f in figs]


def _workload_output() -> str:
    t08 = Target(">=", 0.8, "ratio", source="issue 18")
    lines = [
        "[  0.1 s] starting RabbitMQ and ActiveMQ",
        'mqbed-figure {"record": "broker", "kind": "rabbitmq", "version": "3.10.8"}',
        *_records(
            Figure(
                "workload",
                "workload.generator_pika",
                "Locust worker ÷ bare pika loop (RabbitMQ)",
                "msg/s",
                20_000.0,
                t08,
                Anchor("bare pika loop", 25_000.0),
            ),
            Figure(
                "workload",
                "workload.generator_stomp",
                "Locust worker ÷ bare stomp.py loop (ActiveMQ)",
                "msg/s",
                25_483.3,
                t08,
                Anchor("bare stomp.py loop", 56_300.0),
            ),
            Figure(
                "workload",
                "workload.record_disk",
                "recording: Parquet bytes per delivery row",
                "B",
                13.56562,
            ),
        ),  # fmt: skip
        json.dumps({"generator": {"ratio": 0.8, "bare_pika_msg_s": 25000.0}}, indent=2),
    ]
    return "\n".join(lines)


def _stand_ins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """workload prints canned figures and exits 0; fault-proxy prints one, then a traceback
    naming this machine's paths, and exits 1."""
    (tmp_path / "workload.py").write_text(f"print({_workload_output()!r})\n")
    p50 = Figure("fault-proxy", "fault-proxy.added_p50", "round trip added by a link, p50 "
                 "(no toxic: fast path)", "ms", 0.1004, Target("<", 0.3))  # fmt: skip
    crash = (
        "Traceback (most recent call last):\n"
        f'  File "{runner.ROOT}/tests/bench/bench_proxy.py", line 9, in main\n'
        f'  File "{sys.prefix}/lib/python3.11/socket.py", line 1, in create_connection\n'
        f"ConnectionRefusedError: ``{tempfile.gettempdir()}/mqbed-bench-x/sock`` refused\n"
    )
    (tmp_path / "fault-proxy.py").write_text(
        f"import sys\nprint({figure_line(p50)!r})\nprint('round trip of 64-byte messages')\n"
        f"sys.stderr.write({crash!r})\nsys.exit(1)\n"
    )
    chosen = tuple(b for b in runner.BENCHMARKS if b.name in ("workload", "fault-proxy"))
    monkeypatch.setattr(runner, "BENCHMARKS", chosen)
    monkeypatch.setattr(runner, "_command",
                        lambda b, quick: [sys.executable, str(tmp_path / f"{b.name}.py")])  # fmt: skip


def _row(text: str, figure: str) -> str:
    (row,) = [line for line in text.splitlines() if line.startswith(f"| {figure} |")]
    return row


def test_the_report_is_tables_of_judged_figures(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _stand_ins(tmp_path, monkeypatch)
    doc = runner.run_benchmarks(tmp_path / "performance.md")
    text = (tmp_path / "performance.md").read_text()
    assert doc["failed"] == ["fault-proxy (exit 1)"]
    assert text.count(HEADER) == 2 and "## workload: " in text and "## fault-proxy: " in text
    assert _row(text, "Locust worker ÷ bare pika loop (RabbitMQ)") == (
        "| Locust worker ÷ bare pika loop (RabbitMQ) | ≥ 0.8 × anchor | 20,000 msg/s "
        f"| 0.800 × bare pika loop (25,000 msg/s) | pass | {WORKLOAD_CMD} |"
    )
    stomp = _row(text, "Locust worker ÷ bare stomp.py loop (ActiveMQ)")
    assert "| 0.453 × bare stomp.py loop (56,300 msg/s) | **FAIL** |" in stomp
    assert "| 13.6 B | – | – |" in _row(text, "recording: Parquet bytes per delivery row")
    kombu = _row(text, "Locust worker ÷ bare kombu loop (RabbitMQ)")
    assert "| ≥ 0.8 × anchor | not measured: the script printed no figure for it |" in kombu
    # the failed benchmark: what it printed before failing, "not measured" for the rest
    assert "| 0.1 ms | – | pass |" in _row(text, "round trip added by a link, p50 (no toxic: "
                                                "fast path)")  # fmt: skip
    throughput = _row(text, "bulk transfer through a link (best of 3)")
    assert "not measured: the benchmark failed before measuring it" in throughput
    assert "**Failed** (exit 1)" in text and "ConnectionRefusedError" in text
    assert "round trip of 64-byte messages" in text  # its human output is in the tail
    # people read it: no JSON dump, no record line, no path of this machine
    assert "mqbed-figure" not in text and '"ratio"' not in text and "{" not in text
    for path in (str(runner.ROOT), sys.prefix, tempfile.gettempdir() + "/"):
        assert path not in text, path
    assert 'File "./tests/bench/bench_proxy.py"' in text and "<python>/lib/python3.11" in text
    assert "**Machine:** " in text and ", RabbitMQ 3.10.8." in text
    assert "name" not in doc["machine"] and doc["machine"]["brokers"] == {"rabbitmq": "3.10.8"}
    s = doc["summary"]
    assert (s["pass"], s["fail"]) == (2, 1) and s["not_measured"] == s["with_target"] - 3


def test_json_gives_the_same_figures_as_the_report(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _stand_ins(tmp_path, monkeypatch)
    out = tmp_path / "p.md"
    result = CliRunner().invoke(app, ["bench", "--report", str(out), "--json"])
    doc = json.loads(result.stdout)  # one document, nothing around it
    assert result.exit_code != 0 and doc["ok"] is False and "fault-proxy" in doc["error"]
    perf = doc["performance"]
    assert doc["written"] == [str(out)] and perf["machine"]["brokers"] == {"rabbitmq": "3.10.8"}
    text = out.read_text()
    figures = [f for a in perf["areas"] for f in a["figures"]]
    assert len(figures) == text.count(WORKLOAD_CMD) + text.count("--only fault-proxy`")
    for f in figures:
        row = _row(text, f["figure"])
        measured = "not measured" if f["value"] is None else f"{number(f['value'])} {f['unit']}"
        status = {"pass": "| pass |", "fail": "| **FAIL** |"}.get(f["status"], "")
        assert measured in row and status in row, (f, row)
    assert markdown(perf) == text  # the file is this document rendered


def _canned(**area: Any) -> dict[str, Any]:
    fig = Figure("simulator", "simulator.hour_rss", "peak RSS of a 1 h prediction", "MiB",
                 600.0, Target("<", 512, source="issue 18"), note="--quick: 6 min",
                 judged=False)  # fmt: skip
    a = {"area": "simulator", "title": "t", "what": "What it measures.", "script": "python s",
         "command": "mqbed bench --suite performance --only simulator --quick", "exit": 0,
         "wall_s": 8.5, "ok": True, "figures": [fig.record()], "tail": None} | area  # fmt: skip
    return {"command": "mqbed bench --suite performance --quick", "date": "2026-11-21 10:09 UTC",
            "quick": True, "failed": [], "areas": [a],
            "machine": {"cpu_model": "AMD EPYC", "cpus": 2, "memory_bytes": 24 * 2**30,
                        "os": "Linux-6.18", "python": "3.11.7", "mqbed": "0.1.0",
                        "brokers": {}},
            "summary": {"figures": 1, "with_target": 1, "pass": 0, "fail": 0, "not_judged": 1,
                        "not_measured": 0}}  # fmt: skip


def test_canned_document_renders_quick_unjudged_and_a_safe_fence() -> None:
    text = markdown(_canned())
    assert text.startswith("# mqbed performance figures (quick: machinery check, not numbers)")
    assert "**Machine:** AMD EPYC, 2 CPUs, 24.0 GiB RAM, Linux-6.18, Python 3.11.7" in text
    assert "| < 512 MiB | 600 MiB (--quick: 6 min) | – | not judged |" in text
    assert "Targets: *issue 18*: the targets table of issue 18" in text
    tail = "```\nerror | with a pipe\n```"
    failed = markdown(_canned(ok=False, exit=1, tail=tail))
    assert "````text\n" + tail + "\n````" in failed  # a longer fence than the tail's own


def test_scrub_makes_paths_relative_but_leaves_other_text(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    text = f"{root}/tests/x.py {root} {root}-other {sys.prefix}/bin/python"
    other = str(root).replace(tempfile.gettempdir(), "<tmp>") + "-other"
    assert scrub(text, root) == f"./tests/x.py . {other} <python>/bin/python"
    assert [number(x) for x in (25815.0, 326.4, 13.56, 1.0676, 0.1413)] == [
        "25,815", "326", "13.6", "1.07", "0.141"
    ]  # fmt: skip


def test_a_run_of_some_areas_keeps_the_other_areas_of_the_report(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`--only fault-proxy` on an existing report replaces that area's section and keeps the
    workload section as it was written (a first version dropped every area not run)."""
    _stand_ins(tmp_path, monkeypatch)
    out = tmp_path / "performance.md"
    runner.run_benchmarks(out)
    before = out.read_text()
    workload = before[before.index("## workload: ") : before.index("## fault-proxy: ")]
    monkeypatch.setattr(
        runner, "_command", lambda b, quick: [sys.executable, "-c", "print('no figures')"]
    )
    doc = runner.run_benchmarks(out, only=["fault-proxy"])
    text = out.read_text()
    assert [a["area"] for a in doc["areas"]] == ["fault-proxy"]
    assert workload in text  # verbatim, the date of its run included
    assert text.index("## workload: ") < text.index("## fault-proxy: ")  # catalogue order
    assert "Areas not run by this command, as an earlier run wrote them" in text
    assert text.count("## fault-proxy: ") == 1 and "**Failed**" not in text  # the new one
    quick = tmp_path / "quick.md"
    quick.write_text(before)
    runner.run_benchmarks(quick, quick=True, only=["fault-proxy"])
    assert "## workload: " not in quick.read_text()  # no numbers beside a machinery check
