"""Nesting presets (``infer.NestingParams``): their settings, how ``infer_nesting`` takes
them, the paths file's record of them (a run repeated from the file), the stages each
runs, and their accuracy against synth's ground truth."""

from __future__ import annotations

import itertools
import json
import warnings
from dataclasses import asdict, replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

import synth
from infer import PRESETS, NestingParams, infer_nesting, nesting_stages
from infer.callpairs import match_calls, node_codes
from infer.evaluate import true_pairs
from tracefmt import ParameterError, SchemaError, sort_trace, validate_trace

SAMPLES = Path(__file__).resolve().parents[2] / "samples" / "synth"
MS = 1_000_000

#: The 2003 scoreboard of Aguilera et al.: x=2, same_node_penalty=z=0, raw delay counts, one pass.
PAPER = {
    "overlap_penalty": 2.0,
    "same_node_penalty": 0.0,
    "children_penalty": 0.0,
    "bin_base": 1.05,
    "bin_min_s": 1e-6,
    "bin_max_s": 7200.0,
    "smooth_bins": 0.0,
    "tolerance_s": 0.0,
    "auto_tolerance": False,
    "use_ids": True,
    "use_keys": True,
    "calibrate_from": "twin",
    "density": False,
    "board": "delay",
    "rounds": 0,
    "siblings": 0,
    "chains": 0,
    "chain_min_gain": 3e-3,
    "request_rounds": 0,
    "request_window": 48,
    "request_tuples": 32,
    "calibrate": True,
}
#: The default: joint board with densities, two penalty rounds, one sibling round, up to
#: ten chain rounds, a clock-skew tolerance estimated from the trace.
ACCURATE = {
    **PAPER,
    "density": True,
    "board": "joint",
    "rounds": 2,
    "siblings": 1,
    "chains": 10,
    "auto_tolerance": True,
}
FAST = {**ACCURATE, "chains": 2}
#: The default and then up to three request rounds.
REQUESTS = {**ACCURATE, "request_rounds": 3}
EXPECTED = {"accurate": ACCURATE, "fast": FAST, "paper": PAPER, "requests": REQUESTS}


def tiny_trace(h) -> pa.Table:
    """Two requests A->B(B->C), one parent candidate per child."""
    return h.trace(
        [
            (0, "call", "A", "B", 1),
            (1 * MS, "call", "B", "C", 2),
            (2 * MS, "return", "C", "B", 2),
            (3 * MS, "return", "B", "A", 1),
            (10 * MS, "call", "A", "B", 3),
            (11 * MS, "call", "B", "C", 4),
            (13 * MS, "return", "C", "B", 4),
            (14 * MS, "return", "B", "A", 3),
        ]
    )


# --- the presets' settings ------------------------------------------------------------------


def test_preset_names_default_first() -> None:
    assert PRESETS == ("accurate", "fast", "paper", "requests")


@pytest.mark.parametrize("name", PRESETS)
def test_preset_settings_field_by_field(name: str) -> None:
    params = getattr(NestingParams, name)()
    assert asdict(params) == EXPECTED[name]
    assert NestingParams.preset(name) == params
    assert params.preset_name == name
    assert params.to_json() == {**EXPECTED[name], "preset": name}


def test_accurate_is_the_field_defaults() -> None:
    assert NestingParams.accurate() == NestingParams()
    assert NestingParams().preset_name == "accurate"


def test_fast_is_accurate_with_two_chain_rounds_at_most() -> None:
    assert NestingParams.fast() == replace(NestingParams(), chains=2)


def test_settings_that_match_no_preset_have_no_name() -> None:
    assert NestingParams.paper().with_overrides(overlap_penalty=1.0).preset_name is None
    assert NestingParams().with_overrides(chains=2).preset_name == "fast"
    assert NestingParams().with_overrides(request_rounds=3).preset_name == "requests"
    assert NestingParams().with_overrides(chains=0).preset_name is None


# --- how infer_nesting takes them -------------------------------------------------------------


def test_default_is_the_accurate_preset(parallel_trace) -> None:
    table, _ = parallel_trace
    r = infer_nesting(table)
    assert r.params == NestingParams()
    assert r.to_json()["params"]["preset"] == "accurate"
    assert np.array_equal(r.parent, infer_nesting(table, "accurate").parent)


def test_paper_by_name_by_object_and_by_fields(parallel_trace) -> None:
    table, _ = parallel_trace
    by_name = infer_nesting(table, "paper")
    by_object = infer_nesting(table, NestingParams.paper())
    # The default with the fields that make the paper's setting is the paper preset.
    by_fields = infer_nesting(
        table, board="delay", density=False, rounds=0, siblings=0, chains=0, auto_tolerance=False
    )
    for r in (by_name, by_object, by_fields):
        assert r.params == NestingParams.paper()
        assert r.to_json()["params"]["preset"] == "paper"
        assert np.array_equal(r.parent, by_name.parent)
    # The presets differ on this trace, or the checks above prove little.
    assert not np.array_equal(by_name.parent, infer_nesting(table).parent)


def test_overrides_replace_single_fields_of_the_preset(parallel_trace) -> None:
    table, _ = parallel_trace
    r = infer_nesting(table, "paper", overlap_penalty=1.0)
    assert asdict(r.params) == {**PAPER, "overlap_penalty": 1.0}
    assert r.to_json()["params"]["preset"] is None
    same = infer_nesting(table, NestingParams.paper(), overlap_penalty=1.0)
    assert same.params == r.params
    assert np.array_equal(same.parent, r.parent)
    assert np.array_equal(
        infer_nesting(table, NestingParams.paper().with_overrides(overlap_penalty=1.0)).parent, r.parent
    )


def test_unknown_preset_names_the_presets(h) -> None:
    message = r"unknown preset 'papr' \(must be one of accurate, fast, paper, requests\)"
    with pytest.raises(ParameterError, match=message):
        NestingParams.preset("papr")
    # Checked before the trace, which here has no calls at all.
    with pytest.raises(ParameterError, match=message):
        infer_nesting(h.trace([]), "papr")


@pytest.mark.parametrize("params", [None, "paper", NestingParams.fast()], ids=["default", "name", "object"])
def test_unknown_override_names_the_parameters(h, params) -> None:
    with pytest.raises(ParameterError, match="unknown nesting parameter 'chain'") as info:
        infer_nesting(tiny_trace(h), params, chain=3)
    for name in asdict(NestingParams()):
        assert name in str(info.value)


@pytest.mark.parametrize(
    "params",
    [{"overlap_penalty": 1.0}, 3, NestingParams.paper().to_json()],
    ids=["dict", "int", "params-json"],
)
def test_params_must_be_params_or_a_preset_name(h, params) -> None:
    with pytest.raises(ParameterError, match="NestingParams or a preset name"):
        infer_nesting(tiny_trace(h), params)


def test_bad_trace_still_raises_with_a_good_preset(h) -> None:
    with pytest.raises(SchemaError, match="convolution"):
        infer_nesting(h.trace([]), "fast")


# --- the paths file's record ------------------------------------------------------------------

ROUND_TRIPS = [
    *PRESETS,
    ("paper", {"overlap_penalty": 1.0, "chains": 3}),
    ("accurate", {"tolerance_s": 0.002, "use_ids": False, "chain_min_gain": 0.01}),
]


def _case_id(case) -> str:
    """``paper`` or ``paper+overlap_penalty=1.0+chains=3``."""
    name, overrides = (case, {}) if isinstance(case, str) else case
    return "+".join([name, *(f"{k}={v}" for k, v in overrides.items())])


def _params(case) -> NestingParams:
    name, overrides = (case, {}) if isinstance(case, str) else case
    return NestingParams.preset(name, **overrides)


@pytest.mark.parametrize("case", ROUND_TRIPS, ids=_case_id)
def test_to_json_round_trips(case) -> None:
    p = _params(case)
    doc = json.loads(json.dumps(p.to_json()))
    assert doc["preset"] == (case if isinstance(case, str) else None)
    assert NestingParams.from_json(doc) == p


def test_paths_file_params_rebuild_the_params(parallel_trace, tmp_path: Path) -> None:
    table, _ = parallel_trace
    r = infer_nesting(table, "fast", overlap_penalty=1.0, rounds=1)
    path = tmp_path / "paths.json"
    path.write_text(json.dumps(r.to_json(top=3, min_count=2, window_s=0.5)))
    params = NestingParams.from_json(json.loads(path.read_text())["params"])
    assert params == r.params
    assert np.array_equal(infer_nesting(table, params).parent, r.parent)


@pytest.mark.parametrize("case", [*PRESETS, ("fast", {"overlap_penalty": 1.0, "rounds": 1})], ids=_case_id)
def test_a_run_is_repeated_exactly_from_its_paths_file(parallel_trace, tmp_path: Path, case) -> None:
    table, _ = parallel_trace
    path = tmp_path / "paths.json"
    path.write_text(json.dumps(infer_nesting(table, _params(case)).to_json(min_count=2)))
    doc = json.loads(path.read_text())
    p = doc["params"]
    again = infer_nesting(table, NestingParams.from_json(p)).to_json(top=p["top"], min_count=p["min_count"])
    assert [(q["id"], q["count"]) for q in again["patterns"]] == [
        (q["id"], q["count"]) for q in doc["patterns"]
    ]
    assert json.loads(json.dumps(again)) == doc


#: ``params`` as paths files wrote them before presets existed (no ``preset`` key), and
#: before the penalty weights were named for what they weigh (the paper's x, y, z).
OLD_PARAMS = {
    "x": 2.0,
    "y": 0.0,
    "z": 0.0,
    "bin_base": 1.05,
    "bin_min_s": 1e-6,
    "bin_max_s": 7200.0,
    "smooth_bins": 0.0,
    "tolerance_s": 0.0,
    "use_ids": True,
    "density": False,
    "board": "delay",
    "rounds": 0,
    "siblings": 0,
    "chains": 0,
    "top": None,
    "min_count": 1,
}


def test_old_paths_file_params_get_the_papers_values() -> None:
    assert NestingParams.from_json(OLD_PARAMS) == NestingParams.paper()
    # An older file still, with fewer fields: the missing ones are the paper's, not the
    # default's (no densities, no rounds).
    older = {"x": 1.0, "board": "joint", "top": 10, "min_count": 1}
    assert asdict(NestingParams.from_json(older)) == {**PAPER, "overlap_penalty": 1.0, "board": "joint"}


@pytest.mark.parametrize(
    ("doc", "key"),
    [({**NestingParams().to_json(), "chain": 3}, "chain"), ({**OLD_PARAMS, "boards": "joint"}, "boards")],
    ids=["with-preset", "old"],
)
def test_from_json_rejects_unknown_keys(doc: dict[str, Any], key: str) -> None:
    with pytest.raises(ParameterError, match=f"unknown nesting parameter '{key}'"):
        NestingParams.from_json(doc)


def test_from_json_checks_the_values() -> None:
    with pytest.raises(ParameterError, match="chains"):
        NestingParams.from_json({**NestingParams().to_json(), "chains": -1})


# --- settings that do nothing -----------------------------------------------------------------


@pytest.mark.parametrize("name", PRESETS)
def test_presets_warn_about_nothing(h, name: str) -> None:
    assert getattr(NestingParams, name)().ineffective() == []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        infer_nesting(tiny_trace(h), name)
    assert [str(w.message) for w in caught] == []


@pytest.mark.parametrize(
    ("params", "notes"),
    [
        (
            NestingParams(overlap_penalty=0.0, rounds=3),
            ["rounds=3 does nothing without a penalty (a penalty weight > 0)"],
        ),
        (NestingParams(overlap_penalty=0.0, rounds=0), []),
        (NestingParams(overlap_penalty=0.0, same_node_penalty=1.0, rounds=3), []),
        (NestingParams(overlap_penalty=0.0, children_penalty=0.5, rounds=3), []),
        (
            NestingParams.fast().with_overrides(chains=0, chain_min_gain=0.01),
            ["chain_min_gain does nothing without chain rounds (chains > 0)"],
        ),
        (NestingParams().with_overrides(chain_min_gain=0.01), []),
    ],
    ids=["rounds-no-penalty", "no-rounds", "y", "z", "gain-no-chains", "gain-with-chains"],
)
def test_ineffective_settings(params: NestingParams, notes: list[str]) -> None:
    assert params.ineffective() == notes


def test_rounds_without_a_penalty_warn_and_change_nothing(parallel_trace) -> None:
    table, _ = parallel_trace
    with pytest.warns(UserWarning, match="does nothing") as caught:
        r = infer_nesting(
            table, "fast", overlap_penalty=0.0, same_node_penalty=0.0, children_penalty=0.0, rounds=3
        )
    assert [str(w.message) for w in caught] == [
        "rounds=3 does nothing without a penalty (a penalty weight > 0)"
    ]
    assert Path(caught[0].filename) == Path(__file__)  # the caller's line, not the library's
    assert "penalty round" not in [s["stage"] for s in r.to_json()["stats"]["stages"]]
    assert np.array_equal(r.parent, infer_nesting(table, "fast", overlap_penalty=0.0, rounds=0).parent)


# --- the stages in the paths file ---------------------------------------------------------------

STAGE_CASES = [
    *PRESETS,
    ("paper", {"chains": 3}),
    ("accurate", {"rounds": 1, "siblings": 0, "chains": 2}),
    ("paper", {"rounds": 2, "siblings": 1}),
]


@pytest.mark.parametrize("case", STAGE_CASES, ids=_case_id)
def test_stages_are_those_the_params_ask_for(parallel_trace, case) -> None:
    table, _ = parallel_trace
    p = _params(case)
    stats = infer_nesting(table, p).to_json()["stats"]
    stages = stats["stages"]
    assert all(set(s) == {"stage", "round", "moved", "log_likelihood"} for s in stages)
    run = stats.get("chain_rounds_run", 0)
    if p.chains:
        assert 1 <= run <= p.chains
    else:
        assert "chain_rounds_run" not in stats
    joint = stats.get("request_rounds_run", 0)
    if p.request_rounds:
        assert 1 <= joint <= p.request_rounds
    else:
        assert "request_rounds_run" not in stats
    want = [("first pass", 1)]
    want += [("penalty round", k) for k in range(1, p.rounds + 1)]
    want += [("sibling round", k) for k in range(1, p.siblings + 1)]
    want += [("chain round", k) for k in range(1, run + 1)]
    want += [("request round", k) for k in range(1, joint + 1)]
    assert [(s["stage"], s["round"]) for s in stages] == want
    assert stages[0]["moved"] == stats["call_pairs"]
    chain_ll = [s["log_likelihood"] for s in stages if s["stage"] == "chain round"]
    assert chain_ll == sorted(chain_ll)  # chain rounds only take moves that gain


def test_paper_runs_the_first_pass_only(parallel_trace) -> None:
    stats = infer_nesting(parallel_trace[0], "paper").to_json()["stats"]
    assert [s["stage"] for s in stats["stages"]] == ["first pass"]


def test_stages_in_the_paths_file_are_the_generators(parallel_trace) -> None:
    table, _ = parallel_trace
    r = infer_nesting(table)
    trace = sort_trace(validate_trace(table))
    nodes = node_codes(trace)
    stages = list(nesting_stages(match_calls(trace, nodes), len(nodes.names), NestingParams()))
    assert r.to_json()["stats"]["stages"] == [s.to_json() for s in stages]
    for before, after in itertools.pairwise(stages):
        assert after.moved == np.count_nonzero(after.parent != before.parent)
    assert np.array_equal(stages[-1].parent, r.parent)


# --- accuracy against synth's ground truth --------------------------------------------------------


def _workload(name: str) -> pa.Table:
    """A sample workload at 20,000 messages and parallelism 5 (seed 7), without its truth file."""
    cfg = synth.load_config(SAMPLES / f"{name}.toml")
    return synth.generate_table(replace(cfg, messages=20_000, parallelism=5.0, seed=7))[0]


def _accuracy(trace: pa.Table, result: Any) -> tuple[float, float]:
    """(share of child calls given their true parent, share of true instances inferred
    exactly: every call with its true parent and nothing else attached)."""
    pairs, parent, _, inst = true_pairs(trace)
    rows = pairs.call_row
    size = int(max(rows.max(), result.pairs.call_row.max())) + 1
    # Parents as call rows of the (sorted) trace, -1 for roots; -2: not inferred.
    true_row = np.where(parent >= 0, rows[np.maximum(parent, 0)], -1)
    got_row = np.full(size, -2)
    got_row[result.pairs.call_row] = np.where(
        result.parent >= 0, result.pairs.call_row[np.maximum(result.parent, 0)], -1
    )
    ok = got_row[rows] == true_row
    kid = parent >= 0
    calls = float(ok[kid].mean())
    ids, which, true_size = np.unique(inst, return_inverse=True, return_counts=True)
    wrong = np.bincount(which.ravel(), weights=~ok, minlength=ids.size)
    # The inferred instance rooted at each true root, and its size.
    root_rows, got_size = np.unique(result.pairs.call_row[result.instance], return_counts=True)
    at = np.minimum(np.searchsorted(root_rows, rows[~kid]), root_rows.size - 1)
    size_there = np.where(root_rows[at] == rows[~kid], got_size[at], -1)
    k = np.searchsorted(ids, inst[~kid])
    exact = (wrong[k] == 0) & (size_there == true_size[k])
    return calls, float(exact.mean())


@pytest.mark.parametrize(
    ("workload", "min_calls", "min_exact", "calls_gain", "exact_gain"),
    [
        # Measured (20,000 messages, parallelism 5, seed 7): paper 0.658 of child calls
        # with their true parent and 0.135 of instances exact; accurate 0.908 and 0.764.
        ("multitier-skewed", 0.88, 0.72, 0.20, 0.50),
        # Measured likewise: paper 0.678 and 0.051; accurate 0.838 and 0.545 (fast, not
        # tested here: 0.588 and 0.049, below the paper's share of calls).
        ("gateway-fanout", 0.81, 0.50, 0.12, 0.40),
        # B calls C twice at once (the paper's Figure 18 pathology). Measured likewise:
        # paper 0.551 and 0.096; accurate 0.815 and 0.684 (the goal: half the instances).
        ("children-parallel", 0.79, 0.62, 0.20, 0.50),
    ],
    ids=["multitier-skewed", "gateway-fanout", "children-parallel"],
)
def test_default_beats_the_paper_at_parallelism_5(
    workload: str, min_calls: float, min_exact: float, calls_gain: float, exact_gain: float
) -> None:
    trace = _workload(workload)
    paper_calls, paper_exact = _accuracy(trace, infer_nesting(trace, "paper"))
    calls, exact = _accuracy(trace, infer_nesting(trace))
    assert calls >= min_calls, (calls, exact)
    assert exact >= min_exact, (calls, exact)
    assert calls >= paper_calls + calls_gain, (paper_calls, calls)
    assert exact >= paper_exact + exact_gain, (paper_exact, exact)


def test_the_scorer_gives_the_true_parents_full_marks() -> None:
    trace = _workload("multitier-skewed")
    pairs, parent, _, _ = true_pairs(trace)
    instance = np.arange(parent.size)
    while np.any(parent[instance] >= 0):
        instance = np.where(parent[instance] >= 0, parent[instance], instance)
    truth = SimpleNamespace(pairs=pairs, parent=parent, instance=instance)
    assert _accuracy(trace, truth) == (1.0, 1.0)
