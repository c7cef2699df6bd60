"""``infer convolution`` with its edge pairs correlated by the tasks of a Dask cluster: the
same paths file, to the last bit, as in one process.

The cluster is a real local one of two worker processes, started once for the module;
a runner that pickles like a cluster checks the bookkeeping without one. Traces come
from synth configurations with ground truth; where the in-process tests assert the true
paths, these assert them of the cluster's result too.
"""

from __future__ import annotations

import copy
import gc
import json
import pickle
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import infer
import synth
from infer import _convsignal
from infer.convolution import _GROUPS_PER_SLOT
from tracefmt import ParameterError
from tracefmt.cluster import open_runner
from wirepath.cli import main

# A local cluster's scheduler serves HTTP on port 8787 even without a dashboard; when that
# port is taken (this module's cluster while the CLI test starts its own, or another run on
# this host) dask moves to a free port, warns, and leaves the socket of its first try to
# the garbage collector (collected below, within these tests). No failure of the inference.
pytestmark = [
    pytest.mark.filterwarnings(r"ignore:Port \d+ is already in use:UserWarning"),
    pytest.mark.filterwarnings(
        r"ignore:Exception ignored in. <socket\.socket:pytest.PytestUnraisableExceptionWarning"
    ),
]

SAMPLES = Path(__file__).resolve().parents[2] / "samples" / "synth"


CHAIN_KW: dict[str, Any] = {"quantum_s": 0.01, "max_lag_s": 1.0}
RPC_KW: dict[str, Any] = {"quantum_s": 0.001, "max_lag_s": 0.2, "band_s": 0.001}
#: Multitier at these settings mixes the methods: most pairs direct, some by FFT, some
#: near the break-even, where what is cached decides.
MT_KW: dict[str, Any] = {"quantum_s": 0.001, "max_lag_s": 1.0, "band_s": 0.002}


@pytest.fixture(scope="module")
def multitier() -> pa.Table:
    """Eight nodes, 24 edges; WS1 and WS2 have four edges in and four out."""
    config = replace(synth.load_config(SAMPLES / "multitier.toml"), messages=30000, parallelism=4.0)
    return synth.generate_table(config)[0]


@pytest.fixture(scope="module")
def gateway() -> pa.Table:
    """Twelve nodes; the gateway calls two to four services at once."""
    return synth.generate_table(replace(synth.load_config(SAMPLES / "gateway-fanout.toml"), messages=30000))[
        0
    ]


@pytest.fixture(scope="module")
def cluster():
    with open_runner(workers=2) as run:
        gc.collect()
        yield run


class _Shipping:
    """A runner that pickles what it is given and what it returns, as a cluster does,
    and records the calls of ``map``."""

    def __init__(self, width: int) -> None:
        self.width = width
        self.calls: list[tuple[list[Any], dict[str, int]]] = []

    def map(self, fn, items, **common):
        sizes = {k: len(pickle.dumps(v)) for k, v in common.items()}
        self.calls.append((list(items), sizes))
        shipped = {k: pickle.loads(pickle.dumps(v)) for k, v in common.items()}
        return [pickle.loads(pickle.dumps(fn(pickle.loads(pickle.dumps(i)), **shipped))) for i in items]


def _same(a: infer.ConvolutionResult, b: infer.ConvolutionResult) -> None:
    """Equal paths files, byte for byte (floats to the last bit, stats, notes, graph)."""
    assert json.dumps(b.to_json()) == json.dumps(a.to_json())
    assert b.stats == a.stats


def _node_paths(r: infer.ConvolutionResult) -> list[tuple[str, ...]]:
    return [p.nodes for p in r.paths]


# --- the bookkeeping, with a runner that ships as a cluster does ------------------------


@pytest.mark.parametrize("method", ["auto", "fft", "direct"])
def test_shipped_pairs_give_the_in_process_result(multitier: pa.Table, method: str) -> None:
    here = infer.infer_convolution(multitier, method=method, **MT_KW)
    run = _Shipping(width=3)
    there = infer.infer_convolution(multitier, method=method, runner=run, **MT_KW)
    _same(here, there)
    # One map: the signals are shipped once, in a few groups of pairs per worker thread.
    ((groups, sizes),) = run.calls
    assert 1 < len(groups) <= _GROUPS_PER_SLOT * run.width
    assert sizes["corr"] < 20 * multitier.num_rows  # per-message slots and times, no caches
    jobs = [job for g in groups for job in g]
    assert len(jobs) == len(set(jobs))
    # Every pair the run asks for (and a few it does not) is computed, never many more.
    pairs = {(a, b) for a, b, _ in jobs}
    assert here.stats["pairs_correlated"] <= len(pairs) <= 1.1 * here.stats["pairs_correlated"]
    if method == "auto":
        assert 0 < here.stats["pairs_direct"] < here.stats["pairs_correlated"]
        # Pairs only growth asks for, near the break-even, go both ways; no others do.
        assert len(pairs) < len(jobs) <= 1.2 * len(pairs)
    else:
        assert len(jobs) == len(pairs)


def test_the_method_chosen_follows_an_evicting_cache(
    multitier: pa.Table, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A cache of three edges' spectra: which are held when a pair comes up, and so how
    # it is correlated, depends on the order the run asks; the replay follows it.
    here = infer.infer_convolution(multitier, **MT_KW)
    monkeypatch.setattr(_convsignal, "_CACHE_BYTES", 3 * 16 * (here.stats["fft_length"] // 2 + 1))
    small = infer.infer_convolution(multitier, **MT_KW)
    assert small.stats["ffts"] > here.stats["ffts"]  # spectra computed again after eviction
    _same(small, infer.infer_convolution(multitier, runner=_Shipping(width=2), **MT_KW))


@pytest.mark.parametrize(
    "kw",
    [{"root": "client"}, {"root": "client", "max_depth": 2}, {"root": ["WS", "DB"]}, {"min_count": 1e9}],
    ids=["root", "depth", "inner-roots", "nothing-kept"],
)
def test_shipped_pairs_with_roots_and_cuts(rpc: pa.Table, kw: dict[str, Any]) -> None:
    _same(
        infer.infer_convolution(rpc, **RPC_KW, **kw),
        infer.infer_convolution(rpc, runner=_Shipping(2), **RPC_KW, **kw),
    )


def test_a_bad_root_is_refused_before_anything_is_shipped(chain: pa.Table) -> None:
    run = _Shipping(2)
    with pytest.raises(ParameterError, match="'nobody' is not a node"):
        infer.infer_convolution(chain, root="nobody", runner=run, **CHAIN_KW)
    assert run.calls == []


def _correlator() -> _convsignal.Correlator:
    """Three edges of 8000, 8000 and 3100 messages over 5000 quanta: pair (0, 1) costs
    far more direct than by FFT; (0, 2) about five times the two inverse transforms
    (direct on a fresh correlator, by FFT once the spectra of edge 0 are cached)."""
    rng = np.random.default_rng(4)
    sizes = [8000, 8000, 3100]
    slots = np.concatenate([rng.integers(0, 5000, k) for k in sizes])
    edge = np.repeat(np.arange(3), sizes)
    order = np.argsort(slots, kind="stable")
    return _convsignal.Correlator(slots[order], edge[order], 3, 5000, 60, 7, method="auto")


def test_a_correlator_ships_without_its_caches() -> None:
    corr = _correlator()
    sq, raw = corr.correlate(0, 1)
    assert corr._cache
    assert corr._sparse
    for twin in (pickle.loads(pickle.dumps(corr)), copy.copy(corr)):
        assert not twin._cache
        assert not twin._sparse
        tsq, traw = twin.correlate(0, 1, direct=False)
        assert tsq.tobytes() == sq.tobytes()
        assert traw.tobytes() == raw.tobytes()
    # The original keeps its own.
    assert corr._cache
    assert corr._sparse


@pytest.mark.parametrize("pairs", [[(0, 1), (0, 2), (2, 0)], [(0, 2), (0, 1), (2, 0)]])
def test_a_replay_chooses_as_a_run_that_computes(pairs: list[tuple[int, int]]) -> None:
    corr = _correlator()
    assert corr.methods(0, 1) == (False,)
    assert corr.methods(0, 2) == (False, True)  # near the break-even: the cache decides
    taken = []
    for a, b in pairs:
        before = corr.direct_pairs
        corr.correlate(a, b)
        taken.append(corr.direct_pairs > before)
    assert taken[pairs.index((0, 2))] == (pairs[0] == (0, 2))  # direct only while nothing is cached
    fresh = _correlator()
    assert fresh.plan(pairs) == taken
    assert not fresh._cache
    assert fresh.ffts == fresh.direct_pairs == 0
    replayed = [fresh.replay(a, b) for a, b in pairs]
    assert replayed == taken
    assert (fresh.ffts, fresh.direct_pairs) == (corr.ffts, corr.direct_pairs)


# --- on a real cluster of two workers ---------------------------------------------------


@pytest.mark.slow
def test_cluster_finds_the_chain_and_its_delays(chain: pa.Table, cluster) -> None:
    assert cluster.width == 2
    here = infer.infer_convolution(chain, **CHAIN_KW)
    there = infer.infer_convolution(chain, runner=cluster, **CHAIN_KW)
    _same(here, there)
    assert there.roots == ["a"]
    assert _node_paths(there) == [("a", "b", "c", "d")]
    (p,) = there.paths
    assert p.delays_s[0] == pytest.approx((0.05, 0.3), abs=0.01)
    assert p.delays_s[1] == pytest.approx((0.2,), abs=0.01)


@pytest.mark.slow
@pytest.mark.parametrize("method", ["auto", "fft"])
def test_cluster_finds_the_rpc_path(rpc: pa.Table, cluster, method: str) -> None:
    here = infer.infer_convolution(rpc, method=method, **RPC_KW)
    there = infer.infer_convolution(rpc, method=method, runner=cluster, **RPC_KW)
    _same(here, there)
    assert there.roots == ["client"]
    nodes = _node_paths(there)
    p = there.paths[nodes.index(("client", "WS", "DB", "WS", "client"))]
    assert [d[0] for d in p.delays_s] == pytest.approx([0.004, 0.010, 0.002], abs=0.001)
    assert ("client", "WS", "client") not in nodes  # the long path with its middle left out


@pytest.mark.slow
def test_cluster_on_nodes_of_many_edges(multitier: pa.Table, gateway: pa.Table, cluster) -> None:
    here = infer.infer_convolution(multitier, **MT_KW)
    there = infer.infer_convolution(multitier, runner=cluster, **MT_KW)
    _same(here, there)
    # All 16 true request paths are among those found.
    report = infer.evaluate_paths(there.to_json(), multitier)
    assert report["patterns"]["true"] == 16
    assert report["patterns"]["false_negatives"] == 0
    kw: dict[str, Any] = {"quantum_s": 0.0005, "max_lag_s": 0.2, "band_s": 0.001}
    here = infer.infer_convolution(gateway, **kw)
    there = infer.infer_convolution(gateway, runner=cluster, **kw)
    _same(here, there)
    assert there.roots == ["client"]
    assert there.paths


# --- the command line ------------------------------------------------------------------


@pytest.fixture(scope="module")
def mt_file(tmp_path_factory: pytest.TempPathFactory, multitier: pa.Table) -> Path:
    path = tmp_path_factory.mktemp("mt") / "mt.parquet"
    pq.write_table(multitier, path)
    return path


def _argv(trace: Path, out: Path, *extra: str) -> list[str]:
    return [
        "infer",
        "convolution",
        str(trace),
        "--quantum",
        "1ms",
        "--band",
        "2ms",
        "--out",
        str(out),
        *extra,
    ]


@pytest.mark.slow
def test_cli_on_local_workers_writes_the_same_file(
    mt_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(_argv(mt_file, tmp_path / "here.json", "--json")) == 0
    here = capsys.readouterr().out
    assert main(_argv(mt_file, tmp_path / "there.json", "--json", "--workers", "2")) == 0
    there = capsys.readouterr().out
    assert there == here
    assert (tmp_path / "there.json").read_bytes() == (tmp_path / "here.json").read_bytes()
    assert json.loads(there)["stats"]["pairs_correlated"] == 80
    gc.collect()


@pytest.mark.slow
def test_cli_on_a_running_scheduler(
    mt_file: Path, tmp_path: Path, cluster, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(_argv(mt_file, tmp_path / "here.json", "--root", "client")) == 0
    here = capsys.readouterr().out
    address = cluster.client.scheduler.address
    assert main(_argv(mt_file, tmp_path / "there.json", "--root", "client", "--scheduler", address)) == 0
    assert capsys.readouterr().out == here.replace("here.json", "there.json")
    assert (tmp_path / "there.json").read_bytes() == (tmp_path / "here.json").read_bytes()


def _one_error_line(capsys: pytest.CaptureFixture[str]) -> str:
    out = capsys.readouterr()
    assert out.out == ""
    lines = out.err.strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


def test_cli_without_dask_is_one_error_line(
    mt_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "dask.distributed", None)  # import fails as if absent
    assert main(_argv(mt_file, tmp_path / "p.json", "--workers", "2")) == 1
    line = _one_error_line(capsys)
    assert line.startswith("error: a Dask cluster was asked for but Dask is not installed")
    assert not (tmp_path / "p.json").exists()


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--workers", "0"], "--workers: 0 is out of range"),
        (["--scheduler", "tcp://127.0.0.1:8786", "--workers", "2"], "not allowed with argument"),
    ],
)
def test_bad_cluster_flags_are_usage_errors(
    mt_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], flags: list[str], message: str
) -> None:
    assert main(_argv(mt_file, tmp_path / "p.json", *flags)) == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if "error:" in line]
    assert len(errors) == 1
    assert message in errors[0]


@pytest.mark.slow
def test_cli_no_scheduler_there_is_one_error_line(
    mt_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(_argv(mt_file, tmp_path / "p.json", "--scheduler", "tcp://127.0.0.1:1")) == 1
    assert _one_error_line(capsys).startswith("error: no Dask scheduler answers at 'tcp://127.0.0.1:1'")
    assert not (tmp_path / "p.json").exists()
