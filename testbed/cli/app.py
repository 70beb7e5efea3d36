"""The Typer application, the two consoles and the options every command shares."""

from __future__ import annotations

__all__ = [
    "app",
    "out",
    "err",
    "HomeOpt",
    "JsonOpt",
    "SparkOpt",
    "testbed_home",
    "say",
    "progress",
    "kinds",
    "version",
]

import logging
import os
from importlib import metadata
from pathlib import Path
from typing import Annotated, Any, Literal

import typer
from rich.console import Console
from typer.core import TyperGroup

from testbed.cli.exit_codes import code_for, epilog
from testbed.core.broker_kinds import KINDS, KindName
from testbed.exceptions import MqbedError


def version() -> str:
    try:
        return metadata.version("mqbed")
    except metadata.PackageNotFoundError:  # run from a checkout that was never installed
        return "unknown (not installed)"


def _show_version(value: bool) -> None:
    if value:
        print(f"mqbed {version()}")
        raise typer.Exit(0)


out = Console(emoji=False)  # user text (names, paths) holds ':x:' literally
err = Console(stderr=True, emoji=False)


class _Group(TyperGroup):
    """Turns an mqbed error into its message on stderr and its documented exit code, for
    `main` and for anything invoking `app` directly (a test runner) alike."""

    def invoke(self, ctx: Any) -> Any:  # (typer vendors its own click)
        try:
            return super().invoke(ctx)
        except MqbedError as e:
            say(err, f"mqbed: {e}")
            raise typer.Exit(code_for(e)) from e


app = typer.Typer(
    name="mqbed",
    cls=_Group,
    help="Live emulation testbed for message brokers: live runs, paired predictions, reports.",
    epilog=epilog(),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    # plain help: choices shown as {a|b}, flags without a type, and no rich markup or emoji
    # codes (`a:b:step` must stay as written)
    rich_markup_mode=None,
)


QUIET_LIBRARY_LOGGERS = ("stomp.py",)
"""Libraries whose own warnings would reach the terminal through logging's last-resort handler
(the command configures no logging): stomp.py warns "could not connect to host …" for every
reconnect attempt of a connection whose ActiveMQ was killed (eight lines in the middle of one
broker-kill case of a `mqbed bench --suite accuracy` run). The adapters turn a connection
that stays lost into an error of their own, and the Locust workers keep the library's lines in
the run's logs."""


@app.callback()
def _root(
    show_version: Annotated[
        bool,
        typer.Option(
            "--version", is_eager=True, callback=_show_version, help="Print the version and exit."
        ),
    ] = False,
) -> None:
    """Live emulation testbed for message brokers: live runs, paired predictions, reports."""
    for name in QUIET_LIBRARY_LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(h, logging.NullHandler) for h in logger.handlers):
            logger.addHandler(logging.NullHandler())  # a handler: the last resort stays silent


HomeOpt = Annotated[
    Path | None,
    typer.Option(
        "--home",
        metavar="DIR",
        help="Testbed directory (state, broker data, logs). Default: $MQBED_HOME or ./.mqbed",
    ),
]
JsonOpt = Annotated[
    bool,
    typer.Option(
        "--json",
        help="One JSON document on stdout (with 'ok' and 'exit_code'); progress on stderr.",
    ),
]
SparkOpt = Annotated[
    str | None,
    typer.Option("--spark-master", metavar="URL", help="Spark master URL (default local[*])."),
]
Broker = Literal[KindName, "all"]


def testbed_home(home: Path | None) -> Path:
    return (home or Path(os.environ.get("MQBED_HOME", ".mqbed"))).resolve()


def kinds(broker: str) -> list[str]:
    return list(KINDS) if broker == "all" else [broker]


def say(console: Console, text: str) -> None:
    """Print text that may hold user input (file names, YAML values) exactly as it is: no rich
    markup (``[bold]`` would vanish), no emoji codes (``:x:``), no highlighting."""
    console.print(text, markup=False, emoji=False, highlight=False, soft_wrap=True)


def progress(line: str) -> None:
    """A progress line on stderr."""
    say(err, line)
