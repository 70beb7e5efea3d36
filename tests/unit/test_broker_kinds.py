"""The broker-kind registry (`testbed.core.broker_kinds`): capabilities, not names.

Outside the adapters (`testbed/brokers/`), the backends (`testbed/backends/`) and the registry
itself, no code compares a broker-kind string: it asks the registry for the fact it needs. The
first test keeps it that way (it reads the syntax tree, so neither a comment nor a string that
merely mentions a kind trips it). The table below pins what the registry answers for each kind:
each row is a fact that replaced a name comparison and holds the answer that comparison gave,
so a fact flipped by mistake moves a kind onto another code path only with a test failing."""

from __future__ import annotations

import ast
import dataclasses
import itertools
import typing
from pathlib import Path

import pytest

from testbed.core import broker_kinds
from testbed.core.broker_kinds import (
    DEFAULT_KIND,
    KINDS,
    ClientName,
    KindFacts,
    KindName,
    client_mismatch,
    facts,
    kind_list,
    load,
)
from testbed.exceptions import ConfigurationError

ROOT = Path(__file__).resolve().parents[2]
EXEMPT = ("testbed/brokers/", "testbed/backends/", "testbed/core/broker_kinds.py")
"""Where kind strings may be compared: the per-broker code and the registry."""
NAMES = frozenset(KINDS) | {"rabbitmq", "activemq"}


def _constants(node: ast.expr) -> list[str]:
    """String constants of a comparison operand, inside a literal tuple, list or set too."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        return [c for elt in node.elts for c in _constants(elt)]
    return []


def kind_comparisons(source: str, filename: str = "<test>") -> list[str]:
    """``file:line: code`` for each comparison (or ``case``) with a broker-kind string."""
    found = []
    for node in ast.walk(ast.parse(source, filename)):
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
        elif isinstance(node, ast.MatchValue):
            operands = [node.value]
        else:
            continue
        if NAMES & {c for op in operands for c in _constants(op)}:
            found.append(f"{filename}:{node.lineno}: {ast.get_source_segment(source, node)}")
    return found


def test_the_checker_finds_every_form_of_comparison() -> None:
    code = (
        'a = k == "rabbitmq"\nb = "activemq" != k\nc = k in ("rabbitmq", "x")\n'
        'd = k not in {"activemq"}\ne = x < k == "activemq"\n'
        'match k:\n    case "rabbitmq":\n        pass\n'
        'ok = k == "amqp" or j in ("pika", "kombu") or k == KIND\nprint("rabbitmq")\n'
    )
    assert [f.split(":")[1] for f in kind_comparisons(code)] == ["1", "2", "3", "4", "5", "7"]


def test_no_kind_string_is_compared_outside_brokers_backends_and_the_registry() -> None:
    files = sorted(
        [*ROOT.joinpath("testbed").rglob("*.py"), *ROOT.joinpath("emulator").rglob("*.py")]
    )
    assert len(files) > 100  # the tree is where we think it is
    found = []
    for path in files:
        rel = path.relative_to(ROOT).as_posix()
        if not rel.startswith(EXEMPT):
            found += kind_comparisons(path.read_text(encoding="utf-8"), rel)
    assert not found, "ask testbed.core.broker_kinds for the fact instead:\n" + "\n".join(found)


# --- the facts table ----------------------------------------------------------------------------

TABLE: dict[str, tuple[object, object]] = {
    #                                 rabbitmq            activemq
    "title":                          ("RabbitMQ",        "ActiveMQ"),
    "protocol":                       ("AMQP 0-9-1",      "STOMP"),
    "default_client":                 ("pika",            "stomp"),  # scenario.py, calibrate.py
    "model":                          ("amqp",            "threads"),  # scenario.py
    "url_scheme":                     ("amqp",            "stomp"),  # cmd_brokers.py
    "alarms":                         (True,              False),  # injector.py, timeline.py
    "visibility":                     ("delay_queue",     "in_process"),  # topology, consumer
    "quorum_queues":                  (True,              False),  # scenario_checks.py
    "reserved_prefix":                ("amq.",            None),  # scenario_bounds.py
    "restart_s":                      (6.0,               1.5),  # availability.py
    "ack_loss_s":                     (0.01,              0.005),  # availability.py
    "acks_with_writes":               (True,              False),  # sim/ack_journal.py
    "wake_overlaps_routing":          (False,             True),   # sim/wake.py
    "follow_ups_together":            (False,             True),   # sim/consumers.py
    "kill_s":                         (0.019,             0.036),  # availability.py
    "stats_refresh_s":                (1.0,               0.0),  # sim/autoscale.py
    "prometheus_plugin":              (True,              False),  # prometheus.py
    "management_api":                 (True,              False),  # calibration/api.py
    "deletes_topology":               (True,              False),  # calibration/streams.py
    "calibration_queue_per_consumer": (False,             True),  # calibration/streams.py
    "high_watermark":                 (0.6,               1.0),  # calibration/assemble.py
    "warm_up":                        (0,                 30_000),  # backends/warm_up.py
    "transient_queues":               ("queue",           "topic"),  # workload/topology.py
    "mandatory":                      (True,              False),  # scenario_transient.py
}  # fmt: skip


def test_the_kinds_and_their_order() -> None:
    assert list(KINDS) == ["rabbitmq", "activemq"]
    assert typing.get_args(KindName) == tuple(KINDS)
    clients = [c for k in KINDS.values() for c in k.clients]
    assert typing.get_args(ClientName) == tuple(clients)  # every kind's, in order
    assert DEFAULT_KIND == "rabbitmq"
    fields = {f.name for f in dataclasses.fields(KindFacts)} - {
        "name",
        "clients",
        "no_alarms",
        "no_mandatory",
    }
    assert fields | {"default_client", "alarms", "mandatory"} == set(TABLE) | {
        "stats_poller",
        "local_version",
    }


@pytest.mark.parametrize("column, kind", list(enumerate(KINDS)))
def test_facts_are_the_pinned_ones(column: int, kind: str) -> None:
    k = facts(kind)
    claimed = {name: getattr(k, name) for name in TABLE}
    expected = {name: row[column] for name, row in TABLE.items()}
    assert claimed == expected


def test_clients_are_the_adapters_table() -> None:
    from testbed.brokers import CLIENTS, adapter_class

    assert CLIENTS == {
        "rabbitmq": {
            "pika": "testbed.brokers.rabbitmq:RabbitMQAdapter",
            "kombu": "testbed.brokers.kombu_rabbitmq:KombuRabbitMQAdapter",
        },
        "activemq": {"stomp": "testbed.brokers.activemq:ActiveMQAdapter"},
    }
    for kind, clients in CLIENTS.items():
        for client in clients:  # the registry's quorum fact agrees with each adapter's claim
            assert (
                adapter_class(kind, client).capabilities.quorum_queues == KINDS[kind].quorum_queues
            )


def test_client_mismatch_answers_the_old_comparisons() -> None:
    for kind, client in itertools.product(KINDS, ("pika", "kombu", "stomp")):
        old = (kind == "rabbitmq" and client == "stomp") or (
            kind == "activemq" and client in ("pika", "kombu")
        )
        assert (client_mismatch(kind, client) is not None) == old, (kind, client)
    assert client_mismatch("rabbitmq", "stomp") == (
        "client 'stomp' talks to ActiveMQ (STOMP); RabbitMQ uses 'pika' or 'kombu'"
    )
    assert client_mismatch("activemq", "kombu") == (
        "client 'kombu' talks to RabbitMQ (AMQP 0-9-1); ActiveMQ uses 'stomp'"
    )
    assert client_mismatch("nosuchkind", "pika") is None  # the schema reports the kind


def test_live_side_references_resolve() -> None:
    from testbed.backends.local_activemq import activemq_version
    from testbed.observe.stats import ActiveMQStatsPoller, RabbitMQStatsPoller

    assert load(KINDS["rabbitmq"].stats_poller) is RabbitMQStatsPoller
    assert load(KINDS["activemq"].stats_poller) is ActiveMQStatsPoller
    assert KINDS["rabbitmq"].local_version is None
    assert load(str(KINDS["activemq"].local_version)) is activemq_version
    for kind in KINDS.values():
        for target in kind.clients.values():
            assert isinstance(load(target), type)


def test_tables_derived_from_the_registry_keep_their_values() -> None:
    from testbed.calibration.assemble import HIGH_WATERMARK
    from testbed.cli.app import Broker, kinds
    from testbed.core.availability import RESTART_S
    from testbed.core.profile import DEFAULT_CLIENT

    assert RESTART_S == {"rabbitmq": 6.0, "activemq": 1.5}
    assert DEFAULT_CLIENT == {"rabbitmq": "pika", "activemq": "stomp"}
    assert HIGH_WATERMARK == {"rabbitmq": 0.6, "activemq": 1.0}
    assert typing.get_args(Broker) == ("rabbitmq", "activemq", "all")
    assert kinds("all") == ["rabbitmq", "activemq"] and kinds("activemq") == ["activemq"]


def test_fault_support_says_what_it_said() -> None:
    from types import SimpleNamespace

    from testbed.faults.injector import has_alarms, supported

    alarm = SimpleNamespace(kind="memory_alarm", target="broker")
    assert supported(alarm, "rabbitmq") is None
    assert supported(alarm, "activemq") == (
        "memory_alarm: not supported on activemq (ActiveMQ 5.17 reads its memory/store limits at "
        "start-up only); use a small broker.memory_limit to make producers block"
    )
    kill = SimpleNamespace(kind="broker_kill", target="broker")
    assert supported(kill, "activemq") is None
    assert (
        supported(kill, "qpid") == "broker kind 'qpid': unknown (expected 'rabbitmq' or 'activemq')"
    )
    assert (has_alarms("rabbitmq"), has_alarms("activemq"), has_alarms("qpid")) == (
        True,
        False,
        False,
    )


def test_unknown_kinds_and_double_registration_are_refused() -> None:
    with pytest.raises(
        ConfigurationError, match=r"'qpid': unknown \(expected 'rabbitmq' or 'activemq'\)"
    ):
        facts("qpid")
    assert kind_list() == "rabbitmq or activemq"
    with pytest.raises(ValueError, match="registered already"):
        broker_kinds.register(KINDS["rabbitmq"])
    with pytest.raises(ValueError, match="no client library"):
        broker_kinds.register(dataclasses.replace(KINDS["rabbitmq"], name="bare", clients={}))
    assert list(KINDS) == ["rabbitmq", "activemq"]


SCENARIO = """
name: facts
duration: 10s
broker: {{kind: {kind}}}
topology:
  queues:
    - {{name: amq.work, type: quorum, visibility: {{timeout: 1s}}}}
producers:
  - {{name: p, queue: amq.work, arrival: {{kind: constant, rate: 10/s}}}}
consumers:
  - {{name: c, queue: amq.work}}
"""


@pytest.mark.parametrize("kind", list(KINDS))
def test_scenarios_follow_the_facts(kind: str) -> None:
    from testbed.brokers.base import QueueDecl
    from testbed.core.scenario_loader import parse_scenario
    from testbed.workload.topology import declarations

    s, issues = parse_scenario(SCENARIO.format(kind=kind))
    errors = [str(i) for i in issues]
    quorum = [e for e in errors if "quorum queues exist only on RabbitMQ" in e]
    reserved = [e for e in errors if "names starting 'amq.' are reserved by RabbitMQ" in e]
    assert (bool(quorum), bool(reserved)) == (
        (False, True) if kind == "rabbitmq" else (True, False)
    )
    text = SCENARIO.replace("amq.work", "work").replace("type: quorum, ", "")
    s, issues = parse_scenario(text.format(kind=kind))
    assert s is not None, [str(i) for i in issues]
    assert (s.broker.client, s.broker.model) == (KINDS[kind].default_client, KINDS[kind].model)
    queues = [d.name for d in declarations(s) if isinstance(d, QueueDecl)]
    delay = [name for name in queues if name.endswith(".vt-delay")]
    assert delay == (["work.vt-delay"] if kind == "rabbitmq" else [])
