"""tracefmt.cluster: where a verb's tasks run. The same task function in-process and on a
real local Dask cluster: results in order, shared values, a task's own error raised
with its type, and a lost worker as one clear error."""

from __future__ import annotations

import os
from types import SimpleNamespace

import numpy as np
import pytest

from tracefmt import ParameterError, WirepathError
from tracefmt.cluster import InProcess, open_runner, split_evenly

pytest.importorskip("dask.distributed")


def _tasks() -> SimpleNamespace:
    """The tasks, made inside a function: workers cannot import a test module, and what
    plain pickle cannot name is sent by value (cloudpickle)."""

    def weighted(k: int, *, table: np.ndarray, scale: float) -> float:
        return float(table[k].sum() * scale)

    def pick(k: int, *, rows: list[np.ndarray]) -> float:
        return float(rows[k].sum())

    def refuse(k: int) -> int:
        if k == 3:
            raise ParameterError(f"item {k} is bad")
        return k

    def die(k: int) -> int:
        os._exit(3)  # the worker process is gone, as when a machine fails

    def threads(k: int) -> int:
        from tracefmt.cluster import local_threads

        return local_threads()

    def held(k: int, *, pause: float) -> int:
        import time

        from distributed import get_worker

        time.sleep(pause)
        return len(get_worker().data)  # items and results this worker holds now

    return SimpleNamespace(weighted=weighted, pick=pick, refuse=refuse, die=die, threads=threads, held=held)


@pytest.mark.parametrize(("n", "parts"), [(10, 3), (2, 4), (0, 2), (7, 1), (100, 8)])
def test_split_evenly_covers_everything_in_order(n: int, parts: int) -> None:
    spans = split_evenly(n, parts)
    covered = [i for a, b in spans for i in range(a, b)]
    assert covered == list(range(n))
    sizes = [b - a for a, b in spans]
    assert max(sizes, default=0) - min(sizes, default=0) <= 1
    assert len(spans) == max(1, min(parts, n))


@pytest.mark.slow
def test_a_cluster_maps_like_one_process() -> None:
    from tracefmt.cluster import local_threads

    t = _tasks()
    here = local_threads()
    table = np.arange(60.0).reshape(20, 3)
    expected = InProcess().map(t.weighted, list(range(20)), table=table, scale=0.5)
    with open_runner(workers=2) as run:
        assert run.width == 2
        assert run.map(t.weighted, list(range(20)), table=table, scale=0.5) == expected
        shared = run.share(table)  # sent once, used by two maps
        assert run.map(t.weighted, list(range(20)), table=shared, scale=0.5) == expected
        assert run.map(t.weighted, [19, 0], table=shared, scale=1.0) == [table[19].sum(), table[0].sum()]
        assert run.map(t.weighted, [], table=shared, scale=1.0) == []
        rows = run.share([table[0], table[1]])  # a list is shared whole, as one value
        assert run.map(t.pick, [1, 0], rows=rows) == [table[1].sum(), table[0].sum()]
        with pytest.raises(ParameterError, match="item 3 is bad"):
            run.map(t.refuse, list(range(6)))
        # The workers share the cores: their compiled loops run on one thread each,
        # and this process keeps its own count.
        assert run.map(t.threads, [0, 1]) == [1, 1]
    assert os.environ.get("NUMBA_NUM_THREADS") != "1" or here == 1
    import numba.core.config

    numba.core.config.reload_config()  # as numba does at its next compile
    assert local_threads() == here


@pytest.mark.slow
def test_a_lost_worker_is_one_clear_error() -> None:
    t = _tasks()
    import dask

    # No retries on other workers: the task kills whichever runs it.
    with dask.config.set({"distributed.scheduler.allowed-failures": 0}), open_runner(workers=1) as run:
        with pytest.raises(WirepathError, match="the Dask cluster failed during the run") as err:
            run.map(t.die, [1])
        assert "\n" not in str(err.value)


def test_no_cluster_without_flags_and_not_both() -> None:
    with open_runner() as run:
        assert isinstance(run, InProcess)
        assert run.share(5) == 5
    with pytest.raises(ParameterError, match="not both"), open_runner("tcp://127.0.0.1:1", 2):
        pass
    with pytest.raises(ParameterError, match="at least 1"), open_runner(workers=0):
        pass


@pytest.mark.parametrize("address", ["tcp://127.0.0.1:{port}", "127.0.0.1:{port}", "tcp://localhost:{port}"])
def test_a_port_that_refuses_is_named_at_once(address: str) -> None:
    """A scheduler address whose port refuses connections fails at the first attempt
    (the client would retry until its timeout), with the cause and what to check."""
    import socket

    with socket.socket() as s:  # a port that was free a moment ago: nothing listens
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    where = address.format(port=port)
    refused = r"no Dask scheduler answers at .*refused.*dask scheduler"
    with pytest.raises(ParameterError, match=refused), open_runner(where):
        pass


def test_threads_side_by_side_in_a_forked_child_too(monkeypatch: pytest.MonkeyPatch) -> None:
    """The pool of threads ``side_by_side`` keeps is not carried into a forked child
    (whose threads are gone): the child starts its own and gets the same answer."""
    import signal

    import tracefmt.cluster as cluster

    monkeypatch.setattr(cluster, "MIN_PER_THREAD", 2)
    monkeypatch.setattr(cluster, "local_threads", lambda: 2)
    a = np.arange(10)
    expected = (a * 3).tolist()
    assert cluster.side_by_side(lambda x, k: x * k, (a,), 3).tolist() == expected  # the pool starts
    pid = os.fork()
    if pid == 0:  # the child: a hang is ended by the alarm, a wrong answer by the exit code
        ok = False
        try:
            signal.alarm(20)
            ok = cluster.side_by_side(lambda x, k: x * k, (a,), 3).tolist() == expected
        finally:
            os._exit(0 if ok else 3)  # never back into the test session
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def test_per_entry_arrays_of_different_lengths_are_refused() -> None:
    """A compiled loop does not check bounds: arrays cut together must be one length."""
    from tracefmt.cluster import side_by_side

    with pytest.raises(ValueError, match="one length"):
        side_by_side(lambda x, y: x + y, (np.arange(3), np.arange(4)))


@pytest.mark.slow
def test_a_worker_holds_a_few_items_of_a_map_not_its_share() -> None:
    """Items go to a worker a few at a time and are let go with their results: what a
    worker holds does not grow with the map (40 items, 20 per worker)."""
    from tracefmt.cluster import IN_FLIGHT

    t = _tasks()
    with open_runner(workers=2) as run:
        held = run.map(t.held, list(range(40)), pause=0.02)
    assert len(held) == 40
    # The items in flight and results not yet let go (a release can lag a task or two),
    # where a worker given its whole share at once holds its 20 items.
    assert max(held) <= 4 * IN_FLIGHT, held
