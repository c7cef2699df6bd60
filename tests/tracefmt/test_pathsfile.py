"""The paths file's checks of convolution paths, and the hop delays every reader takes."""

from __future__ import annotations

import math

import pytest

from tracefmt import SchemaError, check_paths, hop_delays_s


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
