"""The text form: ``timestamp op sender receiver id``, one message a line."""

from __future__ import annotations

import gzip
from datetime import UTC, datetime, timedelta
from decimal import Decimal, localcontext
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tracefmt import (
    CORE_COLUMNS,
    OPS,
    TRACE_SCHEMA,
    ParseError,
    SchemaError,
    TextStats,
    TraceFileError,
    format_text_lines,
    iter_text_trace,
    read_text_trace,
    validate_trace,
    write_text_trace,
)
from tracefmt.text import TEXT_HEADER

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
OLDEST = INT64_MIN + 1  # INT64_MIN is numpy's and pandas' NaT: no trace holds it
UINT64_MAX = 2**64 - 1


def fnv1a_64(data: bytes) -> int:
    """Reference FNV-1a, 64 bit (http://www.isthe.com/chongo/tech/comp/fnv/)."""
    h = 0xCBF29CE484222325
    for byte in data:
        h ^= byte
        h = (h * 0x100000001B3) % 2**64
    return h


def test_reference_fnv1a_known_vectors() -> None:
    # Published test vectors of FNV-1a 64, so the reference itself is right.
    assert fnv1a_64(b"") == 0xCBF29CE484222325
    assert fnv1a_64(b"a") == 0xAF63DC4C8601EC8C
    assert fnv1a_64(b"foobar") == 0x85944171F73967E8


def exact_ns(seconds: str) -> int:
    """Reference: decimal seconds to nanoseconds, truncated toward zero, without rounding."""
    with localcontext() as ctx:
        ctx.prec = 200  # the default 28 digits would round long fractions
        return int(Decimal(seconds) * 10**9)


def test_reference_exact_ns() -> None:
    assert exact_ns("0.10000000099999999999999999995") == 100_000_000
    assert exact_ns("-1.9999999999") == -1_999_999_999


def ns_of(dt: datetime) -> int:
    """Exact nanoseconds since the epoch of an aware datetime (integer arithmetic)."""
    d = dt - datetime(1970, 1, 1, tzinfo=UTC)
    return (d.days * 86_400 + d.seconds) * 10**9 + d.microseconds * 1_000


def read_rows(path: Path, **kwargs: object) -> list[tuple]:
    t = read_text_trace(path, **kwargs)  # type: ignore[arg-type]
    ts = t["timestamp"].cast(pa.int64()).to_pylist()
    return list(
        zip(
            ts,
            t["op"].to_pylist(),
            t["sender"].to_pylist(),
            t["receiver"].to_pylist(),
            t["id"].to_pylist(),
            strict=True,
        )
    )


# --- round trips ---------------------------------------------------------------------------

# Names: letters (ASCII and not), digits and punctuation that never separate or comment.
NAME_ALPHABET = "abcxyzABCXYZ0189._:-/@[]" + "äöüßéñçøåłžΩλДжあ中"
names = st.text(alphabet=NAME_ALPHABET, min_size=1, max_size=10)
ids = st.one_of(st.none(), st.sampled_from([0, UINT64_MAX]), st.integers(0, UINT64_MAX))
# Every instant the schema holds: int64 ns, 1677-09-21 .. 2262-04-11, before and after 1970.
timestamps = st.one_of(st.integers(OLDEST, INT64_MAX), st.sampled_from([OLDEST, INT64_MAX, -1, 0]))
messages = st.lists(st.tuples(timestamps, st.sampled_from(OPS), names, names, ids), min_size=1, max_size=12)


@settings(max_examples=50, deadline=None)
@given(rows=messages)
def test_write_then_read_keeps_every_field(
    rows: list[tuple], tmp_path_factory: pytest.TempPathFactory, make_table, rows_of
) -> None:
    path = tmp_path_factory.mktemp("rt") / "trace.txt"
    assert write_text_trace(make_table(rows), path) == len(rows)
    assert rows_of(read_text_trace(path)) == rows


@pytest.mark.parametrize(
    "ts_ns",
    [
        pytest.param(INT64_MAX, id="int64-max-2262-04-11"),
        pytest.param(9_223_372_036_000_000_000, id="last-whole-second-of-int64"),
        pytest.param(-9_223_372_036_000_000_000, id="first-whole-second-of-int64"),
        pytest.param(OLDEST, id="int64-min-plus-1-1677-09-21"),
    ],
)
def test_write_then_read_keeps_extreme_timestamps(ts_ns: int, tmp_path: Path, make_table, rows_of) -> None:
    # Any timestamp the schema holds (int64 ns) must survive the text form.
    rows = [(ts_ns, "send", "a", "b", None)]
    path = tmp_path / "t.txt"
    write_text_trace(make_table(rows), path)
    assert rows_of(read_text_trace(path)) == rows


@pytest.mark.parametrize(
    ("ts_ns", "text"),
    [
        pytest.param(0, "0.000000000", id="zero"),
        pytest.param(1_500_000_000, "1.500000000", id="1.5s"),
        pytest.param(-1, "-0.000000001", id="minus-1ns"),
        pytest.param(-1_500_000_000, "-1.500000000", id="minus-1.5s"),
        pytest.param(1_732_872_000_012_953_000, "1732872000.012953000", id="2024"),
        pytest.param(OLDEST, "-9223372036.854775807", id="oldest"),
        pytest.param(INT64_MAX, "9223372036.854775807", id="int64-max"),
    ],
)
def test_format_text_lines_timestamp(ts_ns: int, text: str, make_table) -> None:
    table = validate_trace(make_table([(ts_ns, "call", "a", "b", 5)]))
    assert format_text_lines(table).to_pybytes() == f"{text} call a b 5\n".encode()


def test_format_text_lines_exact_bytes(make_table) -> None:
    rows = [
        (1, "call", "client", "WS1", 0),
        (2_000_000_001, "return", "WS1", "client", UINT64_MAX),
        (-3, "send", "ä", "中", None),
    ]
    expected = (
        "0.000000001 call client WS1 0\n"
        f"2.000000001 return WS1 client {UINT64_MAX}\n"
        "-0.000000003 send ä 中 -\n"
    ).encode()
    assert format_text_lines(validate_trace(make_table(rows))).to_pybytes() == expected


def test_format_text_lines_empty(make_table) -> None:
    assert format_text_lines(validate_trace(make_table([]))).to_pybytes() == b""


# --- decimal seconds -----------------------------------------------------------------------

MAX_WHOLE_SECONDS = 9_223_372_036  # int64 nanoseconds end at 9223372036.854775807 s


def in_int64(text: str) -> bool:
    return OLDEST <= exact_ns(text) <= INT64_MAX


seconds_text = st.builds(
    lambda neg, whole, frac: f"{'-' if neg else ''}{whole}{'.' + frac if frac is not None else ''}",
    st.booleans(),
    st.integers(0, MAX_WHOLE_SECONDS),
    st.one_of(st.none(), st.text(alphabet="0123456789", min_size=0, max_size=9)),
)


@settings(max_examples=60, deadline=None)
@given(values=st.lists(seconds_text.filter(in_int64), min_size=1, max_size=20))
def test_decimal_seconds_parse_exactly(values: list[str], tmp_path_factory: pytest.TempPathFactory) -> None:
    path = tmp_path_factory.mktemp("dec") / "t.txt"
    path.write_text("".join(f"{v} send a b -\n" for v in values))
    got = read_text_trace(path)["timestamp"].cast(pa.int64()).to_pylist()
    assert got == [exact_ns(v) for v in values]


@settings(max_examples=60, deadline=None)
@given(
    values=st.lists(
        st.builds(
            lambda neg, whole, frac: f"{'-' if neg else ''}{whole}.{frac}",
            st.booleans(),
            st.integers(0, MAX_WHOLE_SECONDS),
            st.text(alphabet="0123456789", min_size=10, max_size=40),
        ).filter(in_int64),
        min_size=1,
        max_size=20,
    )
)
def test_more_than_nine_decimals_truncate_toward_zero(
    values: list[str], tmp_path_factory: pytest.TempPathFactory
) -> None:
    path = tmp_path_factory.mktemp("dec") / "t.txt"
    path.write_text("".join(f"{v} send a b -\n" for v in values))
    got = read_text_trace(path)["timestamp"].cast(pa.int64()).to_pylist()
    # exact_ns truncates toward zero, for negative values too.
    assert got == [exact_ns(v) for v in values]


@pytest.mark.parametrize(
    ("text", "expected_ns"),
    [
        pytest.param("1.9999999999", 1_999_999_999, id="ten-decimals-down"),
        pytest.param("-1.9999999999", -1_999_999_999, id="negative-toward-zero"),
        pytest.param("-0.0000000009", 0, id="negative-below-ns-is-zero"),
        pytest.param("5", 5_000_000_000, id="integer"),
        pytest.param("5.", 5_000_000_000, id="trailing-dot"),
        pytest.param(".25", 250_000_000, id="leading-dot"),
        pytest.param("-.25", -250_000_000, id="negative-leading-dot"),
        pytest.param("0000000000012.5", 12_500_000_000, id="leading-zeros"),
        pytest.param("9223372036.854775807", INT64_MAX, id="int64-max"),
        pytest.param("9223372036.8547758079", INT64_MAX, id="int64-max-extra-digit-truncated"),
        pytest.param("-9223372036.854775807", OLDEST, id="oldest"),
        pytest.param("-9223372036.8547758079", OLDEST, id="oldest-extra-digit-truncated"),
    ],
)
def test_decimal_seconds_examples(text: str, expected_ns: int, tmp_path: Path) -> None:
    path = tmp_path / "t.txt"
    path.write_text(f"{text} send a b -\n")
    assert read_text_trace(path)["timestamp"].cast(pa.int64()).to_pylist() == [expected_ns]


# --- ISO-8601 ------------------------------------------------------------------------------

iso_instants = st.tuples(
    st.datetimes(min_value=datetime(1678, 1, 2), max_value=datetime(2261, 12, 30)),
    st.integers(0, 999),  # nanoseconds below the datetime's microsecond
    st.one_of(st.just("Z"), st.just(""), st.integers(-14 * 60, 14 * 60)),
)


def _iso(instant: tuple[datetime, int, str | int]) -> tuple[str, int]:
    local, extra_ns, zone = instant
    text = f"{local:%Y-%m-%dT%H:%M:%S}.{local.microsecond:06d}{extra_ns:03d}"
    wall_ns = ns_of(local.replace(tzinfo=UTC)) + extra_ns
    if isinstance(zone, str):  # "Z" or no zone: UTC
        return text + zone, wall_ns
    sign = "-" if zone < 0 else "+"
    text += f"{sign}{abs(zone) // 60:02d}:{abs(zone) % 60:02d}"
    # Local time = UTC + offset, so UTC = local - offset.
    return text, wall_ns - zone * 60 * 10**9


@settings(max_examples=60, deadline=None)
@given(instants=st.lists(iso_instants, min_size=1, max_size=10))
def test_iso_timestamps_parse_to_the_instant(
    instants: list, tmp_path_factory: pytest.TempPathFactory
) -> None:
    texts, expected = zip(*(_iso(i) for i in instants), strict=True)
    path = tmp_path_factory.mktemp("iso") / "t.txt"
    path.write_text("".join(f"{t} call a b 1\n" for t in texts))
    assert read_text_trace(path)["timestamp"].cast(pa.int64()).to_pylist() == list(expected)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("2024-05-01T12:00:00Z", datetime(2024, 5, 1, 12, tzinfo=UTC), id="Z"),
        pytest.param("2024-05-01T12:00:00", datetime(2024, 5, 1, 12, tzinfo=UTC), id="no-zone-is-UTC"),
        pytest.param(
            "2024-05-01T12:00:00+02:00",
            datetime(2024, 5, 1, 12, tzinfo=UTC) - timedelta(hours=2),
            id="plus-2h",
        ),
        pytest.param(
            "2024-05-01T12:00:00-05:30",
            datetime(2024, 5, 1, 12, tzinfo=UTC) + timedelta(hours=5, minutes=30),
            id="minus-5h30",
        ),
        pytest.param(
            "1969-12-31T23:59:59.5Z", datetime(1969, 12, 31, 23, 59, 59, 500_000, tzinfo=UTC), id="pre-1970"
        ),
    ],
)
def test_iso_timestamp_examples(text: str, expected: datetime, tmp_path: Path) -> None:
    path = tmp_path / "t.txt"
    path.write_text(f"{text} send a b -\n")
    assert read_text_trace(path)["timestamp"].cast(pa.int64()).to_pylist() == [ns_of(expected)]


# --- ids -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "token",
    [
        pytest.param("abc", id="letters"),
        pytest.param("req-17", id="with-dash"),
        pytest.param("ü-中", id="non-ascii"),
        pytest.param("x" * 40, id="long"),
        pytest.param(str(2**64), id="2**64-too-big"),
        pytest.param("1" * 25, id="25-digits"),
        pytest.param("-5", id="negative-number"),
        pytest.param("1.5", id="decimal"),
        pytest.param("0x10", id="hex"),
        pytest.param("--", id="two-dashes"),
    ],
)
def test_non_numeric_id_is_fnv1a_of_utf8(token: str, tmp_path: Path) -> None:
    path = tmp_path / "t.txt"
    path.write_text(f"1 call a b {token}\n")
    stats = TextStats()
    table = read_text_trace(path, stats=stats)
    assert table["id"].to_pylist() == [fnv1a_64(token.encode("utf-8"))]
    assert stats.hashed_ids == 1


@pytest.mark.parametrize(
    ("token", "expected"),
    [
        pytest.param("-", None, id="dash-is-null"),
        pytest.param("0", 0, id="zero"),
        pytest.param("42", 42, id="small"),
        pytest.param(str(UINT64_MAX), UINT64_MAX, id="uint64-max"),
        pytest.param("00000000000000000007", 7, id="20-digits-leading-zeros"),
        pytest.param("000000000000000000000007", 7, id="24-digits-leading-zeros"),
    ],
)
def test_numeric_and_null_ids(token: str, expected: int | None, tmp_path: Path) -> None:
    path = tmp_path / "t.txt"
    path.write_text(f"1 call a b {token}\n")
    stats = TextStats()
    assert read_text_trace(path, stats=stats)["id"].to_pylist() == [expected]
    assert stats.hashed_ids == 0


id_tokens = st.text(alphabet="abcxyz-_.:/0123456789äß中", min_size=1, max_size=24).filter(
    lambda s: s != "-" and not (s.isdigit() and int(s) < 2**64 and len(s) <= 20)
)


@settings(max_examples=50, deadline=None)
@given(tokens=st.lists(id_tokens, min_size=1, max_size=20))
def test_same_token_same_id_across_files(tokens: list[str], tmp_path_factory: pytest.TempPathFactory) -> None:
    d = tmp_path_factory.mktemp("ids")
    # The same tokens in two files, in different order and lines with different neighbours.
    (d / "one.txt").write_text("".join(f"{i} send a b {tok}\n" for i, tok in enumerate(tokens)))
    (d / "two.txt").write_text(
        "# other\n" + "".join(f"{i} call x y {tok}\n" for i, tok in enumerate(reversed(tokens)))
    )
    one = read_text_trace(d / "one.txt")["id"].to_pylist()
    two = read_text_trace(d / "two.txt")["id"].to_pylist()
    expected = [fnv1a_64(t.encode()) for t in tokens]
    assert one == expected
    assert two == expected[::-1]


# --- layout: comments, whitespace, line endings, compression, chunks -----------------------

LAYOUT = (
    "# header comment\n"
    "\n"
    "1.5 call client web 1   # trailing comment\n"
    "   \t  \n"
    "2\treturn\tweb\tclient\t1\n"
    "  3    send   a  b   -  \n"
    "#4 send a b 9\n"
    "4.25 send b a x7\r\n"
    "\r\n"
    "5 call c d 2"  # last line without newline
)
LAYOUT_ROWS = [
    (1_500_000_000, "call", "client", "web", 1),
    (2_000_000_000, "return", "web", "client", 1),
    (3_000_000_000, "send", "a", "b", None),
    (4_250_000_000, "send", "b", "a", fnv1a_64(b"x7")),
    (5_000_000_000, "call", "c", "d", 2),
]


def test_comments_blank_lines_tabs_crlf_and_last_line(tmp_path: Path, write_lines) -> None:
    path = write_lines(tmp_path / "t.txt", LAYOUT)
    stats = TextStats()
    assert read_rows(path, stats=stats) == LAYOUT_ROWS
    assert stats.lines == 10
    assert stats.messages == 5
    assert stats.skipped == 0
    assert stats.hashed_ids == 1


def test_crlf_file(tmp_path: Path, write_lines) -> None:
    text = "1 call a b 1\r\n2 return b a 1\r\n"
    path = write_lines(tmp_path / "t.txt", text)
    assert read_rows(path) == [(10**9, "call", "a", "b", 1), (2 * 10**9, "return", "b", "a", 1)]


def test_gzip_input(tmp_path: Path) -> None:
    path = tmp_path / "t.txt.gz"
    path.write_bytes(gzip.compress(LAYOUT.encode()))
    assert read_rows(path) == LAYOUT_ROWS


@pytest.mark.parametrize("name", ["out.txt.gz", "out.trace.gz"])
def test_gzip_output(name: str, tmp_path: Path, make_table) -> None:
    rows = [(1, "call", "a", "b", 3), (2, "return", "b", "a", 3)]
    path = tmp_path / name
    write_text_trace(make_table(rows), path)
    text = gzip.decompress(path.read_bytes()).decode()
    assert text == TEXT_HEADER + "0.000000001 call a b 3\n0.000000002 return b a 3\n"
    assert read_rows(path) == rows


def test_written_file_starts_with_header(tmp_path: Path, make_table) -> None:
    path = tmp_path / "t.txt"
    write_text_trace(make_table([(7, "send", "a", "b", None)]), path)
    assert path.read_text() == "# timestamp op sender receiver id\n0.000000007 send a b -\n"


def _big_file(path: Path, n: int) -> list[tuple]:
    lines, rows = [], []
    for i in range(n):
        if i % 10 == 3:
            lines.append(f"# comment {i}\n")
        if i % 17 == 5:
            lines.append("\n")
        rows.append((i * 1_000_001, OPS[i % 3], f"n{i % 7}", f"m{i % 5}", i if i % 4 else None))
        tok = str(i) if i % 4 else "-"
        lines.append(
            f"{i * 1_000_001 // 10**9}.{i * 1_000_001 % 10**9:09d} {OPS[i % 3]} n{i % 7} m{i % 5} {tok}\n"
        )
    path.write_text("".join(lines))
    return rows


def reference_parse(data: bytes) -> list[tuple]:
    """A plain Python reader of the text form (good lines only), as ground truth."""
    rows = []
    for raw in data.split(b"\n"):
        fields = raw.split(b"#", 1)[0].decode("utf-8").split()
        if not fields:
            continue
        ts, op, sender, receiver, ident = fields
        if ident == "-":
            value = None
        elif ident.isascii() and ident.isdigit() and int(ident) < 2**64 and len(ident) <= 20:
            value = int(ident)
        else:
            value = fnv1a_64(ident.encode("utf-8"))
        rows.append((exact_ns(ts), op, sender, receiver, value))
    return rows


_gap = st.text(alphabet=" \t", min_size=1, max_size=3)
_line = st.builds(
    lambda lead, ts, op, s, r, ident, gaps, comment, cr: (
        f"{lead}{ts}{gaps[0]}{op}{gaps[1]}{s}{gaps[2]}{r}{gaps[3]}{ident}{comment}{cr}"
    ),
    st.sampled_from(["", " ", "\t"]),
    seconds_text.filter(in_int64),
    st.sampled_from(OPS),
    names,
    names,
    st.one_of(
        st.just("-"), st.integers(0, 10**6).map(str), st.text(alphabet="abc-_:中", min_size=1, max_size=8)
    ),
    st.lists(_gap, min_size=4, max_size=4),
    st.sampled_from(["", " # note", "\t#x y z", "#"]),
    st.sampled_from(["", "\r"]),
)
_filler = st.sampled_from(["", "   ", "# comment line", "\t# indented comment", "\r"])


@settings(max_examples=50, deadline=None)
@given(
    lines=st.lists(st.one_of(_line, _line, _filler), min_size=0, max_size=40),
    final_newline=st.booleans(),
    chunk_bytes=st.sampled_from([8, 50, 1 << 20]),
)
def test_text_reader_matches_a_plain_python_reader(
    lines: list[str], final_newline: bool, chunk_bytes: int, tmp_path_factory: pytest.TempPathFactory, rows_of
) -> None:
    data = ("\n".join(lines) + ("\n" if final_newline else "")).encode("utf-8")
    path = tmp_path_factory.mktemp("ref") / "t.txt"
    path.write_bytes(data)
    stats = TextStats()
    got = [r for t in iter_text_trace(path, chunk_bytes=chunk_bytes, stats=stats) for r in rows_of(t)]
    expected = reference_parse(data)
    assert got == expected
    assert stats.messages == len(expected)


def test_golden_sample_trace(rows_of) -> None:
    path = Path(__file__).parents[2] / "samples" / "multitier.txt"
    data = path.read_bytes()
    expected = reference_parse(data)
    assert len(expected) > 700
    assert rows_of(read_text_trace(path)) == expected


@pytest.mark.parametrize("chunk_bytes", [3, 64, 1000, 1 << 20], ids=lambda b: f"chunk{b}")
def test_chunked_reading_gives_the_same_rows(chunk_bytes: int, tmp_path: Path, rows_of) -> None:
    path = tmp_path / "big.txt"
    rows = _big_file(path, 150)
    stats = TextStats()
    tables = list(iter_text_trace(path, chunk_bytes=chunk_bytes, stats=stats))
    if chunk_bytes <= 1000:
        assert len(tables) > 1  # chunk boundaries were crossed
    got = [r for t in tables for r in rows_of(t)]
    assert got == rows
    assert stats.messages == 150
    assert stats.lines == path.read_text().count("\n")


@pytest.mark.parametrize("chunk_bytes", [5, 64, 1000], ids=lambda b: f"chunk{b}")
def test_bad_line_in_later_chunk_reports_its_line_number(chunk_bytes: int, tmp_path: Path) -> None:
    path = tmp_path / "big.txt"
    _big_file(path, 150)
    lines = path.read_text().splitlines(keepends=True)
    bad_index = 140  # 0-based, far past the first chunk
    lines[bad_index] = "99 cal a b 1\n"
    path.write_text("".join(lines))
    with pytest.raises(ParseError) as info:
        for _ in iter_text_trace(path, chunk_bytes=chunk_bytes):
            pass
    assert info.value.line == bad_index + 1
    assert str(info.value) == f"{path}:{bad_index + 1}: unknown op 'cal' (must be one of call, return, send)"


def test_skip_bad_in_later_chunks_counts_and_numbers_lines(tmp_path: Path) -> None:
    path = tmp_path / "big.txt"
    rows = _big_file(path, 200)
    lines = path.read_text().splitlines(keepends=True)
    bad = [50, 120, 230]
    for i in bad:
        lines.insert(i, "1 call only-four 5\n")
    path.write_text("".join(lines))
    stats = TextStats()
    got = [r for t in iter_text_trace(path, chunk_bytes=100, skip_bad=True, stats=stats) for r in _tuples(t)]
    assert got == rows
    assert stats.skipped == 3
    assert stats.examples == [
        f"{path}:{i + 1}: expected 5 fields (timestamp op sender receiver id), got 4" for i in bad
    ]


def _tuples(t: pa.Table) -> list[tuple]:
    ts = t["timestamp"].cast(pa.int64()).to_pylist()
    return list(
        zip(
            ts,
            t["op"].to_pylist(),
            t["sender"].to_pylist(),
            t["receiver"].to_pylist(),
            t["id"].to_pylist(),
            strict=True,
        )
    )


# --- bad input -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        pytest.param(
            "1 call a b", "expected 5 fields (timestamp op sender receiver id), got 4", id="4-fields"
        ),
        pytest.param(
            "1 call a b 1 2", "expected 5 fields (timestamp op sender receiver id), got 6", id="6-fields"
        ),
        pytest.param(
            "1 call a b # 1",
            "expected 5 fields (timestamp op sender receiver id), got 4",
            id="comment-hides-field",
        ),
        pytest.param("1 cal a b 1", "unknown op 'cal' (must be one of call, return, send)", id="unknown-op"),
        pytest.param("1 CALL a b 1", "unknown op 'CALL' (must be one of call, return, send)", id="op-case"),
        pytest.param("12:xx call a b 1", "invalid timestamp '12:xx'", id="bad-timestamp"),
        pytest.param("1e3 call a b 1", "invalid timestamp '1e3'", id="exponent-timestamp"),
        pytest.param("1.2.3 call a b 1", "invalid timestamp '1.2.3'", id="two-dots"),
        pytest.param("- call a b 1", "invalid timestamp '-'", id="dash-timestamp"),
        pytest.param("99999999999 call a b 1", "invalid timestamp '99999999999'", id="beyond-2262"),
        pytest.param(
            "-9223372036.854775808 call a b 1", "invalid timestamp '-9223372036.854775808'", id="nat"
        ),
        pytest.param(
            "1677-09-21T00:12:43.145224192Z call a b 1",
            "invalid timestamp '1677-09-21T00:12:43.145224192Z'",
            id="nat-iso",
        ),
        pytest.param(
            "9223372036.854775808 call a b 1",
            "invalid timestamp '9223372036.854775808'",
            id="int64-max-plus-1ns",
        ),
        pytest.param(
            "-9223372036.854775809 call a b 1",
            "invalid timestamp '-9223372036.854775809'",
            id="int64-min-minus-1ns",
        ),
        pytest.param("9223372037 call a b 1", "invalid timestamp '9223372037'", id="int64-max-next-second"),
        pytest.param(
            "18446744073.709551616 call a b 1", "invalid timestamp '18446744073.709551616'", id="uint64-wrap"
        ),
        pytest.param(
            "2024-13-01T00:00:00Z call a b 1", "invalid timestamp '2024-13-01T00:00:00Z'", id="month-13"
        ),
    ],
)
def test_bad_line_raises_parse_error_with_path_and_line(line: str, reason: str, tmp_path: Path) -> None:
    path = tmp_path / "trace.txt"
    path.write_text(f"# header\n1 call a b 1\n{line}\n2 return b a 1\n")
    with pytest.raises(ParseError) as info:
        read_text_trace(path)
    err = info.value
    assert isinstance(err, ValueError)
    assert err.path == str(path)
    assert err.line == 3
    assert str(err).startswith(f"{path}:3: {reason}")
    assert err.reason.startswith(reason)


def test_bad_timestamp_message_says_what_is_allowed(tmp_path: Path) -> None:
    path = tmp_path / "trace.txt"
    path.write_text("yesterday call a b 1\n")
    with pytest.raises(ParseError, match=r"trace\.txt:1: invalid timestamp 'yesterday' \(seconds such as"):
        read_text_trace(path)


def test_first_bad_line_is_reported(tmp_path: Path) -> None:
    path = tmp_path / "trace.txt"
    path.write_text("1 call a b 1\n2 cal a b 1\n3 call a\n")
    with pytest.raises(ParseError) as info:
        read_text_trace(path)
    assert info.value.line == 2


def test_non_utf8_bytes_are_a_parse_error(tmp_path: Path, write_lines) -> None:
    path = write_lines(tmp_path / "trace.txt", b"1 call a b 1\n2 call \xff\xfe b 1\n")
    with pytest.raises(ParseError) as info:
        read_text_trace(path)
    assert info.value.line == 2
    assert str(info.value) == f"{path}:2: not valid UTF-8 text"


def test_valid_utf8_names_are_accepted(tmp_path: Path, write_lines) -> None:
    path = write_lines(tmp_path / "t.txt", "1 call Zürich 東京 1\n")
    assert read_rows(path) == [(10**9, "call", "Zürich", "東京", 1)]


@pytest.mark.parametrize(
    "content",
    [pytest.param(b"", id="empty"), pytest.param(b"# only a comment\n\n   \n", id="comments-only")],
)
def test_file_without_messages_gives_empty_trace(content: bytes, tmp_path: Path, write_lines) -> None:
    path = write_lines(tmp_path / "t.txt", content)
    table = read_text_trace(path)
    assert table.num_rows == 0
    assert table.schema.names == list(CORE_COLUMNS)
    assert table.schema.equals(TRACE_SCHEMA)
    assert list(iter_text_trace(path)) == []


def test_skip_bad_counts_and_keeps_good_lines(tmp_path: Path, write_lines) -> None:
    content = (
        b"1 call a b 1\n"
        b"2 cal a b 1\n"  # bad op
        b"3 return b a 1\n"
        b"x send a b -\n"  # bad timestamp
        b"4 send a b\n"  # 4 fields
        b"5 send \xff b -\n"  # not UTF-8
        b"6 send a b 7\n"
    )
    path = write_lines(tmp_path / "trace.txt", content)
    stats = TextStats()
    rows = read_rows(path, skip_bad=True, stats=stats)
    assert rows == [
        (1 * 10**9, "call", "a", "b", 1),
        (3 * 10**9, "return", "b", "a", 1),
        (6 * 10**9, "send", "a", "b", 7),
    ]
    assert stats.skipped == 4
    assert stats.messages == 3
    assert stats.lines == 7
    assert [e.split(": ", 1)[0] for e in stats.examples] == [f"{path}:{n}" for n in (2, 4, 5, 6)]
    assert "unknown op 'cal'" in stats.examples[0]
    assert "invalid timestamp 'x'" in stats.examples[1]
    assert "got 4" in stats.examples[2]
    assert "not valid UTF-8" in stats.examples[3]


def test_skip_bad_examples_are_capped(tmp_path: Path) -> None:
    path = tmp_path / "trace.txt"
    path.write_text("1 call a b 1\n" + "oops\n" * 12)
    stats = TextStats()
    assert read_text_trace(path, skip_bad=True, stats=stats).num_rows == 1
    assert stats.skipped == 12
    assert len(stats.examples) == 5


def test_all_lines_bad_with_skip_bad_gives_empty_trace(tmp_path: Path) -> None:
    path = tmp_path / "trace.txt"
    path.write_text("a\nb c\n")
    stats = TextStats()
    assert read_text_trace(path, skip_bad=True, stats=stats).num_rows == 0
    assert stats.skipped == 2


def test_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "nope.txt"
    with pytest.raises(TraceFileError, match="no such file") as info:
        read_text_trace(path)
    assert str(path) in str(info.value)
    assert isinstance(info.value, OSError)


def test_directory_is_not_a_trace(tmp_path: Path) -> None:
    with pytest.raises(TraceFileError, match="is a directory") as info:
        read_text_trace(tmp_path)
    assert str(tmp_path) in str(info.value)


def test_corrupt_gzip_is_a_trace_file_error(tmp_path: Path) -> None:
    path = tmp_path / "t.txt.gz"
    path.write_bytes(gzip.compress(b"1 call a b 1\n" * 1000)[:40])
    with pytest.raises(TraceFileError) as info:
        read_text_trace(path)
    assert str(path) in str(info.value)


# --- writing -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("column", "name"),
    [
        pytest.param("sender", "web server", id="space-in-sender"),
        pytest.param("receiver", "tab\there", id="tab-in-receiver"),
        pytest.param("sender", "a#b", id="hash"),
        pytest.param("receiver", "", id="empty"),
        pytest.param("sender", "new\nline", id="newline"),
    ],
)
def test_write_rejects_unwritable_names_and_leaves_no_file(
    column: str, name: str, tmp_path: Path, make_table
) -> None:
    rows = [(1, "call", "a", "b", 1), (2, "call", "a", "b", 2)]
    table = make_table(rows)
    values = ["a", name] if column == "sender" else ["b", name]
    table = table.set_column(table.schema.get_field_index(column), column, pa.array(values))
    path = tmp_path / "out.txt"
    with pytest.raises(SchemaError) as info:
        write_text_trace(table, path)
    assert repr(name) in str(info.value)
    assert column in str(info.value)
    assert not path.exists()
    assert list(tmp_path.iterdir()) == []  # no partial file either


def test_failed_write_keeps_an_existing_target(tmp_path: Path, make_table) -> None:
    path = tmp_path / "out.txt"
    path.write_text("old content\n")
    with pytest.raises(SchemaError):
        write_text_trace(make_table([(1, "call", "web server", "b", 1)]), path)
    assert path.read_text() == "old content\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.txt"]


def test_unused_dictionary_entry_does_not_block_writing(tmp_path: Path, rows_of) -> None:
    # The name with a space is in the dictionary but no message uses it.
    sender = pa.DictionaryArray.from_arrays(pa.array([0, 0], pa.int32()), pa.array(["a", "web server"]))
    table = pa.table(
        {
            "timestamp": pa.array([1, 2], pa.int64()).cast(pa.timestamp("ns", tz="UTC")),
            "sender": sender,
            "receiver": ["b", "b"],
            "op": ["send", "send"],
            "id": pa.array([None, 4], pa.uint64()),
        }
    )
    path = tmp_path / "out.txt"
    assert write_text_trace(table, path) == 2
    assert rows_of(read_text_trace(path)) == [(1, "send", "a", "b", None), (2, "send", "a", "b", 4)]


def test_write_a_stream_of_tables_with_different_names(tmp_path: Path, make_table, rows_of) -> None:
    parts = [
        [(1, "call", "a", "b", 1)],
        [],
        [(2, "call", "c", "d", 2), (3, "return", "d", "c", 2)],
        [(4, "send", "ä", "a", None)],
    ]
    path = tmp_path / "out.txt"
    assert write_text_trace((make_table(p) for p in parts), path) == 4
    assert rows_of(read_text_trace(path)) == [r for p in parts for r in p]


def test_write_validates_its_input(tmp_path: Path, make_table) -> None:
    table = make_table([(1, "cal", "a", "b", 1)])
    path = tmp_path / "out.txt"
    with pytest.raises(SchemaError, match="unknown op 'cal'"):
        write_text_trace(table, path)
    assert not path.exists()


def test_write_creates_parent_directories(tmp_path: Path, make_table) -> None:
    path = tmp_path / "deep" / "er" / "out.txt"
    write_text_trace(make_table([(1, "send", "a", "b", None)]), path)
    assert path.read_text().endswith("0.000000001 send a b -\n")


def test_a_byte_order_mark_is_not_part_of_the_first_timestamp(tmp_path: Path) -> None:
    path = tmp_path / "bom.txt"
    path.write_bytes(b"\xef\xbb\xbf1.0 call a b 1\n1.5 return b a 1\n")
    t = read_text_trace(path)
    assert t["timestamp"].cast("int64").to_pylist() == [1_000_000_000, 1_500_000_000]
