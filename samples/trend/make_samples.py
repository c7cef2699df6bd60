"""Regenerate the sample series in this directory (seeded; same files every time).

python samples/trend/make_samples.py
"""

from __future__ import annotations

import csv
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
START = datetime(2026, 9, 1, 2, 0, tzinfo=UTC)


def mrr_csv(rng: np.random.Generator) -> None:
    """Four MRR tests on two testbeds, two runs a day (02:00, 14:00 UTC) for 45 days, 5 trials."""
    runs = 90
    tests = {
        # (testbed, test): level per run in pps
        ("2n-skx", "ip4base-64b-1c"): np.full(runs, 12.0e6),
        ("2n-skx", "ip6base-78b-1c"): np.r_[np.full(60, 10.5e6), np.full(30, 11.3e6)],  # progression
        ("3n-icx", "l2bdbase-64b-2c"): np.r_[np.full(84, 18.2e6), np.full(6, 17.1e6)],  # newest regression
        ("3n-icx", "ip4-ipsec-1518b-1c"): np.r_[np.full(30, 2.4e6), np.full(60, 2.45e6)],
    }
    with (HERE / "mrr.csv").open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["test", "testbed", "build", "time", "trial", "value", "unit", "direction", "tags"])
        for (testbed, test), level in tests.items():
            for k in range(runs):
                t = START + timedelta(hours=12 * k)
                failed_run = test == "ip4base-64b-1c" and k == runs - 3
                for trial in range(5):
                    v = level[k] * (1 + rng.normal(0, 0.004))
                    failed = failed_run or (test == "ip6base-78b-1c" and k == 40 and trial == 2)
                    w.writerow(
                        [
                            test,
                            testbed,
                            f"{1000 + k}",
                            t.strftime("%Y-%m-%dT%H:%M:%SZ"),
                            trial,
                            "fail" if failed else f"{v:.0f}",
                            "pps",
                            "bigger-is-better",
                            "mrr",
                        ]
                    )


def latency_json(rng: np.random.Generator) -> None:
    """A path latency (smaller is better) that rises by 15 % for the last 8 runs."""
    level = np.r_[np.full(32, 0.0210), np.full(8, 0.0242)]
    out = [
        {
            "test": "checkout-p50",
            "testbed": "staging",
            "build": f"r{k}",
            "time": (START + timedelta(days=k)).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "values": [round(float(v * (1 + rng.normal(0, 0.01))), 6) for _ in range(3)],
            "unit": "s",
            "direction": "smaller-is-better",
        }
        for k, v in enumerate(level)
    ]
    (HERE / "latency.json").write_text(json.dumps(out, indent=1) + "\n")


def perpatch(rng: np.random.Generator) -> None:
    """Parent and current trials of three tests (5 trials of 10 s): normal, regression, progression."""
    parent, current = [], []
    for name, level, change in (
        ("ip4base-64b", 12.0e6, 1.0),
        ("l2bd-64b", 18.0e6, 0.95),
        ("ip6-78b", 10e6, 1.04),
    ):
        parent.append(f"{name}: " + ", ".join(f"{level * (1 + rng.normal(0, 0.002)):.0f}" for _ in range(5)))
        current.append(
            f"{name}: " + ", ".join(f"{level * change * (1 + rng.normal(0, 0.002)):.0f}" for _ in range(5))
        )
    (HERE / "parent.txt").write_text("\n".join(parent) + "\n")
    (HERE / "current.txt").write_text("\n".join(current) + "\n")


def wda(rng: np.random.Generator) -> None:
    """Mako-style runs: p50 latency per run; the current run is 30 % slower."""
    with (HERE / "wda_runs.csv").open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["run_key", "timestamp_ms", "build_id", "metric", "value"])
        for k in range(40):
            p50 = 21.0 * (1 + rng.normal(0, 0.02)) * (1.3 if k == 39 else 1.0)
            ts = int((START + timedelta(hours=6 * k)).timestamp() * 1000)
            w.writerow([f"run{k}", ts, 500 + k, "latency_p50_ms", f"{p50:.3f}"])
            w.writerow([f"run{k}", ts, 500 + k, "errors", "" if k % 10 == 3 else int(rng.integers(0, 3))])
    checks = {
        "run_order": "TIMESTAMP",
        "tolerance_check_list": [
            {
                "data_filter": {"value_key": "latency_p50_ms", "ignore_missing_data": True},
                "recent_window_size": 1,
                "minimum_historical_window_size": 20,
                "direction_bias": "IGNORE_DECREASE",
                "median_tolerance_params_list": [{"const_term": 0.0, "median_coeff": 0.05, "mad_coeff": 1.0}],
            },
            {
                "data_filter": {"value_key": "errors", "ignore_missing_data": True},
                "recent_window_size": 3,
                "direction_bias": "IGNORE_DECREASE",
                "mean_tolerance_params_list": [{"const_term": 2.0}],
            },
        ],
    }
    (HERE / "wda_checks.json").write_text(json.dumps(checks, indent=1) + "\n")


if __name__ == "__main__":
    rng = np.random.default_rng(20260901)
    mrr_csv(rng)
    latency_json(rng)
    perpatch(rng)
    wda(rng)
