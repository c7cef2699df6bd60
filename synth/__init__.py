"""maketrace-style synthetic traces with ground truth: tracelets, topologies, faults.

Configuration format: ``synth/README.md``. Entry points: ``load_config`` then
``generate_trace`` (streaming to a file) or ``generate_table`` (in memory).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tracefmt.lazy import lazy_package

if TYPE_CHECKING:
    from synth.config import (
        CallSpec,
        ConfigError,
        Delay,
        Faults,
        HopSpec,
        NodeDelay,
        SynthConfig,
        TraceletSpec,
        load_config,
        parse_config,
        with_delay_spread,
    )
    from synth.faults import CaptureQueue, stamp_skew
    from synth.generate import SynthReport, generate_table, generate_trace
    from synth.truth import mean_parallelism

#: Where each public name lives: a module is imported when one of its names is first used.
_EXPORTS = {
    "synth.config": [
        "CallSpec",
        "ConfigError",
        "Delay",
        "Faults",
        "HopSpec",
        "NodeDelay",
        "SynthConfig",
        "TraceletSpec",
        "load_config",
        "parse_config",
        "with_delay_spread",
    ],
    "synth.faults": ["CaptureQueue", "stamp_skew"],
    "synth.generate": ["SynthReport", "generate_table", "generate_trace"],
    "synth.truth": ["mean_parallelism"],
}
__getattr__, __dir__ = lazy_package(__name__, _EXPORTS)

__all__ = [
    "CallSpec",
    "CaptureQueue",
    "ConfigError",
    "Delay",
    "Faults",
    "HopSpec",
    "NodeDelay",
    "SynthConfig",
    "SynthReport",
    "TraceletSpec",
    "generate_table",
    "generate_trace",
    "load_config",
    "mean_parallelism",
    "parse_config",
    "stamp_skew",
    "with_delay_spread",
]
