"""Pictures, reports and exports of inferred paths.

``viz.dot`` makes DOT text (pure), ``viz.render`` draws it with graphviz's ``dot``,
``viz.diff`` compares two runs, ``viz.report`` writes the offline HTML report,
``viz.export`` turns inferred instances into OTLP, Zipkin or Jaeger traces, and
``viz.demo`` runs the whole job on the paper's multi-tier system.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tracefmt.lazy import lazy_package

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
    from viz.export import EXPORT_FORMATS, export_traces, write_export
    from viz.paths import (
        collapse_replicas,
        pattern_shape,
        replica_name,
        select_patterns,
        self_times,
        shape_of,
        visits,
    )
    from viz.render import FORMATS, dot_binary, render_dot, write_graph
    from viz.report import build_report, inline_svg

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
    "viz.export": ["EXPORT_FORMATS", "export_traces", "write_export"],
    "viz.paths": [
        "collapse_replicas",
        "pattern_shape",
        "replica_name",
        "select_patterns",
        "self_times",
        "shape_of",
        "visits",
    ],
    "viz.render": ["FORMATS", "dot_binary", "render_dot", "write_graph"],
    "viz.report": ["build_report", "inline_svg"],
}
__getattr__, __dir__ = lazy_package(__name__, _EXPORTS)

__all__ = [
    "EXPORT_FORMATS",
    "FORMATS",
    "DemoResult",
    "PathsDiff",
    "build_report",
    "collapse_replicas",
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
    "visits",
    "write_export",
    "write_graph",
]
