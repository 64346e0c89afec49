"""The nemesis: a seeded schedule of fault windows, each applied then healed.

A seed picks the schedule up front (which faults, when, how long, which node by
index); who a fault hits when it names "the writer of a ledger" is read from etcd
when it starts.  Faults (``FAULTS``):

==============  ===============================================================
isolate         one node cut from every other node and from etcd
majority        nodes split in a majority and a minority; etcd on a random side
bridge          two halves that cannot see each other, both see one bridge node
                (non-transitive); etcd with one half
writer-etcd     the writer of a ledger cut from etcd only (nodes still see it)
etcd-cut        etcd cut from every node
pause           SIGSTOP a writer past its lease (TTL + 1.5 s), then SIGCONT
kill            kill -9 a node, restart it when the window ends
slow            a token bucket (tc tbf, 64 kbit/s, 2 s queue) on a node's link
flap            a node's link taken down and up every 0.2-0.8 s
clock           a node's clocks jumped forward TTL + 2 s (libfaketime)
==============  ===============================================================

Clients are never cut (as in Jepsen, clients reach every node: a node that
should not answer has to refuse).
"""

from __future__ import annotations

import base64
import json
import random
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

from cluster import ClusterKeys

from .lab import NetLab, call_in
from .processes import SCOPE, EtcdMember, NodeMember

FAULTS = ("isolate", "majority", "bridge", "writer-etcd", "etcd-cut", "pause", "kill",
          "slow", "flap", "clock")


@dataclass
class Step:
    at_s: float  # from the start of the workload
    kind: str
    length_s: float
    pick: int  # which node, as an index into the sorted node names (or a shuffle seed)


@dataclass
class Window:
    kind: str
    start: float
    end: float
    detail: str
    errors: list[str] = field(default_factory=list)


def schedule(seed: int, duration_s: float, faults: tuple[str, ...] = FAULTS,
             ttl_s: float = 2.0) -> list[Step]:
    """Fault windows of 3-6 s (pauses: TTL + 1.5 s) with 2-4 s of calm between them,
    from 2 s in to 5 s before the end."""
    rng = random.Random(seed)
    steps: list[Step] = []
    at = 2.0
    while True:
        kind = rng.choice(faults)
        length = ttl_s + 1.5 if kind == "pause" else rng.uniform(3.0, 6.0)
        if at + length > duration_s - 5.0:
            return steps
        steps.append(Step(round(at, 2), kind, round(length, 2), rng.randrange(1 << 30)))
        at += length + rng.uniform(2.0, 4.0)


class Nemesis:
    def __init__(self, lab: NetLab, etcd: EtcdMember, nodes: dict[str, NodeMember],
                 ledgers: Callable[[], list[int]], ttl_s: float,
                 restart_timeout_s: float = 30.0) -> None:
        self.lab = lab
        self.etcd = etcd
        self.nodes = nodes
        self.ledgers = ledgers
        self.ttl_s = ttl_s
        self.restart_timeout_s = restart_timeout_s
        self.windows: list[Window] = []
        # A heal (a restart may take seconds) and the final heal_all never overlap:
        # two spawns of one node would fight over its port and data directory.
        self._lock = threading.Lock()

    @property
    def names(self) -> list[str]:
        return sorted(self.nodes)

    def run(self, steps: list[Step], started: float, stop: threading.Event) -> None:
        for step in steps:
            if stop.wait(max(0.0, started + step.at_s - time.monotonic())):
                return
            window = Window(step.kind, time.monotonic(), 0.0, "")
            with self._lock:
                try:
                    window.detail, heal = self.apply(step)
                except Exception as exc:  # recorded: a fault that could not be applied
                    window.errors.append(f"apply: {exc!r}")
                    heal = self._heal_all
            stop.wait(step.length_s)
            with self._lock:
                try:
                    heal()
                except Exception as exc:
                    window.errors.append(f"heal: {exc!r}")
            window.end = time.monotonic()
            self.windows.append(window)

    def writer_of_some_ledger(self, rng: random.Random) -> str:
        ledgers = self.ledgers()
        if ledgers:
            key = ClusterKeys(SCOPE).ledger(rng.choice(ledgers))

            def read() -> Any:
                return httpx.post(f"{self.etcd.endpoint}/v3/kv/range", timeout=2.0,
                                  json={"key": base64.b64encode(key).decode()}).json()
            try:
                kvs = call_in(self.lab.netns("client"), read, 5.0).get("kvs", [])
                if kvs:
                    node = json.loads(base64.b64decode(kvs[0]["value"]))["writer"]["node"]
                    if node in self.nodes:
                        return str(node)
            except (httpx.HTTPError, TimeoutError, ValueError, KeyError):
                pass
        return rng.choice(self.names)

    def apply(self, step: Step) -> tuple[str, Callable[[], None]]:
        rng = random.Random(step.pick)
        names = self.names
        node = names[step.pick % len(names)]
        kind = step.kind
        if kind == "isolate":
            self.lab.partition([node], [n for n in names if n != node] + ["etcd"])
            return f"{node} alone", self.lab.heal
        if kind == "majority":
            shuffled = rng.sample(names, len(names))
            minority = shuffled[:(len(names) - 1) // 2]
            majority = shuffled[len(minority):]
            side = rng.choice(("majority", "minority"))
            (majority if side == "majority" else minority).append("etcd")
            self.lab.partition(majority, minority)
            return f"{sorted(majority)} / {sorted(minority)}", self.lab.heal
        if kind == "bridge":
            shuffled = rng.sample(names, len(names))
            bridge, rest = shuffled[0], shuffled[1:]
            left, right = rest[:len(rest) // 2], rest[len(rest) // 2:]
            left = [*left, "etcd"]
            self.lab.partition(left, right)
            return f"{sorted(left)} <- {bridge} -> {sorted(right)}", self.lab.heal
        if kind == "writer-etcd":
            writer = self.writer_of_some_ledger(rng)
            self.lab.cut(writer, "etcd")
            return f"{writer} x etcd", self.lab.heal
        if kind == "etcd-cut":
            self.lab.partition(["etcd"], names)
            return "etcd alone", self.lab.heal
        if kind == "pause":
            writer = self.writer_of_some_ledger(rng)
            self.nodes[writer].signal(signal.SIGSTOP)
            return f"SIGSTOP {writer}", lambda: self.nodes[writer].signal(signal.SIGCONT)
        if kind == "kill":
            victim = self.writer_of_some_ledger(rng) if rng.random() < 0.5 else node
            self.nodes[victim].kill()

            def restart() -> None:
                self.nodes[victim].spawn()
                self.nodes[victim].wait_ready(self.restart_timeout_s)
            return f"kill -9 {victim}", restart
        if kind == "slow":
            self.lab.slow(node, 64)
            return f"{node} at 64 kbit/s", self.lab.heal
        if kind == "flap":
            stop = threading.Event()

            def flap() -> None:
                while not stop.is_set():
                    self.lab.link(node, False)
                    stop.wait(rng.uniform(0.2, 0.8))
                    self.lab.link(node, True)
                    stop.wait(rng.uniform(0.2, 0.8))
            thread = threading.Thread(target=flap, daemon=True)
            thread.start()

            def unflap() -> None:
                stop.set()
                thread.join(5)
                self.lab.heal()
            return f"{node} link flapping", unflap
        if kind == "clock":
            jump = int(self.ttl_s + 2)
            self.nodes[node].jump_clock(jump)
            return f"{node} clock +{jump}s", lambda: None
        raise ValueError(f"unknown fault {kind!r}")

    def heal_all(self) -> None:
        """Every link back, every node running (used at the end)."""
        with self._lock:
            self._heal_all()

    def _heal_all(self) -> None:
        self.lab.heal()
        for node in self.nodes.values():
            node.signal(signal.SIGCONT)
        for node in self.nodes.values():
            if not node.running:
                node.spawn()
        for node in self.nodes.values():
            node.wait_ready(self.restart_timeout_s)
