"""The sans-I/O protocol core of cluster/, one rule at a time (docs/cluster.md)."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import replace

import pytest

from cluster import (
    PASSWORD_SCHEME_KEYED,
    AddDone,
    AddEntries,
    AddOutcome,
    AddsOk,
    CopyEntry,
    Current,
    Effect,
    EntriesHeld,
    EntryFound,
    Fence,
    Fenced,
    FenceOk,
    Fragment,
    LedgerClosedDone,
    LedgerMetadata,
    LedgerRecovery,
    LedgerRereplicator,
    LedgerState,
    LedgerWriter,
    NewEntry,
    NoEntry,
    ReadEntry,
    RecoveryRead,
    Replica,
    ReplicaRules,
    Send,
    Stopped,
    StoredEntry,
    Unavailable,
    WriteLac,
    WriteMetadata,
    WriterRef,
    Written,
    _packed,
    covers,
    decode_metadata,
    encode_metadata,
    pack_metadata,
    packed_revision,
    plan_rereplication,
    unpack_metadata,
    write_set,
)
from cluster._writer import RESEND_PACE_S
from common.errors import CorruptRecord, EntryConflict, InvariantViolation, WriterSuperseded


def add_entry(ledger_id: int, entry_id: int, epoch: int, payload: bytes, length_after: int,
              lac: int) -> AddEntries:
    """A writer's add of one entry."""
    return AddEntries(ledger_id, epoch, lac, (NewEntry(entry_id, payload, length_after),))


def add_ok(ledger_id: int, entry_id: int, epoch: int, lac: int) -> AddsOk:
    """A bookie's answer to ``add_entry``."""
    return AddsOk(ledger_id, epoch, lac, (entry_id,))


def md(e: int = 3, qw: int = 3, qa: int = 2, bookies: tuple[str, ...] = ("a", "b", "c"),
       **changes: object) -> LedgerMetadata:
    base = LedgerMetadata(ledger_id=7, state=LedgerState.OPEN, ensemble_size=e,
                          write_quorum=qw, ack_quorum=qa,
                          ensembles=(Fragment(0, bookies[:e], 1),), writer=WriterRef("w", 1))
    return replace(base, **changes)  # type: ignore[arg-type]


# --- metadata codec ---------------------------------------------------------------


def test_metadata_round_trips_with_its_format_version() -> None:
    value = md(metadata={"k": "v"}, password_salt=b"\x00\xff", password_hash=b"\xaa",
               offload={"state": "NONE"})
    raw = encode_metadata(value)
    assert json.loads(raw)["format_version"] == 1
    assert json.loads(raw)["ensembles"] == [[0, ["a", "b", "c"], 1]]
    assert decode_metadata(raw) == value
    assert "tier" not in json.loads(raw)  # absent until a ledger is tiered: as older records
    tiered = replace(value, tier={"bookie_id": "b", "position": [3, 0, 7, 900, 5243000]})
    assert decode_metadata(encode_metadata(tiered)) == tiered


@pytest.mark.parametrize("value", [
    md(),
    md(password_salt=bytes(16), password_hash=bytes(range(32)),
       password_scheme=PASSWORD_SCHEME_KEYED, created_at=1.5e9 + 0.123456789),
    md(metadata={"k": "v", "ü": "ß"}, offload={"state": "OFFLOADED", "parts": [1, 2]},
       writer=WriterRef("node-é", 3), ledger_id=2**62 + 5),
    md(e=5, qw=3, qa=2, bookies=("a", "bookie.example:3181", "c", "d", "e")).with_fragment(
        Fragment(10, ("x", "bookie.example:3181", "c", "d", "e"), 1)),
    replace(md(), state=LedgerState.CLOSED, closed_at=2e9, last_entry_id=-1, length=0),
    replace(md(), state=LedgerState.CLOSED, closed_at=None, last_entry_id=2**40, length=2**50),
    replace(md(), state=LedgerState.IN_RECOVERY, writer=WriterRef("w", 2)),
    replace(md(), tier={"bookie_id": "a", "position": [0, 5242880, 12, 5243000, 0]}),
])
def test_packed_metadata_unpacks_to_the_same_value_and_revision(value: LedgerMetadata) -> None:
    packed = pack_metadata(value, 123_456_789_012)
    assert unpack_metadata(packed) == (value, 123_456_789_012)
    assert packed_revision(packed) == 123_456_789_012
    assert len(packed) < len(encode_metadata(value))
    again, _ = unpack_metadata(packed)  # decoded values share their parts
    assert again.ensembles is unpack_metadata(packed)[0].ensembles


def test_packed_metadata_numbers_its_names_and_spells_them_once_the_table_is_full(
        monkeypatch: pytest.MonkeyPatch) -> None:
    value = md(bookies=("bookie-with-a-long-name-1", "bookie-with-a-long-name-2",
                        "bookie-with-a-long-name-3"), writer=WriterRef("writer-long-name", 4))
    numbered = pack_metadata(value, 9)
    # Four names of 16-25 bytes are four u16 numbers.
    assert len(numbered) < len(pack_metadata(md(), 9)) + 8
    monkeypatch.setattr(_packed, "_NAMES_MAX", len(_packed._names))  # the table is full
    fresh = replace(value, writer=WriterRef("a-name-never-packed-before", 4))
    spelled = pack_metadata(fresh, 9)
    assert b"a-name-never-packed-before" in spelled
    assert unpack_metadata(spelled) == (fresh, 9)
    assert unpack_metadata(numbered) == (value, 9)


@pytest.mark.parametrize(("edit", "why"), [
    (lambda d: d.update(format_version=2), "format_version"),
    (lambda d: d.update(ensembles=[[0, ["a", "b", "b"], 1]]), "distinct"),
    (lambda d: d.update(ensembles=[[5, ["a", "b", "c"], 1], [5, ["a", "b", "d"], 1]]),
     "increasing"),
    (lambda d: d.update(ack_quorum=4), "E >= Qw >= Qa"),
    (lambda d: d.update(state="CLOSED"), "CLOSED"),
    (lambda d: d.update(ensembles=[[0, ["a", "b", "c"], 2]]), "epoch"),
    (lambda d: d.update(ledger_id="7"), "integer"),
    (lambda d: d.pop("writer"), "writer"),
    (lambda d: d.update(tier={"bookie_id": "a", "position": [1, 2]}), "tier"),
    (lambda d: d.update(tier={"bookie_id": "a", "position": [0, -1, 0, 0, 0]}), "tier"),
])
def test_bad_metadata_is_refused(edit: object, why: str) -> None:
    doc = json.loads(encode_metadata(md()))
    edit(doc)  # type: ignore[operator]
    with pytest.raises(CorruptRecord, match=why):
        decode_metadata(json.dumps(doc).encode(), key="/s/ledgers/7")


def test_fragments_cover_id_ranges_and_replace_an_empty_last_one() -> None:
    value = md().with_fragment(Fragment(10, ("a", "d", "c"), 1))
    assert value.fragment_of(9).first_entry_id == 0
    assert value.fragment_of(10).bookies == ("a", "d", "c")
    assert value.fragment_end(0) == 9 and value.fragment_end(1) is None
    replaced = value.with_fragment(Fragment(10, ("a", "e", "c"), 1))
    assert len(replaced.ensembles) == 2 and replaced.last_fragment.bookies[1] == "e"
    with pytest.raises(InvariantViolation):
        value.with_fragment(Fragment(3, ("a", "b", "c"), 1))


# --- striping and coverage ----------------------------------------------------------


def test_write_sets_stripe_over_the_ensemble() -> None:
    fragment = Fragment(0, ("b1", "b2", "b3", "b4"), 1)
    assert [write_set(fragment, e, 3) for e in range(5)] == [
        ("b1", "b2", "b3"), ("b2", "b3", "b4"), ("b3", "b4", "b1"), ("b4", "b1", "b2"),
        ("b1", "b2", "b3")]


def test_coverage_needs_qw_minus_qa_plus_one_of_every_write_set() -> None:
    fragment = Fragment(0, ("b1", "b2", "b3", "b4"), 1)   # E=4, Qw=3, Qa=2: 2 per set
    assert not covers(fragment, {"b1", "b2"}, 3, 2)      # set (b3, b4, b1) has only b1
    assert not covers(fragment, {"b1", "b3"}, 3, 2)     # set (b2, b3, b4) has only b3
    assert covers(fragment, {"b1", "b2", "b3"}, 3, 2)
    assert covers(Fragment(0, ("a", "b", "c"), 1), {"a"}, 3, 3)
    assert not covers(Fragment(0, ("a", "b", "c"), 1), {"a"}, 3, 2)


# --- the bookie's replica rules ----------------------------------------------------------


def test_a_fenced_replica_refuses_older_epochs_and_keeps_newer_entries() -> None:
    rules = ReplicaRules()
    replica, reply = rules.apply(None, add_entry(7, 0, 1, b"x", 1, -1))
    assert isinstance(reply, AddsOk)
    replica, reply = rules.apply(replica, Fence(7, 2))
    assert isinstance(reply, FenceOk)
    replica, reply = rules.apply(replica, add_entry(7, 1, 1, b"y", 2, 0))
    assert isinstance(reply, Fenced) and reply.fenced_epoch == 2
    assert replica is not None and 1 not in replica.entries
    # The new writer replaces a stale entry of an older epoch and raises the LAC.
    replica, reply = rules.apply(replica, add_entry(7, 0, 2, b"z", 1, 0))
    assert isinstance(reply, AddsOk) and replica is not None
    assert replica.entries[0].payload == b"z" and replica.lac == 0
    # A resend at the same epoch is idempotent; other bytes there are a bug.
    assert isinstance(rules.apply(replica, add_entry(7, 0, 2, b"z", 1, 0))[1], AddsOk)
    with pytest.raises(InvariantViolation):
        rules.apply(replica, add_entry(7, 0, 2, b"other", 5, 0))


def test_recovery_reads_fence_and_plain_reads_do_not() -> None:
    rules = ReplicaRules()
    replica, reply = rules.apply(None, ReadEntry(7, 0))
    assert isinstance(reply, NoEntry) and replica is None   # reads create nothing
    replica, reply = rules.apply(None, RecoveryRead(7, 0, 3))
    assert isinstance(reply, NoEntry) and replica is not None and replica.fenced_epoch == 3
    assert isinstance(rules.apply(replica, add_entry(7, 0, 2, b"x", 1, -1))[1], Fenced)


def test_copies_ignore_fences_but_never_overwrite_newer_entries() -> None:
    rules = ReplicaRules()
    replica, _ = rules.apply(None, Fence(7, 9))
    replica, _ = rules.apply(replica, CopyEntry(7, 4, 2, b"old", 3))
    assert replica is not None and replica.entries[4].payload == b"old"
    replica, _ = rules.apply(replica, CopyEntry(7, 5, 9, b"new", 6))
    replica, _ = rules.apply(replica, CopyEntry(7, 5, 3, b"stale", 6))
    assert replica is not None and replica.entries[5].payload == b"new"


# --- the writer ---------------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def now(self) -> float:
        return self.t


class Members:
    def __init__(self, *bookies: str) -> None:
        self.bookies = list(bookies)

    def writable_bookies(self) -> list[str]:
        return self.bookies


def writer(value: LedgerMetadata, clock: Clock | None = None,
           members: Members | None = None) -> LedgerWriter:
    return LedgerWriter(node_id="w", metadata=value, revision=1, clock=clock or Clock(),
                        membership=members or Members("a", "b", "c", "d"), next_entry_id=0,
                        lac=-1, length=0, add_timeout_s=1.0)


def sends(w: LedgerWriter | LedgerRecovery) -> list[tuple[str, int]]:
    """(bookie, entry id) of every entry the machine sends now."""
    return entries_sent(w.take_effects())


def entries_sent(effects: list[Effect]) -> list[tuple[str, int]]:
    return [(e.bookie_id, entry.entry_id) for e in effects
            if isinstance(e, Send) and isinstance(e.request, AddEntries)
            for entry in e.request.entries]


def test_acks_at_qa_in_id_order_and_lac_piggybacks() -> None:
    w = writer(md(e=3, qw=3, qa=2))
    assert w.add(b"x", "t0") is AddOutcome.APPENDED
    w.add(b"yy", "t1")
    assert sorted(sends(w)) == [(b, e) for b in "abc" for e in (0, 1)]
    w.on_reply("a", add_ok(7, 1, 1, -1))
    w.on_reply("b", add_ok(7, 1, 1, -1))          # entry 1 at Qa, entry 0 not yet
    assert w.lac == -1 and not w.take_effects()
    w.on_reply("c", add_ok(7, 0, 1, -1))
    w.on_reply("x", add_ok(7, 0, 1, -1))          # not in the write set: ignored
    assert w.lac == -1
    w.on_reply("a", add_ok(7, 0, 1, -1))
    assert w.lac == 1 and w.length == 3
    assert [(d.token, d.entry_id) for d in w.take_effects() if isinstance(d, AddDone)] == [
        ("t0", 0), ("t1", 1)]
    w.add(b"z", "t2")
    assert {e.request.lac for e in w.take_effects() if isinstance(e, Send)
            and isinstance(e.request, AddEntries)} == {1}


def test_a_batch_is_one_call_per_bookie_and_one_answer_for_the_last_entry() -> None:
    w = writer(md(e=3, qw=2, qa=2))
    assert w.add_many([b"a", b"bb", b"ccc"], "batch") == 0
    w.add(b"d", "single")                         # made in the same turn: same calls
    effects = w.take_effects()
    calls = [e for e in effects if isinstance(e, Send)]
    assert len(calls) == 3 and all(isinstance(c.request, AddEntries) for c in calls)
    # write sets (E=3, Qw=2): 0 → a b, 1 → b c, 2 → c a, 3 → a b
    assert sorted(entries_sent(effects)) == [("a", 0), ("a", 2), ("a", 3), ("b", 0),
                                             ("b", 1), ("b", 3), ("c", 1), ("c", 2)]
    by_bookie = {c.bookie_id: c.request for c in calls}
    assert [e.length_after for e in by_bookie["a"].entries] == [1, 6, 7]  # type: ignore[union-attr]
    w.on_reply("a", AddsOk(7, 1, -1, (0, 2, 3)))
    w.on_reply("b", AddsOk(7, 1, -1, (0, 1, 3)))
    assert w.lac == 0 and not w.take_effects()    # no token on entry 0
    w.on_reply("c", AddsOk(7, 1, -1, (1, 2)))
    assert w.lac == 3
    assert [(d.token, d.entry_id, d.lac) for d in w.take_effects()
            if isinstance(d, AddDone)] == [("batch", 2, 2), ("single", 3, 3)]


def test_a_late_answer_counts_only_for_the_entries_its_call_carried() -> None:
    """After an ensemble change a bookie's write sets differ: an answer to a call sent
    before it acknowledges what that call carried, not every id in its span."""
    clock = Clock()
    w = writer(md(e=3, qw=2, qa=2), clock, Members("d", "a", "b", "c"))
    w.add_many([b"0", b"1", b"2"], "t")
    first = {e.bookie_id: e.request for e in w.take_effects() if isinstance(e, Send)}
    assert [e.entry_id for e in first["a"].entries] == [0, 2]  # type: ignore[union-attr]
    w.on_reply("c", Unavailable(7, "down"))
    (write,) = [e for e in w.take_effects() if isinstance(e, WriteMetadata)]
    assert write.metadata.last_fragment == Fragment(0, ("a", "b", "d"), 1)
    w.on_metadata(Written(2))
    resent = sends(w)
    assert sorted(resent) == [("a", 0), ("a", 2), ("b", 0), ("b", 1), ("d", 1), ("d", 2)]
    w.on_reply("a", AddsOk(7, 1, -1, (0, 2)))     # the first call's answer, late
    w.on_reply("b", AddsOk(7, 1, -1, (0, 1)))
    assert w.lac == 0                              # entry 1 needs d; 2 needs a and d
    w.on_reply("d", AddsOk(7, 1, -1, (1, 2)))
    assert w.lac == 2


def test_a_writer_adopts_a_tier_position_written_over_its_own_revision_only() -> None:
    """A node records a tier position over the writer's revision: the writer takes
    it, so its next metadata write starts from it; not with a write of its own in
    flight (that write fails and is redone on the fresh value), not over another
    revision, and not when more than the tier changed."""
    tier = {"bookie_id": "w", "position": [0, 5242880, 9, 4718900, 0]}
    w = writer(md(e=3, qw=3, qa=2), Clock(), Members("d", "a", "b", "c"))
    tiered = replace(w.metadata, tier=tier)
    assert not w.adopt(tiered, 3, base_revision=2)               # not over its revision
    assert not w.adopt(replace(tiered, ack_quorum=3), 2, base_revision=1)
    assert w.adopt(tiered, 2, base_revision=1)
    assert (w.metadata, w.revision) == (tiered, 2)
    w.add(b"0", "t")
    w.on_reply("c", Unavailable(7, "down"))
    (write,) = [e for e in w.take_effects() if isinstance(e, WriteMetadata)]
    assert write.expected_revision == 2 and write.metadata.tier == tier  # carried through
    assert not w.adopt(replace(tiered, tier=None), 3, base_revision=2)  # a CAS in flight


def test_failed_calls_to_a_bookie_with_no_replacement_are_resent_at_a_pace() -> None:
    """Every call in flight to a dead bookie fails; with nothing to replace it, each
    failure used to resend all that was pending, so a writer kept as many calls
    going as it had ever made (found by the seeded simulation, once its calls to a
    down node failed the way HTTP calls do)."""
    clock = Clock()
    w = writer(md(e=3, qw=3, qa=3), clock, Members("a", "b", "c"))
    for turn in range(5):                          # five turns: five calls to c
        w.add(bytes([turn]), f"t{turn}")
        assert ("c", turn) in sends(w)
        for bookie in "ab":
            w.on_reply(bookie, add_ok(7, turn, 1, -1))
    assert w.lac == -1                             # c is needed (Qa = 3)
    for _ in range(5):                             # each fails at once
        w.on_reply("c", Unavailable(7, "down"))
    assert sends(w) == []                          # all sent within the pace
    clock.t += RESEND_PACE_S
    w.on_reply("c", Unavailable(7, "down"))
    assert sorted(sends(w)) == [("c", e) for e in range(5)]  # one call, all of them
    for _ in range(4):
        w.on_reply("c", Unavailable(7, "down"))
    assert sends(w) == []


def test_exactly_once_with_entry_ids() -> None:
    w = writer(md())
    assert w.add(b"x", "t0", entry_id=0) is AddOutcome.APPENDED
    assert w.add(b"x", "t0b", entry_id=0) is AddOutcome.JOINED
    with pytest.raises(EntryConflict):
        w.add(b"other", "t", entry_id=0)
    with pytest.raises(EntryConflict):
        w.add(b"x", "t", entry_id=5)
    for bookie in "ab":
        w.on_reply(bookie, add_ok(7, 0, 1, -1))
    assert {d.token for d in w.take_effects() if isinstance(d, AddDone)} == {"t0", "t0b"}
    assert w.add(b"x", "t", entry_id=0) is AddOutcome.NEEDS_COMPARE


def test_a_silent_bookie_is_replaced_by_a_cased_ensemble_change() -> None:
    clock = Clock()
    w = writer(md(qa=3), clock, Members("d", "a", "b", "c"))
    w.add(b"x", "t0")
    for bookie in "abc":
        w.on_reply(bookie, add_ok(7, 0, 1, -1))
    w.add(b"y", "t1")
    w.take_effects()
    w.on_reply("a", add_ok(7, 1, 1, 0))
    w.on_reply("b", add_ok(7, 1, 1, 0))
    clock.t = 1.5
    w.tick()                                      # c silent for entry 1
    (write,) = [e for e in w.take_effects() if isinstance(e, WriteMetadata)]
    assert write.metadata.ensembles == (Fragment(0, ("a", "b", "c"), 1),
                                        Fragment(1, ("a", "b", "d"), 1))
    w.on_reply("c", add_ok(7, 1, 1, 0))            # during the change: does not count
    assert w.lac == 0
    w.on_metadata(Written(2))
    assert sorted(sends(w)) == [("a", 1), ("b", 1), ("d", 1)]   # all resent
    assert w.metadata == write.metadata and w.revision == 2
    for bookie in "abd":
        w.on_reply(bookie, add_ok(7, 1, 1, 0))
    assert w.lac == 1


def test_an_ensemble_change_that_meets_the_auditors_change_is_redone() -> None:
    """The writer's CAS finds the key changed by someone else (the auditor, on an
    older fragment): it redoes its change on the fresh value, still replacing the
    bookie that failed, and the add made meanwhile goes out with the resend."""
    value = md(qa=3, bookies=("a", "b", "c"))
    value = replace(value, ensembles=(Fragment(0, ("a", "b", "c"), 1),
                                      Fragment(1, ("a", "b", "c"), 1)))
    w = LedgerWriter(node_id="w", metadata=value, revision=1, clock=Clock(),
                     membership=Members("d", "a", "b", "c"), next_entry_id=1, lac=0, length=1)
    w.add(b"x", "t0")
    w.take_effects()
    w.on_reply("c", Unavailable(7, "down"))
    (first,) = [e for e in w.take_effects() if isinstance(e, WriteMetadata)]
    assert first.metadata.last_fragment == Fragment(1, ("a", "b", "d"), 1)
    w.add(b"y", "t1")                              # during the change: not sent yet
    assert not sends(w)
    # Meanwhile the auditor replaced c in the older fragment: the CAS lost.
    audited = replace(value, ensembles=(Fragment(0, ("a", "b", "e"), 1),
                                        Fragment(1, ("a", "b", "c"), 1)))
    w.on_metadata(Current(audited, 5))
    (again,) = [e for e in w.take_effects() if isinstance(e, WriteMetadata)]
    assert again.expected_revision == 5
    assert again.metadata.ensembles == (Fragment(0, ("a", "b", "e"), 1),
                                        Fragment(1, ("a", "b", "d"), 1))
    w.on_metadata(Written(6))
    assert sorted(sends(w)) == [(b, e) for b in "abd" for e in (1, 2)]
    for bookie in "abd":
        w.on_reply(bookie, AddsOk(7, 1, 0, (1, 2)))
    assert w.lac == 2 and w.retire() is None      # its AddDones not taken yet
    assert {d.token for d in w.take_effects() if isinstance(d, AddDone)} == {"t0", "t1"}


def test_a_fenced_answer_from_a_newer_epoch_supersedes_the_writer() -> None:
    w = writer(md())
    w.add(b"x", "t0")
    w.take_effects()
    w.on_reply("a", Fenced(7, 2, -1))
    effects = w.take_effects()
    assert any(isinstance(e, Stopped) and isinstance(e.error, WriterSuperseded)
               for e in effects)
    with pytest.raises(WriterSuperseded):
        w.add(b"y", "t1")


def test_an_idle_writer_retires_to_its_state_and_wakes_where_it_was() -> None:
    w = writer(md(qa=2))
    w.add(b"x", "t0")
    assert w.retire() is None                     # an add in flight
    w.take_effects()
    for bookie in "ab":
        w.on_reply(bookie, add_ok(7, 0, 1, -1))
    assert w.retire() is None                     # its AddDone not taken yet
    w.take_effects()
    assert w.retire() is None                     # the bookies were not sent LAC 0
    w.tick()
    assert {e.request.lac for e in w.take_effects() if isinstance(e, Send)
            and isinstance(e.request, WriteLac)} == {0}
    idle = w.retire()
    assert idle is not None and (idle.lac, idle.length, idle.revision) == (0, 1, 1)
    assert (idle.lac_length, idle.ledger_id) == (1, 7) and w.done and not w.take_effects()
    assert idle.metadata == w.metadata and idle.packed == pack_metadata(w.metadata, 1)
    with pytest.raises(WriterSuperseded):          # retired: it takes nothing more
        w.add(b"y", "t1")
    woken = LedgerWriter.wake(idle, node_id="w", clock=Clock(), membership=Members("a", "b"))
    assert (woken.next_entry_id, woken.lac, woken.length) == (1, 0, 1)
    assert not woken.wants_tick                   # nothing to tell the bookies again
    assert woken.add(b"x", "t0", entry_id=0) is AddOutcome.NEEDS_COMPARE
    assert woken.add(b"yy", "t1") is AddOutcome.APPENDED
    assert sorted(sends(woken)) == [("a", 1), ("b", 1), ("c", 1)]
    for bookie in "bc":
        woken.on_reply(bookie, add_ok(7, 1, 1, 0))
    assert woken.lac == 1 and woken.length == 3


# --- recovery ---------------------------------------------------------------------------


def test_recovery_claims_fences_reads_and_closes_at_the_recovered_end() -> None:
    value = md(e=3, qw=3, qa=2)
    recovery = LedgerRecovery(node_id="r", metadata=value, revision=1, clock=Clock(),
                              membership=Members("a", "b", "c"), close=True, token="f")
    recovery.start()
    (claim,) = recovery.take_effects()
    assert isinstance(claim, WriteMetadata) and claim.metadata.epoch == 2
    assert claim.metadata.state is LedgerState.IN_RECOVERY
    recovery.on_metadata(Written(2))
    assert {e.bookie_id for e in recovery.take_effects()
            if isinstance(e, Send) and isinstance(e.request, Fence)} == {"a", "b", "c"}
    recovery.on_reply("a", FenceOk(7, 2, 0))
    assert not recovery.take_effects()            # one answer does not cover Qw-Qa+1=2
    recovery.on_reply("b", FenceOk(7, 2, -1))
    reads = [e for e in recovery.take_effects() if isinstance(e, Send)]
    assert {(e.request.entry_id, e.request.epoch) for e in reads  # type: ignore[union-attr]
            } == {(0, 2)} and all(isinstance(e.request, RecoveryRead) for e in reads)
    recovery.on_reply("a", EntryFound(7, 0, 1, b"x", 1, 0))     # LAC entry: its length
    recovery.take_effects()
    recovery.on_reply("c", EntryFound(7, 1, 1, b"yy", 3, 0))    # entry 1 found once
    recovery.take_effects()
    recovery.on_reply("a", NoEntry(7, 2, 0))
    recovery.on_reply("b", NoEntry(7, 2, 0))                    # 2 = Qw-Qa+1: absent
    assert set(sends(recovery)) == {("a", 1), ("b", 1), ("c", 1)}
    for bookie in "ab":
        recovery.on_reply(bookie, add_ok(7, 1, 2, 0))
    (close,) = [e for e in recovery.take_effects() if isinstance(e, WriteMetadata)]
    assert close.metadata.state is LedgerState.CLOSED
    assert (close.metadata.last_entry_id, close.metadata.length) == (1, 3)
    recovery.on_metadata(Current(close.metadata, 9))            # landed, answer lost
    assert any(isinstance(e, LedgerClosedDone) for e in recovery.take_effects())
    assert recovery.done


# --- re-replication planning -------------------------------------------------------------


def test_the_plan_replaces_a_lost_bookie_only_where_a_copy_survives() -> None:
    value = replace(md(e=3, qw=2, qa=1), state=LedgerState.CLOSED, last_entry_id=3,
                    length=4)
    # write sets: 0 → (a, b), 1 → (b, c), 2 → (c, a), 3 → (a, b); c is lost.
    holdings = {"a": {0: 1, 2: 1, 3: 1}, "b": {0: 1, 1: 1}}
    plan = plan_rereplication(value, holdings, {"c"}, ["d", "a", "b"])
    assert plan.replacements == {(0, "c"): "d"}
    assert {(c.entry_id, c.target) for c in plan.copies} == {(1, "d"), (2, "d"), (3, "b")}
    # Entry 1 held only by the lost bookie: keep c named, it may come back.
    plan = plan_rereplication(value, {"a": {0: 1, 2: 1, 3: 1}, "b": {0: 1}}, {"c"}, ["d"])
    assert plan.unrecoverable == (1,) and not plan.replacements


def test_the_length_at_the_lac_leaves_pending_adds_out() -> None:
    from cluster import LedgerMetadata, LedgerState, LedgerWriter, WriterRef

    class Clock:
        def now(self) -> float:
            return 0.0

    class Members:
        def writable_bookies(self) -> list[str]:
            return ["a", "b", "c"]

    md = LedgerMetadata(ledger_id=1, state=LedgerState.OPEN, ensemble_size=3, write_quorum=3,
                        ack_quorum=2, ensembles=(Fragment(0, ("a", "b", "c"), 1),),
                        writer=WriterRef("a", 1))
    writer = LedgerWriter(node_id="a", metadata=md, revision=1, clock=Clock(),
                          membership=Members(), next_entry_id=0, lac=-1, length=0)
    writer.add(b"12345", "t0")
    writer.add(b"678", "t1")
    assert (writer.length, writer.lac_length) == (8, 0)
    for bookie in ("a", "b"):
        writer.on_reply(bookie, add_ok(1, 0, 1, -1))
    assert (writer.lac, writer.length, writer.lac_length) == (0, 8, 5)


def _repair_network(machine: LedgerRereplicator, bookies: dict[str, Replica],
                    calls: Counter[str]) -> list[object]:
    """Deliver every Send of ``machine`` to ``bookies`` (ReplicaRules) until it is quiet;
    the other effects (metadata writes, results) are returned."""
    rules = ReplicaRules()
    others: list[object] = []
    while effects := machine.take_effects():
        for effect in effects:
            if not isinstance(effect, Send):
                others.append(effect)
                continue
            calls[type(effect.request).__name__] += 1
            replica, reply = rules.apply(bookies.get(effect.bookie_id), effect.request)
            assert replica is not None
            bookies[effect.bookie_id] = replica
            machine.on_reply(effect.bookie_id, reply)
    return others


def test_re_replication_copies_ranges_one_call_each() -> None:
    """The lost bookie's share moves as ranges: one ReadEntries from a source and
    one CopyEntries to the target per range (not two calls per entry); a range cut
    by bytes is read on from where it stopped, and an entry a source lacks is read
    from another source after a pause."""
    value = replace(md(), state=LedgerState.CLOSED, last_entry_id=9, length=10)
    bookies = {b: Replica(7) for b in "ab"}
    for entry_id in range(10):
        for b in "ab":
            bookies[b].entries[entry_id] = StoredEntry(1, b"%d" % entry_id, entry_id + 1)
    clock = Clock()
    calls: Counter[str] = Counter()
    machine = LedgerRereplicator(metadata=value, revision=1, lost={"c"}, writable=["d"],
                                 clock=clock, batch_entries_max=4, batch_bytes_max=1 << 20)
    machine.start()
    (write,) = _repair_network(machine, bookies, calls)
    assert calls == {"ListEntries": 2, "ReadEntries": 3, "CopyEntries": 3}
    assert isinstance(write, WriteMetadata)
    assert write.metadata.ensembles[0].bookies == ("a", "b", "d")
    assert {e: s.payload for e, s in bookies["d"].entries.items()} == {
        e: b"%d" % e for e in range(10)}
    machine.on_metadata(Written(2))
    assert machine.done and (machine.entries_copied, machine.bytes_copied) == (10, 10)

    # Entry 1 gone from the first source, and reads cut at 2 bytes (two 1-byte
    # entries): what "a" answered is copied; the rest is read from "b" after a pause.
    bookies = {b: Replica(7) for b in "ab"}
    for entry_id in range(4):
        for b in "ab":
            bookies[b].entries[entry_id] = StoredEntry(1, b"%d" % entry_id, entry_id + 1)
    del bookies["a"].entries[1]
    holdings = {b: {e: 1 for e in range(4)} for b in "ab"}  # as listed before
    value = replace(value, last_entry_id=3, length=4)
    calls.clear()
    machine = LedgerRereplicator(metadata=value, revision=1, lost={"c"}, writable=["d"],
                                 clock=clock, batch_entries_max=4, batch_bytes_max=2)
    machine.start()
    machine.take_effects()
    for b in "ab":
        machine.on_reply(b, EntriesHeld(7, tuple(holdings[b].items())))
    assert _repair_network(machine, bookies, calls) == []
    assert sorted(bookies["d"].entries) == [0, 2]      # 1 and 3 wait for the retry
    clock.t += 1.0
    machine.tick()
    (write,) = _repair_network(machine, bookies, calls)
    assert sorted(bookies["d"].entries) == [0, 1, 2, 3]
    assert calls == {"ReadEntries": 2, "CopyEntries": 2}

    # Listed as it is (entry 1 only on "b"), a range cut by bytes goes on at once
    # from the same source; "a", live, gets entry 1 back too.
    calls.clear()
    bookies["d"] = Replica(7)
    machine = LedgerRereplicator(metadata=value, revision=1, lost={"c"}, writable=["d"],
                                 clock=clock, batch_entries_max=4, batch_bytes_max=2)
    machine.start()
    (write,) = _repair_network(machine, bookies, calls)
    assert sorted(bookies["d"].entries) == sorted(bookies["a"].entries) == [0, 1, 2, 3]
    # Ranges: a → d (0, 2), a → d (3), b → d (1), b → a (1).
    assert calls == {"ListEntries": 2, "ReadEntries": 4, "CopyEntries": 4}


def test_batch_runs_cut_by_count_and_by_bytes_and_an_oversized_item_goes_alone() -> None:
    from cluster import batch_runs

    assert batch_runs([1, 1, 1, 1, 1], count_max=2, bytes_max=100) == [(0, 2), (2, 4), (4, 5)]
    assert batch_runs([5, 5, 20, 1], count_max=10, bytes_max=10) == [(0, 2), (2, 3), (3, 4)]
    assert batch_runs([3], count_max=1, bytes_max=1) == [(0, 1)]
