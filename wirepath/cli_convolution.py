"""The ``convolution``-related verbs of the command line: ``wirepath infer convolution``."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import infer
import tracefmt
from infer.params import COUNT_ESTIMATES, DELAY_ESTIMATES, METHODS
from wirepath._cli import Parser, add_cluster_options, add_verb, count, emit, runner

__all__ = ["register"]


def _convolution_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The settings given on the command line (the others: ``infer.ConvolutionParams``')."""
    given = {
        "max_lag_s": None if args.max_lag == "auto" else tracefmt.parse_duration_ns(args.max_lag) / 1e9,
        "n_sigma": args.n_sigma,
        "sep_sigma": args.sep_sigma,
        "band_s": None if args.band is None else tracefmt.parse_duration_ns(args.band) / 1e9,
        "root": args.root,
        "min_count": args.min_count,
        "keep_short_paths": True if args.keep_short_paths else None,
        "max_repeats": args.max_repeats,
        "through_root": True if args.through_root else None,
        "keep_implausible": True if args.keep_implausible else None,
        "max_depth": args.max_depth,
        "count_estimate": args.count_estimate,
        "delay_estimate": args.delay_estimate,
        "method": args.method,
    }
    return {k: v for k, v in given.items() if v is not None}


def _cmd_infer_convolution(args: argparse.Namespace) -> int:
    tracefmt.distinct_outputs([args.trace], [args.out])
    trace = tracefmt.read_any_trace(args.trace)
    quantum_s = tracefmt.parse_duration_ns(args.quantum) / 1e9
    settings = _convolution_overrides(args)
    # The trace is read and the flags parsed before a cluster is started for nothing.
    with runner(args) as run:
        result = infer.infer_convolution(trace, quantum_s=quantum_s, runner=run, **settings)
    doc = result.to_json(top=args.top)
    out = Path(args.out)
    tracefmt.write_paths(doc, out)
    lines = infer.convolution_lines(doc, wrote=[out])
    from viz import paths as viz_paths

    shown = doc["paths"][: args.show]
    for k, p in enumerate(shown, 1):
        lines.append(f"#{k:<3} {p['count']:>10,.0f}  {viz_paths.format_path(p)}")
    if any(len(p["nodes"]) > 2 for p in shown):
        lines.append(
            "(#, messages estimated on the path's last hop, the path; -[a|b]-> the delays at the node "
            "between a message in and the one it causes out, most frequent first; median: where "
            "messages go one for one)"
        )
    emit(args, doc, "\n".join(lines))
    return 0


def register(verbs: argparse._SubParsersAction, algos: argparse._SubParsersAction) -> None:
    """Add this module's verbs to ``verbs`` (and algorithms to ``infer``'s ``algos``)."""
    p: Parser = add_verb(
        algos,
        "convolution",
        _cmd_infer_convolution,
        "convolution algorithm for free-form messages",
        "The convolution algorithm (Aguilera et al., SOSP 2003) for any messaging\n"
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
        json_help="print the paths file on stdout",
    )
    p.add_argument("trace", help="trace (.parquet or text)")
    p.add_argument("--out", required=True, help="paths file to write (JSON, docs/files.md)")
    p.add_argument("--quantum", required=True, metavar="DURATION", help="time resolution, e.g. 1ms or 5s")
    p.add_argument(
        "--max-lag",
        default="auto",
        metavar="DURATION",
        help=f"longest delay looked for (default auto: {infer.AUTO_LAG_QUANTA} quanta)",
    )
    p.add_argument(
        "--root", action="append", metavar="NODE", help="start paths here; repeatable (default: found)"
    )
    d = infer.ConvolutionParams
    p.add_argument(
        "--band", metavar="DURATION", help=f"delay band for variable delays (default {d.band_s:g}s)"
    )
    _spike_arguments(p, d)
    _path_arguments(p, d)
    _estimate_arguments(p, d)
    p.add_argument("--top", type=count(1), metavar="N", help="keep the first N paths in the file")
    p.add_argument("--show", type=count(0), default=10, metavar="N", help="paths to print (default 10)")
    add_cluster_options(p)


def _spike_arguments(p: argparse.ArgumentParser, d: type[infer.ConvolutionParams]) -> None:
    """Which peaks of a cross-correlation are spikes, and which paths are kept (defaults:
    ``infer.ConvolutionParams``, ``d``)."""
    p.add_argument("--n-sigma", type=float, help=f"spike height in std devs (default {d.n_sigma:g})")
    p.add_argument(
        "--sep-sigma", type=float, help=f"dip between spikes in std devs (default {d.sep_sigma:g})"
    )
    p.add_argument("--min-count", type=float, metavar="N", help="drop paths with fewer estimated messages")


def _path_arguments(p: argparse.ArgumentParser, d: type[infer.ConvolutionParams]) -> None:
    """How far and through what paths grow from their roots."""
    p.add_argument("--keep-short-paths", action="store_true", help="keep delays a longer path explains")
    p.add_argument(
        "--max-repeats",
        type=count(0),
        metavar="N",
        help=f"times a path may repeat a transition ({d.max_repeats})",
    )
    p.add_argument(
        "--through-root", action="store_true", help="let paths go on after coming back to their root"
    )
    p.add_argument(
        "--keep-implausible", action="store_true", help="keep negative-lag tails and peaks at --max-lag"
    )
    p.add_argument("--max-depth", type=int, metavar="HOPS", help=f"most hops in a path ({d.max_depth})")


def _estimate_arguments(p: argparse.ArgumentParser, d: type[infer.ConvolutionParams]) -> None:
    """How counts and delays are estimated, and how the correlation is computed."""
    p.add_argument(
        "--count-estimate",
        choices=COUNT_ESTIMATES,
        help="message counts from the raw-count correlation (raw) or the square-rooted peak (sqrt; "
        f"default {d.count_estimate})",
    )
    p.add_argument(
        "--delay-estimate",
        choices=DELAY_ESTIMATES,
        help="delays as spike centroids (centroid) or peak lag x quantum (lag, the paper; "
        f"default {d.delay_estimate})",
    )
    p.add_argument(
        "--method",
        choices=METHODS,
        help="correlate by FFT (fft), by pairs of occupied quanta (direct), or whichever is cheaper "
        f"(auto; default {d.method})",
    )
