"""Target safety: a load test only goes to allowed hosts and networks.

A run is a flood of requests, so pointing one at somebody else's server is an
attack. An *allowlist* (a setting; default loopback only) names the networks and
host names a run may reach, and it is enforced twice:

1. **Before the run** (``check_url``): the portal, the Celery task and the CLI
   refuse a plan whose base URL is not allowed, with a message a person can act
   on, before any request is sent.
2. **At connect time** (``TargetGuard``): every connection the engine opens goes
   through an aiohttp resolver that refuses disallowed addresses, and through a
   socket factory that checks the address the socket is about to connect to.
   The resolver covers host names (so DNS cannot answer 127.0.0.1 for the
   check and 10.0.0.5 a second later); the socket factory covers IP literals,
   which aiohttp never passes to a resolver - for instance a redirect to
   ``http://10.0.0.5/``. This is the shape of healthchecks' ``hc/lib/curl.py``:
   refuse when the socket opens, after DNS.

**Denied endpoints** (``Denylist``, carried by an ``Allowlist`` as ``denied``) are
host:ports that nothing may reach *whatever the allowlist says*: the site's own
database, broker, cache, mail server and web port. The portal builds them from its
settings and hands them to the engine inside the allowlist it passes (the engine
reads no settings); every check above refuses them first. A denied service on this
machine (a loopback, unspecified or local address) denies its port on every local
address, since ``127.0.0.2`` or ``0.0.0.0`` reach a server listening on all of them.

Host name entries (e.g. ``demo`` for a docker-compose service) allow that name
**whatever it resolves to**: the person who wrote the setting vouched for the
name, typically a service on a private network that no IP range would describe
well. Every other name must resolve only to addresses inside an allowed network
(one address outside is enough to refuse). At connect time, the addresses a
guarded resolver obtained for an allowed name are remembered by the guard, so
the socket factory accepts them too.
"""

from __future__ import annotations

import functools
import ipaddress
import re
import socket
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlsplit

if TYPE_CHECKING:
    from aiohttp.abc import AbstractResolver, ResolveResult

DEFAULT_ALLOWLIST = "127.0.0.0/8,::1/128,localhost"
ENV_VAR = "PLIMSOLL_ALLOWED_TARGETS"

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

_LABEL = re.compile(r"^(?!-)[a-z0-9-]{1,63}(?<!-)$")


class TargetNotAllowed(PermissionError):
    """The target is not in the allowed targets.

    A PermissionError (hence an OSError) on purpose: raised inside aiohttp's
    resolver or socket factory, it then travels aiohttp's connection-error paths
    like any refused connection instead of escaping them as a foreign exception.
    """


class BadTargetURL(ValueError):
    """A URL that the strict parser refuses; the message says what is wrong, for a person."""


@dataclass(frozen=True)
class TargetURL:
    """A URL as the strict parser read it: what is checked is exactly what is connected to.

    ``host`` is lower-case, without brackets (an IPv6 literal stays a literal);
    ``port`` is the effective port; ``target`` is the request target (path and
    query, non-ASCII characters percent-encoded; the fragment is dropped).
    """

    scheme: str
    host: str
    port: int
    target: str
    explicit_port: bool

    @property
    def host_for_url(self) -> str:
        return f"[{self.host}]" if ":" in self.host else self.host

    @property
    def origin(self) -> str:
        """``scheme://host:port`` with the port always written: how refusals name a target."""
        return f"{self.scheme}://{self.host_for_url}:{self.port}"

    @property
    def host_header(self) -> str:
        """The Host header (and what a browser would send): the port only when it is not the scheme's default."""
        default = 443 if self.scheme in ("https", "wss") else 80
        return self.host_for_url if self.port == default else f"{self.host_for_url}:{self.port}"

    @property
    def url(self) -> str:
        return f"{self.scheme}://{self.host_header}{self.target}"


# Control characters, spaces and backslashes: http.client, urllib and browsers each read them
# differently (``%09@`` hid a second host from the check), so a URL carrying one is refused.
_UNSAFE = re.compile(r"[\x00-\x20\x7f-\x9f\\]")
_NETLOC = re.compile(r"^(?:\[(?P<v6>[^\]]*)\]|(?P<host>[^:\[\]]*))(?::(?P<port>[0-9]*))?$")
_HOST_LABEL = re.compile(r"^(?!-)[a-z0-9_-]{1,63}(?<!-)$")
# Printable ASCII stays as written in a request target; only other characters are percent-encoded.
_TARGET_SAFE = "".join(chr(c) for c in range(0x21, 0x7F))


WS_SCHEMES = ("ws", "wss")  # WebSocket URLs: checked like http:// and https:// (same default ports)


def parse_target_url(url: str, *, websocket: bool = False) -> TargetURL:
    """The one strict URL parser for targets: run base URLs, hooks and every outbound request.

    Accepts http and https URLs with a host name, a dotted-decimal IPv4 address or a
    bracketed IPv6 address, and an optional port. Refuses (BadTargetURL) control
    characters and spaces anywhere, credentials (``user@``), percent-encoding in
    the host, malformed brackets, IPv4 in other notations (``127.1``, ``0x7f.0.0.1``)
    and ports outside 1-65535 - every form that two URL parsers read differently.
    ``websocket``: ws:// and wss:// URLs are accepted too (a WebSocket step's target).
    """
    if not isinstance(url, str) or not url:
        raise BadTargetURL("The URL is empty.")
    shown = ascii(url)[1:-1] if len(url) <= 200 else ascii(url[:200])[1:-1] + "…"
    match = _UNSAFE.search(url)
    if match:
        what = "a backslash" if match.group() == "\\" else f"the character {match.group()!r}"
        raise BadTargetURL(f"{shown} contains {what}; write the URL without spaces or control characters.")
    try:
        parts = urlsplit(url)
    except ValueError as exc:
        raise BadTargetURL(f"{shown} is not a valid URL ({exc}).") from None
    scheme = parts.scheme.lower()
    schemes = ("http", "https", *WS_SCHEMES) if websocket else ("http", "https")
    if scheme not in schemes or not parts.netloc:
        kinds = "an http://, https://, ws:// or wss://" if websocket else "an http:// or https://"
        raise BadTargetURL(f"{shown} is not {kinds} URL with a host.")
    netloc = parts.netloc
    if "@" in netloc:
        raise BadTargetURL(f"{shown} contains credentials (user@host); leave them out of the URL.")
    if "%" in netloc:
        raise BadTargetURL(f"{shown} has a percent-encoded character in its host; write the host as is.")
    m = _NETLOC.match(netloc)
    if not m:
        raise BadTargetURL(f"{shown} has a malformed host: an IPv6 address goes in brackets, as in http://[::1]:8001.")
    host = _strict_host(m.group("v6"), m.group("host"), shown)
    port_text = m.group("port")
    if port_text is None:
        port, explicit = (443 if scheme in ("https", "wss") else 80), False
    else:
        if not port_text or len(port_text) > 5 or not 1 <= int(port_text) <= 65535:
            raise BadTargetURL(f"{shown} has a bad port: give a number from 1 to 65535 after the colon.")
        port, explicit = int(port_text), True
    target = quote(parts.path or "/", safe=_TARGET_SAFE)
    if parts.query:
        target += "?" + quote(parts.query, safe=_TARGET_SAFE)
    return TargetURL(scheme=scheme, host=host, port=port, target=target, explicit_port=explicit)


def _strict_host(v6: str | None, host: str | None, shown: str) -> str:
    if v6 is not None:
        try:
            return str(ipaddress.IPv6Address(v6))
        except ValueError:
            raise BadTargetURL(
                f"{shown} has {v6!r} in brackets, which is not an IPv6 address; "
                "only IPv6 addresses go in brackets (http://[::1]:8001, http://127.0.0.1:8001)."
            ) from None
    host = (host or "").lower()
    if host.endswith("."):
        host = host[:-1]
    if not host:
        raise BadTargetURL(f"{shown} has no host.")
    if not host.isascii():
        try:
            host = host.encode("idna").decode("ascii")
        except UnicodeError:
            raise BadTargetURL(f"{shown} has a host name that is not a valid international domain name.") from None
    labels = host.split(".")
    if all(label.isdigit() for label in labels) or labels[-1].isdigit() or host.startswith("0x"):
        try:
            return str(ipaddress.IPv4Address(host))
        except ValueError:
            raise BadTargetURL(
                f"{shown} has {host!r} as its host, which is not a dotted-decimal IPv4 address "
                "(write four numbers from 0 to 255, as in 127.0.0.1)."
            ) from None
    if len(host) > 253 or not all(_HOST_LABEL.match(label) for label in labels):
        raise BadTargetURL(f"{shown} has {host!r} as its host, which is not a valid host name.")
    return host


# Where a service listening on "this machine" can be reached: every loopback and unspecified address.
_LOCAL_NETWORKS: tuple[IPNetwork, ...] = (
    ipaddress.ip_network("127.0.0.0/8"),
    ipaddress.ip_network("0.0.0.0/8"),  # connect() to 0.0.0.0 reaches the local host on Linux
    ipaddress.ip_network("::1/128"),
    ipaddress.ip_network("::/128"),
)


def local_addresses() -> set[str]:
    """This machine's own addresses (besides loopback): its host name's, and on Linux every interface's."""
    found: set[str] = set()
    try:
        found.update(getaddrinfo_addresses(socket.gethostname(), 0))
    except OSError:
        pass
    try:  # IPv4: the kernel's local routes ("/32 host LOCAL" follows each local address)
        with open("/proc/net/fib_trie", encoding="ascii") as f:
            lines = f.read().splitlines()
        for previous, line in zip(lines, lines[1:], strict=False):
            if "/32 host LOCAL" in line and "|--" in previous:
                found.add(previous.split("|--", 1)[1].strip())
    except OSError:
        pass
    try:  # IPv6: one line per address, 32 hex digits first
        with open("/proc/net/if_inet6", encoding="ascii") as f:
            for line in f:
                digits = line.split()[0]
                found.add(str(ipaddress.IPv6Address(int(digits, 16))))
    except (OSError, ValueError, IndexError):
        pass
    return {str(ip) for ip in (_ip(a) for a in found) if ip is not None}


class Denylist:
    """Host:ports no request may reach whatever the allowlist says: the site's own services.

    Built from ``(host, port)`` pairs. Names are resolved once, here (the checks then compare
    the addresses a target resolves to); a name is also refused as written, in case it cannot
    be resolved later. An address on this machine (loopback, unspecified or one of
    ``local``) denies its port on every local address.
    """

    __slots__ = ("_names", "_addresses", "_local_ports", "_local", "_entries")

    def __init__(
        self,
        entries: Iterable[tuple[str, int]] = (),
        *,
        resolve: Resolve | None = None,
        local: Iterable[str] | None = None,
    ) -> None:
        self._entries = tuple(dict.fromkeys((_normalise_host(h), int(p)) for h, p in entries if h and p))
        self._names = frozenset(self._entries)
        if local is None:
            local = local_addresses() if self._entries else ()
        self._local = frozenset(local)
        addresses: set[tuple[str, int]] = set()
        local_ports: set[int] = set()
        for host, port in self._entries:
            literal = _ip(host)
            if literal is not None:
                found = [str(literal)]
            else:
                try:
                    found = (resolve or getaddrinfo_addresses)(host, port)
                except (OSError, UnicodeError):
                    found = []  # refused by name below; an unresolvable service cannot be reached by address either
            for address in found:
                ip = _ip(address)
                if ip is None:
                    continue
                if self._is_local(ip):
                    local_ports.add(port)
                else:
                    addresses.add((str(ip), port))
        self._addresses = frozenset(addresses)
        self._local_ports = frozenset(local_ports)

    def _is_local(self, ip: IPAddress) -> bool:
        return any(ip.version == net.version and ip in net for net in _LOCAL_NETWORKS) or str(ip) in self._local

    def __bool__(self) -> bool:
        return bool(self._entries)

    def __iter__(self) -> Iterator[tuple[str, int]]:
        return iter(self._entries)

    def __str__(self) -> str:
        return ", ".join(f"[{h}]:{p}" if ":" in h else f"{h}:{p}" for h, p in self._entries) or "nothing"

    def __repr__(self) -> str:
        return f"Denylist({str(self)!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Denylist) and self._names == other._names

    __hash__ = None  # type: ignore[assignment]

    def __or__(self, other: Denylist) -> Denylist:
        merged = Denylist.__new__(Denylist)
        merged._entries = tuple(dict.fromkeys(self._entries + other._entries))
        merged._names = self._names | other._names
        merged._local = self._local | other._local
        merged._addresses = self._addresses | other._addresses
        merged._local_ports = self._local_ports | other._local_ports
        return merged

    def denies_name(self, host: str, port: int) -> bool:
        return (_normalise_host(host), port) in self._names

    def denies(self, address: str | IPAddress, port: int) -> bool:
        ip = _ip(address)
        if ip is None:
            return False
        return (str(ip), port) in self._addresses or (port in self._local_ports and self._is_local(ip))


NO_DENIED = Denylist()


class Allowlist:
    """Parsed allowed targets: IP networks and host names, in the order written; ``denied`` wins over them."""

    __slots__ = ("networks", "hostnames", "denied", "_entries")

    def __init__(self, entries: Iterable[IPNetwork | str], denied: Denylist | None = None) -> None:
        self._entries = tuple(entries)
        self.networks = tuple(e for e in self._entries if not isinstance(e, str))
        self.hostnames = frozenset(e for e in self._entries if isinstance(e, str))
        self.denied = denied if denied is not None else NO_DENIED

    def __iter__(self) -> Iterator[IPNetwork | str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def __str__(self) -> str:
        return ", ".join(str(e) for e in self._entries) or "nothing"

    def __repr__(self) -> str:
        return f"Allowlist({str(self)!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Allowlist) and self._entries == other._entries and self.denied == other.denied

    __hash__ = None  # type: ignore[assignment]

    def with_denied(self, denied: Denylist) -> Allowlist:
        """The same allowed targets, with ``denied`` refused too (on top of what was denied already)."""
        return Allowlist(self._entries, self.denied | denied if self.denied else denied)

    def allows_hostname(self, host: str) -> bool:
        return _normalise_host(host) in self.hostnames

    def allows_address(self, address: str | IPAddress) -> bool:
        ip = _ip(address)
        if ip is None:
            return False
        return any(ip.version == net.version and ip in net for net in self.networks)

    def refuse_denied(self, origin: str, host: str, port: int, addresses: Iterable[str] = ()) -> None:
        """TargetNotAllowed when ``host:port`` or one of its addresses is a denied service."""
        if not self.denied:
            return
        if self.denied.denies_name(host, port):
            raise TargetNotAllowed(_denied(origin, f"{host}:{port}"))
        for address in addresses:
            if self.denied.denies(address, port):
                raise TargetNotAllowed(_denied(origin, f"{address}:{port}"))


def parse_allowlist(spec: str | Iterable[str] | Allowlist, denied: Denylist | None = None) -> Allowlist:
    """Parse ``"127.0.0.0/8,::1,localhost"`` (or a list of entries).

    An IP address is a one-address network (``::1`` becomes ``::1/128``); host
    bits are tolerated (``10.1.2.3/8`` means ``10.0.0.0/8``). A bad entry raises
    ValueError naming it. An empty spec allows nothing. ``denied`` (the site's own
    services) is refused whatever the entries allow.
    """
    if isinstance(spec, Allowlist):
        return spec if denied is None else spec.with_denied(denied)
    items = spec.split(",") if isinstance(spec, str) else list(spec)
    entries: list[IPNetwork | str] = []
    for raw in items:
        entry = raw.strip()
        if not entry:
            continue
        try:
            entries.append(ipaddress.ip_network(entry, strict=False))
            continue
        except ValueError:
            pass
        host = _normalise_host(entry)
        labels = host.split(".")
        if "/" in entry or len(host) > 253 or not all(_LABEL.match(label) for label in labels) or labels[-1].isdigit():
            raise ValueError(f"allowed targets: {entry!r} is neither an IP network (10.0.0.0/8, ::1) nor a host name")
        entries.append(host)
    return Allowlist(entries, denied)


def check_url(url: str, allowlist: str | Allowlist = DEFAULT_ALLOWLIST) -> list[str]:
    """Refuse ``url`` unless its host is allowed; returns the addresses checked.

    Resolves the host (blocking getaddrinfo; call it from a thread in async code)
    and raises TargetNotAllowed unless every address is inside an allowed
    network, or the host name itself is an allowed entry (then nothing is
    resolved and ``[]`` is returned). A name that does not resolve is refused
    too: it cannot be checked. A URL the strict parser refuses is refused too.
    ws:// and wss:// URLs are checked like http:// and https:// ones (a WebSocket
    session connects the same way).
    """
    allow = parse_allowlist(allowlist)
    try:
        parsed = parse_target_url(url, websocket=True)
    except BadTargetURL as exc:
        raise TargetNotAllowed(str(exc)) from None
    if allow.allows_hostname(parsed.host):
        allow.refuse_denied(parsed.origin, parsed.host, parsed.port)
        if not allow.denied:
            return []
        try:  # an allowed name is not resolved to be allowed, only to be compared with the denied services
            addresses = getaddrinfo_addresses(parsed.host, parsed.port)
        except (OSError, UnicodeError):
            return []  # the connect-time guard compares the addresses it does get
        allow.refuse_denied(parsed.origin, parsed.host, parsed.port, addresses)
        return []
    return checked_addresses(parsed, allow)


Resolve = Callable[[str, int], list[str]]


def getaddrinfo_addresses(host: str, port: int) -> list[str]:
    """The system resolver's addresses for ``host``, in its order, without repeats."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(info[4][0] for info in infos))


def checked_addresses(parsed: TargetURL, allow: Allowlist, resolve: Resolve | None = None) -> list[str]:
    """Resolves ``parsed.host`` once and returns its addresses, each one allowed; else TargetNotAllowed.

    An allowed host name's addresses are returned whatever they are (the setting vouched
    for the name). A caller that connects must connect to one of these addresses, never
    resolve the name again: a second answer is a second, unchecked, target.
    """
    allow.refuse_denied(parsed.origin, parsed.host, parsed.port)
    literal = _ip(parsed.host)
    if literal is not None:
        addresses = [str(literal)]
    else:
        try:
            addresses = (resolve or getaddrinfo_addresses)(parsed.host, parsed.port)
        except (OSError, UnicodeError) as exc:
            raise TargetNotAllowed(f"{parsed.origin} could not be resolved ({exc}), so it cannot be checked") from None
        if not addresses:
            raise TargetNotAllowed(f"{parsed.origin} resolves to no address, so it cannot be checked")
    allow.refuse_denied(parsed.origin, parsed.host, parsed.port, addresses)
    if allow.allows_hostname(parsed.host):
        return addresses
    for address in addresses:
        if not allow.allows_address(address):
            raise TargetNotAllowed(_refusal(parsed.origin, address, allow))
    return addresses


class TargetGuard:
    """Connect-time enforcement of an allowlist for one HTTP client (see the module docstring).

    Give ``resolver()`` and ``socket_factory`` to an aiohttp TCPConnector.
    """

    def __init__(self, allowlist: str | Allowlist = DEFAULT_ALLOWLIST) -> None:
        self.allowlist = parse_allowlist(allowlist)
        # Addresses that a guarded resolver returned for an allowed host name.
        self._vouched: set[str] = set()
        # (address, port) pairs socket_factory let through: the allowlist and the denylist never change and
        # _vouched only grows, so a pair allowed once is allowed again (parsing the address costs ~10 µs).
        self._passed: set[tuple[str, int]] = set()

    def resolver(self, inner: AbstractResolver | None = None) -> AbstractResolver:
        """An ``AllowlistResolver`` (aiohttp is imported when first needed: the engine's own clients do without)."""
        return allowlist_resolver_class()(self, inner)

    def check_resolved(self, host: str, results: list[ResolveResult]) -> None:
        for r in results:
            self.allowlist.refuse_denied(f"{host}:{r['port']}", host, r["port"], [r["host"]])
        if self.allowlist.allows_hostname(host):
            self._vouched.update(str(_ip(r["host"]) or r["host"]) for r in results)
            return
        for r in results:
            if not self.allowlist.allows_address(r["host"]):
                raise TargetNotAllowed(_refusal(f"{host}:{r['port']}", r["host"], self.allowlist))

    def socket_factory(self, addr_info: tuple[Any, ...]) -> socket.socket:
        """aiohttp/aiohappyeyeballs socket factory: the last check before ``connect()``."""
        family, type_, proto, _, sockaddr = addr_info
        address = sockaddr[0]
        key = (address, sockaddr[1])
        if key not in self._passed:
            self.allowlist.refuse_denied(f"{address}:{sockaddr[1]}", address, sockaddr[1], [address])
            ip = _ip(address)
            if not (self.allowlist.allows_address(address) or (ip is not None and str(ip) in self._vouched)):
                raise TargetNotAllowed(_refusal(f"{address}:{sockaddr[1]}", address, self.allowlist))
            if len(self._passed) >= 4096:
                self._passed.clear()
            self._passed.add(key)
        return socket.socket(family=family, type=type_, proto=proto)


@functools.cache
def allowlist_resolver_class() -> type[AbstractResolver]:
    from aiohttp.abc import AbstractResolver
    from aiohttp.resolver import DefaultResolver

    class AllowlistResolver(AbstractResolver):
        """An aiohttp resolver that refuses names resolving outside the allowlist.

        Wraps aiohttp's default resolver (threaded getaddrinfo unless aiodns is
        installed) and raises TargetNotAllowed instead of returning a disallowed
        address, so the request fails as ``target_not_allowed`` without connecting.
        """

        def __init__(self, guard: TargetGuard, inner: AbstractResolver | None = None) -> None:
            self._guard = guard
            self._inner = inner or DefaultResolver()

        async def resolve(
            self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
        ) -> list[ResolveResult]:
            results = await self._inner.resolve(host, port, family)
            self._guard.check_resolved(host, results)
            return results

        async def close(self) -> None:
            await self._inner.close()

    return AllowlistResolver


def _normalise_host(host: str) -> str:
    return host.strip().strip("[]").rstrip(".").lower()


def _ip(address: str | IPAddress) -> IPAddress | None:
    """Parse an address (dropping an IPv6 zone); an IPv4-mapped IPv6 address counts as its IPv4 address."""
    if not isinstance(address, str):
        ip = address
    else:
        try:
            ip = ipaddress.ip_address(address.strip("[]").split("%", 1)[0])
        except ValueError:
            return None
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    return ip


def _denied(origin: str, endpoint: str) -> str:
    return (
        f"{origin} reaches {endpoint}, one of this site's own services (its database, broker, cache, "
        "mail server or web port), which no request may reach whatever the allowed targets say"
    )


def _refusal(origin: str, address: str, allow: Allowlist) -> str:
    return f"{origin} resolves to {address}, which is not in the allowed targets ({allow})"
