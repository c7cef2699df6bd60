"""Jaeger and OTLP spans as a message trace with ground truth (``tracefmt.spans``).

Tiny hand-written fixtures pin the rules (what an RPC is, who calls it, which RPC
encloses it, whose clock stamps it); the real TraceWeaver data sets in
../shared/data/traceweaver are checked against counts and shapes computed here from the
raw JSON, independently of the reader.
"""

from __future__ import annotations

import copy
import gzip
import io
import json
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tracefmt import (
    ParameterError,
    ParseError,
    SpanStats,
    TraceFileError,
    convert_trace,
    read_jaeger,
    read_otlp,
    read_spans,
    read_trace,
    read_trace_metadata,
    span_format,
    write_text_trace,
)
from tracefmt.patterns import Shape, pattern_id
from wirepath.cli import main

DATA = Path(__file__).resolve().parents[3] / "shared" / "data" / "traceweaver"
if not DATA.is_dir():
    DATA = Path("/work/shared/data/traceweaver")
FILES = sorted(DATA.glob("*.jsonl.gz")) if DATA.is_dir() else []
needs_data = pytest.mark.skipif(not FILES, reason="../shared/data/traceweaver is not present")
TRUTH = ("true_instance", "true_pattern", "true_call", "true_parent")


# --- fixtures written by hand --------------------------------------------------------------


def jspan(sid: str, parent: str | None, pid: str, start: int, dur: int, kind: str | None = None) -> dict:
    """One Jaeger span of trace "t" (times in microseconds)."""
    refs = [{"refType": "CHILD_OF", "traceID": "t", "spanID": parent}] if parent else []
    tags = [{"key": "span.kind", "type": "string", "value": kind}] if kind else []
    return {
        "traceID": "t",
        "spanID": sid,
        "references": refs,
        "processID": pid,
        "operationName": f"op-{sid}",
        "startTime": start,
        "duration": dur,
        "tags": tags,
    }


def jdoc(spans: list[dict], processes: dict[str, str], trace_id: str = "t") -> dict:
    """A Jaeger API response holding one trace of (copies of) ``spans``."""
    spans = copy.deepcopy(spans)
    procs = {pid: {"serviceName": name} for pid, name in processes.items()}
    for s in spans:
        s["traceID"] = trace_id
        for r in s["references"] if isinstance(s.get("references"), list) else []:
            r["traceID"] = trace_id
    return {"data": [{"traceID": trace_id, "spans": spans, "processes": procs}], "errors": None}


def as_file(doc: Any) -> io.StringIO:
    return io.StringIO(json.dumps(doc))


def rows(table: pa.Table, *cols: str) -> list[tuple]:
    cols = cols or ("op", "sender", "receiver", "id", "true_parent")
    data = table.select(list(cols)).to_pylist()
    return [tuple(r[c] for c in cols) for r in data]


def ts_us(table: pa.Table) -> list[int]:
    return [t // 1000 for t in table["timestamp"].cast(pa.int64()).to_pylist()]


# web (server a) -> internal i -> client b  =>  db (server c); web also calls cache without a server span.
HOTEL_LIKE = [
    jspan("a", None, "p1", 100, 100, "server"),
    jspan("i", "a", "p1", 105, 80),
    jspan("b", "i", "p1", 110, 40, "client"),
    jspan("c", "b", "p2", 120, 20, "server"),
    jspan("k", "a", "p1", 160, 10, "client"),
]
HOTEL_PROCS = {"p1": "web", "p2": "db"}


def test_client_and_server_span_are_one_rpc_and_internal_spans_are_not_rpcs() -> None:
    stats = SpanStats()
    t = read_jaeger(as_file(jdoc(HOTEL_LIKE, HOTEL_PROCS)), stats=stats)
    assert rows(t) == [
        ("call", "client", "web", 1, None),
        ("call", "web", "db", 2, 1),
        ("return", "db", "web", 2, 1),
        ("return", "web", "client", 1, None),
    ]
    assert ts_us(t) == [100, 120, 140, 200]  # at the callee: the server spans' times
    assert t["label"].to_pylist() == ["op-a", "op-c", "op-c", "op-a"]
    assert t["true_call"].to_pylist() == t["id"].to_pylist()
    assert t["true_instance"].to_pylist() == [1] * 4
    shape = Shape("client", "web", (Shape("web", "db"),))
    assert set(t["true_pattern"].to_pylist()) == {pattern_id(shape)}
    assert (stats.spans, stats.rpcs, stats.requests, stats.client_sides, stats.local) == (5, 2, 1, 1, 2)
    assert (stats.orphans, stats.duplicates, stats.skipped) == (0, 0, 0)


def test_at_caller_takes_the_client_span_where_there_is_one() -> None:
    stats = SpanStats()
    t = read_jaeger(as_file(jdoc(HOTEL_LIKE, HOTEL_PROCS)), at="caller", stats=stats)
    assert rows(t)[1:3] == [("call", "web", "db", 2, 1), ("return", "db", "web", 2, 1)]
    assert ts_us(t) == [100, 110, 150, 200]  # web's client span b; the root has none
    assert stats.caller_stamped == 1


def test_media_style_spans_without_kind() -> None:
    """Without span.kind a span whose parent runs in another service enters that service."""
    spans = [
        jspan("r", None, "n", 1000, 900),  # nginx, the request's root
        jspan("l", "r", "n", 1010, 800),  # nginx, local
        jspan("x", "l", "a", 1100, 500),  # svc-a, entered from nginx
        jspan("y", "x", "a", 1150, 300),  # svc-a, local (a database call, say)
        jspan("z", "y", "b", 1200, 100),  # svc-b, entered from svc-a
        jspan("w", "l", "b", 1700, 50),  # svc-b again, from nginx
    ]
    stats = SpanStats()
    t = read_jaeger(as_file(jdoc(spans, {"n": "nginx", "a": "svc-a", "b": "svc-b"})), stats=stats)
    assert rows(t) == [
        ("call", "client", "nginx", 1, None),
        ("call", "nginx", "svc-a", 2, 1),
        ("call", "svc-a", "svc-b", 3, 2),
        ("return", "svc-b", "svc-a", 3, 2),
        ("return", "svc-a", "nginx", 2, 1),
        ("call", "nginx", "svc-b", 4, 1),
        ("return", "svc-b", "nginx", 4, 1),
        ("return", "nginx", "client", 1, None),
    ]
    assert (stats.rpcs, stats.local, stats.client_sides) == (4, 2, 0)
    # No client spans: at="caller" falls back to the server side's times.
    assert read_jaeger(as_file(jdoc(spans, {"n": "nginx", "a": "svc-a", "b": "svc-b"})), at="caller").equals(
        t
    )


def _otlp_doc() -> dict:
    def resource(service: str, spans: list[dict]) -> dict:
        attrs = [{"key": "service.name", "value": {"stringValue": service}}]
        return {"resource": {"attributes": attrs}, "scopeSpans": [{"scope": {"name": "x"}, "spans": spans}]}

    def span(sid: str, parent: str, kind: Any, start: int, end: int) -> dict:
        return {
            "traceId": "5b8efff798038103d269b633813fc60c",
            "spanId": sid,
            "parentSpanId": parent,
            "kind": kind,
            "name": f"op-{sid}",
            "startTimeUnixNano": str(start),
            "endTimeUnixNano": end,  # numbers and strings both occur
        }

    return {
        "resourceSpans": [
            resource(
                "web",
                [
                    span("a", "", 2, 1_000, 9_000),
                    span("i", "a", 1, 1_500, 8_000),  # internal
                    span("b", "i", "SPAN_KIND_CLIENT", 2_000, 6_000),
                ],
            ),
            resource("db", [span("c", "b", "SPAN_KIND_SERVER", 2_500, 5_500)]),
        ]
    }


def test_otlp() -> None:
    stats = SpanStats()
    t = read_otlp(as_file(_otlp_doc()), stats=stats)
    assert rows(t) == [
        ("call", "client", "web", 1, None),
        ("call", "web", "db", 2, 1),
        ("return", "db", "web", 2, 1),
        ("return", "web", "client", 1, None),
    ]
    assert t["timestamp"].cast(pa.int64()).to_pylist() == [1_000, 2_500, 5_500, 9_000]
    t_caller = read_otlp(as_file(_otlp_doc()), at="caller")
    assert t_caller["timestamp"].cast(pa.int64()).to_pylist() == [1_000, 2_000, 6_000, 9_000]
    assert (stats.format, stats.traces, stats.spans, stats.rpcs, stats.local) == ("otlp", 1, 4, 2, 1)


def test_otlp_json_lines_gzip(tmp_path: Path) -> None:
    """The collector's file exporter: one document a line; here gzip'd, one resource each."""
    doc = _otlp_doc()
    lines = [json.dumps({"resourceSpans": [rs]}) for rs in doc["resourceSpans"]]
    path = tmp_path / "otel.jsonl.gz"
    path.write_bytes(gzip.compress("\n".join(lines).encode()))
    assert span_format(path) == "otlp"
    assert read_spans(path).equals(read_otlp(as_file(doc)))


def test_jaeger_forms_agree(tmp_path: Path) -> None:
    """One API response, JSON Lines of them, a bare trace, gzip'd or not: the same trace."""
    doc = jdoc(HOTEL_LIKE, HOTEL_PROCS)
    want = read_jaeger(as_file(doc))
    one = tmp_path / "one.json"
    one.write_text(json.dumps(doc, indent=2))
    bare = tmp_path / "bare.json"
    bare.write_text(json.dumps(doc["data"][0]))
    lines = tmp_path / "lines.jsonl.gz"
    other = jdoc([jspan("s", None, "p", 5000, 10, "server")], {"p": "solo"}, trace_id="u")
    lines.write_bytes(gzip.compress((json.dumps(doc) + "\n" + json.dumps(other) + "\n").encode()))
    for path in (one, bare):
        assert span_format(path) == "jaeger"
        assert read_jaeger(path).equals(want)
        with open(path, "rb") as f:
            assert read_jaeger(f).equals(want)
    both = read_jaeger(lines)
    assert both.num_rows == want.num_rows + 2
    assert len(set(both["true_instance"].to_pylist())) == 2
    assert both.filter(pa.compute.equal(both["receiver"], "solo")).num_rows == 1


def test_orphans_become_roots_and_duplicates_are_skipped() -> None:
    spans = [
        jspan("a", None, "p1", 100, 50, "server"),
        jspan("x", "gone", "p2", 300, 10, "server"),  # its parent is not in the file
        jspan("a", None, "p1", 100, 50, "server"),  # the same span again
    ]
    stats = SpanStats()
    t = read_jaeger(as_file(jdoc(spans, HOTEL_PROCS)), stats=stats)
    assert rows(t, "op", "sender", "receiver", "true_instance", "true_parent") == [
        ("call", "client", "web", 1, None),
        ("return", "web", "client", 1, None),
        ("call", "client", "db", 2, None),
        ("return", "db", "client", 2, None),
    ]
    assert (stats.orphans, stats.duplicates, stats.requests) == (1, 1, 2)


def test_a_call_to_itself_and_a_root_client_span() -> None:
    """A server span answering a client span of its own service is an RPC to itself; a
    client span without a parent (node's init-service) is the caller of a request."""
    spans = [
        jspan("init", None, "p0", 10, 100, "client"),
        jspan("s", "init", "p1", 20, 80, "server"),
        jspan("c", "s", "p1", 30, 20, "client"),
        jspan("self", "c", "p1", 35, 10, "server"),
    ]
    t = read_jaeger(as_file(jdoc(spans, {"p0": "init", "p1": "web"})))
    assert rows(t) == [
        ("call", "init", "web", 1, None),
        ("call", "web", "web", 2, 1),
        ("return", "web", "web", 2, 1),
        ("return", "web", "init", 1, None),
    ]


def test_equal_timestamps_keep_the_causal_order() -> None:
    """Millisecond clocks (node) stamp many messages alike: calls before their children's,
    children's returns before their parent's."""
    spans = [
        jspan("a", None, "p1", 1000, 0, "server"),
        jspan("b", "a", "p2", 1000, 0, "server"),
        jspan("c", "b", "p3", 1000, 0, "server"),
        jspan("d", "a", "p3", 1000, 0, "server"),
    ]
    t = read_jaeger(as_file(jdoc(spans, {"p1": "a", "p2": "b", "p3": "c"})))
    assert rows(t, "op", "sender", "receiver") == [
        ("call", "client", "a"),
        ("call", "a", "b"),
        ("call", "b", "c"),
        ("return", "c", "b"),
        ("return", "b", "a"),
        ("call", "a", "c"),
        ("return", "c", "a"),
        ("return", "a", "client"),
    ]


def test_concurrent_calls_in_either_order_are_one_shape() -> None:
    """Calls a service makes at once form a group whatever order they left in; calls made
    after the earlier ones returned stay in order."""

    def request(first: str, second: str) -> dict:
        return jdoc(
            [
                jspan("r", None, "n", 1000, 500),
                jspan(first, "r", first, 1010, 100),
                jspan(second, "r", second, 1020, 100),  # before the first returned
                jspan("c", "r", "c", 1300, 10),  # after both returned
            ],
            {"n": "gw", "a": "a", "b": "b", "c": "c"},
        )

    one = read_jaeger(as_file(request("a", "b")))
    two = read_jaeger(as_file(request("b", "a")))
    assert rows(one, "op", "receiver")[1] == ("call", "a")
    assert rows(two, "op", "receiver")[1] == ("call", "b")
    want = Shape.grouped("client", "gw", [[Shape("gw", "a"), Shape("gw", "b")], [Shape("gw", "c")]])
    assert set(one["true_pattern"].to_pylist()) == set(two["true_pattern"].to_pylist()) == {pattern_id(want)}


def test_empty_input() -> None:
    stats = SpanStats()
    t = read_jaeger(as_file({"data": []}), stats=stats)
    assert t.num_rows == 0
    assert set(TRUTH) <= set(t.column_names)
    assert (stats.documents, stats.traces, stats.spans) == (1, 0, 0)
    assert read_otlp(io.StringIO("")).num_rows == 0


def test_wrong_input_type() -> None:
    with pytest.raises(TypeError, match="expected a path or a file object, not int"):
        read_jaeger(42)  # type: ignore[arg-type]


def test_unknown_at() -> None:
    with pytest.raises(ParameterError, match=r"unknown at 'server' \(must be one of callee, caller\)"):
        read_jaeger(as_file({"data": []}), at="server")


def _shuffled(doc: dict, seed: int) -> dict:
    trace = dict(doc["data"][0])
    order = np.random.default_rng(seed).permutation(len(trace["spans"]))
    trace["spans"] = [trace["spans"][i] for i in order]
    return {"data": [trace]}


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(-(10**9), 10**9))
def test_span_order_and_a_time_shift_change_nothing(seed: int, shift_us: int) -> None:
    spans = [
        jspan("r", None, "n", 2_000_000_000, 900),
        jspan("l", "r", "n", 2_000_000_010, 800),
        jspan("x", "l", "a", 2_000_000_100, 500),
        jspan("y", "x", "a", 2_000_000_150, 300),
        jspan("z", "y", "b", 2_000_000_200, 100),
        jspan("w", "l", "b", 2_000_000_700, 50),
    ]
    doc = jdoc(spans, {"n": "nginx", "a": "svc-a", "b": "svc-b"})
    want = read_jaeger(as_file(doc))
    got = read_jaeger(as_file(_shuffled(doc, seed)))
    cols = ["timestamp", "op", "sender", "receiver", "id", "label", *TRUTH]
    assert got.select(cols).to_pylist() == want.select(cols).to_pylist()
    for s in doc["data"][0]["spans"]:
        s["startTime"] += shift_us
    moved = read_jaeger(as_file(doc))
    assert moved.drop_columns(["timestamp"]).to_pylist() == want.drop_columns(["timestamp"]).to_pylist()
    assert np.array_equal(np.array(ts_us(moved)) - shift_us, ts_us(want))


# --- bad input -----------------------------------------------------------------------------


def test_truncated_gzip(tmp_path: Path) -> None:
    data = gzip.compress(json.dumps(jdoc(HOTEL_LIKE, HOTEL_PROCS)).encode() * 50)
    path = tmp_path / "cut.jsonl.gz"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(TraceFileError, match=r"cut\.jsonl\.gz: truncated gzip data"):
        read_jaeger(path)
    with pytest.raises(TraceFileError, match="truncated gzip data"):
        span_format(path)


def test_corrupt_gzip(tmp_path: Path) -> None:
    path = tmp_path / "bad.json.gz"
    path.write_bytes(b"\x1f\x8b" + b"\x00" * 40)
    with pytest.raises(TraceFileError, match=r"bad\.json\.gz: corrupt gzip data"):
        read_jaeger(path)


@pytest.mark.parametrize(
    ("text", "match"),
    [
        pytest.param("hello", r"x\.json:1: not JSON: Expecting value \(column 1\)", id="not-json"),
        pytest.param(
            '{"data": []}\n{"data": [{"spans": [',
            r"x\.json:2: not JSON: Expecting value .*; the file may be cut short",
            id="cut-json-lines",
        ),
        pytest.param('{"resourceSpans": []}', r"x\.json:1: not a Jaeger API document", id="otlp-as-jaeger"),
        pytest.param("[1, 2]", r"x\.json:1: trace 0: the trace is int \(must be a JSON object\)", id="list"),
        pytest.param("\xff", r"x\.json:1: not UTF-8 text", id="latin-1"),
    ],
)
def test_not_a_jaeger_file(tmp_path: Path, text: str, match: str) -> None:
    path = tmp_path / "x.json"
    path.write_bytes(text.encode("latin-1") if text == "\xff" else text.encode())
    with pytest.raises(ParseError, match=match):
        read_jaeger(path)


def _without(key: str, value: Any = None) -> dict:
    spans = [dict(s) for s in HOTEL_LIKE]
    if value is None:
        del spans[2][key]
    else:
        spans[2][key] = value
    return jdoc(spans, HOTEL_PROCS)


@pytest.mark.parametrize(
    ("doc", "match"),
    [
        pytest.param(_without("spanID"), "trace t span 2: missing 'spanID'", id="no-span-id"),
        pytest.param(_without("startTime"), "trace t span 2: missing 'startTime'", id="no-start"),
        pytest.param(
            _without("duration", -5), r"'duration' is -5 \(must be an integer from 0", id="negative"
        ),
        pytest.param(_without("startTime", "soon"), "'startTime' is 'soon'", id="text-time"),
        pytest.param(_without("processID", "p9"), "processID 'p9' is not in the trace's", id="no-proc"),
        pytest.param(_without("references", {"a": 1}), "'references' is dict", id="bad-refs"),
    ],
)
def test_missing_or_bad_fields(doc: dict, match: str) -> None:
    with pytest.raises(ParseError, match=match) as info:
        read_jaeger(as_file(doc))
    assert info.value.line == 1


def test_skip_bad_spans() -> None:
    doc = _without("startTime")
    stats = SpanStats()
    t = read_jaeger(as_file(doc), skip_bad=True, stats=stats)
    assert stats.skipped == 1
    assert stats.examples == ["<file>:1: trace t span 2: missing 'startTime'"]
    # Its child lost its parent: a root now, counted.
    assert stats.orphans == 1
    assert rows(t, "op", "sender", "receiver") == [
        ("call", "client", "web"),
        ("call", "client", "db"),
        ("return", "db", "client"),
        ("return", "web", "client"),
    ]


def test_a_cycle_of_references() -> None:
    spans = [jspan("a", "b", "p1", 100, 10, "server"), jspan("b", "a", "p2", 100, 10, "server")]
    with pytest.raises(ParseError, match=r"span [ab] is its own ancestor"):
        read_jaeger(as_file(jdoc(spans, HOTEL_PROCS)))


def test_otlp_missing_fields() -> None:
    doc = _otlp_doc()
    del doc["resourceSpans"][1]["scopeSpans"][0]["spans"][0]["endTimeUnixNano"]
    with pytest.raises(ParseError, match="resourceSpans 1 scope 0 span 0: missing 'endTimeUnixNano'"):
        read_otlp(as_file(doc))
    with pytest.raises(ParseError, match="not an OTLP/JSON document"):
        read_otlp(as_file({"data": []}))


# --- format detection and convert ---------------------------------------------------------------


def test_span_format(tmp_path: Path) -> None:
    text = tmp_path / "t.txt"
    text.write_text("0.5 call a b 1\n")
    assert span_format(text) is None
    other = tmp_path / "other.json"
    other.write_text('{"hello": 1}')
    with pytest.raises(TraceFileError, match="not a Jaeger or OTLP JSON file"):
        span_format(other)
    named = tmp_path / "named.jsonl"
    named.write_text("0.5 call a b 1\n")
    with pytest.raises(TraceFileError, match="not a Jaeger or OTLP JSON file"):
        span_format(named)
    with pytest.raises(TraceFileError, match="no such file"):
        span_format(tmp_path / "absent.json")


def test_convert_by_content(tmp_path: Path) -> None:
    src = tmp_path / "spans.dat.txt"  # a misleading name: the content decides
    src.write_text(json.dumps(jdoc(HOTEL_LIKE, HOTEL_PROCS)))
    report = convert_trace(src, tmp_path / "t.parquet", at="caller")
    assert report.messages == 4
    assert report.spans is not None
    assert (report.spans["format"], report.spans["at"], report.spans["rpcs"]) == ("jaeger", "caller", 2)
    t = read_trace(tmp_path / "t.parquet")
    assert ts_us(t) == [100, 110, 150, 200]
    assert set(TRUTH) | {"label"} <= set(t.column_names)
    prov = read_trace_metadata(tmp_path / "t.parquet").provenance
    assert prov["converted_from"] == "jaeger"
    assert prov["spans"]["at"] == "caller"
    # The text form keeps the messages (not the truth columns).
    convert_trace(src, tmp_path / "t.txt")
    assert (tmp_path / "t.txt").read_text().splitlines()[1] == "0.000100000 call client web 1"


def test_convert_at_on_a_trace_is_an_error(tmp_path: Path) -> None:
    src = tmp_path / "t.txt"
    write_text_trace(read_jaeger(as_file(jdoc(HOTEL_LIKE, HOTEL_PROCS))), src)
    with pytest.raises(ParameterError, match="'at' applies to Jaeger or OTLP span files, not a text trace"):
        convert_trace(src, tmp_path / "t.parquet", at="callee")


def test_cli_convert(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "otel.json"
    src.write_text(json.dumps(_otlp_doc()))
    assert main(["convert", str(src), str(tmp_path / "o.parquet"), "--at", "caller"]) == 0
    out = capsys.readouterr().out
    assert f"wrote 4 messages to {tmp_path / 'o.parquet'}" in out
    assert "from 4 otlp spans in 1 traces: 2 RPCs in 1 requests" in out
    assert "stamped at the caller: the client span's times (1 RPCs)" in out
    assert "1 client spans merged with their server side; 1 spans within a service" in out
    assert main(["convert", str(src), str(tmp_path / "j.parquet"), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["spans"]["rpcs"] == 2
    assert doc["spans"]["at"] == "callee"


@pytest.mark.parametrize(
    ("content", "match"),
    [
        pytest.param(
            b'{"data": [{"traceID": "t", "spans": [{"spanID": "a"}]}]}',
            "trace t span 0: missing 'processID'",
            id="missing-field",
        ),
        pytest.param(b"\x1f\x8b\x08\x00\x00\x00", "truncated gzip data", id="truncated-gzip"),
        pytest.param(b"not json at all", "not a Jaeger or OTLP JSON file", id="not-json"),
    ],
)
def test_cli_convert_bad_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: bytes, match: str
) -> None:
    src = tmp_path / "bad.json"
    src.write_bytes(content)
    assert main(["convert", str(src), str(tmp_path / "o.parquet")]) == 1
    captured = capsys.readouterr()
    err = captured.err.strip().splitlines()
    assert len(err) == 1
    assert err[0].startswith("error: ")
    assert match in err[0]
    assert not (tmp_path / "o.parquet").exists()


# --- the real data sets ----------------------------------------------------------------------


def _raw_traces(path: Path) -> list[dict]:
    with gzip.open(path, "rt") as f:
        return [t for line in f for t in json.loads(line)["data"]]


def _kind(span: dict) -> str | None:
    return next((t["value"] for t in span.get("tags", []) if t["key"] == "span.kind"), None)


def _entries(trace: dict) -> dict[str, dict]:
    """Spans entering a service, in plain Python: a server span, or (media, no kind) a
    span without a parent or whose parent runs in another service."""
    by_id = {s["spanID"]: s for s in trace["spans"]}
    service = {sid: trace["processes"][s["processID"]]["serviceName"] for sid, s in by_id.items()}
    out = {}
    for sid, s in by_id.items():
        parent = s["references"][0]["spanID"] if s["references"] else None
        kind = _kind(s)
        if kind == "server" or (kind is None and (parent is None or service[parent] != service[sid])):
            out[sid] = s
    return out


def _truth_in_python(trace: dict) -> list[tuple[str, str, str, str | None]]:
    """(caller, callee, operation, enclosing RPC's operation) of every RPC of a raw trace."""
    by_id = {s["spanID"]: s for s in trace["spans"]}
    service = {sid: trace["processes"][s["processID"]]["serviceName"] for sid, s in by_id.items()}
    entries = _entries(trace)

    def parent_of(sid: str) -> str | None:
        refs = by_id[sid]["references"]
        return refs[0]["spanID"] if refs else None

    out = []
    for sid, s in entries.items():
        p = parent_of(sid)
        caller = service[p] if p else "client"
        up = p
        while up is not None and up not in entries:
            up = parent_of(up)
        out.append((caller, service[sid], s["operationName"], by_id[up]["operationName"] if up else None))
    return out


@pytest.fixture(scope="module")
def real() -> dict[str, tuple[list[dict], pa.Table]]:
    return {p.name.split(".")[0]: (_raw_traces(p), read_jaeger(p)) for p in FILES}


@needs_data
@pytest.mark.parametrize("name", [p.name.split(".")[0] for p in FILES] or ["none"])
def test_real_rpcs_are_the_entry_spans(real, name: str) -> None:
    traces, t = real[name]
    n_entries = sum(len(_entries(tr)) for tr in traces)
    server_spans = sum(_kind(s) == "server" for tr in traces for s in tr["spans"])
    if not name.startswith("media"):
        assert n_entries == server_spans  # hotel and node: exactly their server spans
    assert t.num_rows == 2 * n_entries
    assert Counter(t["op"].to_pylist()) == {"call": n_entries, "return": n_entries}
    assert len(set(t["true_instance"].to_pylist())) == len(traces)  # one request per trace
    # Every id is one call and one return, the call first.
    ids = t["id"].to_numpy()
    first = np.unique(ids, return_index=True)[1]
    assert np.unique(ids).size == n_entries
    assert set(t["op"].take(pa.array(first)).to_pylist()) == {"call"}
    ts = t["timestamp"].cast(pa.int64()).to_numpy()
    assert (np.diff(ts) >= 0).all()


@needs_data
@pytest.mark.parametrize("name", [p.name.split(".")[0] for p in FILES] or ["none"])
def test_real_true_parents_match_the_spans(real, name: str) -> None:
    traces, t = real[name]
    calls = t.filter(pa.compute.equal(t["op"], "call"))
    call_id = calls["true_call"].to_pylist()
    label = dict(zip(call_id, calls["label"].to_pylist(), strict=True))
    instance = dict(zip(call_id, calls["true_instance"].to_pylist(), strict=True))
    got = Counter()
    for c, caller, callee, op, parent in zip(
        call_id,
        calls["sender"].to_pylist(),
        calls["receiver"].to_pylist(),
        calls["label"].to_pylist(),
        calls["true_parent"].to_pylist(),
        strict=True,
    ):
        if parent is not None:
            assert instance[parent] == instance[c]  # the parent is an RPC of the same request
        else:
            assert instance[c] == c  # a request's first RPC names it
        got[(caller, callee, op, label[parent] if parent is not None else None)] += 1
    want = Counter(x for tr in traces for x in _truth_in_python(tr))
    assert got == want


@needs_data
@pytest.mark.parametrize("name", ["hotel_load25", "hotel_load75", "hotel_load125"])
def test_real_hotel_request_shape(real, name: str) -> None:
    _, t = real[name]
    shape = Shape(
        "client",
        "frontend",
        (
            Shape("frontend", "search", (Shape("search", "geo"), Shape("search", "rate"))),
            Shape("frontend", "reservation"),
            Shape("frontend", "profile"),
        ),
    )
    assert set(t["true_pattern"].to_pylist()) == {pattern_id(shape)}
    calls = t.filter(pa.compute.equal(t["op"], "call"))
    callee = dict(zip(calls["true_call"].to_pylist(), calls["receiver"].to_pylist(), strict=True))
    edges = Counter(
        (callee.get(p), c)
        for p, c in zip(calls["true_parent"].to_pylist(), calls["receiver"].to_pylist(), strict=True)
    )
    n = len(set(t["true_instance"].to_pylist()))
    assert edges == {
        (None, "frontend"): n,
        ("frontend", "search"): n,
        ("search", "geo"): n,
        ("search", "rate"): n,
        ("frontend", "reservation"): n,
        ("frontend", "profile"): n,
    }


@needs_data
@pytest.mark.parametrize("name", ["hotel_load25", "node_load25", "media_load25"])
def test_real_timestamps_at_caller_and_callee(real, name: str) -> None:
    traces, at_callee = real[name]
    at_caller = read_jaeger(DATA / f"{name}.jsonl.gz", at="caller")
    assert at_caller.drop_columns(["timestamp"]).num_rows == at_callee.num_rows
    server, client = Counter(), Counter()
    for tr in traces:
        by_id = {s["spanID"]: s for s in tr["spans"]}
        for s in _entries(tr).values():
            server[(s["startTime"] * 1000, (s["startTime"] + s["duration"]) * 1000)] += 1
            refs = s["references"]
            p = by_id[refs[0]["spanID"]] if refs else None
            side = p if p is not None and _kind(p) == "client" else s
            client[(side["startTime"] * 1000, (side["startTime"] + side["duration"]) * 1000)] += 1

    def intervals(t: pa.Table) -> Counter:
        ts = t["timestamp"].cast(pa.int64()).to_numpy()
        ids = t["id"].to_numpy()
        order = np.lexsort((ts, ids))  # per id: call, then return (returns never precede calls)
        return Counter(zip(ts[order][0::2].tolist(), ts[order][1::2].tolist(), strict=True))

    assert intervals(at_callee) == server
    assert intervals(at_caller) == client
    if name.startswith("media"):
        assert at_caller.equals(at_callee)  # no client spans: the server side for both
    else:
        assert intervals(at_caller) != intervals(at_callee)


@needs_data
@pytest.mark.parametrize("name", [p.name.split(".")[0] for p in FILES] or ["none"])
def test_real_true_pattern_is_the_id_inference_gives_the_true_tree(real, name: str) -> None:
    import infer
    from infer.patterns import build_patterns

    _, t = real[name]
    pairs, parent, names, _ = infer.true_pairs(t)
    patterns, _, pattern_index = build_patterns(pairs, parent, names)
    ids = np.array([p.id for p in patterns])[pattern_index]
    column = np.array(t["true_pattern"].to_pylist())[pairs.call_row]
    assert (ids == column).all()
