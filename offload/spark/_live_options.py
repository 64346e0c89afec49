"""Options of the live reads (``url`` given): batch and stream, parsed once (pure).

``url``: one or more node URLs, comma-separated (a standalone node, or any
nodes of a cluster); ``ledgers``: ids and ranges as for S3 (``3,7,10-20``)
and/or ``metadata.KEY=VALUE`` pairs (all must match; new ledgers matching are
discovered as they are created); ``password``: sent as ``X-Ledger-Password``
with every read, ``passwords``: per ledger, ``{"7": "pw"}`` (JSON), over
``password``; ``partition_size``: bytes per Spark partition (from the ledger's
mean entry size); ``discovery_grace``: seconds a new ledger's id may take to
become visible in a listing (see ``_stream``).  With ``bucket`` (and the other
S3 options of the batch source), entries whose local copy is gone are read
from S3 directly, as the S3 source reads them; without it the node fetches
them from S3 itself.  The same rows either way.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass

from common.errors import InvalidSetting
from common.units import GiB, MiB

from ._options import KNOWN_OPTIONS, LedgerSelection, ReadOptions, parse_options, parse_size

LIVE_PARTITION_SIZE_BYTES_DEFAULT = 64 * MiB
DISCOVERY_GRACE_S_DEFAULT = 30.0
LIVE_OPTIONS = frozenset({"url", "password", "passwords", "discovery_grace"})
# S3 options that only make sense with a bucket (the S3 fallback of live reads).
_S3_ONLY = frozenset({"endpoint", "bucket", "prefix", "region", "cluster", "bookie_id",
                      "access_key", "secret_key", "read_size"})
_URL = re.compile(r"https?://[^/\s,]+")
_METADATA = re.compile(r"metadata\.([^=]*)=(.*)", re.DOTALL)


@dataclass(frozen=True)
class LiveOptions:
    urls: tuple[str, ...]
    ledgers: LedgerSelection | None = None
    metadata: tuple[tuple[str, str], ...] = ()
    password: str | None = None
    passwords: tuple[tuple[int, str], ...] = ()
    # The S3 source's options when ``bucket`` is given: entries whose local
    # copy is gone are read from S3 directly.
    s3: ReadOptions | None = None
    partition_size_bytes: int = LIVE_PARTITION_SIZE_BYTES_DEFAULT
    discovery_grace_s: float = DISCOVERY_GRACE_S_DEFAULT

    def password_of(self, ledger_id: int) -> str | None:
        return dict(self.passwords).get(ledger_id, self.password)

    def selects(self, ledger_id: int, metadata: Mapping[str, str]) -> bool:
        return ((self.ledgers is None or ledger_id in self.ledgers)
                and all(metadata.get(key) == value for key, value in self.metadata))

    def __repr__(self) -> str:
        # Readers and partitions are logged and pickled; never print a password.
        return (f"LiveOptions(urls={self.urls!r}, ledgers={self.ledgers!r}, "
                f"metadata={self.metadata!r}, s3={self.s3!r})")


def is_live(options: Mapping[str, str]) -> bool:
    return any(key.lower() == "url" for key in options)


def parse_urls(text: str) -> tuple[str, ...]:
    urls = []
    for part in text.split(","):
        url = part.strip().rstrip("/")
        if "://" not in url:
            url = f"http://{url}"
        if not _URL.fullmatch(url):
            raise InvalidSetting(f"invalid option url: {part.strip()!r} is not an http:// or "
                                 "https:// node URL")
        urls.append(url)
    return tuple(dict.fromkeys(urls))


def parse_ledgers(text: str) -> tuple[LedgerSelection | None, tuple[tuple[str, str], ...]]:
    """``3,7,10-20,metadata.team=a`` → (the ids, the metadata pairs)."""
    ids: list[str] = []
    pairs: list[tuple[str, str]] = []
    for part in text.split(","):
        match = _METADATA.fullmatch(part.strip())
        if match is not None:
            pairs.append((match[1], match[2]))
        elif part.strip():
            ids.append(part)
    return (LedgerSelection.parse(",".join(ids)) if ids else None), tuple(pairs)


def _passwords(text: str) -> tuple[tuple[int, str], ...]:
    try:
        given = json.loads(text)
        if not isinstance(given, dict):
            raise ValueError("not an object")
        return tuple(sorted((int(key), str(value)) for key, value in given.items()))
    except ValueError as exc:
        raise InvalidSetting('invalid option passwords: give a JSON object of ledger id to '
                             'password, like {"7": "pw"}') from exc


def parse_live_options(options: Mapping[str, str]) -> LiveOptions:
    given = {key.lower(): value for key, value in options.items()}
    unknown = sorted(set(given) - KNOWN_OPTIONS - LIVE_OPTIONS - {"include_open"})
    if unknown:
        raise InvalidSetting(f"unknown ledgerd option(s) {unknown}; known: "
                             f"{sorted((KNOWN_OPTIONS | LIVE_OPTIONS) - {'path', 'paths'})}")
    if not given.get("url", "").strip():
        raise InvalidSetting("invalid option url: give one or more node URLs")
    s3 = None
    if given.get("bucket"):
        # Reading from S3 what the node no longer holds locally: as far as S3
        # holds it, open ledgers (tiered while open) included.
        s3 = parse_options({key: value for key, value in given.items()
                            if key in KNOWN_OPTIONS and key not in ("ledgers", "partition_size")}
                           | {"include_open": "true"})
    elif set(given) & (_S3_ONLY - {"bucket"}):
        raise InvalidSetting(f"invalid option(s) {sorted(set(given) & _S3_ONLY)}: they say "
                             "where S3 is, and need the bucket option")
    ledgers, metadata = parse_ledgers(given.get("ledgers", ""))
    partition_size = parse_size("partition_size", given.get(
        "partition_size", str(LIVE_PARTITION_SIZE_BYTES_DEFAULT)))
    if not MiB <= partition_size <= 64 * GiB:
        raise InvalidSetting("invalid option partition_size: must be between 1MiB and 64GiB")
    try:
        grace = float(given.get("discovery_grace", DISCOVERY_GRACE_S_DEFAULT))
    except ValueError as exc:
        raise InvalidSetting("invalid option discovery_grace: seconds, like 30") from exc
    return LiveOptions(
        urls=parse_urls(given["url"]), ledgers=ledgers, metadata=metadata,
        password=given.get("password"),
        passwords=_passwords(given["passwords"]) if given.get("passwords") else (),
        s3=s3, partition_size_bytes=partition_size, discovery_grace_s=max(0.0, grace))
