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
