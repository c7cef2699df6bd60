"""The store: one directory holding traces, inferred paths and metric series.

::

    STORE/
      traces/   message traces, one Parquet file each (NAME.parquet)
      paths/    inferred path patterns (JSON) and per-instance tables (Parquet)
      results/  metric series over runs (MRR, path latencies) as Parquet

Plain files, readable by DuckDB, pandas, polars or Spark without wirepath.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from tracefmt._files import is_directory, make_dirs
from tracefmt.errors import ParameterError, TraceFileError
from tracefmt.parquet import TraceMetadata, read_trace_metadata

__all__ = ["STORE_DIRS", "Store"]

STORE_DIRS = ("traces", "paths", "results")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]*$")

PathLike = str | os.PathLike[str]


@dataclass(frozen=True)
class Store:
    """A store directory.

    Examples
    --------
    >>> import tempfile
    >>> store = Store.create(tempfile.mkdtemp())
    >>> store.trace_path("run1").name
    'run1.parquet'
    >>> store.trace_path("../etc/passwd")
    Traceback (most recent call last):
    ...
    tracefmt.errors.ParameterError: invalid trace name '../etc/passwd' (letters, digits, ...)
    """

    root: Path

    @classmethod
    def create(cls, root: PathLike) -> Store:
        """Open a store, creating its directories when missing."""
        store = cls(Path(root))
        for name in STORE_DIRS:
            make_dirs(store.root / name)
        return store

    @classmethod
    def open(cls, root: PathLike) -> Store:
        """Open an existing store; a directory without ``traces/`` is not one."""
        store = cls(Path(root))
        if not (store.root / "traces").is_dir():
            raise TraceFileError(f"{root}: not a wirepath store (no traces/ directory)")
        return store

    @staticmethod
    def is_store(path: PathLike) -> bool:
        """Whether ``path`` is a store directory."""
        return is_directory(Path(path) / "traces")

    @property
    def traces_dir(self) -> Path:
        return self.root / "traces"

    @property
    def paths_dir(self) -> Path:
        return self.root / "paths"

    @property
    def results_dir(self) -> Path:
        return self.root / "results"

    def trace_path(self, name: str) -> Path:
        """Where the trace called ``name`` lives."""
        if not _NAME.match(name):
            raise ParameterError(
                f"invalid trace name {name!r} (letters, digits, '.', '_', '+', '-'; not starting with a dot)"
            )
        return self.traces_dir / f"{name}.parquet"

    def traces(self) -> list[TraceMetadata]:
        """Every trace in the store, by name."""
        return [read_trace_metadata(p) for p in sorted(self.traces_dir.glob("*.parquet"))]
