#!/usr/bin/env python3
"""The gRPC service of the real testbed (grpcio, HTTP/2 in the clear): ``shop.Shop`` with
two unary methods on raw bytes, ``Quote`` (about ``--work-ms`` of work) and
``Recommend`` (the same). SIGUSR1 toggles the fault: ``Quote`` takes
``--fault-ms`` longer. Prints ``ready`` once it listens.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys

import grpc


async def main_async(a: argparse.Namespace) -> None:
    state = {"fault_s": 0.0}

    async def quote(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        await asyncio.sleep(a.work_ms / 1000 + state["fault_s"])
        return b"quote:" + request

    async def recommend(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        await asyncio.sleep(a.work_ms / 1000)
        return b"rec:" + request

    handler = grpc.method_handlers_generic_handler(
        "shop.Shop",
        {
            "Quote": grpc.unary_unary_rpc_method_handler(quote),
            "Recommend": grpc.unary_unary_rpc_method_handler(recommend),
        },
    )
    server = grpc.aio.server()
    server.add_generic_rpc_handlers((handler,))
    server.add_insecure_port(a.listen)
    await server.start()
    loop = asyncio.get_running_loop()

    def toggle() -> None:
        state["fault_s"] = 0.0 if state["fault_s"] else a.fault_ms / 1000

    stop = asyncio.Event()
    loop.add_signal_handler(signal.SIGUSR1, toggle)
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    loop.add_signal_handler(signal.SIGINT, stop.set)
    print("ready", flush=True)
    await stop.wait()
    await server.stop(0.5)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--listen", required=True, help="HOST:PORT")
    p.add_argument("--work-ms", type=float, default=2.0, help="work of each method")
    p.add_argument("--fault-ms", type=float, default=10.0, help="Quote's extra time when toggled on")
    asyncio.run(main_async(p.parse_args(argv)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
