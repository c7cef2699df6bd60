"""Every input the fuzzer (benchmarks/fuzz.py) ever found to crash or hang a reader is
replayed: each must now succeed or end in one of wirepath's own errors."""

from __future__ import annotations

import contextlib
import importlib.util
from pathlib import Path

import pytest

import tracefmt

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "tests" / "fuzz_corpus"
CASES = sorted(CORPUS.glob("*/*.bin"))


def _fuzz():
    spec = importlib.util.spec_from_file_location("_fuzz", ROOT / "benchmarks" / "fuzz.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


FUZZ = _fuzz()


def test_the_corpus_is_not_empty() -> None:
    assert CASES


@pytest.mark.parametrize("case", CASES, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_a_former_crasher_is_handled(case: Path) -> None:
    target = FUZZ.TARGETS[case.parent.name]
    # One of wirepath's errors is one clear line for the user: what a reader must do.
    with contextlib.suppress(tracefmt.WirepathError):
        target(case.read_bytes())
