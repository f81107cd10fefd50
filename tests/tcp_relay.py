"""A TCP relay for end-to-end tests: ``python -m tests.tcp_relay LISTEN=DEST …`` (each ``host:port``).

It forwards every connection to LISTEN to DEST, byte for byte, both ways (half-closes included),
prints ``ready`` once all its listeners are up and ``connection LISTEN`` for each connection it
takes. The namespaced-hosts test (tests/netns.py) uses it to reach the root namespace's PostgreSQL,
Redis and demo target, which listen on 127.0.0.1 only, from other network namespaces.
"""

import asyncio
import signal
import sys


def endpoint(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    return host, int(port)


async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
    except OSError:
        writer.transport.abort()


async def serve(listen: str, dest: str) -> asyncio.Server:
    dest_host, dest_port = endpoint(dest)

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        print(f"connection {listen}", flush=True)
        try:
            dest_reader, dest_writer = await asyncio.wait_for(asyncio.open_connection(dest_host, dest_port), 10)
        except (OSError, TimeoutError):
            writer.transport.abort()
            return
        try:
            await asyncio.gather(pipe(reader, dest_writer), pipe(dest_reader, writer))
        finally:
            writer.close()
            dest_writer.close()

    host, port = endpoint(listen)
    return await asyncio.start_server(handle, host, port, reuse_address=True)


async def main(pairs: list[str]) -> None:
    servers = [await serve(*pair.split("=", 1)) for pair in pairs]
    print("ready", flush=True)
    stopped = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        asyncio.get_running_loop().add_signal_handler(sig, stopped.set)
    await stopped.wait()
    for server in servers:
        server.close()


if __name__ == "__main__":
    if len(sys.argv) < 2 or not all("=" in arg for arg in sys.argv[1:]):
        sys.exit("usage: python -m tests.tcp_relay LISTEN_HOST:PORT=DEST_HOST:PORT …")
    asyncio.run(main(sys.argv[1:]))
