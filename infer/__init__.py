"""Causal path inference from message traces: nesting (RPC), pattern aggregation, evaluation.

``infer_nesting(trace)`` (the most accurate preset; ``infer_nesting(trace, "paper")``
for the 2003 scoreboard; every setting in ``NestingParams``) returns a
``NestingResult`` whose ``to_json()`` is the paths file of ``results.md`` and whose
``instances_table()`` lists every call pair with its inferred parent, instance, pattern
and confidence. ``infer_convolution(trace,
quantum_s=..., max_lag_s=...)`` (free-form messages) returns a ``ConvolutionResult`` with
linear paths and the output graph.
"""

from infer.calibration import Calibration, reliability, reliability_lines
from infer.callpairs import CallPairs, NodeCodes, match_calls, node_codes
from infer.convolution import ConvolutionParams, ConvolutionResult, DelaySpike, LinearPath, infer_convolution
from infer.evaluate import evaluate_convolution, evaluate_paths, true_linear_paths, true_pairs, true_patterns
from infer.nesting import (
    NestingResult,
    Stage,
    confident_instances,
    infer_nesting,
    nesting_stages,
    read_instances,
)
from infer.params import BOARDS, PRESETS, NestingParams
from infer.patterns import Pattern, build_patterns, group_stats
from tracefmt.patterns import latency_stats

__all__ = [
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
    "evaluate_convolution",
    "evaluate_paths",
    "group_stats",
    "infer_convolution",
    "infer_nesting",
    "latency_stats",
    "match_calls",
    "nesting_stages",
    "node_codes",
    "read_instances",
    "reliability",
    "reliability_lines",
    "true_linear_paths",
    "true_pairs",
    "true_patterns",
]
