#!/usr/bin/env python3
"""A TCP relay in PostgreSQL's namespace for kernels without ``sch_netem``: it listens on
``--listen`` and forwards every connection to ``--to``; SIGUSR1 toggles a delay of
``--delay-ms`` on everything the server sends back, the same fault ``tc netem`` puts on
the link. Prints ``ready`` once it listens.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys
import time


async def pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, delay: list[float]) -> None:
    """Copy ``reader`` to ``writer``, each chunk held until ``delay[0]`` after it arrived."""
    queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

    async def send() -> None:
        while True:
            due, chunk = await queue.get()
            if not chunk:
                break
            wait = due - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            writer.write(chunk)
            await writer.drain()

    sender = asyncio.create_task(send())
    try:
        while True:
            chunk = await reader.read(65536)
            queue.put_nowait((time.monotonic() + delay[0], chunk))
            if not chunk:
                break
        await sender
    finally:
        sender.cancel()
        writer.close()


async def main_async(a: argparse.Namespace) -> None:
    delay = [0.0]
    host, port = a.to.rsplit(":", 1)

    async def relay(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(host, int(port))
        nodelay = [0.0]
        with contextlib.suppress(ConnectionError):
            await asyncio.gather(pump(reader, up_writer, nodelay), pump(up_reader, writer, delay))

    loop = asyncio.get_running_loop()

    def toggle() -> None:
        delay[0] = 0.0 if delay[0] else a.delay_ms / 1000

    stop = asyncio.Event()
    loop.add_signal_handler(signal.SIGUSR1, toggle)
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    loop.add_signal_handler(signal.SIGINT, stop.set)
    lhost, lport = a.listen.rsplit(":", 1)
    server = await asyncio.start_server(relay, lhost, int(lport))
    print("ready", flush=True)
    async with server:
        await stop.wait()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--listen", required=True, help="HOST:PORT to accept on")
    p.add_argument("--to", required=True, help="HOST:PORT of the server")
    p.add_argument("--delay-ms", type=float, default=20.0)
    asyncio.run(main_async(p.parse_args(argv)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
