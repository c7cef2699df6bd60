"""Durations written by people, parsed to exact integer nanoseconds."""

from __future__ import annotations

from decimal import Decimal, localcontext

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tracefmt import ParameterError, WirepathError, format_duration_ns, parse_duration_ns


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("60s", 60 * 10**9, id="60s"),
        pytest.param("1.5ms", 1_500_000, id="1.5ms"),
        pytest.param("250us", 250_000, id="250us"),
        pytest.param("250µs", 250_000, id="250-micro-sign-s"),
        pytest.param("2h", 2 * 3600 * 10**9, id="2h"),
        pytest.param("1e-3s", 1_000_000, id="1e-3s"),
        pytest.param("0.012s", 12_000_000, id="0.012s"),
        pytest.param("7s", 7 * 10**9, id="7s"),
        pytest.param("3m", 180 * 10**9, id="3m-minutes"),
        pytest.param("3min", 180 * 10**9, id="3min"),
        pytest.param("42ns", 42, id="42ns"),
        pytest.param(".5s", 500_000_000, id="leading-dot"),
        pytest.param("  5ms  ", 5_000_000, id="surrounding-spaces"),
        pytest.param("1.5ns", 1, id="below-ns-truncated"),
        pytest.param("0", 0, id="zero"),
        pytest.param("-0.0", 0, id="zero-written-otherwise"),
    ],
)
def test_parse_duration_ns_exact(text: str, expected: int) -> None:
    assert parse_duration_ns(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("-0.012s", -12_000_000, id="negative-seconds"),
        pytest.param("-3ms", -3_000_000, id="negative-ms"),
        pytest.param("-1.5ns", -1, id="negative-truncates-toward-zero"),
        pytest.param("+2s", 2 * 10**9, id="explicit-plus"),
    ],
)
def test_parse_duration_ns_allow_negative(text: str, expected: int) -> None:
    assert parse_duration_ns(text, allow_negative=True) == expected


@pytest.mark.parametrize(
    ("text", "shown"),
    [("2", "2"), ("0.012", "0.012"), (" 7 ", "7"), ("-3", "-3"), ("1e-3", "1e-3")],
)
def test_a_bare_number_is_refused_naming_the_units(text: str, shown: str) -> None:
    """``--tolerance 2`` meant as milliseconds was two seconds: text needs its unit."""
    with pytest.raises(ParameterError) as info:
        parse_duration_ns(text, allow_negative=True)
    assert str(info.value) == (
        f"duration {shown!r} has no unit: write {shown}s for seconds or {shown}ms for milliseconds "
        "(units: ns, us, µs, μs, ms, s, m, min, h)"
    )


def test_parse_duration_ns_accepts_int_and_float() -> None:
    assert parse_duration_ns(2) == 2 * 10**9
    assert parse_duration_ns(0.25) == 250_000_000


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("", id="empty"),
        pytest.param("abc", id="letters"),
        pytest.param("5 parsecs", id="unknown-unit"),
        pytest.param("ms", id="unit-only"),
        pytest.param("1.2.3s", id="two-dots"),
        pytest.param("5 ms extra", id="trailing-word"),
    ],
)
def test_parse_duration_ns_rejects_garbage(text: str) -> None:
    with pytest.raises(ParameterError, match="invalid duration") as info:
        parse_duration_ns(text)
    message = str(info.value)
    assert repr(text) in message
    # The message lists what is allowed.
    for unit in ("ns", "us", "ms", "s", "h"):
        assert unit in message
    assert isinstance(info.value, ValueError)
    assert isinstance(info.value, WirepathError)


@pytest.mark.parametrize("text", ["-1s", "-0.012s", "-5ns"], ids=["-1s", "-0.012s", "-5ns"])
def test_parse_duration_ns_rejects_negative_unless_allowed(text: str) -> None:
    with pytest.raises(ParameterError, match="must not be negative") as info:
        parse_duration_ns(text)
    assert repr(text) in str(info.value)


@settings(max_examples=100, deadline=None)
@given(
    value=st.decimals(min_value=Decimal("-1e6"), max_value=Decimal("1e6"), places=12, allow_nan=False),
    unit=st.sampled_from(
        [("ns", 1), ("us", 10**3), ("µs", 10**3), ("ms", 10**6), ("s", 10**9), ("h", 3600 * 10**9)]
    ),
)
def test_parse_duration_ns_matches_decimal_arithmetic(value: Decimal, unit: tuple[str, int]) -> None:
    suffix, scale = unit
    text = f"{value:f}{suffix}"
    with localcontext() as ctx:
        ctx.prec = 100  # exact: no rounding in the reference
        expected = int(Decimal(f"{value:f}") * scale)  # int() truncates toward zero
    assert parse_duration_ns(text, allow_negative=True) == expected


@pytest.mark.parametrize(
    ("ns", "expected"),
    [
        pytest.param(1_500_000, "1.5 ms", id="ms"),
        pytest.param(-12, "-12 ns", id="negative-ns"),
        pytest.param(0, "0 ns", id="zero"),
        pytest.param(2_000_000_000, "2 s", id="s"),
        pytest.param(250_000, "250 µs", id="us"),
    ],
)
def test_format_duration_ns(ns: int, expected: str) -> None:
    assert format_duration_ns(ns) == expected


def test_greek_mu_is_microseconds() -> None:
    assert parse_duration_ns("250μs") == parse_duration_ns("250µs") == 250_000


@pytest.mark.parametrize("text", ["1e400s", "1e12s", "-1e12s", "9999999999999h"])
def test_durations_past_two_centuries_are_refused(text: str) -> None:
    # 64-bit nanoseconds hold 292 years: a longer duration would wrap around or overflow
    # wherever it is added to a timestamp.
    with pytest.raises(ParameterError, match="too long"):
        parse_duration_ns(text, allow_negative=True)
