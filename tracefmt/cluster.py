"""Where a verb's work runs: in this process, or as tasks of a Dask cluster.

Every verb that can spread its work takes a :class:`Runner`. The in-process runner calls
the task function on each item in turn; :class:`DaskRunner` sends the same function and
items to the workers of a ``dask.distributed`` cluster (an existing one, or a local one
started for the run) and gathers the results in the items' order. The task functions
are the same either way, so the answers are too; what each verb spreads, and what moves
between machines, is in ``docs/scaling.md``.

Dask is an optional extra (``pip install 'wirepath[dask]'``); nothing here imports it
until a cluster is asked for.
"""

from __future__ import annotations

import collections
import contextlib
import itertools
import os
import socket
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from tracefmt.errors import MissingToolError, ParameterError, WirepathError

if TYPE_CHECKING:
    import numpy as np

T = TypeVar("T")
R = TypeVar("R")

#: Tasks of one map a worker thread is given at a time (one running, the next one's
#: item already there).
IN_FLIGHT = 2

#: What to install when a cluster is asked for and Dask is missing.
DASK_HINT = "pip install 'wirepath[dask]'"


class Runner(Protocol):
    """Runs a task function over items, in order (see :func:`open_runner`)."""

    #: How many tasks can run at once (the cluster's worker threads; 1 in-process).
    width: int

    def map(self, fn: Callable[..., R], items: Sequence[Any], **common: Any) -> list[R]:
        """``[fn(item, **common) for item in items]``, with ``common`` sent to each worker once."""
        ...

    def share(self, value: Any) -> Any:
        """``value`` sent to every worker now, for several ``map`` calls to take as a
        ``common`` argument without sending it again (here: ``value`` itself)."""
        ...


class InProcess:
    """The runner of one process: every task in turn, here.

    Examples
    --------
    >>> InProcess().map(pow, [1, 2, 3], exp=2)
    [1, 4, 9]
    """

    width = 1

    def map(self, fn: Callable[..., R], items: Sequence[Any], **common: Any) -> list[R]:
        return [fn(item, **common) for item in items]

    def share(self, value: Any) -> Any:
        return value

    def __repr__(self) -> str:
        return "InProcess()"


class DaskRunner:
    """Tasks on a ``dask.distributed`` cluster through ``client``.

    ``common`` arguments are scattered to the workers once per :meth:`map` (a model, a
    table of signals), not shipped with every task; the results come back in the items'
    order, and an exception raised by a task is raised here with its own type.
    """

    def __init__(self, client: Any) -> None:
        self.client = client

    @property
    def width(self) -> int:
        return max(1, sum(self.client.nthreads().values()))

    def map(self, fn: Callable[..., R], items: Sequence[Any], **common: Any) -> list[R]:
        if not items:
            return []
        from dask.distributed import Future, as_completed

        fresh = {k: self.share(v) for k, v in common.items() if not isinstance(v, Future)}
        args = {**common, **fresh}
        # Item i always goes to the same worker (i modulo the workers, in address
        # order): a map repeated with the same items (a chain round after another)
        # finds what its tasks kept there the time before. Items travel as data, not
        # inside the task graph through the scheduler, and only ``IN_FLIGHT`` per
        # worker thread at a time, each let go once its result is here: a worker holds
        # a few items and results, not its share of the map, whatever the input's size.
        nthreads = self.client.nthreads()
        workers = sorted(nthreads)
        queues = [collections.deque(range(w, len(items), len(workers))) for w in range(len(workers))]
        results: list[Any] = [None] * len(items)
        live: dict[Any, tuple[int, Any, Any]] = {}  # per task in flight: item index, item, task

        def submit(w: int) -> Any:
            i = queues[w].popleft()
            where = [workers[w]]
            item = self.client.scatter([items[i]], workers=where, hash=False)[0]
            task = self.client.submit(fn, item, workers=where, pure=False, **args)
            live[task.key] = (i, item, task)
            return task

        try:
            slots = [w for w in range(len(workers)) for _ in range(IN_FLIGHT * nthreads[workers[w]])]
            done = as_completed([submit(w) for w in slots if queues[w]], with_results=True)
            for task, result in done:
                i, item, _ = live.pop(task.key)
                results[i] = result
                task.release()
                item.release()
                w = i % len(workers)
                if queues[w]:
                    done.add(submit(w))
            return results
        except WirepathError:
            raise  # a task's own error (bad input), as one process would raise it
        except Exception as exc:
            if not _cluster_failure(exc):
                raise
            what = f"{type(exc).__name__}: {exc}"
            raise WirepathError(f"the Dask cluster failed during the run ({what})") from None
        finally:
            for f in [*(f for _, *fs in live.values() for f in fs), *fresh.values()]:
                f.release()

    def share(self, value: Any) -> Any:
        # One future for the whole value (a list or dict would be scattered element by
        # element); released when the returned future is dropped.
        return self.client.scatter([value], broadcast=True, hash=False)[0]

    def __repr__(self) -> str:
        return f"DaskRunner({self.client.scheduler.address!r}, width={self.width})"


def _cluster_failure(exc: BaseException) -> bool:
    """A failure of the cluster (a worker lost, the scheduler gone, a file a worker
    cannot read), not an error of the task's own logic."""
    return isinstance(exc, OSError | TimeoutError) or type(exc).__module__.startswith(
        ("distributed", "tornado")
    )


@contextlib.contextmanager
def open_runner(scheduler: str | None = None, workers: int | None = None) -> Iterator[Runner]:
    """The runner a verb's ``--scheduler`` / ``--workers`` ask for.

    Parameters
    ----------
    scheduler : str, optional
        Address of a running Dask scheduler (``tcp://host:8786``).
    workers : int, optional
        Start a local cluster of this many worker processes (one thread each) for the
        run, and stop it after.

    With neither, the work runs in this process (:class:`InProcess`).

    Raises
    ------
    ParameterError
        Both given, or ``workers`` below 1.
    MissingToolError
        A cluster was asked for and Dask is not installed.

    Examples
    --------
    >>> with open_runner() as run:
    ...     run.map(len, ["ab", "c"])
    [2, 1]
    """
    if scheduler is not None and workers is not None:
        raise ParameterError("give --scheduler (a running cluster) or --workers (a local one), not both")
    if scheduler is None and workers is None:
        yield InProcess()
        return
    if workers is not None and workers < 1:
        raise ParameterError(f"--workers {workers} must be at least 1")
    try:
        from dask.distributed import Client
    except ImportError:
        raise MissingToolError(
            f"a Dask cluster was asked for but Dask is not installed ({DASK_HINT})"
        ) from None
    with contextlib.ExitStack() as stack:
        if scheduler is not None:
            _refuse_early(scheduler)
            try:
                client = stack.enter_context(Client(scheduler, timeout="5s"))
            except (OSError, TimeoutError) as exc:
                raise ParameterError(f"no Dask scheduler answers at {scheduler!r} ({exc})") from None
        else:
            client = stack.enter_context(Client(_local_cluster(stack, workers)))
        yield DaskRunner(client)


def _refuse_early(scheduler: str) -> None:
    """One error line at once when a TCP scheduler address refuses connections.

    Dask's client retries a refused address until its timeout (5 s here); a mistyped
    port or a scheduler that is not running is known at the first attempt. Addresses of
    other transports, and hosts that do not answer at all, are left to the client.
    """
    rest = scheduler.removeprefix("tcp://")
    if "://" in rest:
        return
    host, sep, port = rest.rpartition(":")
    if not sep or not (port.isascii() and port.isdigit() and 0 < int(port) < 65536):
        return
    try:
        # A refusal comes back within one round trip; a host that does not answer is
        # the client's to wait for, so this waits little.
        socket.create_connection((host.strip("[]") or "127.0.0.1", int(port)), timeout=1).close()
    except ConnectionRefusedError as exc:
        raise ParameterError(
            f"no Dask scheduler answers at {scheduler!r} ({exc.strerror}: is `dask scheduler` running there?)"
        ) from None
    except (OSError, ValueError):  # unreachable, unresolvable, a name the codec refuses
        return


def _local_cluster(stack: contextlib.ExitStack, workers: int | None) -> Any:
    """A local Dask cluster of ``workers`` processes of one thread each, stopped with ``stack``."""
    import dask
    from dask.distributed import LocalCluster

    # Dask starts workers with MALLOC_TRIM_THRESHOLD_ set, which fixes glibc's mmap
    # threshold at 128 KiB: every numpy array above it is mapped and unmapped, and
    # the tasks took 1.5-2.3x the CPU of one process. Without it, the workers
    # allocate as one process does. One thread each for numpy's libraries and for
    # wirepath's compiled loops (``local_threads``): the processes share the cores.
    # numba's count is set inside each worker (``environ``): set before the spawn, it
    # would stay set in this process too, and its own loops would run on one thread.
    single = {"OMP_NUM_THREADS": 1, "MKL_NUM_THREADS": 1, "OPENBLAS_NUM_THREADS": 1}
    worker_env = {"NUMBA_NUM_THREADS": 1}
    with dask.config.set(
        {"distributed.nanny.pre-spawn-environ": single, "distributed.nanny.environ": worker_env}
    ):
        return stack.enter_context(
            LocalCluster(
                n_workers=workers,
                threads_per_worker=1,
                processes=True,
                dashboard_address=":0",  # a free port: clusters side by side do not collide
            )
        )


def local_threads() -> int:
    """Threads a verb may run side by side in this process: numba's count
    (``NUMBA_NUM_THREADS``, by default this machine's cores). Dask workers that
    wirepath starts have 1: their processes already share the cores.

    Examples
    --------
    >>> local_threads() >= 1
    True
    """
    numba = sys.modules.get("numba")
    if numba is not None:
        return max(1, int(numba.config.NUMBA_NUM_THREADS))
    # As numba would count them, without loading it (about a second) for a run that
    # compiles nothing.
    given = os.environ.get("NUMBA_NUM_THREADS", "").strip()
    if given.isdigit():
        return max(1, int(given))
    return max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)


#: Fewer entries than this a thread are not worth handing to another thread.
MIN_PER_THREAD = 65_536


def side_by_side(
    kernel: Callable[..., np.ndarray], per_entry: tuple[np.ndarray, ...], *rest: Any
) -> np.ndarray:
    """``kernel(*per_entry, *rest)`` with the entries cut into one slice per thread
    (``local_threads``, at most one per ``MIN_PER_THREAD`` entries) run at once.

    For compiled loops that release the GIL and compute each entry on its own (entry
    *i* of the result from entry *i* of each ``per_entry`` array and all of ``rest``):
    the result is the same to the last bit as one call's.

    Parameters
    ----------
    kernel : callable
        Returns one value per entry, a 1-D array. It must not call ``side_by_side``
        itself (the slices run on the pool it would wait for).
    per_entry : tuple of ndarray
        Arrays of one length, one item per entry: cut into slices.
    *rest
        Passed whole to every slice.

    Returns
    -------
    ndarray
        The slices' results, concatenated in order.

    Raises
    ------
    ValueError
        The ``per_entry`` arrays differ in length (a compiled loop would read past the
        shorter one).

    Examples
    --------
    >>> import numpy as np
    >>> side_by_side(lambda a, b, k: a * b + k, (np.arange(4), np.arange(4)), 1).tolist()
    [1, 2, 5, 10]
    """
    n = per_entry[0].size
    if any(a.size != n for a in per_entry):
        raise ValueError(
            f"per-entry arrays of lengths {[a.size for a in per_entry]}: they must be one length"
        )
    size = local_threads()
    threads = min(size, n // MIN_PER_THREAD)
    if threads <= 1:
        return kernel(*per_entry, *rest)
    parts = _pool(size).map(
        lambda ab: kernel(*(a[ab[0] : ab[1]] for a in per_entry), *rest), split_evenly(n, threads)
    )
    import numpy as np  # a command line that runs no kernel starts without NumPy

    return np.concatenate(list(parts))


# One pool for the process, of ``local_threads`` threads: a pool started for every call
# cost about 0.5 ms, a few percent of an inference that makes hundreds of calls.
_POOL: dict[int, ThreadPoolExecutor] = {}  # its size -> the pool (one at most)
_POOL_LOCK = threading.Lock()


def _pool(size: int) -> ThreadPoolExecutor:
    with _POOL_LOCK:
        pool = _POOL.get(size)
        if pool is None:
            # NUMBA_NUM_THREADS changed. The old pool is dropped, not shut down: a caller
            # that took it a moment ago may still hand it work; its threads end with it.
            _POOL.clear()
            pool = _POOL[size] = ThreadPoolExecutor(size, thread_name_prefix="wirepath")
        return pool


def _forget_pool() -> None:
    # A forked child has none of its parent's threads (nor a lock one of them held): it
    # starts a pool of its own.
    global _POOL_LOCK
    _POOL.clear()
    _POOL_LOCK = threading.Lock()


os.register_at_fork(after_in_child=_forget_pool)


def split_evenly(n: int, parts: int) -> list[tuple[int, int]]:
    """``parts`` contiguous ``(start, stop)`` ranges covering ``range(n)``, sizes within one.

    >>> split_evenly(10, 3)
    [(0, 3), (3, 6), (6, 10)]
    >>> split_evenly(2, 4)
    [(0, 1), (1, 2)]
    """
    parts = max(1, min(parts, n))
    bounds = [n * k // parts for k in range(parts + 1)]
    return list(itertools.pairwise(bounds))
