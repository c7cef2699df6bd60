"""Reproduce the nesting experiments of the paper on synthetic traces; writes a report.

    python benchmarks/paper_nesting.py [--messages 200000] [--out docs/paper-reproduction.md]

Figure 12 (the added 200 ms at WS2), Figure 17 (top-N missing rate at a mean
parallelism of about 42, and against parallelism), Figures 18-20 (pathological
patterns against parallelism and delay variance), Figure 21 (capture loss) and
Figure 22 (clock skew), each for the presets ``paper`` (the paper's scoreboard),
``fast`` and the default (``accurate``, ours), with a diagnosis of the chain rounds.
The file's convolution block (between its markers) is left as it is.
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

import numpy as np  # noqa: E402

import infer  # noqa: E402
import synth  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "samples" / "synth"
PAPER = "paper (preset paper: delay board, overlap_penalty=2)"
FAST = "fast (preset fast: ours with at most two chain rounds)"
OURS = "ours (the default preset, accurate)"
#: Row label -> ``NestingParams`` preset.
SETTINGS = {PAPER: "paper", FAST: "fast", OURS: "accurate"}
TOP_NS = (1, 2, 3, 5, 10, 15, 20, 30)
TOLERANCES = (0.0, 0.02, 0.06)


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
    for setting, preset in SETTINGS.items():
        found = {}
        for name in ("multitier", "multitier-slow"):
            cfg = replace(
                synth.load_config(SAMPLES / f"{name}.toml"), messages=messages, parallelism=parallelism
            )
            trace, truth = synth.generate_table(cfg)
            doc = infer.infer_nesting(trace, preset).to_json()
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


def _skewed(messages: int, parallelism: float, std_ratio: float | None = None, seed: int = 1):
    cfg = replace(
        synth.load_config(SAMPLES / "multitier-skewed.toml"),
        messages=messages,
        parallelism=parallelism,
        seed=seed,
    )
    return synth.with_delay_spread(cfg, std_ratio) if std_ratio else cfg


def _run(trace, preset: str, ns: tuple[int, ...] = (1,), **overrides) -> tuple[dict, float, float]:
    """``preset`` (with single ``overrides``) on ``trace``: its report, parallelism, time."""
    t0 = time.perf_counter()
    result = infer.infer_nesting(trace, preset, **overrides)
    dt = time.perf_counter() - t0
    report = infer.evaluate_paths(
        result.to_json(), trace, instances=result.instances_table(), ns=ns, tolerances=TOLERANCES
    )
    return report, result.mean_parallelism, dt


def _exact(report: dict) -> float:
    inst = report["instances"]
    return 1 - inst["false_negatives"] / inst["true"]


def _missing(report: dict, n: int) -> str:
    return " / ".join(f"{r['missing_rate']:.0%}" for r in report["top_n"] if r["n"] == n)


def figure17(
    messages: int, parallelism: float, std_ratio: float | None = None
) -> tuple[list[str], float, dict[str, tuple[str, float]]]:
    """Top-N missing rate for N = 1..30 at tolerances 0/2/6%, every preset, one trace;
    also, per preset, which lists are within 1/N and the share of exact instances."""
    trace, _ = synth.generate_table(_skewed(messages, parallelism, std_ratio))
    every_n = tuple(range(1, 31))
    reports = {name: _run(trace, preset, every_n) for name, preset in SETTINGS.items()}
    rows = []
    for n in TOP_NS:
        cells = " | ".join(_missing(reports[name][0], n) for name in SETTINGS)
        rows.append(f"| {n} | {1 / n:.0%} | {cells} |")
    within = []
    for name in SETTINGS:
        over = [
            r["n"]
            for r in reports[name][0]["top_n"]
            if r["tolerance"] == 0.0 and r["missing_rate"] > 1 / r["n"] + 1e-9
        ]
        within.append("all" if not over else f"{30 - len(over)} (not {_ranges(over)})")
        # The bound 1/N allows one missing pattern in every top-N list.
    rows.append(f"| N = 1..30 within 1/N at 0% | | {' | '.join(within)} |")
    exact = " | ".join(f"{_exact(reports[name][0]):.1%}" for name in SETTINGS)
    rows.append(f"| exact instances | | {exact} |")
    times = " | ".join(f"{reports[name][2]:.1f} s" for name in SETTINGS)
    rows.append(f"| time | | {times} |")
    summary = {name: (w, _exact(reports[name][0])) for name, w in zip(SETTINGS, within, strict=True)}
    return rows, reports[PAPER][1], summary


def model_limit(messages: int, parallelism: float, std_ratio: float | None = None) -> list[str]:
    """Chain rounds from every stage of the default before its chain rounds, with the
    model learnt as they go (the default preset) and, for diagnosis, learnt once from
    the true parents."""
    from dataclasses import replace as copy_with

    from infer.candidates import CandidateChunks, Scoreboard
    from infer.chains import chain_rounds
    from infer.patterns import build_patterns

    trace, _ = synth.generate_table(_skewed(messages, parallelism, std_ratio))
    start = infer.infer_nesting(trace, chains=0)
    truth = infer.true_parents(start.pairs, trace)
    pairs, n_nodes = start.pairs, len(start.nodes)
    params = infer.NestingParams.preset("accurate")
    chunks = CandidateChunks(pairs, 0, Scoreboard(params, n_nodes), siblings=True)
    rows = []
    for label, source in (
        ("learnt as it goes (the default preset)", None),
        ("learnt from the true parents", truth),
    ):
        parent, _, ran = chain_rounds(
            pairs, chunks, start.parent, params, n_nodes, params.chains, model_from=source
        )
        patterns, instance, index = build_patterns(pairs, parent, start.nodes, sort=start.sort)
        result = copy_with(start, parent=parent, patterns=patterns, instance=instance, pattern_index=index)
        report = infer.evaluate_paths(
            result.to_json(),
            trace,
            instances=result.instances_table(),
            ns=tuple(range(1, 31)),
            tolerances=(0.0,),
        )
        missing = [round(r["missing_rate"] * r["n"]) for r in report["top_n"]]
        kid = truth >= 0
        rows.append(
            f"| {label} | {ran} | {np.mean(parent[kid] == truth[kid]):.1%} | {_exact(report):.1%} | "
            f"{max(missing)} | {sum(m <= 1 for m in missing)} of 30 |"
        )
    return rows


def _ranges(ns: list[int]) -> str:
    """``[3, 4, 5, 9]`` as ``"3-5, 9"``."""
    out, start = [], ns[0]
    for a, b in zip(ns, [*ns[1:], None], strict=True):
        if b != a + 1:
            out.append(f"{start}-{a}" if a != start else f"{a}")
            start = b
    return ", ".join(out)


def accuracy(messages: int, levels: list[float], std_ratio: float | None = None) -> list[str]:
    rows = []
    for p in levels:
        trace, _ = synth.generate_table(_skewed(messages, p, std_ratio))
        for setting, preset in SETTINGS.items():
            report, par, dt = _run(trace, preset, (1, 5, 10))
            pats = report["patterns"]
            rows.append(
                f"| {par:.1f} | {setting} | {_exact(report):.1%} | {_missing(report, 1)} | "
                f"{_missing(report, 5)} | {_missing(report, 10)} | "
                f"{pats['false_negatives']} / {pats['false_positives']} | {dt:.2f} s |"
            )
    return rows


def pathological(messages: int, levels: list[float], std_ratios: list[float | None]) -> list[str]:
    rows = []
    for name in ("children-parallel", "children-0-2", "children-d-cc", "penalty-breaker"):
        for p in levels:
            for ratio in std_ratios:
                cfg = replace(synth.load_config(SAMPLES / f"{name}.toml"), messages=messages, parallelism=p)
                if ratio:
                    cfg = synth.with_delay_spread(cfg, ratio)
                trace, _ = synth.generate_table(cfg)
                std = f"{ratio:.0%}" if ratio else "as configured"
                for setting, preset in SETTINGS.items():
                    report, par, _ = _run(trace, preset)
                    pats = report["patterns"]
                    rows.append(
                        f"| {name} | {par:.1f} | {std} | {setting} | {_exact(report):.1%} | "
                        f"{pats['false_negatives']} / {pats['false_positives']} | {_missing(report, 1)} |"
                    )
    return rows


def faults(messages: int) -> list[str]:
    rows = []
    base = _skewed(messages, 2.0)
    cases = [("none", base, {})]
    # The trace's mean rate is about 1,300 messages/s: drains around it lose 0.05% to 12%.
    for rate in (1450.0, 1380.0, 1340.0, 1300.0, 1250.0, 1200.0, 1150.0):
        cases.append(
            (f"capture {rate:g} pkt/s", replace(base, faults=replace(base.faults, loss_rate_pps=rate)), {})
        )
    for skew in (0.01, 0.03, 0.06):
        faulty = replace(base, faults=replace(base.faults, skew={"WS2": (skew, 0.0)}))
        cases.append((f"WS2 skew +{skew * 1e3:g} ms", faulty, {}))
        cases.append((f"WS2 skew +{skew * 1e3:g} ms, tolerance 30 ms", faulty, {"tolerance_s": 0.03}))
        cases.append(
            (
                f"WS2 skew +{skew * 1e3:g} ms, tolerance 30 ms + smoothing",
                faulty,
                {"tolerance_s": 0.03, "smooth_bins": 2.0},
            )
        )
    for label, cfg, extra in cases:
        engine_report = synth.generate_trace(cfg, _TMP / "fault.parquet")
        trace = synth_trace(_TMP / "fault.parquet")
        lost = engine_report.lost / (engine_report.lost + engine_report.messages)
        for setting, preset in SETTINGS.items():
            if "smooth_bins" in extra and infer.NestingParams.preset(preset).board == "joint":
                continue  # smoothing is a delay-board option
            report, _, _ = _run(trace, preset, (1, 5), **extra)
            pats = report["patterns"]
            rows.append(
                f"| {label} | {setting} | {lost:.1%} | {_exact(report):.1%} | "
                f"{pats['false_negatives']} / {pats['false_positives']} | {_missing(report, 1)} | "
                f"{_missing(report, 5)} |"
            )
    return rows


def synth_trace(path: Path):
    import tracefmt

    return tracefmt.read_trace(path)


_TMP = Path(tempfile.mkdtemp(prefix="wirepath-paper-"))


def _keep_block(path: Path, text: str, begin: str = "<!-- convolution:begin -->") -> str:
    """``text`` followed by the block another script writes into the same file, if any."""
    old = path.read_text(encoding="utf-8") if path.exists() else ""
    end = begin.replace("begin", "end")
    if begin in old and end in old:
        return text.rstrip("\n") + "\n\n" + old[old.index(begin) : old.index(end) + len(end)] + "\n"
    return text


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=200_000)
    ap.add_argument("--out", default=str(ROOT / "docs" / "paper-reproduction.md"))
    args = ap.parse_args()
    m, small = args.messages, min(args.messages, 50_000)
    fig12 = figure12(m, 10.0)
    fig17, p17, s17 = figure17(m, 42.0)
    fig17_low, p17_low, s17_low = figure17(m, 42.0, std_ratio=0.05)
    fig17_p5, p5, _ = figure17(m, 5.0, std_ratio=0.05)
    limit = model_limit(m, 42.0)
    acc = accuracy(m, [2.0, 5.0, 10.0, 20.0, 42.0])
    acc_low = accuracy(m, [2.0, 5.0, 10.0, 20.0, 42.0], std_ratio=0.05)
    patho = pathological(small, [2.0, 10.0], [None])
    patho_std = pathological(small, [2.0], [0.05, 0.1, 0.25, 0.5])
    fault_rows = faults(min(m, 100_000))
    head17 = "| N | paper's bound 1/N | " + " | ".join(f"{name}: 0 / 2 / 6%" for name in SETTINGS) + " |"
    rule17 = "|---:|---:|" + "---:|" * len(SETTINGS)
    head_acc = (
        "| parallelism | scoreboard | exact instances | top-1 missing | top-5 missing | top-10 missing "
        "| patterns FN / FP | time |"
    )
    head_patho = (
        "| workload | parallelism | delay std | scoreboard | exact instances | patterns FN / FP "
        "| top-1 missing |"
    )
    text = [
        "# Reproducing the paper's nesting experiments",
        "",
        f"Made by `python benchmarks/paper_nesting.py --messages {m}`; every number below",
        "comes from that run (synthetic traces from `samples/synth/`, truth from their truth columns).",
        "Three presets of `infer.NestingParams` throughout (`wirepath infer nesting --preset`):",
        f"**{PAPER}**, the paper's algorithm with its recommended penalty weight;",
        f"**{FAST}**: the child-return-to-parent-return gap scored together with the call",
        "delay, bin densities instead of raw counts, two rounds in which the overlap penalty",
        "counts the children each parent was actually given, then one in which each",
        "candidate is scored by the gaps to the siblings it would have, then at most two",
        "chain rounds (below); and",
        f"**{OURS}** (the default): the same with up to ten chain rounds, in which each child",
        "moves, or swaps with a call to the same node, or a run of calls made at once moves",
        "together, to where its node's chains of events are most likely (`infer/chains.py`,",
        "[inference.md](inference.md)).",
        "",
        "Missing rates are given at count tolerances 0 / 2 / 6%: a true top-N pattern counts",
        "as found when it is among the inferred top N, or within the tolerance of the N-th",
        "inferred count. Exact instances: inferred instances equal to a true one (same calls,",
        "same parent links).",
        "",
        "## Figure 12: the added delay at WS2",
        "",
        "`multitier-slow.toml` adds 200 ms at WS2 between its AUTH call and its AP call. The",
        "table gives the mean WS2 -> AP delay (WS2's call to its AP call) in the most frequent",
        f"pattern where WS2 calls AUTH then an AP, at parallelism 10, {m:,} messages each.",
        "",
        "| scoreboard | source | normal | slow | change |",
        "|---|---|---:|---:|---:|",
        *fig12,
        "",
        "## Figure 17: top-N missing rate at high parallelism",
        "",
        "`multitier-skewed.toml`: the multitier system with uneven load-balancer odds, so its",
        "48 patterns have distinct frequencies (with `multitier.toml`'s 16 equally likely",
        f"patterns every top-N list is a tie). {m:,} messages at a mean parallelism of {p17:.1f}",
        "(candidate parents per child call), delays as configured (standard deviations",
        "about a quarter of the means):",
        "",
        head17,
        rule17,
        *fig17,
        "",
        "The same trace with every delay's standard deviation set to 5% of its mean",
        f"(parallelism {p17_low:.1f}):",
        "",
        head17,
        rule17,
        *fig17_low,
        "",
        f"And at a mean parallelism of {p5:.1f}, standard deviations 5%:",
        "",
        head17,
        rule17,
        *fig17_p5,
        "",
        "What limits chain rounds with the workload's own delays at parallelism 42: the",
        "same search from the same start, judged by the model learnt from the true parents",
        "(a diagnosis only; inference never sees them):",
        "",
        "| model | rounds run | links right | exact instances | most missing from a top-N (N = 1..30) "
        "| top-N lists within 1/N |",
        "|---|---:|---:|---:|---:|---:|",
        *limit,
        "",
        "### Against parallelism",
        "",
        "Delays as configured:",
        "",
        head_acc,
        "|---:|---|---:|---:|---:|---:|---:|---:|",
        *acc,
        "",
        "Standard deviations 5% of the means:",
        "",
        head_acc,
        "|---:|---|---:|---:|---:|---:|---:|---:|",
        *acc_low,
        "",
        "## Pathological patterns (Figures 18-20)",
        "",
        f"Each workload at {small:,} messages; top-1 missing at tolerances 0/2/6%. Against",
        "parallelism (Figure 18):",
        "",
        head_patho,
        "|---|---:|---|---|---:|---:|---:|",
        *patho,
        "",
        "Against the delays' standard deviation, as a share of their means, at parallelism 2",
        "(Figures 19-20):",
        "",
        head_patho,
        "|---|---:|---|---|---:|---:|---:|",
        *patho_std,
        "",
        "## Message loss and clock skew (Figures 21-22)",
        "",
        f"`multitier-skewed.toml` at parallelism 2, {min(m, 100_000):,} messages. Loss comes",
        "from the capture model (a 64-packet queue drained at the given rate, so losses come in",
        "bursts at peaks); skew moves WS2's clock ahead. A tolerance window lets calls that",
        "start or end up to the window away count as candidates; smoothing (a delay-board",
        "option) spreads each scoreboard row with a Gaussian of 2 bins.",
        "",
        "| fault | scoreboard | messages lost | exact instances | patterns FN / FP | top-1 missing "
        "| top-5 missing |",
        "|---|---|---:|---:|---:|---:|---:|",
        *fault_rows,
        "",
        *conclusions(s17, s17_low),
    ]
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(_keep_block(out, "\n".join(text) + "\n"), encoding="utf-8")
    print(f"wrote {out}")


def conclusions(s17: dict[str, tuple[str, float]], s17_low: dict[str, tuple[str, float]]) -> list[str]:
    """The closing summary, its Figure 17 numbers from this run."""
    return [
        "## Where this stands",
        "",
        "- **Figure 12 reproduces** with every preset: the 200 ms added at WS2 shows on the",
        "  WS2 -> AP edge (the table above; the paper's scoreboard is within a few ms).",
        "- **Figure 17 at the paper's parallelism of 42**, the top-N lists (N = 1..30) within",
        "  the paper's bound 1/N with no count tolerance: with delays that vary by 5% of their",
        f"  means the default keeps {s17_low[OURS][0]} of the 30 lists within it, with",
        f"  {s17_low[OURS][1]:.1%} of the instances exact (the paper's scoreboard: {s17_low[PAPER][0]},",
        f"  {s17_low[PAPER][1]:.1%} exact); with the workload's own delays (standard deviations a",
        f"  quarter of the means) {s17[OURS][0]}, {s17[OURS][1]:.1%} exact (the paper's:",
        f"  {s17[PAPER][0]}, {s17[PAPER][1]:.1%}). The paper",
        "  does not give its trace's delay distributions. What limits the default there is the",
        "  search more than the model: the table of the model learnt from the true parents",
        "  shows how much more the same search keeps within the bound when it judges by the",
        "  truth's model, and benchmarks/accuracy.py shows that chain rounds started from the",
        "  truth keep over 92% of the links at this parallelism where they reach about 60% from",
        "  the default's own start.",
        "- **Our changes** (each measured above) are the joint scoreboard (the parent's return",
        "  gap scored with the call delay), bin densities instead of raw counts (raw counts",
        "  favour long delays, whose exponential bins are wide), penalty rounds counting the",
        "  children each parent was given, a sibling round, and chain rounds: each node turns",
        "  every event it receives into one it sends, a round learns how likely each link is",
        "  and moves or swaps children, or moves a run of calls made at once, to where their",
        "  node's chains are most likely. Calls made at once are one unordered group in the",
        "  pattern shapes, and the chain model waits for a group's latest return.",
        "- **Pathological patterns (Figures 18-20)**, **loss (Figure 21)** and **skew (Figure",
        "  22)**: the tables above; accuracy falls with parallelism and with delay variance, as",
        "  in the paper; `children-parallel` (two calls at once to the same child) is no longer",
        "  the hardest for the default, which now treats the two calls as one group. Under",
        "  skew the default estimates its own window from the calls that stray outside every",
        "  call into their node, so it needs no `--tolerance` for the 10 and 30 ms skews; at",
        "  60 ms it fails with or without a 30 ms window, as the paper's did beyond its window.",
    ]


if __name__ == "__main__":
    main()
