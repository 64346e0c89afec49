"""The one error tree of ledgerd, sorted by who has to act.

::

    LedgerdError
    ├── CallerError              the request is wrong; retrying it unchanged fails again
    │   ├── NoSuchLedger         ENOLEDGER
    │   ├── NoSuchEntry          ENOENTRY
    │   ├── BadRequest           EBADREQ
    │   │   └── EntryTooLarge    EBADREQ (HTTP 413)
    │   ├── Unauthorized         EUA
    │   ├── LedgerFenced         EFENCED
    │   ├── LedgerClosed         ECLOSED
    │   ├── EntryConflict        ECONFLICT
    │   └── NotSealed            ENOTSEALED
    ├── Backpressure             retry later (HTTP 503 + Retry-After)
    │   ├── WriteCacheFull       ETOOMANYREQUESTS
    │   ├── JournalFull          ETOOMANYREQUESTS
    │   └── WouldBlock           a ``block=False`` call that would wait; the caller
    │                            retries it where waiting is fine (never reaches HTTP)
    ├── StorageUnavailable       the environment refuses; an operator acts
    │   ├── ReadOnly             EREADONLY
    │   ├── DeviceBroken         EIO (an OSError on the journal/entry log)
    │   ├── TierUnavailable      EIO: the remote tier (S3) did not answer; retry later (503)
    │   ├── ConnectionLost       client side: the connection to ledgerd failed or dropped
    │   ├── FormatMismatch       startup: device too small or holding a foreign format
    │   └── InvalidSetting       startup: a setting is out of range (names the setting)
    ├── Corruption               bytes on disk are wrong; never returned as data (EIO)
    │   └── CorruptRecord        carries the file and offset
    └── InvariantViolation       a bug in ledgerd

Packages that own a third-party library (rocksdict, OSError on devices, botocore)
convert its exceptions into this tree with ``raise ... from exc``; ``app/`` maps
the tree to HTTP in exactly one handler.
"""

from __future__ import annotations


class LedgerdError(Exception):
    """Root of every error ledgerd raises on purpose."""

    code: str = "EIO"


# --- caller errors -------------------------------------------------------


class CallerError(LedgerdError):
    code = "EBADREQ"


class NoSuchLedger(CallerError):
    code = "ENOLEDGER"

    def __init__(self, ledger_id: int) -> None:
        super().__init__(f"ledger {ledger_id} does not exist")
        self.ledger_id = ledger_id


class NoSuchEntry(CallerError):
    code = "ENOENTRY"

    def __init__(self, ledger_id: int, entry_id: int) -> None:
        super().__init__(f"entry {entry_id} of ledger {ledger_id} does not exist")
        self.ledger_id = ledger_id
        self.entry_id = entry_id


class BadRequest(CallerError):
    code = "EBADREQ"


class EntryTooLarge(BadRequest):
    code = "EBADREQ"


class Unauthorized(CallerError):
    code = "EUA"


class LedgerFenced(CallerError):
    code = "EFENCED"


class LedgerClosed(CallerError):
    code = "ECLOSED"


class EntryConflict(CallerError):
    code = "ECONFLICT"


class NotSealed(CallerError):
    code = "ENOTSEALED"


# --- backpressure --------------------------------------------------------


class Backpressure(LedgerdError):
    code = "ETOOMANYREQUESTS"
    retry_after_s: float = 1.0


class WriteCacheFull(Backpressure):
    pass


class JournalFull(Backpressure):
    pass


class WouldBlock(Backpressure):
    """An engine call made with ``block=False`` would have to wait (for scrypt, a
    disk read, or room in the write cache or journal) and changed nothing; the
    caller makes it again with ``block=True`` where waiting is fine (off the
    event loop)."""


# --- environment ---------------------------------------------------------


class StorageUnavailable(LedgerdError):
    code = "EIO"


class ReadOnly(StorageUnavailable):
    code = "EREADONLY"


class DeviceBroken(StorageUnavailable):
    code = "EIO"


class TierUnavailable(StorageUnavailable):
    """The remote tier holding offloaded entries failed after its retries.  The
    bookie itself is healthy and the same request may well succeed once the
    tier is back, so callers are told to retry (HTTP 503 + Retry-After)."""

    code = "EIO"
    retry_after_s = 5.0


class ConnectionLost(StorageUnavailable):
    """Client side (``streaming``): the connection to the service could not be made
    or dropped.  Appends sent and not acknowledged may or may not have landed;
    resuming by entry id (DESIGN.md §5a) settles which."""

    code = "EIO"


class FormatMismatch(StorageUnavailable):
    code = "EIO"


class InvalidSetting(StorageUnavailable):
    code = "EBADREQ"


# --- corruption ----------------------------------------------------------


class Corruption(LedgerdError):
    code = "EIO"


class CorruptRecord(Corruption):
    """A record whose bytes fail their checks, with where it lives."""

    def __init__(self, path: str, offset: int, reason: str) -> None:
        super().__init__(f"corrupt record in {path} at offset {offset}: {reason}")
        self.path = path
        self.offset = offset
        self.reason = reason


# --- bugs ----------------------------------------------------------------


class InvariantViolation(LedgerdError):
    code = "EIO"


def invariant(condition: bool, message: str) -> None:
    """Check a property that must hold; unlike ``assert`` it survives ``python -O``."""
    if not condition:
        raise InvariantViolation(message)
