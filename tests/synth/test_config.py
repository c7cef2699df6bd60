"""Reading configuration files: the fields, their defaults, and errors that name FILE:LINE: field.

Each bad configuration is written to a file; the offending line carries a ``# <-`` marker,
which is removed before writing, and the expected line number is that line's.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import synth
from tracefmt import ParameterError, TraceFileError, WirepathError

GOOD = """\
# A small workload with two tracelets (errors below are planted in the second one).
nodes = ["client", "A", "B", "C"]

[trace]
seed = 3
messages = 100

[[tracelet]]
name = "one"
client = "client"

[[tracelet.call]]
id = "a"
to = "A"
before_s = [0.001, 0.0001]

[[tracelet.call]]
id = "b"
parent = "a"
to = "B"

[[tracelet]]
name = "two"
client = "client"

[[tracelet.call]]
id = "a"
to = "A"

[[tracelet.call]]
id = "b"
parent = "a"
to = ["B", "C"]
before_s = [0.002, 0.0002]
"""

SECOND_CALL = 'id = "b"\nparent = "a"\nto = ["B", "C"]\n'


def _second_call(replacement: str) -> str:
    """GOOD with the second tracelet's second call's fields replaced."""
    assert GOOD.count(SECOND_CALL) == 1
    return GOOD.replace(SECOND_CALL, replacement)


CASES = [
    pytest.param(
        _second_call('id = "b"\nparent = "a"\nto = ["B", "X"]  # <-\n'),
        "tracelet.call.to",
        "unknown node 'X'",
        id="unknown-node-in-to",
    ),
    pytest.param(
        GOOD.replace('name = "two"\nclient = "client"', 'name = "two"\nclient = "nobody"  # <-'),
        "tracelet.client",
        "unknown node 'nobody'",
        id="unknown-client",
    ),
    pytest.param(
        _second_call(SECOND_CALL + "between_s = { '*' = [0.001, 0.0], Z = [0.1, 0.0] }  # <-\n"),
        "tracelet.call.between_s",
        "unknown node 'Z'",
        id="unknown-node-in-delay",
    ),
    pytest.param(
        GOOD.replace("before_s = [0.002, 0.0002]", "before_s = [0.002, -0.0002]  # <-"),
        "tracelet.call.before_s",
        "std must be between 0 and 86,400, not -0.0002",
        id="negative-std",
    ),
    pytest.param(
        GOOD.replace("before_s = [0.002, 0.0002]", "before_s = [-0.002, 0.0002]  # <-"),
        "tracelet.call.before_s",
        "mean must be between 0 and 86,400, not -0.002",
        id="negative-mean",
    ),
    pytest.param(
        GOOD.replace("before_s = [0.002, 0.0002]", "before_s = 0.002  # <-"),
        "tracelet.call.before_s",
        "must be [mean, std]",
        id="delay-not-a-list",
    ),
    pytest.param(
        GOOD[: GOOD.rindex("[[tracelet.call]]")]
        + '[[tracelet.call]]  # <-\nid = "b"\nparent = "a"\nbefore_s = [0.002, 0.0002]\n',
        "tracelet.call.to",
        "missing",
        id="missing-to",
    ),
    pytest.param(
        "# <-\n" + GOOD.replace('nodes = ["client", "A", "B", "C"]\n', ""),
        "nodes",
        "missing",
        id="missing-nodes",
    ),
    pytest.param(
        _second_call(SECOND_CALL + 'colour = "red"  # <-\n'),
        "tracelet.call.colour",
        "unknown field",
        id="unknown-call-field",
    ),
    pytest.param(
        GOOD.replace("messages = 100", "messages = 100\nmesages = 5  # <-"),
        "trace.mesages",
        "unknown field",
        id="unknown-trace-field",
    ),
    pytest.param(
        GOOD.replace("[trace]\nseed = 3\nmessages = 100", "[trace]  # <-\nseed = 3"),
        "trace",
        "needs messages = N or duration_s = S",
        id="no-size",
    ),
    pytest.param(
        _second_call('id = "b"\nparent = "zz"  # <-\nto = "B"\n'),
        "tracelet.call.parent",
        "unknown call 'zz'",
        id="unknown-parent",
    ),
    pytest.param(
        GOOD[: GOOD.rindex("[[tracelet.call]]")] + '[[tracelet.call]]  # <-\nid = "b"\nto = "B"\n',
        "tracelet.call.parent",
        "missing",
        id="missing-parent",
    ),
    pytest.param(
        _second_call('id = "a"  # <-\nparent = "a"\nto = "B"\n'),
        "tracelet.call.id",
        "must be a unique string",
        id="duplicate-id",
    ),
    pytest.param(
        _second_call(SECOND_CALL + "repeat = [3, 1]  # <-\n"),
        "tracelet.call.repeat",
        "must be a count >= 1 or [min, max] counts",
        id="repeat-reversed",
    ),
    pytest.param(
        _second_call(SECOND_CALL + "repeat = 0  # <-\n"),
        "tracelet.call.repeat",
        "must be a count >= 1",
        id="repeat-zero",
    ),
    pytest.param(
        _second_call(SECOND_CALL + "weights = [1]  # <-\n"),
        "tracelet.call.weights",
        "must be 2 positive numbers",
        id="weights-count",
    ),
    pytest.param(
        _second_call(SECOND_CALL + "p = 1.5  # <-\n"),
        "tracelet.call.p",
        "must be between 0 and 1, not 1.5",
        id="p-above-1",
    ),
    pytest.param(
        GOOD.replace('name = "two"', 'name = "two"\nthink_s = [2.0, 1.0]  # <-'),
        "tracelet.think_s",
        "must be [min, max] seconds",
        id="think-reversed",
    ),
    pytest.param(
        GOOD.replace('name = "two"', 'name = "two"\nkind = "rest"  # <-'),
        "tracelet.kind",
        "unknown kind 'rest'",
        id="unknown-kind",
    ),
    pytest.param(
        GOOD + '\n[faults.ids]\nmode = "random"  # <-\n',
        "faults.ids.mode",
        "unknown mode 'random'",
        id="unknown-ids-mode",
    ),
    pytest.param(
        GOOD + "\n[faults.skew]\nNOPE = 0.1  # <-\n",
        "faults.skew.NOPE",
        "unknown node 'NOPE'",
        id="unknown-skew-node",
    ),
    pytest.param(
        GOOD + "\n[faults.loss]\nrate_pps = 100\nqueue = 0  # <-\n",
        "faults.loss.queue",
        "must be between 1",
        id="loss-queue-zero",
    ),
    pytest.param(
        GOOD + "\n[faults.jiter]  # <-\nstd_s = 0.001\n",
        "faults.jiter",
        "unknown field",
        id="unknown-faults-section",
    ),
    pytest.param(
        GOOD + "\n[trce]  # <-\nseed = 1\n",
        "trce",
        "unknown field",
        id="unknown-top-level-table",
    ),
    pytest.param(
        'nodes = ["s", "r"]\n[trace]\nmessages = 10\n[[tracelet]]\nkind = "messages"\nclient = "s"\n'
        '[[tracelet.hop]]\nto = "r"\n[[tracelet.hop]]\nto = "q"  # <-\n',
        "tracelet.hop.to",
        "unknown node 'q'",
        id="unknown-node-in-hop",
    ),
]


def _write(tmp_path: Path, text: str) -> tuple[Path, int]:
    """Write ``text`` without its ``# <-`` marker; return the path and the marked line."""
    lines = text.splitlines()
    marked = [i for i, line in enumerate(lines, 1) if line.rstrip().endswith("# <-")]
    assert len(marked) == 1, "exactly one marked line"
    clean = "\n".join(line.replace("  # <-", "").replace("# <-", "") for line in lines) + "\n"
    path = tmp_path / "bad.toml"
    path.write_text(clean, encoding="utf-8")
    return path, marked[0]


def test_good_config_loads(tmp_path: Path) -> None:
    path = tmp_path / "good.toml"
    path.write_text(GOOD, encoding="utf-8")
    synth.load_config(path)


@pytest.mark.parametrize(("text", "field", "problem"), CASES)
def test_bad_config_names_file_line_and_field(tmp_path: Path, text: str, field: str, problem: str) -> None:
    path, line = _write(tmp_path, text)
    with pytest.raises(synth.ConfigError) as info:
        synth.load_config(path)
    message = str(info.value)
    prefix = f"{path}:{line}: {field}: "
    assert message.startswith(prefix), message
    assert problem in message[len(prefix) :], message


def test_invalid_toml_names_file_and_line(tmp_path: Path) -> None:
    path, line = _write(tmp_path, GOOD.replace('to = "A"\nbefore_s', 'to = "A  # <-\nbefore_s'))
    with pytest.raises(synth.ConfigError) as info:
        synth.load_config(path)
    assert str(info.value).startswith(f"{path}:{line}: "), str(info.value)


def test_config_error_is_a_parameter_error() -> None:
    assert issubclass(synth.ConfigError, ParameterError)
    assert issubclass(synth.ConfigError, WirepathError)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(TraceFileError, match="no such file"):
        synth.load_config(tmp_path / "nope.toml")


def test_parse_config_uses_the_given_name() -> None:
    with pytest.raises(synth.ConfigError, match=r"^mine\.toml:1: nodes: "):
        synth.parse_config("[trace]\nmessages = 1\n", "mine.toml")


# --- what a good file reads as -----------------------------------------------------------


def test_fields_and_defaults(stats_toml: str) -> None:
    cfg = synth.parse_config(stats_toml, "stats.toml")
    assert cfg.path == "stats.toml"
    assert cfg.nodes == ("client", "client2", "A", "B", "C", "D", "E")
    assert (cfg.seed, cfg.messages, cfg.duration_s, cfg.parallelism) == (5, 50000, None, 1.0)
    assert cfg.resolution_ns == 1
    assert cfg.start_ns == 1_704_067_200 * 10**9  # 2024-01-01T00:00:00Z
    assert cfg.faults == synth.Faults()
    (t,) = cfg.tracelets
    assert (t.name, t.kind, t.client, t.client_weights) == (
        "tracelet0",
        "rpc",
        ("client", "client2"),
        (1.0, 3.0),
    )
    assert (t.weight, t.clients, t.think_s) == (1.0, 1, (0.0, 0.01))
    a, b, c, e = t.calls
    assert (a.id, a.parent, a.to, a.p, a.repeat, a.group) == ("a", None, ("A",), 1.0, (1, 1), None)
    assert a.before.default.components == ((0.004, 0.0005, 1.0),)
    assert a.between.default.components == ((0.002, 0.0003, 1.0),)
    assert (b.parent, b.p) == ("a", 0.3)
    assert b.after.default.components == ((0.0, 0.0, 1.0),)  # default [0, 0]
    assert (c.to, c.weights) == (("C", "D"), (3.0, 1.0))
    assert c.before.for_node("C").components == ((0.005, 0.0006, 1.0),)
    assert c.before.for_node("D").components == ((0.008, 0.0007, 1.0),)
    assert e.repeat == (1, 3)
    lines = stats_toml.splitlines()
    assert [lines[call.line - 1] for call in t.calls] == ["[[tracelet.call]]"] * 4
    assert lines[t.line - 1] == "[[tracelet]]"


def test_faults_fields() -> None:
    text = (
        'nodes = ["c", "A", "B"]\n[trace]\nduration_s = 2.5\nresolution_s = 1e-3\n'
        '[[tracelet]]\nclient = "c"\n[[tracelet.call]]\nto = "A"\n'
        "[faults.loss]\nrate_pps = 300\n"
        "[faults.skew]\nA = 0.03\nB = { offset_s = -0.01, drift_ppm = 5 }\n"
        "[faults.duplicates]\nfraction = 0.2\ndelay_s = [1e-4, 1e-5]\n"
        '[faults.ids]\nmode = "reused"\nmodulus = 8\n'
        "[faults.jitter]\nstd_s = 2e-6\n"
    )
    cfg = synth.parse_config(text)
    assert (cfg.messages, cfg.duration_s, cfg.resolution_ns) == (None, 2.5, 1_000_000)
    f = cfg.faults
    assert (f.loss_rate_pps, f.loss_queue) == (300, 64)
    assert dict(f.skew) == {"A": (0.03, 0.0), "B": (-0.01, 5.0)}
    assert f.dup_fraction == 0.2
    assert f.dup_delay.components == ((1e-4, 1e-5, 1.0),)
    assert (f.ids, f.ids_fraction, f.ids_modulus) == ("reused", 1.0, 8)
    assert f.jitter_s == 2e-6


def test_with_overrides_ignores_none(stats_toml: str) -> None:
    cfg = synth.parse_config(stats_toml)
    new = cfg.with_overrides(seed=9, messages=None, parallelism=3.0)
    assert (new.seed, new.messages, new.parallelism) == (9, 50000, 3.0)


def test_delay_spread_sets_every_std_from_its_mean() -> None:
    from pathlib import Path

    samples = Path(__file__).resolve().parents[2] / "samples" / "synth"
    for name in ("multitier-slow.toml", "mail.toml"):
        cfg = synth.with_delay_spread(synth.load_config(samples / name), 0.05)
        delays = [d for t in cfg.tracelets for c in t.calls for d in (c.before, c.between, c.after)]
        delays += [h.delay for t in cfg.tracelets for h in t.hops]
        assert delays
        for nd in delays:
            for d in (nd.default, *nd.by_node.values()):
                for mean, std, _ in d.components:
                    assert std == pytest.approx(0.05 * mean)


@pytest.mark.parametrize("ratio", [-0.1, float("nan"), float("inf")])
def test_delay_spread_rejects_bad_ratios(ratio: float) -> None:
    cfg = synth.parse_config(
        'nodes = ["c", "s"]\n[trace]\nmessages = 10\n[[tracelet]]\nclient = "c"\n'
        '[[tracelet.call]]\nto = "s"\n'
    )
    with pytest.raises(ParameterError, match="ratio"):
        synth.with_delay_spread(cfg, ratio)
