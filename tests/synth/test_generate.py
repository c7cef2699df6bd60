"""Generated traces follow their configuration: delays, branches, choices, repeats, size, time.

Statistics are checked against the configured values (Gaussian means and standard
deviations within their confidence intervals, frequencies within binomial intervals),
measured on the trace's own columns with nanosecond timestamps.
"""

from __future__ import annotations

import dataclasses
import filecmp
import itertools
import re
import subprocess
import sys
from collections import Counter, defaultdict
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

import synth
from tracefmt import read_trace

# --- per-hop delays (STATS_TOML in conftest.py) ------------------------------------------


@pytest.mark.parametrize(
    ("callee", "mean", "std"),
    [
        pytest.param("B", 0.003, 0.0004, id="leaf-before"),
        pytest.param("C", 0.005, 0.0006, id="per-node-default"),
        pytest.param("D", 0.008, 0.0007, id="per-node-override"),
        pytest.param("E", 0.0025, float(np.hypot(0.0003, 0.0001)), id="leaf-before-plus-after"),
    ],
)
def test_leaf_latency_is_its_delay_draw(stats_trace, h, callee: str, mean: float, std: float) -> None:
    _, c = stats_trace
    sel = c.callee == callee
    h.check_normal((c.t_ret[sel] - c.t_call[sel]) / 1e9, mean, std)


def _child_gaps(c) -> dict[str, list[float]]:
    """Delays at A: call to first child, child return to next child call, last return to reply."""
    kids = c.children()
    gaps: dict[str, list[float]] = defaultdict(list)
    for root in np.flatnonzero(c.parent < 0).tolist():
        ks = kids[root]
        gaps["before"].append(c.t_call[ks[0]] - c.t_call[root])
        gaps["between"].extend(c.t_call[b] - c.t_ret[a] for a, b in itertools.pairwise(ks))
        gaps["after"].append(c.t_ret[root] - c.t_ret[ks[-1]])
    return gaps


@pytest.mark.parametrize(
    ("which", "mean", "std"),
    [("before", 0.004, 0.0005), ("between", 0.002, 0.0003), ("after", 0.001, 0.0002)],
)
def test_parent_delays_around_its_children(stats_trace, h, which: str, mean: float, std: float) -> None:
    _, c = stats_trace
    h.check_normal(np.array(_child_gaps(c)[which]) / 1e9, mean, std)


def test_children_are_made_in_listed_order(stats_trace) -> None:
    _, c = stats_trace
    kids = c.children()
    roots = np.flatnonzero(c.parent < 0).tolist()
    assert roots
    for root in roots:
        assert c.callee[root] == "A"
        seq = "".join(str(c.callee[k]) for k in kids[root])
        assert re.fullmatch(r"B?[CD]E{1,3}", seq), seq


def test_optional_call_frequency(stats_trace, h) -> None:
    _, c = stats_trace
    roots = np.flatnonzero(c.parent < 0)
    with_b = c.inst[c.callee == "B"]
    assert np.unique(with_b).size == with_b.size  # at most one B call per instance
    h.check_fraction(with_b.size, roots.size, 0.3)


def test_choice_weights(stats_trace, h) -> None:
    _, c = stats_trace
    to_c, to_d = int((c.callee == "C").sum()), int((c.callee == "D").sum())
    assert to_c + to_d == int((c.parent < 0).sum())  # exactly one per instance
    h.check_fraction(to_c, to_c + to_d, 0.75)


def test_repeat_range_is_uniform(stats_trace, h) -> None:
    _, c = stats_trace
    n = int((c.parent < 0).sum())
    per_instance = Counter(Counter(c.inst[c.callee == "E"].tolist()).values())
    assert set(per_instance) == {1, 2, 3}
    assert sum(per_instance.values()) == n
    for k in (1, 2, 3):
        h.check_fraction(per_instance[k], n, 1 / 3)


def test_client_choice(stats_trace, h) -> None:
    _, c = stats_trace
    roots = c.parent < 0
    callers = Counter(c.caller[roots].tolist())
    assert set(callers) == {"client", "client2"}
    h.check_fraction(callers["client2"], int(roots.sum()), 0.75)


def test_think_time_between_instances_of_one_loop(stats_trace) -> None:
    # A single client loop: instances follow each other, separated by a uniform think
    # time in [0, 0.01] s.
    _, c = stats_trace
    roots = np.flatnonzero(c.parent < 0)
    roots = roots[np.argsort(c.t_call[roots])]
    think = (c.t_call[roots[1:]] - c.t_ret[roots[:-1]]) / 1e9
    assert think.min() >= 0.0
    assert think.max() <= 0.01 + 1e-9
    se = 0.01 / np.sqrt(12 * think.size)
    assert abs(think.mean() - 0.005) <= 4.5 * se
    # Uniform: each tenth of the range holds about a tenth of the gaps.
    counts = np.histogram(think, bins=10, range=(0.0, 0.01))[0]
    assert np.all(np.abs(counts / think.size - 0.1) <= 4.5 * np.sqrt(0.09 / think.size))


# --- one-way messages --------------------------------------------------------------------

MESSAGES_TOML = """\
nodes = ["s", "r1", "r2", "hub", "m"]

[trace]
seed = 2
messages = 20000
parallelism = 5
resolution_s = 1e-9

[[tracelet]]
name = "mail"
kind = "messages"
client = "s"
think_s = [0.5, 1.0]

[[tracelet.hop]]
to = ["r1", "r2"]
weights = [1, 4]
delay_s = [0.01, 0.002]

[[tracelet.hop]]
to = "hub"
delay_s = { "*" = [0.05, 0.005], r2 = [0.2, 0.01] }

[[tracelet.hop]]
to = "m"
p = 0.6
delay_s = [[0.1, 0.01, 0.7], [0.5, 0.02, 0.3]]
"""


@pytest.fixture(scope="module")
def mail_trace(h):
    table, _ = h.generate(MESSAGES_TOML)
    m = h.msgs(table)
    chains: dict[int, list[int]] = defaultdict(list)
    for i in np.argsort(m.ts, kind="stable").tolist():
        chains[int(m.inst[i])].append(i)
    return m, chains


def test_messages_chain_structure(mail_trace) -> None:
    m, chains = mail_trace
    assert set(m.op.tolist()) == {"send"}
    assert np.all(m.id == -1)  # one-way messages carry no call id
    assert np.unique(m.call).size == m.size  # every message its own true_call
    for rows in chains.values():
        assert len(rows) in (2, 3)
        assert m.sender[rows[0]] == "s"
        assert m.parent[rows[0]] == -1
        for a, b in itertools.pairwise(rows):
            assert m.sender[b] == m.receiver[a]
            assert m.parent[b] == m.call[a]


def test_messages_hop_choices_and_ends(mail_trace, h) -> None:
    m, chains = mail_trace
    first = [str(m.receiver[rows[0]]) for rows in chains.values()]
    h.check_fraction(first.count("r2"), len(first), 0.8)
    long = sum(len(rows) == 3 for rows in chains.values())
    h.check_fraction(long, len(chains), 0.6)


def test_messages_hop_delays(mail_trace, h) -> None:
    m, chains = mail_trace
    d2: dict[str, list[float]] = defaultdict(list)
    d3 = []
    for rows in chains.values():
        d2[str(m.sender[rows[1]])].append((m.ts[rows[1]] - m.ts[rows[0]]) / 1e9)
        if len(rows) == 3:
            d3.append((m.ts[rows[2]] - m.ts[rows[1]]) / 1e9)
    h.check_normal(np.array(d2["r1"]), 0.05, 0.005)
    h.check_normal(np.array(d2["r2"]), 0.2, 0.01)
    d3a = np.array(d3)
    late = d3a > 0.3
    h.check_fraction(int(late.sum()), d3a.size, 0.3)
    h.check_normal(d3a[~late], 0.1, 0.01)
    h.check_normal(d3a[late], 0.5, 0.02)


def test_messages_pattern_is_the_node_path(mail_trace, h) -> None:
    m, _ = mail_trace
    expected = h.message_pattern_ids(m)
    assert [expected[i] for i in m.inst.tolist()] == m.pattern.tolist()


def test_messages_parallelism_is_client_loops(tmp_path: Path, h) -> None:
    report = synth.generate_trace(h.config(MESSAGES_TOML, messages=3000), tmp_path / "m.parquet")
    assert report.loops == {"mail": 5}
    m = h.msgs(read_trace(tmp_path / "m.parquet"))
    # At most 5 instances are in flight at once (one per loop).
    first = defaultdict(lambda: np.iinfo(np.int64).max)
    last = defaultdict(lambda: np.iinfo(np.int64).min)
    for t, i in zip(m.ts.tolist(), m.inst.tolist(), strict=True):
        first[i], last[i] = min(first[i], t), max(last[i], t)
    events = sorted(
        [(first[i], 1) for i in first] + [(last[i], -1) for i in last], key=lambda e: (e[0], e[1])
    )
    running = np.cumsum([e[1] for e in events])
    assert running.max() == 5


# --- size, start, resolution -------------------------------------------------------------


def _instance_sizes_by_start(c) -> tuple[np.ndarray, np.ndarray]:
    """Messages per instance (2 per call) and instance start times (root call), by start."""
    roots = np.flatnonzero(c.parent < 0)
    start = dict(zip(c.inst[roots].tolist(), c.t_call[roots].tolist(), strict=True))
    size = Counter(c.inst.tolist())
    order = sorted(start, key=lambda i: start[i])
    return np.array([2 * size[i] for i in order]), np.array([start[i] for i in order])


@pytest.mark.parametrize("trace", ["stats_trace", "struct_trace"])
def test_message_target_keeps_whole_instances_in_start_order(request, trace: str) -> None:
    c = request.getfixturevalue(trace)[-1]
    target = 50000 if trace == "stats_trace" else 20000
    sizes, _ = _instance_sizes_by_start(c)
    total = int(sizes.sum())
    assert total == 2 * c.uid.size  # every message belongs to a complete call
    # The instance that crosses the target (in start order) is the last one kept.
    assert total >= target
    assert total - sizes[-1] < target


def test_duration_keeps_instances_started_within_it(h, struct_toml: str) -> None:
    cfg = dataclasses.replace(h.config(struct_toml), messages=None, duration_s=1.5)
    table, _ = synth.generate_table(cfg)
    c = h.calls(h.msgs(table))
    _, starts = _instance_sizes_by_start(c)
    rel = (starts - cfg.start_ns) / 1e9
    assert rel.min() >= 0.0
    assert rel.max() <= 1.5
    assert rel.max() > 1.4  # and they fill it


def test_start_and_resolution(h, stats_toml: str) -> None:
    # The same run at two clock resolutions, from a start with a zone offset.
    start = 'start = "2024-06-01T12:00:00+02:00"\n'
    fine_text = stats_toml.replace("resolution_s = 1e-9\n", start + "resolution_s = 1e-9\n")
    coarse_text = stats_toml.replace("resolution_s = 1e-9\n", start + "resolution_s = 1e-3\n")
    assert fine_text != stats_toml
    fine = h.msgs(h.generate(fine_text, messages=5000)[0])
    coarse = h.msgs(h.generate(coarse_text, messages=5000)[0])
    start_ns = int(datetime(2024, 6, 1, 10, tzinfo=UTC).timestamp()) * 10**9
    assert fine.ts.min() >= start_ns
    assert fine.ts.min() - start_ns < 10**9
    assert np.all((coarse.ts - start_ns) % 10**6 == 0)
    # The same messages, each rounded down to the millisecond.
    fine_ts = dict(zip(fine.identities(), fine.ts.tolist(), strict=True))
    assert sorted(fine_ts) == sorted(coarse.identities())
    expected = [start_ns + (fine_ts[k] - start_ns) // 10**6 * 10**6 for k in coarse.identities()]
    assert coarse.ts.tolist() == expected


def test_trace_is_time_sorted_across_rounds(h) -> None:
    # Over 40,000 instances: several generation rounds and emitted row groups, with
    # skews of both signs and jitter moving messages across round boundaries.
    text = """\
nodes = ["client", "A", "B"]
[trace]
seed = 3
messages = 200000
parallelism = 3
resolution_s = 1e-9
[[tracelet]]
client = "client"
think_s = [0.0, 0.002]
[[tracelet.call]]
to = "A"
before_s = [0.002, 0.0005]
[[tracelet.call]]
parent = "call0"
to = "B"
p = 0.1
before_s = [0.001, 0.0002]
[faults.skew]
A = -0.3
B = 0.2
[faults.jitter]
std_s = 0.0005
"""
    table, truth = h.generate(text)
    m = h.msgs(table)
    assert np.all(np.diff(m.ts) >= 0)
    c = h.calls(m)
    sizes, _ = _instance_sizes_by_start(c)
    assert int(sizes.sum()) == m.size
    assert m.size - sizes[-1] < 200000 <= m.size
    assert truth["instances"] == sizes.size


def test_zero_delays_keep_causal_order(h) -> None:
    # Every delay 0: a whole instance shares one timestamp, and its rows must still be
    # in causal order (a call before its children, a return after them).
    text = """\
nodes = ["client", "A", "B", "C"]
[trace]
seed = 4
messages = 3000
parallelism = 1
[[tracelet]]
client = "client"
think_s = [0.001, 0.002]
[[tracelet.call]]
id = "a"
to = "A"
[[tracelet.call]]
id = "b"
parent = "a"
to = "B"
repeat = 2
[[tracelet.call]]
id = "c"
parent = "b"
to = "C"
"""
    table, _ = h.generate(text)
    m = h.msgs(table)
    c = h.calls(m)
    assert np.all(c.t_call == c.t_ret)
    ret_row = {}
    for i in np.flatnonzero(m.op == "return").tolist():
        ret_row[int(m.call[i])] = i
    child = np.flatnonzero(c.parent >= 0)
    ppos = c.index(c.parent[child])
    for k, p in zip(child.tolist(), ppos.tolist(), strict=True):
        assert c.t_call[k] == c.t_call[p]
        assert c.row[p] < c.row[k] < ret_row[int(c.uid[k])] < ret_row[int(c.uid[p])]
    # Serial siblings: the first B's return comes before the second B's call.
    kids = c.children()
    for root in np.flatnonzero(c.parent < 0).tolist():
        b1, b2 = kids[root]
        assert ret_row[int(c.uid[b1])] < c.row[b2]


def test_delay_mixture_sampling() -> None:
    d = synth.Delay(((0.01, 0.001, 0.7), (0.05, 0.002, 0.3)))
    x = d.sample(np.random.default_rng(0), 40000)
    assert x.shape == (40000,)
    high = x > 0.03
    assert abs(high.mean() - 0.3) <= 4.5 * np.sqrt(0.21 / x.size)
    assert abs(x[~high].mean() - 0.01) <= 4.5 * 0.001 / np.sqrt((~high).sum())
    assert abs(x[high].std() - 0.002) <= 4.5 * 0.002 / np.sqrt(2 * high.sum())
    assert d.mean_s == pytest.approx(0.7 * 0.01 + 0.3 * 0.05)


def test_delay_is_truncated_at_zero() -> None:
    x = synth.Delay(((0.001, 0.002, 1.0),)).sample(np.random.default_rng(1), 20000)
    assert x.min() == 0.0
    # P(N(1, 2) < 0) = Phi(-0.5) = 0.3085 of the draws sit exactly at 0.
    assert abs((x == 0).mean() - 0.3085) <= 4.5 * np.sqrt(0.3085 * 0.6915 / x.size)


# --- determinism -------------------------------------------------------------------------

FAULTY_TOML = """\
nodes = ["client", "A", "B"]
[trace]
seed = 17
messages = 5000
parallelism = 2
[[tracelet]]
client = "client"
think_s = [0.0, 0.001]
[[tracelet.call]]
to = "A"
before_s = [0.002, 0.0005]
[[tracelet.call]]
parent = "call0"
to = "B"
before_s = [0.001, 0.0003]
[faults.loss]
rate_pps = 3000
queue = 8
[faults.duplicates]
fraction = 0.1
[faults.ids]
mode = "missing"
fraction = 0.2
[faults.jitter]
std_s = 1e-5
[faults.skew]
B = { offset_s = 0.001, drift_ppm = 20 }
"""


@pytest.mark.parametrize("suffix", [".parquet", ".txt"])
def test_same_seed_gives_byte_identical_files(tmp_path: Path, h, suffix: str) -> None:
    cfg = h.config(FAULTY_TOML)
    a = synth.generate_trace(cfg, tmp_path / f"a{suffix}", truth_path=tmp_path / "a.json")
    synth.generate_trace(cfg, tmp_path / f"b{suffix}", truth_path=tmp_path / "b.json")
    assert a.lost > 0
    assert a.duplicated > 0  # the faults draw random numbers too
    assert filecmp.cmp(tmp_path / f"a{suffix}", tmp_path / f"b{suffix}", shallow=False)
    assert filecmp.cmp(tmp_path / "a.json", tmp_path / "b.json", shallow=False)


def test_different_seed_gives_a_different_trace(tmp_path: Path, h) -> None:
    synth.generate_trace(h.config(FAULTY_TOML), tmp_path / "a.parquet")
    synth.generate_trace(h.config(FAULTY_TOML, seed=18), tmp_path / "b.parquet")
    assert not filecmp.cmp(tmp_path / "a.parquet", tmp_path / "b.parquet", shallow=False)
    ta, tb = read_trace(tmp_path / "a.parquet"), read_trace(tmp_path / "b.parquet")
    n = min(ta.num_rows, tb.num_rows)
    assert ta["timestamp"].slice(0, n) != tb["timestamp"].slice(0, n)


def test_trace_file_equals_table(tmp_path: Path, h, struct_toml: str) -> None:
    cfg = h.config(struct_toml, messages=5000)
    table, _ = synth.generate_table(cfg)
    report = synth.generate_trace(cfg, tmp_path / "t.parquet")
    written = read_trace(tmp_path / "t.parquet")
    assert report.messages == written.num_rows == table.num_rows
    for name in table.column_names:
        a, b = written[name], table[name]
        if pa.types.is_dictionary(a.type):
            a, b = a.cast(pa.string()), b.cast(pa.string())
        elif pa.types.is_timestamp(a.type):
            a, b = a.cast(pa.int64()), b.cast(pa.int64())
        assert a.to_pylist() == b.to_pylist(), name


# --- degenerate workloads ----------------------------------------------------------------

_CHILD = """\
import resource, sys
resource.setrlimit(resource.RLIMIT_AS, (2 * 1024**3, 2 * 1024**3))
import synth
try:
    table, truth = synth.generate_table(synth.parse_config(sys.stdin.read()))
except synth.ConfigError as exc:
    sys.exit(f"synth.config.ConfigError: {exc}")
print(table.num_rows, truth["instances"])
"""


def test_all_defaults_workload_terminates() -> None:
    # Every delay and the think time default to 0, so every instance takes no time and
    # client loops could start endless instances at one instant. Such a workload is
    # refused with a ConfigError naming the tracelet's line, quickly (run in a child
    # process with a memory cap and a timeout, since a generator that never advances
    # never returns).
    text = 'nodes = ["client", "A"]\n[trace]\nmessages = 200\n[[tracelet]]\nclient = "client"\n'
    text += '[[tracelet.call]]\nto = "A"\n'
    root = Path(__file__).resolve().parents[2]
    try:
        proc = subprocess.run(
            [sys.executable, "-c", _CHILD],
            input=text,
            capture_output=True,
            text=True,
            timeout=10,
            cwd=root,
            check=False,
        )
    except subprocess.TimeoutExpired:
        pytest.fail("generating a workload of zero-duration instances did not finish in 10 s")
    assert proc.returncode == 1, proc.stderr[-2000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("synth.config.ConfigError: <config>:4: tracelet.think_s: "), last
    assert "takes no time" in last


def test_optional_root_call(h) -> None:
    # p on the first call: an absent root call takes the whole instance with it (or the
    # configuration is refused, naming the field); nothing else may happen.
    text = """\
nodes = ["client", "A", "B"]
[trace]
seed = 2
messages = 4000
[[tracelet]]
client = "client"
think_s = [0.001, 0.002]
[[tracelet.call]]
id = "a"
to = "A"
p = 0.5
before_s = [0.002, 0.0002]
[[tracelet.call]]
parent = "a"
to = "B"
before_s = [0.001, 0.0001]
"""
    try:
        table, truth = h.generate(text)
        refused = None
    except synth.ConfigError as exc:
        refused = str(exc)
    if refused is not None:
        line = text.splitlines().index("p = 0.5") + 1
        assert refused.startswith(f"<config>:{line}: tracelet.call.p: "), refused
        return
    c = h.calls(h.msgs(table))
    assert c.uid.size == 2 * int((c.parent < 0).sum())  # every instance has its root and child
    assert truth["instances"] == int((c.parent < 0).sum())
    assert table.num_rows >= 4000
