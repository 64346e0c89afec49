"""Which offloaded segments a read covers: a paginated listing plus the index objects.

Runs on the driver while Spark plans the scan.  Index keys are found under
``{prefix}/`` (narrowed to ``{cluster}/`` and ``{bookie_id}/ledgers/`` when
those options are given), each index is fetched once and decoded with
:func:`offload._format.decode_index`, and the segments are grouped per ledger.

Rules (docs/spark.md):

1. A ledger is read only when its segments cover entries ``0..last_entry_id``
   with no gap; one whose offload is still under way (some indexes missing) is
   skipped with a warning, or is an error if the ``ledgers`` option names it.
2. Ledger ids are unique per bookie only, and rows carry only ``ledger_id``:
   the same ledger id under two (cluster, bookie) pairs is an error asking for
   the ``cluster``/``bookie_id`` options, never duplicated rows.
3. Segment objects are not listed here; a missing one fails the read naming
   its key.
"""

from __future__ import annotations

import logging
import re
from collections import defaultdict
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from common.errors import Corruption, InvalidSetting

from .._format import LedgerFacts, SegmentIndex, decode_index
from .._keys import ObjectKind, parse_tail
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


@dataclass(frozen=True)
class OffloadedLedger:
    ledger_id: int
    owner: Owner
    facts: LedgerFacts
    segments: tuple[Segment, ...]

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


def parse_index_key(options: ReadOptions, key: str) -> tuple[Owner, int, int] | None:
    """``(owner, ledger_id, first_entry_id)`` of an index key we should read, else None."""
    head = re.escape(options.connection.prefix)
    match = re.fullmatch(rf"{head}/(?P<cluster>{_WORD})/(?P<bookie>{_WORD})/ledgers/(?P<tail>.+)",
                         key)
    if match is None:
        return None
    parsed = parse_tail(match["tail"])
    if parsed is None or parsed.kind is not ObjectKind.INDEX:
        return None
    owner = Owner(match["cluster"], match["bookie"])
    if options.cluster is not None and owner.cluster != options.cluster:
        return None
    if options.bookie_id is not None and owner.bookie_id != options.bookie_id:
        return None
    if options.ledgers is not None and parsed.ledger_id not in options.ledgers:
        return None
    return owner, parsed.ledger_id, parsed.first_entry_id


def discover(store: ObjectStore, options: ReadOptions) -> list[OffloadedLedger]:
    """Every complete offloaded ledger the options select, in ledger id order."""
    return survey_offloaded(store, options)[0]


def survey_offloaded(store: ObjectStore,
                     options: ReadOptions) -> tuple[list[OffloadedLedger], list[str]]:
    """``(complete ledgers, descriptions of incomplete ones)`` the options select."""
    found: dict[tuple[Owner, int], list[str]] = defaultdict(list)
    for info in store.list_objects(listing_prefix(options)):
        parsed = parse_index_key(options, info.key)
        if parsed is not None:
            owner, ledger_id, _ = parsed
            found[(owner, ledger_id)].append(info.key)
    keys = [key for group in found.values() for key in group]
    with ThreadPoolExecutor(_FETCH_THREADS, thread_name_prefix="ledgerd-index") as pool:
        indexes = dict(zip(keys, pool.map(lambda k: decode_index(store.get_object(k), key=k),
                                          keys), strict=True))
    ledgers: list[OffloadedLedger] = []
    incomplete: list[str] = []
    for (owner, ledger_id), group in sorted(found.items(), key=lambda item: item[0][1]):
        assembled = _assemble(owner, ledger_id, group, indexes)
        if isinstance(assembled, str):
            incomplete.append(assembled)
        else:
            ledgers.append(assembled)
    _refuse_duplicates(ledgers)
    _require_named(ledgers, options)
    log.info("offloaded ledgers discovered", extra={
        "prefix": listing_prefix(options), "ledgers": len(ledgers),
        "segments": sum(len(ledger.segments) for ledger in ledgers),
        "incomplete": len(incomplete)})
    return ledgers, incomplete


def _assemble(owner: Owner, ledger_id: int, index_keys: Iterable[str],
              indexes: dict[str, SegmentIndex]) -> OffloadedLedger | str:
    """The ledger, or why it cannot be read (its offload is incomplete)."""
    segments = sorted((Segment(key.removesuffix("index") + "segment", key, indexes[key])
                       for key in index_keys), key=lambda s: s.index.first_entry_id)
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
