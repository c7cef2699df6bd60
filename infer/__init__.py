"""Causal path inference from message traces: nesting (RPC), pattern aggregation, evaluation.

``infer_nesting(trace)`` (the most accurate preset; ``infer_nesting(trace, "paper")``
for the 2003 scoreboard; every setting in ``NestingParams``) returns a
``NestingResult`` whose ``to_json()`` is the paths file of ``docs/files.md`` and whose
``instances_table()`` lists every call pair with its inferred parent, instance, pattern
and confidence. ``infer_convolution(trace, quantum_s=...)`` (free-form messages; every
setting in ``ConvolutionParams``) returns a ``ConvolutionResult`` with linear paths and
the output graph. ``evaluate_paths`` scores a paths file against a synthetic trace's
truth; ``nesting_lines``, ``convolution_lines`` and ``evaluation_lines`` summarize runs
and reports as text.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tracefmt.lazy import lazy_package

if TYPE_CHECKING:
    from infer.calibration import Calibration, reliability, reliability_lines
    from infer.callpairs import CallPairs, NodeCodes, match_calls, node_codes
    from infer.convolution import ConvolutionResult, DelaySpike, LinearPath, infer_convolution
    from infer.evaluate import (
        error_sources,
        evaluate_convolution,
        evaluate_paths,
        true_linear_paths,
        true_pairs,
        true_parents,
        true_patterns,
    )
    from infer.keys import key_evaluation, key_evaluation_lines
    from infer.nesting import (
        NestingResult,
        Stage,
        confident_instances,
        infer_nesting,
        nesting_stages,
        read_instances,
    )
    from infer.params import (
        AUTO_LAG_QUANTA,
        BOARDS,
        CALIBRATE_FROM,
        PRESETS,
        ConvolutionParams,
        NestingParams,
    )
    from infer.patterns import Pattern, build_patterns, group_stats
    from infer.summary import convolution_lines, evaluation_lines, nesting_lines, pattern_line
    from tracefmt.patterns import latency_stats

#: Where each public name lives: a module is imported when one of its names is first used,
#: so that ``import infer`` (every command line does) does not load SciPy's statistics.
_EXPORTS = {
    "infer.calibration": ["Calibration", "reliability", "reliability_lines"],
    "infer.callpairs": ["CallPairs", "NodeCodes", "match_calls", "node_codes"],
    "infer.convolution": ["ConvolutionResult", "DelaySpike", "LinearPath", "infer_convolution"],
    "infer.evaluate": [
        "error_sources",
        "evaluate_convolution",
        "evaluate_paths",
        "true_linear_paths",
        "true_pairs",
        "true_parents",
        "true_patterns",
    ],
    "infer.keys": ["key_evaluation", "key_evaluation_lines"],
    "infer.nesting": [
        "NestingResult",
        "Stage",
        "confident_instances",
        "infer_nesting",
        "nesting_stages",
        "read_instances",
    ],
    "infer.params": [
        "AUTO_LAG_QUANTA",
        "BOARDS",
        "CALIBRATE_FROM",
        "PRESETS",
        "ConvolutionParams",
        "NestingParams",
    ],
    "infer.patterns": ["Pattern", "build_patterns", "group_stats"],
    "infer.summary": ["convolution_lines", "evaluation_lines", "nesting_lines", "pattern_line"],
    "tracefmt.patterns": ["latency_stats"],
}
__getattr__, __dir__ = lazy_package(__name__, _EXPORTS)


__all__ = [
    "AUTO_LAG_QUANTA",
    "BOARDS",
    "CALIBRATE_FROM",
    "PRESETS",
    "Calibration",
    "CallPairs",
    "ConvolutionParams",
    "ConvolutionResult",
    "DelaySpike",
    "LinearPath",
    "NestingParams",
    "NestingResult",
    "NodeCodes",
    "Pattern",
    "Stage",
    "build_patterns",
    "confident_instances",
    "convolution_lines",
    "error_sources",
    "evaluate_convolution",
    "evaluate_paths",
    "evaluation_lines",
    "group_stats",
    "infer_convolution",
    "infer_nesting",
    "key_evaluation",
    "key_evaluation_lines",
    "latency_stats",
    "match_calls",
    "nesting_lines",
    "nesting_stages",
    "node_codes",
    "pattern_line",
    "read_instances",
    "reliability",
    "reliability_lines",
    "true_linear_paths",
    "true_pairs",
    "true_parents",
    "true_patterns",
]
