"""Packing many small sealed ledgers into shared objects (STYLE 8: persisted steps).

A ledger of at most ``pack_ledger_bytes_max`` frame bytes is not given a
``segment`` and an ``index`` of its own: it becomes a *member* of a pack
(:mod:`offload._pack_format`), so a million 1 KiB ledgers are tens of objects,
not two million.  Its offload record then points at ``(pack_key,
pack_offset, segment_bytes, pack_index_bytes, pack_bytes)``.

Steps of packing, in order (``PackStep`` names them for logs, tests and the
hook); each state a crash can leave is resolved by :meth:`Packer.recover` at
start-up::

    mark_packing      set_offloads(IN_PROGRESS, pack_key) of every member
                      (one checkpoint: all or none)
    upload_pack_part  UploadPart of each part-size range of ``data`` (packs
                      larger than one part), ``upload_concurrency`` in flight
    put_pack          ``data`` complete: one PUT, or CompleteMultipartUpload,
                      then HeadObject: size and ETag (MD5, or the multipart ETag
                      derived from the parts' MD5s) checked
    write_pack_index  PUT ``index`` (Content-MD5)
    mark_packed       set_offloads(OFFLOADED, pack location) of every member
                      still there (one checkpoint)

A crash before ``write_pack_index`` leaves members IN_PROGRESS naming a pack
without a valid index: recovery deletes whatever of the pack exists (and
aborts its upload) and queues the members again.  A crash after it: recovery
checks the index against the members and marks them (``mark_packed``).

Rewriting a pack whose live fraction (bytes of members whose ledger still
points at it, over its size) fell below ``pack_live_fraction_min``: its live
members' bytes are copied (ranged GETs of the old ``data``, every frame's CRC
checked) into a new pack (``upload_pack_part``/``put_pack``,
``write_pack_index``), the members are repointed (``mark_packed``, one
checkpoint), and the old pack is deleted (``delete_pack``) once
``pack_delete_delay_s`` has passed, so reads that located a member in it
just before still find it.  Nothing points at a pack before its index is
written, and nothing points at the old one after the repoint: a crash
anywhere leaves at most a pack no ledger points at, which recovery's sweep
deletes.  A pack is never modified: members are only ever added to new ones.
"""

from __future__ import annotations

import contextlib
import enum
import logging
import secrets
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Executor
from dataclasses import dataclass, field, replace

from common.errors import BadRequest, CorruptRecord, NoSuchLedger, invariant
from ledger import LedgerInfo, LedgerState, OffloadInfo, OffloadState, TierPosition

from ._bounded import BoundedTasks
from ._chunks import Chunk, ChunkCutter, md5_of, multipart_etag, object_etag_matches
from ._errors import ObjectNotFound, RemoteStorageError, UploadNotFound
from ._format import (
    IndexBuilder,
    LedgerFacts,
    decode_index,
    encode_frame_header,
    encode_index,
    frame_bytes,
    iter_frames,
)
from ._keys import KeyLayout
from ._multipart import require_etag
from ._pack_format import PackIndex, PackMember, decode_pack_index, encode_pack_index
from ._source import PackSource
from ._store import ObjectStore, read_indexed_range
from .settings import OffloadSettings

log = logging.getLogger("ledgerd.offload.pack")


class PackStep(enum.StrEnum):
    MARK_PACKING = "mark_packing"
    UPLOAD_PACK_PART = "upload_pack_part"
    PUT_PACK = "put_pack"
    WRITE_PACK_INDEX = "write_pack_index"
    MARK_PACKED = "mark_packed"
    DELETE_PACK = "delete_pack"


# Called after each step with the pack's data key; tests stop a process there.
PackHook = Callable[[PackStep, str], None]


def pack_frame_bytes(ledger: LedgerInfo) -> int:
    """The bytes a ledger's frames take in a pack (its index aside)."""
    return frame_bytes(ledger.last_add_confirmed, ledger.length)


def packable(ledger: LedgerInfo, settings: OffloadSettings) -> bool:
    """Whether a ledger goes into a pack rather than objects of its own."""
    return (settings.pack and ledger.state is LedgerState.CLOSED
            and ledger.tier == TierPosition()
            and pack_frame_bytes(ledger) <= settings.pack_ledger_bytes_max)


def points_into(info: OffloadInfo, data_key: str, member: PackMember) -> bool:
    """Whether a ledger's record points at this member of this pack (it is live
    there): not deleted, not repointed to another pack since."""
    return (info.pack_key == data_key and info.state is OffloadState.OFFLOADED
            and info.pack_offset == member.offset)


def member_bytes(info: OffloadInfo) -> int:
    return info.segment_bytes + info.pack_index_bytes


@dataclass
class PackTable:
    """Live bytes per pack, from the offload records (rebuilt at start-up;
    the service keeps it as ledgers are packed and deleted)."""

    live_bytes: dict[str, int] = field(default_factory=dict)
    size_bytes: dict[str, int] = field(default_factory=dict)

    def add(self, info: OffloadInfo) -> None:
        if info.pack_key is None or info.state is not OffloadState.OFFLOADED:
            return
        self.live_bytes[info.pack_key] = self.live_bytes.get(info.pack_key, 0) + member_bytes(info)
        self.size_bytes[info.pack_key] = info.pack_bytes

    def remove(self, info: OffloadInfo) -> None:
        if info.pack_key is None or info.pack_key not in self.live_bytes:
            return
        self.live_bytes[info.pack_key] -= member_bytes(info)

    def drop(self, pack_key: str) -> None:
        self.live_bytes.pop(pack_key, None)
        self.size_bytes.pop(pack_key, None)

    def live_fraction(self, pack_key: str) -> float:
        size = self.size_bytes.get(pack_key, 0)
        return 1.0 if size == 0 else self.live_bytes.get(pack_key, 0) / size


@dataclass(frozen=True)
class PackResult:
    data_key: str
    size_bytes: int
    # Ledgers now pointing at the pack, and their records.
    packed: dict[int, OffloadInfo]


class Packer:
    def __init__(self, source: PackSource, store: ObjectStore, settings: OffloadSettings, *,
                 executor: Executor, step_hook: PackHook | None = None,
                 clock: Callable[[], float] = time.time,
                 delete_ledger_objects: Callable[[int], object] = lambda ledger_id: None,
                 delete_unindexed: bool = True) -> None:
        """``delete_ledger_objects`` deletes what an earlier offload of one ledger
        of its own left under its prefix (the offloader's ``delete_objects``).

        ``delete_unindexed``: a pack whose index PUT failed is deleted at once.
        Cluster mode says no: the PUT may have succeeded unseen, and once this
        node's locks expired another node may have adopted the pack (its members
        resolved to it); a pack nothing points at is deleted by the audit."""
        self._delete_unindexed = delete_unindexed
        self._source, self._store, self._settings = source, store, settings
        self._executor = executor
        self._hook: PackHook = step_hook or (lambda step, key: None)
        self._clock = clock
        self._delete_ledger_objects = delete_ledger_objects
        self._last_ms = 0
        self.layout = KeyLayout(settings)

    def new_pack_id(self) -> str:
        """``{epoch_ms}-{random}``: ids of one packer only grow, so a pack rewritten
        is older than its rewrite (Spark reads a ledger found in both from the
        newer); the random part keeps ids unique across bookies and restarts."""
        self._last_ms = max(int(self._clock() * 1000), self._last_ms + 1)
        return f"{self._last_ms}-{secrets.token_hex(6)}"

    # --- packing ------------------------------------------------------------------

    def pack(self, ledger_ids: Iterable[int]) -> PackResult | None:
        """Pack these ledgers (those still CLOSED, small and not offloaded) into a
        new pack; None when none of them is left to pack."""
        ledgers = self._packable(ledger_ids)
        if not ledgers:
            return None
        pack_id = self.new_pack_id()
        data_key = self.layout.pack_data_key(pack_id)
        marking = {ledger.ledger_id: OffloadInfo(
            state=OffloadState.IN_PROGRESS, bucket=self._store.bucket,
            key_prefix=self.layout.ledger_prefix(ledger.ledger_id), pack_key=data_key,
            failures=ledger.offload.failures) for ledger in ledgers}
        marked = self._set_offloads(marking)
        self._hook(PackStep.MARK_PACKING, data_key)
        ledgers = [ledger for ledger in ledgers if ledger.ledger_id in marked]
        if not ledgers:
            return None  # every one deleted meanwhile: nothing was written
        writer = _PackWriter(self, data_key)
        try:
            for ledger in ledgers:
                self._add_ledger(writer, ledger)
            pack = writer.finish()
        except BaseException:
            writer.abort()
            raise
        try:
            self._write_pack_index(data_key, pack)
        except Exception:
            # Nothing points at the pack: delete it now rather than at the next
            # start (the members go FAILED and are packed again later).
            if self._delete_unindexed:
                with contextlib.suppress(Exception):
                    self.delete_pack(data_key)
            raise
        # What an earlier offload of a ledger of its own may have left (a failed
        # attempt, or one cut short by a crash) goes before it is marked, as in
        # the offloader: every state that can leave strays is still IN_PROGRESS.
        for ledger in ledgers:
            if ledger.offload.failures or (ledger.offload.state is OffloadState.IN_PROGRESS
                                           and ledger.offload.pack_key is None):
                self._delete_ledger_objects(ledger.ledger_id)
        return self._mark_packed(data_key, pack, {lid: marked[lid] for lid in marked})

    def _packable(self, ledger_ids: Iterable[int]) -> list[LedgerInfo]:
        ledgers: list[LedgerInfo] = []
        for ledger_id in sorted(set(ledger_ids)):
            try:
                ledger = self._source.get_ledger(ledger_id)
            except NoSuchLedger:
                continue
            if packable(ledger, self._settings) and (
                    ledger.offload.state is not OffloadState.OFFLOADED):
                ledgers.append(ledger)
        return ledgers

    def _add_ledger(self, writer: _PackWriter, ledger: LedgerInfo) -> None:
        builder = IndexBuilder(0)
        start = writer.position
        for entry in self._source.scan_entries(ledger.ledger_id, 0, ledger.last_add_confirmed):
            header = encode_frame_header(entry.entry_id, entry.payload, entry.crc32c)
            builder.add(entry.entry_id, len(header) + len(entry.payload))
            writer.add(header, entry.payload)
        invariant(builder.entry_count == ledger.last_add_confirmed + 1,
                  f"ledger {ledger.ledger_id}: the engine gave {builder.entry_count} entries")
        facts = LedgerFacts(ledger_id=ledger.ledger_id, last_entry_id=ledger.last_add_confirmed,
                            length_bytes=ledger.length, created_at=ledger.created_at,
                            closed_at=ledger.closed_at or ledger.created_at,
                            metadata=dict(ledger.metadata))
        index = encode_index(builder.build(facts))
        writer.add(index)
        writer.members.append(PackMember(ledger_id=ledger.ledger_id, offset=start,
                                         segment_length_bytes=builder.length_bytes,
                                         index_length_bytes=len(index)))
        writer.member_indexes.append(index)

    def _write_pack_index(self, data_key: str, pack: PackIndex) -> None:
        key = self.layout.pack_of(data_key)[0] + "index"
        data = encode_pack_index(pack)
        md5_hex, md5_b64 = md5_of(data)
        require_etag(self._store.put_object(key, data, content_md5=md5_b64), md5_hex,
                     "PutObject", key)
        self._hook(PackStep.WRITE_PACK_INDEX, data_key)

    def _mark_packed(self, data_key: str, pack: PackIndex,
                     previous: Mapping[int, OffloadInfo]) -> PackResult:
        now = self._clock()
        infos = {member.ledger_id: replace(
            previous[member.ledger_id], state=OffloadState.OFFLOADED, segment_bytes=
            member.segment_length_bytes, offloaded_at=now, error=None, failures=0,
            retry_at=None, upload_key=None, upload_id=None, upload_parts=(),
            pack_key=data_key, pack_offset=member.offset,
            pack_index_bytes=member.index_length_bytes, pack_bytes=pack.data_length_bytes)
            for member in pack.members if member.ledger_id in previous}
        marked = self._set_offloads(infos)
        self._hook(PackStep.MARK_PACKED, data_key)
        log.info("ledgers packed", extra={"pack_key": data_key, "ledgers": len(marked),
                                          "members": len(pack.members),
                                          "size_bytes": pack.data_length_bytes})
        return PackResult(data_key, pack.data_length_bytes, marked)

    def _set_offloads(self, infos: Mapping[int, OffloadInfo]) -> dict[int, OffloadInfo]:
        """Record every ledger's state in one checkpoint, leaving out those deleted
        meanwhile (``set_offloads`` changes nothing when one is gone)."""
        pending = dict(infos)
        while pending:
            try:
                written = self._source.set_offloads(pending)
                return {ledger.ledger_id: pending[ledger.ledger_id] for ledger in written}
            except (NoSuchLedger, BadRequest):
                # Deleted, or (a rewrite's repoint) its local copy dropped by GC
                # since this run read its record: keep the drop, leave the ledger out.
                for ledger_id, info in list(pending.items()):
                    try:
                        current = self._source.get_ledger(ledger_id).offload
                    except NoSuchLedger:
                        del pending[ledger_id]
                        continue
                    if current.local_deleted and not info.local_deleted:
                        pending[ledger_id] = replace(info, local_deleted=True)
        return pending

    # --- rewriting --------------------------------------------------------------------

    def rewrite(self, data_key: str, *, mark_by: float | None = None) -> PackResult | None:
        """Copy the live members of a pack into a new one and repoint them; the
        caller deletes the old pack (after ``pack_delete_delay_s``).  None when
        no member is live (the old pack is garbage as it is).

        ``mark_by`` (epoch seconds): repoint only before then, else delete the
        new pack and raise.  Until the repoint no ledger points at the new pack,
        and a cluster's sweep deletes packs nothing points at once they are old
        enough (``node/_cluster_packs.py``): a rewrite must not outlive that."""
        index_key = self.layout.pack_of(data_key)[0] + "index"
        pack = decode_pack_index(self._store.get_object(index_key), key=index_key)
        live: dict[int, OffloadInfo] = {}
        for member in pack.members:
            try:
                info = self._source.get_ledger(member.ledger_id).offload
            except NoSuchLedger:
                continue
            if points_into(info, data_key, member):
                live[member.ledger_id] = info
        if not live:
            return None
        # Beside the old pack, under its bookie's prefix (in cluster mode another
        # node may rewrite it): a reader by owner finds the member in the newer.
        new_key = self.layout.sibling_pack_data_key(data_key, self.new_pack_id())
        writer = _PackWriter(self, new_key)
        try:
            for run in _runs([m for m in pack.members if m.ledger_id in live],
                             self._settings.part_size_bytes):
                self._copy_run(writer, data_key, pack, run)
            new_pack = writer.finish()
        except BaseException:
            writer.abort()
            raise
        self._write_pack_index(new_key, new_pack)
        if mark_by is not None and self._clock() > mark_by:
            with contextlib.suppress(Exception):
                self.delete_pack(new_key)
            raise RemoteStorageError("rewrite", data_key, 1, "it outlived its time to "
                                     "repoint: the new pack was deleted, the members stay "
                                     "where they are")
        result = self._mark_packed(new_key, new_pack, live)
        log.info("pack rewritten", extra={"pack_key": data_key, "new_pack_key": new_key,
                                          "members_before": len(pack.members),
                                          "members_live": len(live)})
        return result

    def _copy_run(self, writer: _PackWriter, data_key: str, pack: PackIndex,
                  run: list[PackMember]) -> None:
        """Copy consecutive members with one ranged GET, checking each one."""
        start, end = run[0].offset, run[-1].end
        data = read_indexed_range(self._store, data_key, start, end, what="pack data")
        for member in run:
            at = member.offset - start
            segment = data[at:at + member.segment_length_bytes]
            index_bytes = data[at + member.segment_length_bytes:at + member.length_bytes]
            index = decode_index(index_bytes, key=data_key)
            invariant(index.ledger.ledger_id == member.ledger_id,
                      f"{data_key}: member at {member.offset} holds ledger "
                      f"{index.ledger.ledger_id}, not {member.ledger_id}")
            count = sum(1 for _ in iter_frames(segment, key=data_key, offset=member.offset,
                                               first_entry_id=0))
            if count != index.entry_count:
                raise CorruptRecord(data_key, member.offset,
                                    f"ledger {member.ledger_id}: {count} frames, its index "
                                    f"says {index.entry_count}")
            writer.members.append(replace(member, offset=writer.position))
            writer.member_indexes.append(index_bytes)
            writer.add(segment, index_bytes)

    # --- deleting and recovering ------------------------------------------------------

    def delete_pack(self, data_key: str) -> None:
        prefix = self.layout.pack_of(data_key)[0]
        for upload in self._store.list_multipart_uploads(prefix):
            with contextlib.suppress(UploadNotFound):
                self._store.abort_multipart_upload(upload.key, upload.upload_id)
        self._store.delete_objects([data_key, prefix + "index"])
        self._hook(PackStep.DELETE_PACK, data_key)
        log.info("pack deleted", extra={"pack_key": data_key})

    def recover(self, packing: Mapping[str, list[LedgerInfo]]) -> list[int]:
        """Resolve packs whose members a crash left IN_PROGRESS (``packing``:
        pack data key -> those ledgers): a pack with a valid index holding them
        is kept and its members marked; any other is deleted and its members
        returned, to be packed again."""
        again: list[int] = []
        for data_key, ledgers in packing.items():
            if self._adopt(data_key, ledgers):
                continue
            self.delete_pack(data_key)
            again.extend(ledger.ledger_id for ledger in ledgers)
        return again

    def _adopt(self, data_key: str, ledgers: list[LedgerInfo]) -> bool:
        index_key = self.layout.pack_of(data_key)[0] + "index"
        try:
            pack = decode_pack_index(self._store.get_object(index_key), key=index_key)
            size = self._store.head_object(data_key).size_bytes
        except (ObjectNotFound, CorruptRecord) as exc:
            log.info("discarding a pack cut short", extra={"pack_key": data_key,
                                                           "reason": str(exc)})
            return False
        members = {member.ledger_id for member in pack.members}
        if size != pack.data_length_bytes or any(
                ledger.ledger_id not in members for ledger in ledgers):
            log.warning("discarding a pack that does not hold its members",
                        extra={"pack_key": data_key})
            return False
        self._mark_packed(data_key, pack, {ledger.ledger_id: ledger.offload
                                           for ledger in ledgers})
        return True

    def packs_in_bucket(self, bookie_id: str | None = None) -> set[str]:
        """Data keys of the packs of ``bookie_id`` (default: this bookie) with an
        object or an open upload in the bucket."""
        prefix = self.layout.packs_prefix(bookie_id)
        keys = [info.key for info in self._store.list_objects(prefix)]
        keys += [upload.key for upload in self._store.list_multipart_uploads(prefix)]
        return {data_key for key in keys
                if (data_key := self.layout.pack_data_key_of(key)) is not None}


def _runs(members: list[PackMember], size_bytes_max: int) -> list[list[PackMember]]:
    """Members in runs of adjacent ones, each run at most ``size_bytes_max``
    (or one member): one ranged GET each."""
    runs: list[list[PackMember]] = []
    for member in members:
        last = runs[-1] if runs else None
        if (last is not None and last[-1].end == member.offset
                and member.end - last[0].offset <= size_bytes_max):
            last.append(member)
        else:
            runs.append([member])
    return runs


class _PackWriter:
    """A pack's ``data`` as it is produced: one PUT if it fits one part, else a
    multipart upload of part-size ranges, ``upload_concurrency`` in flight."""

    def __init__(self, packer: Packer, key: str) -> None:
        self._packer, self._store, self.key = packer, packer._store, key
        settings = packer._settings
        self._cutter = ChunkCutter(settings.part_size_bytes)
        self._tasks: BoundedTasks[tuple[int, str, str]] = BoundedTasks(
            packer._executor, settings.upload_concurrency)
        self._upload_id: str | None = None
        self.position = 0
        self.members: list[PackMember] = []
        self.member_indexes: list[bytes] = []

    def add(self, *pieces: bytes | memoryview) -> None:
        for chunk in self._cutter.add(*pieces):
            self._submit(chunk)
        self.position += sum(len(piece) for piece in pieces)

    def _submit(self, chunk: Chunk) -> None:
        if self._upload_id is None:
            self._upload_id = self._store.create_multipart_upload(self.key)
        upload_id = self._upload_id
        number = chunk.byte_position // self._cutter.chunk_size_bytes + 1

        def upload() -> tuple[int, str, str]:
            md5_hex = md5_of(chunk.data)[0]
            etag = self._store.upload_part(self.key, upload_id, number, chunk.data)
            require_etag(etag, md5_hex, "UploadPart", self.key)
            self._packer._hook(PackStep.UPLOAD_PACK_PART, self.key)
            return number, etag, md5_hex

        self._tasks.submit(upload)

    def finish(self) -> PackIndex:
        last = self._cutter.finish()
        if self._upload_id is None:
            self._store.put_object(self.key, last.data)
            expected = md5_of(last.data)[0]
        else:
            if last.data:
                self._submit(last)
            parts = sorted(self._tasks.results())
            with contextlib.suppress(UploadNotFound):  # a retried Complete: HEAD decides
                self._store.complete_multipart_upload(
                    self.key, self._upload_id, [(number, etag) for number, etag, _ in parts])
            expected = multipart_etag([md5 for _, _, md5 in parts])
        found = self._store.head_object(self.key)
        if found.size_bytes != self.position or not object_etag_matches(found.etag, expected):
            self._store.delete_objects([self.key])
            raise CorruptRecord(self.key, 0, f"pack data is {found.size_bytes} bytes with ETag "
                                             f"{found.etag}, expected {self.position} bytes, "
                                             f"{expected}")
        self._packer._hook(PackStep.PUT_PACK, self.key)
        return PackIndex(self.position, tuple(self.members), tuple(self.member_indexes))

    def abort(self) -> None:
        self._tasks.cancel()
        if self._upload_id is not None:
            try:
                self._store.abort_multipart_upload(self.key, self._upload_id)
            except Exception as exc:  # the recovery sweep aborts it: nothing points at it
                log.warning("could not abort a pack upload", extra={
                    "key": self.key, "error": str(exc)})
