"""The ``convolution``-related verbs of the command line: ``wirepath infer convolution``."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import infer
import tracefmt
from viz.paths import format_path
from wirepath._cli import Parser, add_cluster_options, count, emit, runner

__all__ = ["register"]

_AUTO_LAGS = 1000  # --max-lag auto: this many quanta


def _cmd_infer_convolution(args: argparse.Namespace) -> int:
    tracefmt.distinct_outputs([args.trace], [args.out])
    trace = tracefmt.read_any_trace(args.trace)
    quantum_s = tracefmt.parse_duration_ns(args.quantum) / 1e9
    if args.max_lag == "auto":
        max_lag_s = _AUTO_LAGS * quantum_s
    else:
        max_lag_s = tracefmt.parse_duration_ns(args.max_lag) / 1e9
    band_s = tracefmt.parse_duration_ns(args.band) / 1e9
    # The trace is read and the flags parsed before a cluster is started for nothing.
    with runner(args) as run:
        result = infer.infer_convolution(
            trace,
            quantum_s=quantum_s,
            max_lag_s=max_lag_s,
            n_sigma=args.n_sigma,
            sep_sigma=args.sep_sigma,
            band_s=band_s,
            root=args.root or None,
            min_count=args.min_count,
            short_paths=not args.keep_short_paths,
            max_repeats=args.max_repeats,
            stop_at_root=not args.through_root,
            plausible=not args.keep_implausible,
            max_depth=args.max_depth,
            count_estimate=args.count_estimate,
            delay_estimate=args.delay_estimate,
            method=args.method,
            runner=run,
        )
    doc = result.to_json(top=args.top)
    out = Path(args.out)
    tracefmt.write_atomic(out, json.dumps(doc, indent=1) + "\n")
    st = doc["stats"]
    lines = [
        f"{st['messages']:,} messages on {st['edges']} edges; {st['quanta']:,} quanta of "
        f"{tracefmt.format_duration_ns(round(quantum_s * 1e9))}, lags up to "
        f"{tracefmt.format_duration_ns(round(max_lag_s * 1e9))}; {st['pairs_correlated']} edge pairs "
        f"correlated, {st['spikes']} spikes",
        f"roots: {', '.join(doc['roots']) or '(none)'}; {len(doc['paths'])} paths "
        f"({st['vertices']} vertices); wrote {out}",
    ]
    lines += [f"note: {n}" for n in doc["notes"]]
    for k, p in enumerate(doc["paths"][: args.show], 1):
        lines.append(f"#{k:<3} {p['count']:>10,.0f}  {format_path(p)}")
    emit(args, doc, "\n".join(lines))
    return 0


def register(verbs: argparse._SubParsersAction, algos: argparse._SubParsersAction) -> None:
    """Add this module's verbs to ``verbs`` (and algorithms to ``infer``'s ``algos``)."""
    p: Parser = algos.add_parser(
        "convolution",
        help="convolution algorithm for free-form messages",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="The convolution algorithm (Aguilera et al., SOSP 2003) for any messaging\n"
        "pattern: every directed edge becomes a signal (square root of its messages per\n"
        "quantum); each edge into a node is cross-correlated with each edge out of it (FFT,\n"
        "or pairs of occupied quanta when cheaper); spikes give the causal delays; paths\n"
        "grow from the roots hop by hop. Only timestamp, sender and receiver are read.\n"
        "Prints the paths by estimated count.\n\n"
        "examples: wirepath infer convolution mail.parquet --quantum 5s --max-lag 300s --out p.json\n"
        "          wirepath infer convolution t.parquet --quantum 1ms --band 2ms --root client --out p.json\n"
        "          wirepath infer convolution big.parquet --quantum 1ms --workers 8 --out p.json\n\n"
        "With --workers or --scheduler the edge pairs are correlated by the tasks of a Dask\n"
        "cluster (each edge's messages shipped to each worker once); the paths file is the\n"
        "same as in one process (docs/scaling.md).",
    )
    p.set_defaults(handler=_cmd_infer_convolution)
    p.add_argument("trace", help="trace (.parquet or text)")
    p.add_argument("--out", required=True, help="paths file to write (JSON, results.md)")
    p.add_argument("--quantum", required=True, metavar="DURATION", help="time resolution, e.g. 1ms or 5s")
    p.add_argument(
        "--max-lag",
        default="auto",
        metavar="DURATION",
        help=f"longest delay looked for (default auto: {_AUTO_LAGS} quanta)",
    )
    p.add_argument(
        "--root", action="append", metavar="NODE", help="start paths here; repeatable (default: found)"
    )
    p.add_argument(
        "--band", default="0", metavar="DURATION", help="delay band for variable delays (default 0)"
    )
    _spike_arguments(p)
    _path_arguments(p)
    _estimate_arguments(p)
    p.add_argument("--top", type=count(1), metavar="N", help="keep the first N paths in the file")
    p.add_argument("--show", type=count(0), default=10, metavar="N", help="paths to print (default 10)")
    p.add_argument("--json", action="store_true", help="print the paths file on stdout")
    add_cluster_options(p)


def _spike_arguments(p: argparse.ArgumentParser) -> None:
    """Which peaks of a cross-correlation are spikes, and which paths are kept."""
    p.add_argument("--n-sigma", type=float, default=4.0, help="spike height in std devs (default 4)")
    p.add_argument("--sep-sigma", type=float, default=3.0, help="dip between spikes in std devs (default 3)")
    p.add_argument(
        "--min-count", type=float, default=1.0, metavar="N", help="drop paths with fewer estimated messages"
    )


def _path_arguments(p: argparse.ArgumentParser) -> None:
    """How far and through what paths grow from their roots."""
    p.add_argument("--keep-short-paths", action="store_true", help="keep delays a longer path explains")
    p.add_argument(
        "--max-repeats",
        type=count(0),
        default=0,
        metavar="N",
        help="times a path may repeat a transition (0)",
    )
    p.add_argument(
        "--through-root", action="store_true", help="let paths go on after coming back to their root"
    )
    p.add_argument(
        "--keep-implausible", action="store_true", help="keep negative-lag tails and peaks at --max-lag"
    )
    p.add_argument("--max-depth", type=int, default=32, metavar="HOPS", help="most hops in a path (32)")


def _estimate_arguments(p: argparse.ArgumentParser) -> None:
    """How counts and delays are estimated, and how the correlation is computed."""
    p.add_argument(
        "--count-estimate",
        choices=["raw", "sqrt"],
        default="raw",
        help="message counts from the raw-count correlation (default) or the square-rooted peak",
    )
    p.add_argument(
        "--delay-estimate",
        choices=["centroid", "lag"],
        default="centroid",
        help="delays as spike centroids (default) or peak lag x quantum (the paper)",
    )
    p.add_argument(
        "--method",
        choices=["auto", "fft", "direct"],
        default="auto",
        help="correlate by FFT, by pairs of occupied quanta, or whichever is cheaper (default)",
    )
