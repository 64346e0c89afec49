"""The engine enforces ``cluster.ReplicaRules``, checked by seeded differential runs
(STYLE 16): random but protocol-shaped conversations — adds at several epochs,
fences, recovery reads, copies, LAC writes, reads, listings and deletes over two
ledgers at a time — go to a real node's bookie (``LocalBookieClient``: the engine, its
journal and stores) and to the pure rules the simulation's bookies run; every
reply must be the same.  The node is closed and opened again at random points,
so what the engine answered must also be what it recovers — but for the LAC
``WriteLac`` hinted, which lives in memory only (docs/cluster.md §5): across a
restart a replica's LAC may fall back, never below the highest LAC an
acknowledged add carried (that one is journaled with the add), and never rise.
A failing seed replays by its number: ``pytest -k 'seed-17'``."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path
from typing import Any

import pytest

from cluster import (
    AddEntries,
    AddsOk,
    CopyEntries,
    CopyEntry,
    DeleteReplica,
    Fence,
    LacIs,
    ListEntries,
    NewEntry,
    ReadEntries,
    ReadEntry,
    ReadLac,
    RecoveryRead,
    WriteLac,
)
from node import LocalBookieClient, Node
from tests.app.conftest import service_settings
from tests.cluster.test_node_to_node import RulesClient

SEEDS = 24
STEPS = 80
FIRST_LEDGER_ID = 201
ENTRIES = 8
EPOCHS = 4


def payload(entry_id: int, epoch: int) -> bytes:
    """What the writer of ``epoch`` sends as ``entry_id``: one writer per epoch
    sends one value per entry (the protocol's premise), so a resend is the
    same bytes and another epoch's entry is other bytes."""
    return b"e%d@%d" % (entry_id, epoch) * (1 + entry_id % 3)


def length_after(entry_id: int, epoch: int) -> int:
    return 100 * entry_id + epoch


def message(rng: random.Random, ledgers: list[int]) -> Any:
    """One request of the kinds writers, recoveries, readers and the auditor send,
    to one of ``ledgers``.  A deleted ledger is replaced by a new id: ids are never
    reused, and what reaches a deleted replica late may be refused (the engine
    refuses a store until its next checkpoint has dropped the old locations)."""
    lid = rng.choice(ledgers)
    epoch = rng.randint(1, EPOCHS)
    entry_id = rng.randrange(ENTRIES)
    kind = rng.choices(["add", "fence", "recovery_read", "copy", "copies", "write_lac",
                        "read", "reads", "lac", "list", "delete"],
                       weights=[30, 6, 6, 6, 4, 5, 8, 6, 5, 4, 2])[0]
    if kind == "add":
        first = rng.randrange(ENTRIES)
        ids = sorted(rng.sample(range(first, ENTRIES), rng.randint(1, min(3, ENTRIES - first))))
        return AddEntries(lid, epoch, rng.randint(-1, first), tuple(
            NewEntry(i, payload(i, epoch), length_after(i, epoch)) for i in ids))
    if kind == "fence":
        return Fence(lid, epoch)
    if kind == "recovery_read":
        return RecoveryRead(lid, entry_id, epoch)
    if kind in ("copy", "copies"):
        copies = tuple(CopyEntry(lid, i, e, payload(i, e), length_after(i, e)) for i, e in (
            (rng.randrange(ENTRIES), rng.randint(1, EPOCHS))
            for _ in range(1 if kind == "copy" else rng.randint(1, 3))))
        if kind == "copy":
            return copies[0]
        return CopyEntries(lid, tuple({c.entry_id: c for c in copies}.values()))
    if kind == "write_lac":
        return WriteLac(lid, rng.randint(-1, ENTRIES - 1))
    if kind == "read":
        return ReadEntry(lid, entry_id)
    if kind == "reads":
        ids = tuple(rng.sample(range(ENTRIES), rng.randint(1, 4)))
        return ReadEntries(lid, ids, rng.choice([1, 12, 1 << 20]))
    if kind == "lac":
        return ReadLac(lid)
    if kind == "list":
        first = rng.randrange(ENTRIES)
        return ListEntries(lid, first, rng.randrange(first, ENTRIES + 2))
    ledgers[ledgers.index(lid)] = max(ledgers) + 1
    return DeleteReplica(lid)


@pytest.mark.parametrize("seed", range(SEEDS), ids=lambda s: f"seed-{s}")
def test_the_engine_answers_as_the_replica_rules(seed: int, tmp_path: Path) -> None:
    rng = random.Random(seed)
    rules = RulesClient()
    ledgers = [FIRST_LEDGER_ID, FIRST_LEDGER_ID + 1]
    durable_lac: dict[int, int] = {}  # the highest LAC an acknowledged add carried
    settings = service_settings(tmp_path / "data").to_node()
    node = Node.open(settings)

    def call(request: Any) -> Any:
        return asyncio.run(LocalBookieClient(node.replica_server).call("me", request))
    try:
        for step in range(STEPS):
            if rng.random() < 0.05:
                node.close()  # what it answered is what it recovers
                node = Node.open(settings)
                for lid, replica in rules.replicas.items():
                    recovered = call(ReadLac(lid))
                    assert isinstance(recovered, LacIs), recovered
                    assert durable_lac.get(lid, -1) <= recovered.lac <= replica.lac, (
                        f"seed {seed} step {step}: ledger {lid}'s LAC {recovered.lac} after "
                        f"a restart; {replica.lac} before, {durable_lac.get(lid, -1)} durable")
                    replica.lac = recovered.lac  # the hints it lost
            request = message(rng, ledgers)
            engine = call(request)
            reference = asyncio.run(rules.call("me", request))
            assert engine == reference, f"seed {seed} step {step}: {request}"
            if isinstance(engine, AddsOk):
                durable_lac[request.ledger_id] = max(durable_lac.get(request.ledger_id, -1),
                                                     request.lac)
    finally:
        node.close()
