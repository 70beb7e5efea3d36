"""What commands print on a terminal. User text as written, in every command, not only in
`validate`: rich turns an emoji code such as ``:x:`` into an emoji even with markup off, so a
queue named ``:x:`` printed in a warning by `mqbed run` came out as a cross mark. And no broker
password in `mqbed up`'s text, which ends up in CI logs."""

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


def test_up_masks_the_password_unless_asked(tmp_path: Path) -> None:
    """`mqbed up`'s terminal text ends up in CI logs: its URLs mask the password, and only
    `--show-credentials` prints it (`--json` and the state file always carry it)."""
    from testbed.backends.base import BrokerEndpoint
    from testbed.cli.app import out
    from testbed.cli.cmd_brokers import _show

    ep = BrokerEndpoint("rabbitmq", "rabbitmq0", "127.0.0.1", 5999, "mqbed", "s3cret-Pw")
    for show, url in ((False, "amqp://mqbed:***@127.0.0.1:5999"),
                      (True, "amqp://mqbed:s3cret-Pw@127.0.0.1:5999")):  # fmt: skip
        with out.capture() as captured:
            _show([ep], {}, None, tmp_path, 1.0, show_credentials=show)
        text = captured.get()
        assert url in text, text
        assert ("s3cret-Pw" in text) is show, text
