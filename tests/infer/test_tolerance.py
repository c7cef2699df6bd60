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


def _child_accuracy(trace, **kw) -> float:
    result = infer_nesting(trace, "paper", **kw)
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
