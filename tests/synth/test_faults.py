"""Faults between the system and its trace: capture loss, skew, duplicates, ids, jitter.

Loss, skew and ids use no random numbers, so a run with the fault and a run without
it from the same configuration and seed hold the same messages, and the tests compare
them message by message (a message's identity across runs is its true_call and op).
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Sequence

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import synth

# --- the capture queue, against a packet-by-packet reference -----------------------------


def reference_admit(ts_ns: Sequence[int], rate_pps: float, queue: int) -> list[bool]:
    """The capture point, one packet at a time.

    The queue drains ``rate_pps`` packets per second (continuously, never below empty);
    an arriving packet joins it if there is room for one more, else it is lost.
    """
    backlog = 0.0
    last = None
    keep = []
    for t in ts_ns:
        if last is not None:
            backlog = max(0.0, backlog - rate_pps * (t - last) / 1e9)
        last = t
        if backlog + 1.0 > queue:
            keep.append(False)
        else:
            backlog += 1.0
            keep.append(True)
    return keep


def bursty_arrivals(seed: int, n: int, mean_pps: float) -> np.ndarray:
    """Sorted arrival times (ns): quiet stretches and bursts, with some simultaneous packets."""
    rng = np.random.default_rng(seed)
    intensity = np.repeat(rng.choice([0.2, 1.0, 6.0], size=n // 50 + 1), 50)[:n] * mean_pps
    gaps = rng.exponential(1.0 / intensity)
    gaps[rng.random(n) < 0.05] = 0.0
    return np.cumsum(np.round(gaps * 1e9)).astype(np.int64)


QUEUES = [
    pytest.param(1000.0, 1, id="1000pps-q1"),
    pytest.param(1000.0, 4, id="1000pps-q4"),
    pytest.param(250.0, 16, id="250pps-q16"),
    pytest.param(5000.0, 64, id="5000pps-q64"),
    pytest.param(777.7, 7, id="777pps-q7"),
]


@pytest.mark.parametrize(("rate", "queue"), QUEUES)
def test_capture_queue_matches_reference(rate: float, queue: int) -> None:
    ts = bursty_arrivals(int(rate) + queue, 6000, rate)
    keep = synth.CaptureQueue(rate, queue).admit(ts)
    expected = reference_admit(ts.tolist(), rate, queue)
    assert 0 < sum(expected) < len(expected)  # some loss, not all
    assert keep.tolist() == expected


@settings(max_examples=40, deadline=None)
@given(
    q=st.sampled_from([(1000.0, 1), (1000.0, 4), (250.0, 16), (777.7, 7)]),
    seed=st.integers(0, 2**16),
    cuts=st.lists(st.integers(0, 1500), max_size=8),
)
def test_capture_queue_fed_in_pieces(q: tuple[float, int], seed: int, cuts: list[int]) -> None:
    rate, queue = q
    ts = bursty_arrivals(seed, 1500, rate)
    capture = synth.CaptureQueue(rate, queue)
    bounds = [0, *sorted(cuts), ts.size]
    keep = np.concatenate([capture.admit(ts[a:b]) for a, b in itertools.pairwise(bounds)])
    assert keep.tolist() == reference_admit(ts.tolist(), rate, queue)


def test_capture_queue_simultaneous_burst() -> None:
    # A burst of 10 packets at once into a queue of 3, then the queue drains for 2 ms
    # at 1000 pps (room for 2 more), then 3 more at once.
    q = synth.CaptureQueue(1000.0, 3)
    first = q.admit(np.zeros(10, np.int64))
    assert first.tolist() == [True] * 3 + [False] * 7
    assert q.admit(np.full(3, 2_000_000, np.int64)).tolist() == [True, True, False]


# --- loss in generated traces ------------------------------------------------------------

LOSS_TOML = """\
nodes = ["client", "A", "B"]
[trace]
seed = 6
messages = 20000
resolution_s = 1e-9
[[tracelet]]
client = "client"
clients = 4
think_s = [0.0, 0.2]
[[tracelet.call]]
id = "a"
to = "A"
before_s = [0.001, 0.0002]
between_s = [0.0001, 0.00002]
[[tracelet.call]]
id = "b"
parent = "a"
to = "B"
repeat = 10
before_s = [0.0002, 0.00005]
"""
# 4 loops, each an instance of 22 messages in about 4 ms, then 0.1 s of thinking on
# average: about 850 messages/s, in bursts of 5,000 messages/s.


@pytest.fixture(scope="module")
def lossless(h):
    return h.msgs(h.generate(LOSS_TOML)[0])


def _with_loss(h, rate: float, queue: int = 16):
    cfg = h.config(LOSS_TOML)
    cfg = dataclasses.replace(
        cfg, faults=dataclasses.replace(cfg.faults, loss_rate_pps=rate, loss_queue=queue)
    )
    table, truth = synth.generate_table(cfg)
    return h.msgs(table), truth


def _dropped(lossless, lossy) -> np.ndarray:
    kept = set(lossy.identities())
    return np.array([k not in kept for k in lossless.identities()])


def test_loss_falls_as_the_capture_rate_rises(h, lossless) -> None:
    fractions = []
    for rate in (850.0, 1700.0, 3400.0):
        lossy, truth = _with_loss(h, rate)
        dropped = _dropped(lossless, lossy)
        assert lossy.size == lossless.size - int(dropped.sum())
        assert truth["messages"] == lossy.size
        fractions.append(dropped.mean())
        p = dropped.mean()
        # Bursts: runs of consecutive drops are longer than independent drops would give
        # (mean run 1 / (1 - p)) ...
        edges = np.diff(np.concatenate([[0], dropped.astype(np.int8), [0]]))
        runs = np.flatnonzero(edges == -1) - np.flatnonzero(edges == 1)
        assert runs.mean() > 1.25 / (1 - p), (rate, runs.mean(), p)
        # ... and drops cluster in time: per 20 ms bin, the drop counts vary far more
        # than binomial (a dispersion ratio about 1 for independent drops).
        b = (lossless.ts - lossless.ts[0]) // 20_000_000
        n_b = np.bincount(b)
        d_b = np.bincount(b, weights=dropped)
        ok = n_b > 0
        dispersion = ((d_b[ok] - p * n_b[ok]) ** 2 / (p * (1 - p) * n_b[ok])).sum() / (ok.sum() - 1)
        assert dispersion > 3, (rate, dispersion)
    assert fractions[0] > fractions[1] > fractions[2] > 0, fractions


def test_loss_drops_exactly_what_the_queue_would(h, lossless) -> None:
    lossy, _ = _with_loss(h, 1300.0, queue=8)
    dropped = _dropped(lossless, lossy)
    assert dropped.any()
    # The capture point sees the whole trace in time order; the generator feeds it in
    # pieces, but its decisions are those of one pass over all messages.
    expected = reference_admit(lossless.ts.tolist(), 1300.0, 8)
    assert (~dropped).tolist() == expected
    # Captured messages keep their timestamps and order.
    kept_ts = dict(zip(lossless.identities(), lossless.ts.tolist(), strict=True))
    assert [kept_ts[k] for k in lossy.identities()] == lossy.ts.tolist()


def test_generate_trace_reports_the_lost(tmp_path, h, lossless) -> None:
    cfg = h.config(LOSS_TOML)
    cfg = dataclasses.replace(cfg, faults=dataclasses.replace(cfg.faults, loss_rate_pps=1300.0, loss_queue=8))
    report = synth.generate_trace(cfg, tmp_path / "t.parquet")
    assert report.lost == lossless.size - report.messages
    assert report.lost == expected_lost(lossless.ts, 1300.0, 8)


def expected_lost(ts: np.ndarray, rate: float, queue: int) -> int:
    return sum(not k for k in reference_admit(ts.tolist(), rate, queue))


# --- skew --------------------------------------------------------------------------------

SKEW_TOML = """\
nodes = ["client", "WS1", "WS2", "AP", "DB"]
[trace]
seed = 31
messages = 8000
resolution_s = 1e-9
[[tracelet]]
client = "client"
clients = 3
think_s = [0.0, 0.02]
[[tracelet.call]]
id = "ws"
to = ["WS1", "WS2"]
before_s = [0.002, 0.0005]
after_s = [0.001, 0.0002]
[[tracelet.call]]
id = "ap"
parent = "ws"
to = "AP"
before_s = [0.003, 0.0007]
[[tracelet.call]]
id = "db"
parent = "ap"
to = "DB"
p = 0.5
before_s = [0.004, 0.001]
"""


@pytest.fixture(scope="module")
def unskewed(h):
    m = h.msgs(h.generate(SKEW_TOML)[0])
    return m, dict(zip(m.identities(), m.ts.tolist(), strict=True))


def _skewed(h, skew: dict[str, tuple[float, float]]):
    cfg = h.config(SKEW_TOML)
    cfg = dataclasses.replace(cfg, faults=dataclasses.replace(cfg.faults, skew=skew))
    return h.msgs(synth.generate_table(cfg)[0])


@pytest.mark.parametrize("offset", [0.03, -0.05, 0.4], ids=["+30ms", "-50ms", "+400ms"])
def test_skew_shifts_exactly_the_skewed_nodes_messages(h, unskewed, offset: float) -> None:
    _, base_ts = unskewed
    m = _skewed(h, {"WS2": (offset, 0.0)})
    assert sorted(m.identities()) == sorted(base_ts)
    assert np.all(np.diff(m.ts) >= 0)  # still in time order
    shift = m.ts - np.array([base_ts[k] for k in m.identities()])
    touches = (m.sender == "WS2") | (m.receiver == "WS2")
    assert touches.any()
    assert np.all(np.abs(shift[touches] - round(offset * 1e9)) <= 2)
    assert np.all(shift[~touches] == 0)


def test_skew_with_drift(h, unskewed) -> None:
    _, base_ts = unskewed
    start = h.config(SKEW_TOML).start_ns
    m = _skewed(h, {"AP": (0.01, 500.0)})
    base = np.array([base_ts[k] for k in m.identities()])
    expected = 0.01 + 500e-6 * (base - start) / 1e9  # offset + drift x time since the start
    shift = (m.ts - base) / 1e9
    touches = (m.sender == "AP") | (m.receiver == "AP")
    assert np.all(np.abs(shift[touches] - expected[touches]) <= 3e-9)
    assert np.all(shift[~touches] == 0)


def test_skew_between_two_skewed_nodes_takes_the_senders(h, unskewed) -> None:
    _, base_ts = unskewed
    m = _skewed(h, {"AP": (0.01, 0.0), "DB": (-0.02, 0.0)})
    shift = m.ts - np.array([base_ts[k] for k in m.identities()])
    expected = np.zeros(m.size)
    for node, off in (("AP", 0.01), ("DB", -0.02)):
        expected[(m.receiver == node) | (m.sender == node)] = off * 1e9
    # AP <-> DB messages: the sender's clock.
    expected[(m.sender == "AP") & (m.receiver == "DB")] = 0.01e9
    expected[(m.sender == "DB") & (m.receiver == "AP")] = -0.02e9
    assert ((m.sender == "DB") & (m.receiver == "AP")).any()
    assert np.all(np.abs(shift - expected) <= 2)


def test_skew_in_the_config_file(h, unskewed) -> None:
    _, base_ts = unskewed
    m = h.msgs(h.generate(SKEW_TOML + "[faults.skew]\nWS1 = -0.015\n")[0])
    shift = m.ts - np.array([base_ts[k] for k in m.identities()])
    touches = (m.sender == "WS1") | (m.receiver == "WS1")
    assert np.all(np.abs(shift[touches] + 15_000_000) <= 2)
    assert np.all(shift[~touches] == 0)


# --- duplicates --------------------------------------------------------------------------


def test_duplicates(tmp_path, h) -> None:
    text = SKEW_TOML + "[faults.duplicates]\nfraction = 0.1\n"
    report = synth.generate_trace(h.config(text), tmp_path / "t.parquet")
    from tracefmt import read_trace

    table = read_trace(tmp_path / "t.parquet")
    m = h.msgs(table)
    assert m.point is not None
    assert set(m.point.tolist()) == {"p1", "p2"}
    p1, p2 = m.point == "p1", m.point == "p2"
    assert report.duplicated == int(p2.sum())
    assert report.messages == m.size
    h.check_fraction(int(p2.sum()), int(p1.sum()), 0.1)
    # Every message is seen once at p1; a copy is identical but for time and point.
    first = {k: i for k, i in zip(m.identities(), range(m.size), strict=True) if p1[i]}
    assert len(first) == int(p1.sum())
    delays = []
    for i in np.flatnonzero(p2).tolist():
        j = first[(int(m.call[i]), str(m.op[i]))]
        for col in ("sender", "receiver", "op", "id", "inst", "pattern", "call", "parent"):
            assert getattr(m, col)[i] == getattr(m, col)[j], col
        delays.append((m.ts[i] - m.ts[j]) / 1e9)
    h.check_normal(np.array(delays), 20e-6, 5e-6)
    # The copies are part of the time order.
    assert np.all(np.diff(m.ts) >= 0)


# --- ids ---------------------------------------------------------------------------------


def _ids_run(h, faults: str):
    return h.calls(h.msgs(h.generate(SKEW_TOML + "[faults.ids]\n" + faults)[0]))


def test_ids_missing(h) -> None:
    c = _ids_run(h, 'mode = "missing"\nfraction = 0.3\n')
    missing = c.id_call == -1
    assert np.array_equal(c.id_ret == -1, missing)  # call and return agree
    assert np.array_equal(c.id_call[~missing], c.uid[~missing])
    assert np.array_equal(c.id_ret[~missing], c.uid[~missing])
    h.check_fraction(int(missing.sum()), c.uid.size, 0.3)


def test_ids_missing_by_default_all(h) -> None:
    c = _ids_run(h, 'mode = "missing"\n')
    assert np.all(c.id_call == -1)
    assert np.all(c.id_ret == -1)


def test_ids_reused(h) -> None:
    c = _ids_run(h, 'mode = "reused"\nmodulus = 16\n')
    assert np.array_equal(c.id_call, c.id_ret)
    assert np.array_equal(c.id_call, c.uid % 16)
    assert set(c.id_call.tolist()) == set(range(16))


def test_ids_zero(h) -> None:
    c = _ids_run(h, 'mode = "zero"\n')
    assert np.all(c.id_call == 0)
    assert np.all(c.id_ret == 0)


# --- jitter ------------------------------------------------------------------------------


def test_jitter(h) -> None:
    # A constant 10 ms call: its measured latency is 10 ms plus the difference of two
    # independent jitters, so its std is sqrt(2) times the jitter's.
    text = """\
nodes = ["client", "A"]
[trace]
seed = 12
messages = 20000
parallelism = 2
resolution_s = 1e-9
[[tracelet]]
client = "client"
think_s = [0.0, 0.01]
[[tracelet.call]]
to = "A"
before_s = [0.01, 0]
[faults.jitter]
std_s = 1e-4
"""
    c = h.calls(h.msgs(h.generate(text)[0]))
    noise = (c.t_ret - c.t_call) / 1e9 - 0.01
    h.check_normal(noise, 0.0, np.sqrt(2) * 1e-4)
