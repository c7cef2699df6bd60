"""Calibration of nesting confidence: is each inferred parent right as often as it says?

    python benchmarks/calibration.py [--messages 50000] [--parallelism 2,10,42]
                                     [--presets accurate,fast,paper] [--workloads a,b]
                                     [--datasets hotel_load25,...] [--no-real] [--no-synth]
    python benchmarks/calibration.py --twin-chain [--parallelism 10,42] [--workloads a,b]
    python benchmarks/calibration.py --fit [--seeds 2] [--presets accurate]

Each ``samples/synth/*.toml`` with RPC calls is generated at ``--messages`` messages at
each ``--parallelism`` level (one trace when the workload fixes its client loops, as the
PetStore ones do), and each of TraceWeaver's Jaeger data sets (all nine by default, read
as ``benchmarks/traceweaver.py`` does, timestamps at the callee) is inferred with each
preset; ``infer.evaluate_paths`` scores the stated confidence against the truth
(``infer.reliability``: ten equal bins of confidence). Three kinds of markdown tables:

- per source (workload or data set), parallelism (asked for; for the real data sets the
  measured mean candidate parents per child call) and preset: calls given a parent,
  the share right, the mean stated confidence, the expected calibration error (ECE) of
  calls, the calls stated at 0.99 or more and the share of them right, the ECE of
  instances (stated: the product of the calls' confidences; right: the instance is
  exactly one whole true request), the right rate on the synthetic twin the calibration
  was learnt on, and the inference time;
- per preset, for the synthetic and the real rows apart: the worst and median ECE, the
  rows meeting the ECE goal, the worst right rate of calls stated at 0.99 or more;
- for the default preset, the reliability table (stated range, calls, mean stated, share
  right) pooled over every synthetic row, then over every real row.

Goals: ECE <= 0.03 for the default preset (accurate) and <= 0.05 for the others, on every
sample workload at parallelism 2, 10 and 42 and on every TraceWeaver data set; calls
stated at 0.99 or more right at least 98% of the time. A miss is marked ✗.

``--twin-chain`` asks how far a twin is from the trace it is made from instead: the
default's right rate on each synthetic trace (call pairs from the truth's pairing), on
its twin (``infer.calibration.twin_pairs`` of the answer), on the twin's twin and one
level further, and the trace's ECE with the first twin's map alone (c = 0), with the
correction by the second twin (c = 1, what settings of one's own get), and with it
applied twice in log-odds (c = 2); no constant c serves every row. It also prints each
level's mean log-likelihood per call pair (``Stage.log_likelihood``, no truth needed)
and the ECE with the twin's map corrected for the likelihood gap between the trace and its
twin, as the default ships it (``infer.calibration.OPTIMISM``).

``--fit`` learns ``infer.calibration.OPTIMISM``: for each synthetic workload, level and
seed (``--seeds``, the configs' seeds moved by 1,000 each), the preset on the trace and
on its twin; a logistic regression, each run weighing alike, of whether each of the
trace's calls is right on ``infer.calibration.correction_features`` (its stated
log-odds, the twin's map, and the likelihood gap: the mean log-likelihood per call on
the twin less on the trace, alone and times the logit of the twin's right rate), the
two weights of the call's own odds held non-negative so that the map stays monotone.
It prints the coefficients and, per run, the ECE with them learnt on every workload but
the run's own (leave one workload out), beside the best a single shift of the twin's
map could do (searched from -3 to 3 in steps of 0.05, with the truth).

Progress goes to stderr.
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from types import ModuleType
from typing import Any

HERE = Path(__file__).resolve().parent
# benchmarks/synth.py would shadow the synth package when this runs as a file.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != HERE]

import numpy as np  # noqa: E402
from scipy.optimize import minimize  # noqa: E402

import infer  # noqa: E402
import synth  # noqa: E402
import tracefmt  # noqa: E402
from infer.calibration import (  # noqa: E402
    OPTIMISM,
    corrected,
    correction_features,
    isotonic,
    logit,
    map_odds,
    sigmoid,
    twin_pairs,
)


def _sibling(name: str) -> ModuleType:
    """The benchmark script ``benchmarks/<name>.py``, imported by path (its folder is off
    ``sys.path``, so that ``synth`` is the package)."""
    spec = importlib.util.spec_from_file_location(f"_bench_{name}", HERE / f"{name}.py")
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {HERE / f'{name}.py'}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


accuracy = _sibling("accuracy")
traceweaver = _sibling("traceweaver")

DEFAULT = "accurate"
#: ECE goal per preset (others: ``ECE_GOAL``).
ECE_GOALS = {DEFAULT: 0.03}
ECE_GOAL = 0.05
#: Calls stated at 0.99 or more should be right at least this often.
SURE_GOAL = 0.98
BINS = 10


@dataclass
class Row:
    """One preset on one trace, its confidence scored."""

    kind: str  # "synthetic" or "real"
    source: str  # workload or data set
    level: str  # parallelism: asked for (synthetic) or measured (real)
    preset: str
    seconds: float
    confidence: dict[str, Any]  # evaluate_paths' "confidence": {"calls", "instances"}
    twin_right_rate: float | None

    @property
    def calls(self) -> dict[str, Any]:
        return self.confidence["calls"]

    @property
    def ece(self) -> float | None:
        return self.calls["ece"]

    @property
    def sure_rate(self) -> float | None:
        return self.calls["stated_99"]["right_rate"]


def ece_goal(preset: str) -> float:
    return ECE_GOALS.get(preset, ECE_GOAL)


def meets_ece(row: Row) -> bool:
    return row.ece is not None and row.ece <= ece_goal(row.preset)


def score(
    trace: Any, preset: str, kind: str, source: str, level: Callable[[infer.NestingResult], str]
) -> Row:
    """Infer ``trace`` with ``preset`` and score its confidence against the truth."""
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # settings that do nothing in a combination
        result = infer.infer_nesting(trace, preset)
    seconds = time.perf_counter() - t0
    report = infer.evaluate_paths(result.to_json(), trace, instances=result.instances_table())
    if "confidence" not in report:
        raise SystemExit(f"error: evaluate_paths gave no confidence scores for {source} ({preset})")
    twin = result.calibration.to_json()["twin_right_rate"]
    return Row(kind, source, level(result), preset, seconds, report["confidence"], twin)


def synthetic_rows(
    workloads: list[str], messages: int, asked: list[str], presets: list[str]
) -> Iterator[Row]:
    for name in workloads:
        base = replace(synth.load_config(accuracy.SAMPLES / f"{name}.toml"), messages=messages)
        for label, cfg in accuracy.levels_of(base, asked):
            trace, _ = synth.generate_table(cfg)
            for preset in presets:
                row = score(trace, preset, "synthetic", name, lambda _r, label=label: label)
                print(f"{name} at {label}, {preset}: {row.seconds:.1f} s", file=sys.stderr, flush=True)
                yield row


def real_rows(datasets: list[str], presets: list[str]) -> Iterator[Row]:
    for name in datasets:
        trace = tracefmt.read_jaeger(traceweaver.DATA / f"{name}.jsonl.gz", at="callee")
        for preset in presets:
            row = score(trace, preset, "real", name, lambda r: f"{r.mean_parallelism:.1f}")
            print(f"{name}, {preset}: {row.seconds:.1f} s", file=sys.stderr, flush=True)
            yield row


def _pct(x: float | None) -> str:
    return "–" if x is None else f"{x:.1%}"


def _num(x: float | None, digits: int = 3) -> str:
    return "–" if x is None else f"{x:.{digits}f}"


def _ece_text(ece: float | None, goal: float) -> str:
    return _num(ece) + (" ✗" if ece is not None and ece > goal else "")


def _sure_text(rate: float | None) -> str:
    return _pct(rate) + (" ✗" if rate is not None and rate < SURE_GOAL else "")


def row_line(r: Row) -> str:
    calls, sure = r.calls, r.calls["stated_99"]
    share = sure["calls"] / calls["calls"] if calls["calls"] else None
    return (
        f"| {r.source} | {r.level} | {r.preset} | {calls['calls']:,} | {_pct(calls['right_rate'])} | "
        f"{_num(calls['mean_stated'])} | {_ece_text(r.ece, ece_goal(r.preset))} | "
        f"{sure['calls']:,} ({_pct(share)}) | {_sure_text(r.sure_rate)} | "
        f"{_num(r.confidence['instances']['ece'])} | {_pct(r.twin_right_rate)} | {r.seconds:.1f} s |"
    )


def rows_table(rows: list[Row]) -> list[str]:
    return [
        "| source | parallelism | preset | calls given a parent | right | mean stated | ECE "
        "| stated ≥ 0.99 (share) | their right rate | instance ECE | twin right | time |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        *(row_line(r) for r in rows),
    ]


def summary_table(rows: list[Row], presets: list[str]) -> list[str]:
    lines = [
        "| rows | preset | ECE goal | worst ECE | median ECE | meeting the goal | worst ≥ 0.99 right rate |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for kind in ("synthetic", "real"):
        for preset in presets:
            mine = [r for r in rows if r.kind == kind and r.preset == preset]
            if not mine:
                continue
            eces = [r.ece for r in mine if r.ece is not None]
            sures = [r.sure_rate for r in mine if r.sure_rate is not None]
            goal = ece_goal(preset)
            worst = max(eces) if eces else None
            lines.append(
                f"| {kind} | {preset} | {goal:.2f} | {_ece_text(worst, goal)} | "
                f"{_num(statistics.median(eces) if eces else None)} | "
                f"{sum(map(meets_ece, mine))} of {len(mine)} | {_sure_text(min(sures) if sures else None)} |"
            )
    return lines


def pooled(rows: list[Row]) -> dict[str, Any]:
    """The calls' reliability summed over ``rows``: per bin calls, mean stated and share
    right; over all the ECE, and the calls stated at 0.99 or more and their share right."""
    bins: dict[float, list[float]] = {}  # low -> [high, calls, stated sum, right sum]
    sure_calls, sure_right = 0, 0.0
    for r in rows:
        for b in r.calls["bins"]:
            acc = bins.setdefault(b["low"], [b["high"], 0, 0.0, 0.0])
            acc[1] += b["calls"]
            acc[2] += b["calls"] * b["stated"]
            acc[3] += b["calls"] * b["right_rate"]
        sure = r.calls["stated_99"]
        if sure["calls"]:
            sure_calls += sure["calls"]
            sure_right += sure["calls"] * sure["right_rate"]
    total = sum(acc[1] for acc in bins.values())
    return {
        "calls": int(total),
        "ece": sum(abs(acc[2] - acc[3]) for acc in bins.values()) / total if total else None,
        "bins": [(low, *acc) for low, acc in sorted(bins.items())],
        "sure_calls": sure_calls,
        "sure_rate": sure_right / sure_calls if sure_calls else None,
    }


def reliability_table(rows: list[Row]) -> list[str]:
    p = pooled(rows)
    lines = [
        f"{len(rows)} run{'s' * (len(rows) != 1)}, {p['calls']:,} calls given a parent: "
        f"ECE {_num(p['ece'])}; {p['sure_calls']:,} stated ≥ 0.99, right {_pct(p['sure_rate'])}.",
        "",
        "| stated | calls | mean stated | right |",
        "|---|---:|---:|---:|",
    ]
    for low, high, calls, stated, right in p["bins"]:
        if calls:
            lines.append(f"| {low:.1f}–{high:.1f} | {calls:,} | {stated / calls:.3f} | {right / calls:.3f} |")
    return lines


LEVELS = 4  # the trace, its twin, the twin's twin, and one more


def chain(
    pairs: infer.CallPairs, truth: np.ndarray, n_nodes: int
) -> tuple[list[tuple[np.ndarray, ...]], list[float], list[float]]:
    """``(inferred parents, stated log-odds, true parents)`` on the trace and each twin,
    each one's share of calls that overlap another at the same callee, and each one's
    mean log-likelihood per call pair."""
    params = infer.NestingParams.preset("accurate")
    out, busy, likelihood = [], [], []
    for level in range(LEVELS):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            *_, final = infer.nesting_stages(pairs, n_nodes, params)
        out.append((final.parent, final.log_odds, truth))
        busy.append(overlapping(pairs))
        likelihood.append(final.log_likelihood)
        pairs, truth = twin_pairs(pairs, final.parent, seed=level)
    return out, busy, likelihood


def overlapping(pairs: infer.CallPairs) -> float:
    """The share of calls made while another call to the same callee is open."""
    hits = 0
    for node in np.unique(pairs.callee):  # a loop over nodes, not calls
        mine = pairs.callee == node
        order = np.argsort(pairs.t_call[mine], kind="stable")
        t_call, t_return = pairs.t_call[mine][order], pairs.t_return[mine][order]
        latest = np.maximum.accumulate(t_return)
        hits += int((t_call[1:] < latest[:-1]).sum())
    return hits / max(len(pairs), 1)


def right_rate(got: np.ndarray, truth: np.ndarray) -> float:
    linked = got >= 0
    return float((got[linked] == truth[linked]).mean())


def likelihood_ece(levels: list[tuple[np.ndarray, ...]], likelihood: list[float]) -> float:
    """The trace's calls' ECE with the first twin's map corrected for the likelihood gap,
    as the default preset ships it (``infer.calibration.corrected``)."""
    (g0, l0, t0), (g1, l1, t1) = levels[:2]
    k0, k1 = g0 >= 0, g1 >= 0
    right1 = g1[k1] == t1[k1]
    p = infer.Calibration.learn(l1[k1], right1).apply(l0[k0])
    gap = likelihood[1] - likelihood[0]
    return infer.reliability(
        corrected(l0[k0], p, gap, float(right1.mean()), OPTIMISM[DEFAULT]), g0[k0] == t0[k0]
    )["ece"]


def eces(levels: list[tuple[np.ndarray, ...]], cs: tuple[float, ...]) -> list[float]:
    """The trace's calls' ECE with the first twin's map corrected ``c`` times by the
    second twin's view of the first (``c = 1``: as ``infer.calibration.twin_calibration``
    does for settings without ``OPTIMISM`` coefficients)."""
    (g0, l0, t0), (g1, l1, t1), (g2, l2, t2) = levels[:3]
    k0, k1, k2 = g0 >= 0, g1 >= 0, g2 >= 0
    right1, right2 = g1[k1] == t1[k1], g2[k2] == t2[k2]
    first = infer.Calibration.learn(l1[k1], right1)
    second = isotonic(map_odds(l2[k2]), right2, prior=sigmoid(l2[k2]))
    stated = np.interp(map_odds(l1[k1]), *second)
    correction = isotonic(stated, right1, prior=stated)
    p = first.apply(l0[k0])
    shift = logit(np.interp(p, *correction)) - logit(p)
    right0 = g0[k0] == t0[k0]
    return [infer.reliability(sigmoid(logit(p) + c * shift), right0)["ece"] for c in cs]


def twin_chain_table(workloads: list[str], messages: int, asked: list[str]) -> Iterator[str]:
    """``--twin-chain``: per workload and parallelism, the right rate on the trace and
    on three twins in a row, and the trace's ECE with the twin's map corrected ``c``
    times by the second twin's view of the first."""
    cs = (0.0, 1.0, 2.0)
    yield (
        "| workload | parallelism | right: trace | twin | twin of twin | third twin "
        "| ECE c = 0 | c = 1 (own settings) | c = 2 | calls overlapping: trace | twin "
        "| log-likelihood: trace | twin | twin of twin | ECE by likelihood gap (default) |"
    )
    yield "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    for name in workloads:
        base = replace(synth.load_config(accuracy.SAMPLES / f"{name}.toml"), messages=messages)
        for label, cfg in accuracy.levels_of(base, asked):
            trace, _ = synth.generate_table(cfg)
            pairs, truth, names, _ = infer.true_pairs(trace)
            levels, busy, likelihood = chain(pairs, truth, len(names))
            rates = " | ".join(f"{right_rate(g, t):.1%}" for g, _, t in levels)
            ece = " | ".join(f"{e:.3f}" for e in eces(levels, cs))
            ll = " | ".join(f"{x:.3f}" for x in likelihood[:3])
            by_ll = likelihood_ece(levels, likelihood)
            print(f"{name} at {label}: twins done", file=sys.stderr, flush=True)
            yield (
                f"| {name} | {label} | {rates} | {ece} | {busy[0]:.3f} | {busy[1]:.3f} | {ll} | {by_ll:.3f} |"
            )


SHIFTS = np.linspace(-3.0, 3.0, 121)  # the shifts --fit tries, in log-odds


@dataclass
class FitRow:
    """One synthetic run for ``--fit``: the trace's calls' stated log-odds, the twin's map
    of them and whether each is right, the likelihood gap and the twin's right rate, and
    the best single shift of the twin's map (with the truth: what no fit can beat)."""

    source: str
    level: str
    seed: int
    stated: np.ndarray
    first: np.ndarray
    right: np.ndarray
    gap: float
    twin_right_rate: float
    best: float

    def features(self) -> np.ndarray:
        """The run's calls' rows of what the coefficients multiply."""
        return correction_features(self.stated, self.first, self.gap, self.twin_right_rate)

    def corrected(self, coefficients: tuple[float, ...]) -> np.ndarray:
        """The run's calls' probabilities as ``infer_nesting`` would state them."""
        return corrected(self.stated, self.first, self.gap, self.twin_right_rate, coefficients)


def fit_rows(
    workloads: list[str], messages: int, asked: list[str], seeds: int, preset: str
) -> Iterator[FitRow]:
    params = infer.NestingParams.preset(preset)
    for name in workloads:
        base = replace(synth.load_config(accuracy.SAMPLES / f"{name}.toml"), messages=messages)
        for seed in range(seeds):
            moved = replace(base, seed=base.seed + 1000 * seed) if seed else base
            for label, cfg in accuracy.levels_of(moved, asked):
                trace, _ = synth.generate_table(cfg)
                pairs, truth, names, _ = infer.true_pairs(trace)
                levels, settings = [], params
                for level in range(2):  # the trace, then its twin (as infer_nesting makes it)
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore", UserWarning)
                        *_, final = infer.nesting_stages(pairs, len(names), settings)
                    levels.append((final.parent, final.log_odds, truth, final.log_likelihood))
                    pairs, truth = twin_pairs(pairs, final.parent, seed=level)
                    # The twin is inferred with the trace's tolerance, as infer_nesting does.
                    settings = params.with_overrides(tolerance_s=final.tolerance_s, auto_tolerance=False)
                (g0, l0, t0, ll0), (g1, l1, t1, ll1) = levels
                k0, k1 = g0 >= 0, g1 >= 0
                right1 = g1[k1] == t1[k1]
                first = infer.Calibration.learn(l1[k1], right1).apply(l0[k0])
                right0 = g0[k0] == t0[k0]
                eces_ = [infer.reliability(sigmoid(logit(first) + s), right0)["ece"] for s in SHIFTS]
                print(f"{name} at {label}, seed {seed}: done", file=sys.stderr, flush=True)
                best = float(SHIFTS[int(np.argmin(eces_))])
                yield FitRow(name, label, seed, l0[k0], first, right0, ll1 - ll0, float(right1.mean()), best)


def _logistic(rows: list[FitRow]) -> tuple[float, float, float, float, float]:
    """Weighted logistic regression of right on the rows' features, each run weighing
    alike, the weights of the stated odds and the twin's map (columns 1 and 2) held
    non-negative."""
    x = np.vstack([r.features() for r in rows])
    y = np.concatenate([r.right for r in rows]).astype(float)
    w = np.concatenate([np.full(r.right.size, 1.0 / max(r.right.size, 1)) for r in rows])

    def loss(beta: np.ndarray) -> tuple[float, np.ndarray]:
        z = x @ beta
        return float(-(w * (y * z - np.logaddexp(0.0, z))).sum()), -(x.T @ (w * (y - sigmoid(z))))

    start = np.array([0.0, 0.0, 1.0, 0.0, 0.0])  # the twin's map alone
    bounds = [(None, None), (0.0, None), (0.0, None), (None, None), (None, None)]
    fit = minimize(loss, start, jac=True, method="L-BFGS-B", bounds=bounds)
    if not fit.success:
        raise SystemExit(f"error: the logistic fit did not converge ({fit.message})")
    return tuple(float(b) for b in fit.x)  # type: ignore[return-value]


def fit_table(
    workloads: list[str], messages: int, asked: list[str], seeds: int, preset: str
) -> Iterator[str]:
    """``--fit``: the coefficients of ``OPTIMISM`` for ``preset``, and each run's ECE with
    those learnt leaving its workload out."""
    if len(workloads) < 2:
        raise SystemExit("error: --fit leaves one workload out at a time: give at least two workloads")
    rows = list(fit_rows(workloads, messages, asked, seeds, preset))
    coef = _logistic(rows)
    goal = ece_goal(preset)
    yield f"{preset}: OPTIMISM = ({', '.join(f'{c:.3f}' for c in coef)}) from {len(rows)} runs"
    yield ""
    yield (
        "| workload | parallelism | seed | right | best shift | ECE, best shift | ECE, left out "
        "| stated ≥ 0.99: right |"
    )
    yield "|---|---|---:|---:|---:|---:|---:|---:|"
    met = 0
    for r in rows:
        score = infer.reliability(r.corrected(_logistic([q for q in rows if q.source != r.source])), r.right)
        best = infer.reliability(sigmoid(logit(r.first) + r.best), r.right)["ece"]
        met += score["ece"] <= goal
        yield (
            f"| {r.source} | {r.level} | {r.seed} | {r.right.mean():.1%} | {r.best:+.2f} | {best:.3f} "
            f"| {_ece_text(score['ece'], goal)} | {_sure_text(score['stated_99']['right_rate'])} |"
        )
    yield ""
    yield f"left out: {met} of {len(rows)} runs meet ECE ≤ {goal:.2f}"


def _names(
    text: str | None, known: list[str] | tuple[str, ...], what: str, ap: argparse.ArgumentParser
) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()] if text else list(known)
    bad = [n for n in names if n not in known]
    if bad:
        ap.error(f"unknown {what} {bad[0]!r} (must be one of {', '.join(known)})")
    return names


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=50_000)
    ap.add_argument("--parallelism", default="2,10,42", help="comma-separated levels; own: the workload's")
    ap.add_argument("--presets", default=",".join(infer.PRESETS), help="comma-separated presets")
    ap.add_argument("--workloads", default=None, help="comma-separated (default: every RPC sample)")
    ap.add_argument("--datasets", default=None, help="comma-separated (default: all nine)")
    ap.add_argument("--no-real", action="store_true", help="skip the TraceWeaver data sets")
    ap.add_argument("--no-synth", action="store_true", help="skip the synthetic workloads")
    ap.add_argument(
        "--twin-chain",
        action="store_true",
        help="instead: the default's right rate on each synthetic trace and three twins in a row",
    )
    ap.add_argument("--fit", action="store_true", help="instead: learn infer.calibration.OPTIMISM")
    ap.add_argument("--seeds", type=int, default=2, help="--fit: seeds per workload and level")
    args = ap.parse_args()
    presets = _names(args.presets, infer.PRESETS, "preset", ap)
    workloads = [] if args.no_synth else _names(args.workloads, accuracy.rpc_workloads(), "workload", ap)
    datasets = [] if args.no_real else _names(args.datasets, traceweaver.DATASETS, "data set", ap)
    missing = [n for n in datasets if not (traceweaver.DATA / f"{n}.jsonl.gz").is_file()]
    if missing:
        ap.error(f"no data set {missing[0]!r} in {traceweaver.DATA}")
    asked = [a.strip() for a in args.parallelism.split(",") if a.strip()]
    if args.twin_chain:
        for line in twin_chain_table(workloads, args.messages, asked):
            print(line, flush=True)
        return
    if args.fit:
        for preset in presets:
            for line in fit_table(workloads, args.messages, asked, args.seeds, preset):
                print(line, flush=True)
        return

    t_start = time.perf_counter()
    rows = [
        *synthetic_rows(workloads, args.messages, asked, presets),
        *real_rows(datasets, presets),
    ]
    goals = ", ".join(f"{p} ≤ {ece_goal(p):.2f}" for p in presets)
    print(
        f"Synthetic: {args.messages:,} messages per trace, parallelism as asked; real: TraceWeaver's "
        "data sets, timestamps at the callee, parallelism measured (mean candidate parents per "
        f"child call). ECE over {BINS} equal bins of stated confidence; goals: {goals}; calls "
        f"stated ≥ 0.99 right ≥ {SURE_GOAL:.0%}. ✗: a miss."
    )
    print()
    print("\n".join(rows_table(rows)))
    print()
    print("\n".join(summary_table(rows, presets)))
    for kind in ("synthetic", "real"):
        mine = [r for r in rows if r.kind == kind and r.preset == DEFAULT]
        if mine:
            print()
            print(f"Reliability of `{DEFAULT}`, pooled over the {kind} rows: ", end="")
            print("\n".join(reliability_table(mine)))
    print(f"done in {time.perf_counter() - t_start:.0f} s", file=sys.stderr)


if __name__ == "__main__":
    main()
