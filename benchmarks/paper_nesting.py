"""Reproduce the nesting experiments of the paper on synthetic traces; writes a report.

    python benchmarks/paper_nesting.py [--messages 200000] [--out docs/paper-reproduction.md]

So far: Figure 12 (the added 200 ms at WS2 shows on the WS2 -> AP edge) and accuracy
against parallelism for the paper's scoreboard and for ours (Figure 17's top-N
missing rate with count tolerances 0/2/6%, and exact instances).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

# benchmarks/synth.py would shadow the synth package when this runs as a file.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

import infer  # noqa: E402
import synth  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "samples" / "synth"
SETTINGS = {
    "paper (delay board, x=2)": {},
    "ours (joint board, densities, x=0)": {"board": "joint", "density": True, "x": 0.0},
}


def _edge_delay(pattern: dict, caller: str, node: str) -> float | None:
    """Mean delay of the first visit caller -> node in a pattern tree."""
    stack = [pattern["root"]]
    while stack:
        v = stack.pop()
        if v["caller"] == caller and v["node"] == node and v["delay_s"] is not None:
            return v["delay_s"]["mean"]
        stack.extend(v["children"])
    return None


def _auth_then_ap(pattern: dict) -> bool:
    kids = [c["node"] for c in pattern["root"]["children"]]
    return pattern["root"]["node"] == "WS2" and kids[:1] == ["AUTH"] and any(k.startswith("AP") for k in kids)


def figure12(messages: int, parallelism: float) -> list[str]:
    rows = []
    for setting, kw in SETTINGS.items():
        found = {}
        for name in ("multitier", "multitier-slow"):
            cfg = replace(
                synth.load_config(SAMPLES / f"{name}.toml"), messages=messages, parallelism=parallelism
            )
            trace, truth = synth.generate_table(cfg)
            doc = infer.infer_nesting(trace, **kw).to_json()
            for source, patterns in (("inferred", doc["patterns"]), ("true", truth["patterns"])):
                best = max((p for p in patterns if _auth_then_ap(p)), key=lambda p: p["count"], default=None)
                ap = (
                    next((c["node"] for c in best["root"]["children"] if c["node"].startswith("AP")), None)
                    if best
                    else None
                )
                found[(name, source)] = _edge_delay(best, "WS2", ap) if best else None
        for source in ("true", "inferred"):
            a, b = found[("multitier", source)], found[("multitier-slow", source)]
            cell = (
                f"{a * 1e3:.1f} ms | {b * 1e3:.1f} ms | {(b - a) * 1e3:+.1f} ms"
                if a and b
                else "not found | | "
            )
            rows.append(f"| {setting} | {source} | {cell} |")
    return rows


def _relative_std(config: synth.SynthConfig, ratio: float) -> synth.SynthConfig:
    """The configuration with every delay's std set to ``ratio`` times its mean."""

    def delay(d: synth.Delay) -> synth.Delay:
        return synth.Delay(tuple((m, m * ratio, w) for m, _, w in d.components))

    def node_delay(nd: synth.NodeDelay) -> synth.NodeDelay:
        return synth.NodeDelay(delay(nd.default), {k: delay(v) for k, v in nd.by_node.items()})

    tracelets = tuple(
        replace(
            t,
            calls=tuple(
                replace(
                    c, before=node_delay(c.before), between=node_delay(c.between), after=node_delay(c.after)
                )
                for c in t.calls
            ),
        )
        for t in config.tracelets
    )
    return replace(config, tracelets=tracelets)


def accuracy(messages: int, levels: list[float], std_ratio: float | None = None) -> list[str]:
    rows = []
    for p in levels:
        cfg = replace(synth.load_config(SAMPLES / "multitier.toml"), messages=messages, parallelism=p)
        if std_ratio is not None:
            cfg = _relative_std(cfg, std_ratio)
        trace, _ = synth.generate_table(cfg)
        for setting, kw in SETTINGS.items():
            t0 = time.perf_counter()
            result = infer.infer_nesting(trace, **kw)
            dt = time.perf_counter() - t0
            report = infer.evaluate_paths(
                result.to_json(), trace, instances=result.instances_table(), ns=(5,)
            )
            inst = report["instances"]
            exact = 1 - inst["false_negatives"] / inst["true"]
            missing = " / ".join(f"{r['missing_rate']:.0%}" for r in report["top_n"])
            pats = report["patterns"]
            rows.append(
                f"| {result.mean_parallelism:.1f} | {setting} | {exact:.1%} | {missing} | "
                f"{pats['false_negatives']} / {pats['false_positives']} | {dt:.2f} s |"
            )
    return rows


def _score(trace, kw: dict) -> tuple[float, str, str]:
    result = infer.infer_nesting(trace, **kw)
    report = infer.evaluate_paths(result.to_json(), trace, instances=result.instances_table(), ns=(1,))
    inst = report["instances"]
    exact = 1 - inst["false_negatives"] / inst["true"]
    pats = report["patterns"]
    top1 = " / ".join(f"{r['missing_rate']:.0%}" for r in report["top_n"])
    return exact, f"{pats['false_negatives']} / {pats['false_positives']}", top1


def pathological(messages: int, levels: list[float]) -> list[str]:
    rows = []
    for name in ("children-parallel", "children-0-2", "children-d-cc", "penalty-breaker"):
        for p in levels:
            cfg = replace(synth.load_config(SAMPLES / f"{name}.toml"), messages=messages, parallelism=p)
            trace, _ = synth.generate_table(cfg)
            for setting, kw in SETTINGS.items():
                exact, pats, top1 = _score(trace, kw)
                rows.append(f"| {name} | {p:g} | {setting} | {exact:.1%} | {pats} | {top1} |")
    return rows


def faults(messages: int) -> list[str]:
    rows = []
    base = replace(synth.load_config(SAMPLES / "multitier.toml"), messages=messages, parallelism=2.0)
    cases = [("none", base, {})]
    for rate in (4000.0, 2500.0, 1800.0):
        cases.append(
            (f"capture {rate:g} pkt/s", replace(base, faults=replace(base.faults, loss_rate_pps=rate)), {})
        )
    for skew in (0.01, 0.03, 0.06):
        faulty = replace(base, faults=replace(base.faults, skew={"WS2": (skew, 0.0)}))
        cases.append((f"WS2 skew +{skew * 1e3:g} ms", faulty, {}))
        cases.append(
            (
                f"WS2 skew +{skew * 1e3:g} ms, tolerance 30 ms + smoothing",
                faulty,
                {"tolerance_s": 0.03, "smooth_bins": 2.0},
            )
        )
        cases.append(
            (
                f"WS2 skew +{skew * 1e3:g} ms, tolerance 30 ms + smoothing + densities",
                faulty,
                {"tolerance_s": 0.03, "smooth_bins": 2.0, "density": True},
            )
        )
    for label, cfg, extra in cases:
        engine_report = synth.generate_trace(cfg, _TMP / "fault.parquet")
        trace = synth_trace(_TMP / "fault.parquet")
        lost = engine_report.lost / (engine_report.lost + engine_report.messages)
        exact, pats, top1 = _score(trace, extra)
        rows.append(f"| {label} | {lost:.1%} | {exact:.1%} | {pats} | {top1} |")
    return rows


def synth_trace(path: Path):
    import tracefmt

    return tracefmt.read_trace(path)


_TMP = Path(tempfile.mkdtemp(prefix="wirepath-paper-"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=200_000)
    ap.add_argument("--out", default=str(ROOT / "docs" / "paper-reproduction.md"))
    args = ap.parse_args()
    fig12 = figure12(args.messages, 10.0)
    acc = accuracy(args.messages, [2.0, 5.0, 10.0, 20.0, 40.0])
    acc_low = accuracy(args.messages, [10.0, 40.0], std_ratio=0.05)
    patho = pathological(min(args.messages, 50_000), [2.0, 10.0])
    fault_rows = faults(min(args.messages, 100_000))
    text = [
        "# Reproducing the paper's nesting experiments",
        "",
        f"Made by `python benchmarks/paper_nesting.py --messages {args.messages}`; every number below",
        "comes from that run (synthetic traces from `samples/synth/`, truth from their truth columns).",
        "",
        "## Figure 12: the added delay at WS2",
        "",
        "`multitier-slow.toml` adds 200 ms at WS2 between its AUTH call and its AP call. The",
        "table gives the mean WS2 -> AP delay (WS2's call to its AP call) in the most frequent",
        f"pattern where WS2 calls AUTH then an AP, at parallelism 10, {args.messages:,} messages each.",
        "",
        "| scoreboard | source | normal | slow | change |",
        "|---|---|---:|---:|---:|",
        *fig12,
        "",
        "## Accuracy against parallelism (Figure 17's measures)",
        "",
        "`multitier.toml` at increasing parallelism. Exact instances: inferred instances equal",
        "to a true one (same calls, same parent links). Top-5 missing: share of the true five",
        "most frequent patterns not among the inferred top five, at count tolerances 0/2/6%.",
        "Patterns: false negatives / false positives.",
        "",
        "| parallelism | scoreboard | exact instances | top-5 missing | patterns FN / FP | time |",
        "|---:|---|---:|---:|---:|---:|",
        *acc,
        "",
        "The same with every delay's standard deviation set to 5% of its mean (the delay",
        "variance axis of Figures 19-20):",
        "",
        "| parallelism | scoreboard | exact instances | top-5 missing | patterns FN / FP | time |",
        "|---:|---|---:|---:|---:|---:|",
        *acc_low,
        "",
        "## Pathological patterns (Figure 18)",
        "",
        f"Each workload at {min(args.messages, 50_000):,} messages. Top-1 missing at tolerances 0/2/6%.",
        "",
        "| workload | parallelism | scoreboard | exact instances | patterns FN / FP | top-1 missing |",
        "|---|---:|---|---:|---:|---:|",
        *patho,
        "",
        "## Message loss and clock skew (Figures 21-22)",
        "",
        f"`multitier.toml` at parallelism 2, {min(args.messages, 100_000):,} messages; paper's scoreboard",
        "unless the row says otherwise. A tolerance window lets calls that end or start up to",
        "the window away count as candidates; raw counts then favour the long delays of the",
        "many extra candidates, densities do not.",
        "Loss comes from the capture model (64-packet queue); skew moves WS2's clock ahead.",
        "",
        "| fault | messages lost | exact instances | patterns FN / FP | top-1 missing |",
        "|---|---:|---:|---:|---:|",
        *fault_rows,
        "",
        "## Where this stands",
        "",
        "Figure 12 reproduces: the added 200 ms shows on the WS2 -> AP edge. Figure 17 does",
        "not yet: the paper reports the top patterns found at a parallelism of 42, while here",
        "the paper's scoreboard keeps few exact instances beyond a parallelism of 5, even with",
        "delays that vary by only 5%. Our joint scoreboard (call delay and return gap scored",
        "together, as densities) keeps several times more, but not enough. The 16 patterns of",
        "`multitier.toml` are about equally frequent, so its top-N lists are near-ties.",
        "Figures 18, 21 and 22 have first measurements above. Still to do: find what",
        "separates these runs from the paper's (its candidate and parallelism definitions,",
        "the penalty reading, its workload's delays), the delay-variance sweeps of Figures",
        "19-20, and defaults chosen by these measurements.",
        "",
    ]
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text("\n".join(text), encoding="utf-8")
    print("\n".join(text))


if __name__ == "__main__":
    main()
