"""`mqbed` command line (README.md "Command line"). Each command is a thin shell over a module.

One module per command group: `cmd_scenario` (validate, predict), `cmd_brokers` (up, down),
`cmd_run` (run, thresholds), `cmd_reports` (report, compare, sweep), `cmd_bench` (calibrate, bench);
`app` holds the Typer application and shared options, `output` the ``--json`` mode,
`exit_codes` the documented exit codes.
"""

from __future__ import annotations

__all__ = ["app", "main"]

import sys

import typer

from testbed.cli import cmd_bench as _bench  # noqa: F401 - registers calibrate, bench
from testbed.cli import cmd_brokers as _brokers  # noqa: F401 - registers up, down
from testbed.cli import cmd_reports as _reports  # noqa: F401 - registers report, compare, sweep
from testbed.cli import cmd_run as _run  # noqa: F401 - registers run
from testbed.cli import cmd_scenario as _scenario  # noqa: F401 - registers validate, predict
from testbed.cli import exit_codes
from testbed.cli.app import app, err, say
from testbed.exceptions import MqbedError


def main(argv: list[str] | None = None) -> None:
    """Console-script entry: one-line reason and the documented exit code for expected failures
    (`testbed.cli.exit_codes`); 130 after Ctrl-C (the run directory is still written)."""
    try:
        rv = app(args=argv, prog_name="mqbed", standalone_mode=False)
    except MqbedError as e:
        say(err, f"mqbed: {e}")
        sys.exit(exit_codes.code_for(e))
    except typer.Exit as e:
        sys.exit(e.exit_code)
    except (typer.Abort, KeyboardInterrupt):
        err.print("mqbed: interrupted", markup=False)
        sys.exit(exit_codes.INTERRUPTED["SIGINT"])
    except Exception as e:
        # usage errors (typer's vendored click): show the message, exit with its code (2)
        if hasattr(e, "show") and hasattr(e, "exit_code"):
            e.show()
            sys.exit(e.exit_code)
        raise
    sys.exit(rv if isinstance(rv, int) else exit_codes.OK)
