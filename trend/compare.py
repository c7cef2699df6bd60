"""Per-patch verdict: the parent's trials and the current trials, one group or two.

As CSIT's verify job: the parent run and the current run are two undivisible runs of
trials, grouped by the same MDL method as the trend (``jumpavg`` 0.4.2 ``classify``). One
group: normal; two groups: the current run's group is a regression or a progression. The
bits printed are those the decision compares (the same unit), so the console and the
verdict always agree (CSIT prints bits counted with another unit than it decides with).
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tracefmt import ParameterError, ParseError
from tracefmt.configfile import load_json
from tracefmt.display import printable
from trend._files import read_text
from trend.mdl import check_direction, classify_mdl, group_bits, renormalized, run_stats
from trend.numbers import check_number, finite_json

__all__ = ["Comparison", "compare_runs", "format_comparison", "parse_values", "read_compare_file"]


@dataclass(frozen=True)
class Comparison:
    """The verdict for one test, with everything the console shows."""

    test: str
    parent: tuple[float, ...]
    current: tuple[float, ...]
    failed: bool
    verdict: str
    parent_avg: float | None
    current_avg: float | None
    parent_stdev: float | None
    current_stdev: float | None
    combined_avg: float | None
    combined_stdev: float | None
    parent_bits: float | None
    current_bits: float | None
    combined_bits: float | None
    unit: float | None

    @property
    def separate_bits(self) -> float | None:
        if self.parent_bits is None or self.current_bits is None:
            return None
        return self.parent_bits + self.current_bits

    @property
    def change(self) -> float | None:
        """Difference of the averages as a fraction of the parent average."""
        if self.parent_avg in (None, 0) or self.current_avg is None:
            return None
        return (self.current_avg - self.parent_avg) / self.parent_avg

    @property
    def bad(self) -> bool:
        return self.failed or self.verdict == "regression"

    def to_json(self) -> dict[str, Any]:
        """The JSON document; failed trials (NaN) are null."""
        return finite_json(
            {
                "test": self.test,
                "parent": list(self.parent),
                "current": list(self.current),
                "failed": self.failed,
                "verdict": self.verdict,
                "change": self.change,
                "parent_avg": self.parent_avg,
                "current_avg": self.current_avg,
                "parent_stdev": self.parent_stdev,
                "current_stdev": self.current_stdev,
                "combined_avg": self.combined_avg,
                "combined_stdev": self.combined_stdev,
                "parent_bits": self.parent_bits,
                "current_bits": self.current_bits,
                "separate_bits": self.separate_bits,
                "combined_bits": self.combined_bits,
                "unit": self.unit,
            }
        )


def compare_runs(
    parent: Sequence[float],
    current: Sequence[float],
    *,
    test: str = "test",
    direction: str = "bigger-is-better",
    unit: float | None = None,
    sbps: float | None = None,
) -> Comparison:
    """Group the parent's and the current trials as two runs and give the verdict.

    A NaN trial is a failed trial: the verdict is ``failed`` (and the job fails), as in
    CSIT, where a failed test counts against the patch.

    Examples
    --------
    >>> c = compare_runs([10.0e6, 9.98e6, 10.03e6, 9.97e6, 10.0e6], [9.71e6, 9.69e6, 9.73e6, 9.68e6, 9.7e6])
    >>> c.verdict, round(c.change * 100, 2)
    ('regression', -2.94)
    >>> compare_runs([1.0, 1.0], [1.0, float("nan")]).verdict
    'failed'
    """
    check_direction(direction)
    p, c = [float(x) for x in parent], [float(x) for x in current]
    if not p or not c:
        raise ParameterError(f"test {test!r}: both the parent and the current run need trial values")
    if any(math.isnan(x) for x in p + c):
        return Comparison(test, tuple(p), tuple(c), True, "failed", *([None] * 10))
    result = classify_mdl([p, c], unit=unit, sbps=sbps, direction=direction)
    verdict = result.groups[1].comment if len(result.groups) == 2 else "normal"
    return _weighed(test, p, c, verdict, result.unit)


def _weighed(test: str, p: list[float], c: list[float], verdict: str, unit: float) -> Comparison:
    """The comparison with the two groupings the decision weighs: jumpavg's statistics and
    bits of the parent and current groups apart, and of the one group of both."""
    sizes, avg_arr, sd_arr, max_value = run_stats([p, c])
    avgs, sds = avg_arr.tolist(), sd_arr.tolist()
    n_p, n_c = int(sizes[0]), int(sizes[1])
    pa, ps = renormalized(n_p, avgs[0], sds[0])
    ca, cs = renormalized(n_c, avgs[1], sds[1])
    # jumpavg counts the parent group's bits on its copy (one more pass of for_runs).
    p_bits = group_bits(n_p, *renormalized(n_p, pa, ps), max_value, unit, None)
    c_bits = group_bits(n_c, ca, cs, max_value, unit, renormalized(n_p, pa, ps)[0])
    # One group: the parent's statistics, then the current run merged in (for_runs).
    a1, s1 = renormalized(n_p, pa, ps)
    m2 = s1 * s1 * n_p + sds[1] * sds[1] * n_c
    delta = avgs[1] - a1
    n = n_p + n_c
    comb_avg = a1 + delta * n_c / n
    m2 += delta * delta * n_p * n_c / n
    comb_sd = math.sqrt(m2 / n)
    comb_bits = group_bits(n, comb_avg, comb_sd, max_value, unit, None)
    if not all(math.isfinite(b) for b in (p_bits, c_bits, comb_bits)):  # never decide on NaN bits
        raise ParameterError(f"test {test!r}: the values overflow the description length at unit {unit:g}")
    return Comparison(
        test=test,
        parent=tuple(p),
        current=tuple(c),
        failed=False,
        verdict=verdict,
        parent_avg=pa,
        current_avg=ca,
        parent_stdev=ps,
        current_stdev=cs,
        combined_avg=comb_avg,
        combined_stdev=comb_sd,
        parent_bits=p_bits,
        current_bits=c_bits,
        combined_bits=comb_bits,
        unit=unit,
    )


def _fmt(values: Sequence[float]) -> str:
    return ", ".join(f"{v:.10g}" for v in values)


def format_comparison(index: int, c: Comparison) -> str:
    """The console block of one test, as CSIT's verify job prints it (tests from 0).

    Examples
    --------
    >>> print(format_comparison(0, compare_runs([1.0, 1.0], [1.0, float("nan")], test="ip4")))
    test 0: ip4
      parent values (measured order):  1, 1
      current values (measured order): 1, nan
      a trial failed: verdict failed
    """
    lines = [
        f"test {index}: {printable(c.test)}",
        f"  parent values (measured order):  {_fmt(c.parent)}",
        f"  current values (measured order): {_fmt(c.current)}",
    ]
    if c.failed:
        lines.append("  a trial failed: verdict failed")
        return "\n".join(lines)
    lines += [
        f"  parent values (sorted):  {_fmt(sorted(c.parent))}",
        f"  current values (sorted): {_fmt(sorted(c.current))}",
        f"  difference of averages: {c.change * 100:+.2f} % of the parent average"
        if c.change is not None
        else "  difference of averages: n/a (parent average 0)",
        f"  parent group:  avg {c.parent_avg:.10g} stdev {c.parent_stdev:.6g} bits {c.parent_bits:.3f}",
        f"  current group: avg {c.current_avg:.10g} stdev {c.current_stdev:.6g} bits {c.current_bits:.3f}",
        f"  separate groups: {c.separate_bits:.3f} bits",
        f"  single group:    avg {c.combined_avg:.10g} stdev {c.combined_stdev:.6g} "
        f"bits {c.combined_bits:.3f}",
    ]
    diff = c.separate_bits - c.combined_bits
    # jumpavg keeps the separate groups on a tie (the new group is tried first).
    if diff <= 0:
        lines.append(f"  separate groups are shorter than the single group by {-diff:.3f} bits")
    else:
        lines.append(f"  single group is shorter than the separate groups by {diff:.3f} bits")
    lines.append(f"  unit {c.unit:.6g}; verdict: {c.verdict}")
    return "\n".join(lines)


def parse_values(text: str, where: str) -> list[float]:
    """Trial values separated by commas or spaces; ``fail`` or ``nan`` is a failed trial.

    Examples
    --------
    >>> parse_values("10.1, 10.2 fail", "--parent")
    [10.1, 10.2, nan]
    """
    out = []
    for tok in re.split(r"[,\s]+", text.strip()):
        if not tok:
            continue
        if tok.lower() in ("nan", "fail", "failed"):
            out.append(math.nan)
            continue
        try:
            v = float(tok)
        except ValueError:
            raise ParameterError(f"{where}: {tok!r} is not a number (or 'fail' for a failed trial)") from None
        out.append(check_number(v, f"{where}: value {tok!r}", low=0))
    if not out:
        raise ParameterError(f"{where}: no values")
    return out


def read_compare_file(path: str | os.PathLike[str]) -> dict[str, list[float]]:
    """Tests and their trial values: JSON ``{"test": [values...]}`` or lines ``test: v1, v2, ...``.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> p = pathlib.Path(tempfile.mkdtemp()) / "parent.txt"
    >>> _ = p.write_text("ip4: 10.1, 10.2\\nip6: 9.0 fail\\n")
    >>> read_compare_file(p)
    {'ip4': [10.1, 10.2], 'ip6': [9.0, nan]}
    """
    name = str(path)
    text = read_text(path, "a file of trial values")
    if text.lstrip().startswith("{"):
        doc = load_json(text, name)
        if not isinstance(doc, dict):
            raise ParseError(name, 1, 'JSON trial values are an object: {"test": [v1, v2, ...]}')
        out = {}
        for test, values in doc.items():
            if not isinstance(values, list):
                raise ParseError(name, 1, f"test {test!r}: values must be a list")
            out[test] = parse_values(
                ",".join("nan" if v is None else str(v) for v in values), f"{name}: {test}"
            )
        return out
    out = {}
    for line, raw in enumerate(text.splitlines(), start=1):
        body = raw.split("#", 1)[0].strip()
        if not body:
            continue
        test, sep, values = body.partition(":")
        if not sep or not test.strip():
            raise ParseError(name, line, "expected 'test: v1, v2, ...'")
        if test.strip() in out:
            raise ParseError(name, line, f"test {test.strip()!r} given twice")
        try:
            out[test.strip()] = parse_values(values, f"{name}:{line}")
        except ParameterError as e:
            raise ParseError(name, line, str(e).split(": ", 1)[-1]) from None
    if not out:
        raise ParseError(name, 1, "no tests (expected lines 'test: v1, v2, ...')")
    return out
