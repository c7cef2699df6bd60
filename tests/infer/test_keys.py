"""Request keys as evidence (infer.keys): scored against synth's ground truth, never
against the inference's own answers."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

import synth
from infer import infer_nesting
from infer.callpairs import match_calls, node_codes
from infer.keys import allowed, call_keys
from synth.keys import reveal_keys
from tracefmt import ParameterError, sort_trace, validate_trace
from tracefmt.pathsfile import check_paths

SAMPLES = Path(__file__).resolve().parents[2] / "samples" / "synth"


def _trace(name: str, messages: int, parallelism: float, seed: int = 3) -> pa.Table:
    cfg = synth.load_config(SAMPLES / name)
    return synth.generate_table(replace(cfg, messages=messages, parallelism=parallelism, seed=seed))[0]


@pytest.fixture(scope="module")
def busy() -> pa.Table:
    # Parallelism 40: without keys about 40% of the parents are right.
    return _trace("multitier.toml", 12_000, 40.0)


def _truth(trace: pa.Table, result) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per call pair of ``result``: its true request, whether its parent is the true one,
    and its inferred request (the root it hangs under)."""
    call = trace["true_call"].to_numpy()
    tparent = trace["true_parent"].to_numpy(zero_copy_only=False)
    inst = trace["true_instance"].to_numpy()
    rows = result.pairs.call_row
    by_call = {int(c): i for i, c in enumerate(call[rows])}
    want = np.array([-1 if np.isnan(p) else by_call[int(p)] for p in tparent[rows].astype(float)])
    right = result.parent == want
    root = np.arange(len(rows))
    for _ in range(16):  # up to the root: these workloads are a few calls deep
        root = np.where(result.parent[root] >= 0, result.parent[root], root)
    return inst[rows], right, root


def test_every_call_keyed_gets_every_parent_right_however_busy(busy: pa.Table) -> None:
    plain = infer_nesting(busy, calibrate=False)
    _, right_plain, _ = _truth(busy, plain)
    keyed = reveal_keys(busy)
    result = infer_nesting(keyed, calibrate=False)
    _, right, _ = _truth(keyed, result)
    assert right_plain.mean() < 0.6  # busy enough that time alone cannot tell
    assert right.all()
    assert result.to_json()["stats"]["keys"]["keyed"] == len(result.pairs)


def test_keys_on_a_share_of_calls_never_join_two_keys_and_help(busy: pa.Table) -> None:
    keyed = reveal_keys(busy, share=0.3, seed=5)
    plain = infer_nesting(busy, calibrate=False)
    result = infer_nesting(keyed, calibrate=False)
    _, right, root = _truth(keyed, result)
    _, right_plain, _ = _truth(busy, plain)
    key = np.array(keyed["trace_id"].to_pylist(), object)[result.pairs.call_row]
    has = np.flatnonzero([k is not None for k in key])
    # Every inferred request holds at most one key.
    per_root: dict[int, set[str]] = {}
    for r, k in zip(root[has].tolist(), key[has].tolist(), strict=True):
        per_root.setdefault(r, set()).add(k)
    assert max(len(v) for v in per_root.values()) == 1
    assert right.mean() > right_plain.mean() + 0.05


def test_a_proxy_that_stamps_its_calls_pins_them_only_with_keys_above() -> None:
    # The callee side keyed, the caller side too: each WS call is pinned to the one open
    # client visit of its own key.
    t = _trace("multitier.toml", 6_000, 30.0)
    keyed = reveal_keys(t, ["client", "WS1", "WS2"])
    result = infer_nesting(keyed, calibrate=False)
    _, right, _ = _truth(keyed, result)
    ws = np.isin(np.array(result.nodes)[result.pairs.caller], ["WS1", "WS2"])
    assert right[ws].all()
    stats = result.to_json()["stats"]["keys"]
    assert stats["pinned"] > 0
    assert stats["keyed_after_spreading"] > stats["keyed"]


def test_keys_off_is_the_keyless_answer(busy: pa.Table) -> None:
    keyed = reveal_keys(busy, share=0.5)
    off = infer_nesting(keyed, calibrate=False, use_keys=False)
    plain = infer_nesting(busy, calibrate=False)
    assert np.array_equal(off.parent, plain.parent)
    assert "keys" not in off.to_json()["stats"]


def test_the_paths_file_says_what_the_keys_decided(busy: pa.Table) -> None:
    keyed = reveal_keys(busy, ["WS1", "WS2"], column="request_id")
    doc = infer_nesting(keyed, calibrate=False).to_json()
    check_paths(doc, "paths")
    stats = doc["stats"]["keys"]
    calls = keyed.filter(pa.compute.equal(keyed["op"].cast(pa.string()), "call"))
    from_ws = int(
        pa.compute.sum(pa.compute.is_in(calls["sender"].cast(pa.string()), pa.array(["WS1", "WS2"]))).as_py()
    )
    assert stats["keyed"] == stats["keyed_by_request_id"] == from_ws


def test_pairs_sharing_either_key_are_one_request() -> None:
    # Pair 0 has trace a and request r; pair 1 request r only; pair 2 trace a only; pair 3 b.
    t = validate_trace(
        pa.table(
            {
                "timestamp": pa.array(range(8), pa.timestamp("ns", tz="UTC")),
                "sender": ["c", "w", "w", "w", "d", "d", "d", "w"],
                "receiver": ["w", "d", "d", "d", "w", "w", "w", "c"],
                "op": ["call", "call", "call", "call", "return", "return", "return", "return"],
                "id": pa.array([1, 2, 3, 4, 2, 3, 4, 1], pa.uint64()),
                "trace_id": ["a", None, "a", "b", None, None, None, None],
                "request_id": ["r", "r", None, None, None, None, None, None],
            }
        )
    )
    t = sort_trace(t)
    pairs = match_calls(t, node_codes(t))
    codes, kinds = call_keys(t, pairs)
    assert codes.tolist() == [0, 0, 0, 1]
    assert kinds == {"trace_id": 3, "request_id": 2}


def test_a_candidate_of_another_key_is_never_allowed() -> None:
    key = np.array([0, 1, -1, 0])
    strict = np.array([False, False, False, True])
    child = np.array([1, 2, 3, 3, 3])
    parent = np.array([0, 0, 0, 1, 2])
    assert allowed(key, strict, child, parent).tolist() == [False, True, True, False, False]


def test_reveal_keys_needs_the_truth_and_a_share_in_range(busy: pa.Table) -> None:
    with pytest.raises(ParameterError, match="true_instance"):
        reveal_keys(busy.drop_columns(["true_instance"]))
    with pytest.raises(ParameterError, match="share"):
        reveal_keys(busy, share=1.5)


def test_synth_keys_section_keys_the_chosen_callers(tmp_path: Path) -> None:
    text = (SAMPLES / "multitier.toml").read_text().replace("messages = 200000", "messages = 2000")
    cfg = synth.parse_config(text + '\n[keys]\ncallers = ["WS1"]\nshare = 0.5\n')
    t = synth.generate_table(cfg)[0]
    calls = t.filter(pa.compute.equal(t["op"].cast(pa.string()), "call"))
    keyed = calls.filter(pa.compute.is_valid(calls["trace_id"]))
    assert set(keyed["sender"].cast(pa.string()).to_pylist()) == {"WS1"}
    ws1 = int(pa.compute.sum(pa.compute.equal(calls["sender"].cast(pa.string()), "WS1")).as_py())
    assert 0.35 * ws1 < keyed.num_rows < 0.65 * ws1
    inst = keyed["true_instance"].to_pylist()
    assert keyed["trace_id"].to_pylist() == [f"{i:032x}" for i in inst]
    with pytest.raises(synth.ConfigError, match=r"keys\.column"):
        synth.parse_config(text + '\n[keys]\ncolumn = "span_id"\n')


@pytest.mark.parametrize(
    "reveal",
    [
        {"share": 0.6, "seed": 2},
        {"callers": ["client", "AP1", "AP2"]},  # every other hop: an unkeyed tier between
        {"callers": ["WS1", "WS2"]},  # a front proxy that stamps its calls
    ],
)
def test_parents_the_keys_decide_are_the_true_parents(busy: pa.Table, reveal: dict) -> None:
    from infer.keys import close_keys
    from infer.nesting import NestingParams, candidate_tolerance_s

    keyed = sort_trace(validate_trace(reveal_keys(busy, **reveal)))
    pairs = match_calls(keyed, node_codes(keyed))
    codes, kinds = call_keys(keyed, pairs)
    tol_ns = round(candidate_tolerance_s(pairs, NestingParams()) * 1e9)
    ev = close_keys(pairs, codes, tol_ns, kinds)
    from infer import true_parents

    truth = true_parents(pairs, keyed)
    known = np.flatnonzero(ev.known >= 0)
    if "share" in reveal:
        assert known.size > 500
    assert np.array_equal(ev.known[known], truth[known])
    # Spread keys are the true requests' keys.
    inst = keyed["true_instance"].to_numpy()[pairs.call_row]
    spread = np.flatnonzero((ev.key >= 0) & (codes < 0))
    assert spread.size > 0
    by_code = {int(k): int(i) for k, i in zip(codes[codes >= 0], inst[codes >= 0], strict=True)}
    assert all(by_code[int(ev.key[s])] == int(inst[s]) for s in spread)


def test_eval_truth_keys_reports_the_held_out_check(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from tracefmt import write_trace
    from wirepath.cli import main

    t = _trace("multitier.toml", 4_000, 5.0)
    write_trace(reveal_keys(t), tmp_path / "k.parquet")
    write_trace(t, tmp_path / "plain.parquet")
    assert main(["infer", "nesting", str(tmp_path / "k.parquet"), "--out", str(tmp_path / "k.json")]) == 0
    assert main(["infer", "nesting", str(tmp_path / "plain.parquet"), "--out", str(tmp_path / "p.json")]) == 0
    capsys.readouterr()
    assert main(["eval", str(tmp_path / "k.json"), "--truth", "keys", "--json"]) == 0
    import json

    report = json.loads(capsys.readouterr().out)
    calls = report["calls"]
    assert calls["held_out"] > 200
    assert 0 < calls["right"] <= calls["held_out"]
    assert main(["eval", str(tmp_path / "p.json"), "--truth", "keys"]) == 1
    assert "no held-out check of request keys" in capsys.readouterr().err
    assert main(["eval", str(tmp_path / "k.json")]) == 1
    assert "--truth keys" in capsys.readouterr().err


def test_a_front_proxy_that_stamps_its_calls_gives_its_visits_their_keys() -> None:
    from infer.keys import close_keys
    from infer.nesting import NestingParams, candidate_tolerance_s

    t = _trace("multitier.toml", 8_000, 10.0)
    keyed = sort_trace(validate_trace(reveal_keys(t, ["WS1", "WS2"])))
    pairs = match_calls(keyed, node_codes(keyed))
    codes, kinds = call_keys(keyed, pairs)
    tol_ns = round(candidate_tolerance_s(pairs, NestingParams()) * 1e9)
    ev = close_keys(pairs, codes, tol_ns, kinds)
    inst = keyed["true_instance"].to_numpy()[pairs.call_row]
    by_code = {int(k): int(i) for k, i in zip(codes[codes >= 0], inst[codes >= 0], strict=True)}
    names = np.array(node_codes(keyed).names)
    front = np.flatnonzero((names[pairs.caller] == "client") & (ev.key >= 0))
    # A good part of the client visits are told their request by the calls they make, all rightly.
    assert front.size > 0.25 * np.count_nonzero(names[pairs.caller] == "client")
    assert all(by_code[int(ev.key[v])] == int(inst[v]) for v in front)
    plain = infer_nesting(t, calibrate=False)
    result = infer_nesting(keyed, calibrate=False)
    _, right_plain, _ = _truth(t, plain)
    _, right, _ = _truth(keyed, result)
    assert right.mean() > right_plain.mean() + 0.04


def test_calibration_from_the_keys_is_learnt_on_held_out_calls(busy: pa.Table) -> None:
    keyed = reveal_keys(busy, share=0.5, seed=4)
    result = infer_nesting(keyed, calibrate_from="keys")
    doc = result.to_json()
    assert doc["stats"]["confidence"]["calibration"] == "keys"
    keys = doc["stats"]["keys"]
    assert keys["held_out_calls"] >= 200
    # The map's share right is the held-out calls' own.
    assert doc["stats"]["confidence"]["twin_right_rate"] == pytest.approx(
        keys["held_out_right"] / keys["held_out_calls"], abs=1e-6
    )
    twin = infer_nesting(keyed).to_json()["stats"]["confidence"]["calibration"]
    assert twin == "twin"


@pytest.mark.parametrize(
    ("keys", "said"),
    [
        ('callers = ["NOPE"]', r"keys.*unknown node 'NOPE'"),
        ("share = 1.5", r"keys.*share"),
        ("color = 1", r"keys.*unknown field"),
    ],
)
def test_synth_keys_section_refuses_what_it_cannot_do(keys: str, said: str) -> None:
    text = (SAMPLES / "multitier.toml").read_text()
    with pytest.raises(synth.ConfigError, match=said):
        synth.parse_config(text + f"\n[keys]\n{keys}\n")
