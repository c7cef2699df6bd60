"""Patterns per time window (``--window``)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pytest

from infer import infer_nesting
from tracefmt import ParameterError, write_trace
from wirepath.cli import main

S = 1_000_000_000


def _trace() -> pa.Table:
    """0-10 s: c calls w alone, once a second; 10-20 s: w also calls d each time."""
    rows = []
    uid = 1
    for k in range(20):
        t = k * S
        rows.append((t, "c", "w", "call", uid))
        if k >= 10:
            rows.append((t + 1000, "w", "d", "call", uid + 1))
            rows.append((t + 2000, "d", "w", "return", uid + 1))
        rows.append((t + 3000, "w", "c", "return", uid))
        uid += 2
    rows.sort(key=lambda r: r[0])
    ts, s, r, op, i = zip(*rows, strict=True)
    return pa.table(
        {
            "timestamp": pa.array(ts, pa.timestamp("ns", tz="UTC")),
            "sender": list(s),
            "receiver": list(r),
            "op": list(op),
            "id": pa.array(i, pa.uint64()),
        }
    )


def test_windows_split_patterns_by_root_call_time() -> None:
    result = infer_nesting(_trace(), "paper")
    windows = result.windows(10.0)
    assert [(lo, hi) for lo, hi, _ in windows] == [(0, 10 * S), (10 * S, 20 * S)]
    first, second = ([(p.shape_text, p.count) for p in pats] for _, _, pats in windows)
    assert first == [("c>w", 10)]
    assert second == [("c>w(w>d)", 10)]


def test_window_counts_add_up_to_the_whole_trace() -> None:
    result = infer_nesting(_trace(), "paper")
    per_window: Counter[str] = Counter()
    for _, _, pats in result.windows(3.0):
        per_window.update({p.id: p.count for p in pats})
    assert per_window == Counter({p.id: p.count for p in result.patterns})


@pytest.mark.parametrize("bad", [0.0, -1.0, float("nan")], ids=["zero", "negative", "nan"])
def test_window_must_be_positive(bad: float) -> None:
    with pytest.raises(ParameterError, match="window must be a positive duration"):
        infer_nesting(_trace(), "paper").windows(bad)


def test_cli_window(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = tmp_path / "t.parquet"
    write_trace(_trace(), trace)
    out = tmp_path / "p.json"
    assert main(["infer", "nesting", str(trace), "--out", str(out), "--window", "10s"]) == 0
    doc = json.loads(out.read_text())
    assert doc["params"]["window_s"] == 10.0
    assert [w["instances"] for w in doc["windows"]] == [10, 10]
    assert [w["patterns"][0]["count"] for w in doc["windows"]] == [10, 10]
    assert "window 1970-01-01T00:00:10.000000000Z: 10 instances, 1 patterns" in capsys.readouterr().out
