"""Generating a synthetic trace with ground truth, streaming, vectorized over instances.

Each tracelet runs in ``loops`` client loops; a loop starts an instance, waits for it
to finish, thinks (uniform in ``think_s``) and starts the next. Rounds instantiate a
block of instances for every loop at once; messages earlier than the *horizon* (the
earliest next start over all loops) can no longer be preceded by anything new, so
they are stamped (faults), sorted and written, and memory stays bounded.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from synth.config import ConfigError, Faults, KeySpec, SynthConfig, check_config
from synth.faults import CaptureQueue, stamp_skew
from synth.keys import key_column
from synth.limits import MAX_LOOP_CALLS, MAX_LOOPS, MAX_MESSAGES, calls_per_instance
from synth.template import Batch, Template, build_template
from synth.truth import PatternBook, mean_parallelism
from tracefmt import ParameterError, TraceWriter, trace_format, write_atomic, write_text_trace
from tracefmt.schema import OPS, TS_TYPE, validate_trace
from tracefmt.signals import sigterm_as_interrupt

__all__ = ["SynthReport", "generate_table", "generate_trace"]

PathLike = str | os.PathLike[str]
_INSTANCES_PER_ROUND = 40_000
_PARALLELISM_CALLS = 60_000  # calls measured for the reported parallelism
_PILOT_CALLS = 40_000  # calls measured in a calibration pilot
_AHEAD_ROUNDS = 4  # a loop further ahead of the horizon than this many typical rounds waits
_LAST_NS = 2**63 - 1  # 2262-04-11T23:47:16.854775807Z
_MAX_WAITING = 4_000_000  # messages waiting to be sorted (about 90 bytes each)
_OP_CALL, _OP_RETURN, _OP_SEND = (OPS.index(o) for o in ("call", "return", "send"))


@dataclass(frozen=True)
class SynthReport:
    """What ``generate_trace`` made."""

    output: str | None
    messages: int
    instances: int
    patterns: int
    mean_parallelism: float
    requested_parallelism: float | None
    loops: dict[str, int]
    lost: int
    duplicated: int
    duration_s: float
    truth: dict[str, Any] = field(default_factory=dict, repr=False)

    def to_json(self) -> dict[str, Any]:
        doc = asdict(self)
        doc.pop("truth")
        return doc

    def summary_lines(self, faults: Faults | None = None, *, truth_path: PathLike | None = None) -> list[str]:
        """What was written, lost and duplicated, and where, as text lines.

        ``faults`` (the configuration's) names the capture point's rate and queue when
        messages were lost; ``truth_path`` the truth file, when one was written.

        Examples
        --------
        >>> report = SynthReport("t.parquet", 12, 2, 1, 1.0, None, {"request": 1}, 0, 0, 0.05)
        >>> print("\\n".join(report.summary_lines(truth_path="t.json")))
        wrote 12 messages (2 instances, 1 patterns) to t.parquet
        span 0.050 s; mean parallelism 1.0 (client loops {'request': 1})
        truth: t.json
        """
        lines = [
            f"wrote {self.messages:,} messages ({self.instances:,} instances, {self.patterns} patterns) "
            f"to {self.output}",
            f"span {self.duration_s:,.3f} s; mean parallelism {self.mean_parallelism:.1f} "
            + (f"(requested {self.requested_parallelism:g}; " if self.requested_parallelism else "(")
            + f"client loops {self.loops})",
        ]
        if faults is not None and faults.loss_rate_pps:
            lines.append(
                f"lost {self.lost:,} messages at the capture point "
                f"({faults.loss_rate_pps:g} pkt/s, queue {faults.loss_queue})"
            )
        if self.duplicated:
            lines.append(f"duplicated {self.duplicated:,} messages (second capture point)")
        if truth_path:
            lines.append(f"truth: {truth_path}")
        return lines


_COLUMNS = ("t", "sender", "receiver", "op", "uid", "parent", "inst", "pattern", "start", "seq")
_OUTPUT_FIELDS = ("sender", "receiver", "op", "uid", "parent", "inst", "pattern")


def _part(
    common: dict[str, np.ndarray], t: np.ndarray, sender: np.ndarray, receiver: np.ndarray, op: int, seq: int
) -> dict[str, np.ndarray]:
    """One message per instance of a slot (a call, a return or a send)."""
    return {
        "t": t,
        "sender": sender,
        "receiver": receiver,
        "op": np.full(t.size, op),
        "seq": np.full(t.size, seq),
        **common,
    }


class _Engine:
    """One run of the generator: rounds of instances, stamping, emission."""

    def __init__(
        self, config: SynthConfig, loops: list[int], *, seed: int, sample_calls: int = _PARALLELISM_CALLS
    ) -> None:
        self.config = config
        self.rng = np.random.default_rng(seed)
        self.codes = {n: i for i, n in enumerate(config.nodes)}
        self.templates = [build_template(t, self.codes) for t in config.tracelets]
        self.book = PatternBook(self.templates, list(config.nodes))
        self.loops = loops
        # Instances per loop and round: about _INSTANCES_PER_ROUND in all, and never more
        # than MAX_LOOP_CALLS calls, so a round's memory is bounded.
        calls = sum(n * tpl.size for n, tpl in zip(loops, self.templates, strict=True))
        self.per_loop = max(1, min(_INSTANCES_PER_ROUND // max(1, sum(loops)), MAX_LOOP_CALLS // calls))
        self.next_start: list[np.ndarray] = []
        self.ahead_s: list[float] = []  # how far ahead of the horizon a loop may draw
        self._check_duration(sum([self._start_loops(t) for t in range(len(config.tracelets))]))
        self.inst_base = 0
        self.uid_base = 0
        self.buffer: dict[str, np.ndarray] | None = None
        self.stop_s: float | None = config.duration_s
        self.counted = 0  # messages of instances started before the horizon
        self.instances = 0
        # Batches whose instances are not all settled yet: (tracelet, batch, starts, pattern, settled).
        self.pending: list[tuple[int, Batch, np.ndarray, np.ndarray, np.ndarray]] = []
        self.queue = (
            CaptureQueue(config.faults.loss_rate_pps, config.faults.loss_queue)
            if config.faults.loss_rate_pps
            else None
        )
        self.lost = 0
        self.duplicated = 0
        self.sample: list[np.ndarray] = []  # call intervals for the parallelism measure
        self.sample_calls = sample_calls
        self.sampled = 0

    def _start_loops(self, t: int) -> float:
        """Stagger tracelet ``t``'s loops' first starts over one think time plus a typical
        duration, and set how far ahead they may draw; its messages per second, roughly."""
        probe = self._probe(t)
        think = sum(self.config.tracelets[t].think_s) / 2
        typical = max(float(np.median(probe.duration)) + think, 1e-6)
        self.next_start.append(self.rng.uniform(0.0, typical, self.loops[t]))
        self.ahead_s.append(_AHEAD_ROUNDS * self.per_loop * typical)
        return self.loops[t] * float(self._sizes(t, probe).mean()) / max(probe.duration.mean() + think, 1e-9)

    def _check_duration(self, rate: float) -> None:
        """Refuse, before drawing, a duration that would make far more than ``MAX_MESSAGES``."""
        duration = self.config.duration_s
        if duration is not None and rate * duration > 2 * MAX_MESSAGES:
            raise ConfigError(
                f"{self.config.path}: {duration:g} s of this workload make about {rate * duration:.2g} "
                f"messages, more than the limit of {MAX_MESSAGES:,}; give a duration of at most about "
                f"{MAX_MESSAGES / rate:.2g} s, or messages = N"
            )

    def _probe(self, t: int) -> Batch:
        """A few instances of tracelet ``t``, to learn its typical duration and size."""
        spec = self.config.tracelets[t]
        probe = self.templates[t].instantiate(np.random.default_rng(0), 64)
        if spec.think_s[1] <= 0 and not (probe.duration > 0).any():
            # Each loop would start endless instances at one instant.
            raise ConfigError(
                f"{self.config.path}:{spec.line}: tracelet.think_s: tracelet {spec.name!r} takes no time: "
                "give it delays or a think time (think_s = [min, max] with max > 0)"
            )
        return probe

    # -- generation ---------------------------------------------------------------------

    def _explode(
        self, t: int, batch: Batch, starts: np.ndarray, inst: np.ndarray, pattern: np.ndarray
    ) -> dict[str, np.ndarray]:
        """All messages of a batch of instances, in (event order, instance) order."""
        tpl = self.templates[t]
        s, n = batch.present.shape
        uid = np.full((s, n), -1, np.int64)
        flat = batch.present.T  # instance-major numbering of calls
        count = int(flat.sum())
        uid_t = np.full((n, s), -1, np.int64)
        uid_t[flat] = self.uid_base + np.arange(count)
        uid = uid_t.T
        self.uid_base += count
        parts = []
        caller_of = [tpl.slots[i].parent for i in range(s)]
        for i in range(s):
            p = batch.present[i]
            if not p.any():
                continue
            j = np.flatnonzero(p)
            q = caller_of[i]
            caller = batch.client[j] if q < 0 else batch.node[q, j]
            parent = np.full(j.size, -1, np.int64) if q < 0 else uid[q, j]
            node = batch.node[i, j]
            common = {"uid": uid[i, j], "inst": inst[j], "pattern": pattern[j], "start": starts[j]}
            common["parent"] = parent
            t_call = starts[j] + batch.t_call[i, j]
            if tpl.kind == "messages":
                parts.append(_part(common, t_call, caller, node, _OP_SEND, i))
            else:
                t_ret = starts[j] + batch.t_ret[i, j]
                parts.append(_part(common, t_call, caller, node, _OP_CALL, tpl.call_seq[i]))
                parts.append(_part(common, t_ret, node, caller, _OP_RETURN, tpl.return_seq[i]))
        if not parts:
            return {k: np.zeros(0) for k in _COLUMNS}
        return {k: np.concatenate([part[k] for part in parts]) for k in _COLUMNS}

    def _round(self) -> None:
        fresh = []
        h = self.horizon
        for t, tpl in enumerate(self.templates):
            # Loops far ahead wait for the horizon, so that instances of a slow loop (or
            # tracelet) do not pile up in the buffer while the others catch up.
            active = np.flatnonzero(self.next_start[t] <= h + self.ahead_s[t])
            if active.size == 0:
                continue
            n = active.size * self.per_loop
            batch = tpl.instantiate(self.rng, n)
            lo, hi = self.config.tracelets[t].think_s
            think = self.rng.uniform(lo, hi, n) if hi > lo else np.full(n, lo)
            step = (batch.duration + think).reshape(active.size, self.per_loop)
            offsets = np.cumsum(step, axis=1) - step
            starts = (self.next_start[t][active, None] + offsets).ravel()
            self.next_start[t][active] += step.sum(axis=1)
            inst = self.inst_base + np.arange(n, dtype=np.int64)
            self.inst_base += n
            pattern = self.book.classify(t, batch)
            self.pending.append((t, batch, starts, pattern, np.zeros(n, bool)))
            fresh.append(self._explode(t, batch, starts, inst, pattern))
        new = {k: np.concatenate([f[k] for f in fresh]) for k in _COLUMNS}
        # Faults are drawn once per message, as it enters the buffer.
        new["stamp"], new["dup"] = self._stamp(new)
        self.buffer = (
            new if self.buffer is None else {k: np.concatenate([self.buffer[k], new[k]]) for k in new}
        )

    @property
    def horizon(self) -> float:
        return float(min(ns.min() for ns in self.next_start))

    def _sizes(self, t: int, batch: Batch) -> np.ndarray:
        per_slot = 1 if self.templates[t].kind == "messages" else 2
        return batch.messages * per_slot

    def _check_bounds(self) -> None:
        """Refuse a run that would pass the message limit or hold too much back."""
        if self.config.messages is None and self.counted > MAX_MESSAGES:
            raise ParameterError(
                f"{self.config.path}: {self.config.duration_s:g} s of this workload make more than "
                f"{MAX_MESSAGES:,} messages (the limit); give a shorter duration, or messages = N"
            )
        waiting = 0 if self.buffer is None else self.buffer["t"].size
        if waiting > _MAX_WAITING:
            raise ParameterError(
                f"{self.config.path}: {waiting:,} messages wait to be sorted, more than {_MAX_WAITING:,}: "
                "clock offsets, jitter or instances much longer than the rest hold them back; "
                "lower the skew or jitter, or the parallelism"
            )

    def _update_stop(self) -> None:
        """Fix the stop time once the message target is reached (instances in start order).

        Every instance that starts before the horizon exists already, so when those
        reach the target, the instance that crosses it is the last one kept.
        """
        if self.stop_s is not None or self.config.messages is None:
            return
        h = self.horizon
        starts, sizes = [], []
        for t, batch, st, _, settled in self.pending:
            sel = ~settled & (st < h)
            starts.append(st[sel])
            sizes.append(self._sizes(t, batch)[sel])
        starts_a, sizes_a = np.concatenate(starts), np.concatenate(sizes)
        order = np.argsort(starts_a, kind="stable")
        total = self.counted + np.cumsum(sizes_a[order])
        reached = np.searchsorted(total, self.config.messages, side="left")
        if reached < total.size:
            self.stop_s = float(starts_a[order][reached])

    def _settle_truth(self, final: bool) -> None:
        """Record the truth of instances whose fate is known: kept iff started by the stop."""
        h = self.horizon
        still = []
        for t, batch, starts, pattern, settled in self.pending:
            known = ~settled if (final or self.stop_s is not None) else ~settled & (starts < h)
            keep = known & (starts <= self.stop_s) if self.stop_s is not None else known
            if keep.any():
                self.book.add(t, batch, pattern, keep)
                self.instances += int(keep.sum())
                self.counted += int(self._sizes(t, batch)[keep].sum())
            settled |= known
            if not settled.all():
                still.append((t, batch, starts, pattern, settled))
        self.pending = still

    def _stamp(self, m: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        """Capture timestamps (seconds) after skew and jitter; the duplicate mask."""
        f = self.config.faults
        t = m["t"].copy()
        if f.skew:
            # A message is stamped by its sender's capture point if skewed, else its receiver's.
            for role in ("receiver", "sender"):
                for node, (off, drift) in f.skew.items():
                    sel = m[role] == self.codes[node]
                    t[sel] = stamp_skew(m["t"][sel], off, drift)
        if f.jitter_s > 0:
            t = t + self.rng.normal(0.0, f.jitter_s, t.size)
        dup = self.rng.random(t.size) < f.dup_fraction if f.dup_fraction > 0 else np.zeros(t.size, bool)
        return t, dup

    def _bound(self) -> float:
        """No message stamped before this time can still appear."""
        h = self.horizon
        f = self.config.faults
        low = min([0.0] + [off + drift * 1e-6 * h for off, drift in f.skew.values()])
        return h + low - 8 * f.jitter_s

    def _emit(self, final: bool) -> pa.Table | None:
        if self.buffer is None or self.buffer["t"].size == 0:
            return None
        m = self.buffer
        if self.stop_s is not None:
            alive = m["start"] <= self.stop_s
            m = {k: v[alive] for k, v in m.items()}
        bound = np.inf if final else self._bound()
        out = m["stamp"] < bound
        self.buffer = {k: v[~out] for k, v in m.items()}
        e = {k: v[out] for k, v in m.items()}
        if e["t"].size == 0:
            return None
        self._sample_parallelism(e)
        return self._finish(e)

    def _sample_parallelism(self, e: dict[str, np.ndarray]) -> None:
        if self.sampled >= self.sample_calls:
            return
        calls = e["op"] == _OP_CALL
        rets = e["op"] == _OP_RETURN
        if not calls.any():
            return
        # Measured on the times as written (stamped, at the trace's resolution): what
        # inference will see, ties included.
        res = self.config.resolution_ns
        t = np.floor(e["stamp"] * 1e9 / res) * res / 1e9
        self.sample.append(np.stack([e["uid"][calls], e["sender"][calls], e["receiver"][calls], t[calls]]))
        self.sample.append(
            np.stack([e["uid"][rets], -np.ones(int(rets.sum())), -np.ones(int(rets.sum())), t[rets]])
        )
        self.sampled += int(calls.sum())

    @property
    def span_s(self) -> float:
        """Seconds from the trace start to the stop (or the horizon reached)."""
        return self.stop_s if self.stop_s is not None else self.horizon

    def parallelism(self) -> float:
        """Mean candidate parents per child call; for one-way traffic, instances in flight."""
        if any(t.kind == "rpc" for t in self.config.tracelets):
            return self.measured_parallelism()
        span = self.span_s
        return sum(p.total for p in self.book.patterns) / span if span > 0 else 0.0

    def measured_parallelism(self) -> float:
        """Mean candidate parents per child over the sampled calls (true times)."""
        if not self.sample:
            return 0.0
        rows = np.concatenate(self.sample, axis=1)
        is_call = rows[1] >= 0
        calls, rets = rows[:, is_call], rows[:, ~is_call]
        # Pair each call with its return by uid; calls whose return was not sampled drop out.
        r_order = np.argsort(rets[0], kind="stable")
        r_uid, r_t = rets[0][r_order], rets[3][r_order]
        pos = np.minimum(np.searchsorted(r_uid, calls[0]), max(r_uid.size - 1, 0))
        closed = (r_uid[pos] == calls[0]) if r_uid.size else np.zeros(calls.shape[1], bool)
        return mean_parallelism(
            calls[2][closed].astype(np.int64),
            calls[1][closed].astype(np.int64),
            calls[3][closed],
            r_t[pos][closed],
        )

    def _check_times(self, stamp: np.ndarray) -> None:
        """Refuse times (seconds from the start) that nanosecond timestamps cannot hold."""
        start_ns = self.config.start_ns
        first, last = -start_ns / 1e9, (_LAST_NS - start_ns) / 1e9 - 1.0
        if stamp.size and not (stamp.min() >= first and stamp.max() <= last):
            bad = stamp[~((stamp >= first) & (stamp <= last))][0]
            raise ParameterError(
                f"{self.config.path}: a message would be stamped {bad:.6g} s after the trace start, "
                "outside nanosecond time (1970-01-01 to 2262-04-11); "
                "lower the delays, think times, clock offsets or the trace's size"
            )

    def _finish(self, e: dict[str, np.ndarray]) -> pa.Table:
        """Faults that add or remove messages, sort, quantize, build the Arrow table."""
        cfg = self.config
        f = cfg.faults
        stamp = e["stamp"]
        point = None
        if f.dup_fraction > 0:
            d = e["dup"]
            copies = {k: v[d] for k, v in e.items()}
            copies["stamp"] = copies["stamp"] + f.dup_delay.sample(self.rng, int(d.sum()))
            point = np.concatenate([np.zeros(e["t"].size, np.int8), np.ones(int(d.sum()), np.int8)])
            e = {k: np.concatenate([e[k], copies[k]]) for k in e}
            self.duplicated += int(d.sum())
            stamp = e["stamp"]
        self._check_times(stamp)
        ts = cfg.start_ns + (np.floor(stamp * 1e9 / cfg.resolution_ns).astype(np.int64) * cfg.resolution_ns)
        # Equal timestamps keep the causal event order within an instance.
        order = np.lexsort((e["seq"], e["inst"], ts))
        e = {k: e[k][order] for k in _OUTPUT_FIELDS}
        ts = ts[order]
        if point is not None:
            point = point[order]
        if self.queue is not None:
            keep = self.queue.admit(ts)
            self.lost += int((~keep).sum())
            e = {k: v[keep] for k, v in e.items()}
            ts = ts[keep]
            if point is not None:
                point = point[keep]
        uid = e["uid"].astype(np.int64)
        ids = uid.astype(np.uint64)
        id_valid = e["op"] != _OP_SEND
        if f.ids == "zero":
            ids = np.zeros_like(ids)
        elif f.ids == "reused":
            ids = ids % np.uint64(f.ids_modulus)
        elif f.ids == "missing":
            # A per-call coin from the uid, so a call and its return agree.
            coin = ((uid.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)) >> np.uint64(11)) / float(1 << 53)
            id_valid &= coin >= f.ids_fraction
        names = pa.array(list(cfg.nodes), pa.string())
        patterns = pa.array([p.id for p in self.book.patterns], pa.string())
        cols: dict[str, pa.Array] = {
            "timestamp": pa.array(ts, pa.int64()).cast(TS_TYPE),
            "sender": pa.DictionaryArray.from_arrays(pa.array(e["sender"].astype(np.int32)), names),
            "receiver": pa.DictionaryArray.from_arrays(pa.array(e["receiver"].astype(np.int32)), names),
            "op": pa.DictionaryArray.from_arrays(pa.array(e["op"].astype(np.int8)), pa.array(OPS)),
            "id": pa.array(ids, pa.uint64(), mask=~id_valid),
        }
        if point is not None:
            cols["point"] = pa.DictionaryArray.from_arrays(pa.array(point), pa.array(["p1", "p2"]))
        cols["true_instance"] = pa.array(e["inst"].astype(np.uint64))
        cols["true_pattern"] = pa.DictionaryArray.from_arrays(
            pa.array(e["pattern"].astype(np.int32)), patterns
        )
        cols["true_call"] = pa.array(uid.astype(np.uint64))
        parent = e["parent"].astype(np.int64)
        cols["true_parent"] = pa.array(parent.astype(np.uint64), mask=parent < 0)
        if cfg.keys is not None:
            cols[cfg.keys.column] = self._keys(cfg.keys, e)
        return pa.table(cols)

    def _keys(self, spec: KeySpec, e: dict[str, np.ndarray]) -> pa.DictionaryArray:
        """The ``[keys]`` column: calls of the chosen callers carry their request's key,
        a ``share`` of them by a coin per call (from its uid: the same in any batching)."""
        keyed = e["op"] == _OP_CALL
        if spec.callers is not None:
            keyed &= np.isin(e["sender"], [self.config.nodes.index(n) for n in spec.callers])
        if spec.share < 1.0:
            mixed = (e["uid"].astype(np.uint64) + np.uint64(self.config.seed)) * np.uint64(0x9E3779B97F4A7C15)
            keyed &= (mixed >> np.uint64(11)) / float(1 << 53) < spec.share
        return key_column(e["inst"].astype(np.uint64), keyed, spec.column)

    def run(self, on_progress: Callable[[int], None] | None = None) -> Iterator[pa.Table]:
        written = 0
        while True:
            if self.stop_s is not None and self.horizon > self.stop_s:
                break
            self._round()
            self._update_stop()
            self._settle_truth(final=False)
            table = self._emit(final=False)
            self._check_bounds()
            if table is not None:
                written += table.num_rows
                if on_progress is not None:
                    on_progress(written)
                yield table
        self._settle_truth(final=True)
        table = self._emit(final=True)
        if table is not None:
            yield table


def _loops(config: SynthConfig, scale: float) -> list[int]:
    """Client loops per tracelet: fixed ``clients``, else a weighted share of the parallelism."""
    free = [t for t in config.tracelets if t.clients is None]
    total = sum(t.weight for t in free) or 1.0
    return [
        t.clients if t.clients is not None else max(1, round(config.parallelism * scale * t.weight / total))
        for t in config.tracelets
    ]


def _check_loops(config: SynthConfig, loops: list[int], calls: list[int]) -> None:
    """Refuse client loops whose instances, one per loop, would not fit a round."""
    in_flight = sum(n * c for n, c in zip(loops, calls, strict=True))
    if sum(loops) > MAX_LOOPS or in_flight > MAX_LOOP_CALLS:
        raise ConfigError(
            f"{config.path}: {sum(loops):,} client loops of {max(calls):,} calls per instance at most "
            f"make {in_flight:,} calls at once (at most {MAX_LOOPS:,} loops and {MAX_LOOP_CALLS:,} "
            "calls: loops x calls per instance); lower the parallelism, clients or repeat"
        )


def _fit_loops(config: SynthConfig, loops: list[int], calls: list[int]) -> list[int]:
    """``loops`` with the calibrated ones (not fixed ``clients``) scaled down to the bounds."""
    free = [t.clients is None for t in config.tracelets]
    fixed_loops = sum(n for n, f in zip(loops, free, strict=True) if not f)
    fixed_calls = sum(n * c for n, c, f in zip(loops, calls, free, strict=True) if not f)
    free_loops = sum(loops) - fixed_loops
    free_calls = sum(n * c for n, c in zip(loops, calls, strict=True)) - fixed_calls
    room = min(
        1.0,
        (MAX_LOOPS - fixed_loops) / max(free_loops, 1),
        (MAX_LOOP_CALLS - fixed_calls) / max(free_calls, 1),
    )
    return [max(1, int(n * room)) if f and room < 1 else n for n, f in zip(loops, free, strict=True)]


def _calibrate(config: SynthConfig, calls: list[int]) -> list[int]:
    """Loops per tracelet that give the requested mean parallelism (a few pilot runs);
    as many as the bounds allow if it cannot be reached."""
    scale = 1.0
    loops = _loops(config, scale)
    if config.parallelism <= 1.0 or all(t.clients is not None for t in config.tracelets):
        return loops
    per_instance = max(
        2.0,
        float(
            np.mean(
                [
                    Template(t, {n: i for i, n in enumerate(config.nodes)})
                    .instantiate(np.random.default_rng(0), 256)
                    .messages.mean()
                    * 2
                    for t in config.tracelets
                ]
            )
        ),
    )
    for _ in range(4):
        # Enough instances per loop to pass the staggered start and reach steady state.
        pilot_msgs = int(max(20_000, 12 * sum(loops) * per_instance))
        pilot = replace(config, messages=pilot_msgs, duration_s=None, faults=Faults())
        engine = _Engine(pilot, loops, seed=config.seed + 0x5EED, sample_calls=_PILOT_CALLS)
        for _table in engine.run():
            pass
        measured = engine.measured_parallelism()
        if measured <= 0 or abs(measured - config.parallelism) <= 0.03 * config.parallelism:
            break
        # The true parent is always a candidate: the excess over 1 grows with the loops.
        scale *= (config.parallelism - 1.0) / max(measured - 1.0, 1e-3)
        new = _fit_loops(config, _loops(config, scale), calls)
        if new == loops:
            break
        loops = new
    return loops


def _engine(config: SynthConfig) -> _Engine:
    """The engine for a checked configuration, its client loops calibrated; every bound
    is checked before anything is drawn."""
    check_config(config)
    calls = [calls_per_instance(t) for t in config.tracelets]
    _check_loops(config, _loops(config, 1.0), calls)
    if not any(t.kind == "rpc" for t in config.tracelets):
        return _Engine(config, _loops(config, 1.0), seed=config.seed)
    return _Engine(config, _calibrate(config, calls), seed=config.seed)


def generate_table(config: SynthConfig) -> tuple[pa.Table, dict[str, Any]]:
    """Generate a whole trace in memory; returns ``(trace, truth)``. For small traces and tests."""
    engine = _engine(config)
    parts = list(engine.run())
    table = pa.concat_tables(parts).unify_dictionaries().combine_chunks() if parts else None
    if table is None:
        raise ParameterError(f"{config.path}: the configuration produced no messages")
    truth = engine.book.truth(
        messages=table.num_rows, instances=engine.instances, parallelism=engine.parallelism()
    )
    return validate_trace(table), truth


def _write(engine: _Engine, out: Path, on_progress: Callable[[int], None] | None) -> int:
    """Stream the engine's messages into ``out`` (whole or not at all); the count written."""
    if trace_format(out) == "text":
        return write_text_trace(engine.run(on_progress), out)
    config = engine.config
    provenance = {"synth": {"config": config.path, "seed": config.seed, "loops": engine.loops}}
    with TraceWriter(out, provenance=provenance) as writer, ThreadPoolExecutor(1) as io:
        # Encoding and compressing a row group overlaps generating the next one.
        pending: Future[None] | None = None
        for table in engine.run(on_progress):
            if pending is not None:
                pending.result()
            pending = io.submit(writer.write, table)
        if pending is not None:
            pending.result()
        writer.provenance["synth"].update({"lost": engine.lost, "duplicated": engine.duplicated})
    return writer.rows


def generate_trace(
    config: SynthConfig,
    output: PathLike,
    *,
    truth_path: PathLike | None = None,
    on_progress: Callable[[int], None] | None = None,
) -> SynthReport:
    """Generate a trace into ``output`` (Parquet, or text for ``.txt``), streaming.

    Parameters
    ----------
    config : SynthConfig
        From ``load_config`` (plus overrides).
    output : str or path-like
        ``.parquet`` (with ground-truth columns) or ``.txt`` (the five core fields).
    truth_path : str or path-like, optional
        Where to write the truth file (JSON, ``docs/files.md``).
    on_progress : callable, optional
        Called with messages written so far.

    Returns
    -------
    SynthReport

    Raises
    ------
    ConfigError
        A value out of its bounds (``check_config``, ``synth/README.md``).
    ParameterError
        The workload leaves the bounds while it runs: more than ``MAX_MESSAGES`` in
        ``duration_s``, timestamps past 2262, too many messages waiting to be sorted
        (clock offsets, jitter), too many distinct patterns.

    Notes
    -----
    The trace is written under a temporary name and moved into place when complete;
    on an error, Ctrl-C or SIGTERM (which raises ``KeyboardInterrupt`` here, when the
    program has not installed its own handler) nothing is left behind.
    """
    out = Path(output)
    with sigterm_as_interrupt():
        engine = _engine(config)
        rows = _write(engine, out, on_progress)
        parallelism = engine.parallelism()
        truth = engine.book.truth(messages=rows, instances=engine.instances, parallelism=parallelism)
        if truth_path is not None:
            write_atomic(truth_path, json.dumps(truth, indent=1) + "\n")
    return SynthReport(
        output=str(out),
        messages=rows,
        instances=engine.instances,
        patterns=len(truth["patterns"]),
        mean_parallelism=parallelism,
        requested_parallelism=_requested_parallelism(config),
        loops={t.name: n for t, n in zip(config.tracelets, engine.loops, strict=True)},
        lost=engine.lost,
        duplicated=engine.duplicated,
        duration_s=float(engine.span_s),
        truth=truth,
    )


def _requested_parallelism(config: SynthConfig) -> float | None:
    """The parallelism asked for, when some client loops follow it (rpc tracelets
    without a fixed number of clients)."""
    if any(t.clients is None and t.kind == "rpc" for t in config.tracelets):
        return config.parallelism
    return None
