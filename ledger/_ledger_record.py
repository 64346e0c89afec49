"""The persisted form of one ledger's metadata (RocksDB ``ledgers`` family).

Value: UTF-8 JSON object with a ``v`` format version.  The password is
``salt`` and ``hash`` (hex) and ``pw_scheme`` (``PasswordScheme``'s value; a
record without it holds scrypt, as every record written before the tag).  JSON rather than a
struct because the record carries free-form user metadata and the offload
state, and is written once per ledger per checkpoint, not per entry.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any

from common.errors import InvariantViolation

from ._model import LedgerInfo, LedgerState, OffloadInfo, OffloadState, TierPosition
from ._password import PasswordHash, PasswordScheme

FORMAT_VERSION = 1
_OFFLOAD_FIELDS = tuple(f.name for f in dataclasses.fields(OffloadInfo))


def _plain(value: Any) -> Any:
    return value.value if isinstance(value, OffloadState) else value


@dataclass(frozen=True, kw_only=True)
class LedgerRecord:
    ledger_id: int
    state: LedgerState
    password: PasswordHash
    last_entry_id: int  # -1 when empty; the highest entry id durable in the index
    length: int
    created_at: float
    closed_at: float | None
    metadata: dict[str, str] = field(default_factory=dict)
    offload: OffloadInfo = field(default_factory=OffloadInfo)
    tier: TierPosition = field(default_factory=TierPosition)
    local_first_entry_id: int = 0

    def info(self) -> LedgerInfo:
        return LedgerInfo(
            ledger_id=self.ledger_id, state=self.state, last_add_confirmed=self.last_entry_id,
            length=self.length, entries=self.last_entry_id + 1, created_at=self.created_at,
            closed_at=self.closed_at, metadata=dict(self.metadata), offload=self.offload,
            tier=self.tier, local_first_entry_id=self.local_first_entry_id,
        )

    def encode(self) -> bytes:
        doc: dict[str, Any] = {
            "v": FORMAT_VERSION,
            "id": self.ledger_id,
            "state": self.state.value,
            "salt": self.password.salt.hex(),
            "hash": self.password.digest.hex(),
            "last": self.last_entry_id,
            "length": self.length,
            "created": self.created_at,
            "closed": self.closed_at,
            "meta": self.metadata,
            # Field by field rather than dataclasses.asdict, which deep-copies every
            # value: it was most of the cost of a checkpoint that records many
            # ledgers' offload states at once (a pack).  Same JSON.
            "offload": {name: _plain(getattr(self.offload, name)) for name in _OFFLOAD_FIELDS},
        }
        # The password's scheme is written unless it is scrypt, which records made
        # before the tag hold: those decode as they always did.
        if self.password.scheme != PasswordScheme.SCRYPT:
            doc["pw_scheme"] = int(self.password.scheme)
        # Written only when set, so records of ledgers never tiered stay as they were.
        if self.tier != TierPosition():
            doc["tier"] = dataclasses.asdict(self.tier)
        if self.local_first_entry_id:
            doc["local_first"] = self.local_first_entry_id
        return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()

    @classmethod
    def decode(cls, raw: bytes) -> LedgerRecord:
        try:
            doc = json.loads(raw)
            if doc.get("v") != FORMAT_VERSION:
                raise ValueError(f"unknown ledger record version {doc.get('v')!r}")
            off = dict(doc["offload"])
            off["state"] = OffloadState(off["state"])
            # JSON has no tuples; records written before the field have none.
            off["upload_parts"] = tuple(tuple(part) for part in off.get("upload_parts", ()))
            return cls(
                ledger_id=int(doc["id"]), state=LedgerState(doc["state"]),
                password=PasswordHash(
                    bytes.fromhex(doc["salt"]), bytes.fromhex(doc["hash"]),
                    PasswordScheme(int(doc.get("pw_scheme", PasswordScheme.SCRYPT)))),
                last_entry_id=int(doc["last"]), length=int(doc["length"]),
                created_at=float(doc["created"]), closed_at=doc["closed"],
                metadata=dict(doc["meta"]), offload=OffloadInfo(**off),
                tier=TierPosition(**doc.get("tier", {})),
                local_first_entry_id=int(doc.get("local_first", 0)),
            )
        except (ValueError, KeyError, TypeError) as exc:
            raise InvariantViolation(f"undecodable ledger record: {exc}") from exc
