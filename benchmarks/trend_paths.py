"""False alarms and detection of ``trend from-paths``, with and without ``--instances``.

Synthetic runs of one system (``synth``, a seed a run): ``--runs`` unchanged, then
``--changed`` runs with ``--delay-ms`` added to every call to ``--node`` (its ``before``
delay, so the node's visits and every visit above them take that much longer). Each run
is inferred (``infer nesting``), its paths file and instances table written, and imported
twice with ``trend from-paths``: into one store without ``--instances`` (a run is one
sample, the paths file's mean) and into another with it (one trial per request and call).
``trend analyze`` (MDL) then tells, for both side by side:

- after the unchanged runs, the false alarms: series in a regression at their newest run,
  and series with any regression or progression at all (the grouping split them);
- after the changed runs, the detection: the series the delay touches (the node's visits,
  the visits above them, their patterns) in a regression at their newest run; and the
  false alarms among the series it does not touch.

Series of patterns the inference found in few runs (its mistakes) are counted apart:
"steady" series are those found in every run.

Usage::

    python benchmarks/trend_paths.py                      # multitier, 10 + 5 runs, DB2 +1 ms
    python benchmarks/trend_paths.py --messages 200000 --delay-ms 0.5
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import io
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

# This directory holds a synth.py of its own: the package, not it.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
ROOT = Path(__file__).resolve().parents[1]
DAY_NS = 86_400 * 10**9


def _delays_mapped(config: Any, change: Any, node: str | None = None) -> Any:
    """``config`` with ``change`` applied to every delay of its calls (only to the
    ``before`` delay at ``node`` when one is given)."""
    from synth import Delay, NodeDelay

    def nd(d: NodeDelay) -> NodeDelay:
        return NodeDelay(
            Delay(change(d.default.components)),
            {k: Delay(change(v.components)) for k, v in d.by_node.items()},
        )

    def call(c: Any) -> Any:
        if node is None:
            return dataclasses.replace(c, before=nd(c.before), between=nd(c.between), after=nd(c.after))
        if node not in c.to:
            return c
        by_node = {**c.before.by_node, node: Delay(change(c.before.for_node(node).components))}
        return dataclasses.replace(c, before=NodeDelay(c.before.default, by_node))

    tracelets = tuple(dataclasses.replace(t, calls=tuple(call(c) for c in t.calls)) for t in config.tracelets)
    if tracelets == config.tracelets and node is not None:
        raise SystemExit(f"no call of {config.path} goes to {node!r}")
    return dataclasses.replace(config, tracelets=tracelets)


def _delayed(config: Any, node: str, delay_s: float) -> Any:
    """``config`` with ``delay_s`` more before every call to ``node`` answers."""
    return _delays_mapped(config, lambda comps: tuple((m + delay_s, sd, w) for m, sd, w in comps), node)


def _scaled(config: Any, factor: float) -> Any:
    """``config`` with every delay ``factor`` times as long (a run on a slower machine)."""
    return _delays_mapped(config, lambda comps: tuple((m * factor, sd * factor, w) for m, sd, w in comps))


def _cli(*argv: str) -> str:
    """``wirepath ARGV`` in process; its standard output."""
    from wirepath.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        status = main(list(argv))
    if status != 0:
        raise SystemExit(f"wirepath {' '.join(argv)}: exit {status}")
    return out.getvalue()


def _touched(doc: dict[str, Any], node: str, prefix: str = "path:") -> set[str]:
    """The series names a delay at ``node`` touches: its visits, the visits above them
    and their patterns."""
    from trend import path_series

    s = path_series(doc, prefix=prefix)
    hit = np.array([n == node for n in s.node])
    # Up the tree, a level at a time (a visit's parent comes before it in preorder).
    for i in range(s.nesting - 1, -1, -1):
        if hit[i] and s.parent[i] >= 0:
            hit[s.parent[i]] = True
    return {s.names[i] for i in np.flatnonzero(hit)}


def _analysis(store: Path) -> dict[str, dict[str, Any]]:
    doc = json.loads(_cli("trend", "analyze", "--store", str(store), "--fresh", "--json"))
    return {s["test"]: s for s in doc["series"]}


def _marks(series: dict[str, Any]) -> list[str]:
    return [r["mark"] for r in series["runs"]]


def _score(analysis: dict[str, dict[str, Any]], runs: int, touched: set[str] | None = None) -> dict[str, Any]:
    """False alarms (and detection, with ``touched``) of one store's analysis."""
    steady = {t for t, s in analysis.items() if len(s["runs"]) == runs}
    quiet = {t for t in analysis if touched is None or t not in touched}
    regressed = {t for t, s in analysis.items() if s["regressed"]}
    split = {t for t, s in analysis.items() if {"regression", "progression"} & set(_marks(s))}
    out = {
        "series": len(analysis),
        "steady": len(steady),
        "alarms": len(regressed & quiet),
        "alarms_steady": len(regressed & quiet & steady),
        "split": len(split & quiet),
        "split_steady": len(split & quiet & steady),
    }
    if touched is not None:
        hit = touched & steady
        out["touched_steady"] = len(hit)
        out["found_steady"] = len(regressed & hit)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", default=str(ROOT / "samples" / "synth" / "multitier.toml"))
    ap.add_argument("--messages", type=int, default=20_000)
    ap.add_argument("--parallelism", type=float, default=2.0)
    ap.add_argument("--runs", type=int, default=10, help="unchanged runs")
    ap.add_argument("--changed", type=int, default=5, help="runs with the delay")
    ap.add_argument("--node", default="DB2", help="the node whose calls take longer")
    ap.add_argument("--delay-ms", type=float, default=1.0)
    ap.add_argument("--preset", default="accurate", help="infer nesting preset")
    ap.add_argument("--trials", type=int, default=10, help="trials a run of the batched store (--trials)")
    ap.add_argument(
        "--run-noise",
        type=float,
        default=0.0,
        help="each run's delays scaled by 1 + N(0, this): run-to-run variation of the machine (e.g. 0.02)",
    )
    ap.add_argument("--out", help="keep the runs and stores here (default: a temporary directory)")
    args = ap.parse_args()

    import infer
    import synth

    base = synth.load_config(args.config)
    base = base.with_overrides(messages=args.messages, parallelism=args.parallelism)
    changed = _delayed(base, args.node, args.delay_ms / 1e3)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(args.out or tmp)
        out.mkdir(parents=True, exist_ok=True)
        variants = {
            "today": ["--min-count", "1"],
            "mean": [],
            "instances": ["--instances", "INST"],
            "batches": ["--instances", "INST", "--trials", str(args.trials)],
        }
        stores = {kind: out / f"store-{kind}" for kind in variants}
        results: dict[str, dict[str, Any]] = {}
        timing = {"infer": 0.0, **{kind: 0.0 for kind in variants}}
        doc: dict[str, Any] = {}
        noise = np.random.default_rng(7)
        for r in range(args.runs + args.changed):
            config = (base if r < args.runs else changed).with_overrides(
                seed=1000 + r, start_ns=base.start_ns + r * DAY_NS
            )
            if args.run_noise:
                config = _scaled(config, max(1.0 + args.run_noise * noise.standard_normal(), 0.1))
            trace, _ = synth.generate_table(config)
            t0 = time.perf_counter()
            result = infer.infer_nesting(trace, args.preset)
            doc = result.to_json()
            paths, inst = out / f"run{r}-paths.json", out / f"run{r}-instances.parquet"
            paths.write_text(json.dumps(doc))
            result.write_instances(inst)
            timing["infer"] += time.perf_counter() - t0
            for kind, extra in variants.items():
                t0 = time.perf_counter()
                argv = ["trend", "from-paths", str(paths), "--store", str(stores[kind]), "--build", f"r{r}"]
                _cli(*argv, *(str(inst) if a == "INST" else a for a in extra))
                timing[kind] += time.perf_counter() - t0
            if r == args.runs - 1:
                for kind, store in stores.items():
                    results[f"{kind} unchanged"] = _score(_analysis(store), args.runs)
        touched = _touched(doc, args.node)
        analyze_s = {}
        for kind, store in stores.items():
            t0 = time.perf_counter()
            analysis = _analysis(store)
            analyze_s[kind] = time.perf_counter() - t0
            results[f"{kind} changed"] = _score(analysis, args.runs + args.changed, touched)
    _report(args, results, timing, analyze_s)


#: The columns of the report: how each store was imported.
_HEADINGS = {
    "today": "mean, all",
    "mean": "mean",
    "instances": "--instances",
    "batches": "--trials {trials}",
}


def _report(
    args: argparse.Namespace,
    results: dict[str, dict[str, Any]],
    timing: dict[str, float],
    analyze_s: dict[str, float],
) -> None:
    runs = args.runs + args.changed
    kinds = list(_HEADINGS)
    print(
        f"{Path(args.config).name}, {args.messages:,} messages a run, parallelism {args.parallelism:g}, "
        f"preset {args.preset}, run-to-run noise {args.run_noise:g}: {args.runs} unchanged runs, then "
        f"{args.changed} with {args.node} +{args.delay_ms:g} ms"
    )
    heads = [_HEADINGS[k].format(trials=args.trials) for k in kinds]
    print(f"{'':42}" + "".join(f"{h:>14}" for h in heads))
    sections = [
        (
            "unchanged",
            [
                (f"after {args.runs} unchanged runs: series", "series"),
                (f"  found in all {args.runs} runs (steady)", "steady"),
                ("  false alarms (regression now)", "alarms"),
                ("    of them steady", "alarms_steady"),
                ("  split (any regression/progression)", "split"),
                ("    of them steady", "split_steady"),
            ],
        ),
        (
            "changed",
            [
                (f"after {args.changed} changed runs: series", "series"),
                (f"  found in all {runs} runs (steady)", "steady"),
                (f"  touched by {args.node} +{args.delay_ms:g} ms, steady", "touched_steady"),
                ("    in a regression now (found)", "found_steady"),
                ("  untouched in a regression now", "alarms"),
                ("    of them steady", "alarms_steady"),
            ],
        ),
    ]
    for phase, rows in sections:
        for label, key in rows:
            print(f"{label:42}" + "".join(f"{results[f'{k} {phase}'][key]:>14,}" for k in kinds))
    print(
        f"time: infer {timing['infer']:.1f} s; from-paths "
        + ", ".join(f"{timing[k]:.1f} s" for k in kinds)
        + "; analyze "
        + ", ".join(f"{analyze_s[k]:.1f} s" for k in kinds)
    )


if __name__ == "__main__":
    main()
