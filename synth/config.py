"""The synth configuration file (TOML), read into frozen dataclasses.

The file format is documented field by field in ``synth/README.md``. Every problem
is reported as ``FILE:LINE: field: what is wrong (what would be right)``.
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np

from synth.limits import (
    CLIENTS,
    DRIFT,
    DURATION,
    FRACTION,
    MAX_TIME_S,
    MESSAGES,
    MODULUS,
    OFFSET,
    PARALLELISM,
    PROBABILITY,
    QUEUE,
    RATE,
    REPEAT,
    RESOLUTION,
    RESOLUTION_NS,
    SEED,
    START_NS,
    TIME,
    WEIGHT,
    Limit,
    tracelet_problem,
)
from tracefmt import KEY_COLUMNS, ParameterError, ParseError, TraceFileError
from tracefmt.configfile import load_toml, read_config_text

__all__ = [
    "CallSpec",
    "ConfigError",
    "Delay",
    "Faults",
    "HopSpec",
    "KeySpec",
    "NodeDelay",
    "SynthConfig",
    "TraceletSpec",
    "check_config",
    "load_config",
    "parse_config",
    "with_delay_spread",
]

PathLike = str | os.PathLike[str]
DEFAULT_START = "2024-01-01T00:00:00Z"
START_RANGE = "an instant from 1970-01-01T00:00:00Z to 2200-01-01T00:00:00Z"
ID_MODES = ("unique", "missing", "reused", "zero")


class ConfigError(ParameterError):
    """A synth configuration is invalid; the message names the file line and the field."""


@dataclass(frozen=True)
class Delay:
    """A delay in seconds: a mixture of Gaussians, each truncated at 0.

    Written ``[mean, std]`` or, for several peaks, ``[[mean, std, weight], ...]``.
    """

    components: tuple[tuple[float, float, float], ...] = ((0.0, 0.0, 1.0),)

    @property
    def mean_s(self) -> float:
        """The mean before truncation (weighted over components)."""
        total = sum(w for _, _, w in self.components)
        return sum(m * w for m, _, w in self.components) / total

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """``n`` draws in seconds, float64, each >= 0."""
        if len(self.components) == 1:
            mean, std, _ = self.components[0]
            x = rng.normal(mean, std, n) if std > 0 else np.full(n, mean)
        else:
            w = np.array([c[2] for c in self.components])
            pick = rng.choice(len(w), size=n, p=w / w.sum())
            means = np.array([c[0] for c in self.components])[pick]
            stds = np.array([c[1] for c in self.components])[pick]
            x = means + stds * rng.standard_normal(n)
        return np.maximum(x, 0.0)


@dataclass(frozen=True)
class NodeDelay:
    """A delay that may depend on the node it happens at (``{"*" = [...], WS2 = [...]}``)."""

    default: Delay = field(default_factory=Delay)
    by_node: Mapping[str, Delay] = field(default_factory=dict)

    def for_node(self, node: str) -> Delay:
        return self.by_node.get(node, self.default)


@dataclass(frozen=True)
class CallSpec:
    """One call of an RPC tracelet: the parent's node calls ``to``.

    ``before``: at the callee, from receiving the call to its first child call (or to
    the return of a leaf, plus ``after``); ``between``: from a child's return to the
    next child call; ``after``: from the last child's return to the return; ``lead``:
    at the caller, from the moment its turn comes (its parallel group's start) to this
    call leaving, so that the calls of a group leave a little apart, in any order.
    """

    id: str
    parent: str | None
    to: tuple[str, ...]
    weights: tuple[float, ...]
    p: float = 1.0
    repeat: tuple[int, int] = (1, 1)
    group: str | None = None
    before: NodeDelay = field(default_factory=NodeDelay)
    between: NodeDelay = field(default_factory=NodeDelay)
    after: NodeDelay = field(default_factory=NodeDelay)
    lead: NodeDelay = field(default_factory=NodeDelay)
    line: int = 0


@dataclass(frozen=True)
class HopSpec:
    """One message of a one-way tracelet: the previous receiver sends to ``to`` after ``delay``."""

    to: tuple[str, ...]
    weights: tuple[float, ...]
    p: float = 1.0
    delay: NodeDelay = field(default_factory=NodeDelay)
    line: int = 0


@dataclass(frozen=True)
class TraceletSpec:
    """A template of one causal path, instantiated many times."""

    name: str
    kind: str  # "rpc" or "messages"
    client: tuple[str, ...]
    client_weights: tuple[float, ...]
    weight: float = 1.0
    clients: int | None = None  # fixed number of client loops (else from parallelism)
    think_s: tuple[float, float] = (0.0, 0.0)
    calls: tuple[CallSpec, ...] = ()
    hops: tuple[HopSpec, ...] = ()
    line: int = 0


@dataclass(frozen=True)
class Faults:
    """What goes wrong on the way to the trace (all off by default)."""

    loss_rate_pps: float | None = None
    loss_queue: int = 64
    skew: Mapping[str, tuple[float, float]] = field(default_factory=dict)  # node -> (offset_s, drift_ppm)
    dup_fraction: float = 0.0
    dup_delay: Delay = field(default_factory=lambda: Delay(((20e-6, 5e-6, 1.0),)))
    ids: str = "unique"
    ids_fraction: float = 1.0
    ids_modulus: int = 16
    jitter_s: float = 0.0


@dataclass(frozen=True)
class KeySpec:
    """Which calls carry their request's key on the wire (``[keys]``, ``synth.keys``):
    those ``callers`` send (None: every caller), a ``share`` of them, in ``column``."""

    callers: tuple[str, ...] | None = None
    share: float = 1.0
    column: str = "trace_id"


@dataclass(frozen=True)
class SynthConfig:
    """A whole configuration; ``replace()`` it to apply command-line overrides."""

    path: str
    nodes: tuple[str, ...]
    tracelets: tuple[TraceletSpec, ...]
    seed: int = 1
    messages: int | None = None
    duration_s: float | None = None
    parallelism: float = 1.0
    start_ns: int = 0
    resolution_ns: int = 1000
    faults: Faults = field(default_factory=Faults)
    keys: KeySpec | None = None

    def with_overrides(self, *, labels: Mapping[str, str] | None = None, **changes: Any) -> SynthConfig:
        """A copy with fields replaced, checked like the file's (``check_config``).

        Parameters
        ----------
        labels : mapping, optional
            What to call an overridden field in an error, e.g. ``{"messages": "--messages"}``
            (default: its name in the file, ``trace.messages``).
        **changes
            Top-level fields (``seed``, ``messages``, ``duration_s``, ``parallelism``, ...)
            or fault fields (``loss_rate_pps``, ``loss_queue``, ``skew``, ...); None values
            are ignored. ``messages`` drops the file's ``duration_s`` and the other way
            round; ``skew`` (node -> (offset_s, drift_ppm)) is merged into the file's.

        Raises
        ------
        ConfigError
            ``LABEL: problem (what is allowed)``.

        Examples
        --------
        >>> cfg = parse_config('nodes = ["c", "s"]\\n[trace]\\nmessages = 100\\n[[tracelet]]\\n'
        ...                    'client = "c"\\n[[tracelet.call]]\\nto = "s"\\nbefore_s = [0.01, 0.0]\\n')
        >>> cfg.with_overrides(duration_s=5.0).messages is None
        True
        >>> cfg.with_overrides(messages=0, labels={"messages": "--messages"})
        Traceback (most recent call last):
        ...
        synth.config.ConfigError: --messages: must be between 1 and 1,000,000,000, not 0
        """
        given = {k: v for k, v in changes.items() if v is not None}
        names = {**_LABELS, **(labels or {})}
        if "messages" in given and "duration_s" in given:
            raise ConfigError(f"give {names['messages']} or {names['duration_s']}, not both")
        if "messages" in given or "duration_s" in given:
            given = {"messages": None, "duration_s": None, **given}
        fault_names = {f.name for f in fields(Faults)}
        faults = {k: v for k, v in given.items() if k in fault_names}
        if "skew" in faults:
            faults["skew"] = {**self.faults.skew, **faults["skew"]}
        if "loss_queue" in faults and faults.get("loss_rate_pps", self.faults.loss_rate_pps) is None:
            raise ConfigError(f"{names['loss_queue']} needs a capture rate: {names['loss_rate_pps']} PPS")
        top = {k: v for k, v in given.items() if k not in fault_names}
        config = replace(self, **top, faults=replace(self.faults, **faults))
        return check_config(config, labels=names)


# --- checking a whole configuration -----------------------------------------------------

# What each field is called in the file (and in errors), and the bounds of the numbers.
_TRACE_LIMITS = {
    "seed": ("trace.seed", SEED),
    "messages": ("trace.messages", MESSAGES),
    "duration_s": ("trace.duration_s", DURATION),
    "parallelism": ("trace.parallelism", PARALLELISM),
}
_FAULT_LIMITS = {
    "loss_rate_pps": ("faults.loss.rate_pps", RATE),
    "loss_queue": ("faults.loss.queue", QUEUE),
    "dup_fraction": ("faults.duplicates.fraction", FRACTION),
    "ids_fraction": ("faults.ids.fraction", FRACTION),
    "ids_modulus": ("faults.ids.modulus", MODULUS),
    "jitter_s": ("faults.jitter.std_s", TIME),
}
_LABELS = {k: name for k, (name, _) in (_TRACE_LIMITS | _FAULT_LIMITS).items()} | {
    "start_ns": "trace.start",
    "resolution_ns": "trace.resolution_s",
    "skew": "faults.skew",
    "ids": "faults.ids.mode",
    "tracelets": "tracelet",
}


def _numbers_problem(config: SynthConfig) -> tuple[str, str] | None:
    """The first top-level or fault number out of its bounds: (field, problem)."""
    values = [(k, getattr(config, k), lim) for k, (_, lim) in _TRACE_LIMITS.items()]
    values += [(k, getattr(config.faults, k), lim) for k, (_, lim) in _FAULT_LIMITS.items()]
    for key, value, limit in values:
        problem = None if value is None else limit.problem(value)
        if problem is not None:
            return key, problem
    if START_NS.problem(config.start_ns) is not None:
        return "start_ns", f"must be {START_RANGE}, not {config.start_ns!r} ns"
    if RESOLUTION_NS.problem(config.resolution_ns) is not None:
        return "resolution_ns", f"must be 1 ns to 1 s, not {config.resolution_ns!r} ns"
    if config.faults.ids not in ID_MODES:
        return "ids", f"unknown mode {config.faults.ids!r} (must be one of {', '.join(ID_MODES)})"
    return None


def _skew_problem(config: SynthConfig) -> str | None:
    """Why a clock skew is not allowed: an unknown node, an offset or a drift out of bounds."""
    for node, (offset_s, drift_ppm) in config.faults.skew.items():
        if node not in config.nodes:
            return f"unknown node {node!r} (declared nodes: {', '.join(config.nodes)})"
        for what, value, limit in (("offset_s", offset_s, OFFSET), ("drift_ppm", drift_ppm, DRIFT)):
            problem = limit.problem(value)
            if problem is not None:
                return f"{node}: {what} {problem}"
    return None


def _tracelets_problem(config: SynthConfig) -> str | None:
    """Why a tracelet cannot run: its client loops or the size of one instance."""
    for t in config.tracelets:
        problem = None if t.clients is None else CLIENTS.problem(t.clients)
        problem = f"clients {problem}" if problem else tracelet_problem(t)
        if problem is not None:
            return f"{t.name!r}: {problem}"
    return None


def check_config(config: SynthConfig, *, labels: Mapping[str, str] | None = None) -> SynthConfig:
    """``config`` if every value is within the bounds the file reader enforces, else an error.

    The generator calls it first, so a configuration changed with ``replace()`` or
    ``with_overrides`` is held to the same bounds as the file (``synth/limits.py``):
    the trace size, seed, parallelism, start, faults and the size of one instance.

    Parameters
    ----------
    config : SynthConfig
    labels : mapping, optional
        What to call a field in the error (default: its name in the file).

    Raises
    ------
    ConfigError
        ``FIELD: problem (what is allowed)``.
    """
    names = {**_LABELS, **(labels or {})}
    if (config.messages is None) == (config.duration_s is None):
        raise ConfigError(f"give exactly one of {names['messages']} and {names['duration_s']}")
    found = _numbers_problem(config)
    if found is not None:
        raise ConfigError(f"{names[found[0]]}: {found[1]}")
    for key, problem in (("skew", _skew_problem(config)), ("tracelets", _tracelets_problem(config))):
        if problem is not None:
            raise ConfigError(f"{names[key]}: {problem}")
    return config


# --- reading -------------------------------------------------------------------------

_HEADER = re.compile(r"^\s*(\[\[?)\s*([A-Za-z0-9_.\-\"]+?)\s*\]\]?\s*(#.*)?$")
_KEY = re.compile(r"^\s*\"?([A-Za-z0-9_\-*]+)\"?\s*=")


class _Lines:
    """Line numbers of tables and keys, found by scanning the text (tomllib gives none)."""

    def __init__(self, text: str) -> None:
        self.tables: dict[tuple[Any, ...], int] = {(): 1}
        self.keys: dict[tuple[Any, ...], dict[str, int]] = {(): {}}
        counters: dict[str, int] = {}
        current: tuple[Any, ...] = ()
        tracelet = -1
        for number, line in enumerate(text.splitlines(), 1):
            m = _HEADER.match(line)
            if m:
                name = m.group(2).replace('"', "")
                if m.group(1) == "[[" and name == "tracelet":
                    tracelet += 1
                    counters = {}
                    current = ("tracelet", tracelet)
                elif m.group(1) == "[[" and name.startswith("tracelet."):
                    sub = name.split(".", 1)[1]
                    counters[sub] = counters.get(sub, -1) + 1
                    current = ("tracelet", tracelet, sub, counters[sub])
                else:
                    current = tuple(name.split("."))
                self.tables.setdefault(current, number)
                # A header is also a field of the table above it ([faults.loss] -> faults.loss).
                parent, leaf = tuple(name.split(".")[:-1]), name.split(".")[-1]
                self.keys.setdefault(parent, {}).setdefault(leaf, number)
                self.keys.setdefault(current, {})
                continue
            k = _KEY.match(line)
            if k:
                self.keys.setdefault(current, {}).setdefault(k.group(1), number)

    def line(self, where: tuple[Any, ...], key: str | None = None) -> int:
        if key is not None and key in self.keys.get(where, {}):
            return self.keys[where][key]
        return self.tables.get(where, 1)


class _Reader:
    def __init__(self, path: str, text: str) -> None:
        self.path = path
        self.lines = _Lines(text)

    def fail(self, where: tuple[Any, ...], key: str | None, message: str) -> ConfigError:
        label = ".".join(str(p) for p in where if not isinstance(p, int))
        field_name = f"{label}.{key}" if label and key else (key or label or "config")
        return ConfigError(f"{self.path}:{self.lines.line(where, key)}: {field_name}: {message}")

    def number(
        self,
        doc: Mapping[str, Any],
        where: tuple[Any, ...],
        key: str,
        default: Any,
        limit: Limit,
    ) -> Any:
        value = doc.get(key, default)
        problem = None if value is None else limit.problem(value)
        if problem is not None:
            raise self.fail(where, key, problem)
        return value

    def delay(self, doc: Mapping[str, Any], where: tuple[Any, ...], key: str, nodes: set[str]) -> NodeDelay:
        value = doc.get(key)
        if value is None:
            return NodeDelay()
        if isinstance(value, dict):
            by_node = {}
            for node, spec in value.items():
                if node != "*" and node not in nodes:
                    raise self.fail(
                        where, key, f"unknown node {node!r} (declared nodes: {', '.join(sorted(nodes))})"
                    )
                by_node[node] = self._one_delay(spec, where, key)
            default = by_node.pop("*", Delay())
            return NodeDelay(default, by_node)
        return NodeDelay(self._one_delay(value, where, key))

    def _one_delay(self, value: Any, where: tuple[Any, ...], key: str) -> Delay:
        hint = "[mean, std] in seconds, or [[mean, std, weight], ...] for several peaks"
        if not isinstance(value, list) or not value:
            raise self.fail(where, key, f"must be {hint}, not {value!r}")
        parts = value if isinstance(value[0], list) else [[*value, 1.0]]
        comps = []
        for part in parts:
            if len(part) != 3 or not all(
                isinstance(x, int | float) and not isinstance(x, bool) for x in part
            ):
                raise self.fail(where, key, f"must be {hint}, not {value!r}")
            mean, std, weight = (float(x) for x in part)
            for name, x, limit in (("mean", mean, TIME), ("std", std, TIME), ("weight", weight, WEIGHT)):
                problem = limit.problem(x)
                if problem is not None:
                    raise self.fail(where, key, f"{name} {problem}")
            comps.append((mean, std, weight))
        return Delay(tuple(comps))

    def choice(
        self, doc: Mapping[str, Any], where: tuple[Any, ...], key: str, nodes: set[str]
    ) -> tuple[tuple[str, ...], tuple[float, ...]]:
        value = doc.get(key)
        if value is None:
            raise self.fail(where, key, "missing (a node name, or a list of node names to choose from)")
        names = [value] if isinstance(value, str) else value
        if not isinstance(names, list) or not names or not all(isinstance(n, str) for n in names):
            raise self.fail(where, key, f"must be a node name or a list of node names, not {value!r}")
        for n in names:
            if n not in nodes:
                raise self.fail(
                    where, key, f"unknown node {n!r} (declared nodes: {', '.join(sorted(nodes))})"
                )
        wkey = "weights" if key == "to" else f"{key}_weights"
        weights = doc.get(wkey, [1.0] * len(names))
        if (
            not isinstance(weights, list)
            or len(weights) != len(names)
            or any(WEIGHT.problem(w) for w in weights)
        ):
            raise self.fail(
                where, wkey, f"must be {len(names)} positive numbers (at most 1e12), one per node in {key}"
            )
        return tuple(names), tuple(float(w) for w in weights)

    def check_keys(self, doc: Mapping[str, Any], where: tuple[Any, ...], allowed: set[str]) -> None:
        for key in doc:
            if key not in allowed:
                raise self.fail(where, key, f"unknown field (allowed: {', '.join(sorted(allowed))})")


_TRACE_KEYS = {"seed", "messages", "duration_s", "parallelism", "start", "resolution_s"}
_TRACELET_KEYS = {"name", "kind", "client", "client_weights", "weight", "clients", "think_s", "call", "hop"}
_CALL_KEYS = {
    "id",
    "parent",
    "to",
    "weights",
    "p",
    "repeat",
    "group",
    "before_s",
    "between_s",
    "after_s",
    "lead_s",
}
_HOP_KEYS = {"to", "weights", "p", "delay_s"}
_FAULT_KEYS = {"loss", "skew", "duplicates", "ids", "jitter"}


def _start_ns(r: _Reader, value: Any) -> int:
    try:
        dt = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
        if dt.tzinfo is None:
            raise r.fail(("trace",), "start", f"needs a zone, e.g. {DEFAULT_START}")
        ns = int(dt.timestamp()) * 1_000_000_000 + dt.microsecond * 1000
    except (ValueError, OverflowError):
        raise r.fail(("trace",), "start", f"must be an ISO-8601 instant, not {value!r}") from None
    if START_NS.problem(ns) is not None:
        raise r.fail(("trace",), "start", f"must be {START_RANGE}, not {value!r}")
    return ns


def _read_calls(r: _Reader, t: Mapping[str, Any], ti: int, nodes: set[str]) -> tuple[CallSpec, ...]:
    calls: list[CallSpec] = []
    seen: set[str] = set()
    for ci, c in enumerate(t.get("call", [])):
        where = ("tracelet", ti, "call", ci)
        r.check_keys(c, where, _CALL_KEYS)
        cid, parent = _call_place(r, c, ci, where, seen)
        seen.add(cid)
        to, weights = r.choice(c, where, "to", nodes)
        rep = _call_repeat(r, c, where)
        group = c.get("group")
        if group is not None and not isinstance(group, str):
            raise r.fail(where, "group", f"must be a string naming a parallel group, not {group!r}")
        calls.append(
            CallSpec(
                id=cid,
                parent=parent,
                to=to,
                weights=weights,
                p=r.number(c, where, "p", 1.0, PROBABILITY),
                repeat=rep,
                group=group,
                before=r.delay(c, where, "before_s", nodes),
                between=r.delay(c, where, "between_s", nodes),
                after=r.delay(c, where, "after_s", nodes),
                lead=r.delay(c, where, "lead_s", nodes),
                line=r.lines.line(where),
            )
        )
    return tuple(calls)


def _call_place(
    r: _Reader, c: Mapping[str, Any], ci: int, where: tuple[Any, ...], seen: set[str]
) -> tuple[str, str | None]:
    """A call's id and parent, checked against the calls before it (``seen``): the first
    is the root call, without a parent, probability, repeat or group."""
    cid = c.get("id", f"call{ci}")
    if not isinstance(cid, str) or cid in seen:
        raise r.fail(where, "id", f"must be a unique string, not {cid!r}")
    parent = c.get("parent")
    if ci == 0:
        if parent is not None:
            raise r.fail(
                where, "parent", "the first call is the root call (from the client); it has no parent"
            )
        for key in ("p", "repeat", "group"):
            if key in c:
                raise r.fail(
                    where, key, "the root call happens once per instance; use tracelet weights instead"
                )
        return cid, None
    if parent is None:
        raise r.fail(where, "parent", f"missing (the id of an earlier call: {', '.join(seen)})")
    if parent not in seen:
        raise r.fail(where, "parent", f"unknown call {parent!r} (earlier calls: {', '.join(seen)})")
    return cid, parent


def _call_repeat(r: _Reader, c: Mapping[str, Any], where: tuple[Any, ...]) -> tuple[int, int]:
    """A call's ``repeat``: a count, or [min, max] counts."""
    rep = c.get("repeat", 1)
    rep = [rep, rep] if isinstance(rep, int) and not isinstance(rep, bool) else rep
    if not (
        isinstance(rep, list)
        and len(rep) == 2
        and not any(REPEAT.problem(x) for x in rep)
        and rep[0] <= rep[1]
        and rep[1] >= 1
    ):
        raise r.fail(
            where,
            "repeat",
            f"must be a count >= 1 or [min, max] counts (at most {REPEAT.hi:,}), not {c.get('repeat')!r}",
        )
    return rep[0], rep[1]


def _read_hops(r: _Reader, t: Mapping[str, Any], ti: int, nodes: set[str]) -> tuple[HopSpec, ...]:
    hops = []
    for hi, h in enumerate(t.get("hop", [])):
        where = ("tracelet", ti, "hop", hi)
        r.check_keys(h, where, _HOP_KEYS)
        to, weights = r.choice(h, where, "to", nodes)
        hops.append(
            HopSpec(
                to=to,
                weights=weights,
                p=r.number(h, where, "p", 1.0, PROBABILITY),
                delay=r.delay(h, where, "delay_s", nodes),
                line=r.lines.line(where),
            )
        )
    return tuple(hops)


def _read_faults(r: _Reader, doc: Mapping[str, Any], nodes: set[str]) -> Faults:
    f = doc.get("faults", {})
    r.check_keys(f, ("faults",), _FAULT_KEYS)
    out: dict[str, Any] = {}
    loss = f.get("loss", {})
    r.check_keys(loss, ("faults", "loss"), {"rate_pps", "queue"})
    out["loss_rate_pps"] = r.number(loss, ("faults", "loss"), "rate_pps", None, RATE)
    out["loss_queue"] = r.number(loss, ("faults", "loss"), "queue", 64, QUEUE)
    skew = {}
    for node, spec in f.get("skew", {}).items():
        where = ("faults", "skew")
        if node not in nodes:
            raise r.fail(where, node, f"unknown node {node!r} (declared nodes: {', '.join(sorted(nodes))})")
        if isinstance(spec, int | float) and not isinstance(spec, bool):
            skew[node] = (float(r.number(f["skew"], where, node, None, OFFSET)), 0.0)
        elif isinstance(spec, dict) and set(spec) <= {"offset_s", "drift_ppm"}:
            off = r.number(spec, where, "offset_s", 0.0, OFFSET)
            drift = r.number(spec, where, "drift_ppm", 0.0, DRIFT)
            skew[node] = (float(off), float(drift))
        else:
            raise r.fail(where, node, "must be an offset in seconds or {offset_s = ..., drift_ppm = ...}")
    out["skew"] = skew
    dup = f.get("duplicates", {})
    r.check_keys(dup, ("faults", "duplicates"), {"fraction", "delay_s"})
    out["dup_fraction"] = r.number(dup, ("faults", "duplicates"), "fraction", 0.0, FRACTION)
    if "delay_s" in dup:
        out["dup_delay"] = r.delay(dup, ("faults", "duplicates"), "delay_s", nodes).default
    ids = f.get("ids", {})
    r.check_keys(ids, ("faults", "ids"), {"mode", "fraction", "modulus"})
    mode = ids.get("mode", "unique")
    if mode not in ID_MODES:
        raise r.fail(
            ("faults", "ids"), "mode", f"unknown mode {mode!r} (must be one of {', '.join(ID_MODES)})"
        )
    out["ids"] = mode
    out["ids_fraction"] = r.number(ids, ("faults", "ids"), "fraction", 1.0, FRACTION)
    out["ids_modulus"] = r.number(ids, ("faults", "ids"), "modulus", 16, MODULUS)
    jitter = f.get("jitter", {})
    r.check_keys(jitter, ("faults", "jitter"), {"std_s"})
    out["jitter_s"] = float(r.number(jitter, ("faults", "jitter"), "std_s", 0.0, TIME))
    return Faults(**out)


def parse_config(text: str, path: str = "<config>") -> SynthConfig:
    """Parse configuration text (TOML); see ``load_config``."""
    r = _Reader(path, text)
    doc = _toml(text, path)
    r.check_keys(doc, (), {"nodes", "trace", "tracelet", "faults", "keys"})
    nodes_list = _read_nodes(r, doc)
    nodes = set(nodes_list)
    trace = doc.get("trace", {})
    r.check_keys(trace, ("trace",), _TRACE_KEYS)
    messages = r.number(trace, ("trace",), "messages", None, MESSAGES)
    duration = r.number(trace, ("trace",), "duration_s", None, DURATION)
    if messages is None and duration is None:
        raise r.fail(("trace",), None, "needs messages = N or duration_s = S")
    if messages is not None and duration is not None:
        raise r.fail(("trace",), "duration_s", "give messages = N or duration_s = S, not both")
    tracelets = [_read_tracelet(r, t, ti, nodes) for ti, t in enumerate(doc.get("tracelet", []))]
    if not tracelets:
        raise r.fail((), "tracelet", "missing (at least one [[tracelet]])")
    return SynthConfig(
        path=path,
        nodes=tuple(nodes_list),
        tracelets=tuple(tracelets),
        seed=r.number(trace, ("trace",), "seed", 1, SEED),
        messages=messages,
        duration_s=duration,
        parallelism=float(r.number(trace, ("trace",), "parallelism", 1.0, PARALLELISM)),
        start_ns=_start_ns(r, trace.get("start", DEFAULT_START)),
        resolution_ns=round(r.number(trace, ("trace",), "resolution_s", 1e-6, RESOLUTION) * 1e9),
        faults=_read_faults(r, doc, nodes),
        keys=_read_keys(r, doc, nodes),
    )


def _read_keys(r: _Reader, doc: Mapping[str, Any], nodes: set[str]) -> KeySpec | None:
    k = doc.get("keys")
    if k is None:
        return None
    if not isinstance(k, dict):
        raise r.fail((), "keys", "must be a table ([keys] with callers, share, column)")
    r.check_keys(k, ("keys",), {"callers", "share", "column"})
    callers = None
    if k.get("callers", "*") != "*":
        callers, _ = r.choice(k, ("keys",), "callers", nodes)
    column = k.get("column", "trace_id")
    if column not in KEY_COLUMNS:
        raise r.fail(("keys",), "column", f"must be one of {', '.join(KEY_COLUMNS)}, not {column!r}")
    share = float(r.number(k, ("keys",), "share", 1.0, FRACTION))
    return KeySpec(callers, share, column)


def _toml(text: str, path: str) -> dict[str, Any]:
    """The TOML document; a syntax error names the file's line."""
    try:
        return load_toml(text, path)
    except ParseError as exc:
        raise ConfigError(str(exc)) from None
    except tomllib.TOMLDecodeError as exc:
        at = re.search(r"\(at line (\d+), column \d+\)", str(exc))
        where = f"{path}:{at.group(1)}" if at else path
        reason = str(exc).replace(at.group(0), "").strip() if at else str(exc)
        raise ConfigError(f"{where}: not valid TOML ({reason})") from None


def _read_nodes(r: _Reader, doc: Mapping[str, Any]) -> list[str]:
    """The declared node names: a list of distinct names without whitespace or ``#``."""
    nodes_list = doc.get("nodes")
    if (
        not isinstance(nodes_list, list)
        or not nodes_list
        or not all(isinstance(n, str) and n for n in nodes_list)
    ):
        raise r.fail((), "nodes", 'missing or invalid (a list of node names, e.g. nodes = ["client", "WS1"])')
    if len(set(nodes_list)) != len(nodes_list):
        raise r.fail((), "nodes", "lists a node twice")
    bad = [n for n in nodes_list if re.search(r"[\s#]", n)]
    if bad:
        raise r.fail((), "nodes", f"node name {bad[0]!r} has whitespace or '#'")
    return nodes_list


def _read_tracelet(r: _Reader, t: Mapping[str, Any], ti: int, nodes: set[str]) -> TraceletSpec:
    """One ``[[tracelet]]``: its client, weight, think time and calls (rpc) or hops (messages)."""
    where = ("tracelet", ti)
    r.check_keys(t, where, _TRACELET_KEYS)
    kind = t.get("kind", "rpc")
    if kind not in ("rpc", "messages"):
        raise r.fail(where, "kind", f"unknown kind {kind!r} (must be rpc or messages)")
    client, client_w = r.choice(t, where, "client", nodes)
    think = t.get("think_s", [0.0, 0.0])
    if (
        not (isinstance(think, list) and len(think) == 2 and not any(TIME.problem(x) for x in think))
        or think[0] > think[1]
    ):
        raise r.fail(
            where,
            "think_s",
            f"must be [min, max] seconds with 0 <= min <= max <= {MAX_TIME_S:,.0f}, not {think!r}",
        )
    spec = TraceletSpec(
        name=str(t.get("name", f"tracelet{ti}")),
        kind=kind,
        client=client,
        client_weights=client_w,
        weight=r.number(t, where, "weight", 1.0, WEIGHT),
        clients=r.number(t, where, "clients", None, CLIENTS),
        think_s=(float(think[0]), float(think[1])),
        calls=_read_calls(r, t, ti, nodes) if kind == "rpc" else (),
        hops=_read_hops(r, t, ti, nodes) if kind == "messages" else (),
        line=r.lines.line(where),
    )
    _check_tracelet(r, t, where, spec)
    return spec


def _check_tracelet(r: _Reader, t: Mapping[str, Any], where: tuple[Any, ...], spec: TraceletSpec) -> None:
    """Refuse a tracelet without entries of its kind, with the other kind's, or too big."""
    kind = spec.kind
    if kind == "rpc" and not spec.calls:
        raise r.fail(where, None, "an rpc tracelet needs at least one [[tracelet.call]]")
    if kind == "messages" and not spec.hops:
        raise r.fail(where, None, "a messages tracelet needs at least one [[tracelet.hop]]")
    if (kind == "rpc" and "hop" in t) or (kind == "messages" and "call" in t):
        raise r.fail(
            where, "kind", f"a {kind} tracelet takes {'call' if kind == 'rpc' else 'hop'} entries only"
        )
    problem = tracelet_problem(spec)
    if problem is not None:
        raise r.fail(where, None, problem)


def load_config(path: PathLike) -> SynthConfig:
    """Read a synth configuration file.

    Raises
    ------
    ConfigError
        ``FILE:LINE: field: problem (what is allowed)``.
    TraceFileError
        The file is missing or unreadable.
    """
    p = Path(path)
    try:
        text = read_config_text(p, "a synth configuration (TOML)")
    except ParseError as exc:  # not UTF-8
        raise TraceFileError(f"{p}: cannot read ({exc.reason})") from None
    return parse_config(text, str(p))


def with_delay_spread(config: SynthConfig, ratio: float) -> SynthConfig:
    """The configuration with every delay's standard deviation set to ``ratio`` times
    its mean (per mixture component): the delay-variance axis of the paper's accuracy
    experiments.

    Examples
    --------
    >>> cfg = parse_config('nodes = ["c", "s"]\\n[trace]\\nmessages = 100\\n[[tracelet]]\\n'
    ...                    'client = "c"\\n[[tracelet.call]]\\nto = "s"\\nbefore_s = [0.010, 0.004]\\n')
    >>> with_delay_spread(cfg, 0.05).tracelets[0].calls[0].before.default.components
    ((0.01, 0.0005, 1.0),)
    """
    if not (np.isfinite(ratio) and ratio >= 0):
        raise ParameterError(f"delay spread ratio must be a finite number >= 0, not {ratio}")

    def delay(d: Delay) -> Delay:
        return Delay(tuple((m, m * ratio, w) for m, _, w in d.components))

    def node_delay(nd: NodeDelay) -> NodeDelay:
        return NodeDelay(delay(nd.default), {k: delay(v) for k, v in nd.by_node.items()})

    tracelets = tuple(
        replace(
            t,
            calls=tuple(
                replace(
                    c,
                    before=node_delay(c.before),
                    between=node_delay(c.between),
                    after=node_delay(c.after),
                    lead=node_delay(c.lead),
                )
                for c in t.calls
            ),
            hops=tuple(replace(h, delay=node_delay(h.delay)) for h in t.hops),
        )
        for t in config.tracelets
    )
    return replace(config, tracelets=tracelets)
