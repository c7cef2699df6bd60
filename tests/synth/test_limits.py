"""Bounds on what a configuration may ask for, held for Python callers as for the file and
the command line; and memory that stays bounded for every accepted input."""

from __future__ import annotations

import dataclasses
import os
import re
import signal
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import synth
import synth.generate
import synth.truth
from synth.limits import MAX_CALLS, Limit, calls_per_instance, tracelet_problem
from tracefmt import ParameterError
from tracefmt.signals import sigterm_as_interrupt

TOML = """\
nodes = ["client", "A", "B"]

[trace]
seed = 5
messages = 4000

[[tracelet]]
name = "req"
client = "client"
clients = 3
think_s = [0.0, 0.01]

[[tracelet.call]]
id = "a"
to = "A"
before_s = [0.002, 0.0005]

[[tracelet.call]]
id = "b"
parent = "a"
to = ["A", "B"]
before_s = [0.003, 0.0005]
"""

# A fast tracelet beside one that thinks for half an hour: without loops waiting for the
# horizon, the slow one's instances would pile up while the fast one advances.
FAST_AND_SLOW = """\
nodes = ["c", "a", "b"]
[trace]
messages = 2000000
[[tracelet]]
name = "fast"
client = "c"
clients = 10
[[tracelet.call]]
to = "a"
before_s = [0.001, 0.0001]
[[tracelet]]
name = "slow"
client = "c"
clients = 10
think_s = [1000, 2000]
[[tracelet.call]]
to = "b"
before_s = [0.001, 0.0001]
"""

# One loop in 10,000 instances waits a day: that loop runs far ahead of the others.
HEAVY_TAIL = """\
nodes = ["c", "a"]
[trace]
messages = 2000000
[[tracelet]]
client = "c"
clients = 20
[[tracelet.call]]
to = "a"
before_s = [[0.001, 0.0001, 0.9999], [80000, 1, 0.0001]]
"""


@pytest.fixture
def cfg() -> synth.SynthConfig:
    return synth.parse_config(TOML, "c.toml")


def _message(error: type[Exception], fn: Any, *args: Any) -> str:
    """The message of the ``error`` that ``fn(*args)`` raises."""
    with pytest.raises(error) as info:
        fn(*args)
    return str(info.value)


# --- Limit ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("limit", "value", "problem"),
    [
        pytest.param(Limit(1, 10, integer=True), 5, None, id="inside"),
        pytest.param(Limit(1, 10, integer=True), np.int64(5), None, id="numpy-integer"),
        pytest.param(Limit(1, 10, integer=True), 11, "must be between 1 and 10, not 11", id="above"),
        pytest.param(Limit(1, 10, integer=True), 2.0, "must be an integer, not 2.0", id="float-for-int"),
        pytest.param(Limit(0.0, 1.0), True, "must be a number, not True", id="bool"),
        pytest.param(Limit(0.0, 1.0), "0.5", "must be a number, not '0.5'", id="string"),
        pytest.param(Limit(0.0, 1.0), float("nan"), "must be between 0 and 1, not nan", id="nan"),
        pytest.param(
            Limit(0.0, 1e12), float("inf"), "must be between 0 and 1,000,000,000,000, not inf", id="inf"
        ),
        pytest.param(Limit(1e-9, 1.0), 0.0, "must be between 1e-09 and 1, not 0.0", id="small-bound"),
    ],
)
def test_limit_problem(limit: Limit, value: Any, problem: str | None) -> None:
    assert limit.problem(value) == problem


def test_calls_per_instance_multiplies_nested_repeats(cfg: synth.SynthConfig) -> None:
    t = cfg.tracelets[0]
    assert calls_per_instance(t) == 2
    a, b = t.calls
    deep = dataclasses.replace(t, calls=(a, dataclasses.replace(b, repeat=(1, 3))))
    assert calls_per_instance(deep) == 4
    huge = dataclasses.replace(t, calls=(a, dataclasses.replace(b, repeat=(0, 10**9))))
    assert calls_per_instance(huge) == MAX_CALLS + 1  # capped, never a huge number
    assert tracelet_problem(deep) is None
    assert "more than 10,000 calls" in str(tracelet_problem(huge))


# --- one validator for the file, the flags and replace() ------------------------------


@pytest.mark.parametrize(
    ("change", "message"),
    [
        pytest.param(
            {"messages": 0}, "trace.messages: must be between 1 and 1,000,000,000, not 0", id="messages"
        ),
        pytest.param({"seed": -1}, "trace.seed: must be between 0", id="seed"),
        pytest.param({"parallelism": float("inf")}, "trace.parallelism: must be between", id="parallelism"),
        pytest.param(
            {"duration_s": 5.0}, "give exactly one of trace.messages and trace.duration_s", id="both"
        ),
        pytest.param(
            {"messages": None}, "give exactly one of trace.messages and trace.duration_s", id="neither"
        ),
        pytest.param(
            {"start_ns": 253_370_764_800 * 10**9},
            "trace.start: must be an instant from 1970-01-01T00:00:00Z to 2200-01-01T00:00:00Z",
            id="start-9999",
        ),
        pytest.param({"resolution_ns": 0}, "trace.resolution_s: must be 1 ns to 1 s", id="resolution"),
    ],
)
def test_generate_checks_a_replaced_config(cfg: synth.SynthConfig, change: dict, message: str) -> None:
    bad = dataclasses.replace(cfg, **change)
    assert _message(synth.ConfigError, synth.generate_table, bad).startswith(message)


@pytest.mark.parametrize(
    ("faults", "message"),
    [
        pytest.param(
            {"skew": {"A": (1e12, 0.0)}}, "faults.skew: A: offset_s must be between -86,400", id="skew"
        ),
        pytest.param({"skew": {"A": (0.0, 1e9)}}, "faults.skew: A: drift_ppm must be between", id="drift"),
        pytest.param({"skew": {"Z": (0.1, 0.0)}}, "faults.skew: unknown node 'Z'", id="skew-node"),
        pytest.param({"loss_rate_pps": -1.0}, "faults.loss.rate_pps: must be between", id="rate"),
        pytest.param(
            {"loss_rate_pps": 10.0, "loss_queue": 0}, "faults.loss.queue: must be between 1", id="queue"
        ),
        pytest.param({"jitter_s": 1e300}, "faults.jitter.std_s: must be between 0 and 86,400", id="jitter"),
        pytest.param({"ids": "random"}, "faults.ids.mode: unknown mode 'random'", id="ids"),
    ],
)
def test_generate_checks_replaced_faults(cfg: synth.SynthConfig, faults: dict, message: str) -> None:
    bad = dataclasses.replace(cfg, faults=dataclasses.replace(cfg.faults, **faults))
    assert _message(synth.ConfigError, synth.generate_table, bad).startswith(message)


def test_generate_checks_replaced_tracelets(cfg: synth.SynthConfig) -> None:
    t = cfg.tracelets[0]
    big = dataclasses.replace(t, calls=(t.calls[0], dataclasses.replace(t.calls[1], repeat=(1, 10**6))))
    many = dataclasses.replace(t, clients=10**6)
    for spec, message in [
        (big, "tracelet: 'req': one instance makes more than 10,000 calls"),
        (many, "tracelet: 'req': clients must be between 1 and 100,000"),
    ]:
        bad = dataclasses.replace(cfg, tracelets=(spec,))
        assert _message(synth.ConfigError, synth.generate_table, bad).startswith(message)


def test_with_overrides_names_the_label(cfg: synth.SynthConfig) -> None:
    cases = [
        ({"loss_rate_pps": 0.0, "labels": {"loss_rate_pps": "--loss-rate"}}, "--loss-rate: must be between"),
        ({"loss_queue": 8}, "faults.loss.queue needs a capture rate: faults.loss.rate_pps PPS"),
        ({"messages": 10, "duration_s": 1.0}, "give trace.messages or trace.duration_s, not both"),
    ]
    for changes, message in cases:
        assert _message(synth.ConfigError, lambda c=changes: cfg.with_overrides(**c)).startswith(message)


def test_with_overrides_replaces_the_size_and_merges_skews(cfg: synth.SynthConfig) -> None:
    skewed = cfg.with_overrides(skew={"A": (0.01, 0.0)})
    both = skewed.with_overrides(skew={"B": (-0.02, 0.0)}, duration_s=2.0)
    assert dict(both.faults.skew) == {"A": (0.01, 0.0), "B": (-0.02, 0.0)}
    assert (both.messages, both.duration_s) == (None, 2.0)
    back = both.with_overrides(messages=100, loss_rate_pps=50.0, loss_queue=4)
    assert (back.messages, back.duration_s) == (100, None)
    assert (back.faults.loss_rate_pps, back.faults.loss_queue) == (50.0, 4)


# --- bounds met while running ---------------------------------------------------------


def test_timestamps_past_2262_are_refused(tmp_path: Path) -> None:
    text = TOML.replace("seed = 5", 'seed = 5\nstart = "2199-01-01T00:00:00Z"').replace(
        "think_s = [0.0, 0.01]", "think_s = [86400, 86400]"
    )
    config = synth.parse_config(text, "c.toml").with_overrides(messages=10**6)
    message = _message(ParameterError, synth.generate_trace, config, tmp_path / "t.parquet")
    assert message.startswith("c.toml: a message would be stamped "), message
    assert "outside nanosecond time (1970-01-01 to 2262-04-11)" in message
    assert sorted(tmp_path.iterdir()) == []


def test_too_many_distinct_patterns_are_refused() -> None:
    choices = "".join(
        f'[[tracelet.call]]\nid = "c{i}"\nparent = "r"\nto = ["a", "b"]\nbefore_s = [0.001, 0]\n'
        for i in range(40)
    )
    text = (
        'nodes = ["c", "a", "b"]\n[trace]\nmessages = 2000000\n[[tracelet]]\nclient = "c"\n'
        '[[tracelet.call]]\nid = "r"\nto = "a"\nbefore_s = [0.001, 0]\n' + choices
    )
    message = _message(ParameterError, synth.generate_table, synth.parse_config(text, "c.toml"))
    assert "distinct patterns hold more than 100,000 calls (the limit of the ground truth)" in message


def test_messages_held_back_by_a_skew_are_bounded(
    cfg: synth.SynthConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(synth.generate, "_MAX_WAITING", 20_000)
    skewed = cfg.with_overrides(messages=200_000, skew={"B": (-80_000.0, 0.0)})
    message = _message(ParameterError, synth.generate_table, skewed)
    assert re.match(r"c\.toml: [\d,]+ messages wait to be sorted, more than 20,000: ", message), message


def test_a_duration_that_passes_the_message_bound_stops(
    cfg: synth.SynthConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    timed = cfg.with_overrides(duration_s=20.0)
    made = synth.generate_table(timed)[0].num_rows
    # Under twice the limit, the estimate lets it start; the count stops it.
    monkeypatch.setattr(synth.generate, "MAX_MESSAGES", int(made * 0.7))
    message = _message(ParameterError, synth.generate_table, timed)
    assert message.startswith("c.toml: 20 s of this workload make more than"), message
    monkeypatch.setattr(synth.generate, "MAX_MESSAGES", made // 10)
    message = _message(synth.ConfigError, synth.generate_table, timed)
    assert message.startswith("c.toml: 20 s of this workload make about"), message


def test_calibration_stays_within_the_loop_bounds(cfg: synth.SynthConfig) -> None:
    free = dataclasses.replace(cfg.tracelets[0], clients=None)
    fixed = dataclasses.replace(cfg.tracelets[0], name="fixed", clients=7)
    two = dataclasses.replace(cfg, tracelets=(free, fixed), parallelism=50.0)
    loops = synth.generate._fit_loops(two, [10**9, 7], [2, 2])
    assert loops[1] == 7
    assert sum(loops) <= 100_000
    assert sum(n * 2 for n in loops) <= 250_000
    assert synth.generate._fit_loops(two, [40, 7], [2, 2]) == [40, 7]


# --- memory that stays bounded --------------------------------------------------------


@pytest.mark.parametrize("text", [FAST_AND_SLOW, HEAVY_TAIL], ids=["fast-and-slow", "heavy-tail"])
def test_loops_far_ahead_wait(text: str) -> None:
    """Messages waiting for the horizon stay a few rounds' worth, not the whole trace."""
    engine = synth.generate._engine(synth.parse_config(text))
    waiting, written = 0, 0
    for table in engine.run():
        written += table.num_rows
        waiting = max(waiting, engine.buffer["t"].size)
    assert written >= 2_000_000
    assert waiting < 400_000


def test_truth_thins_its_sample_but_keeps_counts_and_means(monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = synth.load_config(
        Path(__file__).resolve().parents[2] / "samples" / "synth" / "gateway-fanout.toml"
    ).with_overrides(messages=100_000)
    _, exact = synth.generate_table(cfg)
    monkeypatch.setattr(synth.truth, "_KEPT_VALUES", 5_000)
    _, thin = synth.generate_table(cfg)
    assert [(p["id"], p["count"]) for p in thin["patterns"]] == [
        (p["id"], p["count"]) for p in exact["patterns"]
    ]

    def stats(node: dict[str, Any]) -> list[dict[str, float]]:
        out = [node["latency_s"]] + ([node["delay_s"]] if node["delay_s"] else [])
        return out + [s for child in node["children"] for s in stats(child)]

    for e, t in zip(exact["patterns"], thin["patterns"], strict=True):
        for a, b in zip(stats(e["root"]), stats(t["root"]), strict=True):
            assert b["mean"] == pytest.approx(a["mean"], rel=1e-9)
            assert b["std"] == pytest.approx(a["std"], rel=1e-6, abs=1e-12)
            assert b["p50"] == pytest.approx(a["p50"], rel=0.2)


def test_truth_sample_pieces_do_not_grow_with_the_trace() -> None:
    """Once the sample is thinned most batches add nothing to a pattern: no empty piece is
    kept, and a pattern's pieces are joined past a bound, so its arrays stay as many
    however long the trace (they grew by three per pattern per batch: a 200 M-message
    trace held hundreds of thousands of them)."""
    book = synth.truth.PatternBook([], [])
    book.level = 4  # keep instance j when j % 16 == 0 (past the first _HEAD)
    pat = synth.truth._Pattern("p", 0, b"", [0, 1], None, ["a", "b"], count=1_000)
    for batch in range(3_000):  # batches of 1-3 instances of this pattern
        k = 1 + batch % 3
        values = np.full((2, k), float(batch), np.float32)
        book._keep(pat, values, values)
        pat.count += k
    assert 1 <= len(pat.index) <= synth.truth._PIECES + 1
    assert all(piece.size for piece in pat.index)
    kept = np.concatenate(pat.index)
    assert kept.tolist() == [j for j in range(1_000, pat.count) if j % 16 == 0]
    assert np.concatenate(pat.lat, axis=1).shape == (2, kept.size)


# --- SIGTERM --------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["t.parquet", "t.txt"])
def test_sigterm_while_writing_leaves_nothing(cfg: synth.SynthConfig, tmp_path: Path, name: str) -> None:
    if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        pytest.skip("SIGTERM has a handler in this process")

    def terminate(done: int) -> None:
        os.kill(os.getpid(), signal.SIGTERM)

    with pytest.raises(KeyboardInterrupt):
        synth.generate_trace(cfg.with_overrides(messages=300_000), tmp_path / name, on_progress=terminate)
    assert sorted(tmp_path.iterdir()) == []
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


def test_sigterm_handler_of_the_program_is_left_alone() -> None:
    def mine(signum: int, frame: object) -> None:
        pass

    previous = signal.signal(signal.SIGTERM, mine)
    try:
        with sigterm_as_interrupt():
            assert signal.getsignal(signal.SIGTERM) is mine
        assert signal.getsignal(signal.SIGTERM) is mine
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_sigterm_is_not_taken_over_off_the_main_thread() -> None:
    seen: list[object] = []

    def work() -> None:
        with sigterm_as_interrupt():
            seen.append(signal.getsignal(signal.SIGTERM))

    thread = threading.Thread(target=work)
    thread.start()
    thread.join()
    assert seen == [signal.getsignal(signal.SIGTERM)]
