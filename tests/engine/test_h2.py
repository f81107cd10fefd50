"""HTTP/2 in the engine (workers/engine/h2.py): real servers on loopback.

The demo target's Hypercorn face (h2c, TLS with ALPN), nginx with ``http2`` (an
independent implementation), aiohttp over TLS (no h2: the ALPN fallback), and a
raw server on the ``h2`` library that misbehaves on purpose.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from pathlib import Path

import hpack
import pytest

from workers.engine import errors
from workers.engine.h2 import FlowControlStalled, H2Client, H2ProtocolError, StreamReset, make_client
from workers.engine.plan import Plan, PlanError
from workers.engine.runner import run_sync
from workers.engine.targets import TargetNotAllowed

from .protocol_servers import NginxH2, RawH2Server, StreamsServer, tls_server_context
from .servers import NGINX, AppServer


@pytest.fixture(scope="module")
def streams(tmp_path_factory):
    server = StreamsServer(tmp_path_factory.mktemp("streams"))
    yield server
    server.stop()


@pytest.fixture
def demo(streams):
    streams.set_knobs(latency_ms=0)
    streams.reset()
    return streams


def _run(coro):
    return asyncio.run(coro)


def _plan(base_url: str, protocol: str, *, users: int = 2, hold: float = 0.6, **extra) -> dict:
    return {
        "base_url": base_url,
        "protocol": protocol,
        "test_cases": [
            {
                "name": "P",
                "steps": [
                    {"name": "page", "path": "/page", "resources": [f"/res/{1000 + i}" for i in range(6)]},
                ],
            }
        ],
        "profile": {"kind": "constant", "users": users, "hold": hold},
        "request_timeout": 5,
        **extra,
    }


@pytest.mark.serial  # three pages within a 0.6 s hold
def test_h2c_multiplexes_a_page_and_its_resources_on_one_connection_per_user(demo):
    totals = run_sync(_plan(demo.http_url, "h2c"), sink=None)

    served = demo.app.counters.snapshot()
    label = totals.labels["P: page"]
    assert totals.errors == 0 and label.pages > 2
    assert label.protocols == {"h2": totals.requests}
    assert served["by_protocol"] == {"2": totals.requests}
    assert served["connections"] == 2  # one per virtual user, the six resources of each page on it


def test_http1_opens_several_connections_for_the_same_page(demo):
    totals = run_sync(_plan(demo.http_url, "http1"), sink=None)

    served = demo.app.counters.snapshot()
    assert totals.errors == 0
    assert totals.labels["P: page"].protocols == {"http/1.1": totals.requests}
    assert served["by_protocol"] == {"1.1": totals.requests}
    assert served["connections"] > 2  # the resources went out in parallel over up to 6 connections per user


def test_auto_negotiates_h2_by_alpn_over_tls_and_stays_http1_in_clear(demo):
    tls = run_sync(_plan(demo.https_url, "auto", users=1, hold=0.3, ca_bundle=demo.ca_pem), sink=None)
    clear = run_sync(_plan(demo.http_url, "auto", users=1, hold=0.3), sink=None)

    assert tls.errors == 0 and clear.errors == 0
    assert tls.labels["P: page"].protocols == {"h2": tls.requests}
    assert clear.labels["P: page"].protocols == {"http/1.1": clear.requests}
    assert demo.app.counters.snapshot()["by_protocol"] == {"2": tls.requests, "1.1": clear.requests}


@pytest.mark.serial  # two handshakes within a 0.3 s hold
def test_tls_is_verified_by_default_and_a_failed_handshake_is_a_named_error(demo):
    refused = run_sync(_plan(demo.https_url, "auto", users=1, hold=0.3), sink=None)
    unverified = run_sync(_plan(demo.https_url, "auto", users=1, hold=0.3, tls_verify=False), sink=None)

    assert refused.pages > 1  # the user went on after each failed handshake
    assert refused.errors_by_kind == {errors.TLS_ERROR: refused.pages}
    assert (
        refused.error_samples[errors.TLS_ERROR]
        == "GET /page -> TLS handshake failed: unable to get local issuer certificate"
    )
    assert unverified.errors == 0 and unverified.labels["P: page"].protocols == {"h2": unverified.requests}


def test_a_bad_ca_bundle_is_refused_with_the_field_named():
    plan = _plan("https://127.0.0.1:1", "auto", ca_bundle="-----BEGIN CERTIFICATE-----\nnot base64\n")
    with pytest.raises(PlanError, match=r"^ca_bundle: not a valid PEM"):
        Plan.from_dict(plan)
    with pytest.raises(PlanError, match=r"^protocol: must be one of auto, http1, h2c"):
        Plan.from_dict(_plan("http://127.0.0.1:1", "h3"))
    assert Plan.from_dict(_plan("http://127.0.0.1:1", "h2c")).to_dict()["protocol"] == "h2c"


def test_alpn_falls_back_to_http11_on_the_same_connection(tmp_path):
    ctx, ca_pem = tls_server_context(tmp_path)
    server = AppServer(ssl_context=ctx)  # aiohttp over TLS: no h2 in its ALPN
    try:
        opened = []

        class Counting(H2Client):
            async def _open(self, prep, protocol, ctx):
                opened.append(type(protocol).__name__)
                return await super()._open(prep, protocol, ctx)

        async def go():
            client = Counting(protocol="auto", ca_bundle=ca_pem)
            try:
                return [await client.request("GET", f"{server.url}/hello", {}, b"", 5) for _ in range(5)]
            finally:
                await client.close()

        responses = _run(go())
        assert opened == ["_H2Conn"]  # one TCP connection and TLS handshake, offering h2: no second one
        assert [r.protocol for r in responses] == ["http/1.1"] * 5
        assert all(r.status == 200 for r in responses)
        assert server.connections == 1  # the ALPN connection itself served them all: no second handshake
        assert responses[0].connect_s > 0 and responses[1].connect_s == 0
    finally:
        server.stop()


@pytest.mark.skipif(NGINX is None, reason="nginx is not installed")
def test_nginx_serves_h2_over_tls_and_h2c_to_the_engine():
    directory = Path(tempfile.mkdtemp(prefix="plimsoll-nginx-h2-"))  # not under pytest's 0700 base (nobody reads it)
    nginx = NginxH2(directory)
    try:

        async def go(url, protocol, ca):
            client = make_client(protocol=protocol, ca_bundle=ca)
            try:
                rs = await asyncio.gather(*(client.request("GET", f"{url}/2k.txt", {}, b"", 5) for _ in range(20)))
                proto = await client.request("GET", f"{url}/proto", {}, b"", 5)
                return rs, proto
            finally:
                await client.close()

        for url, protocol in ((nginx.https_url, "auto"), (nginx.h2c_url, "h2c")):
            rs, proto = _run(go(url, protocol, nginx.ca_pem))
            assert [(r.status, r.protocol, len(r.body)) for r in rs] == [(200, "h2", 2048)] * 20
            assert proto.body == b"HTTP/2.0"
        totals = run_sync(
            {
                "base_url": nginx.h2c_url,
                "protocol": "h2c",
                "test_cases": [
                    {"name": "N", "steps": [{"name": "2k", "path": "/2k.txt", "resources": ["/2k.txt"] * 3}]}
                ],
                "profile": {"kind": "constant", "users": 2, "hold": 0.5},
            },
            sink=None,
        )
        assert totals.errors == 0 and totals.labels["N: 2k"].protocols == {"h2": totals.requests}
        assert totals.bytes_in == 2048 * totals.requests
    finally:
        nginx.stop()
        shutil.rmtree(directory, ignore_errors=True)


def test_the_allowlist_refuses_an_h2_connection_before_it_is_opened(demo):
    async def go():
        client = H2Client("10.0.0.0/8", protocol="h2c")
        try:
            await client.request("GET", f"{demo.http_url}/page", {}, b"", 5)
        finally:
            await client.close()

    with pytest.raises(TargetNotAllowed):
        _run(go())
    assert demo.app.counters.snapshot()["requests"] == 0


# -- a server that misbehaves ----------------------------------------------------------------------


def _client_requests(url: str, paths: list[str], *, concurrent: bool = False, body: bytes = b"", timeout=5.0):
    async def go():
        client = H2Client(protocol="h2c")
        try:

            async def one(path):
                try:
                    upload = path.startswith("/upload")
                    return await client.request(
                        "POST" if upload else "GET", url + path, {}, body if upload else b"", timeout
                    )
                except Exception as exc:
                    return exc

            if concurrent:
                return await asyncio.gather(*(one(p) for p in paths))
            return [await one(p) for p in paths]
        finally:
            await client.close()

    return _run(go())


def test_rst_stream_fails_only_its_request_and_the_connection_goes_on():
    server = RawH2Server()
    try:
        reset, after = _client_requests(server.url, ["/reset", "/fine"])
        assert isinstance(reset, StreamReset) and reset.error_code == 2
        assert errors.classify(reset) == (errors.STREAM_RESET, "the server reset the stream (INTERNAL_ERROR)")
        assert after.status == 200 and after.body == b"ok /fine" and after.protocol == "h2"
        assert server.connections == 1
    finally:
        server.stop()


def test_refused_stream_and_goaway_are_sent_again_on_a_new_connection():
    server = RawH2Server()
    try:
        refused, goaway = _client_requests(server.url, ["/refuse-once", "/goaway"])
        assert refused.status == 200 and refused.body == b"second time lucky"
        assert goaway.status == 200 and goaway.body == b"ok /goaway"
        assert server.refused == 1 and server.goaways == 1
        assert server.connections == 2  # the GOAWAY retired the first connection
        assert server.paths == ["/refuse-once", "/refuse-once", "/goaway", "/goaway"]
    finally:
        server.stop()


def test_malformed_headers_are_a_protocol_error_and_the_next_request_reconnects():
    server = RawH2Server()
    try:
        bad, good = _client_requests(server.url, ["/malformed", "/after"])
        assert isinstance(bad, H2ProtocolError)
        assert errors.classify(bad)[0] == errors.PROTOCOL_ERROR
        assert good.status == 200 and good.body == b"ok /after"
        assert server.connections == 2
    finally:
        server.stop()


def test_max_concurrent_streams_is_respected():
    server = RawH2Server(max_concurrent_streams=2)
    try:
        responses = _client_requests(server.url, ["/slow"] * 8, concurrent=True)
        assert [r.body for r in responses] == [b"slow ok"] * 8
        assert server.max_open == 2
        assert server.connections == 1
    finally:
        server.stop()


def test_a_peer_that_never_reads_stalls_the_body_with_a_named_error_and_only_that_stream_is_reset():
    server = RawH2Server(never_read=True)  # its 65,535-byte windows are never opened again
    try:
        stalled, after = _client_requests(server.url, ["/upload", "/after"], body=b"u" * 100_000, timeout=0.3)
        assert isinstance(stalled, FlowControlStalled)
        assert errors.classify(stalled)[0] == errors.FLOW_CONTROL_STALLED
        assert after.status == 200  # same connection: the stalled stream was reset (CANCEL), nothing else
        assert server.connections == 1 and server.resets_received == 1
    finally:
        server.stop()


def _header_lists():
    """Request/response-like header lists with repeats, new values and fields too big for the table."""
    base = [(b":status", b"200"), (b"server", b"nginx"), (b"content-type", b"text/html")]
    lists = []
    for i in range(60):
        extra = [(b"date", f"second {i // 7}".encode()), (b"etag", b'"abc"')]
        if i % 11 == 5:
            extra.append((b"x-big", b"v" * 3000))  # evicts most of a 4,096-byte table
        if i % 13 == 3:
            extra.append(hpack.NeverIndexedHeaderTuple(b"set-cookie", b"s=1"))
        lists.append(base + extra)
    return lists


def test_cached_hpack_blocks_decode_and_encode_exactly_as_hpack_does():
    from workers.engine.h2 import _CachingDecoder, _CachingEncoder

    peer, plain, cached = hpack.Encoder(), hpack.Decoder(), _CachingDecoder()
    ours, reference = _CachingEncoder(), hpack.Encoder()
    for i, headers in enumerate(_header_lists()):
        if i == 30:  # a table size update in the middle of the run
            peer.header_table_size = 2048
            ours.header_table_size = reference.header_table_size = 2048
        block = peer.encode(headers)
        assert cached.decode(block, raw=True) == plain.decode(block, raw=True)
        assert list(cached.header_table.dynamic_entries) == list(plain.header_table.dynamic_entries)
        assert cached.header_table._current_size == plain.header_table._current_size
        assert ours.encode(headers[1:]) == reference.encode(headers[1:])  # the same bytes on the wire
        assert list(ours.header_table.dynamic_entries) == list(reference.header_table.dynamic_entries)
    assert cached._blocks and ours._blocks  # and the caches were really used


def test_a_header_list_that_passed_before_does_not_let_an_invalid_one_through():
    import h2.exceptions
    import h2.utilities

    from workers.engine.h2 import _validate_headers_cached

    flags = h2.utilities.HeaderValidationFlags(True, False, True, False)
    good = [(b":status", b"200"), (b"server", b"nginx")]
    for _ in range(2):
        assert list(_validate_headers_cached(good, flags)) == good
        with pytest.raises(h2.exceptions.ProtocolError):
            _validate_headers_cached([(b":status", b"200"), (b"Server", b"nginx")], flags)
        with pytest.raises(h2.exceptions.ProtocolError):  # a trailer may not carry pseudo-fields
            _validate_headers_cached(good, h2.utilities.HeaderValidationFlags(True, True, True, False))
