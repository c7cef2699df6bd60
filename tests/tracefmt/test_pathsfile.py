"""The paths file's checks of convolution paths, and the hop delays every reader takes."""

from __future__ import annotations

import json
import math

import pytest

from tracefmt import SchemaError, check_paths, hop_delays_s, write_paths


def _doc(**path: object) -> dict:
    base = {"nodes": ["c", "a", "b", "a"], "delays_s": [[0.002], [0.00004, 0.009]], "counts": [10, 10, 10]}
    return {"format": "wirepath.paths/1", "algorithm": "convolution", "paths": [{**base, **path}]}


def test_medians_are_optional_and_may_be_null() -> None:
    check_paths(_doc())
    check_paths(_doc(medians_s=[None, 0.004]))


@pytest.mark.parametrize(
    ("medians", "message"),
    [
        ([0.004], "len\\(nodes\\) - 2 = 2"),
        ("0.004", "len\\(nodes\\) - 2 = 2"),
        ([None, -0.001], "holds -0.001"),
        ([None, math.inf], "holds inf"),
        ([None, math.nan], "holds nan"),
        ([None, "4 ms"], "holds '4 ms'"),
        ([None, True], "holds True"),
    ],
)
def test_bad_medians_are_refused(medians: object, message: str) -> None:
    with pytest.raises(SchemaError, match=message):
        check_paths(_doc(medians_s=medians))


def test_a_hop_is_its_median_where_given_else_its_most_frequent_delay() -> None:
    assert hop_delays_s(_doc()["paths"][0]) == [0.002, 0.00004]
    assert hop_delays_s(_doc(medians_s=[None, 0.004])["paths"][0]) == [0.002, 0.004]
    assert hop_delays_s({"delays_s": [[], [0.1]]}) == [0.0, 0.1]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"counts": [10, -1, 10]}, "counts\\[1\\] is -1"),
        ({"counts": [10, math.nan, 10]}, "counts\\[1\\] is nan"),
        ({"counts": [10, "10", 10]}, "counts\\[1\\] is '10'"),
        ({"delays_s": [[0.002], [math.inf]]}, "delays_s\\[1\\] is \\[inf\\]"),
        ({"delays_s": [0.002, [0.001]]}, "delays_s\\[0\\] is 0.002"),
        ({"delays_s": [[-0.002], [0.001]]}, "delays_s\\[0\\] is \\[-0.002\\]"),
    ],
)
def test_bad_counts_and_delays_are_refused(change: dict, message: str) -> None:
    with pytest.raises(SchemaError, match=message):
        check_paths(_doc(**change))


def test_no_nan_or_infinity_is_written(tmp_path) -> None:
    # JSON has neither: a file holding them is one that other tools cannot read.
    doc = _doc()
    doc["stats"] = {"stages": [{"spread": [1.0, math.nan]}]}
    out = tmp_path / "p.json"
    with pytest.raises(
        SchemaError,
        match=r"the document.stats.stages\[0\].spread\[1\] is nan: a paths file holds only finite",
    ):
        write_paths(doc, out)
    assert not out.exists()
    doc["stats"] = {"stages": [{"spread": [1.0, None]}]}
    write_paths(doc, out)
    assert json.loads(out.read_text())["stats"]["stages"][0]["spread"] == [1.0, None]


def _nesting(**visit: object) -> dict:
    stats = {"mean": 0.001, "p50": 0.001, "p90": 0.001, "p99": 0.001, "std": 0.0}
    root = {"node": "web", "caller": "client", "latency_s": stats, "delay_s": None, "children": [], **visit}
    pattern = {"id": "p", "count": 1, "total_latency_s": 0.001, "root": root}
    return {"format": "wirepath.paths/1", "algorithm": "nesting", "patterns": [pattern]}


def test_a_visits_operations_statuses_and_errors_are_checked() -> None:
    check_paths(_nesting(ops=[{"op": "GET /a/:id", "share": 1.0}], status=[{"status": "503", "share": 0.1}]))
    check_paths(_nesting(errors=0.1))


@pytest.mark.parametrize(
    ("visit", "message"),
    [
        (
            {"ops": [{"op": "GET /", "share": 1.5}]},
            "'web''s ops must be a list of \\{op: text, share: 0 to 1\\}",
        ),
        ({"ops": "GET /"}, "ops must be a list of \\{op: text"),
        ({"ops": [{"op": 7, "share": 1.0}]}, "ops must be a list of \\{op: text"),
        ({"status": [{"status": 503, "share": 0.1}]}, "'web''s status must be a list of \\{status: text"),
        ({"status": [{"status": "503", "share": math.nan}]}, "status must be a list of \\{status: text"),
        ({"errors": 2}, "'web''s errors must be a share from 0 to 1, not 2"),
        ({"errors": "0.1"}, "errors must be a share from 0 to 1, not '0.1'"),
    ],
)
def test_bad_operations_statuses_and_errors_are_refused(visit: dict, message: str) -> None:
    with pytest.raises(SchemaError, match=message):
        check_paths(_nesting(**visit))


@pytest.mark.parametrize(
    "callers",
    [
        {"renamed": {"a -> a:80": "2"}, "kept": 0},
        {"renamed": [], "kept": 0},
        {"renamed": {}, "kept": None},
        {"renamed": {}, "kept": 0, "extra": 1},
    ],
)
def test_bad_caller_attributions_are_refused(callers: dict) -> None:
    doc = {**_nesting(), "stats": {"callers": callers}}
    with pytest.raises(SchemaError, match=r"stats\.callers must be an object: renamed"):
        check_paths(doc)
    check_paths({**_nesting(), "stats": {"callers": {"renamed": {"a -> a:80": 2}, "kept": 1}}})
