"""Accuracy of every nesting preset on every sample RPC workload, against the truth.

    python benchmarks/accuracy.py [--messages 50000] [--workloads multitier,gateway-fanout]
                                  [--presets paper,fast,accurate] [--parallelism own,5,10]
                                  [--no-diagnosis]

A preset may carry settings of its own, ``NAME:FIELD=VALUE+FIELD=VALUE`` (say
``requests:request_window=64``), so a setting and its preset are compared in one run.

Each ``samples/synth/*.toml`` with RPC calls (not the one-way ``mail.toml``) is generated
at ``--messages`` messages, at its own parallelism and at parallelism 5 and 10 (one
trace when the workload fixes its client loops, as the PetStore ones do), inferred with
each preset and scored with ``infer.evaluate_paths``. Three markdown tables:

- per workload, parallelism and preset: exact instances (true instances inferred
  exactly), requests fully right (every call of the request got its true parent),
  calls with the right parent, false patterns (inferred patterns that are not true) of
  those inferred, the top-5 and top-10 missing rates with no count tolerance, time;
- ``gateway-fanout`` at parallelism 5 and 10, where calls made at once leave in random
  order: whether every true pattern found is found once (inferred patterns with a true
  pattern's id, against the true patterns they match), whether the true top 10 are all
  among the inferred patterns, and the relative error of the per-visit means (latency
  and delay) of the true patterns found (``evaluate_paths``' ``delay_error``);
- model error and search error of the default (``infer.error_sources``): the answer's
  and the truth's log-likelihood under the model the run learnt, and the share of calls
  the run's own rounds keep when started from the truth; then the ceiling of chain
  rounds, a diagnosis with the model learnt once from the true
  parents (``infer.chains.chain_stages(..., model_from=truth)``, the default's
  settings, up to 100 rounds to convergence): the share of calls whose true parent
  they keep when started from the truth, and the share they reach from the default
  preset's answer.

Progress goes to stderr; about a minute and a half with the defaults (80 s on this machine).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

# benchmarks/synth.py would shadow the synth package when this runs as a file.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402

import infer  # noqa: E402
import synth  # noqa: E402
from infer.candidates import CandidateChunks, Scoreboard  # noqa: E402
from infer.chains import chain_stages  # noqa: E402

SAMPLES = Path(__file__).resolve().parent.parent / "samples" / "synth"
FANOUT = "gateway-fanout"
#: Chain rounds of the ceiling: the default's settings, run until they converge.
CEILING_ROUNDS = 100


@dataclass
class Run:
    """One preset on one trace, scored."""

    workload: str
    level: str  # the parallelism asked for, as labelled in the tables
    preset: str
    parallelism: float  # measured: mean candidate parents per child call
    seconds: float
    report: dict[str, Any]
    true_ids: list[str]  # true pattern ids by count
    inferred_ids: list[str]
    variants: int  # inferred patterns, not true, with a true pattern's visits in another order


def rpc_workloads() -> list[str]:
    """Names of the sample workloads with RPC calls (one-way ones have nothing to nest)."""
    return [
        p.stem
        for p in sorted(SAMPLES.glob("*.toml"))
        if all(t.kind == "rpc" for t in synth.load_config(p).tracelets)
    ]


def levels_of(cfg: synth.SynthConfig, asked: list[str]) -> list[tuple[str, synth.SynthConfig]]:
    """``(label, config)`` per parallelism asked for (``own``: the workload's), once each."""
    if all(t.clients is not None for t in cfg.tracelets):
        return [("fixed clients", cfg)]
    out: dict[float, tuple[str, synth.SynthConfig]] = {}
    for a in asked:
        p = cfg.parallelism if a == "own" else float(a)
        label = f"{p:g} (own)" if a == "own" or p == cfg.parallelism else f"{p:g}"
        if p not in out or a == "own":
            out[p] = (label, replace(cfg, parallelism=p))
    return list(out.values())


def ceiling(result: infer.NestingResult, trace: pa.Table) -> dict[str, float]:
    """Chain rounds judged by the model of the true parents, from the truth and from
    ``result``'s answer: shares of calls with their true parent at the end, rounds run."""
    truth = infer.true_parents(result.pairs, trace)
    pairs, n_nodes = result.pairs, len(result.nodes)
    params = infer.NestingParams().with_overrides(chains=CEILING_ROUNDS)
    chunks = CandidateChunks(
        pairs, round(params.tolerance_s * 1e9), Scoreboard(params, n_nodes), siblings=True
    )
    out: dict[str, float] = {}
    for name, start in (("kept", truth), ("reached", result.parent)):
        parent, rounds = start, 0
        for parent, _, _, _ in chain_stages(pairs, chunks, start, params, n_nodes, model_from=truth):  # noqa: B007
            rounds += 1
        out[name] = float(np.mean(parent == truth))
        out[f"{name}_rounds"] = rounds
    out["default"] = float(np.mean(result.parent == truth))
    return out


def visits(root: dict[str, Any]) -> tuple[str, ...]:
    """The visits of a pattern (paths-file form) as sorted ``caller>node`` texts: the same
    for two shapes that differ only in the order or grouping of calls."""
    out, stack = [], [root]
    while stack:
        v = stack.pop()
        out.append(f"{v['caller']}>{v['node']}")
        stack.extend(v["children"])
    return tuple(sorted(out))


def run_preset(
    trace: pa.Table, truth: dict[str, tuple[str, ...]], workload: str, level: str, preset: str
) -> tuple[Run, infer.NestingResult]:
    """``preset`` on ``trace`` scored against the truth (``truth``: the true patterns'
    ids, by count, with their visits)."""
    t0 = time.perf_counter()
    name, overrides = preset_settings(preset)
    result = infer.infer_nesting(trace, name, **overrides)
    seconds = time.perf_counter() - t0
    paths = result.to_json()
    report = infer.evaluate_paths(
        paths, trace, instances=result.instances_table(), ns=(5, 10), tolerances=(0.0,)
    )
    true_visits = set(truth.values())
    variants = sum(p["id"] not in truth and visits(p["root"]) in true_visits for p in paths["patterns"])
    run = Run(
        workload,
        level,
        preset,
        result.mean_parallelism,
        seconds,
        report,
        list(truth),
        [p["id"] for p in paths["patterns"]],
        variants,
    )
    return run, result


def preset_settings(spec: str) -> tuple[str, dict[str, Any]]:
    """A preset's name and the settings it carries (``NAME:FIELD=VALUE+FIELD=VALUE``).

    >>> preset_settings("requests:request_window=64+request_tuples=16")
    ('requests', {'request_window': 64, 'request_tuples': 16})
    >>> preset_settings("accurate")
    ('accurate', {})
    """
    name, _, rest = spec.partition(":")
    overrides: dict[str, Any] = {}
    for item in filter(None, rest.split("+")):
        key, _, value = item.partition("=")
        try:  # numbers and true/false as JSON says them, the rest as text
            overrides[key.strip()] = json.loads(value)
        except json.JSONDecodeError:
            overrides[key.strip()] = value
    return name, overrides


def _pct(x: float | None) -> str:
    return "–" if x is None else f"{x:.1%}"


def _missing(report: dict[str, Any], n: int) -> str:
    rates = [r["missing_rate"] for r in report["top_n"] if r["n"] == n and r["tolerance"] == 0.0]
    return f"{rates[0]:.0%}" if rates else "–"


def accuracy_rows(runs: list[Run]) -> list[str]:
    rows = []
    for r in runs:
        inst, pats = r.report["instances"], r.report["patterns"]
        exact = 1 - inst["false_negatives"] / inst["true"]
        rows.append(
            f"| {r.workload} | {r.level} | {r.parallelism:.1f} | {r.preset} | {exact:.1%} | "
            f"{_pct(inst['fully_right_rate'])} | {_pct(r.report['calls']['right_parent_rate'])} | "
            f"{pats['false_positives']} of {pats['inferred']} | {_missing(r.report, 5)} | "
            f"{_missing(r.report, 10)} | {r.seconds:.2f} s |"
        )
    return rows


def fanout_rows(runs: list[Run]) -> list[str]:
    rows = []
    for r in runs:
        true_ids = set(r.true_ids)
        matching = [i for i in r.inferred_ids if i in true_ids]  # inferred patterns with a true id
        found = set(matching)
        once = len(matching) == len(found)
        top = r.true_ids[:10]
        top_found = set(top) <= set(r.inferred_ids)
        err = r.report["delay_error"]
        error = "–" if err["median_rel"] is None else f"{err['median_rel']:.1%} / {err['p90_rel']:.1%}"
        rows.append(
            f"| {r.level} | {r.parallelism:.1f} | {r.preset} | {len(true_ids)} | "
            f"{len(found)} by {len(matching)} | {'yes' if once else 'NO'} | {r.variants} | "
            f"{'yes' if top_found else 'NO'} (of {len(top)}) | {error} |"
        )
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=50_000)
    ap.add_argument("--workloads", default=None, help="comma-separated names (default: every RPC sample)")
    ap.add_argument("--presets", default="paper,fast,accurate", help="comma-separated presets")
    ap.add_argument(
        "--parallelism", default="own,5,10", help="comma-separated levels; own: the workload's setting"
    )
    ap.add_argument(
        "--no-diagnosis", action="store_true", help="leave out the model and search error table (faster)"
    )
    args = ap.parse_args()
    known = rpc_workloads()
    workloads = args.workloads.split(",") if args.workloads else known
    unknown = [w for w in workloads if w not in known]
    if unknown:
        ap.error(f"unknown workload {unknown[0]!r} (must be one of {', '.join(known)})")
    presets = args.presets.split(",")
    bad = [p for p in presets if preset_settings(p)[0] not in infer.PRESETS]
    if bad:
        ap.error(f"unknown preset {bad[0]!r} (must be one of {', '.join(infer.PRESETS)})")
    asked = args.parallelism.split(",")

    runs: list[Run] = []
    ceilings: list[str] = []
    t_start = time.perf_counter()
    for name in workloads:
        base = replace(synth.load_config(SAMPLES / f"{name}.toml"), messages=args.messages)
        for level, cfg in levels_of(base, asked):
            print(f"{name} at parallelism {level}", file=sys.stderr, flush=True)
            trace, _ = synth.generate_table(cfg)
            truth = {p.id: visits(p.to_json()["root"]) for p in infer.true_patterns(trace)}
            default = None
            for preset in presets:
                run, result = run_preset(trace, truth, name, level, preset)
                runs.append(run)
                if preset == infer.PRESETS[0]:
                    default = result
            if args.no_diagnosis:
                continue
            if default is None:  # the ceiling starts from the default's answer
                default = infer.infer_nesting(trace)
            c = ceiling(default, trace)
            e = infer.error_sources(default, trace)
            ceilings.append(
                f"| {name} | {level} | {default.mean_parallelism:.1f} | {c['default']:.1%} | "
                f"{e['answer_ll']:.3f} / {e['truth_ll']:.3f} ({e['truth_ll'] - e['answer_ll']:+.3f}) | "
                f"{e['kept']:.1%} | {e['verdict']} | "
                f"{c['kept']:.1%} ({c['kept_rounds']}) | {c['reached']:.1%} ({c['reached_rounds']}) |"
            )
    fanout = [r for r in runs if r.workload == FANOUT and r.level.split()[0] in ("5", "10")]

    print(
        f"{args.messages:,} messages per trace; parallelism asked (measured: mean candidate "
        "parents per child call)."
    )
    print("Top-N missing: share of the true top N not among the inferred top N, no count tolerance.")
    print()
    print(
        "| workload | parallelism | measured | preset | exact instances | requests fully right "
        "| calls right parent | false patterns | top-5 missing | top-10 missing | time |"
    )
    print("|---|---|---:|---|---:|---:|---:|---:|---:|---:|---:|")
    print("\n".join(accuracy_rows(runs)))
    if fanout:
        print()
        print(
            f"`{FANOUT}`: true patterns found, by how many inferred patterns (one each when the "
            "calls made at once are grouped whatever their order); other orders: inferred patterns "
            "that are not true but have a true pattern's visits (its calls in another order or "
            "grouping); latency error: relative error of the per-visit mean latency and delay "
            "over the true patterns found, median / p90."
        )
        print()
        print(
            "| parallelism | measured | preset | true patterns | found, by inferred | each found once "
            "| other orders | true top 10 all found | latency error |"
        )
        print("|---|---:|---|---:|---:|---|---:|---|---:|")
        print("\n".join(fanout_rows(fanout)))
    print()
    print(
        "Model error and search error. Shares of calls with their true parent: the default's "
        "answer. Under the model the run learnt (its chain model and visit shapes), the answer's "
        "and the truth's log-likelihood in nats per call: the truth lower is model error. The "
        "run's own chain and request rounds started from the truth: the share they keep. Then the "
        "ceiling of chain rounds with the model learnt once from the true parents, the default's "
        f"settings, up to {CEILING_ROUNDS} rounds (rounds run in brackets): started from the "
        "truth (kept), and from the default's answer (reached)."
    )
    print()
    print(
        "| workload | parallelism | measured | default | log-likelihood: answer / truth "
        "| run's rounds from the truth: kept | error | true model: kept | true model: reached |"
    )
    print("|---|---|---:|---:|---:|---:|---|---:|---:|")
    print("\n".join(ceilings))
    print(f"done in {time.perf_counter() - t_start:.0f} s", file=sys.stderr)


if __name__ == "__main__":
    main()
