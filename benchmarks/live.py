"""Live capture: how many packets per second each recorder keeps without loss, and its CPU.

    sudo python benchmarks/live.py [--packets 200000] [--rates 25000,50000,100000,200000,0]
    python benchmarks/live.py --render 200000 [--render-baseline 20000]
    sudo python benchmarks/live.py --streaming 600 --messages 50000 [--rate 200000] [--no-convert]

A private network namespace holds a veth pair; a sender process writes prebuilt 128-byte
Ethernet/IPv4/UDP frames into one end (AF_PACKET, paced to each rate; 0 = as fast as it
can) and the recorder listens on the other end. For every recorder and rate: packets
offered, packets in the recorder's file (counted by reading it back), loss, kernel drops
where the recorder reports them, and the recorder's CPU seconds per million packets.

Recorders:
- ``tcpdump``: what ``wirepath capture live`` runs (libpcap TPACKET_V3 ring, ``-U``
  packet-buffered writes, 32 MiB buffer).
- ``tcpdump-immediate``: the same with ``--immediate-mode`` (a wake-up per packet).
- ``scapy-async``: scapy's ``AsyncSniffer`` writing each packet with ``PcapWriter``.
- ``scapy-l2listen``: scapy's ``L2ListenSocket``, raw frames written as pcap records
  directly (no packet objects): the fastest way to use scapy for recording.

``--streaming`` runs ``wirepath capture live`` itself while a C sender replays a
``synth --pcap`` capture in a loop (new addresses each pass) for a number of seconds, and
samples the agent's memory and its conversion lag every second; then SIGTERM, and the time
until the trace is published.

``--render`` times the other direction, ``wirepath synth --pcap``: ``render_pcap`` on a
``multitier.toml`` trace against scapy building the same conversations packet by packet.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import psutil

sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from capture import packet_timestamps  # noqa: E402
from capture.live import Recording, tcpdump_command  # noqa: E402

SENDER = r"""
import socket, struct, sys, time
iface, rate, n = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
s.bind((iface, 0))
s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 22)
payload = b"x" * (128 - 42)
ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + 8 + len(payload), 0, 0, 64, 17, 0,
                 bytes([10, 99, 0, 1]), bytes([10, 99, 0, 2]))
udp = struct.pack("!HHHH", 4000, 5000, 8 + len(payload), 0)
frame = b"\x02\x00\x00\x00\x00\x02" + b"\x02\x00\x00\x00\x00\x01" + b"\x08\x00" + ip + udp + payload
send = s.send
t0 = time.perf_counter()
burst = 64
sent = 0
while sent < n:
    k = min(burst, n - sent)
    for _ in range(k):
        send(frame)
    sent += k
    if rate > 0:
        ahead = sent / rate - (time.perf_counter() - t0)
        if ahead > 0:
            time.sleep(ahead)
print(sent / (time.perf_counter() - t0))
"""

# The same sender in C (sendmmsg, 64 frames a call), when a C compiler is at hand: the Python
# loop tops out near 150,000 packets/s, below what tcpdump keeps up with.
SENDER_C = r"""
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <linux/if_packet.h>
#include <net/ethernet.h>
#include <net/if.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
static double now(void) {
    struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec / 1e9;
}
int main(int argc, char **argv) {
    double rate = atof(argv[2]); long n = atol(argv[3]);
    int s = socket(AF_PACKET, SOCK_RAW, htons(ETH_P_ALL));
    struct sockaddr_ll a = {0}; a.sll_family = AF_PACKET; a.sll_ifindex = if_nametoindex(argv[1]);
    a.sll_protocol = htons(ETH_P_ALL);
    if (s < 0 || bind(s, (struct sockaddr *)&a, sizeof a) < 0) { perror("socket"); return 1; }
    int one = 1; setsockopt(s, SOL_PACKET, PACKET_QDISC_BYPASS, &one, sizeof one);
    unsigned char f[128] = {2,0,0,0,0,2, 2,0,0,0,0,1, 8,0, 0x45,0,0,114, 0,0,0,0, 64,17,0,0,
                            10,99,0,1, 10,99,0,2, 0x0f,0xa0,0x13,0x88,0,94,0,0};
    memset(f + 42, 'x', sizeof f - 42);
    struct iovec iov = {f, sizeof f}; struct mmsghdr m[64];
    for (int i = 0; i < 64; i++) {
        memset(&m[i], 0, sizeof m[i]); m[i].msg_hdr.msg_iov = &iov; m[i].msg_hdr.msg_iovlen = 1;
    }
    double t0 = now(); long sent = 0;
    while (sent < n) {
        int k = n - sent < 64 ? n - sent : 64;
        int r = sendmmsg(s, m, k, 0);
        if (r > 0) sent += r;
        if (rate > 0) { double ahead = sent / rate - (now() - t0);
            if (ahead > 0) {
                struct timespec d = {(time_t)ahead, (long)((ahead - (time_t)ahead) * 1e9)}; nanosleep(&d, 0);
            }
        }
    }
    printf("%f\n", sent / (now() - t0));
    return 0;
}
"""

# Replays the Ethernet frames of a pcap (e.g. ``synth --pcap``) in a loop for a number of
# seconds, as fast as it can (or paced): pass k rewrites the second byte of every IPv4 source
# and destination address to k, so each pass is new connections between new addresses.
REPLAY_C = r"""
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <linux/if_packet.h>
#include <net/ethernet.h>
#include <net/if.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
static double now(void) {
    struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec / 1e9;
}
int main(int argc, char **argv) {
    double rate = atof(argv[2]), secs = atof(argv[3]);
    FILE *f = fopen(argv[4], "rb"); if (!f) { perror("pcap"); return 1; }
    fseek(f, 0, SEEK_END); long size = ftell(f); fseek(f, 0, SEEK_SET);
    unsigned char *buf = malloc(size); if (fread(buf, 1, size, f) != (size_t)size) return 1;
    long cap = 1 << 20, n = 0; long *off = malloc(cap * sizeof(long)); int *len = malloc(cap * sizeof(int));
    for (long p = 24; p + 16 <= size;) {
        unsigned int cl; memcpy(&cl, buf + p + 8, 4);
        if (n == cap) {
            cap *= 2; off = realloc(off, cap * sizeof(long)); len = realloc(len, cap * sizeof(int));
        }
        off[n] = p + 16; len[n] = cl; n++; p += 16 + cl;
    }
    int s = socket(AF_PACKET, SOCK_RAW, htons(ETH_P_ALL));
    struct sockaddr_ll a = {0}; a.sll_family = AF_PACKET; a.sll_ifindex = if_nametoindex(argv[1]);
    a.sll_protocol = htons(ETH_P_ALL);
    if (s < 0 || bind(s, (struct sockaddr *)&a, sizeof a) < 0) { perror("socket"); return 1; }
    int one = 1; setsockopt(s, SOL_PACKET, PACKET_QDISC_BYPASS, &one, sizeof one);
    struct iovec iov[64]; struct mmsghdr m[64];
    memset(m, 0, sizeof m);
    double t0 = now(); long sent = 0; int pass = 0;
    while (now() - t0 < secs) {
        for (long i = 0; i < n; i++) {
            unsigned char *fr = buf + off[i];
            if (len[i] >= 34 && fr[12] == 8 && fr[13] == 0) { fr[27] = pass & 0xff; fr[31] = pass & 0xff; }
        }
        for (long i = 0; i < n && now() - t0 < secs;) {
            int k = n - i < 64 ? n - i : 64;
            for (int j = 0; j < k; j++) {
                iov[j].iov_base = buf + off[i + j]; iov[j].iov_len = len[i + j];
                m[j].msg_hdr.msg_iov = &iov[j]; m[j].msg_hdr.msg_iovlen = 1;
            }
            int r = sendmmsg(s, m, k, 0);
            if (r > 0) { sent += r; i += r; }
            double ahead = rate > 0 ? sent / rate - (now() - t0) : 0;
            if (ahead > 0) {
                struct timespec d = {(time_t)ahead, (long)((ahead - (time_t)ahead) * 1e9)};
                nanosleep(&d, 0);
            }
        }
        pass++;
    }
    printf("%ld %f %d\n", sent, sent / (now() - t0), pass);
    return 0;
}
"""

SCAPY_ASYNC = r"""
import logging, signal, socket, sys, time
logging.getLogger("scapy.runtime").setLevel(logging.ERROR)
from scapy.all import AsyncSniffer, PcapWriter
from scapy.arch.linux import L2ListenSocket
iface, out = sys.argv[1], sys.argv[2]
signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGINT])  # for sigwait, in every thread
w = PcapWriter(out, linktype=1, sync=False)
sock = L2ListenSocket(iface=iface)
sock.ins.setsockopt(socket.SOL_SOCKET, 33, 32 << 20)  # SO_RCVBUFFORCE: tcpdump's 32 MiB
sn = AsyncSniffer(opened_socket=sock, store=False, prn=w.write)
sn.start()
time.sleep(1.0)
print("ready", flush=True)
signal.sigwait([signal.SIGINT])
time.sleep(0.5)
sn.stop()
w.close()
"""

SCAPY_L2 = r"""
import logging, select, signal, socket, struct, sys, threading
logging.getLogger("scapy.runtime").setLevel(logging.ERROR)
from scapy.arch.linux import L2ListenSocket
iface, out = sys.argv[1], sys.argv[2]
stop = threading.Event()
signal.signal(signal.SIGINT, lambda *a: stop.set())
s = L2ListenSocket(iface=iface)
s.ins.setsockopt(socket.SOL_SOCKET, 33, 32 << 20)  # SO_RCVBUFFORCE: tcpdump's 32 MiB
f = open(out, "wb")
f.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 262144, 1))
print("ready", flush=True)
pack = struct.Struct("<IIII").pack
while not stop.is_set():
    if not select.select([s.ins], [], [], 0.2)[0]:
        continue
    cls, raw, ts = s.recv_raw(65535)
    if raw is None:
        continue
    ts = ts or 0.0
    f.write(pack(int(ts), int((ts % 1) * 1e6), len(raw), len(raw)) + raw)
f.close()
"""


def sh(*cmd: str) -> None:
    subprocess.run(cmd, check=True)


class Netns:
    def __init__(self) -> None:
        self.name = f"wpbench-{uuid.uuid4().hex[:6]}"

    def __enter__(self) -> Netns:
        sh("ip", "netns", "add", self.name)
        sh("ip", "-n", self.name, "link", "add", "va", "type", "veth", "peer", "name", "vb")
        for dev in ("va", "vb", "lo"):
            sh("ip", "-n", self.name, "link", "set", dev, "up")
        # No IPv6 chatter (router solicitations) on the measured link.
        for dev in ("va", "vb"):
            sh("ip", "netns", "exec", self.name, "sysctl", "-qw", f"net.ipv6.conf.{dev}.disable_ipv6=1")
        return self

    def __exit__(self, *exc: object) -> None:
        subprocess.run(["ip", "netns", "del", self.name], check=False)

    def argv(self, *cmd: str) -> list[str]:
        return ["ip", "netns", "exec", self.name, *cmd]


def start_recorder(ns: Netns, kind: str, out: Path) -> subprocess.Popen[str]:
    if kind.startswith("tcpdump"):
        cmd = tcpdump_command("vb", out, Recording(immediate=kind.endswith("immediate")))
        proc = subprocess.Popen(ns.argv(*cmd), stderr=subprocess.PIPE, text=True)
        assert proc.stderr is not None
        while "listening on" not in (line := proc.stderr.readline()):
            if not line:
                raise RuntimeError("tcpdump did not start")
        return proc
    script = SCAPY_ASYNC if kind == "scapy-async" else SCAPY_L2
    proc = subprocess.Popen(
        ns.argv(sys.executable, "-c", script, "vb", str(out)), stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    if proc.stdout.readline().strip() != "ready":
        raise RuntimeError(f"{kind} did not start")
    return proc


def build_sender(workdir: Path) -> list[str]:
    """The C sender if it compiles here, else the Python one."""
    if shutil.which("cc"):
        src, exe = workdir / "sender.c", workdir / "sender"
        src.write_text(SENDER_C)
        if subprocess.run(["cc", "-O2", "-o", str(exe), str(src)], check=False).returncode == 0:
            return [str(exe)]
    return [sys.executable, "-c", SENDER]


def measure(
    ns: Netns, kind: str, rate: float, packets: int, workdir: Path, sender: list[str]
) -> dict[str, object]:
    out = workdir / f"{kind}-{int(rate)}.pcap"
    rec = start_recorder(ns, kind, out)
    ps = psutil.Process(rec.pid)
    cpu0 = sum(ps.cpu_times()[:2])
    sent = subprocess.run(
        ns.argv(*sender, "va", str(rate), str(packets)),
        capture_output=True,
        text=True,
        check=True,
    )
    achieved = float(sent.stdout)
    # Let the recorder empty its buffers (libpcap hands a ring block over within 1 s).
    time.sleep(1.5)
    cpu = sum(ps.cpu_times()[:2]) - cpu0
    rec.send_signal(signal.SIGINT)
    _, err = rec.communicate(timeout=120)
    got = len(packet_timestamps(out))
    drops = None
    if kind.startswith("tcpdump"):
        for line in (err or "").splitlines():
            if "dropped by kernel" in line:
                drops = int(line.split()[0])
    out.unlink()
    return {
        "recorder": kind,
        "rate_pps": int(rate),
        "sent_pps": round(achieved),
        "offered": packets,
        "recorded": got,
        "loss": packets - got,
        "kernel_drops": drops,
        "cpu_s_per_mpkt": round(cpu / max(got, 1) * 1e6, 2),
    }


def bench_render(messages: int, baseline_messages: int) -> int:
    """``synth --pcap``: render_pcap (numpy, in bulk) against scapy building each packet."""
    from dataclasses import replace

    import numpy as np
    import pyarrow as pa

    import synth
    from capture.synthpcap import node_addresses, render_pcap

    config = synth.load_config(Path(__file__).resolve().parents[1] / "samples" / "synth" / "multitier.toml")
    trace, _ = synth.generate_table(replace(config, messages=messages, duration_s=None))
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        report = render_pcap(trace, Path(tmp) / "ours.pcap")
        ours = time.perf_counter() - t0
        print(
            f"render_pcap     {trace.num_rows:>9,} messages -> {report.packets:>9,} packets in {ours:6.2f} s"
            f"  {report.packets / ours:>10,.0f} packets/s"
        )
        # Baseline: the same conversations built packet by packet with scapy.
        from scapy.layers.inet import IP, TCP
        from scapy.layers.l2 import Ether
        from scapy.utils import PcapWriter

        sub = trace.slice(0, baseline_messages)
        ts = sub["timestamp"].cast(pa.int64()).to_numpy()
        ops, call = sub["op"].to_pylist(), sub["true_call"].to_numpy()
        snd, rcv = sub["sender"].to_pylist(), sub["receiver"].to_pylist()
        addrs = node_addresses(sorted(set(snd) | set(rcv)))
        ret_at = {int(c): int(t) for c, t, o in zip(call, ts, ops, strict=True) if o == "return"}
        t0 = time.perf_counter()
        n = 0
        w = PcapWriter(str(Path(tmp) / "scapy.pcap"), linktype=1, nano=True)
        for k in np.flatnonzero(np.array(ops) == "call"):
            if int(call[k]) not in ret_at:
                continue
            (ca, _), (sa, sp) = addrs[snd[k]], addrs[rcv[k]]
            cp = 20000 + n % 40000
            req = b"POST / HTTP/1.1\r\nContent-Length: 4\r\n\r\nbody"
            resp = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
            t_req, t_resp = int(ts[k]), ret_at[int(call[k])]
            steps = [
                (t_req - 3000, ca, sa, cp, sp, "S", 0, 0, b""),
                (t_req - 2000, sa, ca, sp, cp, "SA", 0, 1, b""),
                (t_req - 1000, ca, sa, cp, sp, "A", 1, 1, b""),
                (t_req, ca, sa, cp, sp, "PA", 1, 1, req),
                (t_resp, sa, ca, sp, cp, "PA", 1, 1 + len(req), resp),
                (t_resp + 1000, ca, sa, cp, sp, "A", 1 + len(req), 1 + len(resp), b""),
                (t_resp + 2000, ca, sa, cp, sp, "FA", 1 + len(req), 1 + len(resp), b""),
                (t_resp + 3000, sa, ca, sp, cp, "FA", 1 + len(resp), 2 + len(req), b""),
                (t_resp + 4000, ca, sa, cp, sp, "A", 2 + len(req), 2 + len(resp), b""),
            ]
            for t, src, dst, sport, dport, flags, seq, ack, data in steps:
                # Explicit MACs: left out, scapy would look them up (routes, ARP) for each packet.
                pkt = (
                    Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02")
                    / IP(src=src, dst=dst)
                    / TCP(sport=sport, dport=dport, flags=flags, seq=seq, ack=ack)
                )
                pkt = pkt / data if data else pkt
                pkt.time = t / 1e9
                w.write(pkt)
                n += 1
        w.close()
        base = time.perf_counter() - t0
        print(
            f"scapy per packet {baseline_messages:>8,} messages -> {n:>9,} packets in {base:6.2f} s"
            f"  {n / base:>10,.0f} packets/s   (ours {report.packets / ours / (n / base):,.0f}x)"
        )
    return 0


def _rss_mb(proc: psutil.Process) -> float:
    try:
        return proc.memory_info().rss / 1e6
    except psutil.Error:
        return 0.0


def _newest_converted_ns(parts: Path) -> int | None:
    """The newest message time in the published parts (the last part's footer statistics)."""
    import pyarrow.parquet as pq

    names = sorted(parts.glob("part-*.parquet"))
    if not names:
        return None
    md = pq.ParquetFile(names[-1]).metadata
    stats = [md.row_group(i).column(0).statistics for i in range(md.num_row_groups)]
    best = [st.max for st in stats if st is not None and st.has_min_max]
    return (
        max(int(t.timestamp() * 1e9) if hasattr(t, "timestamp") else int(t) for t in best) if best else None
    )


def bench_streaming(
    seconds: float, messages: int, rate: float, rotate_mb: int, convert: bool, workdir: Path
) -> dict[str, object]:
    """``capture live`` recording a replayed synthetic capture for ``seconds``: its lag and memory.

    Every second: the agent's RSS (tcpdump is a separate process, not counted), the bytes
    recorded and the conversion lag (now minus the newest message in ``DIR/trace/``). After
    ``seconds``, SIGTERM; the lag after the stop is the time until the agent has published
    ``DIR/trace.parquet`` and exited.
    """
    from dataclasses import replace

    import synth
    from capture.synthpcap import render_pcap

    root = Path(__file__).resolve().parents[1]
    config = synth.load_config(root / "samples" / "synth" / "multitier.toml")
    trace, _ = synth.generate_table(replace(config, messages=messages, duration_s=None))
    pcap = workdir / "replay.pcap"
    render_pcap(trace, pcap)
    src, exe = workdir / "replay.c", workdir / "replay"
    src.write_text(REPLAY_C)
    subprocess.run(["cc", "-O2", "-o", str(exe), str(src)], check=True)
    out = workdir / "cap"
    with Netns() as ns:
        cmd = [sys.executable, "-m", "wirepath", "capture", "live", "--iface", "vb", "--out", str(out)]
        cmd += ["--rotate-mb", str(rotate_mb), "--json"] + ([] if convert else ["--no-convert"])
        agent = subprocess.Popen(
            ns.argv(*cmd), cwd=root, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        assert agent.stderr is not None
        while not (line := agent.stderr.readline()).startswith("recording "):
            if not line:
                raise RuntimeError("the agent did not start")
        me = psutil.Process(agent.pid)
        proc = next((c for c in me.children(recursive=True) if "python" in c.name()), me)
        sender = subprocess.Popen(ns.argv(str(exe), "va", str(rate), str(seconds), str(pcap)),
                                  stdout=subprocess.PIPE, text=True)  # fmt: skip
        t0 = time.monotonic()
        samples = []
        while time.monotonic() - t0 < seconds:
            time.sleep(1.0)
            newest = _newest_converted_ns(out / "trace") if convert else None
            lag = time.time() - newest / 1e9 if newest is not None else None
            recorded = sum(p.stat().st_size for p in out.glob("capture-*.pcap*"))
            samples.append(
                {
                    "t_s": round(time.monotonic() - t0, 1),
                    "rss_mb": round(_rss_mb(proc), 1),
                    "lag_s": None if lag is None else round(lag, 2),
                    "recorded_mb": round(recorded / 1e6, 1),
                }
            )
            print(json.dumps(samples[-1]), flush=True)
        sent_out, _ = sender.communicate(timeout=60)
        peak = max(s["rss_mb"] for s in samples)
        t_stop = time.monotonic()
        agent.send_signal(signal.SIGTERM)
        doc_text, err = agent.communicate(timeout=600)
        after_stop = time.monotonic() - t_stop
    doc = json.loads(doc_text)
    sent, pps, passes = sent_out.split()
    conv = doc.get("conversion") or {}
    half = len(samples) // 2
    lags = [s["lag_s"] for s in samples if s["lag_s"] is not None]
    return {
        "seconds": seconds,
        "convert": convert,
        "sent": int(sent),
        "sent_pps": round(float(pps)),
        "passes": int(passes),
        "captured": doc["packets"]["captured"],
        "dropped_kernel": doc["packets"]["dropped_kernel"],
        "files": len(doc["files"]),
        "messages": conv.get("messages"),
        "after_stop_s": round(after_stop, 2),
        "peak_rss_mb": peak,
        "rss_first_half_max_mb": max(s["rss_mb"] for s in samples[:half]) if half else None,
        "rss_second_half_max_mb": max(s["rss_mb"] for s in samples[half:]) if half else None,
        "lag_max_s": max(lags) if lags else None,
        "lag_last_s": lags[-1] if lags else None,
        "lag_median_s": sorted(lags)[len(lags) // 2] if lags else None,
        "parts": len(list((out / "trace").glob("part-*.parquet"))) if convert else 0,
        "stderr_tail": err.strip().splitlines()[-1:] if err else [],
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "--render",
        type=int,
        metavar="MESSAGES",
        help="instead: time 'synth --pcap' rendering of MESSAGES messages against scapy (no root needed)",
    )
    p.add_argument("--render-baseline", type=int, default=20_000, metavar="MESSAGES")
    p.add_argument("--packets", type=int, default=200_000)
    p.add_argument("--rates", default="25000,50000,100000,200000,0", help="packets/s; 0 = unpaced")
    p.add_argument(
        "--recorders", default="tcpdump,tcpdump-immediate,scapy-l2listen,scapy-async", help="comma-separated"
    )
    p.add_argument(
        "--streaming",
        type=float,
        metavar="SECONDS",
        help="instead: 'capture live' on a replayed synthetic capture for SECONDS (lag, memory, drops)",
    )
    p.add_argument(
        "--messages", type=int, default=200_000, help="--streaming: messages of the replayed capture"
    )
    p.add_argument("--rate", type=float, default=0, help="--streaming: packets/s (0 = as fast as it can)")
    p.add_argument("--rotate-mb", type=int, default=100, help="--streaming: the agent's --rotate-mb")
    p.add_argument("--no-convert", action="store_true", help="--streaming: record only (drops baseline)")
    p.add_argument("--json", action="store_true")
    a = p.parse_args()
    if a.render:
        return bench_render(a.render, a.render_baseline)
    if os.geteuid() != 0:
        print("needs root (a network namespace and packet capture)", file=sys.stderr)
        return 1
    if a.streaming:
        with tempfile.TemporaryDirectory(dir=os.environ.get("TMPDIR", "/tmp")) as tmp:
            row = bench_streaming(a.streaming, a.messages, a.rate, a.rotate_mb, not a.no_convert, Path(tmp))
        print(json.dumps(row, indent=1))
        return 0
    rates = [float(r) for r in a.rates.split(",")]
    rows = []
    with Netns() as ns, tempfile.TemporaryDirectory() as tmp:
        sender = build_sender(Path(tmp))
        kind_of_sender = "C (sendmmsg)" if len(sender) == 1 else "Python"
        print(f"sender: {kind_of_sender}; load average {os.getloadavg()[0]:.1f}")
        for kind in a.recorders.split(","):
            for rate in rates:
                # scapy's sniffer keeps up with a few thousand packets/s: a short run says enough.
                n = a.packets if not kind.startswith("scapy-async") else min(a.packets, 20_000)
                row = measure(ns, kind, rate, n, Path(tmp), sender)
                rows.append(row)
                print(
                    f"{row['recorder']:<18} rate {row['rate_pps'] or 'max':>7} (sent {row['sent_pps']:>7,}/s)"
                    f"  recorded {row['recorded']:>7,}/{row['offered']:,}  loss {row['loss']:>6,}"
                    f"  kernel drops {row['kernel_drops']!s:>6}  CPU {row['cpu_s_per_mpkt']:>6} s/Mpkt",
                    flush=True,
                )
    if a.json:
        print(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
