import asyncio
import ipaddress
import socket

import pytest

from workers.engine import errors
from workers.engine.http import AiohttpClient
from workers.engine.targets import (
    DEFAULT_ALLOWLIST,
    Denylist,
    TargetGuard,
    TargetNotAllowed,
    check_url,
    parse_allowlist,
)


def fake_dns(monkeypatch, answers):
    """Make getaddrinfo answer ``answers[host]`` (a list of IPs) and refuse any other name."""
    real = socket.getaddrinfo

    def getaddrinfo(host, port, *args, **kwargs):
        if host in answers:
            out = []
            for ip in answers[host]:
                family = socket.AF_INET6 if ":" in ip else socket.AF_INET
                sockaddr = (ip, port or 0, 0, 0) if family == socket.AF_INET6 else (ip, port or 0)
                out.append((family, socket.SOCK_STREAM, 6, "", sockaddr))
            return out
        if host in ("localhost",) or host.replace(".", "").isdigit():
            return real(host, port, *args, **kwargs)
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)


def test_parse_allowlist_reads_networks_and_host_names():
    allow = parse_allowlist("127.0.0.0/8, ::1, localhost,,demo.internal.")

    assert list(allow) == [
        ipaddress.ip_network("127.0.0.0/8"),
        ipaddress.ip_network("::1/128"),
        "localhost",
        "demo.internal",
    ]
    assert str(parse_allowlist(DEFAULT_ALLOWLIST)) == "127.0.0.0/8, ::1/128, localhost"


@pytest.mark.parametrize("entry", ["10.0.0.300", "http://example.com", "foo bar", "10.0.0.0/33", "-bad-.com"])
def test_a_bad_entry_is_named(entry):
    with pytest.raises(ValueError, match=f"allowed targets: {entry!r} is neither"):
        parse_allowlist(f"127.0.0.0/8,{entry}")


@pytest.mark.parametrize(
    "url", ["http://127.0.0.1:8001/", "http://127.9.9.9/x", "http://[::1]:8001/", "http://localhost:8001"]
)
def test_loopback_is_allowed_by_default(url):
    check_url(url)


def test_a_private_address_is_refused_with_a_clear_message():
    with pytest.raises(TargetNotAllowed) as excinfo:
        check_url("http://10.0.0.5:80/", DEFAULT_ALLOWLIST)

    assert str(excinfo.value) == (
        "http://10.0.0.5:80 resolves to 10.0.0.5, which is not in the allowed targets (127.0.0.0/8, ::1/128, localhost)"
    )


def test_the_default_port_is_named_in_the_message():
    with pytest.raises(TargetNotAllowed, match=r"^https://10\.0\.0\.5:443 resolves to 10\.0\.0\.5"):
        check_url("https://10.0.0.5/")


def test_a_name_resolving_outside_is_refused(monkeypatch):
    fake_dns(monkeypatch, {"evil.example": ["127.0.0.1", "10.0.0.5"]})

    with pytest.raises(TargetNotAllowed, match="http://evil.example:80 resolves to 10.0.0.5"):
        check_url("http://evil.example/")


def test_a_name_resolving_to_loopback_is_allowed(monkeypatch):
    fake_dns(monkeypatch, {"app.test": ["127.0.0.1"]})

    assert check_url("http://app.test:8001/") == ["127.0.0.1"]


def test_an_ipv4_mapped_ipv6_address_is_judged_as_ipv4(monkeypatch):
    fake_dns(monkeypatch, {"mapped.test": ["::ffff:10.0.0.5"]})

    with pytest.raises(TargetNotAllowed):
        check_url("http://mapped.test/")


def test_a_host_name_entry_allows_the_name_whatever_it_resolves_to(monkeypatch):
    fake_dns(monkeypatch, {"demo": ["172.18.0.3"]})

    assert check_url("http://demo:8001/", "127.0.0.0/8,demo") == []


def test_a_name_that_does_not_resolve_is_refused(monkeypatch):
    fake_dns(monkeypatch, {})

    with pytest.raises(TargetNotAllowed, match="could not be resolved"):
        check_url("http://nowhere.invalid/")


class RebindingResolver:
    """DNS that changes its mind after the up-front check: 127.0.0.1 then ``answer``."""

    def __init__(self, answer):
        self.answer = answer

    async def resolve(self, host, port=0, family=socket.AF_INET):
        return [{"hostname": host, "host": self.answer, "port": port, "family": socket.AF_INET, "proto": 0, "flags": 0}]

    async def close(self):
        pass


def request_through_guard(guard, url, inner_resolver=None):
    async def go():
        client = AiohttpClient(guard)
        if inner_resolver is not None:
            client._resolver._inner = inner_resolver
        try:
            return await client.request("GET", url, {}, b"", 5.0)
        finally:
            await client.close()

    return asyncio.run(go())


def test_dns_cannot_redirect_traffic_at_connect_time(other_target):
    # the name is checked when the socket is about to open, not only before the run
    guard = TargetGuard("127.0.0.1/32")

    with pytest.raises(OSError) as excinfo:  # aiohttp wraps it as a DNS error; the classifier finds it
        request_through_guard(guard, f"http://rebind.test:{other_target.port}/", RebindingResolver("127.0.0.2"))

    assert errors.classify(excinfo.value) == (
        errors.TARGET_NOT_ALLOWED,
        f"rebind.test:{other_target.port} resolves to 127.0.0.2, which is not in the allowed targets (127.0.0.1/32)",
    )
    assert other_target.served == 0


def test_a_redirect_to_a_disallowed_address_is_refused_before_connecting(target, other_target):
    guard = TargetGuard("127.0.0.1/32")
    url = f"{target.url}/redirect-out?to=http://127.0.0.2:{other_target.port}/"

    with pytest.raises(OSError) as excinfo:  # aiohttp wraps it as a connection error; the classifier finds it
        request_through_guard(guard, url)

    assert errors.classify(excinfo.value) == (
        errors.TARGET_NOT_ALLOWED,
        f"127.0.0.2:{other_target.port} resolves to 127.0.0.2, which is not in the allowed targets (127.0.0.1/32)",
    )
    assert target.hits["/redirect-out"] == 1
    assert other_target.served == 0


def test_a_host_name_entry_vouches_for_its_addresses_at_connect_time(other_target):
    guard = TargetGuard("127.0.0.1/32,demo")

    response = request_through_guard(guard, f"http://demo:{other_target.port}/", RebindingResolver("127.0.0.2"))

    assert response.status == 200
    assert other_target.served == 1


# --------------------------------------------------------------------------------------
# The site's own services (issue 30): refused whatever the allowlist says
# --------------------------------------------------------------------------------------

OWN = "one of this site's own services"


def denying(port, spec="127.0.0.0/8,::1/128,localhost"):
    """An allowlist of all loopback that denies the service at 127.0.0.1:``port``, as the portal builds one."""
    return parse_allowlist(spec, denied=Denylist([("127.0.0.1", port)], local=[]))


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.2", "localhost", "0.0.0.0", "[::1]", "[::ffff:127.0.0.1]"])
def test_a_service_of_the_site_is_refused_on_every_local_address(host):
    # given: loopback allowed, and a site's service on 127.0.0.1:6379 (Redis: 127.0.0.2 or 0.0.0.0 reach it too)
    allow = denying(6379)

    # then: every way of writing a local address is refused, the allowlist notwithstanding
    with pytest.raises(TargetNotAllowed, match=OWN):
        check_url(f"http://{host}:6379/", allow)
    # and another port of the same host is not refused as the site's (0.0.0.0 is outside the allowlist itself)
    if host == "0.0.0.0":
        with pytest.raises(TargetNotAllowed, match="not in the allowed targets"):
            check_url(f"http://{host}:6380/", allow)
    else:
        check_url(f"http://{host}:6380/", allow)


def test_a_service_named_by_host_name_is_refused_by_name_and_by_address(monkeypatch):
    # given: the broker is "redis" (a docker service) at 10.0.0.7, and the operator allowed that name and network
    fake_dns(monkeypatch, {"redis": ["10.0.0.7"], "cache-alias": ["10.0.0.7"]})
    allow = parse_allowlist("10.0.0.0/8,redis,cache-alias", denied=Denylist([("redis", 6379)], local=[]))

    # then: the name, its address and another name for the same address are refused on that port
    for url in ("http://redis:6379/", "http://10.0.0.7:6379/", "http://cache-alias:6379/"):
        with pytest.raises(TargetNotAllowed, match=OWN):
            check_url(url, allow)
    assert check_url("http://10.0.0.7:8080/", allow) == ["10.0.0.7"]


def test_a_redirect_to_a_service_of_the_site_is_refused_before_connecting(target, other_target):
    # given: an allowlist of all loopback that denies a service on 127.0.0.1 at other_target's port
    guard = TargetGuard(denying(other_target.port))
    url = f"{target.url}/redirect-out?to=http://127.0.0.2:{other_target.port}/"

    # when: the target redirects the load there (a local address: the port is denied on all of them)
    with pytest.raises(OSError) as excinfo:
        request_through_guard(guard, url)

    # then: refused at connect time, and nothing reached the service
    kind, message = errors.classify(excinfo.value)
    assert kind == errors.TARGET_NOT_ALLOWED and OWN in message
    assert target.hits["/redirect-out"] == 1
    assert other_target.served == 0


def test_the_engine_refuses_a_run_aimed_at_a_service_of_the_site(other_target):
    # given: a plan whose base URL is the service (allowed by the allowlist, denied as the site's own)
    from workers.engine.runner import run_sync

    plan = {
        "base_url": f"http://127.0.0.2:{other_target.port}",
        "profile": {"users": 1, "hold": 1},
        "test_cases": [{"name": "A", "steps": [{"name": "Home", "path": "/", "think_time": 0.01}]}],
    }

    # then: refused before anything is sent
    with pytest.raises(TargetNotAllowed, match=OWN):
        run_sync(plan, sink=lambda second, stats: None, allowlist=denying(other_target.port))
    assert other_target.served == 0


@pytest.mark.parametrize(
    ("url", "origin"),
    [("ws://127.0.0.1/chat", "ws://127.0.0.1:80"), ("wss://127.0.0.1/chat", "wss://127.0.0.1:443")],
)
def test_ws_and_wss_urls_are_checked_like_http_with_their_default_ports(url, origin):
    from workers.engine.targets import parse_target_url

    assert check_url(url, "127.0.0.0/8") == ["127.0.0.1"]
    assert parse_target_url(url, websocket=True).origin == origin
    with pytest.raises(TargetNotAllowed, match=f"{origin} resolves to 127.0.0.1, which is not in the allowed"):
        check_url(url, "10.0.0.0/8")


def test_other_callers_of_the_strict_parser_still_take_http_only():
    from workers.engine.targets import BadTargetURL, parse_target_url

    with pytest.raises(BadTargetURL, match="is not an http:// or https:// URL with a host"):
        parse_target_url("ws://127.0.0.1/chat")  # outbound hooks and scrapes never speak WebSocket
