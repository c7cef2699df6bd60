"""The main job end to end (``wirepath demo``): a normal and a slow run, inferred, compared, drawn.

1. Synthesize the paper's multi-tier system twice (``samples/synth/multitier.toml``
   and ``multitier-slow.toml``, which adds 200 ms at WS2 between its AUTH call and its
   AP call), with ground truth.
2. Infer both with nesting; merge replicas (``AP*``, ``DB*``) so the change is counted
   once, not spread over four patterns.
3. Diff them: the sentence a user wants ("WS2 -> AP*: +0.20 s in 3,431 of 14,246
   requests"), the top slow patterns, graphs of both, the diff graph, the HTML report,
   and the slow run's instances as OTLP/JSON traces.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import infer
import synth
import tracefmt
from tracefmt import ParameterError, TraceFileError, write_atomic, write_paths
from viz import DEMO_CONVOLUTION
from viz.diff import PathsDiff, diff_convolution, diff_dot, diff_paths, format_change
from viz.dot import format_s, paths_dot
from viz.export import write_export
from viz.paths import collapse_replicas, replica_name, select_patterns
from viz.render import dot_binary, write_graph
from viz.report import build_report

__all__ = ["DEMO_CONVOLUTION", "DEMO_FILES", "DemoResult", "run_demo"]

_SAMPLES = Path(__file__).resolve().parent.parent / "samples" / "synth"


#: Every file the demo writes into its directory (the convolution ones only with it).
DEMO_FILES = (
    *(
        f"{run}{suffix}"
        for run in ("base", "slow")
        for suffix in (
            ".parquet",
            "-truth.json",
            "-paths.json",
            "-instances.parquet",
            "-convolution.json",
            "-top.dot",
            "-top.svg",
        )
    ),
    "diff.json",
    "diff.dot",
    "diff.svg",
    "diff.png",
    "slow-convolution.dot",
    "slow-convolution.svg",
    "report.html",
    "slow-traces.otlp.json",
)

#: Written first into the demo's directory: a later demo may replace what it finds there.
_MARK = ".wirepath-demo"


@dataclass(frozen=True)
class DemoResult:
    """What the demo made: the sentence, the diff, the top slow patterns and the files."""

    sentence: str
    diff: PathsDiff
    top_patterns: list[dict[str, Any]]
    files: dict[str, str]
    runs: dict[str, dict[str, Any]]
    seconds: dict[str, float] = field(default_factory=dict)
    convolution: list[dict[str, Any]] = field(default_factory=list)

    def convolution_sentence(self) -> str | None:
        """The convolution algorithm's view of the biggest change (None when not run)."""
        if not self.convolution:
            return None
        c = self.convolution[0]
        parts = c["label"].split(" -> ")
        return (
            f"convolution: at {c['at']}, between {parts[0]} -> {parts[1]} and {parts[1]} -> {parts[2]}: "
            f"{format_s(c['base_s'])} -> {format_s(c['slow_s'])} ({format_change(c['change_s'])}), "
            f"about {c['messages']:,} messages"
        )

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready summary (``wirepath demo --json``)."""
        return {
            "sentence": self.sentence,
            "convolution_sentence": self.convolution_sentence(),
            "convolution_changes": self.convolution[:5],
            "changes": self.diff.changes[:5],
            "top_patterns": [
                {"id": p["id"], "count": p["count"], "total_latency_s": p["total_latency_s"]}
                for p in self.top_patterns
            ],
            "files": self.files,
            "runs": self.runs,
            "seconds": self.seconds,
        }


def _shown(path: str | os.PathLike[str]) -> str:
    """A path as a user would type it: relative to the working directory when inside it."""
    p = Path(path)
    try:
        return str(p.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(p)


def _write_json(doc: Any, path: Path) -> None:
    write_atomic(path, json.dumps(doc, indent=1) + "\n")


def run_demo(
    out_dir: str | os.PathLike[str] = "demo-out",
    *,
    messages: int = 200_000,
    parallelism: float = 2.0,
    seed: int = 1,
    collapse: Sequence[str] = ("AP*", "DB*"),
    top: int = 3,
    configs: tuple[str | os.PathLike[str], str | os.PathLike[str]] | None = None,
    convolution: bool = True,
    on_step: Callable[[str], None] | None = None,
    force: bool = False,
) -> DemoResult:
    """Run the demo into ``out_dir`` and return what it found.

    Parameters
    ----------
    out_dir : path
        Directory for every output (created).
    messages, parallelism, seed
        Size, concurrency (mean candidate parents per call) and seed of both runs.
    collapse : sequence of str
        Replica globs merged before comparing and drawing.
    top : int
        Patterns to draw and print.
    configs : (base, slow), optional
        Synth configurations; the paper's multitier pair from ``samples/synth/`` by default.
    convolution : bool
        Also infer both runs with the convolution algorithm (``DEMO_CONVOLUTION``) and
        compare their delays (the paper's Figure 13).
    on_step : callable, optional
        Called with a short description before each step (for progress output).
    force : bool
        Replace files named like the demo's (``DEMO_FILES``) in a directory an earlier
        demo did not make. Without it such a file is refused before any work; files of
        other names are never touched.

    Notes
    -----
    A run takes seconds (``wirepath demo`` wraps it)::

        result = run_demo("demo-out", messages=20_000)
        print(result.sentence)  # WS2 -> AP*: +0.20 s in ... of ... requests

    Examples
    --------
    >>> run_demo("demo-out", messages=10)
    Traceback (most recent call last):
    ...
    tracefmt.errors.ParameterError: the demo needs at least 1000 messages per run, not 10
    """
    base_cfg, slow_cfg = _check_demo(out_dir, messages, parallelism, configs, force=force)
    out = Path(out_dir)
    write_atomic(out / _MARK, "made by wirepath demo: a later demo replaces its files here\n")
    demo = _Demo(out, on_step or (lambda _text: None))
    for name, cfg_path in (("base", base_cfg), ("slow", slow_cfg)):
        config = replace(
            synth.load_config(cfg_path),
            messages=messages,
            duration_s=None,
            parallelism=parallelism,
            seed=seed,
        )
        demo.run(name, _shown(cfg_path), config, convolution=convolution)
    return demo.finish(collapse, top, convolution=convolution)


def _check_demo(
    out_dir: str | os.PathLike[str],
    messages: int,
    parallelism: float,
    configs: tuple[str | os.PathLike[str], str | os.PathLike[str]] | None,
    *,
    force: bool,
) -> tuple[str | os.PathLike[str], str | os.PathLike[str]]:
    """Refuse what would fail late (after minutes of inference) or replace a user's file,
    before any work; returns the base and slow configurations."""
    if messages < 1000:
        raise ParameterError(f"the demo needs at least 1000 messages per run, not {messages}")
    if parallelism < 1.0:
        raise ParameterError(f"parallelism must be at least 1, not {parallelism}")
    if Path(out_dir).exists() and not Path(out_dir).is_dir():
        raise ParameterError(f"{out_dir} is a file: the demo writes a directory (give --out a new name)")
    if not force and not os.path.lexists(Path(out_dir, _MARK)):
        taken = next((Path(out_dir, n) for n in DEMO_FILES if os.path.lexists(Path(out_dir, n))), None)
        if taken is not None:
            raise ParameterError(
                f"{taken} exists and an earlier demo did not write it: give --out a new or empty "
                "directory, or --force to replace it"
            )
    dot_binary()  # fail now, not after the inference, when graphviz is missing
    base_cfg, slow_cfg = configs or (_SAMPLES / "multitier.toml", _SAMPLES / "multitier-slow.toml")
    for cfg in (base_cfg, slow_cfg):
        if not Path(cfg).is_file():
            raise TraceFileError(
                f"{cfg}: the demo's workload is missing (it ships in a wirepath checkout's samples/synth/; "
                "run from a checkout installed with pip install -e .)"
            )
    return base_cfg, slow_cfg


@dataclass
class _Demo:
    """The demo's outputs as its steps make them: files written, each run's summary and
    paths documents, and the seconds each step took."""

    out: Path
    step: Callable[[str], None]
    files: dict[str, str] = field(default_factory=dict)
    runs: dict[str, dict[str, Any]] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)
    docs: dict[str, dict[str, Any]] = field(default_factory=dict)
    conv_docs: dict[str, dict[str, Any]] = field(default_factory=dict)

    def run(self, name: str, shown: str, config: synth.SynthConfig, *, convolution: bool) -> None:
        """Synthesize one run, infer its paths (nesting; convolution too if asked) and
        write them."""
        out = self.out
        t0 = time.perf_counter()
        self.step(f"synthesizing the {name} run from {shown}")
        trace_path, truth_path = out / f"{name}.parquet", out / f"{name}-truth.json"
        report = synth.generate_trace(config, trace_path, truth_path=truth_path)
        self.seconds[f"synth_{name}"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        self.step(f"inferring the {name} run's paths (nesting, {report.messages:,} messages)")
        trace = tracefmt.read_trace(trace_path)
        result = infer.infer_nesting(trace)
        doc = self.docs[name] = result.to_json()
        paths_path, instances_path = out / f"{name}-paths.json", out / f"{name}-instances.parquet"
        write_paths(doc, paths_path)
        result.write_instances(instances_path)
        self.seconds[f"infer_{name}"] = time.perf_counter() - t0
        if convolution:
            t0 = time.perf_counter()
            self.step(
                f"inferring the {name} run's paths (convolution, quantum {DEMO_CONVOLUTION['quantum_s']} s)"
            )
            conv = self.conv_docs[name] = infer.infer_convolution(trace, **DEMO_CONVOLUTION).to_json()
            write_paths(conv, out / f"{name}-convolution.json")
            self.files[f"{name}_convolution"] = str(out / f"{name}-convolution.json")
            self.seconds[f"convolution_{name}"] = time.perf_counter() - t0
        self.runs[name] = {
            "config": shown,
            "messages": report.messages,
            "instances": doc["stats"]["instances"],
            "patterns": doc["stats"]["patterns"],
            "mean_parallelism": doc["stats"]["mean_parallelism"],
        }
        self.files.update(
            {
                f"{name}_trace": str(trace_path),
                f"{name}_truth": str(truth_path),
                f"{name}_paths": str(paths_path),
                f"{name}_instances": str(instances_path),
            }
        )

    def finish(self, collapse: Sequence[str], top: int, *, convolution: bool) -> DemoResult:
        """Once both runs are in: compare, draw and report them; what the demo found."""
        t0 = time.perf_counter()
        self.step("comparing the runs and drawing")
        diff = self.compare(collapse, top)
        conv_changes = self.compare_convolution(collapse, top) if convolution else []
        self.report(collapse)
        self.seconds["diff_draw_report"] = time.perf_counter() - t0
        return DemoResult(
            sentence=diff.sentence(),
            diff=diff,
            top_patterns=select_patterns(collapse_replicas(self.docs["slow"], collapse), top=top),
            files=self.files,
            runs=self.runs,
            seconds=self.seconds,
            convolution=conv_changes,
        )

    def compare(self, collapse: Sequence[str], top: int) -> PathsDiff:
        """The runs' diff, written as JSON, each run's top patterns and the diff drawn."""
        out, docs = self.out, self.docs
        diff = diff_paths(docs["base"], docs["slow"], collapse=collapse, instances=self.instances())
        _write_json(diff.to_json(), out / "diff.json")
        self.files["diff_json"] = str(out / "diff.json")
        for name in ("base", "slow"):
            text = paths_dot(docs[name], top=top, collapse=collapse)
            write_atomic(out / f"{name}-top.dot", text)
            write_graph(text, out / f"{name}-top.svg")
            self.files[f"{name}_graph"] = str(out / f"{name}-top.svg")
        text = diff_dot(diff, top=top)
        write_atomic(out / "diff.dot", text)
        write_graph(text, out / "diff.svg")
        write_graph(text, out / "diff.png")
        self.files["diff_graph"] = str(out / "diff.svg")
        self.files["diff_png"] = str(out / "diff.png")
        return diff

    def compare_convolution(self, collapse: Sequence[str], top: int) -> list[dict[str, Any]]:
        """The convolution delays' changes, and the slow run's paths drawn, those through
        the biggest change first so that the picture shows it."""
        changes = diff_convolution(self.conv_docs["base"], self.conv_docs["slow"], collapse=collapse)
        slow_conv = self.conv_docs["slow"]
        if changes:
            hot = changes[0]["label"].split(" -> ")

            def through(path: dict[str, Any]) -> bool:
                names = [replica_name(n, collapse) for n in path["nodes"]]
                return any(names[k : k + 3] == hot for k in range(len(names) - 2))

            slow_conv = {**slow_conv, "paths": sorted(slow_conv["paths"], key=lambda p: not through(p))}
        text = paths_dot(slow_conv, top=top)
        write_atomic(self.out / "slow-convolution.dot", text)
        write_graph(text, self.out / "slow-convolution.svg")
        self.files["slow_convolution_graph"] = str(self.out / "slow-convolution.svg")
        return changes

    def instances(self) -> tuple[Any, Any]:
        """Both runs' instances tables: with every request's latency the diff counts the
        requests that changed, not those passing where a mean moved."""
        return (
            infer.read_instances(self.files["base_instances"]),
            infer.read_instances(self.files["slow_instances"]),
        )

    def report(self, collapse: Sequence[str]) -> None:
        """The HTML report of the slow run against the base, and the slow run's first 200
        requests exported as OTLP/JSON traces."""
        page = build_report(
            self.docs["slow"],
            base=self.docs["base"],
            top=10,
            collapse=collapse,
            title="wirepath demo: the slow run",
            instances=self.instances(),
        )
        self.files["report"] = str(write_atomic(self.out / "report.html", page))
        self.step("exporting the slow run's first 200 requests as OTLP/JSON traces")
        write_export(
            infer.read_instances(self.files["slow_instances"]),
            "otlp",
            self.out / "slow-traces.otlp.json",
            max_traces=200,
        )
        self.files["otlp"] = str(self.out / "slow-traces.otlp.json")
