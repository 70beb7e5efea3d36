"""Sweep grid expansion: --set parsing, dotted/indexed paths, validation of every point."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from testbed.exceptions import ConfigurationError, ScenarioError
from testbed.report.sweep_page import numeric
from testbed.sweep import expand_grid, parse_path, parse_set, set_path, validate_points

ROOT = Path(__file__).resolve().parents[2]
QUICKSTART = ROOT / "workloads" / "scenarios" / "quickstart.yaml"


@pytest.mark.parametrize(
    ("text", "path", "values"),
    [
        ("producers[0].count=5:40:5", "producers[0].count", (5, 10, 15, 20, 25, 30, 35, 40)),
        ("producers[0].count=1:2:1", "producers[0].count", (1, 2)),
        ("x=0.5:1.5:0.5", "x", (0.5, 1.0, 1.5)),
        (
            "producers[0].arrival.rate=50/s:200/s:50/s",
            "producers[0].arrival.rate",
            ("50/s", "100/s", "150/s", "200/s"),
        ),
        (
            "consumers[0].service_time.mean=2ms:6ms:2ms",
            "consumers[0].service_time.mean",
            ("2ms", "4ms", "6ms"),
        ),
        ("consumers[workers].prefetch=1,10,100", "consumers[workers].prefetch", (1, 10, 100)),
        ("broker.kind=rabbitmq,activemq", "broker.kind", ("rabbitmq", "activemq")),
    ],
)
def test_parse_set(text: str, path: str, values: tuple[object, ...]) -> None:
    axis = parse_set(text)
    assert axis.path == path and axis.values == values


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("producers[0].count", "expected PATH="),
        ("a=5:1:1", "stop ≥ start"),
        ("a=1:5:0", "step > 0"),
        ("a=1:5", "three parts"),
        ("a=1ms:5s:1ms", "mixed units"),
        ("a=x:y:z", "needs numbers"),
        ("a..b=1", "cannot read"),
        ("a=0:5000:1", "max 1000"),
    ],
)
def test_parse_set_errors_name_the_set(text: str, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        parse_set(text)


def test_paths_index_lists_pick_named_items_and_create_mappings() -> None:
    data = {"producers": [{"name": "a", "count": 1}, {"name": "b", "count": 2}]}
    assert parse_path("producers[1].arrival.rate") == ["producers", 1, "arrival", "rate"]
    out = set_path(data, "producers[b].count", 7)
    assert out["producers"][1]["count"] == 7 and data["producers"][1]["count"] == 2
    out = set_path(data, "producers[0].arrival.rate", "5/s")
    assert out["producers"][0]["arrival"] == {"rate": "5/s"}
    assert set_path(data, "producers[-1]", {"name": "z"})["producers"][1] == {"name": "z"}
    with pytest.raises(ConfigurationError, match="out of range"):
        set_path(data, "producers[5].count", 1)
    with pytest.raises(ConfigurationError, match="no list item named 'c'"):
        set_path(data, "producers[c].count", 1)


def test_grid_is_the_cartesian_product_first_axis_slowest() -> None:
    data = yaml.safe_load(QUICKSTART.read_text())
    points = expand_grid(
        data, [parse_set("producers[0].count=1:2:1"), parse_set("consumers[0].count=1,3")]
    )
    assert [p.settings for p in points] == [
        {"producers[0].count": 1, "consumers[0].count": 1},
        {"producers[0].count": 1, "consumers[0].count": 3},
        {"producers[0].count": 2, "consumers[0].count": 1},
        {"producers[0].count": 2, "consumers[0].count": 3},
    ]
    assert points[3].data["consumers"][0]["count"] == 3
    texts = validate_points(QUICKSTART, points)
    assert [yaml.safe_load(t)["name"] for t in texts] == [
        "quickstart-p00",
        "quickstart-p01",
        "quickstart-p02",
        "quickstart-p03",
    ]


def test_every_invalid_point_is_reported_before_anything_runs() -> None:
    data = yaml.safe_load(QUICKSTART.read_text())
    points = expand_grid(data, [parse_set("consumers[0].prefetch=10,x,y")])
    with pytest.raises(ScenarioError) as err:
        validate_points(QUICKSTART, points)
    assert len(err.value.issues) == 2
    assert "consumers[0].prefetch=x" in str(err.value)


def test_numeric_reads_units() -> None:
    assert numeric(5) == 5.0
    assert numeric("100/s") == 100.0
    assert numeric("5ms") == pytest.approx(0.005)
    assert numeric("rabbitmq") is None and numeric(True) is None
