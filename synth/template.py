"""A tracelet as a fixed template of slots, and vectorized instantiation of many instances.

An RPC tracelet's calls, with repeats expanded, become *slots* in depth-first order;
each instance fills every slot with a node choice and a present/absent flag, then
all instances are timed together, one numpy operation per slot (never per message).
A messages tracelet's hops are slots in a chain.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from synth.config import CallSpec, NodeDelay, TraceletSpec

_NO_DELAY = NodeDelay()

__all__ = ["Batch", "Template", "build_template"]


@dataclass
class Slot:
    """One call (or hop) position of the template."""

    spec: CallSpec | None
    parent: int  # slot index, -1 for the root
    copy: int = 0  # which repetition of its call
    repeat_key: int = -1  # slots sharing one repeat-count draw
    children: list[list[int]] = field(default_factory=list)  # serial groups of parallel slots
    choices: tuple[str, ...] = ()
    weights: tuple[float, ...] = ()
    p: float = 1.0
    repeat: tuple[int, int] = (1, 1)


@dataclass
class Batch:
    """``n`` instances of one template: per slot, node codes, presence and times.

    Times are seconds from the instance's start (float64), arrays of shape (slots, n).
    """

    n: int
    client: np.ndarray  # node code of the root caller, (n,)
    node: np.ndarray  # (slots, n) node code at each slot
    present: np.ndarray  # (slots, n) bool
    t_call: np.ndarray  # (slots, n): call time (or send time for hops)
    t_ret: np.ndarray  # (slots, n): return time (rpc), == t_call for hops

    @property
    def duration(self) -> np.ndarray:
        """Seconds from the instance's start to its last message."""
        t = np.where(self.present, np.maximum(self.t_call, self.t_ret), 0.0)
        return t.max(axis=0)

    @property
    def messages(self) -> np.ndarray:
        """Messages per instance (a call and a return per present RPC slot)."""
        return self.present.sum(axis=0)


class Template:
    """A tracelet's slots and the code to instantiate them."""

    def __init__(self, spec: TraceletSpec, node_codes: dict[str, int]) -> None:
        self.spec = spec
        self.kind = spec.kind
        self.codes = node_codes
        self.slots: list[Slot] = []
        if spec.kind == "rpc":
            children: dict[str | None, list[CallSpec]] = {}
            for call in spec.calls:
                children.setdefault(call.parent, []).append(call)
            self._repeat_keys = 0
            self._expand(spec.calls[0], -1, children)
        else:
            for i, hop in enumerate(spec.hops):
                self.slots.append(Slot(spec=None, parent=i - 1, choices=hop.to, weights=hop.weights, p=hop.p))
        # Causal order of events within an instance (call, children, return), used to
        # order messages that share a timestamp.
        self.call_seq = np.zeros(self.size, np.int64)
        self.return_seq = np.zeros(self.size, np.int64)
        counter = 0

        def walk(i: int) -> None:
            nonlocal counter
            self.call_seq[i] = counter
            counter += 1
            for group in self.slots[i].children:
                for c in group:
                    walk(c)
            self.return_seq[i] = counter
            counter += 1

        if spec.kind == "rpc":
            walk(0)
        else:
            self.call_seq[:] = self.return_seq[:] = np.arange(self.size)

    def _expand(self, call: CallSpec, parent: int, children: dict[str | None, list[CallSpec]]) -> list[int]:
        key = self._repeat_keys
        self._repeat_keys += 1
        made = []
        for k in range(call.repeat[1]):
            idx = len(self.slots)
            slot = Slot(call, parent, k, key, [], call.to, call.weights, call.p, call.repeat)
            self.slots.append(slot)
            made.append(idx)
            groups: list[list[int]] = []
            last_group: str | None = None
            for child in children.get(call.id, []):
                copies = self._expand(child, idx, children)
                # Consecutive siblings of one named group run in parallel.
                if child.group is not None and child.group == last_group:
                    groups[-1].extend(copies)
                elif child.group is not None:
                    groups.append(copies)
                else:
                    groups.extend([c] for c in copies)
                last_group = child.group
            slot.children = groups
        return made

    @property
    def size(self) -> int:
        return len(self.slots)

    def _choose(
        self, rng: np.random.Generator, names: tuple[str, ...], weights: tuple[float, ...], n: int
    ) -> np.ndarray:
        codes = np.array([self.codes[x] for x in names], np.int32)
        if len(names) == 1:
            return np.full(n, codes[0], np.int32)
        w = np.asarray(weights, float)
        return codes[rng.choice(len(names), size=n, p=w / w.sum())]

    def _delay(self, rng: np.random.Generator, delay: NodeDelay, at: np.ndarray) -> np.ndarray:
        """A draw per instance, from the delay spec of the node each instance is at."""
        out = delay.default.sample(rng, at.size)
        for node, spec in delay.by_node.items():
            sel = at == self.codes[node]
            if sel.any():
                out[sel] = spec.sample(rng, int(sel.sum()))
        return out

    def instantiate(self, rng: np.random.Generator, n: int) -> Batch:
        """Draw ``n`` instances: choices, presence and relative times."""
        spec = self.spec
        client = self._choose(rng, spec.client, spec.client_weights, n)
        s = self.size
        node = np.empty((s, n), np.int32)
        present = np.zeros((s, n), bool)
        t_call = np.zeros((s, n))
        t_ret = np.zeros((s, n))
        for i, slot in enumerate(self.slots):
            node[i] = self._choose(rng, slot.choices, slot.weights, n)
        if self.kind == "messages":
            alive = np.ones(n, bool)
            t = np.zeros(n)
            for i, hop in enumerate(spec.hops):
                sender = client if i == 0 else node[i - 1]
                alive &= rng.random(n) < hop.p
                t = t + self._delay(rng, hop.delay, sender)
                present[i], t_call[i], t_ret[i] = alive, t, t
            return Batch(n, client, node, present, t_call, t_ret)
        counts: dict[int, np.ndarray] = {}
        for i, slot in enumerate(self.slots):
            if slot.repeat_key not in counts:
                lo, hi = slot.repeat
                happens = rng.random(n) < slot.p
                counts[slot.repeat_key] = np.where(happens, rng.integers(lo, hi + 1, n), 0)
            parent_present = present[slot.parent] if slot.parent >= 0 else np.ones(n, bool)
            present[i] = parent_present & (slot.copy < counts[slot.repeat_key])

        def run(i: int, start: np.ndarray) -> np.ndarray:
            call = self.slots[i].spec
            assert call is not None
            t_call[i] = start
            cursor = start + self._delay(rng, call.before, node[i])
            started = np.zeros(n, bool)
            for g, group in enumerate(self.slots[i].children):
                # A fresh between-delay for every child boundary.
                gap = self._delay(rng, call.between, node[i]) if g else 0.0
                any_present = np.zeros(n, bool)
                for c in group:
                    any_present |= present[c]
                begin = cursor + np.where(started, gap, 0.0)
                end = begin.copy()
                for c in group:
                    lead = self.slots[c].spec.lead
                    # No draw for a call without a lead: existing workloads keep their traces.
                    ret = run(c, begin + self._delay(rng, lead, node[i]) if lead != _NO_DELAY else begin)
                    end = np.where(present[c], np.maximum(end, ret), end)
                cursor = np.where(any_present, end, cursor)
                started |= any_present
            t_ret[i] = cursor + self._delay(rng, call.after, node[i])
            return t_ret[i]

        run(0, np.zeros(n))
        return Batch(n, client, node, present, t_call, t_ret)


def build_template(spec: TraceletSpec, node_codes: dict[str, int]) -> Template:
    """The template of a tracelet, with node names mapped to ``node_codes``."""
    return Template(spec, node_codes)
