#!/usr/bin/env python3
"""The load generator of the real testbed: ``--clients`` concurrent clients, each on one
keep-alive HTTP/1.1 connection to the front tier, sending requests one after another
(with a random think time between them, exponential with mean ``--think`` seconds, so
the clients do not move in waves) until ``--requests`` are done in all.

Request k goes to ``/item/k``, ``/cart/k`` or ``/home/k`` (a fixed pseudo-random pick:
half are items, a quarter carts, a quarter home pages). Prints one JSON line: requests, errors, wall time and
latency percentiles.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import time

ENDPOINTS = ("item", "item", "cart", "home")


def endpoint_of(k: int) -> str:
    """The endpoint of request ``k``: a fixed pseudo-random pick (two items in four), so that
    neither app server gets one endpoint only from the round robin."""
    return ENDPOINTS[((k * 2654435761) >> 11) % len(ENDPOINTS)]


def path_of(k: int, first: int = 0) -> str:
    """The path of request ``k`` (numbered from ``first``)."""
    return f"/{endpoint_of(first + k)}/{first + k}"


async def client(
    host: str,
    port: int,
    todo: list[int],
    first: int,
    think_s: float,
    lat: list[float],
    errors: list[str],
    rng: random.Random,
) -> None:
    reader, writer = await asyncio.open_connection(host, port)
    try:
        if think_s:
            await asyncio.sleep(rng.uniform(0, 2 * think_s))  # clients start spread out
        while todo:
            k = todo.pop()
            t0 = time.perf_counter()
            writer.write(f"GET {path_of(k, first)} HTTP/1.1\r\nHost: shop\r\n\r\n".encode())
            head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            for line in head.decode("latin-1").split("\r\n")[1:]:
                name, _, value = line.partition(":")
                if name.strip().lower() == "content-length":
                    length = int(value)
            await reader.readexactly(length)
            lat.append(time.perf_counter() - t0)
            if not head.startswith(b"HTTP/1.1 200"):
                errors.append(head.split(b"\r\n", 1)[0].decode("latin-1"))
            if think_s:
                await asyncio.sleep(rng.expovariate(1 / think_s))
    finally:
        writer.close()


async def main_async(a: argparse.Namespace) -> dict[str, object]:
    host, port = a.front.rsplit(":", 1)
    todo = list(range(a.requests))[::-1]
    lat: list[float] = []
    errors: list[str] = []
    t0 = time.perf_counter()
    await asyncio.gather(
        *(
            client(host, int(port), todo, a.first, a.think, lat, errors, random.Random(a.first + i))
            for i in range(a.clients)
        )
    )
    wall = time.perf_counter() - t0
    lat.sort()

    def pct(q: float) -> float:
        return round(lat[min(len(lat) - 1, int(q * len(lat)))] * 1000, 3) if lat else 0.0

    return {
        "requests": len(lat),
        "errors": len(errors),
        "first_error": errors[0] if errors else None,
        "wall_s": round(wall, 3),
        "rate_per_s": round(len(lat) / wall, 1) if wall else 0.0,
        "p50_ms": pct(0.5),
        "p90_ms": pct(0.9),
        "p99_ms": pct(0.99),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--front", required=True, help="HOST:PORT of the front tier")
    p.add_argument("--requests", type=int, default=200)
    p.add_argument("--clients", type=int, default=8)
    p.add_argument("--think", type=float, default=0.0, help="mean seconds between a client's requests")
    p.add_argument("--first", type=int, default=0, help="number of the first request")
    doc = asyncio.run(main_async(p.parse_args(argv)))
    print(json.dumps(doc), flush=True)
    return 0 if not doc["errors"] else 1


if __name__ == "__main__":
    sys.exit(main())
