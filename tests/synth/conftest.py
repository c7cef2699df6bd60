"""Shared helpers and traces for the synth tests.

Helpers of the synth tests are handed out as session-scoped fixtures; helpers every test
package uses are in ``tests/_lib/testkit``. Everything a test checks is
recomputed here from the trace's own columns, in plain numpy/Python, never taken from
the generator's internals.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from testkit.tables import ints, strings

import synth
from tracefmt.patterns import Shape, path_id, pattern_id, shape_text


@dataclass
class Msgs:
    """The columns of a trace as numpy arrays, in the trace's row order."""

    ts: np.ndarray  # int64 ns since the epoch
    sender: np.ndarray  # object (str)
    receiver: np.ndarray
    op: np.ndarray
    id: np.ndarray  # int64, -1 for null
    inst: np.ndarray  # int64
    pattern: np.ndarray  # object (str)
    call: np.ndarray  # int64
    parent: np.ndarray  # int64, -1 for null
    point: np.ndarray | None

    @property
    def size(self) -> int:
        return int(self.ts.size)

    def identities(self) -> list[tuple[int, str]]:
        """(true_call, op) of every row: a message's identity across runs."""
        return list(zip(self.call.tolist(), self.op.tolist(), strict=True))


def msgs_of(table: pa.Table) -> Msgs:
    return Msgs(
        ts=table["timestamp"].cast(pa.int64()).to_numpy(),
        sender=strings(table["sender"]),
        receiver=strings(table["receiver"]),
        op=strings(table["op"]),
        id=ints(table["id"]),
        inst=ints(table["true_instance"]),
        pattern=strings(table["true_pattern"]),
        call=ints(table["true_call"]),
        parent=ints(table["true_parent"]),
        point=strings(table["point"]) if "point" in table.column_names else None,
    )


@dataclass
class Calls:
    """One entry per RPC call (true_call), sorted by true_call, joined with its return."""

    uid: np.ndarray
    caller: np.ndarray
    callee: np.ndarray
    t_call: np.ndarray  # ns
    t_ret: np.ndarray
    parent: np.ndarray  # -1 for roots
    inst: np.ndarray
    pattern: np.ndarray
    row: np.ndarray  # row of the call message in the trace
    id_call: np.ndarray
    id_ret: np.ndarray

    def index(self, uids: np.ndarray) -> np.ndarray:
        """Positions of the given true_call values (which must all exist)."""
        pos = np.searchsorted(self.uid, uids)
        assert np.all(self.uid[np.minimum(pos, self.uid.size - 1)] == uids), "unknown call"
        return pos

    def children(self) -> dict[int, list[int]]:
        """Position of every call -> positions of its child calls, in call order.

        Call order is the call timestamp, ties broken by the row order of the trace
        (equal timestamps keep the causal order within an instance).
        """
        kids: dict[int, list[int]] = defaultdict(list)
        has_parent = np.flatnonzero(self.parent >= 0)
        ppos = self.index(self.parent[has_parent])
        for k, p in zip(has_parent.tolist(), ppos.tolist(), strict=True):
            kids[p].append(k)
        for p in kids:
            kids[p].sort(key=lambda k: (self.t_call[k], self.row[k]))
        return kids


def calls_of(m: Msgs) -> Calls:
    """Pair every call message with its return by true_call (each must have exactly one)."""
    ci = np.flatnonzero(m.op == "call")
    ri = np.flatnonzero(m.op == "return")
    ci = ci[np.argsort(m.call[ci], kind="stable")]
    ri = ri[np.argsort(m.call[ri], kind="stable")]
    assert np.array_equal(m.call[ci], m.call[ri]), "calls and returns do not pair one to one"
    assert np.unique(m.call[ci]).size == ci.size, "a true_call has two call messages"
    return Calls(
        uid=m.call[ci],
        caller=m.sender[ci],
        callee=m.receiver[ci],
        t_call=m.ts[ci],
        t_ret=m.ts[ri],
        parent=m.parent[ci],
        inst=m.inst[ci],
        pattern=m.pattern[ci],
        row=ci,
        id_call=m.id[ci],
        id_ret=m.id[ri],
    )


def rpc_pattern_ids(c: Calls) -> dict[int, str]:
    """true_instance -> pattern_id of the Shape rebuilt from the instance's calls."""
    kids = c.children()

    def build(k: int) -> Shape:
        # Children called before every earlier sibling returned are one concurrent group,
        # ordered by text within it.
        groups: list[list[Shape]] = []
        latest = None
        for j in kids.get(k, []):
            if latest is None or c.t_call[j] >= latest:
                groups.append([])
            groups[-1].append(build(j))
            latest = c.t_ret[j] if latest is None else max(latest, c.t_ret[j])
        groups = [sorted(g, key=shape_text) for g in groups]
        numbers = tuple(n for n, g in enumerate(groups) for _ in g)
        return Shape(
            str(c.caller[k]),
            str(c.callee[k]),
            tuple(s for g in groups for s in g),
            numbers if len(set(numbers)) < len(numbers) else (),
        )

    roots = np.flatnonzero(c.parent < 0)
    return {int(c.inst[k]): pattern_id(build(int(k))) for k in roots}


def message_pattern_ids(m: Msgs) -> dict[int, str]:
    """true_instance -> path_id of a one-way chain (sender of the first hop, then receivers)."""
    hops: dict[int, list[int]] = defaultdict(list)
    for i, inst in enumerate(m.inst.tolist()):
        hops[inst].append(i)
    out = {}
    for inst, rows in hops.items():
        rows.sort(key=lambda i: (m.ts[i], i))
        out[inst] = path_id([str(m.sender[rows[0]])] + [str(m.receiver[i]) for i in rows])
    return out


def brute_parallelism(c: Calls) -> float:
    """Mean candidate parents per child call, by direct comparison of every pair.

    A candidate parent of a child call B->X is any call into B with call time <= the
    child's call time and return time >= the child's return time; child calls are the
    calls whose caller receives calls.
    """
    total = 0
    children = 0
    for b in np.unique(c.caller):
        into = np.flatnonzero(c.callee == b)
        kids = np.flatnonzero(c.caller == b)
        if into.size == 0:
            continue
        s, e = c.t_call[into], c.t_ret[into]
        for lo in range(0, kids.size, 512):
            k = kids[lo : lo + 512]
            ok = (s[None, :] <= c.t_call[k][:, None]) & (e[None, :] >= c.t_ret[k][:, None])
            total += int(ok.sum())
        children += int(kids.size)
    return total / children


def check_normal(x: np.ndarray, mean: float, std: float, z: float = 4.5) -> None:
    """The sample's mean and std are within z standard errors of the given Gaussian's."""
    x = np.asarray(x, np.float64)
    n = x.size
    assert n > 100, f"too small a sample ({n})"
    se_mean = std / np.sqrt(n)
    se_std = std / np.sqrt(2 * (n - 1))
    assert abs(x.mean() - mean) <= z * se_mean, f"mean {x.mean():.6g} vs {mean:.6g} (n={n})"
    assert abs(x.std(ddof=1) - std) <= z * se_std, f"std {x.std(ddof=1):.6g} vs {std:.6g} (n={n})"


def check_fraction(hits: int, n: int, p: float, z: float = 4.5) -> None:
    """``hits`` out of ``n`` is within z binomial standard errors of probability ``p``."""
    assert n > 100, f"too small a sample ({n})"
    se = np.sqrt(p * (1 - p) / n)
    assert abs(hits / n - p) <= z * se, f"{hits}/{n} = {hits / n:.4f} vs {p} (+-{z * se:.4f})"


class Helpers:
    """The helpers above, as one object handed out by the ``h`` fixture."""

    msgs = staticmethod(msgs_of)
    calls = staticmethod(calls_of)
    rpc_pattern_ids = staticmethod(rpc_pattern_ids)
    message_pattern_ids = staticmethod(message_pattern_ids)
    brute_parallelism = staticmethod(brute_parallelism)
    check_normal = staticmethod(check_normal)
    check_fraction = staticmethod(check_fraction)

    @staticmethod
    def config(text: str, **changes: Any) -> synth.SynthConfig:
        """``parse_config(text)`` with top-level fields replaced."""
        cfg = synth.parse_config(text)
        return cfg.with_overrides(**changes) if changes else cfg

    @staticmethod
    def generate(text: str, **changes: Any) -> tuple[pa.Table, dict[str, Any]]:
        return synth.generate_table(Helpers.config(text, **changes))


@pytest.fixture(scope="session")
def h() -> type[Helpers]:
    """Helpers: ``h.msgs(table)``, ``h.calls(msgs)``, ``h.check_normal(...)``, ..."""
    return Helpers


# --- shared configurations and traces ---------------------------------------------------

#: Serial children with known delays, branch, choice and repeat; one client loop.
STATS_TOML = """\
nodes = ["client", "client2", "A", "B", "C", "D", "E"]

[trace]
seed = 5
messages = 50000
resolution_s = 1e-9

[[tracelet]]
client = ["client", "client2"]
client_weights = [1, 3]
clients = 1
think_s = [0.0, 0.01]

[[tracelet.call]]
id = "a"
to = "A"
before_s = [0.004, 0.0005]
between_s = [0.002, 0.0003]
after_s = [0.001, 0.0002]

[[tracelet.call]]
id = "b"
parent = "a"
to = "B"
p = 0.3
before_s = [0.003, 0.0004]

[[tracelet.call]]
id = "c"
parent = "a"
to = ["C", "D"]
weights = [3, 1]
before_s = { "*" = [0.005, 0.0006], D = [0.008, 0.0007] }

[[tracelet.call]]
id = "e"
parent = "a"
to = "E"
repeat = [1, 3]
before_s = [0.002, 0.0003]
after_s = [0.0005, 0.0001]
"""

#: Nesting three deep, optional calls, choices, repeats (from 0), a parallel group, two
#: tracelets and concurrency: for the structural checks.
STRUCT_TOML = """\
nodes = ["client", "u1", "u2", "A", "B", "C", "D", "E", "F", "G"]

[trace]
seed = 9
messages = 20000
parallelism = 4
resolution_s = 1e-9

[[tracelet]]
name = "deep"
client = ["u1", "u2"]
think_s = [0.0, 0.01]

[[tracelet.call]]
id = "a"
to = "A"
before_s = [0.002, 0.0005]
between_s = [0.001, 0.0002]
after_s = [0.001, 0.0002]

[[tracelet.call]]
id = "b"
parent = "a"
to = ["B", "C"]
p = 0.7
before_s = [0.001, 0.0002]
between_s = [0.0005, 0.0001]
after_s = [0.0005, 0.0001]

[[tracelet.call]]
id = "d"
parent = "b"
to = "D"
repeat = [0, 2]
before_s = [0.003, 0.0005]

[[tracelet.call]]
id = "g1"
parent = "a"
to = "E"
group = "fan"
before_s = [0.002, 0.0005]

[[tracelet.call]]
id = "g2"
parent = "a"
to = "F"
group = "fan"
p = 0.5
before_s = [0.004, 0.0005]

[[tracelet.call]]
id = "z"
parent = "a"
to = "G"
repeat = [1, 2]
before_s = [0.001, 0.0002]

[[tracelet]]
name = "flat"
client = "client"
weight = 0.5

[[tracelet.call]]
to = "A"
before_s = [0.005, 0.001]
"""


@pytest.fixture(scope="session")
def stats_toml() -> str:
    return STATS_TOML


@pytest.fixture(scope="session")
def struct_toml() -> str:
    return STRUCT_TOML


@pytest.fixture(scope="session")
def stats_trace() -> tuple[Msgs, Calls]:
    table, _ = synth.generate_table(synth.parse_config(STATS_TOML))
    m = msgs_of(table)
    return m, calls_of(m)


@pytest.fixture(scope="session")
def struct_trace() -> tuple[pa.Table, dict[str, Any], Msgs, Calls]:
    """``(table, truth, msgs, calls)`` of STRUCT_TOML."""
    table, truth = synth.generate_table(synth.parse_config(STRUCT_TOML))
    m = msgs_of(table)
    return table, truth, m, calls_of(m)


@pytest.fixture(scope="session")
def write_config() -> Callable[..., Any]:
    """``write_config(tmp_path, text, name="c.toml")``: write a config file, return its path."""

    def write(directory: Any, text: str, name: str = "c.toml") -> Any:
        path = directory / name
        path.write_text(text, encoding="utf-8")
        return path

    return write
