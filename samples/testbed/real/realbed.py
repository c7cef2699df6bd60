#!/usr/bin/env python3
"""The real testbed: nginx, two app servers, Redis, PostgreSQL and a gRPC service in
network namespaces behind one switch, captured two ways, with faults injected one run
at a time.

    PREFIX-client 10.78.0.1  load generator (many keep-alive clients)
    PREFIX-nginx  10.78.0.2  nginx :8080, round robin over keep-alive HTTPS upstreams
    PREFIX-app1   10.78.0.3  app.py :8443 (TLS)     ─┐ each calls redis, pg, grpc
    PREFIX-app2   10.78.0.4  app.py :8443 (TLS)     ─┘ (OpenTelemetry spans to a file)
    PREFIX-redis  10.78.0.5  redis-server :6379
    PREFIX-pg     10.78.0.6  PostgreSQL :5432
    PREFIX-grpc   10.78.0.7  grpcsvc.py :50051 (HTTP/2 in the clear)
    PREFIX-sw     bridge br0, the switch: capturing it is the mirrored-port case

A run records the switch (``wirepath capture live --iface br0``) and every server's
``eth0`` (tcpdump) while the load runs. Faults, one run each:

    pgdelay   tc netem: PostgreSQL's replies to app1 are delayed (--pg-delay-ms)
    code      app2's /cart waits between its Redis GET and its gRPC call (--code-ms)
    slowgrpc  the gRPC method Quote takes longer (--grpc-ms)

``run`` does the base run and the three fault runs, converts and merges the captures
(app2's tcpdump file is shifted by --skew-ms after recording: a host whose clock is
off), infers the paths with the default settings, diffs every fault run against the base
and prints what it found. ``loads`` scores the inference per request against the apps'
spans at several loads. ``shell`` brings the testbed up until Ctrl-C. Needs root,
iproute2, tcpdump, nginx, redis-server, PostgreSQL, openssl and the dev extras.
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import json
import os
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from testbed import BRIDGE, Namespaces, build_switch, run_checked, teardown_on_signals  # noqa: E402

REPO = HERE.parents[2]
SUBNET = "10.78.0"
HOSTS = {"client": 1, "nginx": 2, "app1": 3, "app2": 4, "redis": 5, "pg": 6, "grpc": 7}
PORTS = {"nginx": 8080, "app1": 8443, "app2": 8443, "redis": 6379, "pg": 5432, "grpc": 50051}
SERVERS = ("nginx", "app1", "app2", "redis", "pg", "grpc")
NAMES = HERE / "names.toml"
PG_RELAY_PORT = 5433
FAULTS = ("pgdelay", "code", "slowgrpc")
SKEWED_HOST = "app2"

#: Each endpoint's calls below the app (the ground truth; ``|`` joins calls made at once).
CALLS = {
    "item": ["redis", "pg"],
    "cart": ["pg", "redis", "grpc"],
    "home": [("grpc", "pg", "redis")],
}


def addr(host: str) -> str:
    """The host's IPv4 address on the testbed network."""
    return f"{SUBNET}.{HOSTS[host]}"


def expected_shape(endpoint: str, app: str) -> str:
    """The pattern shape text (``viz.paths.shape_of``) of ``endpoint`` served by ``app``."""
    parts = []
    for c in CALLS[endpoint]:
        parts.append("|".join(f"{app}>{x}" for x in c) if isinstance(c, tuple) else f"{app}>{c}")
    return f"client>nginx(nginx>{app}({','.join(parts)}))"


def missing_binaries() -> list[str]:
    """Debian packages whose programs the testbed needs and cannot find."""
    need = {
        "ip": "iproute2",
        "tc": "iproute2",
        "tcpdump": "tcpdump",
        "nginx": "nginx-light",
        "redis-server": "redis-server",
        "openssl": "openssl",
    }
    missing = [pkg for prog, pkg in need.items() if shutil.which(prog) is None]
    if postgres_bin("postgres") is None:
        missing.append("postgresql")
    modules = {
        "grpc": "grpcio",
        "asyncpg": "asyncpg",
        "redis": "redis",
        "opentelemetry.sdk": "opentelemetry-sdk",
    }
    for module, pkg in modules.items():
        try:
            __import__(module)
        except ImportError:
            missing.append(f"{pkg} (pip)")
    return sorted(set(missing))


def postgres_bin(name: str) -> str | None:
    """A PostgreSQL program: the Debian package's (newest) first, else one on PATH."""
    found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"), key=lambda p: int(p.split("/")[4]))
    return found[-1] if found else shutil.which(name)


@dataclass
class Run:
    """The files of one recorded run."""

    name: str
    dir: Path
    load: dict[str, Any] = field(default_factory=dict)
    bridge_trace: Path | None = None
    hosts_trace: Path | None = None
    spans: Path | None = None
    capture: dict[str, Any] = field(default_factory=dict)


#: Who sets or passes on ``X-Request-ID``: nobody; nginx (``$request_id`` to the apps over
#: TLS, and back to the client in its response); nginx, and app1 on to its gRPC calls.
REQUEST_IDS = ("none", "nginx", "nginx+app1")


class RealTestbed(Namespaces):
    """Namespaces, links, servers; a context manager that tears all down.

    Parameters
    ----------
    work : path
        Scratch directory for configs, certificates, logs and the database.
    prefix : str
        Namespace name prefix (default ``wprt-`` and a random suffix).
    """

    def __init__(
        self,
        work: Path,
        prefix: str | None = None,
        python: str = sys.executable,
        pg_delay_ms: float = 20.0,
        code_ms: float = 15.0,
        grpc_ms: float = 10.0,
        delay_by: str = "auto",
        request_ids: str = "none",
    ) -> None:
        if delay_by not in ("auto", "netem", "relay"):
            raise ValueError(f"delay_by must be auto, netem or relay, not {delay_by!r}")
        if request_ids not in REQUEST_IDS:
            raise ValueError(f"request_ids must be one of {', '.join(REQUEST_IDS)}, not {request_ids!r}")
        self.delay_by = delay_by
        self.request_ids = request_ids
        self.work = work.resolve()
        super().__init__(prefix or f"wprt-{uuid.uuid4().hex[:6]}")
        self.python = python
        self.pg_delay_ms = pg_delay_ms
        self.code_ms = code_ms
        self.grpc_ms = grpc_ms
        self.pgdir: Path | None = None
        self.faults_on: set[str] = set()
        self.procs: dict[str, subprocess.Popen[str]] = {}
        self.logs: list[Any] = []

    # ---- bring-up --------------------------------------------------------------------
    def up(self) -> None:
        if os.geteuid() != 0:
            raise SystemExit("the testbed needs root: network namespaces and veth links (sudo ...)")
        missing = missing_binaries()
        if missing:
            raise SystemExit("the real testbed needs: " + ", ".join(missing))
        self.work.mkdir(parents=True, exist_ok=True)
        build_switch(self.ns, {h: addr(h) for h in HOSTS}, self.namespaces)
        self._certificate()
        self.netem = self.delay_by == "netem" or (self.delay_by == "auto" and self._has_netem())
        self._start_redis()
        self._start_postgres()
        if not self.netem:
            # No sch_netem in this kernel: app1 reaches PostgreSQL through a relay that can
            # hold back the replies (pgrelay.py); app2 connects directly.
            self._start_python(
                "pgrelay",
                HERE / "pgrelay.py",
                "--listen",
                f"{addr('pg')}:{PG_RELAY_PORT}",
                "--to",
                f"127.0.0.1:{PORTS['pg']}",
                "--delay-ms",
                str(self.pg_delay_ms),
                host="pg",
            )
        self._start_python(
            "grpc",
            HERE / "grpcsvc.py",
            "--listen",
            f"{addr('grpc')}:{PORTS['grpc']}",
            "--fault-ms",
            str(self.grpc_ms),
        )
        for app in ("app1", "app2"):
            self._start_python(
                app,
                HERE / "app.py",
                *("--listen", f"{addr(app)}:{PORTS[app]}", "--name", app),
                *("--redis", f"{addr('redis')}:{PORTS['redis']}", "--pg", self.pg_address(app)),
                *("--grpc", f"{addr('grpc')}:{PORTS['grpc']}"),
                *("--cert", str(self.work / "cert.pem"), "--key", str(self.work / "key.pem")),
                *("--spans", str(self.work / f"spans-{app}.jsonl"), "--fault-ms", str(self.code_ms)),
                *(["--pass-request-id"] if self.request_ids == "nginx+app1" and app == "app1" else []),
            )
        self._start_nginx()

    def _has_netem(self) -> bool:
        probe = ["tc", "-n", self.ns("client"), "qdisc", "add", "dev", "lo", "root", "netem", "delay", "1ms"]
        if subprocess.run(probe, capture_output=True, check=False).returncode != 0:
            return False
        run_checked("tc", "-n", self.ns("client"), "qdisc", "del", "dev", "lo", "root")
        return True

    def pg_address(self, app: str) -> str:
        """Where ``app`` reaches PostgreSQL (app1 through the relay when there is no netem)."""
        port = PG_RELAY_PORT if app == "app1" and not self.netem else PORTS["pg"]
        return f"{addr('pg')}:{port}"

    def _log(self, name: str) -> Any:
        f = (self.work / f"{name}.log").open("a")
        self.logs.append(f)
        return f

    def _spawn(self, name: str, host: str, *cmd: str, stdout: Any = None) -> subprocess.Popen[str]:
        proc = subprocess.Popen(
            self.exec_argv(host, *cmd),
            stdout=stdout if stdout is not None else self._log(name),
            stderr=subprocess.STDOUT if stdout is None else self._log(name),
            text=True,
            cwd=self.work,
        )
        self.procs[name] = proc
        return proc

    def wait_port(self, host: str, port: int, timeout_s: float = 30.0) -> None:
        """Wait until ``host`` accepts TCP connections on ``port`` (tried from the client)."""
        code = (
            "import socket,sys,time\n"
            f"end=time.time()+{timeout_s}\n"
            "while True:\n"
            "    try:\n"
            f"        socket.create_connection(('{addr(host)}',{port}),1).close(); break\n"
            "    except OSError:\n"
            "        if time.time()>end: sys.exit(1)\n"
            "        time.sleep(0.05)\n"
        )
        done = subprocess.run(self.exec_argv("client", self.python, "-c", code), check=False)
        if done.returncode != 0:
            raise RuntimeError(f"{host} does not listen on :{port}; see {self.work}/*.log")

    def _certificate(self) -> None:
        run_checked(
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-days",
            "2",
            "-subj",
            "/CN=app.testbed",
            "-keyout",
            str(self.work / "key.pem"),
            "-out",
            str(self.work / "cert.pem"),
        )

    def _start_redis(self) -> None:
        self._spawn(
            "redis",
            "redis",
            "redis-server",
            "--bind",
            addr("redis"),
            "--port",
            str(PORTS["redis"]),
            "--save",
            "",
            "--appendonly",
            "no",
            "--protected-mode",
            "no",
            "--dir",
            str(self.work),
        )
        self.wait_port("redis", PORTS["redis"])
        pipe = "".join(f"SET item:{i} {i * 7}\r\n" for i in range(100))
        subprocess.run(
            self.exec_argv("redis", "redis-cli", "-h", addr("redis"), "--pipe"),
            input=pipe,
            check=True,
            capture_output=True,
            text=True,
        )

    def _start_postgres(self) -> None:
        # Its own directory under /tmp: the server runs as an unprivileged user, who must
        # reach it (a pytest or home directory may be closed to them).
        self.pgdir = Path(tempfile.mkdtemp(prefix="wprt-pg-"))
        os.chmod(self.pgdir, 0o755)
        user = "postgres" if _has_user("postgres") else "nobody"
        data = _init_cluster(self.pgdir / "data", user)
        self._spawn(
            "pg",
            "pg",
            "runuser",
            "-u",
            user,
            "--",
            str(postgres_bin("postgres")),
            "-D",
            str(data),
            "-k",
            str(data),
            "-c",
            f"listen_addresses={addr('pg')},127.0.0.1",
            "-c",
            "fsync=off",
            "-c",
            "synchronous_commit=off",
            "-c",
            "full_page_writes=off",
            "-c",
            "max_connections=40",
        )
        self.wait_port("pg", PORTS["pg"])
        self._create_items()

    def _create_items(self) -> None:
        """The table the apps query, once the server accepts logins."""
        sql = (
            "CREATE TABLE items (id int PRIMARY KEY, price int);"
            "INSERT INTO items SELECT i, i * 3 FROM generate_series(0, 99) i;"
        )
        psql = postgres_bin("psql") or "psql"
        for _ in range(50):  # the server may listen a moment before it accepts logins
            done = subprocess.run(
                self.exec_argv("pg", psql, "-h", addr("pg"), "-U", "postgres", "-q", "-c", sql),
                check=False,
                capture_output=True,
                text=True,
            )
            if done.returncode == 0:
                return
            time.sleep(0.2)
        raise RuntimeError(f"PostgreSQL setup failed: {done.stderr.strip()}")

    def _start_python(self, name: str, script: Path, *args: str, host: str | None = None) -> None:
        proc = self._spawn(name, host or name, self.python, str(script), *args, stdout=subprocess.PIPE)
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if line.strip() != "ready":
            log = (self.work / f"{name}.log").read_text(errors="replace")[-2000:]
            raise RuntimeError(f"the {name} server did not start:\n{log}")

    def _start_nginx(self) -> None:
        tmp = self.work / "nginx-tmp"
        tmp.mkdir()
        upstreams = "".join(f"        server {addr(a)}:{PORTS[a]};\n" for a in ("app1", "app2"))
        temps = "".join(
            f"    {k}_temp_path {tmp}/{k};\n" for k in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
        )
        stamp = ""
        if self.request_ids != "none":
            stamp = (
                "            proxy_set_header X-Request-ID $request_id;\n"
                "            add_header X-Request-ID $request_id always;\n"
            )
        conf = f"""worker_processes 1;
daemon off;
user root;
pid {self.work}/nginx.pid;
error_log {self.work}/nginx-error.log warn;
events {{ worker_connections 4096; }}
http {{
    access_log off;
{temps}
    upstream apps {{
{upstreams}        keepalive 256;
        keepalive_requests 1000000;
        keepalive_timeout 600s;
    }}
    server {{
        listen {addr("nginx")}:{PORTS["nginx"]} backlog=1024;
        keepalive_requests 1000000;
        keepalive_timeout 600s;
        location / {{
            proxy_pass https://apps;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_ssl_session_reuse on;
            proxy_ssl_verify off;
{stamp}        }}
    }}
}}
"""
        (self.work / "nginx.conf").write_text(conf)
        self._spawn("nginx", "nginx", "nginx", "-c", str(self.work / "nginx.conf"), "-p", str(self.work))
        self.wait_port("nginx", PORTS["nginx"])

    # ---- load and faults ---------------------------------------------------------------
    def load(self, requests: int, clients: int, first: int = 0, think_s: float = 0.0) -> dict[str, Any]:
        """Drive ``requests`` requests from ``clients`` keep-alive clients; the load's summary."""
        cmd = [self.python, str(HERE / "load.py"), "--front", f"{addr('nginx')}:{PORTS['nginx']}"]
        cmd += ["--requests", str(requests), "--clients", str(clients), "--first", str(first)]
        cmd += ["--think", str(think_s)]
        done = subprocess.run(self.exec_argv("client", *cmd), capture_output=True, text=True, timeout=600)
        if done.returncode != 0 and not done.stdout:
            raise RuntimeError(f"load failed: {done.stderr.strip()[-2000:]}")
        doc = json.loads(done.stdout.strip().splitlines()[-1])
        if doc["errors"]:
            raise RuntimeError(f"load saw {doc['errors']} errors, first: {doc['first_error']}")
        return doc

    def fault(self, name: str, on: bool) -> None:
        """Switch fault ``name`` (``pgdelay``, ``code``, ``slowgrpc``) on or off."""
        if on == (name in self.faults_on):
            return  # the servers toggle on a signal: a second switch would undo the first
        self.faults_on.symmetric_difference_update({name})
        if name == "pgdelay" and not self.netem:
            self.procs["pgrelay"].send_signal(signal.SIGUSR1)
            time.sleep(0.2)
        elif name == "pgdelay":
            dev = ["dev", "eth0"]
            if on:
                pg = self.ns("pg")
                run_checked("tc", "-n", pg, "qdisc", "add", *dev, "root", "handle", "1:", "prio")
                run_checked(
                    "tc",
                    "-n",
                    pg,
                    "qdisc",
                    "add",
                    *dev,
                    "parent",
                    "1:3",
                    "handle",
                    "30:",
                    "netem",
                    "delay",
                    f"{self.pg_delay_ms}ms",
                )
                run_checked(
                    "tc",
                    "-n",
                    pg,
                    "filter",
                    "add",
                    *dev,
                    "parent",
                    "1:0",
                    "protocol",
                    "ip",
                    "prio",
                    "1",
                    "u32",
                    "match",
                    "ip",
                    "dst",
                    f"{addr('app1')}/32",
                    "flowid",
                    "1:3",
                )
            else:
                run_checked("tc", "-n", self.ns("pg"), "qdisc", "del", *dev, "root")
        elif name in ("code", "slowgrpc"):
            # Each server toggles its fault on SIGUSR1.
            self.procs["app2" if name == "code" else "grpc"].send_signal(signal.SIGUSR1)
            time.sleep(0.2)
        else:
            raise ValueError(f"unknown fault {name!r} (must be one of {', '.join(FAULTS)})")

    def down(self) -> None:
        """Stop the servers and delete the namespaces."""
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.terminate()
        for proc in self.procs.values():
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
            if proc.stdout is not None:
                proc.stdout.close()
        self.procs.clear()
        for f in self.logs:
            f.close()
        self.logs.clear()
        for ns in reversed(self.namespaces):
            subprocess.run(["ip", "netns", "del", ns], check=False, stderr=subprocess.DEVNULL)
        self.namespaces.clear()
        if self.pgdir is not None:
            shutil.rmtree(self.pgdir, ignore_errors=True)
            self.pgdir = None

    # ---- recording ----------------------------------------------------------------------
    def record(
        self, name: str, out: Path, requests: int, clients: int, first: int, think_s: float = 0.0
    ) -> Run:
        """One run: warm up, then capture on the switch and every server while the load runs."""
        run = Run(name, out / name)
        run.dir.mkdir(parents=True, exist_ok=True)
        self.load(max(100, clients * 4), clients, first=first + 10_000_000)  # connections, statements
        for app in ("app1", "app2"):
            (self.work / f"spans-{app}.jsonl").unlink(missing_ok=True)
        agent = self._start_agent(run)
        procs = [agent, *(self._start_tcpdump(h, run) for h in SERVERS)]
        try:
            for proc in procs:
                _wait_listening(proc)
            time.sleep(0.3)
            run.load = self.load(requests, clients, first=first, think_s=think_s)
            time.sleep(1.0)  # the last spans reach their files
        finally:
            outs = _stop_recorders(procs, agent, run)
        run.capture = json.loads(outs[0][0])
        run.bridge_trace = Path(run.capture["trace"])
        run.spans = self._gather_spans(run)
        return run

    def _start_agent(self, run: Run) -> subprocess.Popen[str]:
        """``wirepath capture live`` on the switch's bridge, into the run's directory."""
        argv = self.exec_argv(
            "sw",
            self.python,
            "-X",
            "faulthandler",  # SIGABRT dumps every thread's stack: where a stuck agent waits
            "-m",
            "wirepath",
            "capture",
            "live",
            "--iface",
            BRIDGE,
            "--names",
            str(NAMES),
            "--out",
            str(run.dir / "bridge"),
            "--json",
        )
        return subprocess.Popen(argv, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def _start_tcpdump(self, host: str, run: Run) -> subprocess.Popen[str]:
        """tcpdump on a server's own interface: what that host saw, for the merge."""
        argv = self.exec_argv(
            host,
            "tcpdump",
            "-i",
            "eth0",
            "-n",
            "-U",
            "--immediate-mode",
            "-Z",
            "root",
            "-s",
            "0",
            "-w",
            str(run.dir / f"{host}.pcap"),
        )
        return subprocess.Popen(argv, stderr=subprocess.PIPE, text=True)

    def _gather_spans(self, run: Run) -> Path:
        """The apps' span files, one file for the run."""
        spans = run.dir / "spans.jsonl"
        with spans.open("w") as f:
            for app in ("app1", "app2"):
                p = self.work / f"spans-{app}.jsonl"
                if p.exists():
                    f.write(p.read_text())
        return spans


def _wait_listening(proc: subprocess.Popen[str]) -> None:
    """Until a recorder says it records (the agent) or listens (tcpdump), or exits."""
    assert proc.stderr is not None
    while True:
        line = proc.stderr.readline()
        if not line or line.startswith("recording ") or "listening on" in line:
            return


def _stop_recorders(
    procs: list[subprocess.Popen[str]], agent: subprocess.Popen[str], run: Run
) -> list[tuple[str, str]]:
    """SIGINT to every recorder and their outputs; one stuck for 300 s is killed with the
    agent's stacks saved (``agent-stuck.txt``), and the run fails."""
    for proc in procs:
        proc.send_signal(signal.SIGINT)
    try:
        return [proc.communicate(timeout=300) for proc in procs]
    except subprocess.TimeoutExpired:
        stacks = ""
        if agent.poll() is None:
            agent.send_signal(signal.SIGABRT)
            with contextlib.suppress(subprocess.TimeoutExpired):
                stacks = agent.communicate(timeout=10)[1] or ""
                (run.dir / "agent-stuck.txt").write_text(stacks)
        for proc in procs:  # none may go on writing into the run's directory
            proc.kill()
        raise RuntimeError(
            f"a recorder did not stop within 300 s of SIGINT; the agent's stderr and stacks "
            f"(also in {run.dir / 'agent-stuck.txt'}):\n{stacks[-4000:]}"
        ) from None


def _init_cluster(data: Path, user: str) -> Path:
    """A new database cluster in ``data``, owned by ``user``, trusting the testbed's
    subnet."""
    data.mkdir()
    shutil.chown(data, user)
    initdb = postgres_bin("initdb")
    assert initdb is not None
    made = subprocess.run(
        ["runuser", "-u", user, "--", initdb, "-D", str(data), "-U", "postgres", "--auth=trust"],
        check=False,
        capture_output=True,
        text=True,
    )
    if made.returncode != 0:
        raise RuntimeError(f"initdb failed: {made.stderr.strip()[-2000:]}")
    with (data / "pg_hba.conf").open("a") as f:
        f.write(f"host all all {SUBNET}.0/24 trust\n")
    return data


def _has_user(name: str) -> bool:
    import pwd

    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True


def shift_pcap(path: Path, offset_ns: int) -> None:
    """Add ``offset_ns`` to every packet time of a classic pcap file, in place: a capture
    taken on a host whose clock is off by that much."""
    data = bytearray(path.read_bytes())
    magic = data[:4]
    if magic in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1"):
        end = "<"
    elif magic in (b"\xa1\xb2\xc3\xd4", b"\xa1\xb2\x3c\x4d"):
        end = ">"
    else:
        raise ValueError(f"{path}: not a classic pcap file")
    unit = 1 if magic in (b"\x4d\x3c\xb2\xa1", b"\xa1\xb2\x3c\x4d") else 1000  # ns or us
    pos = 24
    rec = struct.Struct(end + "IIII")
    while pos + 16 <= len(data):
        sec, frac, incl, orig = rec.unpack_from(data, pos)
        t = sec * 1_000_000_000 + frac * unit + offset_ns
        rec.pack_into(data, pos, t // 1_000_000_000, (t % 1_000_000_000) // unit, incl, orig)
        pos += 16 + incl
    path.write_bytes(bytes(data))


# ---- analysis ---------------------------------------------------------------------------
def wirepath(*args: str) -> subprocess.CompletedProcess[str]:
    """``wirepath ARGS`` in a subprocess, as a user runs it."""
    return subprocess.run(
        [sys.executable, "-m", "wirepath", *args], cwd=REPO, capture_output=True, text=True, check=True
    )


def merge_hosts(run: Run, skew_ms: float) -> dict[str, Any]:
    """Shift the skewed host's pcap, then convert every host's file as a capture point."""
    shift_pcap(run.dir / f"{SKEWED_HOST}.pcap", int(skew_ms * 1e6))
    run.hosts_trace = run.dir / "hosts.parquet"
    files = [str(run.dir / f"{h}.pcap") for h in SERVERS]
    done = wirepath(
        "capture",
        "pcap",
        *files,
        "--point-from-file",
        "--names",
        str(NAMES),
        "--out",
        str(run.hosts_trace),
        "--json",
        "--quiet",
    )
    return json.loads(done.stdout)


def infer(trace: Path, out: Path) -> dict[str, Any]:
    """``wirepath infer nesting`` with its default settings; the paths document."""
    wirepath(
        "infer", "nesting", str(trace), "--out", str(out), "--instances", str(out.with_suffix(".parquet"))
    )
    return json.loads(out.read_text())


def diff(base: Path, slow: Path, svg: Path | None = None) -> dict[str, Any]:
    """``wirepath viz diff BASE SLOW --json``."""
    args = ["viz", "diff", str(base), str(slow), "--json"]
    if svg is not None and shutil.which("dot"):
        args += ["--out", str(svg)]
    else:
        args += ["--out", str(slow.with_name("diff.dot")), "--format", "dot"]
    return json.loads(wirepath(*args).stdout)


#: What each fault should be found as: (the endpoints whose patterns it slows, app, visit
#: kind, caller, callee). The PostgreSQL delay slows every query of app1's.
EXPECT = {
    "pgdelay": (("item", "cart", "home"), "app1", "leaf", "app1", "pg"),
    "code": (("cart",), "app2", "wait", "app2", "grpc"),
    "slowgrpc": (("cart",), None, "leaf", None, "grpc"),
}


#: A pattern needs this many requests in both runs for its mean to be read.
MIN_REQUESTS = 20


def faulty_visit(doc: dict[str, Any]) -> dict[str, Any]:
    """The visit that slowed most in the diff's pattern whose requests slowed most (a
    fault adds time; a pattern's total, its change times its requests, favours the
    frequent patterns, where a little noise adds up): its pattern shape, caller, callee,
    whether the time went inside the callee (``leaf``: its latency) or before the call
    (``wait``), and the change in seconds."""
    best: dict[str, Any] = {}
    read = [p for p in doc["patterns"] if min(p["count_base"], p["count_slow"]) >= MIN_REQUESTS]
    for p in sorted(read, key=lambda p: p["mean_base_s"] - p["mean_slow_s"])[:1]:
        for v in p["visits"]:
            cands = [("leaf", v["latency_slow_s"] - v["latency_base_s"])]
            if v.get("wait_base_s") is not None:
                cands.append(("wait", v["wait_slow_s"] - v["wait_base_s"]))
            for kind, change in cands:
                if kind == "leaf" and v["depth"] < 2:
                    continue  # the front tiers' latency holds everything below them
                if not best or change > best["change_s"]:
                    best = {
                        "shape": p["shape"],
                        "kind": kind,
                        "caller": v["caller"],
                        "node": v["node"],
                        "change_s": change,
                        "count": p["count_slow"],
                    }
    return best


def check_fault(fault: str, doc: dict[str, Any], injected_s: float) -> tuple[bool, str]:
    """Whether the diff named the injected fault: its visit and its size within 20%."""
    endpoints, app, kind, caller, callee = EXPECT[fault]
    v = faulty_visit(doc)
    if not v:
        return False, "the diff matched no pattern"
    apps = [app] if app else ["app1", "app2"]
    shapes = {expected_shape(e, a) for e in endpoints for a in apps}
    ok_where = v["shape"] in shapes and v["kind"] == kind and v["node"] == callee
    ok_where = ok_where and (caller is None or v["caller"] == caller)
    ratio = v["change_s"] / injected_s
    ok = ok_where and 0.8 <= ratio <= 1.2
    top = doc["changes"][0] if doc["changes"] else None
    text = (
        f"{fault}: slowest pattern {v['shape']} ({v['count']} requests): {v['kind']} "
        f"{v['caller']} -> {v['node']} {v['change_s'] * 1000:+.2f} ms (injected {injected_s * 1000:.1f} ms, "
        f"ratio {ratio:.2f}); diff's top change: {doc['sentence'] if top else 'none'} -> "
        f"{'FOUND' if ok else 'NOT FOUND'}"
    )
    return ok, text


def pattern_check(paths: dict[str, Any]) -> dict[str, Any]:
    """How the inferred patterns compare with the endpoints' call sequences."""
    from viz.paths import shape_of

    want = {expected_shape(e, a): f"{e} via {a}" for e in CALLS for a in ("app1", "app2")}
    total = sum(int(p["count"]) for p in paths["patterns"])
    got = {shape_of(p): int(p["count"]) for p in paths["patterns"]}
    top = [shape_of(p) for p in sorted(paths["patterns"], key=lambda p: -int(p["count"]))[: len(want)]]
    matched = sum(got.get(s, 0) for s in want)
    return {
        "instances": total,
        "in_expected_patterns": matched,
        "share": matched / total if total else 0.0,
        "top_are_expected": sorted(top) == sorted(want),
        "missing": [want[s] for s in want if s not in got],
        "top": top,
    }


def same_messages(a: Path, b: Path) -> dict[str, Any]:
    """Per edge and op, the message counts of two traces and where they differ."""
    from collections import Counter

    import tracefmt

    counts = []
    for path in (a, b):
        t = tracefmt.read_trace(path)
        cols = [t[c].to_pylist() for c in ("sender", "receiver", "op")]
        counts.append(Counter(zip(*cols, strict=True)))
    diffs = {
        f"{s}>{r} {o}": (counts[0][k], counts[1][k])
        for k in counts[0] | counts[1]
        for s, r, o in [k]
        if counts[0][k] != counts[1][k]
    }
    return {"messages": (sum(counts[0].values()), sum(counts[1].values())), "differ": diffs}


def run_all(
    bed: RealTestbed,
    out: Path,
    requests: int,
    clients: int,
    skew_ms: float,
    faults: tuple[str, ...] = FAULTS,
    think_s: float = 0.0,
) -> dict[str, Any]:
    """The base run and one run per fault, analysed; the findings as a JSON-ready dict."""
    injected = {"pgdelay": bed.pg_delay_ms / 1000, "code": bed.code_ms / 1000, "slowgrpc": bed.grpc_ms / 1000}
    runs: dict[str, Run] = {}
    for k, name in enumerate(("base", *faults)):
        if name != "base":
            bed.fault(name, True)
        try:
            runs[name] = bed.record(name, out, requests, clients, first=k * 1_000_000, think_s=think_s)
        finally:
            if name != "base":
                bed.fault(name, False)
    findings: dict[str, Any] = {
        "requests": requests,
        "clients": clients,
        "think_s": think_s,
        "pg_delay_by": "tc netem" if bed.netem else "relay (no sch_netem in this kernel)",
        "runs": {},
        "faults": {},
    }
    paths: dict[str, Path] = {}
    for name, run in runs.items():
        assert run.bridge_trace is not None
        merged = merge_hosts(run, skew_ms)
        paths[name] = run.dir / "paths.json"
        doc = infer(run.bridge_trace, paths[name])
        assert run.hosts_trace is not None
        findings["runs"][name] = {
            "load": run.load,
            "bridge_messages": run.capture.get("messages"),
            "hosts": same_messages(run.bridge_trace, run.hosts_trace),
            "offsets": merged["points"],
            "patterns": pattern_check(doc),
        }
    for name in faults:
        doc = diff(paths["base"], paths[name], out / name / "diff.svg")
        ok, text = check_fault(name, doc, injected[name])
        findings["faults"][name] = {
            "found": ok,
            "text": text,
            "visit": faulty_visit(doc),
            "injected_s": injected[name],
            "sentence": doc["sentence"],
            "changes": doc["changes"][:5],
        }
    return findings


def print_findings(f: dict[str, Any]) -> None:
    print(f"{f['requests']} requests a run from {f['clients']} keep-alive clients")
    for name, r in f["runs"].items():
        load, pc = r["load"], r["patterns"]
        print(
            f"run {name}: {load['requests']} requests at {load['rate_per_s']}/s (p50 {load['p50_ms']} ms); "
            f"bridge {r['hosts']['messages'][0]} messages, hosts merged {r['hosts']['messages'][1]}"
            f"{'' if not r['hosts']['differ'] else ' DIFFER ' + json.dumps(r['hosts']['differ'])}; "
            f"{pc['share']:.1%} of {pc['instances']} instances in the README's patterns"
            f"{'' if not pc['missing'] else ', missing ' + ', '.join(pc['missing'])}"
        )
    for fault in f["faults"].values():
        print(fault["text"])


def _probe_namespaces() -> str | None:
    probe = f"wprt-probe-{os.getpid()}"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True, check=False)
    if made.returncode != 0:
        return made.stderr.strip()
    subprocess.run(["ip", "netns", "del", probe], check=False)
    return None


@contextlib.contextmanager
def open_testbed(work: Path | None = None, **kw: Any) -> Iterator[RealTestbed]:
    """A testbed that is up inside the ``with`` block, in ``work`` or a temporary directory."""
    with contextlib.ExitStack() as stack:
        if work is None:
            work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="wprt-")))
        bed = stack.enter_context(RealTestbed(work, **kw))
        yield bed


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("action", choices=["run", "loads", "shell"])
    p.add_argument("--out", type=Path, default=REPO / "build" / "testbed", help="where runs are written")
    p.add_argument("--requests", type=int, default=300, help="requests per run (default 300)")
    p.add_argument("--clients", type=int, default=16, help="concurrent keep-alive clients (default 16)")
    p.add_argument("--think", type=float, default=0.32, help="mean think time of a client, s (default 0.32)")
    p.add_argument("--loads", default="8,32,96", help="'loads': client counts to score at (default 8,32,96)")
    p.add_argument("--skew-ms", type=float, default=40.0, help="app2's clock error in its capture")
    p.add_argument("--pg-delay-ms", type=float, default=20.0)
    p.add_argument("--code-ms", type=float, default=15.0)
    p.add_argument("--grpc-ms", type=float, default=10.0)
    p.add_argument("--prefix", help="namespace name prefix (default: wprt-<random>)")
    p.add_argument(
        "--delay-by",
        choices=["auto", "netem", "relay"],
        default="auto",
        help="how PostgreSQL's replies to app1 are delayed: tc netem, a relay, or netem if the kernel has it",
    )
    p.add_argument(
        "--request-ids",
        choices=REQUEST_IDS,
        default="none",
        help="nginx stamps X-Request-ID (to the apps, and back to the client); nginx+app1: app1 "
        "passes it on to its gRPC calls as metadata (default none)",
    )
    return p


def _cannot_run(out: Path) -> str | None:
    """Why the testbed cannot run here with ``out`` as its directory (None: it can)."""
    if os.geteuid() != 0:
        return "the testbed needs root: network namespaces and veth links (sudo ...)"
    why = _probe_namespaces()
    if why:
        return f"cannot make network namespaces here: {why}"
    # Only a directory an earlier testbed run made is replaced: --out . or ~ must not be
    # wiped by root.
    earlier = (out / "work").is_dir() or (out / "findings.json").is_file()
    if out.exists() and any(out.iterdir()) and not earlier:
        return f"{out} is not empty and holds no earlier testbed run; give a new directory"
    return None


def _print_loads(findings: dict[str, Any]) -> None:
    print("clients  requests/s  p50 ms  requests  fully right  calls right  calls joined (ambiguous)")
    for r in findings["loads"]:
        j = r["join"]
        print(
            f"{r['clients']:>7}  {r['rate_per_s']:>10}  {r['p50_ms']:>6}  {r['requests']:>8}  "
            f"{r['fully_right_rate']:>11.1%}  {r['right_parent_rate']:>11.1%}  "
            f"{j['joined_share']:>7.1%} ({j['ambiguous']})"
        )


def main(argv: list[str] | None = None) -> int:
    a = _parser().parse_args(argv)
    why = _cannot_run(a.out)
    if why:
        print(f"error: {why}", file=sys.stderr)
        return 1
    if a.out.exists():
        shutil.rmtree(a.out)
    a.out.mkdir(parents=True, exist_ok=True)
    kw = {"prefix": a.prefix, "pg_delay_ms": a.pg_delay_ms, "code_ms": a.code_ms, "grpc_ms": a.grpc_ms}
    kw["delay_by"] = a.delay_by
    kw["request_ids"] = a.request_ids
    with teardown_on_signals(), open_testbed(a.out / "work", **kw) as bed:
        print(f"testbed {bed.prefix} up: " + ", ".join(f"{h} {addr(h)}" for h in HOSTS), file=sys.stderr)
        if a.action == "shell":
            print(
                f"capture with: ip netns exec {bed.ns('sw')} wirepath capture live --iface {BRIDGE} "
                "--out DIR",
                file=sys.stderr,
            )
            with contextlib.suppress(KeyboardInterrupt):
                signal.pause()
            return 0
        if a.action == "run":
            findings = run_all(bed, a.out, a.requests, a.clients, a.skew_ms, think_s=a.think)
        else:
            from truth import score_loads

            findings = score_loads(bed, a.out, a.requests, [int(x) for x in a.loads.split(",")], a.think)
    (a.out / "findings.json").write_text(json.dumps(findings, indent=1, default=str))
    if a.action == "run":
        print_findings(findings)
        return 0 if all(f["found"] for f in findings["faults"].values()) else 1
    _print_loads(findings)
    return 0


if __name__ == "__main__":
    sys.exit(main())
