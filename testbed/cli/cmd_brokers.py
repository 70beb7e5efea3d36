"""`mqbed up` and `mqbed down`: brokers (and Prometheus) that outlive one command."""

from __future__ import annotations

__all__ = ["up", "down"]

import time
from pathlib import Path
from typing import Annotated, Any, Literal

import typer

from testbed.cli.app import Broker, HomeOpt, JsonOpt, app, err, kinds, out, testbed_home
from testbed.cli.output import json_output
from testbed.core.broker_kinds import KINDS


def _start(
    backend: str, names: list[str], root: Path, nodes: int, timeout: float, warm: bool
) -> tuple[list[Any], dict[str, Any]]:
    """The started (or reused) brokers' endpoints and the warm-ups of those started now."""
    from testbed.backends.factory import backend_for

    docker_host = None
    if backend == "docker":
        from testbed.backends.docker_engine import start_engine_for

        docker_host = start_engine_for(root)
    brokers = backend_for(backend, root, docker_host=docker_host, log=err.print)
    endpoints = brokers.up(names, nodes=nodes, timeout=timeout, detach=True, warm=warm)
    return endpoints, dict(getattr(brokers, "warmed", {}))


def _show(
    endpoints: list[Any],
    warmed: dict[str, Any],
    prometheus_url: str | None,
    root: Path,
    elapsed: float,
    show_credentials: bool = False,
    external: bool = False,
) -> None:
    """What `mqbed up` prints: each broker's URL with its password masked (a terminal's text
    ends up in CI logs) unless `show_credentials`; `--json` and the home's state file hold it.
    `external`: brokers mqbed did not start, and which it neither records nor stops."""
    for e in endpoints:
        scheme = KINDS[e.kind].url_scheme
        what = f"{e.kind} {e.version}" if e.version else e.kind
        who = "external" if external else f"pid {e.pid}"
        out.print(f"[bold]{e.name}[/] ({what}) {who}")
        w = warmed.get(e.name)
        if w is not None:
            out.print(
                f"  warmed up: {w.received} of {w.sent} messages in {w.seconds:.1f} s", markup=False
            )
        password = e.password if show_credentials else "***"
        out.print(f"  {scheme}://{e.username}:{password}@{e.host}:{e.port}", markup=False)
        if e.management_url:
            out.print(f"  management  {e.management_url}", markup=False)
        if e.prometheus_url:
            out.print(f"  prometheus  {e.prometheus_url}/metrics", markup=False)
    if prometheus_url:
        out.print(f"Prometheus  {prometheus_url} (scrapes runs started in {root})", markup=False)
    if external:
        out.print(f"reachable after {elapsed:.1f}s; external brokers: mqbed started none of "
                  "them, and 'mqbed down' leaves them running", markup=False)  # fmt: skip
    else:
        out.print(
            f"healthy after {elapsed:.1f}s; state in {root}; stop with 'mqbed down'", markup=False
        )


@app.command()
def up(
    backend: Annotated[
        Literal["local", "docker", "external"],
        typer.Option(help="local processes, docker containers, or external ($MQBED_BROKER_URLS)."),
    ] = "local",
    broker: Annotated[Broker, typer.Option(help="Broker kind(s) to start.")] = "all",
    nodes: Annotated[
        int, typer.Option(min=1, max=5, metavar="N", help="Nodes per broker kind (1-5).")
    ] = 1,
    timeout: Annotated[
        float, typer.Option(metavar="SECONDS", help="Seconds to wait for health.")
    ] = 60.0,
    with_prometheus: Annotated[
        bool,
        typer.Option(
            "--with-prometheus",
            help="Also start Prometheus (127.0.0.1) scraping the brokers and mqbed's exporters.",
        ),
    ] = False,
    warm_up: Annotated[
        bool,
        typer.Option(
            "--warm-up/--no-warm-up",
            help="Send a new ActiveMQ broker 30,000 messages through a scratch queue before it "
            "counts as ready: a fresh JVM delivers twice as slowly until its JIT compiler has "
            "seen the message path.",
        ),
    ] = True,
    show_credentials: Annotated[
        bool,
        typer.Option(
            "--show-credentials",
            help="Print the brokers' passwords in their URLs (masked as *** otherwise; --json "
            "always carries them, for scripts).",
        ),
    ] = False,
    home: HomeOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Start brokers, wait until healthy, print their URLs and write the state file."""
    names = kinds(broker)
    root = testbed_home(home)
    with json_output(as_json) as doc:
        t0 = time.monotonic()
        with err.status(f"starting {', '.join(names)} ({backend}) under {root} ..."):
            endpoints, warmed = _start(backend, names, root, nodes, timeout, warm_up)
            prometheus_url = None
            if with_prometheus:
                from testbed.observe.prometheus import PrometheusServer

                prometheus_url = PrometheusServer(root).start(endpoints)
        elapsed = time.monotonic() - t0
        doc.update(
            home=str(root),
            backend=backend,
            startup_s=round(elapsed, 2),
            brokers=[e.to_json() for e in endpoints],
            warm_up={name: vars(w) for name, w in warmed.items()},
            prometheus_url=prometheus_url,
        )
        if not as_json:
            _show(
                endpoints, warmed, prometheus_url, root, elapsed, show_credentials,
                external=backend == "external",
            )  # fmt: skip


@app.command()
def down(
    home: HomeOpt = None,
    timeout: Annotated[
        float, typer.Option(metavar="SECONDS", help="Seconds to wait for each stop.")
    ] = 30.0,
    as_json: JsonOpt = False,
) -> None:
    """Stop everything `mqbed up` started (read from the state files) and what killed runs left
    in the home's runs/ (their Locust processes, brokers and homes); leave no process behind."""
    from testbed.backends.docker import STATE_FILE as DOCKER_STATE
    from testbed.backends.docker_engine import reap_orphan_containers, stop_engine_for
    from testbed.backends.local import LocalBackend
    from testbed.backends.run_homes import reap_run_homes  # what killed runs left
    from testbed.observe.prometheus import PrometheusServer

    root = testbed_home(home)
    with json_output(as_json) as doc:
        doc["home"] = str(root)
        doc["stopped"] = stopped = LocalBackend(root).down(timeout=timeout)
        stopped += [f"{r} (killed run)" for r in reap_run_homes(root, timeout=timeout)]
        if (root / DOCKER_STATE).exists():  # containers of `up --backend docker`
            from testbed.backends.docker import DockerBackend

            removed = DockerBackend(root).down(timeout=timeout)  # on the engine they were made on
            stopped += [f"{n} (container)" for n in removed]
        # containers of killed runs or test sessions whose home is gone (no state names them)
        stopped += [f"{n} (orphaned container)" for n in reap_orphan_containers(timeout)]
        if PrometheusServer(root).stop(timeout):
            stopped.append("prometheus")
        if stop_engine_for(root):
            stopped.append("dockerd")
        if not as_json:
            out.print(
                f"stopped {len(stopped)}: {', '.join(stopped) or 'nothing was running'}",
                markup=False,
            )
