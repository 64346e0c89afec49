"""Request and response bodies of REST API v1 (DESIGN.md §5), as pydantic models.

Field names are the contract; conversion from the engine's plain values lives in
the ``from_*`` constructors so that routes stay one line per call.
"""

from __future__ import annotations

import base64
import binascii
import enum
import json
from typing import Annotated, Any

from pydantic import (
    AliasChoices,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    field_validator,
)
from pydantic.fields import FieldInfo

from compaction import LogUsage
from ledger import LedgerInfo, OffloadInfo, OffloadState

from .errors import ErrorCode

ID_MAX = 2**63 - 1
CRC32C_MAX = 2**32 - 1
# Ids reach 2^63-1: generators need the format to pick a 64-bit type.
INT64: dict[str, Any] = {"format": "int64"}
# Exactly what base64.b64decode(validate=True) takes: padded standard base64.
BASE64_PATTERN = r"^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$"
BASE64: dict[str, Any] = {"format": "byte", "pattern": BASE64_PATTERN}

Id = Annotated[int, Field(ge=0, le=ID_MAX, json_schema_extra=INT64)]
# An entry id, or -1 before the first one (last-add-confirmed of an empty ledger).
IdOrNone = Annotated[int, Field(ge=-1, le=ID_MAX, json_schema_extra=INT64)]
Count = Annotated[int, Field(ge=0, json_schema_extra=INT64)]
Crc32c = Annotated[int, Field(ge=0, le=CRC32C_MAX, json_schema_extra=INT64)]
# Documented only: the server decodes payloads itself (b64decode(validate=True)).
Base64 = Annotated[str, Field(json_schema_extra=BASE64)]


class LedgerStateName(enum.StrEnum):
    OPEN = "OPEN"
    FENCED = "FENCED"
    CLOSED = "CLOSED"


class OffloadStateName(enum.StrEnum):
    NONE = "NONE"
    PENDING = "PENDING"
    IN_PROGRESS = "IN_PROGRESS"
    OFFLOADED = "OFFLOADED"
    FAILED = "FAILED"


def _utf8(value: str) -> str:
    # JSON may carry lone surrogates ("\ud800"); they have no UTF-8 form and the
    # engine stores UTF-8, so refuse them here rather than fail deep inside.
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError("must be valid Unicode (no lone surrogates)") from exc
    return value


def _whole(value: object) -> object:
    # JSON Schema's integer includes 3.0; strict mode alone would refuse it.
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


Quorum = Annotated[int, Field(ge=1, le=1000), BeforeValidator(_whole)]


class _Request(BaseModel):
    # Strict: a boolean is true or false, never 0, 1 or "yes" (the spec says boolean).
    model_config = ConfigDict(extra="forbid", populate_by_name=True, strict=True)


def _aliases(field: FieldInfo) -> list[str]:
    """The spellings a request field takes besides its own name (BookKeeper's camelCase)."""
    alias = field.validation_alias
    if not isinstance(alias, AliasChoices):
        return []
    return [choice for choice in alias.choices[1:] if isinstance(choice, str)]


def _document_aliases(schema: dict[str, Any], model: type[BaseModel]) -> None:
    """List each field's camelCase spelling as a property of its own.  A body gives
    one spelling per field: the server refuses both, the second being an unknown
    key.  Every field is optional; its default is said in words, not as ``default``,
    which generated clients would send for the spelling not chosen."""
    properties = schema.setdefault("properties", {})
    both: list[dict[str, Any]] = []
    for name, field in model.model_fields.items():
        assert not field.is_required(), "one spelling of a field cannot be required"
        own = properties[name]
        default = own.pop("default")
        own["description"] = f"absent: {json.dumps(default)}"
        for alias in _aliases(field):
            properties[alias] = {**own, "title": alias,
                                 "description": f"BookKeeper's spelling of `{name}`"}
            both.append({"required": [name, alias]})
    if both:
        schema["not"] = {"anyOf": both}


class _AdminRequest(_Request):
    model_config = ConfigDict(json_schema_extra=_document_aliases)


# --- ledgers ----------------------------------------------------------------


class Problem(BaseModel):
    """RFC 9457 problem details; ``code`` is one of BookKeeper's error names."""

    type: str = Field(description="`urn:ledgerd:error:` followed by the code")
    title: str = Field(description="the code's fixed title")
    status: int = Field(ge=400, le=599, description="the HTTP status, repeated")
    detail: str = Field(description="what went wrong, for people (do not parse it)")
    code: ErrorCode = Field(description="what went wrong, for programs: switch on this")


class Offload(BaseModel):
    state: OffloadStateName
    bucket: str | None
    key_prefix: str | None
    segment_bytes: Count
    offloaded_at: float | None = Field(description="seconds since the epoch")
    local_deleted: bool
    error: str | None
    failures: Count = Field(default=0, description="offload attempts that failed in a row")
    next_retry_at: float | None = Field(
        default=None, description="while FAILED: when the server retries by itself "
                                  "(seconds since the epoch); a request retries at once"
    )
    tiered_entries: Count = Field(
        default=0, description="entries in S3 already, tiered while the ledger was open "
                               "(TIER_OPEN_LEDGERS)"
    )
    local_first_entry_id: Count = Field(
        default=0, description="entries below it have no local copy any more (tiered, "
                               "then dropped by GC): reads of them go to S3"
    )
    pack_key: str | None = Field(
        default=None, description="OFFLOADED in a pack shared with other small ledgers: "
                                  "the pack's data object (null: objects of its own under "
                                  "key_prefix)"
    )
    bytes_done: Count | None = Field(
        default=None, description="while IN_PROGRESS: segment bytes uploaded so far"
    )
    bytes_total: Count | None = Field(
        default=None, description="while IN_PROGRESS: segment bytes to upload in all"
    )

    @classmethod
    def from_ledger(cls, ledger: LedgerInfo, progress: tuple[int, int] | None = None) -> Offload:
        return cls.from_info(ledger.offload, progress, tiered_entries=ledger.tier.entry_id,
                             local_first_entry_id=ledger.local_first_entry_id)

    @classmethod
    def from_info(cls, info: OffloadInfo, progress: tuple[int, int] | None = None, *,
                  tiered_entries: int = 0, local_first_entry_id: int = 0) -> Offload:
        done, total = progress if progress is not None else (None, None)
        return cls(
            tiered_entries=tiered_entries,
            local_first_entry_id=local_first_entry_id,
            bytes_done=done,
            bytes_total=total,
            state=OffloadStateName(str(info.state)),
            bucket=info.bucket,
            key_prefix=info.key_prefix,
            segment_bytes=info.segment_bytes,
            offloaded_at=info.offloaded_at,
            local_deleted=info.local_deleted,
            error=info.error,
            failures=info.failures,
            next_retry_at=info.retry_at if info.state is OffloadState.FAILED else None,
            pack_key=info.pack_key if info.state is OffloadState.OFFLOADED else None,
        )


class Ledger(BaseModel):
    ledger_id: Id
    state: LedgerStateName
    last_add_confirmed: IdOrNone = Field(description="-1 while the ledger is empty")
    length: Count = Field(description="total payload bytes")
    entries: Count
    created_at: float = Field(description="seconds since the epoch")
    closed_at: float | None = Field(description="seconds since the epoch")
    metadata: dict[str, str]
    offload: Offload

    @classmethod
    def from_info(cls, info: LedgerInfo) -> Ledger:
        return cls(
            ledger_id=info.ledger_id,
            state=LedgerStateName(str(info.state)),
            last_add_confirmed=info.last_add_confirmed,
            length=info.length,
            entries=info.entries,
            created_at=info.created_at,
            closed_at=info.closed_at,
            metadata=dict(info.metadata),
            offload=Offload.from_ledger(info),
        )


class CreateLedger(_Request):
    password: str = ""
    metadata: dict[str, str] = Field(default_factory=dict)
    # Cluster mode only (a standalone server refuses them): ensemble size E, write
    # quorum Qw, ack quorum Qa, with E >= Qw >= Qa >= 1; defaults from the settings.
    ensemble_size: Quorum | None = Field(default=None,
                                         description="cluster mode: bookies per fragment (E)")
    write_quorum: Quorum | None = Field(default=None,
                                        description="cluster mode: copies of each entry (Qw)")
    ack_quorum: Quorum | None = Field(default=None,
                                      description="cluster mode: copies before the ack (Qa)")

    @field_validator("password")
    @classmethod
    def _password_utf8(cls, value: str) -> str:
        return _utf8(value)

    @field_validator("metadata")
    @classmethod
    def _metadata_utf8(cls, value: dict[str, str]) -> dict[str, str]:
        for key, item in value.items():
            _utf8(key)
            _utf8(item)
        return value


class LedgerList(BaseModel):
    ledgers: list[Ledger]
    next_after: Id | None = Field(description="pass as `after` for the next page; null at the end")


class EntryAdded(BaseModel):
    entry_id: Id
    last_add_confirmed: Id
    crc32c: Crc32c


class BatchAppend(_Request):
    # minItems is documented here, maxItems (MAX_BATCH_ENTRIES) by the app from its
    # settings; the engine checks both (LedgerLimits.check_batch), once.
    entries: list[Base64] = Field(
        description="base64-encoded payloads, appended in order",
        json_schema_extra={"minItems": 1},
    )

    def payloads(self) -> list[bytes]:
        out = []
        for index, text in enumerate(self.entries):
            try:
                out.append(base64.b64decode(text, validate=True))
            except (binascii.Error, ValueError) as exc:
                raise ValueError(f"entries[{index}] is not valid base64") from exc
        return out


class BatchAdded(BaseModel):
    first_entry_id: Id
    last_entry_id: Id
    last_add_confirmed: Id


class EntryOut(BaseModel):
    entry_id: Id
    crc32c: Crc32c
    payload: Base64 = Field(description="the payload, base64")


class EntryPage(BaseModel):
    entries: list[EntryOut]
    next_start: Id | None = Field(
        description="pass as `start` for the rest of the range; null when the range is done"
    )


# --- admin ------------------------------------------------------------------


class GcRequest(_AdminRequest):
    force_major: bool = Field(
        default=False, validation_alias=AliasChoices("force_major", "forceMajor")
    )
    force_minor: bool = Field(
        default=False, validation_alias=AliasChoices("force_minor", "forceMinor")
    )


class GcStatus(BaseModel):
    is_in_force_gc: bool


class GcProgress(BaseModel):
    """The compaction running now (``running`` false between runs)."""

    running: bool = False
    kind: str = Field(default="", description="major or minor")
    log_id: Count | None = Field(default=None, description="entry log being compacted")
    bytes_done: Count = 0
    bytes_total: Count = 0


class GcRun(BaseModel):
    """What one GC run did."""

    started_at: float
    forced: bool
    major: bool
    minor: bool
    duration_s: float
    local_copies_dropped: Count
    tiered_ranges_dropped: Count = Field(
        default=0, description="ledgers whose tiered entries left the local disk")
    logs_removed: Count
    reclaimed_by_deletion_bytes: Count
    logs_compacted: Count
    reclaimed_by_compaction_bytes: Count
    index_reclaimed_bytes: Count = Field(
        default=0, description="bytes the RocksDB index shrank by, compacting deleted ranges")
    moved_bytes: Count
    moved_entries: Count
    errors: list[str]
    skipped: list[str] = Field(description="compactions not run, and why")


class GcDetails(BaseModel):
    """BookKeeper's gc_details fields, plus totals since start, progress and the
    last run.  Times are Unix seconds."""

    force_compacting: bool = False
    major_compacting: bool = False
    minor_compacting: bool = False
    last_major_compaction_time: float | None = None
    last_minor_compaction_time: float | None = None
    last_gc_time: float | None = None
    major_compaction_count: Count = 0
    minor_compaction_count: Count = 0
    is_major_gc_suspended: bool = False
    is_minor_gc_suspended: bool = False
    runs: Count = 0
    local_copies_dropped: Count = 0
    tiered_ranges_dropped: Count = 0
    logs_removed: Count = 0
    logs_compacted: Count = 0
    reclaimed_by_deletion_bytes: Count = 0
    reclaimed_by_compaction_bytes: Count = 0
    index_reclaimed_bytes: Count = 0
    moved_bytes: Count = 0
    moved_entries: Count = 0
    compaction_failures: Count = 0
    run_time_s_total: float = 0.0
    progress: GcProgress = Field(default_factory=GcProgress)
    last_run: GcRun | None = None


class SuspendCompaction(_AdminRequest):
    suspend_major: bool = Field(
        default=False, validation_alias=AliasChoices("suspend_major", "suspendMajor")
    )
    suspend_minor: bool = Field(
        default=False, validation_alias=AliasChoices("suspend_minor", "suspendMinor")
    )


class ResumeCompaction(_AdminRequest):
    resume_major: bool = Field(
        default=False, validation_alias=AliasChoices("resume_major", "resumeMajor")
    )
    resume_minor: bool = Field(
        default=False, validation_alias=AliasChoices("resume_minor", "resumeMinor")
    )


class CompactionSuspension(BaseModel):
    is_major_gc_suspended: bool
    is_minor_gc_suspended: bool


class EntryLogInfo(BaseModel):
    log_id: Count
    size: Count
    remaining: Count = Field(description="live bytes")
    usage: float = Field(description="remaining / size")
    ledgers: list[Id]

    @classmethod
    def from_usage(cls, usage: LogUsage) -> EntryLogInfo:
        return cls(log_id=usage.log_id, size=usage.size_bytes, remaining=usage.live_bytes,
                   usage=usage.usage, ledgers=list(usage.ledger_ids))


class EntryLogList(BaseModel):
    entry_logs: list[EntryLogInfo]


class DiskFile(BaseModel):
    path: str
    size: Count


class DiskFileList(BaseModel):
    files: list[DiskFile]


class BookieInfo(BaseModel):
    bookie_id: str
    cluster: str
    version: str
    data_dir: str | None = Field(
        description="admins only: null without the admin token when ADMIN_TOKEN is set")
    journal_device: str | None = Field(
        description="admins only: null without the admin token when ADMIN_TOKEN is set")
    total_space: Count
    free_space: Count
    read_only: bool
    offload_enabled: bool
    gc_enabled: bool


class BookieState(BaseModel):
    running: bool
    read_only: bool
    shutting_down: bool
    available_for_high_priority_writes: bool


class ReadOnlyRequest(_AdminRequest):
    # Absent is false, as in BookKeeper (whose ReadOnlyState defaults readOnly to false).
    read_only: bool = Field(
        default=False, validation_alias=AliasChoices("read_only", "readOnly")
    )


class ReadOnlyState(BaseModel):
    read_only: bool


class Readiness(BaseModel):
    ready: bool
    read_only: bool


class Heartbeat(BaseModel):
    status: str


class LogMark(BaseModel):
    """The journal's logical offsets in bytes (``Bookie.last_log_mark()``);
    trim <= synced <= appended."""

    checkpoint_offset: Count = Field(description="the mark of the last checkpoint: "
                                     "everything before it is in the entry logs and index")
    trim_offset: Count = Field(description="the journal is trimmed up to here")
    synced_offset: Count = Field(description="records up to here are durable (fdatasync)")
    appended_offset: Count = Field(description="records up to here are queued")


class Empty(BaseModel):
    pass


# --- cluster mode -------------------------------------------------------------


class ClusterNodeView(BaseModel):
    bookie_id: str
    url: str
    state: str = Field(description="writable | readonly")
    disk_usage: float = Field(description="used fraction of the node's data disk")


class UnderReplicated(BaseModel):
    ledger_id: int
    fragments: int
    bytes_done: int
    bytes_total: int


class ClusterView(BaseModel):
    nodes: list[ClusterNodeView]
    under_replicated: list[UnderReplicated]
    decommissioned: list[str] = Field(
        default_factory=list, description="bookies taken out for good (their ids are "
        "never accepted again; their replicas are re-replicated)")
    auditor: str | None = Field(default=None,
                                description="bookie id of the node auditing the cluster")


class Decommissioned(BaseModel):
    bookie_id: str


class FragmentView(BaseModel):
    first_entry_id: Count
    bookies: list[str] = Field(description="the bookies holding its entries")
    epoch: Count = Field(description="the writer epoch that made the fragment")


class LedgerPlacement(BaseModel):
    """Where a ledger's entries live in cluster mode."""

    ledger_id: Id
    state: str = Field(description="OPEN | IN_RECOVERY | CLOSED (the metadata's state)")
    revision: Count = Field(description="etcd revision of the metadata")
    ensemble_size: Count
    write_quorum: Count
    ack_quorum: Count
    writer: str = Field(description="bookie id of the node writing the ledger")
    epoch: Count = Field(description="the writer's epoch")
    fragments: list[FragmentView]
