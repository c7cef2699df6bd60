"""Chain rounds' inner loop, compiled (numba) against the same model in numpy, one run.

    python benchmarks/chain_kernel.py [--messages 400000] [--parallelism 5]

For every candidate parent of every call of a multitier trace, the likelihood of the
parent's chain with the call put in (or, for its own parent, taken out) is computed
twice: by ``ChainModel.spliced_likelihood`` (the compiled loop the rounds use) and by
``ChainModel.chain_likelihood`` over the same spliced chains (numpy). Both must agree;
the table gives their times (best of three) and the ratio.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

# benchmarks/synth.py would shadow the synth package when this runs as a file.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

import infer  # noqa: E402
import synth  # noqa: E402
from infer.callpairs import match_calls, node_codes  # noqa: E402
from infer.candidates import CandidateChunks, Scoreboard  # noqa: E402
from infer.chains import ChainModel, _Members  # noqa: E402, PLC2701 (the kernel measured alone)

CONFIG = Path(__file__).resolve().parent.parent / "samples" / "synth" / "multitier.toml"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=400_000)
    ap.add_argument("--parallelism", type=float, default=5.0)
    args = ap.parse_args()
    cfg = replace(synth.load_config(CONFIG), messages=args.messages, parallelism=args.parallelism)
    trace = synth.generate_table(cfg)[0]
    nodes = node_codes(trace)
    pairs = match_calls(trace, nodes)
    params = infer.NestingParams()
    n_nodes = len(nodes.names)
    parent = infer.infer_nesting(trace, "fast").parent
    model = ChainModel.learn(pairs, parent, params, n_nodes)
    work = []
    for ch in CandidateChunks(pairs, 0, Scoreboard(params, n_nodes), siblings=True):
        c, par, group, members = _Members.of_chunk(ch, parent)
        work.append((c, par, group, members, *members.toggled()))
    entries = sum(w[0].size for w in work)

    def compiled() -> list[np.ndarray]:
        return [
            model.spliced_likelihood(pairs, par, g, c, m, ins, r, rem) for c, par, g, m, ins, r, rem in work
        ]

    def numpy_() -> list[np.ndarray]:
        return [
            model.chain_likelihood(pairs, par, *m.spliced(c, g, insert=ins, insert_rank=r, remove_rank=rem))
            for c, par, g, m, ins, r, rem in work
        ]

    compiled()  # compile (or load the cache) outside the timing
    timings = {}
    results = {}
    for name, fn in (("compiled (numba)", compiled), ("numpy", numpy_)):
        best = float("inf")
        for _ in range(3):
            t0 = time.perf_counter()
            results[name] = fn()
            best = min(best, time.perf_counter() - t0)
        timings[name] = best
    same = all(
        np.allclose(a, b, rtol=0, atol=1e-6)
        for a, b in zip(results["compiled (numba)"], results["numpy"], strict=True)
    )
    print(
        f"multitier.toml, {trace.num_rows:,} messages, parallelism {args.parallelism:g}: {entries:,} chains"
    )
    print(f"{'implementation':<20} {'seconds':>8} {'ns per chain':>13}")
    for name, t in timings.items():
        print(f"{name:<20} {t:8.3f} {t / entries * 1e9:13.0f}")
    print(f"numpy / compiled: {timings['numpy'] / timings['compiled (numba)']:.1f}x; same scores: {same}")


if __name__ == "__main__":
    main()
