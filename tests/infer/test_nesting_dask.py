"""Nesting on a Dask cluster: every stage's chunks scored by workers, in windows of the
pairs, give the answer one process gives, to the last bit (parents, confidences,
patterns, calibration)."""

from __future__ import annotations

import json
import pickle
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

import synth
from infer import candidates, infer_nesting, nesting, windows
from infer.callpairs import match_calls, node_codes
from infer.candidates import BestSoFar, CandidatePlan, Offer
from infer.nesting import NestingParams, nesting_stages
from tracefmt import write_trace
from tracefmt.cluster import open_runner

pytest.importorskip("dask.distributed")

_WIREPATH = [sys.executable, "-m", "wirepath"]
SAMPLES = Path(__file__).resolve().parents[2] / "samples" / "synth"


@pytest.fixture(scope="module")
def cluster():
    with open_runner(workers=2) as run:
        yield run


def _trace(name: str, messages: int, parallelism: float, seed: int):
    cfg = synth.load_config(SAMPLES / name)
    return synth.generate_table(replace(cfg, messages=messages, parallelism=parallelism, seed=seed))[0]


@pytest.fixture(autouse=True)
def every_stage_on_the_cluster(monkeypatch: pytest.MonkeyPatch) -> None:
    # The scoreboard stages go to a cluster from a million call pairs on: these small
    # traces run them there too.
    monkeypatch.setattr(nesting, "_MAPPED_BOARD_PAIRS", 0)


@pytest.fixture(scope="module")
def fanout():
    # Calls made at once, busy enough that the candidates fill several chunks.
    return _trace("gateway-fanout.toml", 20_000, 15.0, 5)


def _same(a, b) -> None:
    assert np.array_equal(a.parent, b.parent)
    assert np.array_equal(a.confidence, b.confidence)
    assert a.calibration.to_json() == b.calibration.to_json()
    assert a.to_json() == b.to_json()


@pytest.mark.slow
def test_chain_rounds_on_a_cluster_give_the_one_process_answer(
    cluster, fanout, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Small chunks (chosen here, where the work is dealt): many tasks, on both workers.
    monkeypatch.setattr(candidates, "CHUNK_PAIRS", 1 << 13)
    plan = CandidatePlan(match_calls(fanout, node_codes(fanout)), 0)
    assert sum(1 for _ in plan.chunks()) >= 12
    here = infer_nesting(fanout)
    assert here.trace_info["chain_rounds_run"] >= 2
    _same(here, infer_nesting(fanout, runner=cluster))


@pytest.mark.slow
@pytest.mark.parametrize("preset", ["fast", "paper"])
def test_every_preset_gives_the_same_answer_on_a_cluster(cluster, preset: str) -> None:
    trace = _trace("multitier-skewed.toml", 20_000, 10.0, 2)
    _same(infer_nesting(trace, preset), infer_nesting(trace, preset, runner=cluster))


@pytest.mark.slow
def test_infer_nesting_cli_with_workers_writes_the_same_paths(tmp_path: Path) -> None:
    trace = tmp_path / "t.parquet"
    write_trace(_trace("gateway-fanout.toml", 3_000, 6.0, 1), trace)
    docs = []
    for extra in ([], ["--workers", "2"]):
        out = tmp_path / f"p{len(extra)}.json"
        inst = tmp_path / f"i{len(extra)}.parquet"
        run = subprocess.run(
            [*_WIREPATH, "infer", "nesting", str(trace), "--out", str(out), "--instances", str(inst), *extra],
            capture_output=True,
            text=True,
            check=False,
        )
        assert run.returncode == 0, run.stderr
        docs.append((json.loads(out.read_text()), inst.read_bytes()))
    assert docs[0][0] == docs[1][0]
    assert docs[0][1] == docs[1][1]


def test_offers_folded_in_order_equal_direct_offers() -> None:
    """What a worker sends back (``Offer.of``) and the fold (``take``) reproduce
    ``BestSoFar.offer`` exactly: best parent, ties to the earlier parent call, totals."""
    rng = np.random.default_rng(11)
    n = 300
    t_call = np.sort(rng.integers(0, 50, n))  # coarse times: ties between parents
    direct, folded = BestSoFar(n), BestSoFar(n)
    for _ in range(40):
        m = int(rng.integers(0, 400))
        c = rng.integers(0, n, m)
        par = rng.integers(0, n, m)
        score = np.round(rng.random(m), 1)  # equal scores too
        mass = np.exp(score)
        direct.offer(c, par, score, t_call, mass=mass)
        folded.take(Offer.of(c, par, score, t_call, mass=mass), t_call)
    for field in ("score", "t_parent", "parent", "total"):
        assert np.array_equal(getattr(direct, field), getattr(folded, field)), field
    assert (direct.parent >= 0).sum() > n // 2


def test_two_schedulers_at_once_are_refused() -> None:
    from tracefmt import ParameterError

    with pytest.raises(ParameterError, match="not both"), open_runner("tcp://127.0.0.1:8786", 2):
        pass


class _PickledTasks:
    """Two 'workers' in this process (a test seam): every item, common argument and
    result crosses pickle, as it crosses the network to a cluster's workers."""

    width = 2

    def __init__(self) -> None:
        self.windows: list = []
        self.tasks: set[str] = set()

    def map(self, fn, items, **common):
        self.tasks.add(fn.__name__)
        common = pickle.loads(pickle.dumps(common))
        items = [pickle.loads(pickle.dumps(i)) for i in items]
        self.windows.extend(i for i in items if isinstance(i, windows.Window))
        return [pickle.loads(pickle.dumps(fn(i, **common))) for i in items]

    def share(self, value):
        return value


@pytest.mark.parametrize("tolerance_s", [0.0, 0.001])
def test_windows_of_the_pairs_give_the_one_process_answer(
    fanout, tolerance_s: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each task gets only the pairs its chunks' candidates lie in, and a worker keeps
    its chunks up to a budget: with one small chunk a window, parents outside the
    windows and chunks enumerated again, the answer is the one process's to the bit.
    Every stage runs in the tasks: the scoreboard's counts and sums, the first pass,
    the penalty and sibling rounds (the sibling round's board too) and chain rounds."""
    monkeypatch.setattr(candidates, "CHUNK_PAIRS", 1 << 12)
    monkeypatch.setattr(windows, "TASK_CHUNKS", 1)
    kept = windows.KeptChunks(budget=1 << 18)
    monkeypatch.setattr(windows, "WORKER_CHUNKS", kept)
    # With a skew tolerance a window reaches that much further on each side.
    here = infer_nesting(fanout, tolerance_s=tolerance_s)
    run = _PickledTasks()
    _same(here, infer_nesting(fanout, tolerance_s=tolerance_s, runner=run))
    n = len(here.pairs)
    assert kept.dropped > 0  # the budget kept some chunks out: they were made again
    assert 0 < kept.nbytes <= kept.budget
    assert all(w.fields[0].size < n // 4 for w in run.windows)  # windows, not the trace
    assert any(w.parent is not None and (w.parent == -2).any() for w in run.windows)  # parents outside
    assert run.tasks == {
        "_window_counts",
        "_window_cell_sums",
        "_window_offers",
        "_window_gap_counts",
        "_score_window",
    }


@pytest.mark.parametrize(
    ("settings", "sparse"),
    [
        ({"same_node_penalty": 1.0, "children_penalty": 0.5}, False),
        ({"board": "delay", "smooth_bins": 2.0, "density": False}, False),
        ({}, True),
    ],
)
def test_scoreboard_stages_in_windows_give_the_one_process_answer(
    fanout, settings: dict, sparse: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first pass and the refinement rounds in windows, with every penalty counted
    there (over a chunk's candidates or the children its parents were given), the
    paper's board, and a scoreboard of sums per chunk rather than one dense table."""
    monkeypatch.setattr(candidates, "CHUNK_PAIRS", 1 << 12)
    monkeypatch.setattr(windows, "TASK_CHUNKS", 1)
    if sparse:
        monkeypatch.setattr(candidates, "DENSE_TABLE", 1 << 10)
    here = infer_nesting(fanout, chains=0, **settings)
    run = _PickledTasks()
    _same(here, infer_nesting(fanout, chains=0, runner=run, **settings))
    assert "_window_offers" in run.tasks


@pytest.mark.parametrize("settings", [{"siblings": 0}, {}, {"tolerance_s": 0.003, "chains": 2}])
def test_every_stage_in_windows_is_the_one_process_stage(
    fanout, settings: dict, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Stage by stage, not only the last: a scoreboard summed in another order changes
    the first pass's shares, which a sibling round (scored on a board of integer
    counts) or a chain round can hide in the answer."""
    monkeypatch.setattr(candidates, "CHUNK_PAIRS", 1 << 12)
    monkeypatch.setattr(windows, "TASK_CHUNKS", 1)
    nodes = node_codes(fanout)
    pairs = match_calls(fanout, nodes)
    params = NestingParams(**settings)
    run = _PickledTasks()
    here = list(nesting_stages(pairs, len(nodes.names), params))
    there = list(nesting_stages(pairs, len(nodes.names), params, runner=run))
    assert [s.name for s in here] == [s.name for s in there]
    for a, b in zip(here, there, strict=True):
        assert np.array_equal(a.parent, b.parent), a.name
        assert np.array_equal(a.log_odds, b.log_odds), a.name
        assert a.log_likelihood == b.log_likelihood, a.name
    assert "_window_cell_sums" in run.tasks


def test_a_full_worker_keeps_its_chunks_and_lets_other_inferences_go() -> None:
    """Rounds ask for a worker's chunks in the same order each time: once the budget is
    full, a worker keeps the chunks it has (letting go the oldest would lose the one
    asked for next) and only lets go those of other inferences."""

    def chunk() -> candidates.Chunk:
        return candidates.Chunk(np.zeros(100, np.int32), np.zeros(100, np.int32), np.zeros(0, np.int32), None)

    kept = windows.KeptChunks(budget=3 * chunk().nbytes)
    for s in range(3):
        kept.put((1, (s, s + 1)), chunk())
    for s in range(5):  # a new inference: the old one's chunks go first, then no room
        kept.put((2, (s, s + 1)), chunk())
    assert [kept.get((1, (s, s + 1))) is not None for s in range(3)] == [False] * 3
    assert [kept.get((2, (s, s + 1))) is not None for s in range(5)] == [True, True, True, False, False]
    assert kept.nbytes == kept.budget
    assert kept.dropped == 5
