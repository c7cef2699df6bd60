"""Causal path inference from message traces: nesting (RPC), pattern aggregation, evaluation.

``infer_nesting(trace)`` (the most accurate preset; ``infer_nesting(trace, "paper")``
for the 2003 scoreboard; every setting in ``NestingParams``) returns a
``NestingResult`` whose ``to_json()`` is the paths file of ``results.md`` and whose
``instances_table()`` lists every call pair with its inferred parent, instance, pattern
and confidence. ``infer_convolution(trace, quantum_s=...)`` (free-form messages; every
setting in ``ConvolutionParams``) returns a ``ConvolutionResult`` with linear paths and
the output graph. ``evaluate_paths`` scores a paths file against a synthetic trace's
truth; ``nesting_lines``, ``convolution_lines`` and ``evaluation_lines`` summarize runs
and reports as text.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from infer.calibration import Calibration, reliability, reliability_lines
    from infer.callpairs import CallPairs, NodeCodes, match_calls, node_codes
    from infer.convolution import ConvolutionResult, DelaySpike, LinearPath, infer_convolution
    from infer.evaluate import (
        evaluate_convolution,
        evaluate_paths,
        true_linear_paths,
        true_pairs,
        true_patterns,
    )
    from infer.nesting import (
        NestingResult,
        Stage,
        confident_instances,
        infer_nesting,
        nesting_stages,
        read_instances,
    )
    from infer.params import AUTO_LAG_QUANTA, BOARDS, PRESETS, ConvolutionParams, NestingParams
    from infer.patterns import Pattern, build_patterns, group_stats
    from infer.summary import convolution_lines, evaluation_lines, nesting_lines, pattern_line
    from tracefmt.patterns import latency_stats

#: Where each public name lives: the package imports a module on first use, so that
#: ``import infer`` (every command line does) does not load SciPy's statistics.
_HOME = {
    "Calibration": "infer.calibration",
    "reliability": "infer.calibration",
    "reliability_lines": "infer.calibration",
    "CallPairs": "infer.callpairs",
    "NodeCodes": "infer.callpairs",
    "match_calls": "infer.callpairs",
    "node_codes": "infer.callpairs",
    "ConvolutionResult": "infer.convolution",
    "DelaySpike": "infer.convolution",
    "LinearPath": "infer.convolution",
    "infer_convolution": "infer.convolution",
    "evaluate_convolution": "infer.evaluate",
    "evaluate_paths": "infer.evaluate",
    "true_linear_paths": "infer.evaluate",
    "true_pairs": "infer.evaluate",
    "true_patterns": "infer.evaluate",
    "NestingResult": "infer.nesting",
    "Stage": "infer.nesting",
    "confident_instances": "infer.nesting",
    "infer_nesting": "infer.nesting",
    "nesting_stages": "infer.nesting",
    "read_instances": "infer.nesting",
    "AUTO_LAG_QUANTA": "infer.params",
    "BOARDS": "infer.params",
    "PRESETS": "infer.params",
    "ConvolutionParams": "infer.params",
    "NestingParams": "infer.params",
    "Pattern": "infer.patterns",
    "build_patterns": "infer.patterns",
    "group_stats": "infer.patterns",
    "convolution_lines": "infer.summary",
    "evaluation_lines": "infer.summary",
    "nesting_lines": "infer.summary",
    "pattern_line": "infer.summary",
    "latency_stats": "tracefmt.patterns",
}


def __getattr__(name: str) -> Any:
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module 'infer' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_HOME})


__all__ = [
    "AUTO_LAG_QUANTA",
    "BOARDS",
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
    "evaluate_convolution",
    "evaluate_paths",
    "evaluation_lines",
    "group_stats",
    "infer_convolution",
    "infer_nesting",
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
    "true_patterns",
]
