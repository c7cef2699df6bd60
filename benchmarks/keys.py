"""Request keys on part of the calls: how right the rest gets, against the share keyed.

    python benchmarks/keys.py [--synth multitier,children-parallel] [--parallelism 10,42]
                              [--traceweaver hotel_load125,media_load125,node_load125]
                              [--messages 20000] [--no-calibrate]

Keys are revealed from the truth (``synth.keys``): a call carries its true request's
trace id when its sender is keyed (as a service that propagates trace context sends it
on the calls it makes) or, for the ``share`` settings, when a seeded coin says so. Each
row is inferred with the defaults (``infer.infer_nesting``; keys are evidence unless
``none``) and scored against the truth: requests fully right (every call its true
parent) and calls with the right parent, over all calls and over the calls that carry
no key; the expected calibration error (ECE) of the confidences of the unkeyed calls
(``infer.reliability``); the held-out check the run made on its own keys
(``stats.keys``: the share of hidden keyed calls it found the parent of, which
``wirepath eval --truth keys`` reports); and the run time. ``--calibrate-from keys``
learns the calibration from those held-out calls instead of the keyed twin. The last
columns say whether a wrong answer is the model's error or the search's: the answer's
and the truth's log-likelihood per call under the run's model (``infer.error_sources``),
and ``model`` where the model prefers the answer, ``search`` where it prefers the truth.

Settings: ``none`` (no keys, today's answer), ``share 20%`` (a fifth of the calls),
``front tier`` (the calls the entry service makes: nginx's X-Request-ID), ``every other
hop`` (the calls at even depth), ``half the services`` (the calls of every other service
by name), ``all`` (every call).
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

# benchmarks/synth.py would shadow the synth package when this runs as a file.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

import infer  # noqa: E402
import synth  # noqa: E402
import tracefmt  # noqa: E402
from synth.keys import key_column  # noqa: E402
from tracefmt.patterns import tree_depths  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT.parent / "shared" / "data" / "traceweaver"
if not DATA.is_dir():
    DATA = Path("/work/shared/data/traceweaver")


def _calls(trace: pa.Table) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per message: whether it is a call, its sender, and its call's depth in the truth
    (0: a request's first call; -1: not a call)."""
    op = trace["op"].cast(pa.string()).to_numpy(zero_copy_only=False)
    is_call = op == "call"
    sender = trace["sender"].cast(pa.string()).to_numpy(zero_copy_only=False)
    uid = trace["true_call"].to_numpy().astype(np.int64)
    tp = trace["true_parent"]
    tparent = np.where(
        tp.is_null().to_numpy(zero_copy_only=False), -1, tp.fill_null(0).to_numpy().astype(np.int64)
    )
    # Depth of each call: up the true parents, a vector step a level.
    rows = np.flatnonzero(is_call)
    order = np.argsort(uid[rows])
    ids = uid[rows][order]
    par_row = np.full(rows.size, -1, np.int64)
    has = tparent[rows] >= 0
    at = np.searchsorted(ids, tparent[rows][has])
    par_row[has] = order[np.minimum(at, ids.size - 1)]
    depth = tree_depths(par_row)[0]
    out = np.full(trace.num_rows, -1, np.int64)
    out[rows] = depth
    return is_call, sender, out


def settings(trace: pa.Table) -> dict[str, np.ndarray | None]:
    """Which messages carry a key in each setting (None: no key column)."""
    is_call, sender, depth = _calls(trace)
    entry = sorted(set(sender[depth == 1]))  # who makes the calls one below the first
    services = sorted(set(sender[is_call]) - set(sender[depth == 0]))
    coin = np.random.default_rng(7).random(trace.num_rows) < 0.2
    return {
        "none": None,
        "share 20%": is_call & coin,
        "front tier": is_call & np.isin(sender, entry),
        "every other hop": is_call & (depth % 2 == 0),
        "half the services": is_call & np.isin(sender, services[::2]),
        "all": is_call,
    }


def measure(
    trace: pa.Table, keyed: np.ndarray | None, calibrate: bool, diagnose: bool = True, **settings: Any
) -> dict[str, Any]:
    if keyed is not None:
        inst = trace["true_instance"].to_numpy().astype(np.uint64)
        trace = trace.append_column("trace_id", key_column(inst, keyed))
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        result = infer.infer_nesting(trace, calibrate=calibrate, **settings)
    took = time.perf_counter() - t0
    report = infer.evaluate_paths(result.to_json(), trace, instances=result.instances_table())
    pairs = result.pairs
    truth = infer.true_parents(pairs, trace)
    right = result.parent == truth
    unkeyed = (
        np.ones(len(pairs), bool) if keyed is None else ~(keyed[pairs.call_row] | keyed[pairs.return_row])
    )
    linked = unkeyed & (result.parent >= 0)
    ece = infer.reliability(result.confidence[linked], right[linked])["ece"] if linked.any() else None
    keys = result.to_json()["stats"].get("keys", {})
    held = keys.get("held_out_right", 0) / keys["held_out_calls"] if keys.get("held_out_calls") else None
    # Model or search error: the truth's and the answer's likelihood under the run's model.
    sources = infer.error_sources(result, trace) if diagnose else {}
    return {
        **{k: sources[k] for k in ("answer_ll", "truth_ll", "verdict") if k in sources},
        "keyed": 0.0 if keyed is None else float(keyed[pairs.call_row].mean()),
        "requests": report["instances"]["fully_right_rate"],
        "calls": float(right.mean()),
        "unkeyed_calls": float(right[unkeyed].mean()) if unkeyed.any() else None,
        "ece": ece,
        "held_out": held,
        "calibration": result.calibration.kind,
        "seconds": took,
    }


def _pct(x: float | None) -> str:
    return "" if x is None else f"{x:.1%}"


def table(title: str, rows: list[tuple[str, dict[str, Any]]]) -> None:
    print(f"\n{title}\n")
    print(
        "| keys | calls keyed | requests fully right | calls right | unkeyed calls right "
        "| ECE, unkeyed | held-out keyed calls right | calibration | time "
        "| log-likelihood: answer / truth | error |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---|---:|---:|---|")
    for name, r in rows:
        ece = "" if r["ece"] is None else f"{r['ece']:.3f}"
        ll = f"{r['answer_ll']:.3f} / {r['truth_ll']:.3f}" if "answer_ll" in r else ""
        print(
            f"| {name} | {_pct(r['keyed'])} | {_pct(r['requests'])} | {_pct(r['calls'])} "
            f"| {_pct(r['unkeyed_calls'])} | {ece} | {_pct(r['held_out'])} | {r['calibration']} "
            f"| {r['seconds']:.1f} s | {ll} | {r.get('verdict', '')} |"
        )
    sys.stdout.flush()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--synth", default="multitier,children-parallel", help="samples/synth workloads")
    parser.add_argument("--parallelism", default="10,42", help="synthetic parallelism levels")
    parser.add_argument("--messages", type=int, default=20_000, help="messages a synthetic trace")
    parser.add_argument(
        "--traceweaver", default="hotel_load125,media_load125,node_load125", help="TraceWeaver data sets"
    )
    parser.add_argument("--settings", default="", help="only these settings (comma-separated)")
    parser.add_argument("--no-calibrate", action="store_true", help="skip calibration (faster; no ECE)")
    parser.add_argument(
        "--no-diagnosis", action="store_true", help="skip the truth's and the answer's likelihood (faster)"
    )
    parser.add_argument(
        "--calibrate-from", choices=("twin", "keys"), default="twin", help="NestingParams.calibrate_from"
    )
    args = parser.parse_args(argv)
    only = {s.strip() for s in args.settings.split(",") if s.strip()}
    traces: list[tuple[str, pa.Table]] = []
    for name in filter(None, args.synth.split(",")):
        cfg = synth.load_config(ROOT / "samples" / "synth" / f"{name}.toml")
        for par in filter(None, args.parallelism.split(",")):
            cfg_p = replace(cfg, messages=args.messages, parallelism=float(par), seed=11)
            traces.append(
                (
                    f"synth {name}, parallelism {par}, {args.messages:,} messages",
                    synth.generate_table(cfg_p)[0],
                )
            )
    for name in filter(None, args.traceweaver.split(",")):
        traces.append((f"TraceWeaver {name}", tracefmt.read_jaeger(DATA / f"{name}.jsonl.gz", at="callee")))
    for title, trace in traces:
        rows = []
        for setting, keyed in settings(trace).items():
            if only and setting not in only:
                continue
            calibrate_from = {} if keyed is None else {"calibrate_from": args.calibrate_from}
            row = measure(trace, keyed, not args.no_calibrate, not args.no_diagnosis, **calibrate_from)
            rows.append((setting, row))
            print(f"{title}: {setting} done", file=sys.stderr)
        table(title, rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
