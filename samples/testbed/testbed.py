#!/usr/bin/env python3
"""A testbed of network namespaces: a three-tier service behind a switch, captured two ways.

Namespaces (all named PREFIX-*, so several testbeds can run side by side):

    PREFIX-client 10.77.0.1 ─┐
    PREFIX-web    10.77.0.2 ─┤ veth pairs       PREFIX-sw: bridge br0 (no address),
    PREFIX-app    10.77.0.3 ─┤ to ports of ──>  the switch; capturing br0 in
    PREFIX-db     10.77.0.4 ─┘ the switch       promiscuous mode = a mirrored port

Each host's end is ``eth0``; the switch's ends are named after the hosts. ``web`` (HTTP,
:8080) calls ``app`` (HTTP, :8081), which calls ``db`` (Redis protocol, :6379), all on
keep-alive connections (``tiers.py``); ``client`` drives the load. Traffic never leaves
the namespaces. Teardown (servers stopped, namespaces deleted) runs on exit, Ctrl-C and
SIGTERM.

Needs root (or CAP_NET_ADMIN + CAP_NET_RAW) and iproute2; tcpdump for captures.

    sudo python3 samples/testbed/testbed.py run --requests 200         # up, load, down
    sudo python3 samples/testbed/testbed.py record --out samples/testbed  # + captures
    sudo python3 samples/testbed/testbed.py shell                      # up; Ctrl-C tears down

``record`` captures on the switch (``wirepath capture live --iface br0``, the mirrored-port
case) and on every server's ``eth0`` with tcpdump (the per-host case), then writes
``bridge.pcap``, ``web.pcap``, ``app.pcap``, ``db.pcap`` and the bridge's ``trace.parquet``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType
from typing import Self

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
TIERS = HERE / "tiers.py"
SUBNET = "10.77.0"
HOSTS = {"client": 1, "web": 2, "app": 3, "db": 4}
PORTS = {"web": 8080, "app": 8081, "db": 6379}
BRIDGE = "br0"


def addr(host: str) -> str:
    """The host's IPv4 address on the testbed network."""
    return f"{SUBNET}.{HOSTS[host]}"


def run_checked(*cmd: str) -> None:
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def build_switch(
    ns: Callable[[str], str], hosts: dict[str, str], made: list[str], prefix_len: int = 24
) -> None:
    """Namespaces ``ns("sw")`` (a bridge ``br0``) and ``ns(host)`` for each host, each
    host's ``eth0`` (its address from ``hosts``) joined by a veth pair to a port of the
    bridge named after the host. Every namespace made is appended to ``made`` at once, so
    a failure half-way still tears down what exists."""
    for host in ("sw", *hosts):
        run_checked("ip", "netns", "add", ns(host))
        made.append(ns(host))
        run_checked("ip", "-n", ns(host), "link", "set", "lo", "up")
    sw = ns("sw")
    run_checked("ip", "-n", sw, "link", "add", BRIDGE, "type", "bridge")
    # Forward at once (no STP learning delay) and keep frames within the bridge.
    run_checked(
        "ip", "-n", sw, "link", "set", BRIDGE, "type", "bridge", "stp_state", "0", "forward_delay", "0"
    )
    run_checked("ip", "-n", sw, "link", "set", BRIDGE, "up")
    for host, address in hosts.items():
        run_checked(
            "ip", "link", "add", "eth0", "netns", ns(host), "type", "veth", "peer", "name", host, "netns", sw
        )
        run_checked("ip", "-n", sw, "link", "set", host, "master", BRIDGE)
        run_checked("ip", "-n", sw, "link", "set", host, "up")
        run_checked("ip", "-n", ns(host), "addr", "add", f"{address}/{prefix_len}", "dev", "eth0")
        run_checked("ip", "-n", ns(host), "link", "set", "eth0", "up")


class Namespaces:
    """Hosts in network namespaces named ``PREFIX-host``; a context manager that brings
    them up (``up``) and tears everything down (``down``) on the way out, also when
    bringing up fails half way."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.namespaces: list[str] = []

    def ns(self, host: str) -> str:
        """The namespace of ``host``."""
        return f"{self.prefix}-{host}"

    def exec_argv(self, host: str, *cmd: str) -> list[str]:
        """``cmd`` run inside ``host``'s namespace."""
        return ["ip", "netns", "exec", self.ns(host), *cmd]

    def up(self) -> None:
        raise NotImplementedError

    def down(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        try:
            self.up()
        except BaseException:
            self.down()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.down()


class Testbed(Namespaces):
    """Namespaces, links and servers of one testbed (hosts ``client``, ``web``, ``app``,
    ``db`` and the switch ``sw``); a context manager that tears all down.

    Parameters
    ----------
    prefix : str
        Namespace name prefix (default: ``wptb-`` and a random suffix).
    python : str
        Interpreter for the servers and the load driver.
    """

    def __init__(self, prefix: str | None = None, python: str = sys.executable) -> None:
        super().__init__(prefix or f"wptb-{uuid.uuid4().hex[:6]}")
        self.python = python
        self.procs: list[subprocess.Popen[str]] = []

    def up(self) -> None:
        """Build the network and start the servers (returns once every server listens)."""
        if os.geteuid() != 0:
            raise SystemExit("the testbed needs root: network namespaces and veth links (sudo ...)")
        if shutil.which("ip") is None:
            raise SystemExit("the testbed needs iproute2: apt-get install iproute2")
        build_switch(self.ns, {host: addr(host) for host in HOSTS}, self.namespaces)
        self._serve("db", "db", "--listen", f"{addr('db')}:{PORTS['db']}")
        self._serve(
            "app", "app", "--listen", f"{addr('app')}:{PORTS['app']}", "--db", f"{addr('db')}:{PORTS['db']}"
        )
        self._serve(
            "web",
            "web",
            "--listen",
            f"{addr('web')}:{PORTS['web']}",
            "--app",
            f"{addr('app')}:{PORTS['app']}",
        )

    def _serve(self, host: str, *args: str) -> None:
        proc = subprocess.Popen(
            self.exec_argv(host, self.python, str(TIERS), *args),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.procs.append(proc)
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if line.strip() != "ready":
            raise RuntimeError(
                f"the {host} server did not start: {proc.stderr.read() if proc.stderr else ''}"
            )

    def load(self, requests: int = 100, concurrency: int = 4, think_s: float = 0.002) -> None:
        """Drive ``requests`` requests from the client host through all three tiers."""
        cmd = [self.python, str(TIERS), "load", "--web", f"{addr('web')}:{PORTS['web']}"]
        cmd += ["--requests", str(requests), "--concurrency", str(concurrency), "--think", str(think_s)]
        subprocess.run(self.exec_argv("client", *cmd), check=True, timeout=300)

    def down(self) -> None:
        """Stop the servers and delete the namespaces (their links and bridge go with them)."""
        for proc in self.procs:
            if proc.poll() is None:
                proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
            for stream in (proc.stdout, proc.stderr):
                if stream is not None:
                    stream.close()
        self.procs.clear()
        for ns in reversed(self.namespaces):
            subprocess.run(["ip", "netns", "del", ns], check=False, stderr=subprocess.DEVNULL)
        self.namespaces.clear()


@contextlib.contextmanager
def teardown_on_signals() -> Iterator[None]:
    """SIGTERM and SIGHUP end the run like Ctrl-C does, so the ``with`` blocks tear down."""

    def stop(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    previous = {s: signal.signal(s, stop) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


def record(bed: Testbed, out: Path, requests: int, concurrency: int) -> None:
    """Capture on the switch (live agent) and on each server (tcpdump) while driving load."""
    out.mkdir(parents=True, exist_ok=True)
    work = out / f".record-{bed.prefix}"
    work.mkdir()
    agent = subprocess.Popen(
        bed.exec_argv(
            "sw",
            bed.python,
            "-m",
            "wirepath",
            "capture",
            "live",
            "--iface",
            BRIDGE,
            "--out",
            str(work / "bridge"),
        ),
        cwd=REPO,
        stderr=subprocess.PIPE,
        text=True,
    )
    dumps = {
        host: subprocess.Popen(
            bed.exec_argv(
                # Immediate mode: a stop right after the load loses no packet still in a ring block.
                host,
                *("tcpdump", "-i", "eth0", "-n", "-U", "--immediate-mode", "-Z", "root"),
                *("-w", str(out / f"{host}.pcap")),
            ),
            stderr=subprocess.PIPE,
            text=True,
        )
        for host in PORTS
    }
    try:
        for proc in [agent, *dumps.values()]:
            assert proc.stderr is not None
            while True:  # wait until each recorder listens
                line = proc.stderr.readline()
                if not line or line.startswith("recording ") or "listening on" in line:
                    break
        bed.load(requests, concurrency)
        time.sleep(0.2)
    finally:
        for proc in [agent, *dumps.values()]:
            proc.send_signal(signal.SIGINT)
        for proc in [agent, *dumps.values()]:
            _, err = proc.communicate(timeout=120)
            sys.stderr.write(err)
    (pcap,) = sorted((work / "bridge").glob("capture-*.pcap*"))
    pcap.replace(out / "bridge.pcap")
    (work / "bridge" / "trace.parquet").replace(out / "trace.parquet")
    shutil.rmtree(work)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("action", choices=["run", "record", "shell"])
    p.add_argument("--requests", type=int, default=100, help="client requests to drive (default 100)")
    p.add_argument("--concurrency", type=int, default=4, help="client connections (default 4)")
    p.add_argument(
        "--out", type=Path, default=HERE, help="where 'record' writes (default: next to this script)"
    )
    p.add_argument("--prefix", help="namespace name prefix (default: wptb-<random>)")
    a = p.parse_args(argv)
    with teardown_on_signals(), Testbed(a.prefix) as bed:
        print(
            f"testbed {bed.prefix}: switch {bed.ns('sw')}:{BRIDGE}, hosts "
            + ", ".join(f"{h} {addr(h)}" for h in HOSTS),
            file=sys.stderr,
        )
        if a.action == "run":
            bed.load(a.requests, a.concurrency)
        elif a.action == "record":
            record(bed, a.out, a.requests, a.concurrency)
        else:
            print(
                f"capture with: ip netns exec {bed.ns('sw')} wirepath capture live --iface {BRIDGE} "
                "--out DIR",
                file=sys.stderr,
            )
            print("Ctrl-C tears the testbed down", file=sys.stderr)
            with contextlib.suppress(KeyboardInterrupt):
                signal.pause()
    return 0


if __name__ == "__main__":
    sys.exit(main())
