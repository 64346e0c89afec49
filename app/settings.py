"""Service settings: the user-facing names of DESIGN.md §9, loaded once at start-up.

Every setting ``NAME`` comes from (highest precedence first):

1. a command-line flag (``ledgerd serve --host/--port``), passed as keyword arguments;
2. the environment variable ``LEDGERD_<NAME>``;
3. the TOML file given by ``--config`` or ``LEDGERD_CONFIG`` (keys are the names,
   in either case: ``data_dir = "/srv/ledgerd"`` or ``DATA_DIR = ...``);
4. the defaults below.

Sizes are bytes, or strings such as ``"64MiB"``, ``"1GiB"``, ``"512KiB"``, ``"10MB"``;
times are seconds, or strings such as ``"10s"``, ``"5m"``, ``"1h"``.  Unknown keys in
the file are rejected, and an invalid value fails start-up with a message naming the
setting (:class:`SettingsError`).  :meth:`ServiceSettings.to_engine` builds the
engine's :class:`ledger.settings.EngineSettings`, whose own cross-field checks run
there too.
"""

from __future__ import annotations

import ipaddress
import os
import re
import socket
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import BeforeValidator, Field, ValidationError, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from common.errors import InvalidSetting
from common.units import GiB, KiB, MiB

if TYPE_CHECKING:
    from offload.settings import OffloadSettings
from entrylog import EntryLogSettings
from journal import JournalSettings
from ledger.settings import (
    CompactionSettings,
    EngineSettings,
    ReadCacheSettings,
    WriteCacheSettings,
)

ENV_PREFIX = "LEDGERD_"
CONFIG_ENV = "LEDGERD_CONFIG"


_SIZE_UNITS: dict[str, int] = {
    "": 1,
    "b": 1,
    "k": 1000,
    "kb": 1000,
    "m": 1000**2,
    "mb": 1000**2,
    "g": 1000**3,
    "gb": 1000**3,
    "t": 1000**4,
    "tb": 1000**4,
    "kib": KiB,
    "mib": MiB,
    "gib": GiB,
    "tib": 1024 * GiB,
}
_TIME_UNITS: dict[str, float] = {
    "": 1.0,
    "ms": 0.001,
    "s": 1.0,
    "m": 60.0,
    "min": 60.0,
    "h": 3600.0,
    "d": 86400.0,
}
_QUANTITY = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([A-Za-z]*)\s*$")


class SettingsError(ValueError):
    """A setting is missing, unknown or invalid; the message names it (§9 spelling)."""


def parse_size(value: object) -> object:
    """``64MiB`` → 67108864; ints pass through; anything else is left to pydantic."""
    if isinstance(value, str):
        match = _QUANTITY.match(value)
        if match is None or match.group(2).lower() not in _SIZE_UNITS:
            raise ValueError(f"{value!r} is not a size (bytes, or e.g. '64MiB', '1GiB', '10MB')")
        number = float(match.group(1)) * _SIZE_UNITS[match.group(2).lower()]
        if number != int(number):
            raise ValueError(f"{value!r} is not a whole number of bytes")
        return int(number)
    return value


def parse_duration(value: object) -> object:
    """``5m`` → 300.0; numbers pass through; anything else is left to pydantic."""
    if isinstance(value, str):
        match = _QUANTITY.match(value)
        if match is None or match.group(2).lower() not in _TIME_UNITS:
            raise ValueError(f"{value!r} is not a duration (seconds, or e.g. '10s', '5m', '1h')")
        return float(match.group(1)) * _TIME_UNITS[match.group(2).lower()]
    return value


SizeBytes = Annotated[int, BeforeValidator(parse_size), Field(ge=0, strict=False)]
PositiveSizeBytes = Annotated[int, BeforeValidator(parse_size), Field(gt=0)]
Seconds = Annotated[float, BeforeValidator(parse_duration), Field(gt=0)]
Fraction = Annotated[float, Field(ge=0.0, le=1.0)]


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
    admin_token: str | None = None
    journal_device: Path | None = None  # default: <DATA_DIR>/journal.dev
    journal_capacity: PositiveSizeBytes = 1 * GiB
    write_cache_size: PositiveSizeBytes = 256 * MiB
    read_cache_size: SizeBytes = 128 * MiB
    flush_interval: Seconds = 10.0
    entry_log_size_limit: PositiveSizeBytes = 1 * GiB
    max_entry_size: PositiveSizeBytes = 5 * MiB
    gc_wait_time: Seconds = 600.0
    minor_compaction_threshold: Fraction = 0.2
    minor_compaction_interval: Seconds = 3600.0
    major_compaction_threshold: Fraction = 0.8
    major_compaction_interval: Seconds = 86400.0
    s3_endpoint_url: str | None = None
    s3_bucket: str | None = None
    s3_prefix: str = "ledgerd"
    s3_region: str = "us-east-1"
    cluster: str = "default"
    bookie_id: str = Field(default_factory=socket.gethostname)
    offload_chunk_size: PositiveSizeBytes = 8 * MiB
    offload_after_close: bool = False
    offload_deletion_lag: Seconds = 14400.0
    # Offload the oldest closed ledgers while the data disk is fuller than this.
    offload_disk_usage_threshold: Annotated[float, Field(gt=0.0, le=1.0)] = 0.85

    # --- garbage collection (ledgerd additions) -----------------------------
    # Run the background garbage collector (admin GC routes answer 503 when off).
    gc_enabled: bool = True
    # Bytes per second compaction may read plus write (0: unlimited).
    compaction_rate: SizeBytes = 16 * MiB
    # Longest one compaction run may take; the rest waits for the next run.
    compaction_max_run_time: Seconds = 600.0
    # Past this data-disk usage major compaction is suspended; past
    # READONLY_DISK_USAGE_THRESHOLD both kinds are (a forced GC still runs).
    disk_usage_warn_threshold: Fraction = 0.90

    # --- service limits (ledgerd additions) --------------------------------
    # Data-disk usage fraction at which the bookie turns read-only by itself.
    readonly_disk_usage_threshold: Annotated[float, Field(gt=0.0, le=1.0)] = 0.95
    # How often that usage is looked at.
    disk_check_interval: Seconds = 5.0
    # Largest request body accepted (a batch append is the largest request).
    max_request_body_size: PositiveSizeBytes = 64 * MiB
    # Largest batch append, payload bytes (one journal record; unset: the largest that
    # fits the journal's in-flight window, at most 8MiB).
    max_batch_size: PositiveSizeBytes | None = None
    # Most entries in one batch append.
    max_batch_entries: Annotated[int, Field(gt=0, le=1_000_000)] = 10_000
    # Most metadata pairs on a ledger, and their total UTF-8 size (keys + values).
    max_metadata_entries: Annotated[int, Field(ge=0, le=100_000)] = 64
    max_metadata_size: SizeBytes = 16 * KiB
    # Longest ledger password, in UTF-8 bytes.
    max_password_size: Annotated[int, Field(ge=0, le=65536)] = 1024
    # A JSON page of a range read stops after this many payload bytes.
    max_read_page_size: PositiveSizeBytes = 16 * MiB
    # --- append streams (DESIGN.md §5a) -------------------------------------
    # Unacknowledged message bytes per stream past which the server stops reading it.
    stream_window_bytes: PositiveSizeBytes = 16 * MiB
    # A stream with no client message (pongs do not count) for this long is closed.
    stream_idle_timeout: Seconds = 300.0
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    log_format: Literal["json", "text"] = "json"
    # One log line per HTTP request (logger ``ledgerd.access``).
    access_log: bool = True

    @model_validator(mode="after")
    def _relate(self) -> ServiceSettings:
        if self.offload_chunk_size < 5 * MiB:
            raise ValueError("offload_chunk_size must be at least 5MiB (S3's part minimum)")
        if self.max_request_body_size < self.max_entry_size:
            raise ValueError("max_request_body_size must be at least max_entry_size")
        if self.admin_token is not None and self.admin_token == "":
            raise ValueError("admin_token must not be empty when set")
        return self

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
        ignored (a flag that was not given).  Raises :class:`SettingsError` naming the
        offending setting; unknown ``LEDGERD_*`` variables are ignored (other tools
        may share the prefix) but unknown keys in the file or flags are rejected.
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
            raise SettingsError(f"unknown setting {unknown[0].upper()}")
        try:
            # model_validate skips pydantic-settings' own sources: the three layers
            # are merged here, in the documented order.
            return cls.model_validate({**file_values, **env_values, **given})
        except ValidationError as exc:
            raise SettingsError(_describe(exc)) from exc

    # --- derived values --------------------------------------------------------

    @property
    def journal_device_path(self) -> Path:
        return self.journal_device or self.data_dir / "journal.dev"

    @property
    def journal_window_bytes(self) -> int:
        """The journal's sliding window (bytes written but not yet synced, scanned
        past a hole on recovery).  Not a user setting: a quarter of the ring, at
        most 16MiB, 4KiB-aligned, so that small rings (tests, embedded use) stay valid."""
        window = min(16 * MiB, self.journal_capacity // 4)
        return window - window % 4096

    @property
    def batch_size_max(self) -> int:
        """MAX_BATCH_SIZE, or its default derived from JOURNAL_CAPACITY."""
        if self.max_batch_size is not None:
            return self.max_batch_size
        return max(4096, min(8 * MiB, self.journal_window_bytes - 8 * KiB))

    @property
    def is_loopback(self) -> bool:
        return is_loopback_host(self.host)

    @property
    def offload_enabled(self) -> bool:
        return self.s3_bucket is not None

    def check_listen_address(self) -> None:
        """Refuse a non-loopback listen address without an admin token (DESIGN.md §5)."""
        if not self.is_loopback and not self.admin_token:
            raise SettingsError(
                f"invalid setting HOST: {self.host!r} is not a loopback address, and "
                "ADMIN_TOKEN is not set; set LEDGERD_ADMIN_TOKEN (admin calls need it "
                "on a network address) or listen on 127.0.0.1"
            )

    def to_offload(self) -> OffloadSettings:
        """Offload's settings (``S3_BUCKET`` must be set); raises :class:`SettingsError`."""
        from offload.settings import OffloadSettings

        if self.s3_bucket is None:
            raise SettingsError("invalid setting S3_BUCKET: offload needs a bucket")
        settings = OffloadSettings(
            bucket=self.s3_bucket, prefix=self.s3_prefix, endpoint_url=self.s3_endpoint_url,
            region=self.s3_region, cluster=self.cluster, bookie_id=self.bookie_id,
            chunk_size_bytes=self.offload_chunk_size, deletion_lag_s=self.offload_deletion_lag,
            after_close=self.offload_after_close,
            disk_usage_threshold=self.offload_disk_usage_threshold,
        )
        try:
            settings.check()
        except InvalidSetting as exc:
            raise SettingsError(_upper_setting_name(str(exc))) from exc
        return settings

    def to_engine(self) -> EngineSettings:
        """The engine's settings; raises :class:`SettingsError` naming the setting."""
        window = self.journal_window_bytes
        try:
            return EngineSettings.in_directory(
                self.data_dir,
                journal=JournalSettings(
                    device_path=self.journal_device_path,
                    capacity_bytes=self.journal_capacity,
                    sliding_window_bytes_max=window,
                    block_size_bytes_soft_limit=min(256 * KiB, window),
                ),
                entry_log=EntryLogSettings(
                    directory=self.data_dir / "entrylogs",
                    size_bytes_limit=self.entry_log_size_limit,
                ),
                write_cache=WriteCacheSettings(
                    size_bytes=self.write_cache_size,
                    flush_interval_s=self.flush_interval,
                ),
                read_cache=ReadCacheSettings(size_bytes=self.read_cache_size),
                compaction=CompactionSettings(
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
                ),
                entry_size_bytes_max=self.max_entry_size,
                batch_size_bytes_max=self.batch_size_max,
            )
        except InvalidSetting as exc:
            raise SettingsError(_upper_setting_name(str(exc))) from exc


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
        raise SettingsError(f"cannot read config file {path}: {exc.strerror or exc}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise SettingsError(f"config file {path} is not valid TOML: {exc}") from exc
    values: dict[str, Any] = {}
    for key, value in raw.items():
        name = key.lower()
        if name not in ServiceSettings.model_fields:
            raise SettingsError(f"unknown setting {key.upper()} in config file {path}")
        values[name] = value
    return values


def _describe(exc: ValidationError) -> str:
    lines = []
    for error in exc.errors():
        where = ".".join(str(part) for part in error["loc"]) or "settings"
        message = error["msg"]
        if error["type"] == "extra_forbidden":
            lines.append(f"unknown setting {where.upper()}")
        elif where == "settings":
            # Cross-field checks name their setting in the message itself.
            lines.append(f"invalid settings: {_upper_setting_name(message)}")
        else:
            lines.append(f"invalid setting {where.upper()}={error.get('input')!r}: {message}")
    return "; ".join(lines)


def _upper_setting_name(message: str) -> str:
    """Spell engine/validator setting names the §9 way (``journal_capacity`` → upper)."""
    names = "|".join(sorted(ServiceSettings.model_fields, key=len, reverse=True))
    return re.sub(rf"\b({names})\b", lambda m: m.group(1).upper(), message)
