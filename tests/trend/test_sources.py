"""MRR from packet timestamps and latency series from paths files: values and bad input."""

from __future__ import annotations

import numpy as np
import pytest

from tracefmt import ParameterError, ParseError, SchemaError
from trend import mrr_from_timestamps, paths_results, trial_windows


def test_mrr_counts_half_open_windows_in_any_packet_order():
    rng = np.random.default_rng(9)
    ts = rng.integers(0, 3_000_000_000, 10_000)
    windows = trial_windows(0, 1_000_000_000, 3)
    want = [((ts >= s) & (ts < e)).sum() for s, e in windows]  # by definition, one window at a time
    assert mrr_from_timestamps(rng.permutation(ts), windows).tolist() == want
    gapped = trial_windows(500_000_000, 500_000_000, 2, gap_ns=1_000_000_000)
    assert gapped.tolist() == [[500_000_000, 1_000_000_000], [2_000_000_000, 2_500_000_000]]
    assert mrr_from_timestamps(ts, gapped).tolist() == [((ts >= s) & (ts < e)).sum() / 0.5 for s, e in gapped]


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: trial_windows(0, 0, 3), "duration must be positive"),
        (lambda: trial_windows(0, 10, 0), "trials must be an integer from 1 to 1,000,000, not 0"),
        (lambda: trial_windows(0, 10, 2, gap_ns=-1), "gap must not be negative"),
        (lambda: mrr_from_timestamps(np.array([1]), np.array([5, 10])), r"\(trials, 2\)"),
        (lambda: mrr_from_timestamps(np.array([1]), np.array([[10, 5]])), "end after it starts"),
    ],
    ids=["duration", "trials", "gap", "shape", "backwards"],
)
def test_bad_windows(call, message):
    with pytest.raises(ParameterError, match=message):
        call()


_NESTING = {"format": "wirepath.paths/1", "algorithm": "nesting"}
_PATTERN = {"id": "x", "count": 1, "total_latency_s": 0.5}
_VISIT = {"node": "A", "caller": "c", "children": []}


@pytest.mark.parametrize(
    ("doc", "error", "message"),
    [
        ({"format": "other"}, SchemaError, "not a paths file"),
        ({**_NESTING, "trace": {"end": 0}, "patterns": []}, ParseError, "no patterns or paths"),
        (
            {**_NESTING, "patterns": [{**_PATTERN, "root": {**_VISIT, "latency_s": {"mean": 0.5}}}]},
            ParameterError,
            "give the run's time",
        ),
        (
            {**_NESTING, "trace": {"end": 0}, "patterns": [{"id": "x", "root": {}}]},
            SchemaError,
            "pattern 0 needs",
        ),
        # Every reader of a visit takes its latency: a paths file without it is refused.
        (
            {**_NESTING, "trace": {"end": 0}, "patterns": [{**_PATTERN, "root": _VISIT}]},
            SchemaError,
            "needs latency_s",
        ),
    ],
    ids=["format", "empty", "no-time", "malformed", "no-latency"],
)
def test_bad_paths_documents(doc, error, message):
    with pytest.raises(error, match=message):
        paths_results(doc, build="1")
