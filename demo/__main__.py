"""Run the Plimsoll demo target (the bundled system under test).

    python -m demo --host 127.0.0.1 --port 8001 [--db var/demo.sqlite3] [--items 200000]
                   [--knob NAME=VALUE ...] [--access-log]

Prints one line, "Plimsoll demo target listening on http://HOST:PORT", once
the database is ready and the socket accepts connections (scripts and tests
wait for it; ``--port 0`` picks a free port and prints it). Exits with status
0 on SIGINT or SIGTERM after closing the server cleanly.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys

from aiohttp import web

from demo.app import create_app
from demo.knobs import KnobError


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m demo", description="Plimsoll demo target (system under test).")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8001, help="0 picks a free port")
    parser.add_argument("--db", default="var/demo.sqlite3", help="SQLite file, created if missing")
    parser.add_argument("--items", type=int, default=200_000, help="number of work items")
    parser.add_argument(
        "--knob", action="append", default=[], metavar="NAME=VALUE", help="start with this knob value (repeatable)"
    )
    parser.add_argument("--access-log", action="store_true", help="log every request (slows it down)")
    return parser.parse_args(argv)


async def serve(args: argparse.Namespace) -> None:
    knobs = dict(k.split("=", 1) for k in args.knob)
    app = create_app(args.db, items=args.items, knobs=knobs)
    access_log = logging.getLogger("demo.access") if args.access_log else None
    # On SIGINT/SIGTERM, give requests in flight up to 5 s to finish (aiohttp's default is 60 s).
    runner = web.AppRunner(app, access_log=access_log, shutdown_timeout=5.0)
    await runner.setup()  # runs start-up: fills the database, applies the knobs
    site = web.TCPSite(runner, args.host, args.port)
    await site.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    port = runner.addresses[0][1]
    host = f"[{args.host}]" if ":" in args.host else args.host
    print(f"Plimsoll demo target listening on http://{host}:{port}", flush=True)
    try:
        await stop.wait()
    finally:
        await runner.cleanup()


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if any("=" not in k for k in args.knob):
        print("--knob expects NAME=VALUE", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        import uvloop

        loop_factory = uvloop.new_event_loop
    except ImportError:
        loop_factory = None
    try:
        with asyncio.Runner(loop_factory=loop_factory) as runner:
            runner.run(serve(args))
    except KnobError as exc:
        print(f"bad --knob: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # Ctrl-C before the server was up (e.g. while filling the db)
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
