"""User text reaches the terminal as written in every command, not only in `validate`: rich
turns an emoji code such as ``:x:`` into an emoji even with markup off, so a queue named ``:x:``
printed in a warning by `mqbed run` came out as a cross mark."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from tests.unit.test_loader_hostile import QUICKSTART, run_validate


def test_run_prints_a_warning_about_a_queue_named_like_an_emoji_literally(tmp_path: Path) -> None:
    # ρ = 500 warns and names the queue; a kill on the external backend then stops the run
    # before anything starts (exit 3), so no broker is needed
    doc = QUICKSTART.replace("name: work\n", 'name: ":x:"\n', 1).replace(
        "queue: work", 'queue: ":x:"'
    )
    doc = doc.replace("mean: 5ms", "mean: 5s") + "faults:\n  - {kind: broker_kill, at: 2s}\n"
    (tmp_path / "s.yaml").write_text(doc)
    args = ["s.yaml", "--backend", "external", "--no-predict", "--home", str(tmp_path / "home")]
    r = run_validate(*args, "--out", str(tmp_path / "runs"), cwd=tmp_path, command="run")
    assert r.code == 3, r.err
    assert "queue ':x:' is unstable" in r.err.replace("\n", " "), r.err
    assert "\N{CROSS MARK}" not in r.err + r.out


def test_library_consoles_print_emoji_codes_as_written() -> None:
    """The CLI's consoles (what every command prints through) print ':x:' as ':x:'."""
    from testbed.cli.app import err, out

    for console in (out, err):
        with console.capture() as captured:
            console.print("queue ':x:'", markup=False)
        assert captured.get().strip() == "queue ':x:'"
    assert Console(emoji=True).render_str(":x:").plain != ":x:"  # what the fix guards against
