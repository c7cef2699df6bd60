"""``trend analyze`` / ``check`` on a Dask cluster: the same answer as in one process.

The cluster is a real local one of two worker processes, started once for the module.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import pickle
from pathlib import Path

import numpy as np
import pytest

from tracefmt import ParameterError
from tracefmt.cluster import open_runner
from trend import Series, load_series
from trend.analysis import GROUPS_PER_SLOT, analyze_all
from wirepath.cli import main

# A local cluster's scheduler serves HTTP on port 8787 even without a dashboard; when that
# port is taken (this module's cluster while the CLI test starts its own, or another run on
# this host) dask moves to a free port, warns, and leaves the socket of its first try to the
# garbage collector (which may report it during a later test). No failure of the analysis.
pytestmark = [
    pytest.mark.filterwarnings(r"ignore:Port \d+ is already in use:UserWarning"),
    pytest.mark.filterwarnings(
        r"ignore:Exception ignored in. <socket\.socket:pytest.PytestUnraisableExceptionWarning"
    ),
]

SAMPLES = Path(__file__).resolve().parents[2] / "samples" / "trend"
COPIES = 6  # of the 4 MRR series, each on its own testbed: 24 series, plus 1 latency series


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """The sample MRR series on COPIES testbeds (values scaled a little per copy, so the
    copies are not one answer repeated), and the sample latency series."""
    root = tmp_path_factory.mktemp("dask")
    with (SAMPLES / "mrr.csv").open(newline="") as f:
        rows = list(csv.DictReader(f))
    many = root / "mrr-many.csv"
    with many.open("w", newline="") as f:
        out = csv.DictWriter(f, fieldnames=list(rows[0]))
        out.writeheader()
        for k in range(COPIES):
            for row in rows:
                value = (
                    row["value"]
                    if row["value"] in ("", "nan", "fail")
                    else float(row["value"]) * (1 + k / 50)
                )
                out.writerow({**row, "testbed": f"{row['testbed']}-{k}", "value": value})
    store = root / "store"
    assert main(["trend", "import", str(many), "--store", str(store)]) == 0
    assert main(["trend", "import", str(SAMPLES / "latency.json"), "--store", str(store)]) == 0
    return store


@pytest.fixture(scope="module")
def series(store):
    found = load_series(store)
    assert len(found) == 4 * COPIES + 1
    return found


@pytest.fixture(scope="module")
def cluster():
    with open_runner(workers=2) as run:
        yield run


class _Shipping:
    """A runner that pickles each task's items and result, as a cluster does, and records
    the groups it was given."""

    def __init__(self, width: int) -> None:
        self.width = width
        self.groups: list = []

    def map(self, fn, items, **common):
        self.groups = list(items)
        return [pickle.loads(pickle.dumps(fn(pickle.loads(pickle.dumps(i)), **common))) for i in items]


def _json(trends):
    return [t.to_json() for t in trends]


def test_groups_are_contiguous_bounded_and_in_order(series):
    want = analyze_all(series)
    for width, groups in [(1, GROUPS_PER_SLOT), (2, 2 * GROUPS_PER_SLOT), (100, len(series))]:
        run = _Shipping(width)
        got = analyze_all(series, runner=run)
        assert len(run.groups) == groups
        assert [g.one(k).test for g in run.groups for k in range(len(g.names))] == [s.test for s in series]
        assert _json(got) == _json(want)
        # The caller's own series, not copies back from the workers.
        assert all(t.series is s for t, s in zip(got, series, strict=True))
    assert analyze_all([], runner=_Shipping(2)) == []


@pytest.mark.slow
@pytest.mark.parametrize("method", ["mdl", "tmm"])
def test_cluster_gives_the_in_process_answer(series, cluster, method):
    assert cluster.width == 2
    here = analyze_all(series, method=method)
    there = analyze_all(series, method=method, runner=cluster)
    assert _json(there) == _json(here)
    for t, u in zip(there, here, strict=True):
        assert t.series is u.series  # both hold the caller's series
        for name in ("values", "trend", "marks"):
            np.testing.assert_array_equal(getattr(t, name), getattr(u, name))
            assert getattr(t, name).dtype == getattr(u, name).dtype
        assert (t.short_change, t.long_change) == (u.short_change, u.long_change)
    # Not a comparison of nothing: the planted changes are found there too.
    assert sum(t.regressions + t.progressions for t in there) > 0
    if method == "mdl":
        assert any(t.regressed for t in there)


@pytest.mark.slow
def test_cluster_raises_the_first_bad_series_error(series, cluster):
    def spoiled(s: Series) -> Series:
        return dataclasses.replace(s, trials=(*s.trials[:-1], np.full(1, np.inf)))

    # Two bad series, far apart (other groups): the first in order is named, as in one process.
    bad = list(series)
    bad[5], bad[20] = spoiled(bad[5]), spoiled(bad[20])
    with pytest.raises(ParameterError) as here:
        analyze_all(bad)
    with pytest.raises(ParameterError) as there:
        analyze_all(bad, runner=cluster)
    assert str(there.value) == str(here.value)
    assert f"test {series[5].test!r} testbed {series[5].testbed!r}:" in str(there.value)


@pytest.mark.slow
def test_cli_analyze_on_local_workers_matches(store, capsys):
    assert main(["trend", "analyze", "--store", str(store), "--json"]) == 0
    here = json.loads(capsys.readouterr().out)
    assert main(["trend", "analyze", "--store", str(store), "--workers", "2", "--json"]) == 0
    there = json.loads(capsys.readouterr().out)
    assert len(there["series"]) == 4 * COPIES + 1
    assert there == here


@pytest.mark.slow
def test_cli_check_on_a_running_scheduler_matches(store, cluster, capsys):
    args = ["trend", "check", "--store", str(store), "--json"]
    assert main(args) == 1  # the planted regressions
    here = capsys.readouterr().out
    assert main([*args, "--scheduler", cluster.client.scheduler.address]) == 1
    assert capsys.readouterr().out == here


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--workers", "0"], "--workers: 0 is out of range"),
        (["--scheduler", "tcp://127.0.0.1:8786", "--workers", "2"], "not allowed with argument"),
    ],
)
@pytest.mark.parametrize("verb", ["analyze", "check"])
def test_bad_cluster_flags_are_usage_errors(store, capsys, verb, flags, message):
    assert main(["trend", verb, "--store", str(store), *flags]) == 2
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if "error:" in line]
    assert len(errors) == 1
    assert message in errors[0]


@pytest.mark.slow
@pytest.mark.parametrize(("verb", "status"), [("analyze", 1), ("check", 3)])
def test_no_scheduler_there_is_one_clear_line(store, capsys, verb, status):
    assert main(["trend", verb, "--store", str(store), "--scheduler", "tcp://127.0.0.1:1"]) == status
    out = capsys.readouterr()
    assert out.out == ""
    assert len(out.err.splitlines()) == 1
    assert out.err.startswith("error: no Dask scheduler answers at 'tcp://127.0.0.1:1'")
