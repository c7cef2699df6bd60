"""The older CSIT method: trimmed moving statistics over a rolling window of runs.

Over the last ``window`` runs: quartiles Q1, Q2, Q3 (linear interpolation), IQR = Q3 - Q1;
outliers are the values below Q1 - 1.5 IQR only (values far above are likely
progressions); TMA and TMSD (sample standard deviation) and TMM, the trimmed moving median,
are taken without the outliers. TMM is the trend value.

A run is judged against the window of the runs before it: an outlier if below that
window's Q1 - 1.5 IQR, else normal within TMM +- 3 TMSD, a regression below, a progression
above. Runs with fewer than ``min_history`` runs before them have no reference and are
normal. For a smaller-is-better series (latency) everything is mirrored: outliers are the
values far above, and a value above TMM + 3 TMSD is the regression.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tracefmt import ParameterError
from trend.mdl import check_direction

__all__ = ["TmmResult", "classify_tmm"]


@dataclass(frozen=True)
class TmmResult:
    """Per run: the trend value (TMM over the window ending there), the reference it was
    judged against (TMM and TMSD of the window before it) and its mark."""

    values: np.ndarray
    tmm: np.ndarray
    tma: np.ndarray
    tmsd: np.ndarray
    reference: np.ndarray
    reference_tmsd: np.ndarray
    marks: np.ndarray
    window: int
    direction: str

    def to_json(self) -> dict[str, Any]:
        def clean(a: np.ndarray) -> list[float | None]:
            return [None if np.isnan(x) else float(x) for x in a]

        return {
            "method": "tmm",
            "window": self.window,
            "direction": self.direction,
            "tmm": clean(self.tmm),
            "tmsd": clean(self.tmsd),
            "marks": self.marks.tolist(),
        }


def _trailing(values: np.ndarray, window: int) -> tuple[np.ndarray, ...]:
    """Q1, IQR, TMA, TMSD, TMM of the trailing window ending at every run (bigger is better)."""
    padded = np.concatenate([np.full(window - 1, np.nan), values])
    rows = np.lib.stride_tricks.sliding_window_view(padded, window)  # one window a row
    q1, q3 = np.nanpercentile(rows, [25, 75], axis=1)
    iqr = q3 - q1
    keep = rows >= (q1 - 1.5 * iqr)[:, None]  # NaN padding compares False: dropped too
    kept = np.where(keep, rows, np.nan)
    count = keep.sum(axis=1)
    tma = np.nansum(kept, axis=1) / count
    dev = np.where(keep, rows - tma[:, None], 0.0)
    ss = (dev * dev).sum(axis=1)
    tmsd = np.sqrt(np.divide(ss, count - 1, out=np.zeros_like(ss), where=count > 1))
    tmm = np.nanmedian(kept, axis=1)
    return q1, iqr, tma, tmsd, tmm


def _checked(values: Sequence[float] | np.ndarray, window: int, min_history: int) -> np.ndarray:
    """The values as a float64 vector; a ParameterError if they, the window or min_history are invalid."""
    if isinstance(window, bool) or not isinstance(window, int) or window < 2:
        raise ParameterError(f"window must be an integer >= 2, not {window!r}")
    if isinstance(min_history, bool) or not isinstance(min_history, int) or not 1 <= min_history <= window:
        raise ParameterError(
            f"min_history must be an integer from 1 to the window ({window}), not {min_history!r}"
        )
    try:
        x = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError):
        raise ParameterError("values must be numbers") from None
    if x.ndim != 1 or x.size == 0:
        raise ParameterError("empty series: TMM needs at least one value")
    if not np.isfinite(x).all():
        raise ParameterError(
            f"run {int(np.argmax(~np.isfinite(x)))} is NaN or infinite; drop failed runs first"
        )
    return x


def classify_tmm(
    values: Sequence[float] | np.ndarray,
    *,
    window: int = 14,
    min_history: int = 3,
    direction: str = "bigger-is-better",
) -> TmmResult:
    """Mark every run normal, regression, progression or outlier by trimmed moving statistics.

    Parameters
    ----------
    values : sequence of float
        One value per run (a run's average of its trials), in time order.
    window : int
        Rolling window size N (default 14 runs).
    min_history : int
        Runs needed before a run for it to be judged (default 3).
    direction : str
        ``bigger-is-better`` or ``smaller-is-better``.

    Returns
    -------
    TmmResult

    Examples
    --------
    >>> r = classify_tmm([10.0, 10.1, 9.9, 10.0, 10.05, 9.95, 7.0, 10.0, 12.0])
    >>> r.marks.tolist()
    ['normal', 'normal', 'normal', 'normal', 'normal', 'normal', 'outlier', 'normal', 'progression']
    >>> float(r.tmm[5])
    10.0
    """
    check_direction(direction)
    x = _checked(values, window, min_history)
    sign = 1.0 if direction == "bigger-is-better" else -1.0
    # A window longer than the series holds the same runs as one of its length (the rest is
    # padding): no need to allocate it.
    q1, iqr, tma, tmsd, tmm = _trailing(sign * x, min(window, x.size))
    # Run t is judged against the window of the runs before it: the trailing stats of t - 1.
    ref = np.concatenate([[np.nan], tmm[:-1]])
    ref_sd = np.concatenate([[np.nan], tmsd[:-1]])
    ref_low = np.concatenate([[np.nan], (q1 - 1.5 * iqr)[:-1]])
    history = np.minimum(np.arange(x.size), window)
    judged = history >= min_history
    y = sign * x
    marks = np.full(x.size, "normal", dtype=object)
    outlier = judged & (y < ref_low)
    marks[judged & ~outlier & (y < ref - 3 * ref_sd)] = "regression"
    marks[judged & ~outlier & (y > ref + 3 * ref_sd)] = "progression"
    marks[outlier] = "outlier"
    return TmmResult(x, sign * tmm, sign * tma, tmsd, sign * ref, ref_sd, marks, window, direction)
