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


def test_frames_h2_never_makes_are_read_continuation_padding_priority_split_reads_trailers():
    server = RawH2Server()
    try:
        cont, padded, split, after = _client_requests(server.url, ["/continuation", "/padded", "/split", "/after"])
        assert cont.status == 200 and cont.body == b"continued"
        assert [cont.headers[f"x-part-{i}"] for i in range(5)] == ["v" * 100] * 5
        assert padded.status == 200 and padded.headers["x-padded"] == "yes" and padded.body == b"padded!"
        assert split.status == 200 and split.body == b"A" * 1000 + b"B" * 1000 + b"C" * 1000  # trailers end it
        assert after.body == b"ok /after" and server.connections == 1  # nothing broke the connection
    finally:
        server.stop()


def test_flow_control_windows_both_ways_beyond_the_initial_ones():
    # The server's windows are 65,535 bytes: a 300 kB body goes as its WINDOW_UPDATEs allow (h2, on the
    # server's side, ends the connection on a single byte beyond them). Downloads of 3 MiB pass our 1 MiB
    # stream window and half our 16 MiB connection window only if we give the credit back as we read.
    server = RawH2Server()
    try:
        body = b"u" * 300_000
        responses = _client_requests(
            server.url, ["/upload-count", *["/big/3145728"] * 4], concurrent=True, body=body, timeout=10
        )
        assert responses[0].status == 200 and responses[0].body == b"300000"
        assert [len(r.body) for r in responses[1:]] == [3 << 20] * 4
        assert server.connections == 1
    finally:
        server.stop()


def test_goaway_and_rst_stream_mid_load_fail_or_resend_only_the_streams_they_name():
    server = RawH2Server()
    try:
        paths = ["/slow", "/slow", "/reset", "/slow", "/goaway-mid", "/slow", "/slow"]
        rs = _client_requests(server.url, paths, concurrent=True)
        assert isinstance(rs[2], StreamReset)
        assert [r.body for i, r in enumerate(rs) if i != 2] == [b"slow ok"] * 3 + [b"ok /goaway-mid"] + [b"slow ok"] * 2
        assert server.goaways == 1 and server.connections == 2
        # the streams from /goaway-mid on (not processed, as the GOAWAY said) went once more, on a new
        # connection; none before it (the reset one neither: it was processed)
        assert sorted(path for conn, path in server.log if conn == 2) == ["/goaway-mid", "/slow", "/slow"]
    finally:
        server.stop()


@pytest.mark.parametrize("path", ["/uppercase", "/bad-length", "/malformed"])
def test_a_malformed_response_is_a_protocol_error_named_and_the_user_goes_on(path):
    server = RawH2Server()
    try:
        bad, good = _client_requests(server.url, [path, "/after"])
        assert isinstance(bad, H2ProtocolError) and errors.classify(bad)[0] == errors.PROTOCOL_ERROR
        assert good.status == 200 and good.body == b"ok /after"
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


def test_cached_hpack_blocks_decode_exactly_as_hpack_does():
    from workers.engine.h2wire import CachingDecoder, check_response

    peer, plain, cached = hpack.Encoder(), hpack.Decoder(), CachingDecoder(1 << 16)
    for i, headers in enumerate(_header_lists()):
        if i == 30:  # a table size update in the middle of the run
            peer.header_table_size = 2048
        block = peer.encode(headers)
        expected = plain.decode(block, raw=True)
        assert cached.decode_cached(block, check_response) == check_response(expected)
        assert list(cached.header_table.dynamic_entries) == list(plain.header_table.dynamic_entries)
        assert cached.header_table._current_size == plain.header_table._current_size
    assert cached._blocks  # and the cache was really used


def test_request_blocks_use_no_dynamic_table_and_decode_to_the_fields():
    from workers.engine.h2wire import TABLE_SIZE_ZERO, encode_block, per_request_fields

    fields = [
        (b":method", b"GET"),
        (b":scheme", b"https"),
        (b":authority", b"shop.example:8443"),
        (b":path", b"/"),
        (b"accept-encoding", b"gzip, deflate"),  # whole in the static table
        (b"user-agent", b"plimsoll"),  # name in the static table
        (b"x-custom", b"\xe9t\xe9"),  # neither
        (b"authorization", b"Bearer s3cret"),
    ]
    tp = b"00-" + b"ab" * 16 + b"-" + b"cd" * 8 + b"-01"
    block = TABLE_SIZE_ZERO + encode_block(fields) + per_request_fields(tp, b"a=1; b=2", 300_000)
    decoder = hpack.Decoder()
    decoded = decoder.decode(block, raw=True)
    assert decoded == [*fields, (b"traceparent", tp), (b"cookie", b"a=1; b=2"), (b"content-length", b"300000")]
    assert decoder.header_table_size == 0 and not decoder.header_table.dynamic_entries
    sensitive = {bytes(h[0]) for h in decoded if isinstance(h, hpack.NeverIndexedHeaderTuple)}
    assert sensitive == {b"authorization", b"cookie"}


def test_response_header_checks_refuse_what_rfc_9113_forbids():
    from workers.engine.h2wire import MalformedHeaders, check_response, check_trailers

    good = [(b":status", b"200"), (b"server", b"nginx"), (b"set-cookie", b"a=1"), (b"set-cookie", b"b=2")]
    assert check_response(good) == (200, (("server", "nginx"), ("set-cookie", "a=1"), ("set-cookie", "b=2")), None, -1)
    assert check_response(good[:2])[2:] == ({"server": "nginx"}, -1)
    assert check_response([(b":status", b"204"), (b"content-length", b"12")])[3] == 12
    for bad in (
        [(b"server", b"nginx")],  # no :status
        [(b":status", b"200"), (b"Server", b"nginx")],
        [(b":status", b"200"), (b"connection", b"close")],
        [(b":status", b"200"), (b"x", b"a\r\nb")],
        [(b":status", b"200"), (b":path", b"/")],
        [(b"server", b"nginx"), (b":status", b"200")],  # pseudo-field after a regular one
        [(b":status", b"20x")],
    ):
        with pytest.raises(MalformedHeaders):
            check_response(bad)
    with pytest.raises(MalformedHeaders):  # a trailer may not carry pseudo-fields
        check_trailers(good)
    # Each byte a name or a value may not hold, wherever it is (the checks delete them and compare lengths).
    for c in b": \r\n\x00":
        for name in (bytes((c,)) + b"x", b"x" + bytes((c,)), b"x" + bytes((c,)) + b"y"):
            with pytest.raises(MalformedHeaders, match="bad field name|pseudo-header field"):
                check_trailers([(name, b"v")])
    for c in b"\r\n\x00":
        for value in (bytes((c,)), b"a" + bytes((c,)), bytes((c,)) + b"a", b"a" + bytes((c,)) + b"b"):
            with pytest.raises(MalformedHeaders, match="bad value"):
                check_trailers([(b"x", value)])
    for value in (b" a", b"a\t", b"\t"):
        with pytest.raises(MalformedHeaders, match="bad value"):
            check_trailers([(b"x", value)])
    assert check_trailers([(b"x-a", b"a b:c\td"), (b"x", b"")]) == (0, (), None, -1)
