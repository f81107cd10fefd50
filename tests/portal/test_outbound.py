"""portal.outbound: one request to exactly the address that was checked.

Real HTTP servers on 127.0.0.1 (allowed) and 127.0.0.2 (forbidden: the tests' allowlist
is 127.0.0.1/32), on the same port, record what they receive, so "nothing reached the
forbidden server" is something a test can see. DNS rebinding is reproduced with the
test-only resolver hook: a resolver that answers differently on each call.
"""

import ast
import errno
import itertools
import socket
import ssl
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from portal import outbound
from portal.history import services
from portal.history.models import TuningChange
from tests.engine.servers import self_signed_cert

ALLOWED, FORBIDDEN = "127.0.0.1", "127.0.0.2"
ONLY_ALLOWED = "127.0.0.1/32"


class _Recorder(BaseHTTPRequestHandler):
    def _handle(self):
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        self.server.received.append({"method": self.command, "path": self.path, "host": self.headers["Host"]})
        status, headers, payload = self.server.answer
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        data = payload or body
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = do_PUT = _handle

    def log_message(self, *args):
        pass


def _serve(address: str, port: int) -> ThreadingHTTPServer:
    server = ThreadingHTTPServer((address, port), _Recorder)
    server.received = []
    server.answer = (200, {}, b"")
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    return server


@pytest.fixture
def servers():
    """(allowed, forbidden): recording servers on 127.0.0.1:P and 127.0.0.2:P.

    P is a free port of 127.0.0.1 that another process may hold on 127.0.0.2 (or on every address): then the
    next free one is tried."""
    for _ in range(20):
        allowed = _serve(ALLOWED, 0)
        try:
            forbidden = _serve(FORBIDDEN, allowed.server_address[1])
            break
        except OSError as e:
            allowed.shutdown()
            allowed.server_close()
            if e.errno != errno.EADDRINUSE:
                raise
    else:
        pytest.fail("no port was free on both 127.0.0.1 and 127.0.0.2 in 20 tries")
    allowed.port = forbidden.port = allowed.server_address[1]
    yield allowed, forbidden
    for server in (allowed, forbidden):
        server.shutdown()
        server.server_close()


class Rebinding:
    """DNS that answers the next address of ``answers`` (cycling) on each call, and counts the calls."""

    def __init__(self, *answers: list[str]):
        self._answers = itertools.cycle(answers)
        self.calls = 0

    def __call__(self, host: str, port: int) -> list[str]:
        self.calls += 1
        return next(self._answers)


# --------------------------------------------------------------------------------------
# DNS rebinding
# --------------------------------------------------------------------------------------


def test_a_rebinding_name_never_reaches_the_forbidden_address(servers):
    # given: a name that alternates between the allowed and the forbidden server
    allowed, forbidden = servers
    dns = Rebinding([ALLOWED], [FORBIDDEN])
    outcomes = []
    # when
    with outbound.resolver_for_tests(dns):
        for _ in range(20):
            try:
                response = outbound.request("GET", f"http://rebind.test:{allowed.port}/x", allowlist=ONLY_ALLOWED)
            except outbound.OutboundRefused as exc:
                outcomes.append(str(exc))
            else:
                outcomes.append(response.address)
    # then: one look-up per request, and what was checked is what was connected to
    refusal = f"http://rebind.test:{allowed.port} resolves to {FORBIDDEN}, which is not in the allowed targets"
    assert dns.calls == 20
    assert outcomes[:2] == [ALLOWED, f"{refusal} (127.0.0.1/32)."]
    assert outcomes == outcomes[:2] * 10
    assert len(allowed.received) == 10
    assert forbidden.received == []


def test_one_forbidden_address_among_several_refuses_before_connecting(servers):
    allowed, forbidden = servers
    with (
        outbound.resolver_for_tests(Rebinding([ALLOWED, FORBIDDEN])),
        pytest.raises(outbound.OutboundRefused, match="resolves to 127.0.0.2"),
    ):
        outbound.request("GET", f"http://two.test:{allowed.port}/", allowlist=ONLY_ALLOWED)
    assert allowed.received == [] and forbidden.received == []


def test_the_original_host_header_is_sent_to_the_checked_address(servers):
    allowed, _ = servers
    with outbound.resolver_for_tests(Rebinding([ALLOWED])):
        response = outbound.request(
            "POST", f"http://App.Test:{allowed.port}/k?a=1#frag", body=b"on", allowlist=ONLY_ALLOWED
        )
    assert (response.status, response.body, response.address) == (200, b"on", ALLOWED)
    assert allowed.received == [{"method": "POST", "path": "/k?a=1", "host": f"app.test:{allowed.port}"}]


def test_tls_uses_the_url_host_as_server_name(tmp_path):
    # given: a TLS server that records the server name (SNI) each client asked for
    cert, key = self_signed_cert(tmp_path)
    names = []
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    context.sni_callback = lambda sock, name, ctx: names.append(name)
    listener = socket.create_server((ALLOWED, 0))
    port = listener.getsockname()[1]

    def accept_one():
        conn, _ = listener.accept()
        try:
            context.wrap_socket(conn, server_side=True).close()
        except (OSError, ssl.SSLError):
            pass  # the client refuses our self-signed certificate: expected
        conn.close()

    thread = threading.Thread(target=accept_one, daemon=True)
    thread.start()
    # when
    with (
        outbound.resolver_for_tests(Rebinding([ALLOWED])),
        pytest.raises(outbound.OutboundFailed, match="TLS failed"),
    ):
        outbound.request("GET", f"https://sni.test:{port}/", allowlist=ONLY_ALLOWED)
    thread.join(timeout=5)
    listener.close()
    # then: connected to 127.0.0.1, but the handshake named the URL's host (and verified against it)
    assert names == ["sni.test"]


# --------------------------------------------------------------------------------------
# Redirects, proxies, size and time
# --------------------------------------------------------------------------------------


def test_a_redirect_is_returned_not_followed(servers):
    allowed, forbidden = servers
    allowed.answer = (302, {"Location": f"http://{FORBIDDEN}:{forbidden.port}/"}, b"")
    response = outbound.request("GET", f"http://{ALLOWED}:{allowed.port}/", allowlist=ONLY_ALLOWED)
    assert response.status == 302
    assert response.headers["Location"].startswith("http://127.0.0.2")
    assert forbidden.received == []


def test_proxy_settings_are_ignored(servers, monkeypatch):
    allowed, forbidden = servers
    for name in ("http_proxy", "HTTP_PROXY", "https_proxy", "all_proxy"):
        monkeypatch.setenv(name, f"http://{FORBIDDEN}:{forbidden.port}")
    outbound.request("GET", f"http://{ALLOWED}:{allowed.port}/p", allowlist=ONLY_ALLOWED)
    assert [r["path"] for r in allowed.received] == ["/p"]
    assert forbidden.received == []


def test_a_response_over_the_cap_fails(servers):
    allowed, _ = servers
    allowed.answer = (200, {}, b"x" * 5000)
    with pytest.raises(outbound.OutboundFailed, match="more than 1,000 bytes"):
        outbound.request("GET", f"http://{ALLOWED}:{allowed.port}/", max_bytes=1000, allowlist=ONLY_ALLOWED)
    assert len(outbound.request("GET", f"http://{ALLOWED}:{allowed.port}/", allowlist=ONLY_ALLOWED).body) == 5000


def test_a_server_dripping_its_answer_is_cut_at_the_total_timeout():
    # given: a server that sends one header byte every 0.1 s, forever (each read alone is quick)
    listener = socket.create_server((ALLOWED, 0))
    stop = threading.Event()

    def drip():
        conn, _ = listener.accept()
        with conn:
            conn.recv(65536)
            conn.sendall(b"HTTP/1.1 200 OK\r\n")
            while not stop.is_set():
                try:
                    conn.sendall(b"X")
                except OSError:
                    return
                time.sleep(0.1)

    threading.Thread(target=drip, daemon=True).start()
    started = time.monotonic()
    # when
    with pytest.raises(outbound.OutboundFailed, match="did not answer within 1 s"):
        outbound.request("GET", f"http://{ALLOWED}:{listener.getsockname()[1]}/", timeout=1, allowlist=ONLY_ALLOWED)
    # then: the whole exchange was bounded, not each read (a generous margin for a loaded machine)
    assert time.monotonic() - started < 4
    stop.set()
    listener.close()


def test_a_slow_name_look_up_counts_in_the_timeout(servers):
    # given: DNS that takes 3 s to answer
    allowed, _ = servers

    def slow(host, port):
        time.sleep(3)
        return [ALLOWED]

    started = time.monotonic()
    # when
    with (
        outbound.resolver_for_tests(slow),
        pytest.raises(outbound.OutboundRefused, match=r"could not be resolved \(no answer within 0.5 s\)"),
    ):
        outbound.request("GET", f"http://slow.test:{allowed.port}/", timeout=0.5, allowlist=ONLY_ALLOWED)
    # then
    assert time.monotonic() - started < 2.5
    assert allowed.received == []


def test_a_closed_port_fails_with_a_message():
    with socket.socket() as s:
        s.bind((ALLOWED, 0))
        port = s.getsockname()[1]
    with pytest.raises(outbound.OutboundFailed, match=f"http://127.0.0.1:{port} could not be reached"):
        outbound.request("GET", f"http://{ALLOWED}:{port}/", allowlist=ONLY_ALLOWED)


# --------------------------------------------------------------------------------------
# The strict parser
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("http://127.0.0.1%09@127.0.0.2:18080/x", "contains credentials"),
        ("http://127.0.0.1%00@127.0.0.2:18080/x", "contains credentials"),
        ("http://user:pw@127.0.0.1/", "contains credentials"),
        ("http://[127.0.0.1]:18081", "IPv4 address cannot be in brackets"),
        ("http://[::1:18081/", "not a valid URL"),
        ("http://[nothex]/", "not a valid URL"),
        ("http://127.0.0.1\t/x", "the character '\\t'"),
        ("http://127.0.0.1/a\x00b", "the character '\\x00'"),
        ("http://127.0.0.1/a b", "the character ' '"),
        ("http://127.0.0.1\\@evil.test/", "a backslash"),
        ("http://127.0.0.1:0/", "bad port"),
        ("http://127.0.0.1:99999/", "bad port"),
        ("http://127.0.0.1:/", "bad port"),
        ("http://127.1/", "not a dotted-decimal IPv4 address"),
        ("http://0x7f.0.0.1/", "not a dotted-decimal IPv4 address"),
        ("http://loc%61lhost/", "percent-encoded character in its host"),
        ("http://exa_mple..test/", "not a valid host name"),
        ("ftp://127.0.0.1/", "not an http:// or https:// URL"),
        ("http:///x", "not an http:// or https:// URL"),
        ("", "empty"),
    ],
)
def test_malformed_urls_are_refused_with_a_reason(url, message):
    with pytest.raises(outbound.OutboundRefused, match=message.replace("\\", "\\\\").replace("(", r"\(")):
        outbound.parse_url(url)


@pytest.mark.parametrize(
    ("url", "origin", "target", "host_header"),
    [
        ("http://127.0.0.1:8001/_demo/knobs", "http://127.0.0.1:8001", "/_demo/knobs", "127.0.0.1:8001"),
        ("https://[::1]/a%20b?q=é#frag", "https://[::1]:443", "/a%20b?q=%C3%A9", "[::1]"),
        ("HTTP://LocalHost.:80", "http://localhost:80", "/", "localhost"),
        ("http://bücher.test/", "http://xn--bcher-kva.test:80", "/", "xn--bcher-kva.test"),
    ],
)
def test_valid_urls_are_read_the_same_way_everywhere(url, origin, target, host_header):
    parsed = outbound.parse_url(url)
    assert (parsed.origin, parsed.target, parsed.host_header) == (origin, target, host_header)


def test_the_allowlist_check_uses_the_same_parser():
    from workers.engine.targets import TargetNotAllowed, check_url

    with pytest.raises(TargetNotAllowed, match="contains credentials"):
        check_url("http://127.0.0.1%09@127.0.0.2:18080/x")


# --------------------------------------------------------------------------------------
# Hooks go through the helper
# --------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_a_hook_to_a_rebinding_name_reaches_only_the_address_it_checked(settings, alice, environment, servers):
    # given: a change whose hook names a host that resolves to the allowed server first, then the forbidden one
    allowed, forbidden = servers
    settings.PLIMSOLL_OUTBOUND_ALLOWED = ONLY_ALLOWED
    allowed.answer = (200, {}, b'{"ok": true}')
    forbidden.answer = (200, {}, b"secret from the forbidden server")
    change = services.change_create(
        environment=environment,
        user=alice,
        edits=[{"key": "search.index", "value": "on"}],
        title="Index",
        hook_url=f"http://rebind.test:{allowed.port}/_demo/knobs",
    )
    # when
    with outbound.resolver_for_tests(Rebinding([ALLOWED], [FORBIDDEN])):
        services.change_apply(change, user=alice)
    # then
    change.refresh_from_db()
    assert change.status == TuningChange.Status.APPLIED
    assert change.hook_response["body"] == '{"ok": true}'
    assert change.hook_response["address"] == ALLOWED
    assert len(allowed.received) == 1 and forbidden.received == []


@pytest.mark.django_db
def test_a_stored_malformed_hook_url_fails_the_change_with_a_message(settings, alice, environment, servers):
    # given: a URL stored before the strict parser existed
    change = services.change_create(
        environment=environment,
        user=alice,
        edits=[{"key": "search.index", "value": "on"}],
        title="Index",
        hook_url="http://[127.0.0.1]:18081",
    )
    # when
    with pytest.raises(services.ChangeError, match="Hook refused, no request was sent: .*brackets"):
        services.change_apply(change, user=alice)
    # then
    change.refresh_from_db()
    assert change.status == TuningChange.Status.FAILED


# --------------------------------------------------------------------------------------
# Nothing else sends
# --------------------------------------------------------------------------------------

ROOT = Path(__file__).resolve().parents[2]
# Modules that open connections: only portal.outbound may use them in the portal and its workers.
NETWORK_MODULES = {"socket", "ssl", "http.client", "urllib.request", "urllib3", "requests", "httpx", "aiohttp"}
# Who else may: the CI client talks to the portal (its user's own URL, not the server's), and
# runs/services/shards.py names its worker with socket.gethostname(). The engine (workers/engine) and the
# demo target are not the portal: the engine checks every connection itself (workers/engine/targets.py).
ALLOWED_USERS = {
    "portal/outbound.py": NETWORK_MODULES,
    # the CI client, one standard-library file (http.client for the headers type it reads)
    "portal/client.py": {"urllib.request", "http.client"},
    "portal/runs/services/shards.py": {"socket"},
    # an environment's CA bundle: each PEM block parsed as a certificate (ssl.PEM_cert_to_DER_cert, a context's
    # load_verify_locations); no connection is opened
    "portal/projects/rules.py": {"ssl"},
}


def network_imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        names = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
        found |= {name for name in names if name in NETWORK_MODULES or name.split(".")[0] in NETWORK_MODULES}
    return found


def test_every_outbound_request_of_the_portal_goes_through_the_one_helper():
    # A hook, a webhook, a metrics scrape, the next feature: none may open a connection of its own.
    sources = [p for folder in ("portal", "workers") for p in (ROOT / folder).rglob("*.py")]
    offenders = {}
    for path in sources:
        name = path.relative_to(ROOT).as_posix()
        if name.startswith("workers/engine/"):
            continue
        if extra := network_imports(path) - ALLOWED_USERS.get(name, set()):
            offenders[name] = sorted(extra)
    assert len(sources) > 50
    assert not offenders, f"use portal.outbound.request instead: {offenders}"


@pytest.mark.parametrize(
    "source",
    ["import urllib.request", "from urllib.request import urlopen", "import requests", "from http import client"],
)
def test_the_guard_sees_a_connection_opened_elsewhere(tmp_path, source):
    module = tmp_path / "webhooks.py"
    module.write_text(f"{source}\n")
    assert network_imports(module)
