"""What every verb module of the command line shares: the parser class, output, progress.

Each verb group lives in its own module (``cli_<group>.py``) with a
``register(verbs, algos)`` function; ``wirepath.cli`` builds the parser from them.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from collections.abc import Callable
from typing import Any, NoReturn

from tracefmt.cluster import Runner, open_runner
from tracefmt.display import printable

__all__ = [
    "Parser",
    "UsageError",
    "add_cluster_options",
    "add_verb",
    "count",
    "emit",
    "end_progress",
    "hold_back_pandas",
    "probability",
    "progress",
    "runner",
]


class _NoPandas:
    """An import finder that refuses ``pandas`` (see :func:`hold_back_pandas`)."""

    @staticmethod
    def find_spec(name: str, path: object = None, target: object = None) -> None:
        if name == "pandas":
            raise ImportError("pandas held back while pyarrow checks for it")


def hold_back_pandas() -> None:
    """Spare a command-line process the import of pandas that pyarrow makes on its first
    conversion between Arrow and numpy.

    pyarrow imports pandas (a quarter of a second of CPU, more than reading a
    100,000-packet capture) only to ask whether an input is a pandas object and to look
    up pandas' null values; no verb hands it one. It is asked once with pandas refused,
    so it notes pandas as absent for the rest of the process: pyarrow still imports pandas
    where pandas is the point (``to_pandas``, ``from_pandas``), but ``pa.array`` no
    longer takes pandas' ``NaT`` for a null. Only for a process that never hands pyarrow
    pandas objects: a command line that runs no Dask cluster.
    """
    if "pandas" in sys.modules:
        return
    import numpy as np
    import pyarrow as pa

    sys.meta_path.insert(0, _NoPandas)  # type: ignore[arg-type]
    try:
        pa.array(np.zeros(0))  # asks whether the input is a pandas object
        pa.array([True]).to_numpy(zero_copy_only=False)  # looks up pandas' null values
    finally:
        sys.meta_path.remove(_NoPandas)  # type: ignore[arg-type]


class UsageError(Exception):
    """Raised by the parser instead of exiting, so ``main`` can return 2."""


#: Flags renamed so that each is its keyword argument's name: the old one is answered
#: with the new one and the verb it belongs to (``--name`` stays a flag of ``convert``).
RENAMED_FLAGS = {
    "--x": "--overlap-penalty (infer nesting)",
    "--y": "--same-node-penalty (infer nesting)",
    "--z": "--children-penalty (infer nesting)",
    "--no-ids": "--no-use-ids (infer nesting)",
    "--queue": "--loss-queue (synth)",
    "--name": "--test (trend compare)",
}


class Parser(argparse.ArgumentParser):
    """An argument parser that raises :class:`UsageError` instead of exiting."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        if message.startswith("unrecognized arguments:"):
            given = message.split(":", 1)[1].split()
            renamed = [f"{old} is now {RENAMED_FLAGS[old]}" for old in given if old in RENAMED_FLAGS]
            if renamed:
                message += f" ({'; '.join(renamed)})"
        raise UsageError(f"{self.prog}: error: {message}")


def add_verb(
    verbs: argparse._SubParsersAction,
    name: str,
    handler: Callable[[argparse.Namespace], int],
    help_: str,
    desc: str,
    *,
    json_help: str = "print the result as JSON on stdout",
) -> Parser:
    """Add verb ``name`` (with ``--json`` and ``--quiet``) whose ``handler(args)`` returns
    the exit status."""
    p = verbs.add_parser(
        name, help=help_, description=desc, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.set_defaults(handler=handler)
    p.add_argument("--json", action="store_true", help=json_help)
    p.add_argument("--quiet", action="store_true", help="no progress bar on a terminal")
    return p


class Progress:
    """A progress bar on stderr (tqdm): messages done, and for input files of known size
    the bytes read, the rate and the time left. Called with the messages done so far,
    it fits where a verb takes ``on_progress``."""

    def __init__(
        self, label: str, *, total_bytes: int | None = None, in_bytes: bool = False, steps: bool = False
    ) -> None:
        from tqdm import tqdm

        self.messages = 0
        self._bytes = in_bytes or total_bytes is not None
        self.bar = tqdm(
            total=total_bytes,
            desc="reading the input" if steps else label,
            unit="B" if self._bytes else " steps" if steps else " messages",
            unit_scale=not steps,
            # A few long steps: the step's words and the time so far.
            bar_format=f"{label}: {{desc}} (step {{n}}, {{elapsed}})" if steps else None,
            file=sys.stderr,
            dynamic_ncols=True,
            leave=False,
        )

    def __call__(self, messages: int) -> None:
        self.messages = messages
        if self._bytes:
            self.bar.set_postfix_str(f"{messages:,} messages", refresh=False)
        else:
            self.bar.update(messages - self.bar.n)

    def read(self, packets: int, nbytes: int) -> None:
        """Input read so far: packets and bytes (the bar's measure for files)."""
        self.bar.set_postfix_str(f"{packets:,} packets, {self.messages:,} messages", refresh=False)
        self.bar.update(nbytes - self.bar.n)

    def recorded(self, files: int, nbytes: int) -> None:
        """A recording's files and bytes so far (no total: a live capture has no end)."""
        self.bar.set_postfix_str(f"{files} file{'s' if files != 1 else ''}", refresh=False)
        self.bar.update(nbytes - self.bar.n)

    def step(self, text: str) -> None:
        """One more step of the work done; ``text`` says which (drawn at once: steps
        are few and far between)."""
        self.bar.set_description_str(text, refresh=False)
        self.bar.update(1)
        self.bar.refresh()

    def close(self) -> None:
        self.bar.close()


def add_cluster_options(p: Parser) -> None:
    """``--scheduler`` / ``--workers``: run the verb's tasks on a Dask cluster
    (``tracefmt.cluster``); without them it runs in this process."""
    g = p.add_mutually_exclusive_group()
    g.add_argument(
        "--scheduler",
        metavar="ADDRESS",
        help="run on this Dask cluster (tcp://host:8786); needs the dask extra",
    )
    g.add_argument(
        "--workers",
        type=count(1, 4096),
        metavar="N",
        help="run on a local Dask cluster of N worker processes started for this run",
    )


def runner(args: argparse.Namespace) -> contextlib.AbstractContextManager[Runner]:
    """The runner ``add_cluster_options``' flags ask for (in-process without them)."""
    return open_runner(getattr(args, "scheduler", None), getattr(args, "workers", None))


def progress(
    label: str,
    args: argparse.Namespace | None = None,
    *,
    total_bytes: int | None = None,
    in_bytes: bool = False,
    steps: bool = False,
) -> Progress | None:
    """A :class:`Progress` bar when stderr is a terminal and ``--quiet`` was not given,
    else None (nothing is drawn into a pipe or a log)."""
    if not sys.stderr.isatty() or (args is not None and getattr(args, "quiet", False)):
        return None
    return Progress(label, total_bytes=total_bytes, in_bytes=in_bytes, steps=steps)


def end_progress(bar: Progress | None) -> None:
    """Remove the bar of :func:`progress`."""
    if bar is not None:
        bar.close()


def emit(args: argparse.Namespace, doc: dict[str, Any], text: str) -> None:
    """Print ``doc`` as JSON when ``--json`` was given, else the human ``text``."""
    if args.json:
        print(json.dumps(doc, indent=2, sort_keys=False, default=str))
    else:
        # Whatever a name from a trace holds, the terminal shows it and does not obey it.
        print(printable(text, keep="\n"))


def probability(text: str) -> float:
    """A probability given on the command line (0 to 1), for ``type=``.

    >>> probability("0.9")
    0.9
    """
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r} (a probability from 0 to 1)") from None
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"{text} is not a probability (from 0 to 1)")
    return value


_MANY = 1 << 40


def count(lo: int = 1, hi: int = _MANY) -> Callable[[str], int]:
    """An argparse ``type=`` for a whole number from ``lo`` to ``hi`` (a negative count
    must not act as a Python slice, keeping all but the last few).

    >>> count(0)("3"), count(1)("12")
    (3, 12)
    """

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
        if not lo <= value <= hi:
            span = f">= {lo}" if hi == _MANY else f"from {lo} to {hi:,}"
            raise argparse.ArgumentTypeError(f"{text} is out of range (a whole number {span})")
        return value

    return parse


def add_key_options(p: argparse.ArgumentParser) -> None:
    """``--request-id-headers`` and ``--keep-headers``: what a capture reads of request
    identity and keeps of headers (``capture.request_keys.KeyOptions``)."""
    p.add_argument(
        "--request-id-headers",
        default="X-Request-ID,X-Correlation-ID",
        metavar="NAME,...",
        help="headers holding an opaque request id, the first present wins (column request_id; default "
        "X-Request-ID,X-Correlation-ID; an empty value reads none). Trace ids (traceparent, b3, "
        "uber-trace-id, grpc-trace-bin) are always read",
    )
    p.add_argument(
        "--keep-headers",
        default="",
        metavar="NAME,...",
        help="also store these headers' values, one column x_header_<name> each (e.g. user-agent -> "
        "x_header_user_agent); by default no other header value is stored",
    )
    p.add_argument(
        "--connections",
        action="store_true",
        help="also keep each message's connection (src_ip, src_port, dst_ip, dst_port, and stream as "
        "tshark's tcp.stream): what 'wirepath packets' needs to go back to the packets (about a "
        "quarter more CPU, half again the file)",
    )


def key_options(args: argparse.Namespace) -> Any:
    """The ``KeyOptions`` of ``--request-id-headers`` and ``--keep-headers`` (a bad name is
    a ``ParameterError``, one line naming what is allowed)."""
    from capture.request_keys import KeyOptions

    return KeyOptions(
        request_id_headers=KeyOptions.split(args.request_id_headers),
        keep_headers=KeyOptions.split(args.keep_headers),
        connections=args.connections,
    )
