"""The clock-skew tolerance window, measured against ground truth."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

import synth
from infer import infer_nesting

MULTITIER = Path(__file__).resolve().parents[2] / "samples" / "synth" / "multitier.toml"


@pytest.fixture(scope="module")
def trace():
    config = replace(synth.load_config(MULTITIER), messages=20_000, parallelism=2.0, seed=3)
    return synth.generate_table(config)[0]


def _child_accuracy(trace, preset: str = "paper", **kw) -> float:
    result = infer_nesting(trace, preset, **kw)
    call = trace["true_call"].to_numpy().astype(np.int64)
    true_parent = trace["true_parent"].fill_null(np.uint64(2**64 - 1)).to_numpy().astype(np.int64)
    rows = result.pairs.call_row
    is_child = true_parent[rows] >= 0
    inferred = np.where(result.parent >= 0, call[rows][np.maximum(result.parent, 0)], -1)
    return float((inferred == true_parent[rows])[is_child].mean())


def test_tolerance_window_needs_densities(trace) -> None:
    # A 30 ms window lets many more calls compete, most of them long before the child.
    # With raw counts their long delays win (exponential bins grow with the delay);
    # scored as densities, most links stay right.
    exact = _child_accuracy(trace)
    raw = _child_accuracy(trace, tolerance_s=0.03)
    dense = _child_accuracy(trace, tolerance_s=0.03, density=True)
    assert exact > 0.9
    assert dense > 0.5
    assert dense > raw + 0.3


# --- the tolerance estimated from the trace ----------------------------------------------------


def _skewed_trace(skew_s: float):
    cfg = replace(synth.load_config(MULTITIER), messages=20_000, parallelism=2.0, seed=3)
    return synth.generate_table(replace(cfg, faults=replace(cfg.faults, skew={"WS2": (skew_s, 0.0)})))[0]


def _stamped(trace):
    from infer.callpairs import match_calls, node_codes
    from tracefmt import sort_trace, validate_trace

    t = sort_trace(validate_trace(trace))
    return match_calls(t, node_codes(t))


def test_no_skew_no_tolerance(trace) -> None:
    from infer.candidates import skew_tolerance

    assert skew_tolerance(_stamped(trace)) == (0.0, 0.0)
    r = infer_nesting(trace)
    assert r.trace_info["tolerance_s"] == 0.0


@pytest.mark.parametrize("skew_s", [0.005, 0.03])
def test_a_skewed_host_is_found_and_tolerated(skew_s: float) -> None:
    # WS2's clock runs ahead: its calls to AP stray outside the calls into WS2. The
    # estimate covers the skew (within about twice it), and the default then gets the parents
    # right that it loses without the window.
    from infer.candidates import skew_tolerance

    skewed = _skewed_trace(skew_s)
    tolerance, stray = skew_tolerance(_stamped(skewed))
    assert stray > 0.005
    assert skew_s <= tolerance <= skew_s * 2.5
    with_estimate = _child_accuracy(skewed, "accurate")
    without = _child_accuracy(skewed, "accurate", auto_tolerance=False)
    assert with_estimate > 0.9
    assert with_estimate > without + 0.05


def test_the_paper_preset_estimates_nothing() -> None:
    r = infer_nesting(_skewed_trace(0.03), "paper")
    assert r.trace_info["tolerance_s"] == 0.0
