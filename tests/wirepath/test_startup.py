"""What a command-line process loads before its work: a verb pays for its own packages,
not for pandas (which pyarrow would import on its first conversion) or for the
packages of other verbs; and pyarrow still works with pandas where pandas is used."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PCAP = ROOT / "samples" / "testbed" / "bridge.pcap"


def _imported(argv: list[str]) -> set[str]:
    """The modules a ``wirepath ARGV`` process holds when the command has run."""
    code = (
        "import runpy, sys; sys.argv = ['wirepath', *sys.argv[1:]]\n"
        "try:\n    runpy.run_module('wirepath', run_name='__main__')\n"
        "except SystemExit as e:\n    assert not e.code, e.code\n"
        "print('\\n'.join(sys.modules))"
    )
    proc = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return set(proc.stdout.splitlines())


def test_capture_pcap_converts_without_pandas_or_other_verbs(tmp_path: Path) -> None:
    mods = _imported(["capture", "pcap", str(PCAP), "--out", str(tmp_path / "t.parquet"), "--quiet"])
    assert "capture.convert" in mods  # the verb's own work was imported and ran
    assert (tmp_path / "t.parquet").stat().st_size > 0
    for other in ("pandas", "scipy", "plotly", "networkx", "synth.generate", "trend.dashboard"):
        assert other not in mods, other


@pytest.mark.parametrize(
    "argv",
    [
        ["--help"],
        ["infer", "nesting", "--help"],
        ["capture", "pcap", "--help"],
        ["capture", "live", "--help"],
        ["trend", "from-paths", "--help"],
        ["viz", "diff", "--help"],
        ["export", "--help"],
        ["convert", "--help"],
        ["packets", "--help"],
    ],
    ids=lambda a: " ".join(a[:-1]) or "wirepath",
)
def test_help_loads_neither_numpy_nor_arrow(argv: list[str]) -> None:
    mods = _imported(argv)
    assert "wirepath.cli" in mods
    assert not {m for m in mods if m.split(".")[0] in ("numpy", "pyarrow", "scipy", "pandas")}


def test_a_small_inference_loads_neither_numba_nor_scipy(tmp_path: Path) -> None:
    out = tmp_path / "p.json"
    mods = _imported(["infer", "nesting", str(ROOT / "samples" / "sw1.txt"), "--out", str(out), "--quiet"])
    assert out.stat().st_size > 0
    assert "infer.chains" in mods  # chain rounds ran
    assert not {m for m in mods if m.split(".")[0] in ("numba", "scipy", "pandas")}


def test_info_reads_a_trace_without_pandas(tmp_path: Path) -> None:
    trace = tmp_path / "t.parquet"
    subprocess.run(
        [sys.executable, "-m", "wirepath", "convert", str(ROOT / "samples" / "sw1.txt"), str(trace)],
        check=True,
    )
    mods = _imported(["info", str(trace)])
    assert "tracefmt.parquet" in mods
    assert "pandas" not in mods


@pytest.mark.parametrize(
    "code",
    [
        # Held back before pandas is imported: pyarrow works without it ...
        "hold_back_pandas(); pa.array(np.arange(3)); pa.array(['a']); "
        "pa.array([1, None]).to_numpy(zero_copy_only=False); assert 'pandas' not in sys.modules",
        # ... and with it, once a call that needs pandas has made pyarrow import it.
        "hold_back_pandas(); pa.array(np.arange(3)); import pandas as pd; "
        "t = pa.Table.from_pandas(pd.DataFrame({'c': pd.Categorical(['x', 'y', 'x'])})); "
        "assert pa.types.is_dictionary(t.schema.field('c').type); "
        "assert list(t.to_pandas()['c']) == ['x', 'y', 'x']; "
        "assert pa.types.is_dictionary(pa.array(pd.Categorical(['a'])).type)",
        # pandas already imported: nothing is held back.
        "import pandas as pd; hold_back_pandas(); "
        "assert pa.types.is_dictionary(pa.array(pd.Categorical(['a'])).type)",
    ],
    ids=["without pandas", "pandas later", "pandas first"],
)
def test_pyarrow_with_pandas_held_back(code: str) -> None:
    prelude = (
        "import sys; import numpy as np; import pyarrow as pa; from wirepath._cli import hold_back_pandas; "
    )
    proc = subprocess.run([sys.executable, "-c", prelude + code], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr


def test_a_cluster_run_is_not_held_back(tmp_path: Path) -> None:
    """With --workers the process runs Dask, which may hand pyarrow pandas objects."""
    trace = tmp_path / "t.parquet"
    subprocess.run(
        [sys.executable, "-m", "wirepath", "convert", str(ROOT / "samples" / "sw1.txt"), str(trace)],
        check=True,
    )
    code = (
        "import sys; from unittest import mock; from wirepath.cli import main\n"
        "with mock.patch('wirepath.cli.hold_back_pandas', side_effect=AssertionError('held back')):\n"
        f"    sys.exit(main(['infer', 'nesting', {str(trace)!r}, '--preset', 'paper', '--workers', '1', "
        f"'--out', {str(tmp_path / 'p.json')!r}], own_process=True))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False, timeout=120
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
