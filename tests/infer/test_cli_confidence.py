"""Confidence on the command line: ``wirepath infer nesting`` and ``wirepath eval``.

What is tested, each against numbers recomputed here from the files written (the
instances table, and the trace's ground-truth columns from ``wirepath synth``):

* every pattern of the paths file states ``confidence``, the mean over its instances of
  the product of their calls' confidences; ``stats.confidence`` says how it was
  calibrated (``twin`` by default, ``none`` with ``--no-calibrate``, which changes the
  confidences only, never a parent);
* the instances table has ``confidence`` per call (1 for roots) and
  ``pattern_confidence`` per row;
* ``--min-confidence P`` leaves out exactly the instances holding a link below P (from
  both outputs, the rest untouched), says how many on one line and in
  ``stats.min_confidence``; an out-of-range P is a usage error;
* ``--show`` prints each pattern's share exactly right;
* ``wirepath eval --instances`` reports the expected calibration error (ECE, 10 equal
  bins) of calls and instances and the reliability table, as computed here from the
  truth.
"""

from __future__ import annotations

import contextlib
import io
import itertools
import json
import re
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from wirepath.cli import main

MULTITIER = Path(__file__).resolve().parents[2] / "samples" / "synth" / "multitier.toml"
MIN_P = 0.8  # the threshold of the filtered run
SHOW = 4


def cli(argv: Sequence[object]) -> tuple[int, str, str]:
    """Run ``wirepath ARGV`` in-process; returns (status, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main([str(a) for a in argv])
    return rc, out.getvalue(), err.getvalue()


@dataclass
class Infer:
    """One ``infer nesting`` run: its files and what it printed."""

    paths: Path
    inst: Path
    out: str

    @property
    def doc(self) -> dict[str, Any]:
        return json.loads(self.paths.read_text())

    @property
    def table(self) -> pa.Table:
        return pq.read_table(self.inst)


@dataclass
class Run:
    trace: Path
    base: Infer  # default settings (calibrated)
    filtered: Infer  # --min-confidence MIN_P
    uncalibrated: Infer  # --no-calibrate
    certain: Infer  # --min-confidence 1


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    """A busy multitier trace (20,000 messages, parallelism 5: a fair share of doubtful
    parents), inferred four ways."""
    d = tmp_path_factory.mktemp("cli_confidence")
    trace = d / "t.parquet"
    rc, _, err = cli(
        ["synth", MULTITIER, "--messages", 20000, "--parallelism", 5, "--seed", 7, "--out", trace]
    )
    assert rc == 0, err

    def infer(name: str, *extra: object) -> Infer:
        paths, inst = d / f"{name}.json", d / f"{name}.parquet"
        argv = ["infer", "nesting", trace, "--out", paths, "--instances", inst, "--show", SHOW, *extra]
        rc, out, err = cli(argv)
        assert rc == 0, err
        return Infer(paths, inst, out)

    return Run(
        trace=trace,
        base=infer("base"),
        filtered=infer("filtered", "--min-confidence", MIN_P),
        uncalibrated=infer("uncalibrated", "--no-calibrate"),
        certain=infer("certain", "--min-confidence", 1),
    )


# --- computed here from the instances table and the truth --------------------------------


def linked(table: pa.Table) -> np.ndarray:
    """Which rows are links: calls given a parent."""
    return table["parent"].is_valid().to_numpy(zero_copy_only=False)


def strings(col: pa.ChunkedArray) -> np.ndarray:
    return np.asarray(col.cast(pa.string()).to_pylist(), dtype=object)


def confidence_product(table: pa.Table) -> dict[int, float]:
    """Per instance: the product of its calls' confidences."""
    prod: dict[int, float] = defaultdict(lambda: 1.0)
    for i, c in zip(table["instance"].to_pylist(), table["confidence"].to_pylist(), strict=True):
        prod[i] *= c
    return dict(prod)


def instance_confidence(table: pa.Table) -> dict[int, float]:
    """Per instance: the stated probability that it is exactly right (the table's
    ``instance_confidence``), checked to be the same on every row of the instance and a
    non-decreasing function of the product of its calls' confidences."""
    stated: dict[int, float] = {}
    for i, c in zip(table["instance"].to_pylist(), table["instance_confidence"].to_pylist(), strict=True):
        assert stated.setdefault(i, c) == c, f"instance {i} states two confidences"
    prod = confidence_product(table)
    order = sorted(prod, key=lambda i: prod[i])
    values = [stated[i] for i in order]
    assert all(a <= b + 1e-12 for a, b in itertools.pairwise(values)), "not monotone in the product"
    return stated


def instance_pattern(table: pa.Table) -> dict[int, str]:
    """Per instance: its pattern id (every row of an instance names the same one)."""
    out: dict[int, str] = {}
    for i, p in zip(table["instance"].to_pylist(), strings(table["pattern"]).tolist(), strict=True):
        assert out.setdefault(i, p) == p, f"instance {i} has rows of two patterns"
    return out


def pattern_confidence(table: pa.Table) -> dict[str, tuple[int, float]]:
    """Per pattern: its instances and the mean over them of their stated confidences."""
    prod, pat = instance_confidence(table), instance_pattern(table)
    groups: dict[str, list[float]] = defaultdict(list)
    for i, p in pat.items():
        groups[p].append(prod[i])
    return {p: (len(v), float(np.mean(v))) for p, v in groups.items()}


def doubtful(table: pa.Table, p: float) -> tuple[set[int], int]:
    """The instances holding a link of confidence below ``p``, and those links."""
    low = linked(table) & (table["confidence"].to_numpy() < p)
    return set(table["instance"].to_numpy()[low].tolist()), int(low.sum())


def links_by_call_row(table: pa.Table) -> dict[int, tuple[int, int, float, str]]:
    """Per call (by its row in the trace): the parent's call row (-1 for a root), the
    root's call row, the confidence and the pattern, independent of pair numbering."""
    pair = table["pair"].to_numpy()
    assert np.array_equal(pair, np.arange(pair.size)), "pairs are numbered 0..n-1"
    row = table["call_row"].to_numpy()
    parent = table["parent"].fill_null(-1).to_numpy()
    inst = table["instance"].to_numpy()
    conf = table["confidence"].to_numpy()
    pat = strings(table["pattern"])
    return {
        int(row[k]): (
            int(row[parent[k]]) if parent[k] >= 0 else -1,
            int(row[inst[k]]),
            float(conf[k]),
            pat[k],
        )
        for k in range(pair.size)
    }


@dataclass
class Verdicts:
    """Truth-based verdicts for the rows of an instances table."""

    link_right: np.ndarray  # per row: the parent (or being a root) is the true one
    inst_stated: np.ndarray  # per inferred instance: its stated confidence
    inst_exact: np.ndarray  # per inferred instance: exactly one whole true request


def verdicts(table: pa.Table, trace: Path) -> Verdicts:
    t = pq.read_table(trace, columns=["op", "true_call", "true_parent", "true_instance"])
    uid = t["true_call"].cast(pa.int64()).to_numpy()
    tpar = t["true_parent"].cast(pa.int64()).fill_null(-1).to_numpy()
    tinst = t["true_instance"].cast(pa.int64()).to_numpy()
    is_call = pc.equal(t["op"].cast(pa.string()), "call").to_numpy(zero_copy_only=False)
    row = table["call_row"].to_numpy()
    # Ids make call/return matching exact here: the definitions below need only parents.
    assert is_call[row].all()
    assert np.array_equal(uid[table["return_row"].to_numpy()], uid[row])
    parent = table["parent"].fill_null(-1).to_numpy()
    parent_uid = np.where(parent >= 0, uid[row[np.maximum(parent, 0)]], -1)
    right = parent_uid == tpar[row]
    true_size: defaultdict[int, int] = defaultdict(int)
    for i in tinst[is_call].tolist():
        true_size[i] += 1
    members: dict[int, list[int]] = defaultdict(list)
    for k, i in enumerate(table["instance"].to_pylist()):
        members[i].append(k)
    per_instance = instance_confidence(table)
    stated: list[float] = []
    exact: list[bool] = []
    for inst, rows in members.items():
        r = np.array(rows)
        whole = len(set(tinst[row[r]].tolist())) == 1 and true_size[int(tinst[row[r[0]]])] == r.size
        exact.append(bool(whole and right[r].all()))
        stated.append(per_instance[inst])
    return Verdicts(right, np.array(stated), np.array(exact))


def ece(conf: np.ndarray, right: np.ndarray, bins: int = 10) -> float:
    """Expected calibration error over ``bins`` equal-width bins of stated confidence."""
    b = np.minimum(np.floor(conf * bins).astype(np.int64), bins - 1)
    gap = 0.0
    for k in range(bins):
        m = b == k
        if m.any():
            gap += m.sum() * abs(conf[m].mean() - right[m].mean())
    return gap / conf.size


def bin_rows(conf: np.ndarray, right: np.ndarray, bins: int = 10) -> list[dict[str, Any]]:
    b = np.minimum(np.floor(conf * bins).astype(np.int64), bins - 1)
    return [
        {
            "low": k / bins,
            "high": (k + 1) / bins,
            "calls": int((b == k).sum()),
            "stated": float(conf[b == k].mean()),
            "right_rate": float(right[b == k].mean()),
        }
        for k in range(bins)
        if (b == k).any()
    ]


def same_bins(got: list[dict[str, Any]], want: list[dict[str, Any]]) -> None:
    """Two reliability tables agree: the same bins, counts and rates (to 1e-9)."""
    assert len(got) == len(want), (got, want)
    for g, w in zip(got, want, strict=True):
        assert set(g) == set(w)
        assert g["calls"] == w["calls"]
        assert {k: g[k] for k in w if k != "calls"} == pytest.approx(
            {k: w[k] for k in w if k != "calls"}, abs=1e-9
        )


def eval_json(run: Run, which: Infer) -> dict[str, Any]:
    rc, out, err = cli(["eval", which.paths, run.trace, "--instances", which.inst, "--json"])
    assert rc == 0, err
    return json.loads(out)


# --- infer nesting -------------------------------------------------------------------------


def test_paths_file_states_each_patterns_confidence(run: Run) -> None:
    doc = run.base.doc
    stats = doc["stats"]["confidence"]
    assert set(stats) == {
        "calibration",
        "twin_pairs",
        "twin_right_rate",
        "second_twin_right_rate",
        "optimism",
    }
    assert stats["calibration"] == "twin"
    # The default's twin is corrected by the likelihood gap, not by a twin of the twin.
    assert stats["second_twin_right_rate"] is None
    assert isinstance(stats["optimism"], float)
    assert isinstance(stats["twin_pairs"], int)
    assert stats["twin_pairs"] > 0
    assert 0.0 <= stats["twin_right_rate"] <= 1.0
    assert "min_confidence" not in doc["stats"]
    assert doc["patterns"]
    for p in doc["patterns"]:
        assert isinstance(p["confidence"], float | int)
        assert 0.0 <= p["confidence"] <= 1.0
    # The trace is busy enough for doubt: not every pattern is certain.
    assert min(p["confidence"] for p in doc["patterns"]) < MIN_P


def test_instances_table_has_call_and_pattern_confidence(run: Run) -> None:
    t, doc = run.base.table, run.base.doc
    assert {"confidence", "pattern_confidence"} <= set(t.column_names)
    assert t["confidence"].type == pa.float64()
    assert t["pattern_confidence"].type == pa.float64()
    conf, has = t["confidence"].to_numpy(), linked(t)
    assert np.all(conf[~has] == 1.0), "roots have confidence 1"
    assert np.all((conf[has] > 0.0) & (conf[has] <= 1.0))
    assert np.any(conf[has] < 1.0)
    stated = {p["id"]: p["confidence"] for p in doc["patterns"]}
    for pid, pconf in zip(strings(t["pattern"]).tolist(), t["pattern_confidence"].to_pylist(), strict=True):
        assert pconf == pytest.approx(stated[pid], abs=1e-6)


@pytest.mark.parametrize("which", ["base", "filtered", "uncalibrated"])
def test_pattern_confidence_is_the_mean_product_over_its_instances(run: Run, which: str) -> None:
    result: Infer = getattr(run, which)
    doc = result.doc
    mine = pattern_confidence(result.table)
    assert {p["id"] for p in doc["patterns"]} == set(mine)
    for p in doc["patterns"]:
        count, conf = mine[p["id"]]
        assert p["count"] == count
        assert p["confidence"] == pytest.approx(conf, abs=1e-6), p["id"]


def test_min_confidence_leaves_out_exactly_the_doubtful_instances(run: Run) -> None:
    base, kept = run.base.table, run.filtered.table
    conf = kept["confidence"].to_numpy()
    assert np.all(conf[linked(kept)] >= MIN_P)
    low, links = doubtful(base, MIN_P)
    assert low, "the threshold leaves something out"
    n_base = len(set(base["instance"].to_pylist()))
    n_kept = len(set(kept["instance"].to_pylist()))
    assert n_kept == n_base - len(low)
    # The calls kept are those of the other instances, with the same parents,
    # confidences and patterns.
    before, after = links_by_call_row(base), links_by_call_row(kept)
    low_roots = {int(base["call_row"][i].as_py()) for i in low}
    expected = {r: v for r, v in before.items() if v[1] not in low_roots}
    assert after == expected
    # The paths file is of the kept instances only.
    doc = run.filtered.doc
    assert doc["stats"]["instances"] == n_kept
    assert doc["stats"]["call_pairs"] == kept.num_rows
    assert doc["stats"]["patterns"] == len(doc["patterns"]) == len(set(strings(kept["pattern"]).tolist()))
    assert doc["stats"]["min_confidence"] == {
        "min": MIN_P,
        "instances_left_out": len(low),
        "call_pairs_left_out": base.num_rows - kept.num_rows,
        "links_below": links,
    }
    # ... and the patterns left with nothing are gone.
    kept_ids = {p["id"] for p in doc["patterns"]}
    all_ids = {p["id"] for p in run.base.doc["patterns"]}
    assert kept_ids <= all_ids
    for p in run.base.doc["patterns"]:
        whole = {i for i, pid in instance_pattern(base).items() if pid == p["id"]}
        assert (p["id"] in kept_ids) == bool(whole - low)


def test_min_confidence_says_what_it_left_out(run: Run) -> None:
    low, links = doubtful(run.base.table, MIN_P)
    pairs = run.base.table.num_rows - run.filtered.table.num_rows
    lines = run.filtered.out.splitlines()
    expected = (
        f"left out {len(low):,} instances ({pairs:,} call pairs) holding {links:,} links of confidence "
        f"below {MIN_P:g}"
    )
    assert expected in lines
    assert not any(line.startswith("left out") for line in run.base.out.splitlines())


def test_min_confidence_one_keeps_only_certain_instances(run: Run) -> None:
    t = run.certain.table
    assert np.all(t["confidence"].to_numpy() == 1.0)
    low, links = doubtful(run.base.table, 1.0)
    n_base = len(set(run.base.table["instance"].to_pylist()))
    assert len(set(t["instance"].to_pylist())) == n_base - len(low)
    assert run.certain.doc["stats"]["min_confidence"]["links_below"] == links
    # Every instance left is all certain links: the same stated confidence for all.
    assert len({p["confidence"] for p in run.certain.doc["patterns"]}) == 1


def test_without_calibration_an_instance_states_the_product(run: Run) -> None:
    t = run.uncalibrated.table
    stated, prod = instance_confidence(t), confidence_product(t)
    assert stated.keys() == prod.keys()
    assert all(stated[i] == pytest.approx(prod[i], rel=1e-9) for i in stated)


def test_show_prints_each_patterns_share_exactly_right(run: Run) -> None:
    doc = run.base.doc
    heads = [line for line in run.base.out.splitlines() if re.match(r"#\d+ ", line)]
    assert len(heads) == min(SHOW, len(doc["patterns"]))
    for k, (line, p) in enumerate(zip(heads, doc["patterns"], strict=False), 1):
        m = re.fullmatch(
            r"#(\d+) (\S+)  ([\d,]+) instances \(est\. ([\d.]+)% exactly right\), total ([\d.]+) s", line
        )
        assert m, line
        assert int(m[1]) == k
        assert m[2] == p["id"]
        assert int(m[3].replace(",", "")) == p["count"]
        assert m[4] == f"{100 * p['confidence']:.1f}"
        assert float(m[5]) == pytest.approx(p["total_latency_s"], abs=5e-4)


def test_no_calibrate_changes_the_confidences_only(run: Run) -> None:
    doc = run.uncalibrated.doc
    assert doc["stats"]["confidence"] == {
        "calibration": "none",
        "twin_pairs": 0,
        "twin_right_rate": None,
        "second_twin_right_rate": None,
        "optimism": None,
    }
    cal, raw = run.base.table, run.uncalibrated.table
    for col in ("call_row", "return_row", "parent", "instance", "pattern", "candidates"):
        assert cal[col].equals(raw[col]), col
    assert [(p["id"], p["count"]) for p in doc["patterns"]] == [
        (p["id"], p["count"]) for p in run.base.doc["patterns"]
    ]
    c, r = cal["confidence"].to_numpy(), raw["confidence"].to_numpy()
    assert not np.array_equal(c, r)
    assert np.all(r[~linked(raw)] == 1.0)
    # Calibration maps the stated odds through a non-decreasing function: a call stated
    # more likely before is never less likely after.
    order = np.lexsort((c, r))
    assert np.all(np.diff(c[order]) >= 0.0)


@pytest.mark.parametrize("value", ["2", "-0.1", "abc", "1.5", "nan"])
def test_out_of_range_min_confidence_is_a_usage_error(run: Run, tmp_path: Path, value: str) -> None:
    out_json, inst = tmp_path / "p.json", tmp_path / "i.parquet"
    argv = ["infer", "nesting", run.trace, "--out", out_json, "--instances", inst, "--min-confidence", value]
    rc, out, err = cli(argv)
    assert rc == 2
    assert out == ""
    errors = [line for line in err.splitlines() if "error:" in line]
    assert len(errors) == 1, err
    assert "--min-confidence" in errors[0]
    assert repr(value) in errors[0] or value in errors[0]
    assert "probability" in errors[0]
    assert not out_json.exists()
    assert not inst.exists()


# --- eval ----------------------------------------------------------------------------------


def test_eval_json_confidence_matches_the_truth(run: Run) -> None:
    report = eval_json(run, run.base)
    t = run.base.table
    v = verdicts(t, run.trace)
    has = linked(t)
    conf, right = t["confidence"].to_numpy()[has], v.link_right[has]
    calls = report["confidence"]["calls"]
    keys = {"calls", "ece", "mean_stated", "right_rate", "bins", "stated_99"}
    assert set(calls) == keys
    assert calls["calls"] == int(has.sum())
    assert calls["ece"] == pytest.approx(ece(conf, right), abs=1e-9)
    assert calls["mean_stated"] == pytest.approx(conf.mean(), abs=1e-9)
    assert calls["right_rate"] == pytest.approx(right.mean(), abs=1e-12)
    assert calls["right_rate"] < 1.0, "the trace is busy enough for mistakes"
    same_bins(calls["bins"], bin_rows(conf, right))
    sure = conf >= 0.99
    assert calls["stated_99"]["calls"] == int(sure.sum())
    if sure.any():
        assert calls["stated_99"]["right_rate"] == pytest.approx(right[sure].mean(), abs=1e-12)
    else:
        assert calls["stated_99"]["right_rate"] is None
    # The calls' right rate agrees with eval's own count of calls with the right parent.
    assert int(v.link_right.sum()) == report["calls"]["right_parent"]

    inst = report["confidence"]["instances"]
    assert set(inst) == keys
    assert inst["calls"] == v.inst_exact.size == len(set(t["instance"].to_pylist()))
    assert inst["ece"] == pytest.approx(ece(v.inst_stated, v.inst_exact), abs=1e-9)
    assert inst["mean_stated"] == pytest.approx(v.inst_stated.mean(), abs=1e-9)
    assert inst["right_rate"] == pytest.approx(v.inst_exact.mean(), abs=1e-12)
    same_bins(inst["bins"], bin_rows(v.inst_stated, v.inst_exact))
    # Exact instances are the inferred instances that are not false positives.
    assert int(v.inst_exact.sum()) == report["instances"]["inferred"] - report["instances"]["false_positives"]


def test_eval_prints_the_calibration_error_and_the_reliability_table(run: Run) -> None:
    report = eval_json(run, run.base)["confidence"]
    rc, out, err = cli(["eval", run.base.paths, run.trace, "--instances", run.base.inst])
    assert rc == 0, err
    lines = out.splitlines()
    first = next(k for k, line in enumerate(lines) if line.startswith("confidence calls: ECE "))
    calls, inst = report["calls"], report["instances"]
    assert lines[first].startswith(
        f"confidence calls: ECE {calls['ece']:.3f} (stated {calls['mean_stated']:.3f}, right "
        f"{calls['right_rate']:.3f})"
    )
    assert lines[first + 1].strip().startswith(f"instances: ECE {inst['ece']:.3f}")
    assert lines[first + 2].split() == ["stated", "calls", "mean", "stated", "right"]
    table = lines[first + 3 : first + 3 + len(calls["bins"])]
    for line, b in zip(table, calls["bins"], strict=True):
        assert line.split() == [
            f"{b['low']:.1f}-{b['high']:.1f}",
            f"{b['calls']:,}",
            f"{b['stated']:.3f}",
            f"{b['right_rate']:.3f}",
        ]


def test_eval_of_a_filtered_run_scores_the_kept_calls_only(run: Run) -> None:
    report = eval_json(run, run.filtered)
    t = run.filtered.table
    v = verdicts(t, run.trace)
    has = linked(t)
    calls = report["confidence"]["calls"]
    assert calls["calls"] == int(has.sum())
    assert calls["ece"] == pytest.approx(ece(t["confidence"].to_numpy()[has], v.link_right[has]), abs=1e-9)
    assert all(b["low"] >= MIN_P - 1e-9 for b in calls["bins"])


def test_calibration_brings_stated_closer_to_right(run: Run) -> None:
    calibrated = eval_json(run, run.base)["confidence"]
    raw = eval_json(run, run.uncalibrated)["confidence"]
    for what in ("calls", "instances"):
        # Same parents, so the same share right; only what is stated differs, and the
        # calibrated statement is the closer one (here about 0.02 against 0.08 for calls).
        assert calibrated[what]["right_rate"] == raw[what]["right_rate"]
        assert calibrated[what]["ece"] < raw[what]["ece"], what


def test_eval_of_instances_without_confidence_has_no_confidence_scores(run: Run, tmp_path: Path) -> None:
    old = tmp_path / "old.parquet"
    t = run.base.table
    pq.write_table(t.drop_columns(["confidence", "pattern_confidence"]), old)
    rc, out, err = cli(["eval", run.base.paths, run.trace, "--instances", old, "--json"])
    assert rc == 0, err
    report = json.loads(out)
    assert "confidence" not in report or not report["confidence"]
    assert report["calls"]["right_parent"] == int(verdicts(t, run.trace).link_right.sum())
    rc, out, err = cli(["eval", run.base.paths, run.trace, "--instances", old])
    assert rc == 0, err
    assert "ECE" not in out


def test_a_trace_this_busy_is_told_its_confidence_is_rough(run: Run, tmp_path: Path) -> None:
    # Where a preset's twin gets fewer than half its parents right, the calibration is
    # measured to be rough (infer.calibration.ROUGH): the run says so, with the twin's rate.
    assert run.base.doc["stats"]["confidence"]["twin_right_rate"] >= 0.5
    assert "rough" not in run.base.out
    trace, paths = tmp_path / "busy.parquet", tmp_path / "busy.json"
    rc, _, err = cli(
        ["synth", MULTITIER, "--messages", 10000, "--parallelism", 42, "--seed", 7, "--out", trace]
    )
    assert rc == 0, err
    rc, out, err = cli(["infer", "nesting", trace, "--out", paths, "--show", 0])
    assert rc == 0, err
    twin = json.loads(paths.read_text())["stats"]["confidence"]["twin_right_rate"]
    assert twin < 0.5
    assert (
        f"note: confidence is rough on a trace this busy: its twin got {twin:.1%} of its parents right" in out
    )
    rc, out, err = cli(["infer", "nesting", trace, "--out", paths, "--show", 0, "--no-calibrate"])
    assert rc == 0, err
    assert "rough" not in out
