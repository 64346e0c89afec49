"""The network lab: one network namespace per member (each node, etcd, the clients),
each joined by a veth pair to a bridge that lives in a namespace of its own (the
"switch"), and the faults the nemesis puts on those links.

Every name carries the run's id (``lp<6 hex>-…``), so leftovers of a run that was
killed never collide with a new one; :meth:`NetLab.destroy` removes what the run
made even half-built (deleting a namespace deletes the veth ends inside it).
Addresses (10.77.0.0/24) exist only inside the namespaces.

Faults are what real networks do:

- a cut between two members is a silent drop, both ways, by an nftables set of
  blocked peers in each member's namespace: no RST, no ICMP, packets vanish (a
  refused connection would tell the sender at once, a partition does not);
- a slow link is a token bucket (``tc qdisc … tbf``) on both ends of the member's
  veth (this kernel has no netem, so there is no pure delay: a rate limit with a
  deep queue makes the delay);
- a flap takes the member's link down and up (``ip link set``).

Only root can do this; :func:`missing_parts` names what is not installed.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import secrets
import shutil
import subprocess
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import TypeVar

T = TypeVar("T")

SUBNET = "10.77.0"
CLONE_NEWNET = 0x40000000
NFT_RULES = """table inet lab {
  set blocked { type ipv4_addr; }
  chain input { type filter hook input priority 0; ip saddr @blocked drop; }
  chain output { type filter hook output priority 0; ip daddr @blocked drop; }
}
"""
COMMAND_TIMEOUT_S = 10.0
_libc = ctypes.CDLL(None, use_errno=True)


class LabError(RuntimeError):
    """A namespace, link or filter command failed."""


def missing_parts() -> list[str]:
    """What the lab needs and this machine lacks (empty: it can run)."""
    missing = [f"{tool} (scripts/install-partition.sh)" for tool in ("ip", "nft", "tc")
               if shutil.which(tool) is None]
    if os.geteuid() != 0:
        missing.append("root (network namespaces)")
    return missing


def run(argv: list[str], *, stdin: str | None = None, check: bool = True) -> str:
    done = subprocess.run(argv, input=stdin, capture_output=True, text=True,
                          timeout=COMMAND_TIMEOUT_S, check=False)
    if check and done.returncode != 0:
        raise LabError(f"{' '.join(argv)}: {done.stderr.strip()}")
    return done.stdout


@contextlib.contextmanager
def entered(netns: str) -> Iterator[None]:
    """The calling thread in ``netns`` (setns(2) moves one thread only): sockets it
    opens meanwhile live there.  It goes back to its own namespace afterwards."""
    own = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    target = os.open(f"/run/netns/{netns}", os.O_RDONLY)
    try:
        if _libc.setns(target, CLONE_NEWNET) != 0:
            raise LabError(f"setns {netns}: errno {ctypes.get_errno()}")
        try:
            yield
        finally:
            _libc.setns(own, CLONE_NEWNET)
    finally:
        os.close(own)
        os.close(target)


def call_in(netns: str, fn: Callable[[], T], timeout_s: float = 120.0) -> T:
    """``fn()`` on a fresh thread inside ``netns``; its result (or its exception)."""
    box: dict[str, object] = {}

    def body() -> None:
        try:
            with entered(netns):
                box["result"] = fn()
        except BaseException as exc:  # handed to the caller
            box["error"] = exc
    thread = threading.Thread(target=body, daemon=True)
    thread.start()
    thread.join(timeout_s)
    if thread.is_alive():
        raise TimeoutError(f"call in {netns} did not finish in {timeout_s}s")
    if "error" in box:
        raise box["error"]  # type: ignore[misc]
    return box["result"]  # type: ignore[return-value]


class NetLab:
    """Members ``names`` (e.g. ``["etcd", "client", "n0", "n1", "n2"]``) on one bridge."""

    def __init__(self, names: Iterable[str], run_id: str | None = None) -> None:
        self.run_id = run_id or secrets.token_hex(3)
        self.names = list(names)
        self.switch = f"lp{self.run_id}-sw"
        self._addresses = {name: f"{SUBNET}.{10 + i}" for i, name in enumerate(self.names)}
        self._made: list[str] = []
        self.cuts: set[frozenset[str]] = set()

    def netns(self, name: str) -> str:
        return f"lp{self.run_id}-{name}"

    def address(self, name: str) -> str:
        return self._addresses[name]

    def name_of(self, address: str) -> str:
        return next(n for n, a in self._addresses.items() if a == address)

    def exec_argv(self, name: str, argv: list[str]) -> list[str]:
        """``argv`` run inside the member's namespace (``ip netns exec`` execs it: the
        pid is the program's own, so signals reach it)."""
        return ["ip", "netns", "exec", self.netns(name), *argv]

    def _in(self, name: str, argv: list[str], **kwargs: object) -> str:
        return run(["ip", "netns", "exec", self.netns(name), *argv], **kwargs)  # type: ignore[arg-type]

    def create(self) -> None:
        try:
            self._add_netns(self.switch)
            run(["ip", "netns", "exec", self.switch, "ip", "link", "add", "br0",
                 "type", "bridge"])
            run(["ip", "netns", "exec", self.switch, "ip", "link", "set", "br0", "up"])
            for i, name in enumerate(self.names):
                netns = self.netns(name)
                self._add_netns(netns)
                outer, inner = f"lp{self.run_id}{i:02d}s", f"lp{self.run_id}{i:02d}m"
                run(["ip", "link", "add", outer, "type", "veth", "peer", "name", inner])
                run(["ip", "link", "set", outer, "netns", self.switch])
                run(["ip", "link", "set", inner, "netns", netns])
                run(["ip", "netns", "exec", self.switch, "ip", "link", "set", outer,
                     "master", "br0", "up"])
                self._in(name, ["ip", "link", "set", inner, "name", "eth0"])
                self._in(name, ["ip", "addr", "add", f"{self.address(name)}/24", "dev", "eth0"])
                self._in(name, ["ip", "link", "set", "eth0", "up"])
                self._in(name, ["ip", "link", "set", "lo", "up"])
                self._in(name, ["nft", "-f", "-"], stdin=NFT_RULES)
        except BaseException:
            self.destroy()
            raise

    def _add_netns(self, netns: str) -> None:
        run(["ip", "netns", "add", netns])
        self._made.append(netns)

    def destroy(self) -> None:
        """Remove every namespace this lab made (and with them the veths, the bridge
        and the filters).  Safe to call twice."""
        for netns in reversed(self._made):
            run(["ip", "netns", "del", netns], check=False)
        self._made.clear()

    def _switch_port(self, name: str) -> str:
        return f"lp{self.run_id}{self.names.index(name):02d}s"

    # --- faults --------------------------------------------------------------

    def cut(self, a: str, b: str) -> None:
        """Silently drop everything between ``a`` and ``b``, both ways."""
        self._in(a, ["nft", "add", "element", "inet", "lab", "blocked",
                     "{", self.address(b), "}"])
        self._in(b, ["nft", "add", "element", "inet", "lab", "blocked",
                     "{", self.address(a), "}"])
        self.cuts.add(frozenset((a, b)))

    def partition(self, *groups: Iterable[str]) -> None:
        """Cut every pair of members in different groups (members in no group keep
        every link)."""
        sets = [set(g) for g in groups]
        for i, left in enumerate(sets):
            for right in sets[i + 1:]:
                for a in left:
                    for b in right:
                        self.cut(a, b)

    def slow(self, name: str, rate_kbit: int) -> None:
        """A token bucket of ``rate_kbit`` on both directions of the member's link,
        with a queue deep enough (2 s) to delay rather than drop."""
        for argv in (["ip", "netns", "exec", self.netns(name), "tc"],
                     ["ip", "netns", "exec", self.switch, "tc"]):
            dev = "eth0" if self.netns(name) in argv else self._switch_port(name)
            run([*argv, "qdisc", "replace", "dev", dev, "root", "tbf", "rate",
                 f"{rate_kbit}kbit", "burst", "4kb", "latency", "2s"])

    def link(self, name: str, up: bool) -> None:
        self._in(name, ["ip", "link", "set", "eth0", "up" if up else "down"])

    def heal(self) -> None:
        """Every link back: filters flushed, rate limits removed, links up."""
        for name in self.names:
            self._in(name, ["nft", "flush", "set", "inet", "lab", "blocked"], check=False)
            self._in(name, ["tc", "qdisc", "del", "dev", "eth0", "root"], check=False)
            run(["ip", "netns", "exec", self.switch, "tc", "qdisc", "del", "dev",
                 self._switch_port(name), "root"], check=False)
            self.link(name, True)
        self.cuts.clear()
