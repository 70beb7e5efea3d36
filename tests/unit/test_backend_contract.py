"""One backend contract (`testbed.backends.base.Backend`) that every backend implements, and
the owned-node lifecycle local and docker share (`testbed.backends.owned`), without a broker."""

from __future__ import annotations

import inspect
import os
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

from testbed.backends import state as state_mod
from testbed.backends.base import Backend, BrokerEndpoint
from testbed.backends.docker import DockerBackend
from testbed.backends.external import ExternalBackend
from testbed.backends.factory import BACKENDS, backend_for
from testbed.backends.local import LocalBackend
from testbed.backends.node_driver import NotHealthy
from testbed.backends.owned import OwnedBackend, check_up_args, node_params
from testbed.backends.provision import run_memory_mb
from testbed.backends.state import NodeRecord
from testbed.core.scenario import Scenario
from testbed.exceptions import BackendError, ConfigurationError, NotOwnedError

IMPLEMENTATIONS = [LocalBackend, DockerBackend, ExternalBackend]
CONTRACT = sorted(
    name
    for name, member in vars(Backend).items()
    if inspect.isfunction(member) and not name.startswith("_")
)
URL = "amqp://u:p@127.0.0.1:1/"
SCENARIOS = Path(__file__).resolve().parents[2] / "workloads" / "scenarios"


def test_the_contract_names_the_node_methods() -> None:
    names = ["up", "down", "endpoints", "stop_node", "kill_node", "pause_node", "resume_node",
             "restart_node", "is_healthy", "rabbitmqctl", "close"]  # fmt: skip
    assert sorted(names) == CONTRACT


def _compatible(want: inspect.Signature, have: inspect.Signature) -> list[str]:
    """Why a call that `want` allows could fail on `have` (names, kinds, defaults, types)."""
    problems: list[str] = []
    params = have.parameters
    for name, p in want.parameters.items():
        q = params.get(name)
        if q is None:
            problems.append(f"no parameter {name!r}")
            continue
        if q.kind != p.kind:
            problems.append(f"{name!r} is {q.kind.description}, not {p.kind.description}")
        if p.default is not p.empty and q.default is q.empty:
            problems.append(f"{name!r} has no default")
        if q.annotation != p.annotation:
            problems.append(f"{name!r} is {q.annotation}, not {p.annotation}")
    for name, q in params.items():
        if name not in want.parameters and q.default is q.empty:
            problems.append(f"extra required parameter {name!r}")
    if have.return_annotation != want.return_annotation:
        problems.append(f"returns {have.return_annotation}, not {want.return_annotation}")
    return problems


@pytest.mark.parametrize("cls", IMPLEMENTATIONS, ids=lambda c: c.__name__)
def test_every_backend_implements_every_method_of_the_contract(cls: type[Backend]) -> None:
    assert issubclass(cls, Backend)
    assert not inspect.isabstract(cls), cls.__abstractmethods__
    for name in CONTRACT:
        want = inspect.signature(getattr(Backend, name))
        have = inspect.signature(getattr(cls, name))
        assert not _compatible(want, have), (name, _compatible(want, have))


def test_the_signature_check_sees_an_incompatible_method() -> None:
    def up(self: Any, kinds: Sequence[str], nodes: int) -> list[BrokerEndpoint]:
        raise NotImplementedError

    problems = _compatible(inspect.signature(Backend.up), inspect.signature(up))
    assert problems and any("nodes" in p for p in problems)


@pytest.mark.parametrize("name", BACKENDS)
def test_the_factory_returns_a_backend_for_every_name(name: str, tmp_path: Path) -> None:
    home = tmp_path / "home"
    backend = backend_for(name, home, urls=[URL])  # nothing started, no engine contacted
    assert isinstance(backend, Backend)
    assert backend.endpoints() == ([] if name != "external" else backend.up(["rabbitmq"]))
    assert backend.down() == []
    assert not home.exists()


def test_the_factory_reads_external_urls_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MQBED_BROKER_URLS", URL)
    backend = backend_for("external", tmp_path)
    assert [e.name for e in backend.endpoints()] == ["external-rabbitmq0"]
    with pytest.raises(ConfigurationError, match="'nope'"):
        backend_for("nope", tmp_path)


def test_external_refuses_what_it_does_not_own() -> None:
    ext = ExternalBackend([URL])
    assert ext.home is None
    (ep,) = ext.up(["rabbitmq"], nodes=3, timeout=1.0, detach=False, memory_limit_mb=64)
    for call in (
        lambda: ext.kill_node(ep.name),
        lambda: ext.pause_node(ep.name),
        lambda: ext.resume_node(ep.name),
        lambda: ext.stop_node(ep.name),
        lambda: ext.restart_node(ep.name),
        lambda: ext.rabbitmqctl(ep.name, "status"),
    ):
        with pytest.raises(NotOwnedError, match="external broker"):
            call()
    with pytest.raises(BackendError, match="no external broker named"):
        ext.rabbitmqctl("rabbitmq0", "status")


@pytest.mark.parametrize("cls", [LocalBackend, DockerBackend], ids=lambda c: c.__name__)
def test_an_empty_home_has_no_testbed(
    cls: type[LocalBackend] | type[DockerBackend], tmp_path: Path
) -> None:
    backend = cls(tmp_path / "home")
    assert backend.endpoints() == []
    assert backend.down() == []
    word = "docker testbed" if cls is DockerBackend else "testbed running"
    with pytest.raises(BackendError, match=f"no {word} in"):
        backend.stop_node("rabbitmq0")
    assert not (tmp_path / "home").exists()  # no lock file made in a home without a testbed


# ------------------------------------------------------------------- the shared lifecycle


class _Fake(OwnedBackend):
    """An owned backend whose nodes run when their name is in `alive`; records what it did."""

    def __init__(self, home: Path) -> None:
        super().__init__(home, "fake-state.json")
        self.alive: set[str] = set()
        self.unhealthy: set[str] = set()
        self.released: list[str] = []
        self.discarded: list[str] = []
        self.downs = 0

    def _running(self, rec: NodeRecord) -> bool:
        return rec.name in self.alive

    def _probe(self, rec: NodeRecord, timeout: float) -> None:
        if rec.name in self.unhealthy:
            raise NotHealthy(f"{rec.name} does not answer")

    def _release(self, state: state_mod.TestbedState, recs: list[NodeRecord]) -> None:
        self.released += [r.name for r in recs]

    def _discard_stale(self, recs: list[NodeRecord]) -> None:
        self.discarded += [r.name for r in recs]

    def down(self, timeout: float = 30.0, *, keep_data: bool = False) -> list[str]:
        self.downs += 1
        self.state_path.unlink(missing_ok=True)
        return []

    def up(
        self,
        kinds: Sequence[str],
        *,
        nodes: int = 1,
        timeout: float = 60.0,
        detach: bool = True,
        memory_limit_mb: int | None = None,
    ) -> list[BrokerEndpoint]:
        raise NotImplementedError

    def endpoints(self) -> list[BrokerEndpoint]:
        return []

    def stop_node(self, name: str, timeout: float = 30.0) -> None: ...
    def kill_node(self, name: str) -> float | None: ...
    def pause_node(self, name: str) -> None: ...
    def resume_node(self, name: str) -> None: ...
    def restart_node(self, name: str, timeout: float = 60.0) -> BrokerEndpoint:
        raise NotImplementedError

    def rabbitmqctl(
        self, name: str, *args: str, timeout: float = 60.0
    ) -> subprocess.CompletedProcess[str]:
        raise NotImplementedError


def _record(name: str, *, mine: bool, node_dir: Path) -> NodeRecord:
    node_dir.mkdir(parents=True, exist_ok=True)
    return NodeRecord(
        name=name, kind="rabbitmq" if name.startswith("rabbitmq") else "activemq",
        node_dir=str(node_dir), ports={"amqp": 1}, username="u", password="p",
        detached=not mine, owner_pid=os.getpid() if mine else None,
    )  # fmt: skip


def _state(fake: _Fake, *names: str, mine: Sequence[str] = ()) -> state_mod.TestbedState:
    fake.home.mkdir(parents=True, exist_ok=True)
    nodes = [_record(n, mine=n in mine, node_dir=fake.home / "nodes" / n) for n in names]
    state = state_mod.TestbedState(state_mod.testbed_id(fake.home), str(fake.home), nodes)
    state.save(fake.state_path)
    return state


def test_stale_records_are_forgotten_and_a_partial_set_is_refused(tmp_path: Path) -> None:
    fake = _Fake(tmp_path)
    state = _state(fake, "rabbitmq0", "rabbitmq1", "activemq0")
    assert fake._reusable(state, "rabbitmq", 2) is False  # none runs: forgotten
    assert fake.discarded == ["rabbitmq0", "rabbitmq1"]
    assert [r.name for r in state.nodes] == ["activemq0"]
    fake.alive = {"activemq0"}
    assert fake._reusable(state, "activemq", 1) is True
    with pytest.raises(BackendError, match=r"1 of 1 activemq node\(s\) already running"):
        fake._reusable(state, "activemq", 2)


def test_healthy_is_running_and_answering(tmp_path: Path) -> None:
    fake = _Fake(tmp_path)
    _state(fake, "rabbitmq0", "activemq0")
    fake.alive, fake.unhealthy = {"rabbitmq0", "activemq0"}, {"activemq0"}
    assert fake.is_healthy("rabbitmq0") and not fake.is_healthy("activemq0")
    fake.alive = set()
    assert not fake.is_healthy("rabbitmq0")
    with pytest.raises(BackendError, match="no node named 'x'"):
        fake.is_healthy("x")


def test_forget_saves_what_is_left_and_removes_an_empty_state(tmp_path: Path) -> None:
    fake = _Fake(tmp_path)
    state = _state(fake, "rabbitmq0", "activemq0")
    fake._forget(state, [state.node("rabbitmq0")])
    left = state_mod.TestbedState.load(fake.state_path)
    assert left is not None and [r.name for r in left.nodes] == ["activemq0"]
    fake._forget(state, list(state.nodes))
    assert not fake.state_path.exists()


def test_exit_releases_only_the_nodes_this_process_owns(tmp_path: Path) -> None:
    fake = _Fake(tmp_path)
    _state(fake, "rabbitmq0", "activemq0", mine=["rabbitmq0"])
    fake._release_owned()
    left = state_mod.TestbedState.load(fake.state_path)
    assert fake.released == ["rabbitmq0"] and fake.downs == 0
    assert left is not None and [r.name for r in left.nodes] == ["activemq0"]
    _state(fake, "rabbitmq0", "activemq0", mine=["rabbitmq0", "activemq0"])
    fake._release_owned()  # all of them are ours: a full down
    assert fake.downs == 1 and not fake.state_path.exists()


def test_data_goes_and_logs_stay(tmp_path: Path) -> None:
    fake = _Fake(tmp_path)
    state = _state(fake, "rabbitmq0")
    node = Path(state.nodes[0].node_dir)
    for sub in ("data", "tmp", "log"):
        (node / sub).mkdir()
    fake._wipe_data(state)
    assert sorted(p.name for p in node.iterdir()) == ["log"]


def test_startup_seconds_are_kept_rounded(tmp_path: Path) -> None:
    fake = _Fake(tmp_path)
    rec = _record("rabbitmq0", mine=True, node_dir=tmp_path / "n")
    fake._record_startup(rec, 1.23456)
    assert rec.startup_seconds == fake.startup_seconds["rabbitmq0"] == 1.235


def test_up_arguments_are_checked_once_for_both() -> None:
    assert check_up_args("rabbitmq", 1, 1.0, None) == ["rabbitmq"]
    assert check_up_args(["activemq", "rabbitmq", "activemq"], 2, 1.0, 16) == [
        "activemq",
        "rabbitmq",
    ]
    for args, word in (
        ((["kafka"], 1, 1.0, None), "kafka"),
        (([], 1, 1.0, None), "at least one"),
        ((["rabbitmq"], 17, 1.0, None), "nodes"),
        ((["rabbitmq"], 1, 0.0, None), "timeout"),
        ((["rabbitmq"], 1, 1.0, 15), "memory_limit_mb"),
    ):
        with pytest.raises(ConfigurationError, match=word):
            check_up_args(*args)


def test_the_memory_formula() -> None:
    assert node_params("rabbitmq", "t", "rabbitmq0", None) == {
        "memory_limit_mb": None,
        "erlang_node": "mqbed-t-rabbitmq0@localhost",
    }
    assert node_params("rabbitmq", "t", "rabbitmq0", 300)["memory_limit_mb"] == 300
    amq = node_params("activemq", "t", "activemq1", None)
    assert amq == {"memory_limit_mb": 256, "heap_mb": 512, "broker_name": "mqbed-t-activemq1"}
    assert node_params("activemq", "t", "activemq1", 400)["heap_mb"] == 800


def test_a_run_brokers_memory_limit() -> None:
    def scenario(name: str, **broker: Any) -> Scenario:
        data = yaml.safe_load((SCENARIOS / f"{name}.yaml").read_text(encoding="utf-8"))
        data["broker"].update(broker)
        return Scenario.model_validate(data)

    assert run_memory_mb(scenario("quickstart")) is None  # RabbitMQ's relative default
    assert run_memory_mb(scenario("quickstart", memory_limit=128e6)) == 128
    assert run_memory_mb(scenario("activemq-quickstart")) == 256
    assert run_memory_mb(scenario("activemq-quickstart", memory_limit=10e6)) == 64
