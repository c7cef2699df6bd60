"""What an MDL analysis keeps between runs: every series' program as it ended, so that
the next analysis resumes it and pays only for the runs added since.

``STORE/state/trend-mdl.npz`` (numpy's own format, read without pickles) holds the
programs (:class:`trend.mdl.MdlPrograms`), the (test, testbed) of each, and the unit and
sbps they were counted with. A series resumes its program only when its first runs are
the ones the program saw, run by run (trials, average and deviation equal to the bit),
with the same largest value and unit; anything else (a reimported build, a run inserted
before the last, a new maximum, other options) starts it afresh. The file is a cache:
deleting it costs one analysis from nothing, and one that cannot be read is ignored.
"""

from __future__ import annotations

import io
import os
import zipfile
from dataclasses import fields
from pathlib import Path

import numpy as np

from tracefmt import Store, write_atomic
from trend.mdl import _RUN_FIELDS, MdlPrograms

__all__ = ["STATE_FILE", "load_programs", "save_programs", "state_path"]

#: The state file, under the store's root.
STATE_FILE = Path("state") / "trend-mdl.npz"
_VERSION = 1


def state_path(store: Store | str | os.PathLike[str]) -> Path:
    """Where a store keeps its MDL programs.

    >>> state_path("store").as_posix()
    'store/state/trend-mdl.npz'
    """
    root = store.root if isinstance(store, Store) else Path(store)
    return root / STATE_FILE


def _options(unit: float | None, sbps: float | None) -> np.ndarray:
    return np.array([np.nan if unit is None else unit, np.nan if sbps is None else sbps], np.float64)


def save_programs(
    path: str | os.PathLike[str],
    keys: list[tuple[str, str]],
    programs: MdlPrograms,
    *,
    unit: float | None,
    sbps: float | None,
) -> None:
    """Write the programs of the series ``keys`` (test, testbed; in the programs' order),
    counted with ``unit`` and ``sbps``, atomically (a reader sees the old file or the new)."""
    buf = io.BytesIO()
    arrays = {f.name: getattr(programs, f.name) for f in fields(MdlPrograms)}
    np.savez(
        buf,
        version=np.array([_VERSION]),
        options=_options(unit, sbps),
        test=np.array([k[0] for k in keys], dtype=str),
        testbed=np.array([k[1] for k in keys], dtype=str),
        **arrays,
    )
    write_atomic(path, buf.getvalue())


def load_programs(
    path: str | os.PathLike[str], *, unit: float | None, sbps: float | None
) -> tuple[dict[tuple[str, str], int], MdlPrograms] | None:
    """The programs saved at ``path`` for these options, with each (test, testbed)'s index;
    None when there are none, they were counted with other options, or the file cannot be
    read as a whole and consistent state.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> p = MdlPrograms.of([[1.0, 2.0]], unit=0.1)
    >>> p.advance()
    >>> f = pathlib.Path(tempfile.mkdtemp()) / "s.npz"
    >>> save_programs(f, [("ip4", "tb1")], p, unit=0.1, sbps=None)
    >>> keys, q = load_programs(f, unit=0.1, sbps=None)
    >>> keys, q.result(0).groups == p.result(0).groups
    ({('ip4', 'tb1'): 0}, True)
    >>> load_programs(f, unit=None, sbps=None) is None
    True
    """
    try:
        # The file opened here, not by np.load: a torn archive would leave np.load's handle open.
        with open(path, "rb") as fh, np.load(fh, allow_pickle=False) as z:
            if int(z["version"][0]) != _VERSION or not np.array_equal(
                z["options"], _options(unit, sbps), equal_nan=True
            ):
                return None
            programs = MdlPrograms(**{f.name: z[f.name] for f in fields(MdlPrograms)})
            keys = list(zip(z["test"].tolist(), z["testbed"].tolist(), strict=True))
    except (OSError, ValueError, KeyError, TypeError, EOFError, zipfile.BadZipFile):
        return None
    if not _consistent(programs, len(keys)):
        return None
    return {k: i for i, k in enumerate(keys)}, programs


def _consistent(p: MdlPrograms, series: int) -> bool:
    """Whether the arrays fit together: what a half-written or foreign file would not do."""
    off = p.offsets
    if off.ndim != 1 or off.size != series + 1 or (off.size and off[0] != 0) or np.any(np.diff(off) < 0):
        return False
    runs = int(off[-1]) if off.size else 0
    return (
        all(getattr(p, f).shape == (runs,) for f in _RUN_FIELDS)
        and all(getattr(p, f).shape == (series,) for f in ("max_values", "units", "lo", "done"))
        and p.best.shape == (runs + series,)
        and bool(np.all((p.done >= 0) & (p.done <= np.diff(off))))
        and bool(np.all((p.lo >= off[:-1]) & (p.lo <= off[:-1] + np.maximum(p.done - 1, 0))))
    )
