"""Performance series over runs: MDL grouping, trimmed moving statistics, per-patch verdicts,
Mako's window deviation analysis, trend compliance and the dashboard.

Series live in the store's ``results/`` (:mod:`trend.series`); everything else takes plain
numbers or :class:`Series`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tracefmt.lazy import lazy_package

if TYPE_CHECKING:
    from trend.analysis import SeriesTrend, alert_text, analyze_all, analyze_series, trend_compliance
    from trend.compare import Comparison, compare_runs, format_comparison, parse_values, read_compare_file
    from trend.dashboard import DashboardReport, graph_figure, write_dashboard
    from trend.mdl import (
        MdlGroup,
        MdlPrograms,
        MdlResult,
        check_direction,
        classify_mdl,
        group_bits,
        renormalized,
        resolve_unit,
        run_stats,
        trial_stats,
    )
    from trend.numbers import (
        DIRECTIONS,
        IMPORT_COLUMNS,
        MAX_SBPS,
        MAX_TRIALS,
        METHODS,
        check_number,
        finite_json,
    )
    from trend.paths import PathSeries, PathsImport, instance_trials, path_series, paths_import, paths_results
    from trend.series import (
        RESULTS_SCHEMA,
        Series,
        import_results,
        load_series,
        parse_time_ns,
        read_result_rows,
        results_table,
        write_results,
    )
    from trend.sources import (
        covered_windows,
        mrr_from_timestamps,
        mrr_results,
        trial_windows,
    )
    from trend.state import STATE_FILE, load_programs, save_programs, state_path
    from trend.tmm import TmmResult, classify_tmm
    from trend.wda import WdaResult, WdaRun, analyze_wda, load_wda_config, read_wda_runs

#: Where each public name lives: a module is imported when one of its names is first used.
_EXPORTS = {
    "trend.analysis": [
        "SeriesTrend",
        "alert_text",
        "analyze_all",
        "analyze_series",
        "trend_compliance",
    ],
    "trend.compare": ["Comparison", "compare_runs", "format_comparison", "parse_values", "read_compare_file"],
    "trend.dashboard": ["DashboardReport", "graph_figure", "write_dashboard"],
    "trend.mdl": [
        "MdlGroup",
        "MdlPrograms",
        "MdlResult",
        "check_direction",
        "classify_mdl",
        "group_bits",
        "renormalized",
        "resolve_unit",
        "run_stats",
        "trial_stats",
    ],
    "trend.state": ["STATE_FILE", "load_programs", "save_programs", "state_path"],
    "trend.numbers": [
        "DIRECTIONS",
        "IMPORT_COLUMNS",
        "MAX_SBPS",
        "MAX_TRIALS",
        "METHODS",
        "check_number",
        "finite_json",
    ],
    "trend.series": [
        "RESULTS_SCHEMA",
        "Series",
        "import_results",
        "load_series",
        "parse_time_ns",
        "read_result_rows",
        "results_table",
        "write_results",
    ],
    "trend.sources": [
        "covered_windows",
        "mrr_from_timestamps",
        "mrr_results",
        "trial_windows",
    ],
    "trend.paths": [
        "PathSeries",
        "PathsImport",
        "instance_trials",
        "path_series",
        "paths_import",
        "paths_results",
    ],
    "trend.tmm": ["TmmResult", "classify_tmm"],
    "trend.wda": ["WdaResult", "WdaRun", "analyze_wda", "load_wda_config", "read_wda_runs"],
}
__getattr__, __dir__ = lazy_package(__name__, _EXPORTS)

__all__ = [
    "DIRECTIONS",
    "IMPORT_COLUMNS",
    "MAX_SBPS",
    "MAX_TRIALS",
    "METHODS",
    "RESULTS_SCHEMA",
    "STATE_FILE",
    "Comparison",
    "DashboardReport",
    "MdlGroup",
    "MdlPrograms",
    "MdlResult",
    "PathSeries",
    "PathsImport",
    "Series",
    "SeriesTrend",
    "TmmResult",
    "WdaResult",
    "WdaRun",
    "alert_text",
    "analyze_all",
    "analyze_series",
    "analyze_wda",
    "check_direction",
    "check_number",
    "classify_mdl",
    "classify_tmm",
    "compare_runs",
    "covered_windows",
    "finite_json",
    "format_comparison",
    "graph_figure",
    "group_bits",
    "import_results",
    "instance_trials",
    "load_programs",
    "load_series",
    "load_wda_config",
    "mrr_from_timestamps",
    "mrr_results",
    "parse_time_ns",
    "parse_values",
    "path_series",
    "paths_import",
    "paths_results",
    "read_compare_file",
    "read_result_rows",
    "read_wda_runs",
    "renormalized",
    "resolve_unit",
    "results_table",
    "run_stats",
    "save_programs",
    "state_path",
    "trend_compliance",
    "trial_stats",
    "trial_windows",
    "write_dashboard",
    "write_results",
]
