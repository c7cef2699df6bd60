"""The trace schema: validation, coercions, sorting, op codes."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tracefmt import (
    CORE_COLUMNS,
    OP_CALL,
    OP_RETURN,
    OP_SEND,
    OPS,
    OPTIONAL_FIELDS,
    TRACE_SCHEMA,
    SchemaError,
    empty_trace,
    op_codes,
    sort_trace,
    validate_trace,
)

TS = pa.timestamp("ns", tz="UTC")


def _core(n: int = 2) -> dict[str, pa.Array]:
    return {
        "timestamp": pa.array(list(range(1, n + 1)), pa.int64()).cast(TS),
        "sender": pa.array(["a", "b"] * (n // 2) + ["a"] * (n % 2)),
        "receiver": pa.array(["b", "a"] * (n // 2) + ["b"] * (n % 2)),
        "op": pa.array(["call", "return"] * (n // 2) + ["send"] * (n % 2)),
        "id": pa.array([7] * n, pa.uint64()),
    }


def _with(**changes: pa.Array | None) -> pa.Table:
    cols = _core()
    for name, col in changes.items():
        if col is None:
            del cols[name]
        else:
            cols[name] = col
    return pa.table(cols)


def test_validate_gives_canonical_core_types() -> None:
    t = validate_trace(pa.table(_core()))
    assert t.schema.names == list(CORE_COLUMNS)
    for f in TRACE_SCHEMA:
        assert t.schema.field(f.name).type == f.type


def test_validate_accepts_record_batch() -> None:
    batch = pa.RecordBatch.from_pydict(_core())
    assert validate_trace(batch).num_rows == 2


def test_validate_rejects_non_table() -> None:
    with pytest.raises(SchemaError, match="must be a pyarrow Table, not dict"):
        validate_trace({"timestamp": [1]})  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("unit", "values", "expected_ns"),
    [
        pytest.param("s", [3], [3_000_000_000], id="seconds"),
        pytest.param("ms", [-5], [-5_000_000], id="negative-ms"),
        pytest.param("us", [1_700_000_000_123_456], [1_700_000_000_123_456_000], id="us"),
        pytest.param("ns", [123], [123], id="ns"),
    ],
)
def test_validate_converts_timestamp_units_exactly(
    unit: str, values: list[int], expected_ns: list[int]
) -> None:
    one = {name: col.slice(0, 1) for name, col in _core().items()}
    one["timestamp"] = pa.array(values, pa.int64()).cast(pa.timestamp(unit))
    out = validate_trace(pa.table(one))
    assert out["timestamp"].type == TS
    assert out["timestamp"].cast(pa.int64()).to_pylist() == expected_ns


def test_validate_takes_other_zone_as_same_instant() -> None:
    ts = pa.array([1_000, 2_000], pa.int64()).cast(pa.timestamp("ns", tz="Asia/Tokyo"))
    out = validate_trace(_with(timestamp=ts))
    assert out["timestamp"].cast(pa.int64()).to_pylist() == [1_000, 2_000]


def test_validate_reencodes_op_dictionary_to_ops_order() -> None:
    # A dictionary in another order (send, return, call) must come out as codes of OPS.
    op = pa.DictionaryArray.from_arrays(pa.array([2, 1], pa.int32()), pa.array(["send", "return", "call"]))
    out = validate_trace(_with(op=op))
    assert out["op"].to_pylist() == ["call", "return"]
    assert out["op"].chunk(0).dictionary.to_pylist() == list(OPS)
    assert op_codes(out).tolist() == [OP_CALL, OP_RETURN]


def test_op_codes_values() -> None:
    t = validate_trace(pa.table(_core(3)))
    assert t["op"].to_pylist() == ["call", "return", "send"]
    codes = op_codes(t)
    assert codes.dtype == np.int8
    assert codes.tolist() == [OP_CALL, OP_RETURN, OP_SEND]
    assert (OP_CALL, OP_RETURN, OP_SEND) == (0, 1, 2)


def test_op_codes_empty() -> None:
    assert op_codes(empty_trace()).tolist() == []


def test_validate_signed_ids_become_uint64() -> None:
    out = validate_trace(_with(id=pa.array([0, None], pa.int64())))
    assert out["id"].type == pa.uint64()
    assert out["id"].to_pylist() == [0, None]


@pytest.mark.parametrize(
    ("changes", "pattern"),
    [
        pytest.param(
            {"timestamp": pa.array([1.0, 2.0])}, r"column 'timestamp' has type double", id="float-timestamp"
        ),
        pytest.param(
            {"timestamp": pa.array([1, 2], pa.int64())},
            r"column 'timestamp' has type int64",
            id="int-timestamp",
        ),
        pytest.param({"sender": pa.array([1, 2])}, r"column 'sender' has type int64", id="int-sender"),
        pytest.param(
            {"receiver": pa.array([1.5, 2.5])}, r"column 'receiver' has type double", id="float-receiver"
        ),
        pytest.param({"id": pa.array([1, -3])}, r"column 'id' holds negative value -3", id="negative-id"),
        pytest.param({"id": pa.array([1.0, 2.0])}, r"column 'id' has type double", id="float-id"),
        pytest.param({"id": pa.array(["1", "2"])}, r"column 'id' has type string", id="string-id"),
        pytest.param(
            {"op": pa.array(["call", "cal"])},
            r"unknown op 'cal' \(must be one of call, return, send\)",
            id="unknown-op",
        ),
        pytest.param({"op": pa.array([1, 2])}, r"column 'op' has type int64", id="int-op"),
        pytest.param(
            {"timestamp": pa.array([1, None], pa.int64()).cast(TS)},
            r"column 'timestamp' has 1 null values",
            id="null-timestamp",
        ),
        pytest.param(
            {"sender": pa.array(["a", None])}, r"column 'sender' has 1 null values", id="null-sender"
        ),
        pytest.param({"op": pa.array([None, "call"])}, r"column 'op' has 1 null values", id="null-op"),
        pytest.param({"receiver": None}, r"missing column 'receiver'", id="missing-receiver"),
        pytest.param({"id": None}, r"missing column 'id'", id="missing-id"),
        pytest.param(
            {"colour": pa.array(["r", "g"])}, r"unknown column 'colour' \(allowed: ", id="unknown-column"
        ),
        pytest.param(
            {"bytes": pa.array([1, -1])}, r"column 'bytes' holds negative value -1", id="negative-bytes"
        ),
        pytest.param({"flow": pa.array(["x", "y"])}, r"column 'flow' has type string", id="string-flow"),
        pytest.param({"proto": pa.array([1, 2])}, r"column 'proto' has type int64", id="int-proto"),
    ],
)
def test_validate_rejects_bad_columns(changes: dict[str, pa.Array | None], pattern: str) -> None:
    with pytest.raises(SchemaError, match=pattern) as info:
        validate_trace(_with(**changes))
    assert isinstance(info.value, ValueError)


def test_validate_rejects_duplicate_column() -> None:
    cols = _core()
    table = pa.Table.from_arrays([*cols.values(), cols["sender"]], names=[*cols, "sender"])
    with pytest.raises(SchemaError, match="column 'sender' appears twice"):
        validate_trace(table)


def test_unknown_column_message_lists_allowed_names() -> None:
    with pytest.raises(SchemaError) as info:
        validate_trace(_with(colour=pa.array(["r", "g"])))
    message = str(info.value)
    for name in (*CORE_COLUMNS, *(f.name for f in OPTIONAL_FIELDS), "true_", "x_"):
        assert name in message


def test_free_columns_are_allowed_and_kept_after_optional_ones() -> None:
    table = _with(
        x_note=pa.array(["n1", "n2"]),
        true_path=pa.array([10, 11], pa.int32()),
        bytes=pa.array([100, 200], pa.int32()),
    )
    out = validate_trace(table)
    assert out.column_names == [*CORE_COLUMNS, "bytes", "x_note", "true_path"]
    assert out["x_note"].to_pylist() == ["n1", "n2"]
    assert out["true_path"].type == pa.int32()  # free columns keep their type
    assert out["true_path"].to_pylist() == [10, 11]
    assert out["bytes"].type == pa.uint64()
    assert out["bytes"].to_pylist() == [100, 200]


def test_optional_columns_are_typed_and_ordered() -> None:
    table = _with(
        point=pa.array(["p1", "p2"]),
        status=pa.array([None, "404"]),
        label=pa.array(["GET /", None]),
        proto=pa.array(["http", "dns"]),
        flow=pa.array([5, 6], pa.int16()),
        bytes=pa.array([1, None], pa.uint32()),
        request_id=pa.array(["r1", None]),
        span_id=pa.array([None, "00f067aa0ba902b7"]),
        trace_id=pa.array(["4bf92f3577b34da6a3ce929d0e0e4736", None]),
        stream=pa.array([0, 0], pa.int64()),
        dst_port=pa.array([80, 40000], pa.int32()),
        dst_ip=pa.array(["10.0.0.2", "10.0.0.1"]),
        src_port=pa.array([40000, 80], pa.int32()),
        src_ip=pa.array(["10.0.0.1", "10.0.0.2"]),
    )
    out = validate_trace(table)
    assert out.column_names == [*CORE_COLUMNS, *(f.name for f in OPTIONAL_FIELDS)]
    for f in OPTIONAL_FIELDS:
        assert out.schema.field(f.name).type == f.type
    assert out["label"].to_pylist() == ["GET /", None]
    assert out["bytes"].to_pylist() == [1, None]


def test_validate_keeps_schema_metadata() -> None:
    table = pa.table(_core()).replace_schema_metadata({"k": "v"})
    assert validate_trace(table).schema.metadata == {b"k": b"v"}


def test_empty_trace() -> None:
    t = empty_trace()
    assert t.num_rows == 0
    assert t.schema.equals(TRACE_SCHEMA)
    assert validate_trace(t).num_rows == 0
    extra = empty_trace([pa.field("x_a", pa.int8())])
    assert extra.column_names == [*CORE_COLUMNS, "x_a"]


def test_sort_trace_degenerate_inputs() -> None:
    assert sort_trace(empty_trace()).num_rows == 0
    one = validate_trace(pa.table(_core(1)))
    assert sort_trace(one).equals(one)


_NAMES = st.sampled_from(["a", "b", "c"])


@settings(max_examples=75, deadline=None)
@given(
    messages=st.lists(
        st.tuples(st.integers(-5, 5), st.sampled_from(OPS), _NAMES, _NAMES),
        min_size=0,
        max_size=40,
    ),
    seed=st.integers(0, 2**32 - 1),
)
def test_sort_trace_is_stable_and_independent_of_input_order(
    messages: list[tuple[int, str, str, str]], seed: int
) -> None:
    # Few distinct timestamps, so ties are common; each row carries its original
    # position as id so ties can be checked against the stable order.
    rows = [(ts, op, s, r, i) for i, (ts, op, s, r) in enumerate(messages)]

    def table(rs: list[tuple[int, str, str, str, int]]) -> pa.Table:
        return validate_trace(
            pa.table(
                {
                    "timestamp": pa.array([x[0] for x in rs], pa.int64()).cast(TS),
                    "sender": pa.array([x[2] for x in rs], pa.string()),
                    "receiver": pa.array([x[3] for x in rs], pa.string()),
                    "op": pa.array([x[1] for x in rs], pa.string()),
                    "id": pa.array([x[4] for x in rs], pa.uint64()),
                }
            )
        )

    def as_rows(t: pa.Table) -> list[tuple[int, str, str, str, int]]:
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

    # Ground truth: Python's sort is stable.
    expected = sorted(rows, key=lambda x: x[0])
    assert as_rows(sort_trace(table(rows))) == expected

    perm = np.random.default_rng(seed).permutation(len(rows))
    shuffled = [rows[i] for i in perm]
    out = as_rows(sort_trace(table(shuffled)))
    # Same multiset, sorted by time, ties in the shuffled input's relative order.
    assert out == sorted(shuffled, key=lambda x: x[0])
    # Ignoring the tie-breaking order, it is the same trace as sorting the original.
    assert sorted(out, key=lambda x: (x[0], x[4])) == sorted(expected, key=lambda x: (x[0], x[4]))
    assert [x[0] for x in out] == [x[0] for x in expected]


def test_sort_trace_shift_invariant() -> None:
    rng = np.random.default_rng(7)
    ts = rng.integers(-1000, 1000, 50)
    shifted = ts + 10**15
    base = pa.table(_core(50))

    def order(values: np.ndarray) -> list[int]:
        t = validate_trace(
            base.set_column(0, "timestamp", pa.array(values, pa.int64()).cast(TS)).set_column(
                4, "id", pa.array(np.arange(50), pa.uint64())
            )
        )
        return sort_trace(t)["id"].to_pylist()

    expected = [int(i) for i in np.argsort(ts, kind="stable")]
    assert order(ts) == expected
    assert order(shifted) == expected


def test_a_port_beyond_sixteen_bits_is_refused() -> None:
    table = _with(src_port=pa.array([70000, 1]))
    with pytest.raises(SchemaError, match=r"src_port.*70000.*uint16"):
        validate_trace(table)
