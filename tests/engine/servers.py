"""Loopback servers for the H1Client tests (and the throughput figure).

Everything listens on 127.0.0.1 only:

* ``AppServer``: an aiohttp application in its own thread and loop that records
  which connection (peer port) served each request and how many connections
  were open at once;
* ``RawServer``: a bare asyncio server in its own thread whose connection
  handler writes whatever bytes a test needs (stale keep-alive connections,
  bodies delimited by the close, broken responses);
* ``Nginx``: a throw-away nginx (if installed) serving static files;
* ``DemoProcess``: the bundled demo target in a subprocess;
* ``self_signed_cert``: a certificate for 127.0.0.1/localhost made with openssl.
"""

from __future__ import annotations

import asyncio
import gzip
import os
import shutil
import socket
import ssl
import subprocess
import sys
import threading
import time
import zlib
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path

import brotli
from aiohttp import web

LOCAL = "127.0.0.1"
NGINX = shutil.which("nginx") or ("/usr/sbin/nginx" if os.path.exists("/usr/sbin/nginx") else None)
PAYLOAD = ("All work and no play makes Jack a dull boy. " * 200).encode()
COMPRESSED = {
    "gzip": gzip.compress(PAYLOAD, mtime=0),
    "deflate": zlib.compress(PAYLOAD),
    "deflate-raw": (lambda c: c.compress(PAYLOAD) + c.flush())(zlib.compressobj(wbits=-zlib.MAX_WBITS)),
    "br": brotli.compress(PAYLOAD),
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind((LOCAL, 0))
        return s.getsockname()[1]


class _LoopThread:
    """An event loop running in a daemon thread."""

    def __init__(self, name: str) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name=name, daemon=True)
        self._thread.start()

    def call(self, coro: Awaitable, timeout: float = 10):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)  # type: ignore[arg-type]

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(5)
        self.loop.close()


class AppServer:
    """The aiohttp test application (routes below), optionally over TLS."""

    def __init__(self, ssl_context: ssl.SSLContext | None = None, keepalive_timeout: float = 75.0) -> None:
        self.lock = threading.Lock()
        self.peers: Counter[int] = Counter()  # client port -> requests served on that connection
        self.paths: Counter[str] = Counter()
        self.max_open = 0  # most connections open at once, seen while serving a request
        self.in_flight = 0
        self.max_in_flight = 0
        self._ssl = ssl_context
        self._keepalive_timeout = keepalive_timeout
        self._lt = _LoopThread("h1-test-app")
        self._lt.call(self._start())

    @property
    def url(self) -> str:
        return f"{'https' if self._ssl else 'http'}://{LOCAL}:{self.port}"

    @property
    def connections(self) -> int:
        with self.lock:
            return len(self.peers)

    @property
    def requests(self) -> int:
        with self.lock:
            return sum(self.peers.values())

    def reset(self) -> None:
        with self.lock:
            self.peers.clear()
            self.paths.clear()
            self.max_open = self.max_in_flight = self.in_flight = 0

    def stop(self) -> None:
        self._lt.call(self._runner.cleanup())
        self._lt.stop()

    async def _start(self) -> None:
        app = web.Application(middlewares=[self._track])
        r = app.router
        r.add_get("/hello", self._hello)
        r.add_get("/chunked", self._chunked)
        r.add_get("/coded/{coding}", self._coded)
        r.add_get("/close", self._close)
        r.add_route("*", "/redirect/{code}", self._redirect)
        r.add_get("/loop", self._loop)
        r.add_route("*", "/echo", self._echo)
        r.add_route("*", "/dir/echo", self._echo)
        r.add_route("*", "/redirect/other/echo", self._echo)
        r.add_get("/setcookie", self._setcookie)
        r.add_get("/dir/setcookie", self._setcookie)
        r.add_get("/slow", self._slow)
        r.add_get("/status/{code}", self._status)
        self._runner = web.AppRunner(
            app, access_log=None, shutdown_timeout=0.5, keepalive_timeout=self._keepalive_timeout
        )
        await self._runner.setup()
        site = web.TCPSite(self._runner, LOCAL, 0, ssl_context=self._ssl)
        await site.start()
        self.port = self._runner.addresses[0][1]

    @web.middleware
    async def _track(self, request: web.Request, handler):
        peer = request.transport.get_extra_info("peername")[1]
        with self.lock:
            self.peers[peer] += 1
            self.paths[request.path] += 1
            self.max_open = max(self.max_open, len(self._runner.server.connections))
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            return await handler(request)
        finally:
            with self.lock:
                self.in_flight -= 1

    async def _hello(self, request: web.Request) -> web.Response:
        return web.Response(text="hello")

    async def _chunked(self, request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse()
        resp.enable_chunked_encoding()
        await resp.prepare(request)
        for i in range(int(request.query.get("n", "5"))):
            await resp.write(f"chunk {i};".encode())
            await asyncio.sleep(0)
        await resp.write_eof()
        return resp

    async def _coded(self, request: web.Request) -> web.Response:
        coding = request.match_info["coding"]
        header = "deflate" if coding == "deflate-raw" else coding
        return web.Response(body=COMPRESSED[coding], headers={"Content-Encoding": header}, content_type="text/plain")

    async def _close(self, request: web.Request) -> web.Response:
        resp = web.Response(text="bye")
        resp.force_close()
        return resp

    async def _redirect(self, request: web.Request) -> web.Response:
        code = int(request.match_info["code"])
        await request.read()
        resp = web.Response(status=code, headers={"Location": request.query.get("to", "/echo")})
        for value in request.query.getall("c", []):
            resp.headers.add("Set-Cookie", value)
        return resp

    async def _loop(self, request: web.Request) -> web.Response:
        raise web.HTTPFound("/loop")

    async def _echo(self, request: web.Request) -> web.Response:
        body = await request.read()
        return web.json_response(
            {
                "method": request.method,
                "path": request.path,
                "body": body.decode(),
                "cookie": request.headers.get("Cookie", ""),
                "headers": {k.lower(): v for k, v in request.headers.items()},
            }
        )

    async def _setcookie(self, request: web.Request) -> web.Response:
        resp = web.Response(text="ok")
        # Each query value is one raw Set-Cookie header.
        for value in request.query.getall("c", []):
            resp.headers.add("Set-Cookie", value)
        return resp

    async def _slow(self, request: web.Request) -> web.Response:
        await asyncio.sleep(float(request.query.get("d", "1")))
        return web.Response(text="slow")

    async def _status(self, request: web.Request) -> web.Response:
        return web.Response(status=int(request.match_info["code"]))


Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter, int], Awaitable[None]]


class RawServer:
    """``handler(reader, writer, connection_number)`` writes raw bytes; counts connections."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.connections = 0
        self.requests = 0
        self._lt = _LoopThread("h1-test-raw")
        self._server = self._lt.call(self._start())
        self.port = self._server.sockets[0].getsockname()[1]
        self.url = f"http://{LOCAL}:{self.port}"

    async def _start(self) -> asyncio.AbstractServer:
        return await asyncio.start_server(self._serve, LOCAL, 0)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            await self.handler(reader, writer, self.connections)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    async def read_request(self, reader: asyncio.StreamReader) -> bytes:
        """Read one request head (and a Content-Length body); b"" at EOF."""
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError:
            return b""
        self.requests += 1
        for line in head.split(b"\r\n"):
            if line.lower().startswith(b"content-length:"):
                await reader.readexactly(int(line.split(b":", 1)[1]))
        return head

    def stop(self) -> None:
        async def close() -> None:
            self._server.close()
            await self._server.wait_closed()

        try:
            self._lt.call(close(), timeout=5)
        finally:
            self._lt.stop()


def self_signed_cert(directory: Path) -> tuple[Path, Path]:
    """(cert, key) for CN=localhost, SAN IP:127.0.0.1 and DNS:localhost, via the openssl command."""
    cert, key = directory / "cert.pem", directory / "key.pem"
    subprocess.run(
        [
            "openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
            "-nodes", "-keyout", str(key), "-out", str(cert), "-days", "2", "-subj", "/CN=localhost",
            "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost",
        ],
        check=True,
        capture_output=True,
        timeout=30,
    )  # fmt: skip
    return cert, key


NGINX_CONF = """
daemon off;
worker_processes 1;
pid {d}/nginx.pid;
error_log {d}/error.log;
events {{ worker_connections {connections}; }}
http {{
    access_log off;
    client_body_temp_path {d}/body;
    proxy_temp_path {d}/proxy;
    fastcgi_temp_path {d}/fastcgi;
    uwsgi_temp_path {d}/uwsgi;
    scgi_temp_path {d}/scgi;
    types {{ {types} }}
    default_type application/octet-stream;
    keepalive_requests 1000000;
    server {{
        root {d}/www;
{server}
    }}
}}
"""


class NginxProcess:
    """A throw-away nginx (Debian's) on 127.0.0.1, its files under ``directory``: the config (``server``, the
    server block's listens and locations, after ``root www/``), the ``files`` it serves, its pid and logs.
    Started, and waited for until every one of ``ports`` answers (10 s at most)."""

    def __init__(
        self,
        directory: Path,
        *,
        server: str,
        ports: list[int],
        files: dict[str, bytes],
        types: str = "text/plain txt;",
        connections: int = 1024,
        cpu: int | None = None,
    ) -> None:
        if NGINX is None:
            raise RuntimeError("nginx is not installed")
        directory.chmod(0o755)  # the worker may run as nobody
        www = directory / "www"
        www.mkdir()
        www.chmod(0o755)
        for name, body in files.items():
            (www / name).write_bytes(body)
            (www / name).chmod(0o644)
        conf = directory / "nginx.conf"
        conf.write_text(NGINX_CONF.format(d=directory, connections=connections, types=types, server=server))
        cmd = [NGINX, "-c", str(conf), "-p", str(directory)]
        if cpu is not None and shutil.which("taskset"):
            cmd = ["taskset", "-c", str(cpu), *cmd]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"nginx exited: {self.proc.stderr.read().decode(errors='replace')}")
            try:
                for port in ports:
                    socket.create_connection((LOCAL, port), timeout=0.5).close()
                return
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise RuntimeError("nginx did not start within 10 s")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)
        if self.proc.stderr:
            self.proc.stderr.close()


TWO_K = b"x" * 2047 + b"\n"


class Nginx(NginxProcess):
    """A throw-away nginx on 127.0.0.1 serving ``/2k.txt`` (2,048 bytes) and ``/big.txt`` (gzip-able)."""

    def __init__(self, directory: Path, cpu: int | None = None) -> None:
        self.dir = directory
        self.port = free_port()
        self.url = f"http://{LOCAL}:{self.port}"
        server = f"""\
        listen 127.0.0.1:{self.port};
        location = /big.txt {{ gzip on; gzip_types text/plain; gzip_min_length 100; }}
        location = /redirect {{ return 302 /2k.txt; }}
        location = /close {{ keepalive_timeout 0; return 200 "bye"; }}"""
        files = {"2k.txt": TWO_K, "big.txt": PAYLOAD}
        types = "text/html html; text/plain txt;"
        super().__init__(
            directory, server=server, ports=[self.port], files=files, types=types, connections=4096, cpu=cpu
        )


class DemoProcess:
    """``python -m demo --port 0`` in a subprocess; ``url`` from its first line."""

    def __init__(self, directory: Path, items: int = 2000) -> None:
        root = Path(__file__).resolve().parents[2]
        cmd = [sys.executable, "-m", "demo", "--host", LOCAL, "--port", "0", "--items", str(items)]
        cmd += ["--db", str(directory / "demo.sqlite3")]
        self.proc = subprocess.Popen(cmd, cwd=root, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        line = ""
        ready = threading.Event()

        def read_first_line() -> None:
            nonlocal line
            line = self.proc.stdout.readline()
            ready.set()

        threading.Thread(target=read_first_line, daemon=True).start()
        if not ready.wait(60) or "listening on" not in line:
            self.stop()
            raise RuntimeError(f"the demo target did not start: {line!r}")
        self.url = line.rsplit(" ", 1)[1].strip()

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)
        if self.proc.stdout:
            self.proc.stdout.close()
