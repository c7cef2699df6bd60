"""Request keys on a trace with ground truth: what a partly instrumented system puts on
the wire, for chosen callers (``[keys]`` in a configuration, synth/README.md).

A service that propagates trace context (OpenTelemetry's ``traceparent``) or a request id
(a proxy's ``X-Request-ID``) sends it on the calls it makes; the services that propagate
nothing send none. :func:`key_column` gives a call its true request's key when its
sender is one of ``callers``; returns carry none (the inference takes a pair's key from
its call). It works on any trace with a ``true_instance`` column: synthetic ones and the
Jaeger recordings ``tracefmt.read_jaeger`` reads.
"""

from __future__ import annotations

from collections.abc import Collection

import numpy as np
import pyarrow as pa

from tracefmt import KEY_COLUMNS, OP_CALL, OPS, ParameterError
from tracefmt.schema import NODE_TYPE

__all__ = ["key_column", "reveal_keys"]


def key_column(
    instance: np.ndarray,
    keyed: np.ndarray,
    column: str = "trace_id",
) -> pa.DictionaryArray:
    """The key column of messages of true ``instance`` where ``keyed`` (else null): a
    trace id of 32 hex digits, or a request id ``req-N``, per request.

    >>> key_column(np.array([5, 5, 9]), np.array([True, False, True])).to_pylist()
    ['00000000000000000000000000000005', None, '00000000000000000000000000000009']
    """
    if column not in KEY_COLUMNS:
        raise ParameterError(f"unknown key column {column!r} (must be one of {', '.join(KEY_COLUMNS)})")
    uniq, code = np.unique(instance[keyed], return_inverse=True)
    text = [f"{v:032x}" if column == "trace_id" else f"req-{v}" for v in uniq.tolist()]
    indices = np.full(instance.size, -1, np.int32)
    indices[keyed] = code.ravel()
    return pa.DictionaryArray.from_arrays(
        pa.array(indices, pa.int32(), mask=indices < 0), pa.array(text, pa.string())
    ).cast(NODE_TYPE)


def reveal_keys(
    trace: pa.Table,
    callers: Collection[str] | None = None,
    *,
    share: float = 1.0,
    seed: int = 0,
    column: str = "trace_id",
) -> pa.Table:
    """``trace`` with ``column`` carrying the true request key of the calls that
    ``callers`` send (every call for None), of a random ``share`` of them (``seed``).

    Examples
    --------
    >>> t = pa.table({"sender": ["c", "w", "d", "w"], "receiver": ["w", "d", "w", "c"],
    ...               "op": ["call", "call", "return", "return"], "true_instance": [3, 3, 3, 3]})
    >>> reveal_keys(t, ["w"], column="request_id")["request_id"].to_pylist()
    [None, 'req-3', None, None]
    """
    if "true_instance" not in trace.column_names:
        raise ParameterError("the trace has no true_instance column (keys are revealed from the truth)")
    if not 0.0 <= share <= 1.0:
        raise ParameterError(f"share must be from 0 to 1, not {share}")
    op = trace["op"].cast(pa.string()).to_numpy(zero_copy_only=False)
    keyed = op == OPS[OP_CALL]
    if callers is not None:
        sender = trace["sender"].cast(pa.string()).to_numpy(zero_copy_only=False)
        keyed &= np.isin(sender, list(callers))
    if share < 1.0:
        keyed &= np.random.default_rng(seed).random(keyed.size) < share
    instance = trace["true_instance"].to_numpy(zero_copy_only=False).astype(np.uint64)
    col = key_column(instance, keyed, column)
    if column in trace.column_names:
        return trace.set_column(trace.column_names.index(column), column, col)
    return trace.append_column(column, col)
