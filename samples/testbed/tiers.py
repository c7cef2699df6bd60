"""The testbed's servers and load driver: a three-tier web service in a few lines of stdlib.

- ``web``: HTTP/1.1 front end; ``GET /page/N`` calls the app tier once, ``GET /cart/N``
  twice (item, then price).
- ``app``: HTTP/1.1 application tier; each ``GET /api/...`` reads one key from the
  database tier (a second for ``/api/price``).
- ``db``: a Redis-protocol (RESP) key-value store answering ``GET``/``SET``/``PING``.
- ``load``: client threads, each on one keep-alive connection, alternating pages and carts.

Every hop reuses its connections (one per server thread and peer), as real tiers do.
Run one role per network namespace (see ``testbed.py``); each prints ``ready`` once listening.

    python tiers.py web  --listen 10.77.0.2:8080 --app 10.77.0.3:8081
    python tiers.py app  --listen 10.77.0.3:8081 --db 10.77.0.4:6379
    python tiers.py db   --listen 10.77.0.4:6379
    python tiers.py load --web 10.77.0.2:8080 --requests 100 --concurrency 4
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import http.server
import socket
import socketserver
import sys
import threading
import time

_local = threading.local()


def _addr(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    return host, int(port)


def _http(peer: tuple[str, int]) -> http.client.HTTPConnection:
    """This thread's keep-alive connection to ``peer`` (opened on first use)."""
    conns = _local.__dict__.setdefault("http", {})
    if peer not in conns:
        conns[peer] = http.client.HTTPConnection(*peer, timeout=10)
    return conns[peer]


def _get(peer: tuple[str, int], path: str) -> bytes:
    conn = _http(peer)
    conn.request("GET", path)
    return conn.getresponse().read()


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive
    disable_nagle_algorithm = True  # a response goes out at once, as production servers send it

    def answer(self, body: bytes) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def web(listen: tuple[str, int], app: tuple[str, int]) -> socketserver.BaseServer:
    class Web(_Handler):
        def do_GET(self) -> None:
            kind, _, n = self.path.strip("/").partition("/")
            parts = [_get(app, f"/api/item/{n}")]
            if kind == "cart":
                time.sleep(0.001)
                parts.append(_get(app, f"/api/price/{n}"))
            self.answer(b"page " + b" ".join(parts))

    return http.server.ThreadingHTTPServer(listen, Web)


def app(listen: tuple[str, int], db: tuple[str, int]) -> socketserver.BaseServer:
    class App(_Handler):
        def do_GET(self) -> None:
            _, kind, n = self.path.strip("/").split("/")
            values = [_redis(db, "GET", f"{kind}:{n}")]
            if kind == "price":
                values.append(_redis(db, "GET", f"tax:{n}"))
            time.sleep(0.0005)
            self.answer(b"%s %s" % (kind.encode(), b",".join(values)))

    return http.server.ThreadingHTTPServer(listen, App)


def _redis(peer: tuple[str, int], *words: str) -> bytes:
    """One RESP command on this thread's connection to ``peer``; the reply's bulk string."""
    socks = _local.__dict__.setdefault("redis", {})
    if peer not in socks:
        s = socket.create_connection(peer, timeout=10)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        socks[peer] = (s, s.makefile("rb"))
    s, f = socks[peer]
    s.sendall(b"*%d\r\n" % len(words) + b"".join(b"$%d\r\n%s\r\n" % (len(w), w.encode()) for w in words))
    head = f.readline()
    if head.startswith(b"$") and head[1:3] != b"-1":
        data = f.read(int(head[1:]) + 2)[:-2]
        return data
    return head.strip()


class _Redis(socketserver.StreamRequestHandler):
    """A tiny RESP server: arrays of bulk strings in, simple or bulk strings out."""

    store: dict[bytes, bytes] = {}  # noqa: RUF012 - shared by all connections on purpose

    def handle(self) -> None:
        self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        while True:
            head = self.rfile.readline()
            if not head.startswith(b"*"):
                return
            words = []
            for _ in range(int(head[1:])):
                size = int(self.rfile.readline()[1:])
                words.append(self.rfile.read(size + 2)[:-2])
            cmd = words[0].upper()
            if cmd == b"GET":
                value = self.store.get(words[1], b"v-" + words[1])
                reply = b"$%d\r\n%s\r\n" % (len(value), value)
            elif cmd == b"SET":
                self.store[words[1]] = words[2]
                reply = b"+OK\r\n"
            else:
                reply = b"+PONG\r\n"
            time.sleep(0.0002)
            self.wfile.write(reply)


def db(listen: tuple[str, int]) -> socketserver.BaseServer:
    socketserver.ThreadingTCPServer.allow_reuse_address = True
    server = socketserver.ThreadingTCPServer(listen, _Redis)
    server.daemon_threads = True
    return server


def load(web_addr: tuple[str, int], requests: int, concurrency: int, think_s: float) -> int:
    """Drive ``requests`` page and cart requests over ``concurrency`` keep-alive connections."""
    errors: list[str] = []

    def worker(k: int) -> None:
        conn = http.client.HTTPConnection(*web_addr, timeout=10)
        for n in range(k, requests, concurrency):
            try:
                conn.request("GET", f"/{'cart' if n % 3 == 0 else 'page'}/{n}")
                conn.getresponse().read()
            except OSError as exc:
                errors.append(f"request {n}: {exc}")
                return
            time.sleep(think_s)
        conn.close()

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        print(f"{len(errors)} failed requests, first: {errors[0]}", file=sys.stderr)
    return 1 if errors else 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("role", choices=["web", "app", "db", "load"])
    p.add_argument("--listen", type=_addr)
    p.add_argument("--app", type=_addr)
    p.add_argument("--db", type=_addr)
    p.add_argument("--web", type=_addr)
    p.add_argument("--requests", type=int, default=100)
    p.add_argument("--concurrency", type=int, default=4)
    p.add_argument("--think", type=float, default=0.002, help="seconds between a client's requests")
    a = p.parse_args(argv)
    if a.role == "load":
        return load(a.web, a.requests, a.concurrency, a.think)
    server = {
        "web": lambda: web(a.listen, a.app),
        "app": lambda: app(a.listen, a.db),
        "db": lambda: db(a.listen),
    }[a.role]()
    server.daemon_threads = True  # type: ignore[attr-defined]
    print("ready", flush=True)
    with contextlib.suppress(KeyboardInterrupt):
        server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
