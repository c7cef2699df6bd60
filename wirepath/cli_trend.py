"""``wirepath trend ...``: metric series in the store, their trends, verdicts and dashboard.

The gating verbs (``check``, ``compare``, ``wda``) tell CI jobs three outcomes apart:
0 no regression, 1 a regression or a failed trial/run (:data:`EXIT_REGRESSION`), 2 a usage
error, 3 no verdict: an error, or Mako's FAIL status (:data:`EXIT_UNDECIDED`). The other
trend verbs exit as every verb does (1 on an error).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import math
import sys
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import capture
import tracefmt
import trend
from wirepath._cli import Parser, add_cluster_options, add_verb, emit, runner

if TYPE_CHECKING:
    import numpy as np

__all__ = ["EXIT_REGRESSION", "EXIT_UNDECIDED", "register"]

#: ``trend from-paths --min-count``: a pattern seen fewer times in a run is no measurement of it.
PATHS_MIN_COUNT = 5
#: Exit status of a gating verb that found a regression, a failed trial or a failed run.
EXIT_REGRESSION = 1
#: Exit status of a gating verb that could not decide: an error, or Mako's FAIL status.
EXIT_UNDECIDED = 3
_EXIT_EPILOG = (
    "exit status:\n  0  no regression\n  1  {found}\n  2  a usage error\n"
    "  3  no verdict: {undecided}an error (one 'error: ...' line on stderr)"
)


def register(verbs: argparse._SubParsersAction, algos: argparse._SubParsersAction) -> None:
    """Add the ``trend`` verb with its sub-verbs."""
    p = verbs.add_parser(
        "trend",
        help="performance series over runs: import, analyze, check, compare, wda, dashboard",
        description="Keep throughput and latency results over runs in the store's results/ and\n"
        "tell when they regressed: MDL grouping (CSIT's jumpavg), trimmed moving statistics,\n"
        "per-patch verdicts, Mako's window deviation analysis, a static HTML dashboard.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = p.add_subparsers(dest="trend_verb", metavar="VERB", parser_class=Parser)
    sub.required = True
    _register_import(sub)
    _register_from_paths(sub)
    _register_from_capture(sub)
    _register_analyze(sub)
    _register_check(sub)
    _register_compare(sub)
    _register_wda(sub)
    _register_dashboard(sub)


@contextlib.contextmanager
def _writing(target: Any) -> Iterator[None]:
    """Turn an OS error while writing ``target`` into one clear line."""
    try:
        yield
    except OSError as e:
        if isinstance(e, tracefmt.WirepathError):
            raise
        raise tracefmt.write_error(e, target) from None


@contextlib.contextmanager
def _flags_for(**flags: str) -> Iterator[None]:
    """Name the flags a library error asks for: its parameter names in parentheses,
    ``(time_ns)``, become the flags that give them, ``(--time)``."""
    try:
        yield
    except tracefmt.ParameterError as e:
        text = str(e)
        for param, flag in flags.items():
            text = text.replace(f"({param})", f"({flag})")
        if text == str(e):
            raise
        raise tracefmt.ParameterError(text) from None


def _gating(handler: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """``handler`` returning :data:`EXIT_UNDECIDED` on an error instead of raising it, so that
    an error (exit 3) is never taken for a regression (exit 1): a wirepath error is one
    ``error: ...`` line; a crash (a bug) keeps its traceback, but not Python's exit status 1."""

    @functools.wraps(handler)
    def run(args: argparse.Namespace) -> int:
        try:
            return handler(args)
        except tracefmt.WirepathError as e:
            print(f"error: {tracefmt.printable(str(e))}", file=sys.stderr)
        except BrokenPipeError:  # the reader went away: main's business
            raise
        except Exception:
            traceback.print_exc()
        return EXIT_UNDECIDED

    return run


def _gating_epilog(p: argparse.ArgumentParser, found: str, undecided: str = "") -> None:
    """Document the exit statuses of a gating verb in its ``--help``."""
    p.epilog = _EXIT_EPILOG.format(found=found, undecided=undecided)


def _emit(args: argparse.Namespace, doc: dict[str, Any] | Callable[[], dict[str, Any]], text: str) -> None:
    """:func:`emit`, with JSON that never holds NaN or Infinity (``null`` in their place).
    ``doc`` may be a function that makes it: only called for ``--json``."""
    if callable(doc):
        doc = doc() if args.json else {}
    if args.json:
        print(json.dumps(trend.finite_json(doc), indent=2, allow_nan=False, default=str))
    else:
        emit(args, doc, text)


def _arg_type(what: str, *, integer: bool = False, **bounds: float) -> Callable[[str], float]:
    """An argparse ``type=``: a number checked by :func:`trend.check_number` (a usage error)."""

    def parse(text: str) -> float:
        try:
            value = int(text) if integer else float(text)
        except ValueError:
            kind = "an integer" if integer else "a number"
            raise argparse.ArgumentTypeError(f"{what} must be {kind}, not {text!r}") from None
        try:
            trend.check_number(value, what, integer=integer, **bounds)
        except tracefmt.ParameterError as e:
            raise argparse.ArgumentTypeError(str(e)) from None
        return value

    return parse


def _store_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--store", required=True, metavar="DIR", help="the store (results under DIR/results/)")


def _method_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--method", choices=trend.METHODS, default="mdl", help="mdl (MDL grouping, default) or tmm"
    )
    p.add_argument(
        "--window",
        type=_arg_type("--window", integer=True, low=2),
        default=14,
        help="tmm rolling window in runs, at least 2 (default 14)",
    )
    p.add_argument("--test", action="append", metavar="TEXT", help="only tests whose name contains TEXT")
    p.add_argument(
        "--fresh",
        action="store_true",
        help="analyse every series from its first run, not from the programs saved in DIR/state/ (rewritten)",
    )
    _mdl_args(p)


def _mdl_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--unit",
        type=_arg_type("--unit", above=0),
        help="mdl: resolution of the values (jumpavg's unit, > 0)",
    )
    p.add_argument(
        "--sbps",
        type=_arg_type("--sbps", low=1, high=trend.MAX_SBPS),
        help="mdl: significant bits per sample, 1 to 52; unit = max / (2**(sbps+1) - 1) (default 12)",
    )


# import -----------------------------------------------------------------------------------


def _register_import(sub: argparse._SubParsersAction) -> None:
    cols = ", ".join(
        f"{c}" + ("" if d is None else f" (optional: {d})") for c, d in trend.IMPORT_COLUMNS.items()
    )
    p = add_verb(
        sub,
        "import",
        _cmd_import,
        "add results from a CSV or JSON file to the store",
        "Add results (one trial a row) to STORE/results/ as a new Parquet file.\n\n"
        f"columns: {cols}\n\n"
        "time is ISO-8601 (UTC if no zone) or epoch seconds; value is a number, empty/nan/fail\n"
        "for a failed trial; direction is bigger-is-better (throughput) or smaller-is-better\n"
        "(latency); tags are ';'-separated. JSON: a list of such objects, or objects with\n"
        "'values' (the run's trials) instead of 'value'; JSON Lines (.jsonl): one such object\n"
        "a line. CSV and JSON Lines are read a block at a time, whatever their size. Several\n"
        "trials per build make one run.\n"
        "A build already stored for the same test and testbed is replaced.\n\n"
        "example:\n  wirepath trend import samples/trend/mrr.csv --store store",
    )
    p.add_argument("file", metavar="FILE", help="results file (.csv, .json or .jsonl)")
    _store_arg(p)


def _summary_of(table: Any) -> dict[str, int]:
    tests = table.select(["test", "testbed"]).group_by(["test", "testbed"]).aggregate([]).num_rows
    runs = (
        table.select(["test", "testbed", "build"])
        .group_by(["test", "testbed", "build"])
        .aggregate([])
        .num_rows
    )
    import pyarrow.compute as pc

    failed = int(pc.sum(pc.is_nan(table.column("value"))).as_py() or 0)
    return {"series": tests, "runs": runs, "trials": table.num_rows, "failed_trials": failed}


def _write(args: argparse.Namespace, table: Any, name: str) -> int:
    with _writing(args.store):
        path = trend.write_results(tracefmt.Store.create(args.store), table, name=name)
    return _said(args, path, _summary_of(table))


def _said(args: argparse.Namespace, path: Path, summary: dict[str, int]) -> int:
    """What an import wrote, and where."""
    doc = {"output": str(path), **summary}
    text = f"wrote {doc['trials']:,} trials ({doc['runs']:,} runs of {doc['series']:,} series) to {path}"
    if doc["failed_trials"]:
        text += f"\n{doc['failed_trials']:,} failed trials (stored as NaN)"
    _emit(args, doc, text)
    return 0


def _cmd_import(args: argparse.Namespace) -> int:
    with _writing(args.store):
        path, summary = trend.import_results(
            tracefmt.Store.create(args.store), args.file, name=Path(args.file).stem
        )
    return _said(args, path, summary)


# from-paths / from-capture ----------------------------------------------------------------


def _register_from_paths(sub: argparse._SubParsersAction) -> None:
    p = add_verb(
        sub,
        "from-paths",
        _cmd_from_paths,
        "add path latencies from an inference result to the store",
        "Read a paths file (wirepath infer ... --out PATHS.json) and store one run of latency\n"
        "series: per pattern its root latency, named by its shape with the root's operation\n"
        "('path:client>nginx[GET /item/:id](nginx>app(app>backend))'), and per visit its\n"
        "latency ('.../app>backend'; '#2' for the second visit of the same call in the\n"
        "pattern); each series' tags hold its pattern id. For convolution results per path\n"
        "the summed hop delays ('path:a>b>c') and each hop ('.../a>b'). Smaller is better.\n\n"
        "With --instances (the table 'infer nesting --instances' wrote for the same run) a\n"
        "run holds one trial per request (pattern) and per call (visit), so the MDL grouping\n"
        "sees each run's spread; without it a run is one sample, the paths file's mean, and\n"
        "the grouping may split on noise.\n\n"
        "example:\n"
        "  wirepath trend from-paths paths.json --instances inst.parquet --store store --build 1234",
    )
    p.add_argument("paths", metavar="PATHS.json", help="paths file")
    _store_arg(p)
    p.add_argument("--build", required=True, help="the run's build id")
    p.add_argument(
        "--instances",
        metavar="INST.parquet",
        help="the run's instances table (infer nesting --instances): one trial per request and call",
    )
    p.add_argument(
        "--trials",
        type=_trials_arg,
        help="with --instances: at most this many trials a run, each the mean latency of a batch of "
        f"consecutive requests, or 'all': one trial per request (default {PATHS_TRIALS}: the "
        "fewest false alarms and the most changes found of those measured, BENCHMARKS.md)",
    )
    p.add_argument(
        "--min-count",
        type=_arg_type("--min-count", integer=True, low=1),
        default=PATHS_MIN_COUNT,
        help="leave out the patterns (and their visits) seen fewer times in the run "
        f"(default {PATHS_MIN_COUNT})",
    )
    p.add_argument("--time", help="the run's time (ISO-8601 or epoch s; default: the trace's end)")
    p.add_argument("--testbed", default="default", help="testbed name (default 'default')")
    p.add_argument("--prefix", default="path:", help="series name prefix (default 'path:')")


#: Trials a run ``from-paths --instances`` keeps unless told: batches of requests, as
#: CSIT stores a few trials each averaging much traffic (``benchmarks/trend_paths.py``).
PATHS_TRIALS = 10


def _trials_arg(text: str) -> int | str:
    """``--trials``: a count, or ``all`` (one trial per request)."""
    if text == "all":
        return text
    return int(_arg_type("--trials", integer=True, low=1, high=trend.MAX_TRIALS)(text))


def _cmd_from_paths(args: argparse.Namespace) -> int:
    if args.trials is not None and args.instances is None:
        raise tracefmt.ParameterError("--trials goes with --instances (without it a run is one sample)")
    args.trials = PATHS_TRIALS if args.trials is None else None if args.trials == "all" else args.trials
    t = None if args.time is None else trend.parse_time_ns(args.time)
    with _flags_for(time_ns="--time"):
        made = trend.paths_import(
            args.paths,
            build=args.build,
            time_ns=t,
            testbed=args.testbed,
            prefix=args.prefix,
            instances=args.instances,
            min_count=args.min_count,
            trials=args.trials,
        )
    with _writing(args.store):
        path = trend.write_results(tracefmt.Store.create(args.store), made.table, name="paths")
    summary = _summary_of(made.table)
    doc: dict[str, Any] = {"output": str(path), **summary}
    text = (
        f"wrote {summary['trials']:,} trials ({summary['runs']:,} runs of {summary['series']:,} series) "
        f"to {path}"
    )
    trials = made.trials
    if trials is None:
        doc["trials_per_run"] = "one: the mean of the paths file"
        text += (
            "\nnote: each run is one sample (the paths file's mean latency), so the MDL grouping sees no "
            "spread within a run and may split on noise; give --instances INST.parquet (written by "
            "infer nesting --instances) for one trial per request"
        )
    else:
        doc.update(instances=trials.instances, unlisted=trials.unlisted, unmatched=trials.unmatched)
        each = "request and per call" if args.trials is None else f"batch of requests (at most {args.trials})"
        text += f"\none trial per {each}, from {trials.instances:,} instances"
        if trials.unlisted:
            text += f"; {trials.unlisted:,} of patterns the paths file does not list left out"
        if trials.unmatched:
            text += f"; {trials.unmatched:,} whose calls do not make their pattern's shape left out"
    if made.rare_patterns:
        doc["rare_patterns"] = made.rare_patterns
        text += (
            f"\n{made.rare_patterns:,} patterns seen fewer than {args.min_count} times in the run left out "
            "(--min-count)"
        )
    _emit(args, doc, text)
    return 0


def _register_from_capture(sub: argparse._SubParsersAction) -> None:
    p = add_verb(
        sub,
        "from-capture",
        _cmd_from_capture,
        "add MRR trials measured from a capture to the store",
        "MRR of each trial = packets received on the capture point in the trial window /\n"
        "trial duration (regardless of loss). Trials are consecutive windows of --duration\n"
        "from --start (default: the first packet), --gap apart. The capture is a pcap/pcapng\n"
        "file, or a wirepath trace (.parquet), whose messages at --point are counted.\n\n"
        "example:\n  wirepath trend from-capture rx.pcap --store store --test ip4-64b --build 77 "
        "--trials 10 --duration 1s",
    )
    p.add_argument("capture", metavar="CAPTURE", help="pcap/pcapng file, or a trace .parquet")
    _store_arg(p)
    p.add_argument("--test", required=True, help="series name")
    p.add_argument("--build", required=True, help="the run's build id")
    p.add_argument("--testbed", default="default")
    p.add_argument("--start", help="first trial's start (ISO-8601 or epoch s; default: first packet)")
    p.add_argument("--duration", default="1s", help="trial duration (default 1s)")
    p.add_argument(
        "--trials",
        type=_arg_type("--trials", integer=True, low=1, high=trend.MAX_TRIALS),
        default=10,
        help="number of trials (default 10)",
    )
    p.add_argument("--gap", default="0s", help="pause between trials (default 0s)")
    p.add_argument("--point", help="capture point to count in a trace (the 'point' column)")


def _capture_timestamps(path: str, point: str | None) -> np.ndarray:
    """Message times of a trace (at one capture point), or packet times of a capture."""
    if path.endswith((".parquet", ".pq")):
        return tracefmt.point_timestamps(tracefmt.read_trace(path), point, source=path)
    if point is not None:
        raise tracefmt.ParameterError("--point applies to a trace (.parquet), not to a packet capture")
    return capture.packet_timestamps(path)


def _cmd_from_capture(args: argparse.Namespace) -> int:
    ts = _capture_timestamps(args.capture, args.point)
    messages = args.capture.endswith((".parquet", ".pq"))
    what, unit = ("messages", "msg/s") if messages else ("packets", "pps")
    if ts.size == 0:
        raise tracefmt.ParameterError(f"{args.capture} holds no {what}")
    start = int(ts.min()) if args.start is None else trend.parse_time_ns(args.start)
    duration_ns = tracefmt.parse_duration_ns(args.duration)
    windows = trend.trial_windows(
        start, duration_ns, args.trials, gap_ns=tracefmt.parse_duration_ns(args.gap)
    )
    covered = trend.covered_windows(ts, windows)
    span = tracefmt.format_duration_ns(int(ts.max()) - int(ts.min()))
    if not covered.any():
        raise tracefmt.ParameterError(
            f"{args.capture}: its {what} span {span}, which holds none of the {args.trials} trials of "
            f"{tracefmt.format_duration_ns(duration_ns)} asked for from --start: give fewer or shorter "
            "trials (--trials, --duration), or the right --start"
        )
    # Only what the capture measured: a trial past its end is not a trial of zero.
    rates = trend.mrr_from_timestamps(ts, windows[covered])
    table = trend.mrr_results(
        rates, test=args.test, build=args.build, time_ns=start, testbed=args.testbed, unit=unit
    )
    with _writing(args.store):
        path = trend.write_results(tracefmt.Store.create(args.store), table, name="capture")
    doc = {
        "output": str(path),
        "test": args.test,
        "build": args.build,
        "unit": unit,
        "trials": rates.tolist(),
        "trials_asked": args.trials,
        "trials_left_out": [k for k, whole in enumerate(covered.tolist()) if not whole],
    }
    text = (
        f"MRR of {tracefmt.printable(args.test)} build {tracefmt.printable(args.build)}: "
        f"{rates.mean():,.0f} {unit}, {what} received per second "
        f"(trials {', '.join(f'{r:,.0f}' for r in rates)})"
    )
    if not covered.all():
        text += (
            f"\nnote: {int((~covered).sum())} of {args.trials} trials left out: the capture's {what} span "
            f"{span}, which does not hold them whole"
        )
    _emit(args, doc, text + f"\nwrote {path}")
    return 0


# analyze / check --------------------------------------------------------------------------


def _register_analyze(sub: argparse._SubParsersAction) -> None:
    p = add_verb(
        sub,
        "analyze",
        _cmd_analyze,
        "trend, anomalies and trend compliance of every series",
        "Per series (test x testbed): the trend value, short-term change (vs one week\n"
        "before) and long-term change (vs the best of the last quarter except the last\n"
        "week), regressions and progressions, runs in the last group. Failed runs are left\n"
        "out and marked where they are. With --workers or --scheduler the series are\n"
        "analysed in groups on a Dask cluster; the result is the same.\n\n"
        "example:\n  wirepath trend analyze --store store --method mdl",
    )
    _store_arg(p)
    _method_args(p)
    add_cluster_options(p)


def _analyze(args: argparse.Namespace, errors: list[str] | None = None) -> list[trend.SeriesTrend]:
    """Every series of ``--store``, analysed where ``--scheduler`` / ``--workers`` say (in
    this process for a verb without them). With ``errors``, a series that cannot be
    analysed is left out and its error line added there, so that the others are still
    analysed; without it the first error is raised."""
    series = trend.load_series(args.store, tests=args.test)
    if not series:
        raise tracefmt.ParameterError(
            f"no series in {args.store}/results" + (f" matching {', '.join(args.test)}" if args.test else "")
        )
    on_error = None if errors is None else lambda s, e: errors.append(f"error: {tracefmt.printable(str(e))}")
    # The saved programs are the whole store's: an analysis of some tests (--test) neither
    # resumes nor replaces them.
    state = None if args.test else trend.state_path(args.store)
    if state is not None and getattr(args, "fresh", False):
        state.unlink(missing_ok=True)
    with runner(args) as run:
        trends = trend.analyze_all(
            series,
            method=args.method,
            window=args.window,
            unit=args.unit,
            sbps=args.sbps,
            runner=run,
            on_error=on_error,
            state=state,
        )
    if errors and not trends:
        raise tracefmt.ParameterError(errors[0].removeprefix("error: "))
    return trends


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{x * 100:+.2f}%"


def _table(trends: list[trend.SeriesTrend]) -> str:
    tests = [tracefmt.printable(t.series.test) for t in trends]
    width = max(len(name) for name in tests)
    lines = [
        f"{'test':<{width}}  {'testbed':<10} {'runs':>5} {'trend':>12} {'short':>8} {'long':>8} "
        f"{'regr':>4} {'progr':>5} {'last grp':>8}  newest"
    ]
    for t, name in zip(trends, tests, strict=True):
        s = t.series
        last = "n/a" if t.last_trend is None else f"{t.last_trend:.6g}"
        newest = "REGRESSION" if t.regressed else t.marks[-1]
        lines.append(
            f"{name:<{width}}  {tracefmt.printable(s.testbed):<10} {s.runs:>5} {last:>12} "
            f"{_pct(t.short_change):>8} "
            f"{_pct(t.long_change):>8} {t.regressions:>4} {t.progressions:>5} "
            f"{t.runs_in_last_group:>8}  {newest}"
        )
    return "\n".join(lines)


def _say_errors(errors: list[str]) -> None:
    """The series left out, one line each, after the verb's output."""
    for line in errors:
        print(line, file=sys.stderr)


def _cmd_analyze(args: argparse.Namespace) -> int:
    errors: list[str] = []
    trends = _analyze(args, errors)

    def doc() -> dict[str, Any]:  # every run of every series: made only for --json
        return {"method": args.method, "series": [t.to_json() for t in trends], "errors": errors}

    _emit(args, doc, _table(trends))
    _say_errors(errors)
    return 1 if errors else 0


def _register_check(sub: argparse._SubParsersAction) -> None:
    p = add_verb(
        sub,
        "check",
        _gating(_cmd_check),
        "exit 1 when the newest run of any series is in a regression (3 on an error)",
        "Analyze every series and exit 1 when any is in a regression at its newest run\n"
        "(mdl: its last group is lower than the one before, higher for latency; tmm: the\n"
        "newest run is below TMM - 3 TMSD). Prints a Markdown alert naming the regressed\n"
        "tests, for mail or a CI comment (also written to --alert FILE).\n\n"
        "example:\n  wirepath trend check --store store --alert alert.md; [ $? -eq 1 ] && echo regressed",
    )
    _store_arg(p)
    _method_args(p)
    add_cluster_options(p)
    p.add_argument("--alert", metavar="FILE.md", help="also write the alert text here")
    _gating_epilog(p, "a series is in a regression at its newest run")


def _cmd_check(args: argparse.Namespace) -> int:
    results = tracefmt.Store(Path(args.store)).results_dir
    tracefmt.distinct_outputs([results], [args.alert], what="the results")
    errors: list[str] = []
    trends = _analyze(args, errors)
    text = trend.alert_text(trends)
    if args.alert:
        tracefmt.write_atomic(args.alert, text + "\n")
    bad = [t for t in trends if t.regressed]
    doc = {
        "regression": bool(bad),
        "series": len(trends),
        "regressed": [{"test": t.series.test, "testbed": t.series.testbed} for t in bad],
        "alert": text,
        "errors": errors,
    }
    _emit(args, doc, text)
    _say_errors(errors)
    # A regression found is reported as one, whatever series could not be analysed.
    return EXIT_REGRESSION if bad else EXIT_UNDECIDED if errors else 0


# compare ----------------------------------------------------------------------------------


def _register_compare(sub: argparse._SubParsersAction) -> None:
    p = add_verb(
        sub,
        "compare",
        _gating(_cmd_compare),
        "per-patch verdict: parent trials against current trials (exit 1 on regression, 3 on an error)",
        "Group the parent's trials and the current (patched) trials with the trend's MDL\n"
        "method: one group is normal, two groups a regression (current lower; higher for\n"
        "smaller-is-better) or a progression. Prints per test (indexed from 0) the values in\n"
        "measured order and sorted, the difference of averages, the groups with their bits\n"
        "(counted in the unit the decision uses), which grouping is shorter by how many bits,\n"
        "and the verdict. Exit 1 if any test regressed or any trial failed ('fail' or 'nan').\n\n"
        "examples:\n"
        "  wirepath trend compare --parent 10.1,10.2,10.0 --current 9.1,9.2,9.0\n"
        "  wirepath trend compare --parent-file parent.txt --current-file current.txt\n"
        "  (files: lines 'test: v1, v2, ...' or JSON {\"test\": [v1, v2, ...]})",
    )
    p.add_argument("--parent", metavar="V,V,...", help="the parent's trial values (one test)")
    p.add_argument("--current", metavar="V,V,...", help="the current trial values (one test)")
    p.add_argument("--parent-file", metavar="FILE", help="the parent's trials of many tests")
    p.add_argument("--current-file", metavar="FILE", help="the current trials of the same tests")
    p.add_argument("--test", default="test", help="test name with --parent/--current (default test)")
    p.add_argument(
        "--direction", choices=trend.DIRECTIONS, default="bigger-is-better", help="default bigger-is-better"
    )
    _mdl_args(p)
    _gating_epilog(p, "a test regressed, or a trial failed")


def _cmd_compare(args: argparse.Namespace) -> int:
    inline = args.parent is not None or args.current is not None
    files = args.parent_file is not None or args.current_file is not None
    if inline == files:
        raise tracefmt.ParameterError("give --parent and --current, or --parent-file and --current-file")
    if inline:
        if args.parent is None or args.current is None:
            raise tracefmt.ParameterError("--parent and --current go together")
        parent = {args.test: trend.parse_values(args.parent, "--parent")}
        current = {args.test: trend.parse_values(args.current, "--current")}
    else:
        if args.parent_file is None or args.current_file is None:
            raise tracefmt.ParameterError("--parent-file and --current-file go together")
        parent, current = (
            trend.read_compare_file(args.parent_file),
            trend.read_compare_file(args.current_file),
        )
        if list(parent) != list(current):
            only = sorted(set(parent) ^ set(current))
            detail = f"only in one file: {', '.join(only)}" if only else "the tests are in another order"
            raise tracefmt.ParameterError(f"parent and current files must list the same tests ({detail})")
    results = [
        trend.compare_runs(
            parent[name], current[name], test=name, direction=args.direction, unit=args.unit, sbps=args.sbps
        )
        for name in parent
    ]
    blocks = [trend.format_comparison(k, c) for k, c in enumerate(results)]
    bad = [k for k, c in enumerate(results) if c.bad]
    named = ", ".join(f"{k} ({tracefmt.printable(results[k].test)})" for k in bad)
    summary = (
        f"{len(bad)} of {len(results)} tests regressed or failed: {named}"
        if bad
        else f"all {len(results)} tests normal or progressed"
    )
    doc = {"failed": bool(bad), "tests": [c.to_json() for c in results]}
    _emit(args, doc, "\n\n".join([*blocks, summary]))
    return EXIT_REGRESSION if bad else 0


# wda --------------------------------------------------------------------------------------


def _register_wda(sub: argparse._SubParsersAction) -> None:
    p = add_verb(
        sub,
        "wda",
        _gating(_cmd_wda),
        "Mako's window deviation analysis of the current run (exit 1 on regression, 3 on FAIL)",
        "CHECKS.json uses Mako's field names: tolerance_check_list with data_filter\n"
        "{value_key, ignore_missing_data}, recent_window_size, minimum_historical_window_size,\n"
        "direction_bias (NO_BIAS, IGNORE_INCREASE, IGNORE_DECREASE), mean_tolerance_params_list\n"
        "[{const_term, mean_coeff, stddev_coeff}], median_tolerance_params_list [{const_term,\n"
        "median_coeff, mad_coeff}]; plus run_order (TIMESTAMP or BUILD_ID).\n"
        "RUNS.csv: run_key,timestamp_ms,build_id,metric,value (empty value: the run lacks the\n"
        "metric; nan: a NaN value). The current run is the last in run order.\n\n"
        "example:\n  wirepath trend wda --config samples/trend/wda_checks.json samples/trend/wda_runs.csv",
    )
    p.add_argument("--config", required=True, metavar="CHECKS.json")
    p.add_argument("runs", metavar="RUNS.csv")
    _gating_epilog(
        p,
        "a check regressed (a NaN in the recent window, a failed run, always regresses)",
        "Mako's FAIL status (its message on stdout),\n     or ",
    )


def _wda_lines(config: dict[str, Any], result: trend.WdaResult) -> list[str]:
    """The console text of a WDA result: the status, then per check its statistics and verdicts."""
    lines = [f"{result.status}: {result.message}"]
    for check, c in zip(config["tolerance_check_list"], result.checks, strict=False):
        key = tracefmt.printable(str(check["data_filter"]["value_key"]))
        if c["result"] == "SKIPPED":
            lines.append(f"  {key}: SKIPPED ({c['data_length']} values, {c['needed']} needed)")
            continue
        st = c["stats"]
        lines.append(
            f"  {key}: {c['result']}  historic mean {st['historic_mean']:.6g} "
            f"median {st['historic_median']:.6g} | recent mean {st['recent_mean']:.6g} "
            f"median {st['recent_median']:.6g}"
        )
        for prm in c["params"]:
            mark = "regressed" if prm["is_regressed"] else "ok"
            delta = abs(prm["delta"])
            shown = "NaN (a failed recent run)" if math.isnan(delta) else f"{delta:.6g}"
            lines.append(f"    {prm['kind']}: |delta| {shown} vs tolerance {prm['tolerance']:.6g}: {mark}")
    return lines


def _cmd_wda(args: argparse.Namespace) -> int:
    config = trend.load_wda_config(args.config)
    result = trend.analyze_wda(config, trend.read_wda_runs(args.runs))
    _emit(args, result.to_json(), "\n".join(_wda_lines(config, result)))
    if result.status == "FAIL":
        return EXIT_UNDECIDED
    return EXIT_REGRESSION if result.regression else 0


# dashboard --------------------------------------------------------------------------------


def _register_dashboard(sub: argparse._SubParsersAction) -> None:
    p = add_verb(
        sub,
        "dashboard",
        _cmd_dashboard,
        "write the static HTML dashboard of every series",
        "Write OUT/index.html: every series in one table, regressions first, sortable and\n"
        "filtered by name, testbed, core count or regression (trend, short- and long-term\n"
        "change, regressions, progressions, runs in the last group, last change, recent runs);\n"
        "the failed tests of the last 7 days per testbed; and OUT/graph.html, which draws one\n"
        "series' plotly graph on demand from OUT/data/ (works offline, from file:// too).\n\n"
        "example:\n  wirepath trend dashboard --store store --out site/",
    )
    _store_arg(p)
    _method_args(p)
    p.add_argument("--out", required=True, metavar="DIR", help="output directory")


def _cmd_dashboard(args: argparse.Namespace) -> int:
    trends = _analyze(args)
    with _writing(args.out):
        report = trend.write_dashboard(trends, args.out)
    doc = {
        "index": str(report.index),
        "graph": str(report.graph),
        "data": [str(p) for p in report.data],
        "series": report.series,
    }
    _emit(
        args,
        doc,
        f"wrote {report.index} ({report.series:,} series; each one's graph on demand in "
        f"{report.graph}, from {len(report.data):,} data files)",
    )
    return 0
