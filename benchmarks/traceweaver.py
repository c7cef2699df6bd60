"""Nesting on real traces: TraceWeaver's nine Jaeger data sets, scored against their spans.

    python benchmarks/traceweaver.py [--datasets hotel_load25,media_load25] [--preset NAME]
                                     [--set board=joint --set density=true ...] [--at callee]

Each data set (../shared/data/traceweaver/*.jsonl.gz, see its PROVENANCE.txt) is read
with ``tracefmt.read_jaeger`` (timestamps at the callee by default: what a capture on
each callee's host sees, its own clock), inferred with ``infer.infer_nesting`` and scored
with ``infer.evaluate_paths``. The table shows, per data set: messages, requests (true
instances), requests fully right (every call got its true parent, TraceWeaver's
measure), calls with the right parent, and the inference time.

``--preset`` names a ``NestingParams`` preset (when ``infer_nesting`` has presets);
``--set KEY=VALUE`` passes single keyword settings to ``infer_nesting`` (true/false,
integers and floats are converted, anything else stays a string).
"""

from __future__ import annotations

import argparse
import inspect
import json
import sys
import time
import warnings
from pathlib import Path
from typing import Any

# benchmarks/synth.py would shadow the synth package when this runs as a file.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

import infer  # noqa: E402
import tracefmt  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT.parent / "shared" / "data" / "traceweaver"
if not DATA.is_dir():
    DATA = Path("/work/shared/data/traceweaver")
DATASETS = tuple(f"{app}_load{load}" for app in ("hotel", "media", "node") for load in (25, 75, 125))


def parse_value(text: str) -> Any:
    """``true``/``false``, an int, a float, or the text itself.

    >>> parse_value("true"), parse_value("10"), parse_value("2.5"), parse_value("joint")
    (True, 10, 2.5, 'joint')
    """
    low = text.strip().lower()
    if low in ("true", "yes", "on"):
        return True
    if low in ("false", "no", "off"):
        return False
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def parse_sets(pairs: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise SystemExit(f"error: --set {pair!r} must be KEY=VALUE, e.g. board=joint")
        out[key.strip()] = parse_value(value)
    return out


def has_presets() -> bool:
    """Whether ``infer_nesting`` takes a preset name as its second argument."""
    return "params" in inspect.signature(infer.infer_nesting).parameters


def run_nesting(trace: Any, preset: str | None, overrides: dict[str, Any]) -> Any:
    if preset is not None:
        if not has_presets():
            raise SystemExit(
                "error: --preset needs infer_nesting(trace, params, **overrides); this one has none"
            )
        return infer.infer_nesting(trace, preset, **overrides)
    return infer.infer_nesting(trace, **overrides)


def settings_text(result: Any, preset: str | None, overrides: dict[str, Any]) -> str:
    params = getattr(result, "params", None)
    if params is not None and hasattr(params, "to_json"):
        doc = params.to_json()
        name = doc.pop("preset", None)
        keys = (
            "board",
            "density",
            "rounds",
            "siblings",
            "chains",
            "request_rounds",
            "tolerance_s",
            "use_ids",
        )
        shown = ", ".join(f"{k}={doc[k]}" for k in keys if k in doc)
        return f"preset {name or 'none (custom)'}: {shown}"
    given = ", ".join(f"{k}={v}" for k, v in overrides.items()) or "the defaults"
    return f"infer_nesting({given})" + (f", preset {preset}" if preset else "")


def measure(
    name: str, at: str, preset: str | None, overrides: dict[str, Any], diagnose: bool = True
) -> tuple[dict[str, Any], Any]:
    path = DATA / f"{name}.jsonl.gz"
    t0 = time.perf_counter()
    trace = tracefmt.read_jaeger(path, at=at)
    t1 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # settings that do nothing in a combination
        result = run_nesting(trace, preset, overrides)
    t2 = time.perf_counter()
    report = infer.evaluate_paths(result.to_json(), trace, instances=result.instances_table())
    inst, calls = report["instances"], report["calls"]
    sources = infer.error_sources(result, trace) if diagnose else {}
    row = {
        "dataset": name,
        "messages": trace.num_rows,
        "requests": inst["true"],
        "fully_right_rate": inst["fully_right_rate"],
        "right_parent_rate": calls["right_parent_rate"],
        "exact_instances_rate": 1.0 - inst["false_negatives"] / inst["true"] if inst["true"] else None,
        "convert_s": t1 - t0,
        "infer_s": t2 - t1,
        **sources,
    }
    return row, result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--datasets", default=",".join(DATASETS), help="comma-separated (default: all nine)")
    parser.add_argument("--preset", help="NestingParams preset (accurate, fast, paper, ...)")
    parser.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="infer_nesting keyword"
    )
    parser.add_argument("--at", choices=list(tracefmt.SPAN_AT), default="callee", help="timestamps (callee)")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    parser.add_argument(
        "--no-diagnosis", action="store_true", help="skip the model and search error columns (faster)"
    )
    args = parser.parse_args(argv)
    names = [n.strip() for n in args.datasets.split(",") if n.strip()]
    unknown = [n for n in names if not (DATA / f"{n}.jsonl.gz").is_file()]
    if unknown:
        raise SystemExit(f"error: no data set {unknown[0]!r} in {DATA} (have: {', '.join(DATASETS)})")
    overrides = parse_sets(args.set)
    rows, setting = [], ""
    for name in names:
        row, result = measure(name, args.at, args.preset, overrides, not args.no_diagnosis)
        rows.append(row)
        setting = setting or settings_text(result, args.preset, overrides)
        print(f"{name}: inferred in {row['infer_s']:.2f} s", file=sys.stderr)
    if args.json:
        print(json.dumps({"settings": setting, "at": args.at, "rows": rows}, indent=1))
        return 0
    print(f"timestamps at the {args.at}; {setting}")
    print()
    print(
        "| data set | messages | requests | requests fully right | calls with right parent | run time "
        "| log-likelihood: answer / truth | kept from the truth | error |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---|")
    for r in rows:
        print(
            f"| {r['dataset']} | {r['messages']:,} | {r['requests']:,} | {r['fully_right_rate']:.1%} "
            f"| {r['right_parent_rate']:.1%} | {r['infer_s']:.2f} s | {diagnosis_cells(r)} |"
        )
    if not args.no_diagnosis:
        print()
        print(DIAGNOSIS_NOTE)
    return 0


#: What the diagnosis columns mean, printed under the table.
DIAGNOSIS_NOTE = (
    "log-likelihood: nats per call of the answer and of the truth under the model the run learnt "
    "(its chain model, and with request rounds its visit shapes); kept from the truth: calls right "
    "when the run's chain and request rounds start from the truth; error: 'model' where the model "
    "prefers the answer to the truth, 'search' where it prefers the truth but the search did not "
    "reach it."
)


def diagnosis_cells(r: dict[str, Any]) -> str:
    """The diagnosis columns of a row: the two log-likelihoods, the share kept, the verdict."""
    if "answer_ll" not in r:
        return " | | "
    gap = r["truth_ll"] - r["answer_ll"]
    return f"{r['answer_ll']:.3f} / {r['truth_ll']:.3f} ({gap:+.3f}) | {r['kept']:.1%} | {r['verdict']}"


if __name__ == "__main__":
    sys.exit(main())
