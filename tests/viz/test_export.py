"""Exports checked against each format's published definition and the instances they came from.

* OTLP/JSON is parsed by the ``opentelemetry-proto`` package (protobuf's JSON mapping)
  into ``ExportTraceServiceRequest``, after turning the hex trace and span ids into
  base64 as the OTLP specification tells receivers to (OTLP/JSON's one deviation from
  the protobuf mapping).
* Zipkin v2 is checked against the ``Span`` and ``Endpoint`` definitions of
  openzipkin/zipkin-api's ``zipkin2-api.yaml``, transcribed below.
* Jaeger is checked against the JSON model of jaegertracing/jaeger
  (``model/json/model.go``: ``Trace``, ``Span``, ``Reference``, ``Process``, ``KeyValue``),
  wrapped in ``{"data": [...]}`` as its query API answers and its UI loads from a file.
"""

from __future__ import annotations

import base64
import copy
import json
import re

import numpy as np
import pyarrow as pa
import pytest

from tracefmt import ParameterError, SchemaError
from viz.export import export_traces, write_export

HEX16 = re.compile(r"[0-9a-f]{16}")
HEX32 = re.compile(r"[0-9a-f]{32}")


@pytest.fixture(scope="module")
def instances(runs):
    return runs["slow"]["result"].instances_table()


def _truth(instances, max_traces=None):
    """Per exported trace, from the instances table: the pairs, their times and parents."""
    parent = instances["parent"].fill_null(-1).to_numpy()
    t_call = instances["t_call"].cast(pa.int64()).to_numpy()
    roots = np.flatnonzero(parent < 0)
    roots = roots[np.argsort(t_call[roots], kind="stable")][:max_traces]
    inst = instances["instance"].to_numpy()
    keep = np.isin(inst, instances["pair"].to_numpy()[roots])
    return roots.size, int(keep.sum())


# --- OTLP --------------------------------------------------------------------------


def _otlp_to_proto_json(doc):
    """OTLP/JSON -> protobuf JSON mapping: hex ids become base64 (the spec's one difference)."""
    doc = copy.deepcopy(doc)
    for rs in doc["resourceSpans"]:
        for ss in rs["scopeSpans"]:
            for span in ss["spans"]:
                for key in ("traceId", "spanId", "parentSpanId"):
                    if key in span:
                        span[key] = base64.b64encode(bytes.fromhex(span[key])).decode()
    return doc


def test_otlp_parses_into_export_trace_service_request(instances):
    from google.protobuf import json_format
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
    from opentelemetry.proto.trace.v1.trace_pb2 import Span

    doc = json.loads(json.dumps(export_traces(instances, "otlp", max_traces=300)))
    request = json_format.Parse(json.dumps(_otlp_to_proto_json(doc)), ExportTraceServiceRequest())
    spans = [(rs, s) for rs in request.resource_spans for ss in rs.scope_spans for s in ss.spans]
    n_traces, n_visits = _truth(instances, 300)
    assert len(spans) == 2 * n_visits  # a client span and a server span per call
    assert len({s.trace_id for _, s in spans}) == n_traces
    by_id = {(s.trace_id, s.span_id): (rs, s) for rs, s in spans}
    assert len(by_id) == len(spans)
    pair_time = dict(
        zip(
            instances["t_call"].cast(pa.int64()).to_pylist(),
            (
                instances["t_return"].cast(pa.int64()).to_numpy()
                - instances["t_call"].cast(pa.int64()).to_numpy()
            ),
            strict=False,
        )
    )
    roots = 0
    for rs, s in spans:
        assert len(s.trace_id) == 16
        assert len(s.span_id) == 8
        assert s.kind in (Span.SPAN_KIND_SERVER, Span.SPAN_KIND_CLIENT)
        assert s.end_time_unix_nano - s.start_time_unix_nano == pair_time[s.start_time_unix_nano]
        service = rs.resource.attributes[0]
        assert service.key == "service.name"
        attrs = {a.key: a.value for a in s.attributes}
        assert attrs["wirepath.pattern"].string_value
        if s.kind == Span.SPAN_KIND_CLIENT:
            # At the caller: under the server span of the caller's own visit, or a
            # request's root call.
            roots += not s.parent_span_id
            if s.parent_span_id:
                parent_rs, parent = by_id[(s.trace_id, s.parent_span_id)]
                assert parent.kind == Span.SPAN_KIND_SERVER
                assert parent_rs.resource.attributes[0].value == service.value
                assert parent.start_time_unix_nano <= s.start_time_unix_nano
            continue
        assert 0.0 <= attrs["wirepath.confidence"].double_value <= 1.0
        parent_rs, parent = by_id[(s.trace_id, s.parent_span_id)]
        # The parent is this call's client span, at the node that made the call.
        assert parent.kind == Span.SPAN_KIND_CLIENT
        assert parent_rs.resource.attributes[0].value.string_value == attrs["peer.service"].string_value
        assert (parent.start_time_unix_nano, parent.end_time_unix_nano) == (
            s.start_time_unix_nano,
            s.end_time_unix_nano,
        )
    assert roots == n_traces  # one root call per request
    # The hex ids of the file are the bytes the protobuf holds.
    first = doc["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
    assert HEX32.fullmatch(first["traceId"])
    assert bytes.fromhex(first["traceId"]) in {s.trace_id for _, s in spans}
    assert isinstance(first["startTimeUnixNano"], str)
    assert isinstance(first["kind"], int)


# --- Zipkin v2 (zipkin2-api.yaml) --------------------------------------------------

_ZIPKIN_SPAN_FIELDS = {
    "traceId", "name", "parentId", "id", "kind", "timestamp", "duration", "debug", "shared",
    "localEndpoint", "remoteEndpoint", "annotations", "tags",
}  # fmt: skip
_ZIPKIN_ENDPOINT = {"serviceName": str, "ipv4": str, "ipv6": str, "port": int}


def _check_zipkin_span(span):
    assert set(span) <= _ZIPKIN_SPAN_FIELDS
    # traceId: 16 or 32 lowercase hex; id and parentId: 16 lowercase hex.
    assert HEX16.fullmatch(span["traceId"]) or HEX32.fullmatch(span["traceId"])
    assert HEX16.fullmatch(span["id"])
    if "parentId" in span:
        assert HEX16.fullmatch(span["parentId"])
    assert span.get("kind", "CLIENT") in ("CLIENT", "SERVER", "PRODUCER", "CONSUMER")
    # timestamp: epoch microseconds, int64; duration: microseconds, less than one rounded up.
    assert type(span["timestamp"]) is int
    assert type(span["duration"]) is int
    assert span["duration"] >= 1
    assert 1e15 < span["timestamp"] < 1e17
    # name: the operation, in lowercase.
    assert span["name"] == span["name"].lower()
    for key in ("localEndpoint", "remoteEndpoint"):
        endpoint = span.get(key, {})
        assert set(endpoint) <= set(_ZIPKIN_ENDPOINT)
        for field, kind in _ZIPKIN_ENDPOINT.items():
            if field in endpoint:
                assert isinstance(endpoint[field], kind)
        # serviceName: a lower-case label.
        assert endpoint.get("serviceName", "").lower() == endpoint.get("serviceName", "")
    tags = span.get("tags", {})
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in tags.items())


def test_zipkin_follows_zipkin2_api(instances):
    spans = json.loads(json.dumps(export_traces(instances, "zipkin")))
    assert isinstance(spans, list)  # ListOfSpans
    for span in spans:
        _check_zipkin_span(span)
    n_traces, n_visits = _truth(instances)
    assert len(spans) == 2 * n_visits
    ids = {(s["traceId"], s["id"]): s for s in spans}
    assert len(ids) == len(spans)
    assert all((s["traceId"], s["parentId"]) in ids for s in spans if "parentId" in s)
    assert sum(s["kind"] == "CLIENT" for s in spans) == n_visits
    assert sum("parentId" not in s for s in spans) == n_traces  # one root call per request
    for s in spans:
        if s["kind"] == "SERVER":  # under its own call's client span, from the caller
            parent = ids[(s["traceId"], s["parentId"])]
            assert parent["kind"] == "CLIENT"
            assert parent["localEndpoint"]["serviceName"] == s["remoteEndpoint"]["serviceName"]
            assert parent["remoteEndpoint"]["serviceName"] == s["localEndpoint"]["serviceName"]
    # A server span's duration is its call-to-return time, rounded up to a microsecond.
    dur = instances["t_return"].cast(pa.int64()).to_numpy() - instances["t_call"].cast(pa.int64()).to_numpy()
    server = sorted(s["duration"] for s in spans if s["kind"] == "SERVER")
    assert server == sorted(np.maximum(1, -(-dur // 1000)).tolist())


# --- Jaeger (model/json/model.go) --------------------------------------------------

_JAEGER_TYPES = {"string": str, "bool": bool, "int64": int, "float64": float, "binary": str}


def _check_keyvalue(kv):
    assert set(kv) <= {"key", "type", "value"}
    assert isinstance(kv["key"], str)
    assert isinstance(kv["value"], _JAEGER_TYPES[kv["type"]])


def _check_jaeger_trace(trace):
    assert set(trace) <= {"traceID", "spans", "processes", "warnings"}
    assert HEX32.fullmatch(trace["traceID"])
    for pid, process in trace["processes"].items():
        assert isinstance(pid, str)
        assert set(process) <= {"serviceName", "tags"}
        assert isinstance(process["serviceName"], str)
        for kv in process.get("tags", []):
            _check_keyvalue(kv)
    ids = {s["spanID"] for s in trace["spans"]}
    for span in trace["spans"]:
        assert set(span) <= {
            "traceID", "spanID", "flags", "operationName", "references", "startTime", "duration",
            "tags", "logs", "processID", "warnings",
        }  # fmt: skip
        assert span["traceID"] == trace["traceID"]
        assert HEX16.fullmatch(span["spanID"])
        assert isinstance(span["operationName"], str)
        assert type(span["startTime"]) is int
        assert span["startTime"] >= 0
        assert type(span["duration"]) is int
        assert span["duration"] >= 0
        assert type(span.get("flags", 0)) is int
        assert span["processID"] in trace["processes"]
        for ref in span.get("references", []):
            assert ref["refType"] in ("CHILD_OF", "FOLLOWS_FROM")
            assert ref["traceID"] == trace["traceID"]
            assert ref["spanID"] in ids
        for kv in span.get("tags", []):
            _check_keyvalue(kv)


def test_jaeger_follows_the_json_model(instances):
    doc = json.loads(json.dumps(export_traces(instances, "jaeger", max_traces=500)))
    n_traces, n_visits = _truth(instances, 500)
    assert len(doc["data"]) == n_traces
    for trace in doc["data"]:
        _check_jaeger_trace(trace)
        roots = [s for s in trace["spans"] if not s["references"]]
        assert len(roots) == 1  # the client span
        kinds = {kv["value"] for s in trace["spans"] for kv in s["tags"] if kv["key"] == "span.kind"}
        assert kinds == {"client", "server"}
    assert sum(len(t["spans"]) for t in doc["data"]) == 2 * n_visits


def test_the_checks_catch_broken_shapes(instances):
    zipkin = export_traces(instances, "zipkin", max_traces=1)
    bad = {**zipkin[0], "id": zipkin[0]["id"].upper()}
    with pytest.raises(AssertionError):
        _check_zipkin_span(bad)
    jaeger = export_traces(instances, "jaeger", max_traces=1)["data"][0]
    broken = copy.deepcopy(jaeger)
    broken["spans"][1]["references"][0]["spanID"] = "0" * 16
    with pytest.raises(AssertionError):
        _check_jaeger_trace(broken)


def test_write_export_counts_and_is_deterministic(instances, tmp_path):
    a = write_export(instances, "zipkin", tmp_path / "a.json", max_traces=50)
    write_export(instances, "zipkin", tmp_path / "b.json", max_traces=50)
    assert a["traces"] == 50
    assert (tmp_path / "a.json").read_bytes() == (tmp_path / "b.json").read_bytes()


def test_export_rejects_bad_input(instances):
    with pytest.raises(ParameterError, match="unknown export format 'xml'"):
        export_traces(instances, "xml")
    with pytest.raises(ParameterError, match="max_traces must be at least 1"):
        export_traces(instances, "otlp", max_traces=0)
    with pytest.raises(SchemaError, match="not an instances table: missing confidence"):
        export_traces(instances.drop_columns(["confidence"]), "otlp")


@pytest.mark.parametrize("fmt", ["otlp", "zipkin", "jaeger"])
def test_no_instances_is_an_empty_export(instances, fmt):
    doc = export_traces(instances.slice(0, 0), fmt)
    assert doc in (
        {"resourceSpans": []},
        [],
        {"data": [], "total": 0, "limit": 0, "offset": 0, "errors": None},
    )


def test_spans_are_named_by_operation_with_semantic_attributes(tmp_path):
    """The testbed's bridge capture, by service: every span named by its call's
    operation, with OpenTelemetry's HTTP attributes, as the capture's URLs say."""
    from pathlib import Path

    import capture
    import infer
    import tracefmt

    root = Path(__file__).resolve().parents[2]
    out = tmp_path / "t.parquet"
    capture.convert_pcaps([root / "samples" / "testbed" / "bridge.pcap"], out, node_by="service")
    trace = tracefmt.read_trace(out)
    table = infer.infer_nesting(trace).instances_table()
    assert {"op", "status"} <= set(table.column_names)
    doc = export_traces(table, "otlp")
    spans = [sp for rs in doc["resourceSpans"] for ss in rs["scopeSpans"] for sp in ss["spans"]]
    names = {sp["name"] for sp in spans}
    assert {"GET /page/:id", "GET /cart/:id", "GET /api/item/:id", "GET /api/price/:id", "GET"} <= names
    web = next(sp for sp in spans if sp["name"] == "GET /cart/:id" and sp["kind"] == 2)
    attrs = {a["key"]: next(iter(a["value"].values())) for a in web["attributes"]}
    assert attrs["http.request.method"] == "GET"
    assert attrs["http.route"] == "/cart/:id"
    assert attrs["http.response.status_code"] in (200, "200")
    assert attrs["server.address"] == "10.77.0.2"
    assert attrs["server.port"] in (8080, "8080")
    # A Redis call: named by its command, no HTTP attributes.
    redis = next(sp for sp in spans if sp["name"] == "GET" and sp["kind"] == 2)
    keys = {a["key"] for a in redis["attributes"]}
    assert "http.route" not in keys
    assert "wirepath.operation" in keys
    # Every server span's name is its call's label with ids folded.
    labels = trace["label"].cast(pa.string()).to_pylist()
    ops = dict(
        zip(table["pair"].to_pylist(), (labels[r] for r in table["call_row"].to_pylist()), strict=True)
    )
    assert all(
        re.sub(r"/\d+", "/:id", ops[p]) == op
        for p, op in zip(table["pair"].to_pylist(), table["op"].to_pylist(), strict=True)
    )


@pytest.mark.parametrize(("fmt", "read"), [("otlp", "read_otlp"), ("jaeger", "read_jaeger")])
def test_an_export_read_back_is_one_call_per_hop(instances, tmp_path, fmt, read):
    # A tracer's reader (ours here) merges each hop's client and server spans into one
    # call: the calls it finds are the instances table's, each once, with its times.
    import tracefmt

    path = tmp_path / f"x.{fmt}.json"
    write_export(instances, fmt, path, max_traces=200)
    trace = getattr(tracefmt, read)(path)
    calls = trace.filter(pa.compute.equal(trace["op"], "call"))
    returns = trace.filter(pa.compute.equal(trace["op"], "return"))
    got = sorted(
        zip(calls["sender"].to_pylist(), calls["receiver"].to_pylist(),
            calls["timestamp"].cast(pa.int64()).to_pylist(), strict=True)
    )  # fmt: skip
    _, n_visits = _truth(instances, 200)
    keep = np.isin(instances["instance"].to_numpy(), np.unique(_kept_instances(instances, 200)))
    rows = instances.filter(pa.array(keep))
    want = sorted(
        zip(rows["caller"].cast(pa.string()).to_pylist(), rows["callee"].cast(pa.string()).to_pylist(),
            rows["t_call"].cast(pa.int64()).to_pylist(), strict=True)
    )  # fmt: skip
    assert len(got) == n_visits == len(want)
    assert got == want
    assert returns.num_rows == n_visits


def _kept_instances(instances, max_traces):
    parent = instances["parent"].fill_null(-1).to_numpy()
    t_call = instances["t_call"].cast(pa.int64()).to_numpy()
    roots = np.flatnonzero(parent < 0)
    roots = roots[np.argsort(t_call[roots], kind="stable")][:max_traces]
    return instances["pair"].to_numpy()[roots]
