"""Service settings: the user-facing names of DESIGN.md §9, loaded once at start-up.

Every setting ``NAME`` comes from (highest precedence first):

1. a command-line flag (``ledgerd serve --host/--port``), passed as keyword arguments;
2. the environment variable ``LEDGERD_<NAME>``;
3. the TOML file given by ``--config`` or ``LEDGERD_CONFIG`` (keys are the names,
   in either case: ``data_dir = "/srv/ledgerd"`` or ``DATA_DIR = ...``);
4. the defaults, which the components declare (``default_of``): this module maps
   names to their fields and declares only what belongs to HTTP.

Sizes are bytes, or strings such as ``"64MiB"``, ``"1GiB"``, ``"512KiB"``, ``"10MB"``;
times are seconds, or strings such as ``"10s"``, ``"5m"``, ``"1h"``.  Unknown keys in
the file are rejected, and an invalid value fails start-up with
:class:`~common.errors.InvalidSetting` naming the setting.  :meth:`to_node` builds
the components' settings, whose own cross-field checks run there too.
"""

from __future__ import annotations

import ipaddress
import os
import re
import socket
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BeforeValidator,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from cluster import ClusterSettings, parse_metadata_url
from common.errors import InvalidSetting
from common.settings import default_of, parse_duration, parse_size
from common.units import KiB, MiB
from compaction import CompactionSettings
from entrylog import EntryLogSettings
from journal import ALIGNMENT_BYTES, JournalSettings, SyncMode
from ledger import EngineSettings, LedgerLimits, ReadCacheSettings, WriteCacheSettings
from node import DiskWatchSettings, NodeSettings
from offload import OffloadSettings

ENV_PREFIX = "LEDGERD_"
CONFIG_ENV = "LEDGERD_CONFIG"
# MAX_PASSWORD_SIZE may be lowered, not raised: the X-Ledger-Password header's
# length limit (app/deps.py, and the spec's maxLength) is sized for this.
PASSWORD_SIZE_BYTES_MAX: int = default_of(LedgerLimits, "password_size_bytes_max")

SizeBytes = Annotated[int, BeforeValidator(parse_size), Field(ge=0, strict=False)]
PositiveSizeBytes = Annotated[int, BeforeValidator(parse_size), Field(gt=0)]
Seconds = Annotated[float, BeforeValidator(parse_duration), Field(gt=0)]
NonNegativeSeconds = Annotated[float, BeforeValidator(parse_duration), Field(ge=0)]
Fraction = Annotated[float, Field(ge=0.0, le=1.0)]
PositiveFraction = Annotated[float, Field(gt=0.0, le=1.0)]


def _names(value: Any) -> Any:
    """Host names from a list or a comma-separated string, lower case."""
    if isinstance(value, str):
        value = [name for name in value.split(",") if name.strip()]
    if isinstance(value, list | tuple):
        return tuple(str(name).strip().lower().rstrip(".") for name in value)
    return value


class ServiceSettings(BaseSettings):
    """Every knob of the service; field names are DESIGN.md §9's names in lower case."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX,
        case_sensitive=False,
        extra="forbid",
        frozen=True,
        validate_default=True,
    )

    # --- DESIGN.md §9 -----------------------------------------------------
    data_dir: Path = Path("./data")
    host: str = "127.0.0.1"
    port: int = Field(default=8080, ge=0, le=65535)
    admin_token: SecretStr | None = None
    journal_device: Path | None = None  # default: <DATA_DIR>/journal.dev
    journal_capacity: PositiveSizeBytes = default_of(JournalSettings, "capacity_bytes")
    # How a journal write is made durable (journal.SyncMode): direct_fdatasync,
    # direct_dsync or buffered_fdatasync; every mode keeps the same guarantee.
    journal_sync_mode: SyncMode = default_of(JournalSettings, "sync_mode")
    write_cache_size: PositiveSizeBytes = default_of(WriteCacheSettings, "size_bytes")
    read_cache_size: SizeBytes = default_of(ReadCacheSettings, "size_bytes")
    index_memory: PositiveSizeBytes = default_of(EngineSettings, "index_memory_bytes")
    flush_interval: Seconds = default_of(WriteCacheSettings, "flush_interval_s")
    checkpoint_sync_bytes: PositiveSizeBytes = default_of(WriteCacheSettings, "sync_every_bytes")
    entry_log_size_limit: PositiveSizeBytes = default_of(EntryLogSettings, "size_bytes_limit")
    max_entry_size: PositiveSizeBytes = default_of(LedgerLimits, "entry_size_bytes_max")
    gc_wait_time: Seconds = default_of(CompactionSettings, "gc_wait_time_s")
    minor_compaction_threshold: Fraction = default_of(CompactionSettings, "minor_threshold")
    minor_compaction_interval: Seconds = default_of(CompactionSettings, "minor_interval_s")
    major_compaction_threshold: Fraction = default_of(CompactionSettings, "major_threshold")
    major_compaction_interval: Seconds = default_of(CompactionSettings, "major_interval_s")
    s3_endpoint_url: str | None = None
    s3_bucket: str | None = None
    s3_prefix: str = default_of(OffloadSettings, "prefix")
    s3_region: str = default_of(OffloadSettings, "region")
    cluster: str = default_of(NodeSettings, "cluster")
    # It names keys in etcd and S3: a plain name only.
    bookie_id: str = Field(default_factory=socket.gethostname,
                           pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
    offload_chunk_size: PositiveSizeBytes = default_of(OffloadSettings, "chunk_size_bytes")
    offload_part_size: PositiveSizeBytes = default_of(OffloadSettings, "part_size_bytes")
    offload_after_close: bool = default_of(OffloadSettings, "after_close")
    # DESIGN §6: upload open ledgers' chunks as they fill (consolidated at close).
    tier_open_ledgers: bool = default_of(OffloadSettings, "tier_open_ledgers")
    # 0 drops the local copy at the first GC after the offload (as Pulsar allows).
    offload_deletion_lag: NonNegativeSeconds = default_of(OffloadSettings, "deletion_lag_s")
    # Offload the oldest closed ledgers while the data disk is fuller than this.
    offload_disk_usage_threshold: PositiveFraction = default_of(
        OffloadSettings, "disk_usage_threshold")
    # A FAILED offload is retried by itself after this delay, doubling per
    # failure in a row up to the maximum (jittered).
    offload_failed_retry_delay: Seconds = default_of(OffloadSettings,
                                                     "failed_retry_delay_s_initial")
    offload_failed_retry_delay_max: Seconds = default_of(OffloadSettings,
                                                         "failed_retry_delay_s_max")
    # Small sealed ledgers packed into shared objects (docs/formats-offload.md "Packs").
    offload_pack: bool = default_of(OffloadSettings, "pack")
    offload_pack_ledger_size_max: PositiveSizeBytes = default_of(OffloadSettings,
                                                                 "pack_ledger_bytes_max")
    offload_pack_size: PositiveSizeBytes = default_of(OffloadSettings, "pack_size_bytes")
    offload_pack_wait: NonNegativeSeconds = default_of(OffloadSettings, "pack_wait_s")
    offload_pack_live_fraction_min: Fraction = default_of(OffloadSettings,
                                                          "pack_live_fraction_min")
    offload_pack_delete_delay: NonNegativeSeconds = default_of(OffloadSettings,
                                                               "pack_delete_delay_s")

    # --- cluster mode (DESIGN.md §9, §10) -------------------------------------
    # etcd://HOST:PORT[,HOST:PORT…]/SCOPE; unset: standalone.
    metadata_url: str | None = None
    # The URL other nodes use to reach this one (default http://HOST:PORT, or
    # https://HOST:PORT with TLS_CERT_FILE; its scheme must match TLS_CERT_FILE).
    advertised_url: str | None = None
    # Bearer token of node-to-node calls; required in cluster mode.
    cluster_token: SecretStr | None = None
    ensemble_size: Annotated[int, Field(ge=1, le=1000)] = default_of(
        ClusterSettings, "ensemble_size")
    write_quorum: Annotated[int, Field(ge=1, le=1000)] = default_of(
        ClusterSettings, "write_quorum")
    ack_quorum: Annotated[int, Field(ge=1, le=1000)] = default_of(ClusterSettings, "ack_quorum")
    membership_ttl: Seconds = default_of(ClusterSettings, "membership_ttl_s")
    rereplication_delay: NonNegativeSeconds = default_of(
        ClusterSettings, "rereplication_delay_s")
    # Seconds an OPEN ledger whose last ensemble names a gone bookie may receive no
    # add before the auditor fences and closes it (its fragments are then copied).
    open_ledger_rereplication_grace_period: Seconds = default_of(
        ClusterSettings, "open_ledger_rereplication_grace_period_s")
    # Seconds between two rounds of the auditor (and of each node's upkeep).
    audit_interval: Seconds = default_of(ClusterSettings, "audit_interval_s")
    # Seconds between two audits of every ledger whatever changed (a week).
    audit_full_interval: Seconds = default_of(ClusterSettings, "audit_full_interval_s")

    # --- garbage collection (ledgerd additions) -----------------------------
    # Run the background garbage collector (admin GC routes answer 409 when off).
    gc_enabled: bool = True
    compaction_rate: SizeBytes = default_of(CompactionSettings, "rate_bytes_per_s")
    compaction_max_run_time: Seconds = default_of(CompactionSettings, "run_time_s_max")
    # Past this data-disk usage major compaction is suspended; past
    # READONLY_DISK_USAGE_THRESHOLD both kinds are (a forced GC still runs).
    disk_usage_warn_threshold: Fraction = default_of(CompactionSettings, "disk_warn_threshold")

    # --- service limits (ledgerd additions) --------------------------------
    readonly_disk_usage_threshold: PositiveFraction = default_of(
        DiskWatchSettings, "readonly_threshold")
    disk_check_interval: Seconds = default_of(DiskWatchSettings, "check_interval_s")
    # Largest request body accepted (a batch append is the largest request).
    max_request_body_size: PositiveSizeBytes = 64 * MiB
    # Largest batch append, payload bytes (unset: the largest that fits the
    # journal's in-flight window with the framing of MAX_BATCH_ENTRIES entries).
    max_batch_size: PositiveSizeBytes | None = None
    max_batch_entries: Annotated[int, Field(gt=0, le=1_000_000)] = default_of(
        LedgerLimits, "batch_entry_count_max")
    max_metadata_entries: Annotated[int, Field(ge=0, le=100_000)] = default_of(
        LedgerLimits, "metadata_entry_count_max")
    max_metadata_size: SizeBytes = default_of(LedgerLimits, "metadata_size_bytes_max")
    max_password_size: Annotated[int, Field(ge=0, le=PASSWORD_SIZE_BYTES_MAX)] = \
        PASSWORD_SIZE_BYTES_MAX
    max_ledgers: Annotated[int, Field(gt=0)] = default_of(LedgerLimits, "ledger_count_max")
    # A JSON page of a range read stops after this many payload bytes.
    max_read_page_size: PositiveSizeBytes = 16 * MiB
    # --- append streams (DESIGN.md §5a) -------------------------------------
    # Unacknowledged message bytes per stream past which the server stops reading it.
    stream_window_bytes: PositiveSizeBytes = 16 * MiB
    # A stream with no client message (pongs do not count) for this long is closed.
    stream_idle_timeout: Seconds = 300.0
    # --- hostile clients (docs/api.md, "Security") ------------------------------
    # Host names besides HOST, localhost and IP addresses that requests may name
    # in their Host header (DNS rebinding); ".example.com" also allows its
    # subdomains, "*" any name.  A list, or one string of comma-separated names.
    allowed_hosts: Annotated[tuple[str, ...], NoDecode, BeforeValidator(_names)] = ()
    # Serve HTTPS with this PEM certificate (chain) and unencrypted PEM key.
    tls_cert_file: Path | None = None
    tls_key_file: Path | None = None
    # Cluster mode: the CAs (PEM bundle) trusted for https:// peers (default: the system's).
    tls_ca_file: Path | None = None
    # Requests served at once; beyond, 503 ETOOMANYREQUESTS at once, never a queue.
    max_concurrent_requests: Annotated[int, Field(gt=0)] = 256
    # Threads that may run scrypt at once (checks of scrypt-hashed passwords, made
    # before keyed hashes or in cluster mode; cluster mode's ledger creation).
    max_concurrent_password_checks: int = Field(
        default_factory=lambda: max(1, (os.cpu_count() or 2) // 2), gt=0)
    # A client (peer address) that failed this many password checks within
    # AUTH_FAILURE_WINDOW gets 429 without any check until the oldest leaves it.
    max_auth_failures: Annotated[int, Field(gt=0)] = 10
    auth_failure_window: Seconds = 60.0
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    log_format: Literal["json", "text"] = "json"
    # One log line per HTTP request (logger ``ledgerd.access``).
    access_log: bool = True
    # Endpoints only the benchmarks use (``POST /api/v1/noop``, the HTTP floor, and
    # the streams' floors, app/routes_bench_stream.py); absent from the public spec.
    bench_endpoints: bool = False

    @model_validator(mode="after")
    def _relate(self) -> ServiceSettings:
        if self.max_request_body_size < self.max_entry_size:
            raise ValueError("max_request_body_size must be at least max_entry_size")
        if self.admin_token is not None and not self.admin_token.get_secret_value():
            raise ValueError("admin_token must not be empty when set")
        if (self.tls_cert_file is None) != (self.tls_key_file is None):
            given, missing = (("tls_cert_file", "tls_key_file") if self.tls_key_file is None
                              else ("tls_key_file", "tls_cert_file"))
            raise ValueError(f"{given} is set but {missing} is not; HTTPS needs both")
        self._relate_tls()
        if self.metadata_url is not None and not self.cluster_token_value:
            raise ValueError("cluster_token must be set when metadata_url is set")
        return self

    def _relate_tls(self) -> None:
        """The advertised scheme is what this node serves: peers calling http://
        an HTTPS-only node (or https:// a plain one) would never get an answer."""
        if self.tls_ca_file is not None and self.metadata_url is None:
            raise ValueError("tls_ca_file is the trust of node-to-node calls (cluster mode); "
                             "set metadata_url or unset it")
        if self.advertised_url is None:
            return
        advertises_https = self.advertised_url.lower().startswith("https://")
        if self.tls_cert_file is not None and not advertises_https:
            raise ValueError(f"advertised_url={self.advertised_url!r} is not https:// but "
                             "tls_cert_file is set: this node serves only HTTPS")
        if self.tls_cert_file is None and advertises_https:
            raise ValueError(f"advertised_url={self.advertised_url!r} is https:// but "
                             "tls_cert_file is not set: this node serves plain HTTP")

    @field_validator("metadata_url")
    @classmethod
    def _etcd_url(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                parse_metadata_url(value)
            except InvalidSetting as exc:
                raise ValueError(str(exc)) from exc
        return value

    # --- loading ---------------------------------------------------------------

    @classmethod
    def load(
        cls,
        config: Path | None = None,
        *,
        environ: Mapping[str, str] | None = None,
        **flags: Any,
    ) -> ServiceSettings:
        """Build the settings from flags > environment > TOML file > defaults.

        ``environ`` defaults to ``os.environ``; ``flags`` whose value is ``None`` are
        ignored (a flag that was not given).  Raises :class:`InvalidSetting` naming
        the offending setting; unknown ``LEDGERD_*`` variables are ignored (other
        tools may share the prefix) but unknown keys in the file or flags are rejected.
        """
        env = os.environ if environ is None else environ
        if config is None and env.get(CONFIG_ENV):
            config = Path(env[CONFIG_ENV])
        file_values = _read_toml(config) if config is not None else {}
        env_values = {
            key[len(ENV_PREFIX) :].lower(): value
            for key, value in env.items()
            if key.upper().startswith(ENV_PREFIX)
            and key[len(ENV_PREFIX) :].lower() in cls.model_fields
        }
        given = {name: value for name, value in flags.items() if value is not None}
        unknown = sorted(set(given) - set(cls.model_fields))
        if unknown:
            raise InvalidSetting(f"unknown setting {unknown[0].upper()}")
        try:
            # model_validate skips pydantic-settings' own sources: the three layers
            # are merged here, in the documented order.
            return cls.model_validate({**file_values, **env_values, **given})
        except ValidationError as exc:
            raise InvalidSetting(_describe(exc)) from exc

    # --- derived values --------------------------------------------------------

    @property
    def admin_token_value(self) -> str | None:
        return None if self.admin_token is None else self.admin_token.get_secret_value()

    @property
    def cluster_token_value(self) -> str | None:
        token = self.cluster_token
        return None if token is None else (token.get_secret_value() or None)

    @property
    def journal_device_path(self) -> Path:
        return self.journal_device or self.data_dir / "journal.dev"

    @property
    def journal_window_bytes(self) -> int:
        """The journal's sliding window (bytes written but not yet synced, scanned
        past a hole on recovery).  Not a user setting: a quarter of the ring, at
        most 16MiB, 4KiB-aligned, so that small rings (tests, embedded use) stay valid."""
        window: int = min(default_of(JournalSettings, "sliding_window_bytes_max"),
                          self.journal_capacity // 4)
        return window - window % ALIGNMENT_BYTES

    @property
    def batch_size_max(self) -> int:
        """MAX_BATCH_SIZE, or its default derived from JOURNAL_CAPACITY."""
        if self.max_batch_size is not None:
            return self.max_batch_size
        from ledger import add_record_bytes

        record_max = self.journal_window_bytes - 2 * ALIGNMENT_BYTES
        framing = add_record_bytes(0, self.max_batch_entries)
        largest: int = default_of(LedgerLimits, "batch_size_bytes_max")
        return max(4 * KiB, min(largest, record_max - framing))

    @property
    def is_loopback(self) -> bool:
        return is_loopback_host(self.host)

    def check_listen_address(self) -> None:
        """Refuse a non-loopback listen address without an admin token (DESIGN.md §5)."""
        if not self.is_loopback and not self.admin_token_value:
            raise InvalidSetting(
                f"invalid setting HOST: {self.host!r} is not a loopback address, and "
                "ADMIN_TOKEN is not set; set LEDGERD_ADMIN_TOKEN (admin calls need it "
                "on a network address) or listen on 127.0.0.1"
            )

    def to_node(self) -> NodeSettings:
        """The node's settings, each component's checked; raises InvalidSetting."""
        settings = NodeSettings(
            engine=self._engine(), bookie_id=self.bookie_id, cluster=self.cluster,
            compaction=self._compaction() if self.gc_enabled else None,
            offload=self._offload() if self.s3_bucket is not None else None,
            disk=DiskWatchSettings(readonly_threshold=self.readonly_disk_usage_threshold,
                                   check_interval_s=self.disk_check_interval),
            cluster_mode=self._cluster() if self.metadata_url is not None else None,
        )
        settings.check()
        return settings

    def _cluster(self) -> ClusterSettings:
        assert self.metadata_url is not None
        endpoints, scope = parse_metadata_url(self.metadata_url)
        host = f"[{self.host}]" if ":" in self.host else self.host
        scheme = "http" if self.tls_cert_file is None else "https"
        return ClusterSettings(
            etcd_endpoints=tuple(endpoints), scope=scope,
            advertised_url=self.advertised_url or f"{scheme}://{host}:{self.port}",
            token=self.cluster_token_value or "", ensemble_size=self.ensemble_size,
            write_quorum=self.write_quorum, ack_quorum=self.ack_quorum,
            membership_ttl_s=self.membership_ttl,
            rereplication_delay_s=self.rereplication_delay,
            open_ledger_rereplication_grace_period_s=(
                self.open_ledger_rereplication_grace_period),
            audit_interval_s=self.audit_interval,
            audit_full_interval_s=self.audit_full_interval, tls_ca_file=self.tls_ca_file)

    def _engine(self) -> EngineSettings:
        window = self.journal_window_bytes
        return EngineSettings(
            data_dir=self.data_dir,
            journal=JournalSettings(
                device_path=self.journal_device_path,
                capacity_bytes=self.journal_capacity,
                sliding_window_bytes_max=window,
                sync_mode=self.journal_sync_mode,
                block_size_bytes_soft_limit=min(
                    default_of(JournalSettings, "block_size_bytes_soft_limit"), window),
            ),
            entry_log=EntryLogSettings(directory=self.data_dir / "entrylogs",
                                       size_bytes_limit=self.entry_log_size_limit),
            write_cache=WriteCacheSettings(size_bytes=self.write_cache_size,
                                           flush_interval_s=self.flush_interval,
                                           sync_every_bytes=self.checkpoint_sync_bytes),
            read_cache=ReadCacheSettings(size_bytes=self.read_cache_size),
            index_memory_bytes=self.index_memory,
            limits=LedgerLimits(
                entry_size_bytes_max=self.max_entry_size,
                batch_size_bytes_max=self.batch_size_max,
                batch_entry_count_max=self.max_batch_entries,
                metadata_entry_count_max=self.max_metadata_entries,
                metadata_size_bytes_max=self.max_metadata_size,
                password_size_bytes_max=self.max_password_size,
                ledger_count_max=self.max_ledgers,
            ),
        )

    def _compaction(self) -> CompactionSettings:
        return CompactionSettings(
            gc_wait_time_s=self.gc_wait_time,
            minor_threshold=self.minor_compaction_threshold,
            minor_interval_s=self.minor_compaction_interval,
            major_threshold=self.major_compaction_threshold,
            major_interval_s=self.major_compaction_interval,
            rate_bytes_per_s=self.compaction_rate,
            run_time_s_max=self.compaction_max_run_time,
            # A hard threshold set below the warn one pulls it down with it.
            disk_warn_threshold=min(self.disk_usage_warn_threshold,
                                    self.readonly_disk_usage_threshold),
            disk_hard_threshold=self.readonly_disk_usage_threshold,
        )

    def _offload(self) -> OffloadSettings:
        assert self.s3_bucket is not None
        return OffloadSettings(
            bucket=self.s3_bucket, prefix=self.s3_prefix, endpoint_url=self.s3_endpoint_url,
            region=self.s3_region, cluster=self.cluster, bookie_id=self.bookie_id,
            chunk_size_bytes=self.offload_chunk_size, part_size_bytes=self.offload_part_size,
            deletion_lag_s=self.offload_deletion_lag,
            after_close=self.offload_after_close, tier_open_ledgers=self.tier_open_ledgers,
            disk_usage_threshold=self.offload_disk_usage_threshold,
            failed_retry_delay_s_initial=self.offload_failed_retry_delay,
            failed_retry_delay_s_max=self.offload_failed_retry_delay_max,
            pack=self.offload_pack, pack_ledger_bytes_max=self.offload_pack_ledger_size_max,
            pack_size_bytes=self.offload_pack_size, pack_wait_s=self.offload_pack_wait,
            pack_live_fraction_min=self.offload_pack_live_fraction_min,
            pack_delete_delay_s=self.offload_pack_delete_delay,
        )


def is_loopback_host(host: str) -> bool:
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as fh:
            raw = tomllib.load(fh)
    except OSError as exc:
        raise InvalidSetting(f"cannot read config file {path}: {exc.strerror or exc}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise InvalidSetting(f"config file {path} is not valid TOML: {exc}") from exc
    values: dict[str, Any] = {}
    for key, value in raw.items():
        name = key.lower()
        if name not in ServiceSettings.model_fields:
            raise InvalidSetting(f"unknown setting {key.upper()} in config file {path}")
        values[name] = value
    return values


def _describe(exc: ValidationError) -> str:
    lines = []
    for error in exc.errors():
        where = ".".join(str(part) for part in error["loc"]) or "settings"
        message = error["msg"]
        if error["type"] == "extra_forbid" or error["type"] == "extra_forbidden":
            lines.append(f"unknown setting {where.upper()}")
        elif where == "settings":
            # Cross-field checks name their setting in the message itself.
            lines.append(f"invalid settings: {_upper_setting_name(message)}")
        else:
            shown = "'**********'" if where in ("admin_token", "cluster_token") \
                else repr(error.get("input"))
            lines.append(f"invalid setting {where.upper()}={shown}: {message}")
    return "; ".join(lines)


def _upper_setting_name(message: str) -> str:
    """Spell validator setting names the §9 way (``max_entry_size`` → upper)."""
    names = "|".join(sorted(ServiceSettings.model_fields, key=len, reverse=True))
    return re.sub(rf"\b({names})\b", lambda m: m.group(1).upper(), message)
