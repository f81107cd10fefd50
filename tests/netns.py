"""Other machines for end-to-end tests: Linux network namespaces joined to this one by veth pairs (root only).

A ``Host`` is a network namespace with its own loopback and one link to the root namespace: it
has the address ``10.200.R.(4k+2)``, the root side ``10.200.R.(4k+1)`` (a /30 of its own), and no
other route. Its processes run with a host name of their own (a UTS namespace: ``unshare --uts``),
so a Celery worker there is ``name@host-a`` and registers host ``host-a``, as on another machine.

The root namespace's services listen on 127.0.0.1 only (PostgreSQL, Redis, the demo target), so a
relay in the root namespace (``tests.tcp_relay``) listens on each root-side address and forwards to
them: a host reaches PostgreSQL at ``10.200.R.1:5432`` as it would a database server on the network.
"""

import os
import re
import shutil
import signal
import subprocess
from pathlib import Path

from tests.processes import PYTHON, ROOT, stop, wait_until

PREFIX = "plimsoll-test"
IP_TIMEOUT = 10  # seconds for one `ip` command


def ip(*args: str, ns: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
    command = ["ip", "netns", "exec", ns, "ip", *args] if ns else ["ip", *args]
    result = subprocess.run(command, capture_output=True, text=True, timeout=IP_TIMEOUT)
    if check and result.returncode:
        raise RuntimeError(f"{' '.join(command)}: {result.stderr.strip()}")
    return result


def unavailable() -> str:
    """Why namespaced hosts cannot be made here ('' when they can): a probe namespace is made and removed."""
    if os.geteuid() != 0:
        return "network namespaces need root (ip netns add); this test runs as root in CI"
    for tool in ("ip", "unshare"):
        if not shutil.which(tool):
            return f"`{tool}` is not installed (iproute2, util-linux)"
    probe = f"{PREFIX}-{os.getpid()}-probe"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True, timeout=IP_TIMEOUT)
    if made.returncode:
        return f"`ip netns add` failed: {made.stderr.strip()} (a container without CAP_SYS_ADMIN and CAP_NET_ADMIN?)"
    try:
        ran = ip("link", "set", "lo", "up", ns=probe, check=False)
        if ran.returncode:
            return f"`ip netns exec` failed: {ran.stderr.strip()}"
        named = subprocess.run(
            ["ip", "netns", "exec", probe, "unshare", "--uts", "hostname", "probe-host"],
            capture_output=True,
            text=True,
            timeout=IP_TIMEOUT,
        )
        if named.returncode:
            return f"`unshare --uts` failed: {named.stderr.strip()} (a host name of its own needs CAP_SYS_ADMIN)"
    finally:
        subprocess.run(["ip", "netns", "delete", probe], capture_output=True, timeout=IP_TIMEOUT)
    return ""


def remove_stale() -> None:
    """Namespaces left by a test process that was killed before its finalizers ran: its pid is gone."""
    names = ip("netns", "list").stdout.split()
    for name in names:
        if (m := re.fullmatch(rf"{PREFIX}-(\d+)-\w+", name)) and not Path(f"/proc/{m[1]}").exists():
            _delete_namespace(name)


def _delete_namespace(name: str) -> None:
    # Whatever still runs in it holds it (and its veth pair) alive: those are this test's own processes.
    pids = subprocess.run(["ip", "netns", "pids", name], capture_output=True, text=True, timeout=IP_TIMEOUT).stdout
    for pid in pids.split():
        try:
            os.kill(int(pid), signal.SIGKILL)
        except ProcessLookupError:
            pass
    subprocess.run(["ip", "netns", "delete", name], capture_output=True, timeout=IP_TIMEOUT)


def free_subnet() -> int:
    """R such that 10.200.R.0/24 is on no interface nor route of the root namespace."""
    used = ip("-o", "-4", "addr").stdout + ip("-4", "route").stdout
    start = os.getpid() % 200 + 20
    for r in [*range(start, 250), *range(20, start)]:
        if f"10.200.{r}." not in used:
            return r
    raise RuntimeError("no free 10.200.R.0/24 for the namespaced hosts")


class Host:
    """A network namespace standing for another machine (see the module): ``index`` k picks its /30."""

    def __init__(self, name: str, subnet: int, index: int, log_dir: Path):
        self.name = name  # its host name: host-a
        self.ns = f"{PREFIX}-{os.getpid()}-{name}"
        self.veth = f"pl{os.getpid()}{index}"  # at most 15 characters: pl + 7 digits + index
        self.root_address = f"10.200.{subnet}.{4 * index + 1}"
        self.address = f"10.200.{subnet}.{4 * index + 2}"
        self.log_dir = log_dir
        self.procs: list[subprocess.Popen] = []
        self.target_relay: Relay | None = None  # set by a test that relays a target onto its loopback
        try:
            ip("netns", "add", self.ns)
            ip("link", "add", self.veth, "type", "veth", "peer", "name", f"{self.veth}i")
            ip("link", "set", f"{self.veth}i", "netns", self.ns)
            ip("addr", "add", f"{self.root_address}/30", "dev", self.veth)
            ip("link", "set", self.veth, "up")
            ip("addr", "add", f"{self.address}/30", "dev", f"{self.veth}i", ns=self.ns)
            ip("link", "set", f"{self.veth}i", "up", ns=self.ns)
            ip("link", "set", "lo", "up", ns=self.ns)
        except BaseException:
            self.close()
            raise

    def command(self, argv: list[str]) -> list[str]:
        """``argv`` run on this host: in its network namespace, under its host name."""
        return [
            *("ip", "netns", "exec", self.ns, "unshare", "--uts", "sh", "-c"),
            'hostname "$0" && exec "$@"',
            self.name,
            *argv,
        ]

    def relay(self, pairs: list[str], *, log_name: str) -> "Relay":
        relay = Relay(self.command([PYTHON, "-m", "tests.tcp_relay", *pairs]), self.log_dir / log_name)
        self.procs.append(relay.proc)
        return relay

    def close(self) -> None:
        for proc in self.procs:
            stop(proc, timeout=10)
        _delete_namespace(self.ns)
        ip("link", "delete", self.veth, check=False)  # gone with the namespace, unless that failed


class Relay:
    """A ``tests.tcp_relay`` process; ``connections(listen)`` counts the connections it took on ``listen``."""

    def __init__(self, command: list[str], log_path: Path):
        self.log_path = log_path
        with open(log_path, "w") as log:
            self.proc = subprocess.Popen(command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
        wait_until(self._ready, timeout=20, what=f"the relay ({log_path.name})")

    def _ready(self) -> bool:
        if self.proc.poll() is not None:
            raise RuntimeError(f"relay exited with {self.proc.returncode}: {self.log_path.read_text()[-2000:]}")
        return "ready" in self.log_path.read_text()

    def connections(self, listen: str) -> int:
        return self.log_path.read_text().count(f"connection {listen}\n")

    def close(self) -> None:
        stop(self.proc, timeout=10)
