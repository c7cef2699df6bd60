"""Shared helpers for the tracefmt and CLI tests.

The helpers are handed out as session-scoped fixtures (``--import-mode=importlib``
makes importing a helper module from the tests unreliable, and hypothesis refuses
function-scoped fixtures in ``@given`` tests).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pyarrow as pa
import pytest

#: One message as the tests write it: (timestamp_ns, op, sender, receiver, id or None).
Row = tuple[int, str, str, str, int | None]

TS = pa.timestamp("ns", tz="UTC")


def _table(rows: Sequence[Row], **extra: Sequence[Any] | pa.Array) -> pa.Table:
    """A plain (not yet validated) trace table holding exactly ``rows``."""
    cols: dict[str, Any] = {
        "timestamp": pa.array([r[0] for r in rows], pa.int64()).cast(TS),
        "sender": pa.array([r[2] for r in rows], pa.string()),
        "receiver": pa.array([r[3] for r in rows], pa.string()),
        "op": pa.array([r[1] for r in rows], pa.string()),
        "id": pa.array([r[4] for r in rows], pa.uint64()),
    }
    for name, values in extra.items():
        cols[name] = values if isinstance(values, pa.Array | pa.ChunkedArray) else pa.array(values)
    return pa.table(cols)


def _rows(table: pa.Table) -> list[Row]:
    """The messages of a trace table as plain Python tuples (dictionaries decoded)."""
    ts = table["timestamp"].cast(pa.int64()).to_pylist()
    cols = [table[name].to_pylist() for name in ("op", "sender", "receiver", "id")]
    return [(t, *rest) for t, *rest in zip(ts, *cols, strict=True)]


@pytest.fixture(scope="session")
def make_table() -> Callable[..., pa.Table]:
    """``make_table(rows, **extra_columns)``: a plain Arrow table of the given messages."""
    return _table


@contextlib.contextmanager
def _umask(mask: int) -> Iterator[None]:
    old = os.umask(mask)
    try:
        yield
    finally:
        os.umask(old)


@pytest.fixture(scope="session")
def umask() -> Callable[[int], contextlib.AbstractContextManager[None]]:
    """``with umask(0o000):`` runs the block under that umask, the old one restored after."""
    return _umask


@pytest.fixture(scope="session")
def rows_of() -> Callable[[pa.Table], list[Row]]:
    """``rows_of(table)``: the table's messages as ``(ts_ns, op, sender, receiver, id)`` tuples."""
    return _rows


@pytest.fixture(scope="session")
def write_lines() -> Callable[..., Any]:
    """``write_lines(path, text_or_bytes)``: write a text trace file and return its path."""

    def write(path: Any, content: str | bytes) -> Any:
        data = content.encode("utf-8") if isinstance(content, str) else content
        path.write_bytes(data)
        return path

    return write


class Page:
    """A page loaded in headless Chromium: the driver, its console log and a screenshot call."""

    def __init__(self, driver: Any) -> None:
        self.driver = driver

    def console_errors(self) -> list[str]:
        """Console messages of level SEVERE since the page loaded (JS errors, failed loads)."""
        return [e["message"] for e in self.driver.get_log("browser") if e["level"] == "SEVERE"]

    def screenshot(self, path: Any) -> Any:
        """Save a PNG of the viewport to ``path`` and return the path."""
        self.driver.save_screenshot(str(path))
        return path


@pytest.fixture(scope="session")
def _chromium() -> Any:
    """One headless Chromium (Debian's chromium + chromium-driver) for the whole session."""
    import shutil

    chromium, chromedriver = shutil.which("chromium"), shutil.which("chromedriver")
    if chromium is None or chromedriver is None:
        pytest.fail("browser tests need Debian's chromium and chromium-driver: run 'make setup' as root")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = chromium
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"):
        opts.add_argument(flag)
    opts.add_argument("--window-size=1400,1000")
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(chromedriver), options=opts)
    yield driver
    driver.quit()


@pytest.fixture
def open_page(_chromium: Any) -> Callable[[Any], Page]:
    """``open_page(path)`` loads a local HTML file in headless Chromium and returns a :class:`Page`."""
    from pathlib import Path

    def load(path: Any) -> Page:
        _chromium.get_log("browser")  # drop messages of earlier pages
        _chromium.get(Path(path).resolve().as_uri())
        return Page(_chromium)

    return load
