"""Every knob of tiered offload, declared once (STYLE 4).

``app/`` builds an :class:`OffloadSettings` from the DESIGN.md §9 names
(``S3_BUCKET``, ``S3_PREFIX``, ``S3_ENDPOINT_URL``, ``S3_REGION``, ``CLUSTER``,
``BOOKIE_ID``, ``OFFLOAD_CHUNK_SIZE``, ``OFFLOAD_AFTER_CLOSE``,
``OFFLOAD_DELETION_LAG``); the other fields are ledgerd additions with defaults.
:meth:`OffloadSettings.check` runs before anything touches S3 and raises
:class:`~common.errors.InvalidSetting` naming the setting.

Object keys are built only from checked components: the prefix, the cluster and
the bookie id are restricted to ``[A-Za-z0-9._-]`` words (the prefix may have
several, separated by ``/``), so no key can escape its prefix (``..``), start
with ``/`` or carry characters S3 servers treat differently.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from common.errors import InvalidSetting
from common.units import GiB, MiB

# S3 refuses non-final multipart parts below 5 MiB (EntityTooSmall), parts above
# 5 GiB, and uploads of more than 10 000 parts.
PART_SIZE_BYTES_MIN = 5 * MiB
PART_SIZE_BYTES_MAX = 5 * GiB
PART_COUNT_MAX = 10_000

_WORD = re.compile(r"[A-Za-z0-9._-]{1,128}")
_BUCKET = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")


@dataclass(frozen=True, kw_only=True)
class OffloadSettings:
    bucket: str
    prefix: str = "ledgerd"
    endpoint_url: str | None = None
    region: str = "us-east-1"
    # Path-style addressing (``endpoint/bucket/key``) works with every
    # S3-compatible server; virtual-hosted style needs DNS per bucket.
    path_style: bool = True
    cluster: str = "default"
    bookie_id: str = "bookie"
    # Chunks of open ledgers being tiered, and the parts of their segments'
    # consolidation (chunk k is part k + 1), are exactly this large (only a
    # segment's last is smaller), so every non-final part is at least S3's
    # 5 MiB minimum.
    chunk_size_bytes: int = 8 * MiB
    # OFFLOAD_PART_SIZE: the parts of a sealed segment never tiered (and of a
    # pack's data).  32 MiB keeps a GiB at 32 parts, about 40 requests in all
    # (docs/formats-offload.md "Requests per GiB"); an offload holds at most
    # (upload_concurrency + 1) parts in memory.
    part_size_bytes: int = 32 * MiB
    # A ledger larger than this is split into several segments (at entry boundaries).
    segment_size_bytes_max: int = 1 * GiB
    # OFFLOAD_PACK: sealed ledgers of at most pack_ledger_bytes_max frame
    # bytes are packed with others into shared objects of about
    # pack_size_bytes (one data object and one index each), instead of two
    # objects each; a pack waits at most pack_wait_s for more ledgers.  A
    # pack whose live bytes (ledgers not deleted) fall below
    # pack_live_fraction_min of its members' bytes is rewritten, and the
    # old one deleted pack_delete_delay_s later (reads that located their
    # ledger in it meanwhile still find it).
    pack: bool = False
    pack_ledger_bytes_max: int = 32 * MiB
    pack_size_bytes: int = 64 * MiB
    pack_wait_s: float = 30.0
    pack_live_fraction_min: float = 0.5
    pack_delete_delay_s: float = 60.0
    # Seconds after OFFLOADED before the local copy becomes garbage for GC.
    deletion_lag_s: float = 14400.0
    after_close: bool = False
    # TIER_OPEN_LEDGERS: chunks of open ledgers uploaded as they fill (and
    # consolidated into segments when they close); tiered ranges may then
    # leave the local disk after deletion_lag_s.
    tier_open_ledgers: bool = False
    # Seconds between looks at open ledgers for a full chunk to tier (sooner
    # while there is a backlog).
    tier_interval_s: float = 1.0
    # Part uploads in flight per offload; memory held by one offload is at
    # most (upload_concurrency + 1) * part_size_bytes.
    upload_concurrency: int = 4
    # Seconds between records of the parts uploaded so far (each one a synced
    # checkpoint of the engine, which adds wait for).  Parts finished since
    # the last record are not lost by a crash: the resumed run finds them
    # with ListParts and keeps those whose ETag is the MD5 of their bytes.
    parts_record_interval_s: float = 1.0
    # Offload the oldest closed ledgers while the data disk is fuller than this.
    disk_usage_threshold: float = 0.85
    # A FAILED offload is retried by the service itself: after this delay,
    # doubling with each failure in a row up to the maximum, jittered (0.5x to
    # 1x) so ledgers that failed together (an S3 outage) do not all retry at
    # once.  A short outage then costs minutes, not a disk that fills up.
    failed_retry_delay_s_initial: float = 30.0
    failed_retry_delay_s_max: float = 1800.0
    # Remote reads: ranged GETs start at read_ahead_min and double up to
    # read_ahead_max on sequential hits; both are multiples of the 1 MiB block.
    read_ahead_bytes_min: int = 1 * MiB
    read_ahead_bytes_max: int = 16 * MiB
    # Prefetched blocks unread after this long are dropped and shrink the window.
    read_ahead_ttl_s: float = 30.0
    read_cache_size_bytes: int = 128 * MiB
    index_cache_size_bytes: int = 32 * MiB
    # Attempts per S3 request (first try included) and the jittered backoff.
    retry_attempts_max: int = 5
    retry_backoff_s_initial: float = 0.1
    retry_backoff_s_max: float = 5.0
    connect_timeout_s: float = 5.0
    read_timeout_s: float = 30.0

    @property
    def upload_thread_count(self) -> int:
        """Threads that keep one offload's part uploads all in flight."""
        return self.upload_concurrency

    def check(self) -> None:
        """Relate the limits to each other; raise naming the setting that is wrong."""
        _require(_BUCKET.fullmatch(self.bucket) is not None, "s3_bucket",
                 f"{self.bucket!r} is not a valid bucket name (3-63 of a-z 0-9 . -)")
        _require(all(_is_word(w) for w in self.prefix.split("/")), "s3_prefix",
                 f"{self.prefix!r} must be words of A-Z a-z 0-9 . _ - separated by /")
        _require(_is_word(self.cluster), "cluster",
                 f"{self.cluster!r} must be one word of A-Z a-z 0-9 . _ -")
        _require(_is_word(self.bookie_id), "bookie_id",
                 f"{self.bookie_id!r} must be one word of A-Z a-z 0-9 . _ -")
        _require(PART_SIZE_BYTES_MIN <= self.chunk_size_bytes <= PART_SIZE_BYTES_MAX,
                 "offload_chunk_size", "must be between 5MiB and 5GiB (S3 part limits)")
        _require(PART_SIZE_BYTES_MIN <= self.part_size_bytes <= PART_SIZE_BYTES_MAX,
                 "offload_part_size", "must be between 5MiB and 5GiB (S3 part limits)")
        _require(self.segment_size_bytes_max <= PART_COUNT_MAX * self.part_size_bytes,
                 "offload_segment_size_max", "needs more than 10000 parts of offload_part_size")
        _require(self.segment_size_bytes_max >= self.chunk_size_bytes,
                 "offload_segment_size_max", "must be at least offload_chunk_size")
        _require(self.segment_size_bytes_max <= PART_COUNT_MAX * self.chunk_size_bytes,
                 "offload_segment_size_max", "needs more than 10000 parts of offload_chunk_size")
        _require(0 < self.pack_ledger_bytes_max <= self.pack_size_bytes,
                 "offload_pack_ledger_size_max", "must be positive and at most offload_pack_size")
        _require(self.pack_size_bytes <= PART_COUNT_MAX * self.part_size_bytes,
                 "offload_pack_size", "needs more than 10000 parts of offload_part_size")
        _require(self.pack_wait_s >= 0 and self.pack_delete_delay_s >= 0,
                 "offload_pack_wait", "must not be negative")
        _require(0.0 <= self.pack_live_fraction_min < 1.0, "offload_pack_live_fraction_min",
                 "must be in [0, 1)")
        _require(self.deletion_lag_s >= 0, "offload_deletion_lag", "must not be negative")
        _require(0 < self.tier_interval_s <= 3600, "tier_interval",
                 "must be between 0 (excluded) and 3600 seconds")
        _require(1 <= self.upload_concurrency <= 64, "offload_upload_concurrency",
                 "must be between 1 and 64")
        _require(0 <= self.parts_record_interval_s <= 3600, "offload_parts_record_interval",
                 "must be between 0 and 3600 seconds")
        _require(0.0 < self.disk_usage_threshold <= 1.0, "offload_disk_usage_threshold",
                 "must be in (0, 1]")
        self._check_reads()
        self._check_retries()

    def _check_reads(self) -> None:
        _require(self.read_ahead_bytes_min >= MiB and self.read_ahead_bytes_min % MiB == 0,
                 "offload_read_ahead_min", "must be a multiple of 1MiB, at least 1MiB")
        _require(self.read_ahead_bytes_max >= self.read_ahead_bytes_min
                 and self.read_ahead_bytes_max % MiB == 0,
                 "offload_read_ahead_max", "must be a multiple of 1MiB, at least the minimum")
        # The block being read plus up to two windows fetched ahead of it.
        _require(self.read_cache_size_bytes >= 3 * self.read_ahead_bytes_max,
                 "offload_read_cache_size", "must hold three read-ahead windows")
        _require(self.index_cache_size_bytes >= MiB, "offload_index_cache_size",
                 "must be at least 1MiB")
        _require(self.read_ahead_ttl_s > 0, "offload_read_ahead_ttl", "must be positive")

    def _check_retries(self) -> None:
        _require(1 <= self.retry_attempts_max <= 20, "offload_retry_attempts",
                 "must be between 1 and 20")
        _require(0 < self.failed_retry_delay_s_initial <= 86400, "offload_failed_retry_delay",
                 "must be between 0 (excluded) and 86400 seconds")
        _require(self.failed_retry_delay_s_initial <= self.failed_retry_delay_s_max <= 86400,
                 "offload_failed_retry_delay_max",
                 "must be between offload_failed_retry_delay and 86400 seconds")
        _require(0 < self.retry_backoff_s_initial <= self.retry_backoff_s_max <= 60,
                 "offload_retry_backoff", "needs 0 < initial <= max <= 60 seconds")
        _require(self.connect_timeout_s > 0 and self.read_timeout_s > 0,
                 "offload_timeout", "must be positive")


def _is_word(text: str) -> bool:
    return _WORD.fullmatch(text) is not None and text not in (".", "..")


def _require(condition: bool, setting: str, message: str) -> None:
    if not condition:
        raise InvalidSetting(f"invalid setting {setting.upper()}: {message}")
