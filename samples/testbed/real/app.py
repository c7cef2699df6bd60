#!/usr/bin/env python3
"""The app tier of the real testbed: HTTPS (HTTP/1.1, keep-alive) in front of Redis,
PostgreSQL and a gRPC service, with an OpenTelemetry span for every request and every
backend call it makes.

Endpoints (the ground truth the testbed's README writes down):

    GET /item/N   Redis GET, then PostgreSQL SELECT            (in sequence)
    GET /cart/N   PostgreSQL SELECT, then Redis GET, then gRPC Quote  (in sequence)
    GET /home/N   PostgreSQL SELECT (a 5 ms query), Redis GET and gRPC Recommend at once;
                  waits for all

``--spans FILE`` appends the spans as OTLP/JSON, one ``{"resourceSpans": ...}`` document
a line. SIGUSR1 toggles the code fault: ``--fault-ms`` of extra work in ``/cart``,
between its Redis GET and its gRPC call. Prints ``ready`` once it listens.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import contextvars
import json
import signal
import ssl
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import asyncpg
import grpc
import redis.asyncio as aioredis
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.trace import SpanKind, Tracer

_KIND = {SpanKind.SERVER: 2, SpanKind.CLIENT: 3, SpanKind.INTERNAL: 1}


#: The X-Request-ID of the request a connection's task is serving (None: none came).
REQUEST_ID: contextvars.ContextVar[str | None] = contextvars.ContextVar("request_id", default=None)


class OtlpJsonFile(SpanExporter):
    """Appends each batch of spans to a file as one OTLP/JSON document (JSON Lines)."""

    def __init__(self, path: Path, service: str) -> None:
        self.path = path
        self.service = service
        self.lock = threading.Lock()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        out = []
        for s in spans:
            ctx = s.context
            assert ctx is not None
            out.append(
                {
                    "traceId": f"{ctx.trace_id:032x}",
                    "spanId": f"{ctx.span_id:016x}",
                    "parentSpanId": f"{s.parent.span_id:016x}" if s.parent else "",
                    "name": s.name,
                    "kind": _KIND.get(s.kind, 1),
                    "startTimeUnixNano": str(s.start_time),
                    "endTimeUnixNano": str(s.end_time),
                    "attributes": [
                        {"key": k, "value": {"stringValue": str(v)}} for k, v in (s.attributes or {}).items()
                    ],
                }
            )
        doc = {
            "resourceSpans": [
                {
                    "resource": {
                        "attributes": [{"key": "service.name", "value": {"stringValue": self.service}}]
                    },
                    "scopeSpans": [{"scope": {"name": "testbed.app"}, "spans": out}],
                }
            ]
        }
        with self.lock, self.path.open("a") as f:
            f.write(json.dumps(doc, separators=(",", ":")) + "\n")
        return SpanExportResult.SUCCESS


async def _keep_session(conn: asyncpg.Connection) -> None:
    """Releasing a connection to the pool sends nothing (asyncpg's default resets the session
    with one more query per call)."""


class App:
    def __init__(self, a: argparse.Namespace, tracer: Tracer) -> None:
        self.a = a
        self.tracer = tracer
        self.fault_s = 0.0
        self.redis: aioredis.Redis
        self.pg: asyncpg.Pool
        self.grpc: grpc.aio.Channel

    async def start(self) -> None:
        host, port = self.a.redis.rsplit(":", 1)
        self.redis = aioredis.Redis(
            host=host, port=int(port), max_connections=64, protocol=2, lib_name=None, lib_version=None
        )
        host, port = self.a.pg.rsplit(":", 1)
        self.pg = await asyncpg.create_pool(
            host=host,
            port=int(port),
            user="postgres",
            database="postgres",
            min_size=8,
            max_size=8,
            reset=_keep_session,
        )
        self.grpc = grpc.aio.insecure_channel(self.a.grpc)
        self.quote = self.grpc.unary_unary("/shop.Shop/Quote")
        self.recommend = self.grpc.unary_unary("/shop.Shop/Recommend")

    async def call(self, name: str, peer: str, coro: Any) -> Any:
        with self.tracer.start_as_current_span(name, kind=SpanKind.CLIENT, attributes={"peer.service": peer}):
            return await coro

    async def redis_get(self, n: int) -> Any:
        return await self.call("redis GET", "redis", self.redis.get(f"item:{n % 100}"))

    async def pg_select(self, n: int, slow: bool = False) -> Any:
        if slow:  # a heavier query (5 ms in the server): the other calls go out while it runs
            q = "SELECT price FROM items, pg_sleep(0.005) WHERE id = $1"
        else:
            q = "SELECT price FROM items WHERE id = $1"
        return await self.call("pg SELECT", "pg", self.pg.fetchval(q, n % 100))

    async def grpc_call(self, method: str, n: int) -> Any:
        stub = self.quote if method == "Quote" else self.recommend
        rid = REQUEST_ID.get()
        metadata = (("x-request-id", rid),) if rid and self.a.pass_request_id else None
        return await self.call(f"grpc {method}", "grpc", stub(str(n).encode(), timeout=10, metadata=metadata))

    async def handle(self, path: str) -> tuple[int, bytes]:
        parts = path.split("?", 1)[0].strip("/").split("/")
        if len(parts) != 2 or not parts[1].isdigit():
            return 404, b"not found\n"
        endpoint, n = parts[0], int(parts[1])
        if endpoint == "item":
            await self.redis_get(n)
            price = await self.pg_select(n)
            return 200, f"item {n} {price}\n".encode()
        if endpoint == "cart":
            price = await self.pg_select(n)
            await self.redis_get(n)
            if self.fault_s:
                await asyncio.sleep(self.fault_s)
            quote = await self.grpc_call("Quote", n)
            return 200, f"cart {n} {price} {quote.decode()}\n".encode()
        if endpoint == "home":
            price, _, rec = await asyncio.gather(
                self.pg_select(n, slow=True), self.redis_get(n), self.grpc_call("Recommend", n)
            )
            return 200, f"home {n} {price} {rec.decode()}\n".encode()
        return 404, b"not found\n"

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                method, path = lines[0].split(" ")[:2]
                length = 0
                REQUEST_ID.set(None)
                for line in lines[1:]:
                    k, _, v = line.partition(":")
                    if k.strip().lower() == "content-length":
                        length = int(v)
                    elif k.strip().lower() == "x-request-id":
                        REQUEST_ID.set(v.strip())
                if length:
                    await reader.readexactly(length)
                with self.tracer.start_as_current_span(
                    f"{method} /{path.strip('/').split('/')[0]}",
                    kind=SpanKind.SERVER,
                    attributes={"http.target": path},
                ):
                    status, body = await self.handle(path)
                writer.write(
                    f"HTTP/1.1 {status} {'OK' if status == 200 else 'Not Found'}\r\n"
                    f"Content-Length: {len(body)}\r\nContent-Type: text/plain\r\n\r\n".encode()
                    + body
                )
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, ssl.SSLError):
            pass
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()


async def main_async(a: argparse.Namespace, tracer: Tracer) -> None:
    app = App(a, tracer)
    await app.start()
    loop = asyncio.get_running_loop()

    def toggle() -> None:
        app.fault_s = 0.0 if app.fault_s else a.fault_ms / 1000

    loop.add_signal_handler(signal.SIGUSR1, toggle)
    stop = asyncio.Event()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    loop.add_signal_handler(signal.SIGINT, stop.set)
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(a.cert, a.key)
    host, port = a.listen.rsplit(":", 1)
    server = await asyncio.start_server(app.serve, host, int(port), ssl=ctx, backlog=256)
    print("ready", flush=True)
    async with server:
        await stop.wait()
    await app.grpc.close()
    await app.pg.close()
    await app.redis.aclose()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--listen", required=True, help="HOST:PORT (HTTPS)")
    p.add_argument("--name", required=True, help="service name in the spans")
    p.add_argument("--redis", required=True)
    p.add_argument("--pg", required=True)
    p.add_argument("--grpc", required=True)
    p.add_argument("--cert", required=True)
    p.add_argument("--key", required=True)
    p.add_argument("--spans", type=Path, help="OTLP/JSON Lines file to append spans to")
    p.add_argument("--fault-ms", type=float, default=15.0, help="extra work in /cart when toggled on")
    p.add_argument(
        "--pass-request-id",
        action="store_true",
        help="send the request's X-Request-ID on to the gRPC calls it makes (metadata x-request-id)",
    )
    a = p.parse_args(argv)
    provider = TracerProvider(resource=Resource.create({"service.name": a.name}))
    if a.spans:
        provider.add_span_processor(
            BatchSpanProcessor(OtlpJsonFile(a.spans, a.name), schedule_delay_millis=500)
        )
    try:
        asyncio.run(main_async(a, provider.get_tracer("testbed.app")))
    finally:
        provider.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
