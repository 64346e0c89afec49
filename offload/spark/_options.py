"""Options of ``spark.read.format("ledgerd")``, parsed once and checked (pure).

DESIGN.md §9 names them: ``endpoint``, ``bucket``, ``prefix``, ``region``,
``ledgers``, ``cluster``, ``bookie_id``, ``access_key``, ``secret_key``.
ledgerd adds ``partition_size`` (bytes per Spark partition, ``64MiB`` style
accepted), ``read_size`` (bytes per ranged GET inside a partition) and
``pushdown`` (``auto`` | ``always`` | ``never``, see docs/spark.md) and
``include_open`` (``false`` | ``true``: also read what ledgers tiered while
open hold in S3 so far, see docs/spark.md).
Unknown options are refused so a typo never silently reads everything.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from common.errors import InvalidSetting
from common.units import GiB, KiB, MiB

U64_MAX = 0xFFFF_FFFF_FFFF_FFFF

PARTITION_SIZE_BYTES_DEFAULT = 64 * MiB
READ_SIZE_BYTES_DEFAULT = 8 * MiB
PUSHDOWN_MODES = ("auto", "always", "never")

KNOWN_OPTIONS = frozenset({
    "endpoint", "bucket", "prefix", "region", "ledgers", "cluster", "bookie_id",
    "access_key", "secret_key", "partition_size", "read_size", "pushdown", "include_open",
    # Spark itself may pass these through DataFrameReader.load(path).
    "path", "paths",
})

_SIZE = re.compile(r"\s*([0-9]+)\s*(B|KiB|MiB|GiB|KB|MB|GB)?\s*", re.IGNORECASE)
_UNITS = {"b": 1, "kib": KiB, "mib": MiB, "gib": GiB, "kb": 1000, "mb": 1000**2, "gb": 1000**3}
_RANGE = re.compile(r"(0|[1-9][0-9]{0,19})(?:-(0|[1-9][0-9]{0,19}))?")


@dataclass(frozen=True)
class LedgerSelection:
    """Inclusive ledger id ranges, e.g. ``"3,7,10-20"`` → ((3,3), (7,7), (10,20))."""

    ranges: tuple[tuple[int, int], ...]

    def __contains__(self, ledger_id: object) -> bool:
        return isinstance(ledger_id, int) and any(lo <= ledger_id <= hi
                                                  for lo, hi in self.ranges)

    @classmethod
    def parse(cls, text: str) -> LedgerSelection:
        ranges: list[tuple[int, int]] = []
        for part in text.split(","):
            match = _RANGE.fullmatch(part.strip())
            if match is None:
                raise InvalidSetting(f"invalid option ledgers: {part.strip()!r} is not an id "
                                     "or a range like 10-20")
            lo = int(match[1])
            hi = int(match[2]) if match[2] is not None else lo
            if hi < lo or hi > U64_MAX:
                raise InvalidSetting(f"invalid option ledgers: range {part.strip()!r} is empty "
                                     "or out of range")
            ranges.append((lo, hi))
        return cls(tuple(sorted(ranges)))


@dataclass(frozen=True)
class Connection:
    """Where the offloaded objects are and how to reach them (picklable)."""

    bucket: str
    prefix: str = "ledgerd"
    endpoint_url: str | None = None
    region: str = "us-east-1"
    access_key: str | None = None
    secret_key: str | None = None

    def __repr__(self) -> str:
        # Partitions and readers are logged and pickled; never print the secret.
        return (f"Connection(bucket={self.bucket!r}, prefix={self.prefix!r}, "
                f"endpoint_url={self.endpoint_url!r}, region={self.region!r})")


@dataclass(frozen=True)
class ReadOptions:
    connection: Connection
    ledgers: LedgerSelection | None = None
    cluster: str | None = None
    bookie_id: str | None = None
    partition_size_bytes: int = PARTITION_SIZE_BYTES_DEFAULT
    read_size_bytes: int = READ_SIZE_BYTES_DEFAULT
    pushdown: str = "auto"
    # Also read ledgers not (fully) offloaded yet: what their segments' indexes
    # cover in chunks (tiered while open), as of planning.
    include_open: bool = False


def parse_size(name: str, text: str) -> int:
    match = _SIZE.fullmatch(text)
    if match is None:
        raise InvalidSetting(f"invalid option {name}: {text!r} is not a size like 64MiB")
    return int(match[1]) * _UNITS[(match[2] or "b").lower()]


def parse_options(options: Mapping[str, str]) -> ReadOptions:
    """Check and convert the reader options (keys are case-insensitive in Spark)."""
    given = {key.lower(): value for key, value in options.items()}
    unknown = sorted(set(given) - KNOWN_OPTIONS)
    if unknown:
        raise InvalidSetting(f"unknown ledgerd option(s) {unknown}; known: "
                             f"{sorted(KNOWN_OPTIONS - {'path', 'paths'})}")
    if not given.get("bucket"):
        raise InvalidSetting("invalid option bucket: required")
    if ("access_key" in given) != ("secret_key" in given):
        raise InvalidSetting("invalid option access_key/secret_key: give both or neither")
    connection = Connection(
        bucket=given["bucket"], prefix=given.get("prefix", "ledgerd").strip("/"),
        endpoint_url=given.get("endpoint") or None, region=given.get("region", "us-east-1"),
        access_key=given.get("access_key"), secret_key=given.get("secret_key"))
    read = ReadOptions(
        connection=connection,
        ledgers=LedgerSelection.parse(given["ledgers"]) if given.get("ledgers") else None,
        cluster=given.get("cluster") or None, bookie_id=given.get("bookie_id") or None,
        partition_size_bytes=parse_size("partition_size", given.get(
            "partition_size", str(PARTITION_SIZE_BYTES_DEFAULT))),
        read_size_bytes=parse_size("read_size", given.get("read_size",
                                                          str(READ_SIZE_BYTES_DEFAULT))),
        pushdown=given.get("pushdown", "auto").lower(),
        include_open=_boolean("include_open", given.get("include_open", "false")))
    _check(read)
    return read


def _boolean(name: str, text: str) -> bool:
    value = text.strip().lower()
    if value not in ("true", "false"):
        raise InvalidSetting(f"invalid option {name}: {text!r} is not true or false")
    return value == "true"


def _check(read: ReadOptions) -> None:
    if read.pushdown not in PUSHDOWN_MODES:
        raise InvalidSetting(f"invalid option pushdown: {read.pushdown!r} is not one of "
                             f"{PUSHDOWN_MODES}")
    if not MiB <= read.read_size_bytes <= GiB:
        raise InvalidSetting("invalid option read_size: must be between 1MiB and 1GiB")
    if read.partition_size_bytes < read.read_size_bytes:
        raise InvalidSetting("invalid option partition_size: must be at least read_size")
