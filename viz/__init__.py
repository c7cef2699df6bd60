"""Pictures, reports and exports of inferred paths.

``viz.dot`` makes DOT text (pure), ``viz.render`` draws it with graphviz's ``dot``,
``viz.diff`` compares two runs, ``viz.report`` writes the offline HTML report,
``viz.export`` turns inferred instances into OTLP, Zipkin or Jaeger traces, and
``viz.demo`` runs the whole job on the paper's multi-tier system.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tracefmt.lazy import lazy_package

#: Trace formats ``viz.export`` writes (here, not there: the command line's choices
#: need them without NumPy and Arrow).
EXPORT_FORMATS = ("otlp", "zipkin", "jaeger")
#: Convolution settings of the demo (``viz.demo``): 2 ms quanta resolve the tiers'
#: millisecond delays, half a second covers the added 200 ms; paths start at the client.
DEMO_CONVOLUTION: dict[str, float | str] = {"quantum_s": 0.002, "max_lag_s": 0.5, "root": "client"}

if TYPE_CHECKING:
    from viz.demo import DemoResult, run_demo
    from viz.diff import (
        PathsDiff,
        convolution_diff_dot,
        diff_convolution,
        diff_dot,
        diff_paths,
        format_change,
    )
    from viz.dot import convolution_dot, dot_quote, format_s, paths_dot, pattern_dot
    from viz.export import export_traces, write_export
    from viz.paths import (
        collapse_replicas,
        confident_patterns,
        pattern_shape,
        replica_name,
        select_patterns,
        self_times,
        shape_of,
        tree_lines,
        visits,
    )
    from viz.render import FORMATS, dot_binary, render_dot, write_graph
    from viz.report import build_report, inline_svg, write_report

#: Where each public name lives: a module is imported when one of its names is first used.
_EXPORTS = {
    "viz.demo": ["DemoResult", "run_demo"],
    "viz.diff": [
        "PathsDiff",
        "convolution_diff_dot",
        "diff_convolution",
        "diff_dot",
        "diff_paths",
        "format_change",
    ],
    "viz.dot": ["convolution_dot", "dot_quote", "format_s", "paths_dot", "pattern_dot"],
    "viz.export": ["export_traces", "write_export"],
    "viz.paths": [
        "collapse_replicas",
        "confident_patterns",
        "pattern_shape",
        "replica_name",
        "select_patterns",
        "self_times",
        "shape_of",
        "tree_lines",
        "visits",
    ],
    "viz.render": ["FORMATS", "dot_binary", "render_dot", "write_graph"],
    "viz.report": ["build_report", "inline_svg", "write_report"],
}
__getattr__, __dir__ = lazy_package(__name__, _EXPORTS)

__all__ = [
    "DEMO_CONVOLUTION",
    "EXPORT_FORMATS",
    "FORMATS",
    "DemoResult",
    "PathsDiff",
    "build_report",
    "collapse_replicas",
    "confident_patterns",
    "convolution_diff_dot",
    "convolution_dot",
    "diff_convolution",
    "diff_dot",
    "diff_paths",
    "dot_binary",
    "dot_quote",
    "export_traces",
    "format_change",
    "format_s",
    "inline_svg",
    "paths_dot",
    "pattern_dot",
    "pattern_shape",
    "render_dot",
    "replica_name",
    "run_demo",
    "select_patterns",
    "self_times",
    "shape_of",
    "tree_lines",
    "visits",
    "write_export",
    "write_graph",
    "write_report",
]
