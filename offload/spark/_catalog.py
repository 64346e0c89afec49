"""Which offloaded segments a read covers: a paginated listing plus the index objects.

Runs on the driver while Spark plans the scan.  Index keys are found under
``{prefix}/`` (narrowed to ``{cluster}/`` and ``{bookie_id}/ledgers/`` when
those options are given), each index is fetched once and decoded with
:func:`offload._format.decode_index`, and the segments are grouped per ledger.

Rules (docs/spark.md):

1. A ledger is read only when its segments cover entries ``0..last_entry_id``
   with no gap; one whose offload is still under way (some indexes missing) is
   skipped with a warning, or is an error if the ``ledgers`` option names it.
   So is a ledger tiered while open (an index whose facts say ``closed_at`` 0,
   or indexes that disagree while its chunks are being consolidated), unless
   ``include_open``: then it is read as far as its segments cover entries from
   0 with no gap, each segment from its ``segment`` object if the listing shows
   one, else from its chunks.  That is a consistent snapshot: an index is
   written only after the chunks it covers, chunks never change, and a chunk
   deleted by the consolidation is read from the segment (the same bytes).
2. Ledger ids are unique per bookie only, and rows carry only ``ledger_id``:
   the same ledger id under two (cluster, bookie) pairs is an error asking for
   the ``cluster``/``bookie_id`` options, never duplicated rows.
3. Segment objects are not listed here; a missing one fails the read naming
   its key.
4. Packed ledgers (``packs/{pack_id}/index``, :mod:`offload._pack_format`): each
   pack index is fetched once and gives every member's segment index; a member
   is one segment read from the pack's ``data`` at its offset.  A ledger found
   in two packs (a rewrite under way) is read from the newer one (the bytes
   are the same); one with complete objects of its own as well is read from
   those.  S3 does not say which members were deleted since the pack was
   written: they are read until the pack is rewritten (docs/spark.md).
"""

from __future__ import annotations

import logging
import re
from collections import defaultdict
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from common.errors import Corruption, InvalidSetting

from .._format import LedgerFacts, SegmentIndex, decode_index
from .._keys import PACK_ID, ObjectKind, parse_tail
from .._pack_format import decode_pack_index
from .._store import ObjectStore
from ._options import ReadOptions

log = logging.getLogger("ledgerd.offload.spark")

_FETCH_THREADS = 16
_WORD = r"[A-Za-z0-9._-]{1,128}"


@dataclass(frozen=True)
class Owner:
    cluster: str
    bookie_id: str


@dataclass(frozen=True)
class Segment:
    key: str
    index_key: str
    index: SegmentIndex
    # ``(byte_position, key)`` of the chunks holding its bytes when the listing
    # showed no ``segment`` object (a ledger tiered while open).
    chunks: tuple[tuple[int, str], ...] = ()
    # Where the segment starts in ``key``: a packed ledger's offset in its pack.
    base: int = 0
    packed: bool = False


@dataclass(frozen=True)
class OffloadedLedger:
    ledger_id: int
    owner: Owner
    facts: LedgerFacts
    segments: tuple[Segment, ...]
    # Tiered while open (or being consolidated): ``segments`` cover a prefix of
    # it, ``facts`` are the latest index's.
    open: bool = False

    @property
    def entry_count(self) -> int:
        return sum(s.index.entry_count for s in self.segments)


def listing_prefix(options: ReadOptions) -> str:
    prefix = f"{options.connection.prefix}/"
    if options.cluster is not None:
        prefix += f"{options.cluster}/"
        if options.bookie_id is not None:
            prefix += f"{options.bookie_id}/ledgers/"
    return prefix


def pack_listing_prefixes(options: ReadOptions) -> list[str]:
    """Prefixes to list for packs besides :func:`listing_prefix` (which covers
    them unless it is narrowed to one bookie's ``ledgers/``)."""
    if options.cluster is None or options.bookie_id is None:
        return []
    return [f"{options.connection.prefix}/{options.cluster}/{options.bookie_id}/packs/"]


def _selects(options: ReadOptions, owner: Owner) -> bool:
    """Whether the options' cluster and bookie (each optional) name this owner."""
    return ((options.cluster is None or owner.cluster == options.cluster)
            and (options.bookie_id is None or owner.bookie_id == options.bookie_id))


def parse_pack_index_key(options: ReadOptions, key: str) -> Owner | None:
    """The owner of a pack index key the options select, else None."""
    head = re.escape(options.connection.prefix)
    match = re.fullmatch(rf"{head}/(?P<cluster>{_WORD})/(?P<bookie>{_WORD})/packs/"
                         rf"(?P<pack>{PACK_ID.pattern})/index", key)
    if match is None:
        return None
    owner = Owner(match["cluster"], match["bookie"])
    return owner if _selects(options, owner) else None


def parse_index_key(options: ReadOptions, key: str) -> tuple[Owner, int, int] | None:
    """``(owner, ledger_id, first_entry_id)`` of an index key we should read, else None."""
    parsed = parse_object_key(options, key)
    if parsed is None or parsed[3] is not ObjectKind.INDEX:
        return None
    return parsed[0], parsed[1], parsed[2]


def parse_object_key(options: ReadOptions,
                     key: str) -> tuple[Owner, int, int, ObjectKind, int] | None:
    """``(owner, ledger_id, first_entry_id, kind, byte_position)`` of one of our
    keys that the options select, else None."""
    head = re.escape(options.connection.prefix)
    match = re.fullmatch(rf"{head}/(?P<cluster>{_WORD})/(?P<bookie>{_WORD})/ledgers/(?P<tail>.+)",
                         key)
    if match is None:
        return None
    parsed = parse_tail(match["tail"])
    if parsed is None:
        return None
    owner = Owner(match["cluster"], match["bookie"])
    if not _selects(options, owner):
        return None
    if options.ledgers is not None and parsed.ledger_id not in options.ledgers:
        return None
    return owner, parsed.ledger_id, parsed.first_entry_id, parsed.kind, parsed.byte_position


def discover(store: ObjectStore, options: ReadOptions) -> list[OffloadedLedger]:
    """Every complete offloaded ledger the options select, in ledger id order."""
    return survey_offloaded(store, options)[0]


def survey_offloaded(store: ObjectStore, options: ReadOptions, *,
                     require_named: bool = True) -> tuple[list[OffloadedLedger], list[str]]:
    """``(complete ledgers, descriptions of incomplete ones)`` the options select.

    ``require_named=False``: a ledger named alone that S3 does not hold is left
    out rather than an error (live reads ask S3 only for what a node dropped)."""
    found: dict[tuple[Owner, int], list[str]] = defaultdict(list)
    held = _Held()
    pack_keys: list[tuple[Owner, str]] = []
    for info in (item for prefix in [listing_prefix(options), *pack_listing_prefixes(options)]
                 for item in store.list_objects(prefix)):
        pack_owner = parse_pack_index_key(options, info.key)
        if pack_owner is not None:
            pack_keys.append((pack_owner, info.key))
            continue
        parsed = parse_object_key(options, info.key)
        if parsed is None:
            continue
        owner, ledger_id, _first, kind, position = parsed
        if kind is ObjectKind.INDEX:
            found[(owner, ledger_id)].append(info.key)
        elif kind is ObjectKind.SEGMENT:
            held.segments.add(info.key)
        else:
            held.chunks[info.key.rsplit("/", 1)[0]].append((position, info.key))
    keys = [key for group in found.values() for key in group]
    with ThreadPoolExecutor(_FETCH_THREADS, thread_name_prefix="ledgerd-index") as pool:
        indexes = dict(zip(keys, pool.map(lambda k: decode_index(store.get_object(k), key=k),
                                          keys), strict=True))
        packs = list(zip(pack_keys, pool.map(
            lambda item: decode_pack_index(store.get_object(item[1]), key=item[1]), pack_keys),
            strict=True))
    ledgers: list[OffloadedLedger] = []
    incomplete: list[str] = []
    for (owner, ledger_id), group in sorted(found.items(), key=lambda item: item[0][1]):
        assembled = _assemble(owner, ledger_id, group, indexes, held,
                              include_open=options.include_open)
        if isinstance(assembled, str):
            incomplete.append(assembled)
        else:
            ledgers.append(assembled)
    ledgers = _with_packed(ledgers, packs, options)
    _refuse_duplicates(ledgers)
    if require_named:
        _require_named(ledgers, options)
    log.info("offloaded ledgers discovered", extra={
        "prefix": listing_prefix(options), "ledgers": len(ledgers),
        "segments": sum(len(ledger.segments) for ledger in ledgers),
        "incomplete": len(incomplete)})
    return ledgers, incomplete


def _pack_order(index_key: str) -> tuple[int, str]:
    """Packs in the order they were written (ids start with epoch milliseconds)."""
    pack_id = index_key.rsplit("/", 2)[-2]
    millis, _, rest = pack_id.partition("-")
    return int(millis), rest


def _with_packed(ledgers: list[OffloadedLedger], packs: list[tuple[tuple[Owner, str], Any]],
                 options: ReadOptions) -> list[OffloadedLedger]:
    """``ledgers`` plus the packed members the options select (rule 4)."""
    chosen: dict[tuple[Owner, int], OffloadedLedger] = {
        (ledger.owner, ledger.ledger_id): ledger for ledger in ledgers}
    alone = set(chosen)
    for (owner, index_key), pack in sorted(packs, key=lambda item: _pack_order(item[0][1])):
        data_key = index_key.removesuffix("index") + "data"
        for position, member in enumerate(pack.members):
            if options.ledgers is not None and member.ledger_id not in options.ledgers:
                continue
            if (owner, member.ledger_id) in alone:
                continue
            index = pack.segment_index(position, key=index_key)
            chosen[(owner, member.ledger_id)] = OffloadedLedger(
                member.ledger_id, owner, index.ledger,
                (Segment(data_key, index_key, index, base=member.offset, packed=True),))
    return sorted(chosen.values(), key=lambda ledger: ledger.ledger_id)


@dataclass
class _Held:
    """What the listing showed besides indexes: segment keys, and chunks by
    their segment's prefix (``…/seg-N``)."""

    segments: set[str] = field(default_factory=set)
    chunks: dict[str, list[tuple[int, str]]] = field(default_factory=lambda: defaultdict(list))


def _assemble(owner: Owner, ledger_id: int, index_keys: Iterable[str],
              indexes: dict[str, SegmentIndex], held: _Held, *,
              include_open: bool) -> OffloadedLedger | str:
    """The ledger, or why it cannot be read (its offload is incomplete)."""
    segments = sorted((Segment(key.removesuffix("index") + "segment", key, indexes[key])
                       for key in index_keys), key=lambda s: s.index.first_entry_id)
    if any(s.index.ledger.is_open for s in segments):
        return _assemble_open(owner, ledger_id, segments, held, include_open=include_open)
    facts = segments[0].index.ledger
    expected = 0
    for segment in segments:
        if segment.index.ledger != facts:
            raise Corruption(f"index {segment.index_key} describes ledger {ledger_id} "
                             f"differently from {segments[0].index_key}")
        if segment.index.first_entry_id != expected:
            break
        expected = segment.index.end_entry_id
    if expected != facts.last_entry_id + 1:
        log.warning("skipping a ledger whose offload is incomplete", extra={
            "ledger_id": ledger_id, "cluster": owner.cluster, "bookie_id": owner.bookie_id,
            "entries_covered": expected, "last_entry_id": facts.last_entry_id})
        return (f"ledger {ledger_id} ({owner.cluster}/{owner.bookie_id}): segments cover "
                f"entries 0..{expected - 1} of 0..{facts.last_entry_id}")
    return OffloadedLedger(ledger_id, owner, facts, tuple(segments))


def _assemble_open(owner: Owner, ledger_id: int, segments: list[Segment], held: _Held, *,
                   include_open: bool) -> OffloadedLedger | str:
    """A ledger tiered while open (or whose chunks are being consolidated): the
    segments from entry 0 on with no gap, each read from its ``segment`` object
    if the listing shows one, else from its chunks."""
    covered: list[Segment] = []
    expected = 0
    for segment in segments:
        chunks = tuple(sorted(held.chunks.get(segment.index_key.rsplit("/", 1)[0], [])))
        if segment.index.first_entry_id != expected or (
                segment.key not in held.segments and not chunks):
            break
        covered.append(segment if segment.key in held.segments
                       else Segment(segment.key, segment.index_key, segment.index, chunks))
        expected = segment.index.end_entry_id
    described = (f"ledger {ledger_id} ({owner.cluster}/{owner.bookie_id}): tiered while open, "
                 f"entries 0..{expected - 1} in S3")
    if not include_open:
        log.info("skipping a ledger tiered while open (include_open=false)", extra={
            "ledger_id": ledger_id, "entries_covered": expected})
        return described
    if not covered:
        return described
    latest = max((s.index.ledger for s in covered), key=lambda facts: facts.last_entry_id)
    return OffloadedLedger(ledger_id, owner, latest, tuple(covered), open=True)


def _refuse_duplicates(ledgers: list[OffloadedLedger]) -> None:
    owners: dict[int, list[Owner]] = defaultdict(list)
    for ledger in ledgers:
        owners[ledger.ledger_id].append(ledger.owner)
    clashes = {ledger_id: found for ledger_id, found in owners.items() if len(found) > 1}
    if clashes:
        ledger_id, found = next(iter(sorted(clashes.items())))
        raise InvalidSetting(
            f"ledger {ledger_id} is offloaded by more than one bookie "
            f"({', '.join(f'{o.cluster}/{o.bookie_id}' for o in found)}); set the cluster "
            "and bookie_id options to choose one")


def _require_named(ledgers: list[OffloadedLedger], options: ReadOptions) -> None:
    """Ledgers named one by one in ``ledgers`` must exist (ranges may have holes)."""
    if options.ledgers is None:
        return
    present = {ledger.ledger_id for ledger in ledgers}
    missing = [lo for lo, hi in options.ledgers.ranges if lo == hi and lo not in present]
    if missing:
        raise InvalidSetting(f"option ledgers names ledger(s) {missing} that are not fully "
                             f"offloaded under {listing_prefix(options)!r}")
