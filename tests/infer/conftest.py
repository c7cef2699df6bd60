"""Shared helpers and traces for the infer tests.

Helpers of the infer tests are handed out as session-scoped fixtures (hypothesis refuses
function-scoped fixtures in ``@given`` tests); helpers every test package uses are in
``tests/_lib/testkit``.

Everything a test compares against is recomputed here from hand-built traces or from
synth's ground-truth columns (``true_call``, ``true_parent``, ``true_instance``,
``true_pattern``) in plain numpy/Python, never taken from the inference code.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from testkit.tables import ints, strings

import synth
from tracefmt import validate_trace
from tracefmt.patterns import Shape, pattern_id, shape_text

#: One message as the tests write it: (timestamp_ns, op, sender, receiver, id or None).
Row = tuple[int, str, str, str, int | None]

TS = pa.timestamp("ns", tz="UTC")
MS = 1_000_000  # nanoseconds in a millisecond


def make_trace(rows: Sequence[Row], *, validate: bool = True) -> pa.Table:
    """A trace table holding exactly ``rows``, in the given order (validated by default)."""
    table = pa.table(
        {
            "timestamp": pa.array([r[0] for r in rows], pa.int64()).cast(TS),
            "sender": pa.array([r[2] for r in rows], pa.string()),
            "receiver": pa.array([r[3] for r in rows], pa.string()),
            "op": pa.array([r[1] for r in rows], pa.string()),
            "id": pa.array([r[4] for r in rows], pa.uint64()),
        }
    )
    return validate_trace(table) if validate else table


@dataclass
class TrueCalls:
    """Every RPC call of a synth trace (by ``true_call``), joined with its return.

    Sorted by ``uid``; ``children`` lists child positions in call order (call time, ties
    by the call message's row in the trace).
    """

    uid: np.ndarray
    caller: np.ndarray
    callee: np.ndarray
    t_call: np.ndarray  # ns
    t_ret: np.ndarray
    parent: np.ndarray  # uid of the parent call, -1 for roots
    inst: np.ndarray
    pattern: np.ndarray  # object (str)
    row: np.ndarray  # row of the call message
    ret_row: np.ndarray  # row of the return message
    children: dict[int, list[int]]

    def pos(self, uids: np.ndarray) -> np.ndarray:
        p = np.searchsorted(self.uid, uids)
        assert np.all(self.uid[np.minimum(p, self.uid.size - 1)] == uids), "unknown true_call"
        return p

    def groups(self, k: int) -> list[list[int]]:
        """Children of ``k`` in concurrent groups: a child called before every earlier
        sibling has returned joins their group; within a group, by shape text."""
        out: list[list[int]] = []
        latest = None
        for c in self.children.get(k, []):
            if latest is None or self.t_call[c] >= latest:
                out.append([])
            out[-1].append(c)
            latest = self.t_ret[c] if latest is None else max(latest, self.t_ret[c])
        return [sorted(g, key=lambda c: (shape_text(self.shape(c)), self.t_call[c])) for g in out]

    def preorder(self, k: int) -> list[int]:
        out = [k]
        for group in self.groups(k):
            for c in group:
                out += self.preorder(c)
        return out

    def shape(self, k: int) -> Shape:
        groups = self.groups(k)
        numbers = tuple(g for g, group in enumerate(groups) for _ in group)
        return Shape(
            str(self.caller[k]),
            str(self.callee[k]),
            tuple(self.shape(c) for group in groups for c in group),
            numbers if len(set(numbers)) < len(numbers) else (),
        )

    @property
    def roots(self) -> np.ndarray:
        return np.flatnonzero(self.parent < 0)


def true_calls(table: pa.Table) -> TrueCalls:
    """Pair every call message with its return by ``true_call`` (one each)."""
    op = strings(table["op"])
    call = ints(table["true_call"])
    ci = np.flatnonzero(op == "call")
    ri = np.flatnonzero(op == "return")
    ci = ci[np.argsort(call[ci], kind="stable")]
    ri = ri[np.argsort(call[ri], kind="stable")]
    assert np.array_equal(call[ci], call[ri]), "calls and returns do not pair one to one"
    ts = table["timestamp"].cast(pa.int64()).to_numpy()
    sender, receiver = strings(table["sender"]), strings(table["receiver"])
    parent = ints(table["true_parent"])
    tc = TrueCalls(
        uid=call[ci],
        caller=sender[ci],
        callee=receiver[ci],
        t_call=ts[ci],
        t_ret=ts[ri],
        parent=parent[ci],
        inst=ints(table["true_instance"])[ci],
        pattern=strings(table["true_pattern"])[ci],
        row=ci,
        ret_row=ri,
        children={},
    )
    kids: dict[int, list[int]] = defaultdict(list)
    has = np.flatnonzero(tc.parent >= 0)
    for k, p in zip(has.tolist(), tc.pos(tc.parent[has]).tolist(), strict=True):
        kids[p].append(k)
    for p in kids:
        kids[p].sort(key=lambda k: (tc.t_call[k], tc.row[k]))
    tc.children = dict(kids)
    return tc


@dataclass
class TruePattern:
    id: str
    shape: Shape
    count: int
    total_latency_s: float
    latency: list[np.ndarray]  # per preorder visit: seconds, one value per instance
    delay: list[np.ndarray | None]  # per preorder visit (None at the root)


def true_patterns(tc: TrueCalls) -> dict[str, TruePattern]:
    """Patterns rebuilt from the true call trees, with per-visit latency and delay samples."""
    groups: dict[str, list[list[int]]] = defaultdict(list)
    shapes: dict[str, Shape] = {}
    for r in tc.roots.tolist():
        s = tc.shape(r)
        pid = pattern_id(s)
        shapes[pid] = s
        groups[pid].append(tc.preorder(r))
    out = {}
    for pid, visits in groups.items():
        v = np.array(visits)  # instances x visits
        lat = (tc.t_ret[v] - tc.t_call[v]) / 1e9
        parent_pos = tc.pos(np.where(tc.parent[v] >= 0, tc.parent[v], tc.uid[v]))
        delay = (tc.t_call[v] - tc.t_call[parent_pos]) / 1e9
        out[pid] = TruePattern(
            id=pid,
            shape=shapes[pid],
            count=len(visits),
            total_latency_s=float(((tc.t_ret[v[:, 0]] - tc.t_call[v[:, 0]]) / 1e9).sum()),
            latency=[lat[:, k] for k in range(v.shape[1])],
            delay=[None] + [delay[:, k] for k in range(1, v.shape[1])],
        )
    return out


def np_stats(values: np.ndarray) -> dict[str, float]:
    """mean, p50, p90, p99, std straight from numpy (linear percentiles, population std)."""
    v = np.asarray(values, np.float64)
    return {
        "mean": float(np.mean(v)),
        "p50": float(np.percentile(v, 50)),
        "p90": float(np.percentile(v, 90)),
        "p99": float(np.percentile(v, 99)),
        "std": float(np.std(v)),
    }


def preorder_visits(node: dict[str, Any]) -> list[dict[str, Any]]:
    """The visits of a paths-file tree, preorder."""
    out = [node]
    for c in node["children"]:
        out += preorder_visits(c)
    return out


def shape_of_json(node: dict[str, Any]) -> Shape:
    return Shape(node["caller"], node["node"], tuple(shape_of_json(c) for c in node["children"]))


class Helpers:
    """The helpers above, as one object handed out by the ``h`` fixture."""

    MS = MS
    trace = staticmethod(make_trace)
    true_calls = staticmethod(true_calls)
    true_patterns = staticmethod(true_patterns)
    np_stats = staticmethod(np_stats)
    preorder_visits = staticmethod(preorder_visits)
    shape_of_json = staticmethod(shape_of_json)
    ints = staticmethod(ints)
    strings = staticmethod(strings)

    @staticmethod
    def generate(text: str) -> tuple[pa.Table, dict[str, Any]]:
        return synth.generate_table(synth.parse_config(text))


@pytest.fixture(scope="session")
def h() -> type[Helpers]:
    """Helpers: ``h.trace(rows)``, ``h.true_calls(table)``, ``h.true_patterns(calls)``, ..."""
    return Helpers


# --- shared synthetic traces ------------------------------------------------------------

#: One client loop (parallelism 1), small delay std, choices, an optional call, repeats
#: and three levels of nesting; every delay > 0 so think time may be zero.
SERIAL_TOML = """\
nodes = ["u1", "u2", "WS1", "WS2", "AUTH", "AP1", "AP2", "DB1", "DB2"]

[trace]
seed = 11
messages = 20000
resolution_s = 1e-9

[[tracelet]]
client = ["u1", "u2"]
client_weights = [3, 1]
clients = 1
think_s = [0.0, 0.002]

[[tracelet.call]]
id = "ws"
to = ["WS1", "WS2"]
weights = [2, 1]
before_s = [0.002, 0.0001]
between_s = [0.001, 0.0001]
after_s = [0.001, 0.0001]

[[tracelet.call]]
id = "auth"
parent = "ws"
to = "AUTH"
p = 0.5
before_s = [0.005, 0.0001]

[[tracelet.call]]
id = "ap"
parent = "ws"
to = ["AP1", "AP2"]
repeat = [1, 2]
before_s = [0.003, 0.0001]
after_s = [0.001, 0.0001]

[[tracelet.call]]
id = "db"
parent = "ap"
to = ["DB1", "DB2"]
p = 0.8
before_s = [0.010, 0.0002]
"""

#: Concurrent client loops (mean parallelism about 4): returns between the same two
#: nodes come back out of call order.
PARALLEL_TOML = """\
nodes = ["client", "WS1", "WS2", "AP1", "DB1"]

[trace]
seed = 5
messages = 12000
parallelism = 4
resolution_s = 1e-9

[[tracelet]]
client = "client"
think_s = [0.0, 0.01]

[[tracelet.call]]
id = "ws"
to = ["WS1", "WS2"]
before_s = [0.002, 0.001]
after_s = [0.001, 0.0005]

[[tracelet.call]]
id = "ap"
parent = "ws"
to = "AP1"
before_s = [0.004, 0.002]
after_s = [0.001, 0.0005]

[[tracelet.call]]
id = "db"
parent = "ap"
to = "DB1"
before_s = [0.008, 0.004]
"""


@pytest.fixture(scope="session")
def serial_toml() -> str:
    return SERIAL_TOML


@pytest.fixture(scope="session")
def parallel_toml() -> str:
    return PARALLEL_TOML


@pytest.fixture(scope="session")
def serial_trace() -> tuple[pa.Table, dict[str, Any]]:
    """``(table, truth)`` of SERIAL_TOML."""
    return synth.generate_table(synth.parse_config(SERIAL_TOML))


@pytest.fixture(scope="session")
def parallel_trace() -> tuple[pa.Table, dict[str, Any]]:
    """``(table, truth)`` of PARALLEL_TOML."""
    return synth.generate_table(synth.parse_config(PARALLEL_TOML))


@pytest.fixture(scope="session")
def serial_result(serial_trace: tuple[pa.Table, dict[str, Any]]) -> Any:
    """``infer_nesting`` of the serial trace with default parameters."""
    import infer

    return infer.infer_nesting(serial_trace[0], "paper")


#: a -> b -> c -> d, two delays at b (50 ms for 70% of the messages, 300 ms), 200 ms at c.
_CHAIN = """\
nodes = ["a", "b", "c", "d"]
[trace]
seed = 3
messages = 6000
parallelism = 6
resolution_s = 1e-6
[[tracelet]]
kind = "messages"
client = "a"
think_s = [0.5, 1.5]
[[tracelet.hop]]
to = "b"
[[tracelet.hop]]
to = "c"
delay_s = [[0.05, 0.002, 0.7], [0.3, 0.005, 0.3]]
[[tracelet.hop]]
to = "d"
delay_s = [0.2, 0.005]
"""

#: client calls WS (4 ms), which calls DB (10 ms); WS answers 2 ms after DB does.
_RPC = """\
nodes = ["client", "WS", "DB"]
[trace]
seed = 8
messages = 8000
parallelism = 4
resolution_s = 1e-6
[[tracelet]]
client = "client"
think_s = [0.05, 0.3]
[[tracelet.call]]
id = "ws"
to = "WS"
before_s = [0.004, 0.0003]
after_s = [0.002, 0.0002]
[[tracelet.call]]
id = "db"
parent = "ws"
to = "DB"
before_s = [0.010, 0.0005]
"""


@pytest.fixture(scope="session")
def chain() -> pa.Table:
    """A one-way message chain for convolution (``_CHAIN``)."""
    return synth.generate_table(synth.parse_config(_CHAIN))[0]


@pytest.fixture(scope="session")
def rpc() -> pa.Table:
    """A two-tier RPC trace for convolution (``_RPC``)."""
    return synth.generate_table(synth.parse_config(_RPC))[0]
