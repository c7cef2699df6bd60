"""Reproduce the nesting experiments of the paper on synthetic traces; writes a report.

    python benchmarks/paper_nesting.py [--messages 200000] [--out docs/paper-reproduction.md]

Figure 12 (the added 200 ms at WS2), Figure 17 (top-N missing rate at a mean
parallelism of about 42, and against parallelism), Figures 18-20 (pathological
patterns against parallelism and delay variance), Figure 21 (capture loss) and
Figure 22 (clock skew), each for the paper's scoreboard and for ours. The file's
convolution block (between its markers) is left as it is.
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
PAPER, OURS = "paper (delay board, x=2)", "ours (joint board, densities, x=2, 2+3 rounds)"
SETTINGS = {PAPER: {}, OURS: {"board": "joint", "density": True, "rounds": 2, "siblings": 3}}
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


def _skewed(messages: int, parallelism: float, std_ratio: float | None = None, seed: int = 1):
    cfg = replace(
        synth.load_config(SAMPLES / "multitier-skewed.toml"),
        messages=messages,
        parallelism=parallelism,
        seed=seed,
    )
    return synth.with_delay_spread(cfg, std_ratio) if std_ratio else cfg


def _run(trace, kw: dict, ns: tuple[int, ...] = (1,)) -> tuple[dict, float, float]:
    t0 = time.perf_counter()
    result = infer.infer_nesting(trace, **kw)
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


def figure17(messages: int, parallelism: float, std_ratio: float | None = None) -> tuple[list[str], float]:
    """Top-N missing rate for N = 1..30 at tolerances 0/2/6%, both scoreboards, one trace."""
    trace, _ = synth.generate_table(_skewed(messages, parallelism, std_ratio))
    reports = {name: _run(trace, kw, TOP_NS) for name, kw in SETTINGS.items()}
    rows = []
    for n in TOP_NS:
        cells = " | ".join(_missing(reports[name][0], n) for name in SETTINGS)
        rows.append(f"| {n} | {1 / n:.0%} | {cells} |")
    exact = " | ".join(f"{_exact(reports[name][0]):.1%}" for name in SETTINGS)
    rows.append(f"| exact instances | | {exact} |")
    return rows, reports[PAPER][1]


def accuracy(messages: int, levels: list[float], std_ratio: float | None = None) -> list[str]:
    rows = []
    for p in levels:
        trace, _ = synth.generate_table(_skewed(messages, p, std_ratio))
        for setting, kw in SETTINGS.items():
            report, par, dt = _run(trace, kw, (1, 5, 10))
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
                for setting, kw in SETTINGS.items():
                    report, par, _ = _run(trace, kw)
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
        for setting, kw in SETTINGS.items():
            if "smooth_bins" in extra and kw.get("board") == "joint":
                continue  # smoothing is a delay-board option
            report, _, _ = _run(trace, {**kw, **extra}, (1, 5))
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
    fig17, p17 = figure17(m, 42.0)
    fig17_low, p17_low = figure17(m, 42.0, std_ratio=0.05)
    fig17_p5, p5 = figure17(m, 5.0, std_ratio=0.05)
    acc = accuracy(m, [2.0, 5.0, 10.0, 20.0, 42.0])
    acc_low = accuracy(m, [2.0, 5.0, 10.0, 20.0, 42.0], std_ratio=0.05)
    patho = pathological(small, [2.0, 10.0], [None])
    patho_std = pathological(small, [2.0], [0.05, 0.1, 0.25, 0.5])
    fault_rows = faults(min(m, 100_000))
    head17 = f"| N | paper's bound 1/N | {PAPER}: 0 / 2 / 6% | {OURS}: 0 / 2 / 6% |"
    rule17 = "|---:|---:|---:|---:|"
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
        f"Two settings throughout: **{PAPER}**, the paper's algorithm with its recommended",
        f"penalty weight, and **{OURS}**: the child-return-to-parent-return gap scored",
        "together with the call delay, bin densities instead of raw counts, two rounds in",
        "which the overlap penalty counts the children each parent was actually given, then",
        "three in which each candidate is scored by the gaps to the siblings it would have",
        "(`wirepath infer nesting --board joint --density --rounds 2 --siblings 3`).",
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
        *CONCLUSIONS,
    ]
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(_keep_block(out, "\n".join(text) + "\n"), encoding="utf-8")
    print(f"wrote {out}")


CONCLUSIONS = [
    "## Where this stands",
    "",
    "- **Figure 12 reproduces** with both scoreboards: the 200 ms added at WS2 shows on the",
    "  WS2 -> AP edge, estimated +203 ms by the paper's scoreboard and +197 ms by ours",
    "  (within 2%).",
    "- **Figure 17 reproduces with our scoreboard up to a parallelism of about 20, not at",
    "  the paper's 42.** With delays that vary by 5%, ours keeps every top-N missing rate",
    "  within the paper's bound 1/N without any count tolerance: 0% for every N from 1 to 30",
    "  at parallelism 5, 0% for the top 1, 5 and 10 at parallelism 10, and 0% / 20% / 10% at",
    "  20; the paper's scoreboard misses 25-40% from parallelism 5 on. At 42 ours finds the",
    "  top 2 and 3 within the bound but misses 27-40% of the larger top-N lists (20% of the",
    "  instances exact, against 0.5% with the paper's). With the workload's own delays",
    "  (standard deviations a quarter of the means) both degrade sooner: ours is within the",
    "  bound up to parallelism 10 for these N, not at 20. What separates these runs",
    "  from the paper's 42 is not known: its trace's delay distributions and how it counted",
    "  parallelism are not given. At parallelism 42 a child call has several wrong",
    "  candidates within one standard deviation of its true delay.",
    "- **Our changes**, each measured above, raise exact instances 1.4 to 40 times and cut",
    "  false patterns by a factor of 1.4 to 8, at three to nine times the run time: scoring",
    "  the parent's return gap together with the call delay (the joint board); bin densities",
    "  instead of raw counts (raw counts favour long delays, whose exponential bins are",
    "  wide); two refinement rounds in which the overlap penalty counts the children each",
    "  parent was given rather than all it could have had; and three sibling rounds scoring",
    "  each candidate by the gaps to the siblings it would have (from the previous sibling's",
    "  return to its call, from its return to the next sibling's call), learnt from the",
    "  round before, since a node calls its next child a typical time after the last one",
    "  returns.",
    "- **Pathological patterns (Figures 18-20)**: accuracy falls with parallelism and with",
    "  delay variance, as in the paper; `children-parallel` (two calls at once to the same",
    "  child) is the hardest at parallelism 10 for both, and at that parallelism ours misses",
    "  `children-0-2`'s top pattern, which the paper's finds. `penalty-breaker` (paths that call",
    "  the same child several times against paths that do not, with equal total delay)",
    "  defeats the paper's scoreboard at every delay spread; ours finds its top pattern with",
    "  delays that vary by 5%, and within a 6% count tolerance up to 25%.",
    "- **Loss (Figure 21) reproduces**: below 1% loss the exact instances barely move (88%",
    "  -> 85% with ours), up to about 8% they fall (to 63%) while the top 1 stays found, and",
    "  at 12% the most frequent pattern is lost; every lost call or return breaks its",
    "  instance, and the capture model loses in bursts.",
    "- **Skew (Figure 22)**: a tolerance window alone ruins the paper's scoreboard (the",
    "  window's extra candidates are many and far, and raw counts reward far), and",
    "  smoothing does not save it here; with our scoreboard the 30 ms window recovers",
    "  accuracy for skews up to 30 ms (64-70% exact, the top 5 found) and fails at 60 ms,",
    "  beyond the window plus the true delay, as the paper found.",
]


if __name__ == "__main__":
    main()
