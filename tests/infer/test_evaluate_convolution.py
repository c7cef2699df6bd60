"""Scoring convolution paths files against the truth of synthetic traces.

True linear paths are recomputed here per instance in plain Python from the truth
columns; paths files are written by hand, so each score has a known right answer.
"""

from __future__ import annotations

import copy
import itertools
from collections import defaultdict
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

import infer
import synth
from tracefmt import ParameterError, SchemaError

MAIL_LIKE = """\
nodes = ["s1", "s2", "relay", "hub", "mx", "box"]
[trace]
seed = 4
messages = 6000
parallelism = 8
resolution_s = 1e-3
[[tracelet]]
kind = "messages"
client = ["s1", "s2"]
client_weights = [3, 1]
think_s = [1.0, 3.0]
[[tracelet.hop]]
to = "relay"
[[tracelet.hop]]
to = "hub"
delay_s = [0.2, 0.02]
[[tracelet.hop]]
to = "mx"
p = 0.8
delay_s = [0.5, 0.03]
[[tracelet.hop]]
to = "box"
delay_s = [0.1, 0.01]
"""

QUANTUM = 0.01


@pytest.fixture(scope="module")
def mail() -> pa.Table:
    return synth.generate_table(synth.parse_config(MAIL_LIKE))[0]


def _truth_by_hand(table: pa.Table) -> dict[tuple[str, ...], list[list[float]]]:
    """Node sequence -> per-instance hop delays, one instance at a time, by the parent chain."""
    rows = table.to_pylist()
    by_uid = {r["true_call"]: r for r in rows}
    per: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        per[r["true_instance"]].append(r)
    out: dict[tuple[str, ...], list[list[float]]] = defaultdict(list)
    for msgs in per.values():
        first = next(m for m in msgs if m["true_parent"] is None)
        chain = [first]
        children = {m["true_parent"]: m for m in msgs if m["true_parent"] is not None}
        while chain[-1]["true_call"] in children:
            chain.append(children[chain[-1]["true_call"]])
        assert len(chain) == len(msgs)
        assert all(by_uid[m["true_call"]] is m for m in chain)
        nodes = (str(chain[0]["sender"]), *(str(m["receiver"]) for m in chain))
        delays = [(b["timestamp"] - a["timestamp"]).total_seconds() for a, b in itertools.pairwise(chain)]
        out[nodes].append(delays)
    return out


def _paths_file(paths: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "format": "wirepath.paths/1",
        "algorithm": "convolution",
        "params": {"quantum_s": QUANTUM, "band_s": 0.0},
        "paths": paths,
    }


def _exact_paths(truth: dict[tuple[str, ...], list[list[float]]]) -> list[dict[str, Any]]:
    """The true paths as a convolution paths file would give them: root-to-leaf paths only
    (a path that ends where another goes on is that one's beginning), true median
    delays, and on every hop the messages of all instances whose path begins the same way."""
    through: dict[tuple[str, ...], int] = defaultdict(int)
    for nodes, delays in truth.items():
        for k in range(2, len(nodes) + 1):
            through[nodes[:k]] += len(delays)
    out = []
    for nodes, delays in truth.items():
        if any(len(o) > len(nodes) and o[: len(nodes)] == nodes for o in truth):
            continue
        d = np.array(delays)
        counts = [float(through[nodes[: k + 2]]) for k in range(len(nodes) - 1)]
        out.append(
            {
                "nodes": list(nodes),
                "delays_s": [[float(np.median(d[:, k]))] for k in range(d.shape[1])],
                "counts": counts,
                "count": counts[-1],
            }
        )
    return out


def test_true_linear_paths_match_a_hand_count(mail: pa.Table) -> None:
    truth = infer.true_linear_paths(mail)
    hand = _truth_by_hand(mail)
    assert set(truth.patterns) == set(hand)
    for nodes, delays in hand.items():
        got = truth.patterns[nodes]
        assert got.shape == (len(delays), len(nodes) - 2)
        np.testing.assert_allclose(np.sort(got, axis=0), np.sort(np.array(delays), axis=0), atol=1e-9)
    assert truth.broken_instances == 0


def test_exact_paths_score_perfectly(mail: pa.Table) -> None:
    truth = _truth_by_hand(mail)
    exact = _exact_paths(truth)
    assert len(exact) < len(truth)  # some paths end early
    report = infer.evaluate_paths(_paths_file(exact), mail)
    assert report["patterns"] == {
        "true": len(truth),
        "inferred": len(exact),
        "false_negatives": 0,
        "false_positives": 0,
        "false_positive_rate": 0.0,
        "partial": 0,
        "broken_instances": 0,
    }
    assert report["edges"]["false_positives"] == 0
    assert report["edges"]["false_negatives"] == 0
    assert report["messages"]["false_negatives"] == 0
    assert report["messages"]["false_positives"] == 0
    # Every hop of every true path, in context, counted once with its true median.
    hops = {nodes[: k + 3] for nodes in truth for k in range(len(nodes) - 2)}
    assert report["hops"]["true"] == len(hops) > 0
    assert report["hops"]["found"] == report["hops"]["near"] == len(hops)
    assert report["messages"]["true"] == mail.num_rows
    assert all(r["missing"] == 0 for r in report["top_n"])
    assert report["delay_error"]["median_rel"] < 0.05


def test_each_kind_of_error_is_counted(mail: pa.Table) -> None:
    truth = _truth_by_hand(mail)
    paths = _exact_paths(truth)
    longest = max(paths, key=lambda p: len(p["nodes"]))
    # 1. a missing path: it and the path that ends early on its way are not found
    report = infer.evaluate_paths(_paths_file([p for p in paths if p is not longest]), mail)
    early = sum(len(t) < len(longest["nodes"]) and tuple(longest["nodes"][: len(t)]) == t for t in truth)
    assert report["patterns"]["false_negatives"] == 1 + early
    # 2. a delay off by five quanta: that path is no longer found
    wrong = copy.deepcopy(paths)
    w = next(p for p in wrong if p["nodes"] == longest["nodes"])
    w["delays_s"][0] = [w["delays_s"][0][0] + 5 * QUANTUM]
    report = infer.evaluate_paths(_paths_file(wrong), mail)
    assert report["patterns"]["false_negatives"] >= 1
    # ... and its first hop is found but no longer near the truth's median
    assert report["hops"]["near"] == report["hops"]["found"] - 1
    # 3. an invented path: one false positive, and its new hops are wrong edges
    fake = {"nodes": ["s1", "relay", "box"], "delays_s": [[0.3]], "counts": [10.0, 10.0], "count": 10.0}
    report = infer.evaluate_paths(_paths_file([*paths, fake]), mail)
    assert report["patterns"]["false_positives"] == 1
    assert report["edges"]["false_positives"] == 1  # s1>relay>box (s1>relay is true)
    assert report["messages"]["false_positives"] == 10
    # 4. the beginning of a true path that no instance ends at: false positive and partial
    prefix = {"nodes": longest["nodes"][:2], "delays_s": [], "counts": [5.0], "count": 5.0}
    assert tuple(prefix["nodes"]) not in truth
    report = infer.evaluate_paths(_paths_file([*paths, prefix]), mail)
    assert report["patterns"]["partial"] == 1
    assert report["patterns"]["false_positives"] == 1


def test_inferred_paths_on_a_mail_like_trace(mail: pa.Table) -> None:
    r = infer.infer_convolution(mail, quantum_s=QUANTUM, max_lag_s=2.0, band_s=0.02)
    report = infer.evaluate_paths(r.to_json(), mail)
    # Every frequent true path (the 10% ones included) is found, with its delays.
    assert report["patterns"]["false_negatives"] == 0
    assert report["patterns"]["false_positives"] == 0
    assert report["delay_error"]["median_rel"] < 0.05


def test_bad_inputs(mail: pa.Table) -> None:
    doc = _paths_file([])
    with pytest.raises(ParameterError, match="instances"):
        infer.evaluate_paths(doc, mail, instances=pa.table({"x": [1]}))
    with pytest.raises(SchemaError, match="no ground truth"):
        infer.evaluate_paths(doc, mail.drop_columns(["true_call"]))
    empty = infer.evaluate_paths(doc, mail)
    assert empty["patterns"]["inferred"] == 0
    assert empty["patterns"]["false_negatives"] == empty["patterns"]["true"]


def test_rare_true_paths_can_be_left_out(mail: pa.Table) -> None:
    truth = _truth_by_hand(mail)
    floor = sorted(len(v) for v in truth.values())[len(truth) // 2]
    frequent = {k for k, v in truth.items() if len(v) >= floor}
    report = infer.evaluate_convolution(_paths_file([]), mail, min_true_count=floor)
    assert report["patterns"]["true"] == len(frequent)
    assert report["patterns"]["false_negatives"] == len(frequent)
    report = infer.evaluate_convolution(_paths_file(_exact_paths(truth)), mail, min_true_count=floor)
    assert report["patterns"]["false_negatives"] == 0
    assert report["patterns"]["false_positives"] == 0
