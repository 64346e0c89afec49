"""The one error tree of ledgerd, sorted by who has to act.

::

    LedgerdError
    ├── CallerError              the request is wrong; retrying it unchanged fails again
    │   ├── NoSuchLedger         ENOLEDGER
    │   ├── NoSuchEntry          ENOENTRY
    │   ├── BadRequest           EBADREQ
    │   │   ├── EntryTooLarge    EBADREQ (HTTP 413): an entry or a batch over its limit
    │   │   ├── RequestTooLarge  EBADREQ (HTTP 413): a body over MAX_REQUEST_BODY_SIZE
    │   │   └── UnsupportedMediaType  EBADREQ (HTTP 415)
    │   ├── NotConfigured        EBADREQ (HTTP 409): a feature this server was not set up
    │   │                        for (offload without S3_BUCKET, GC switched off)
    │   ├── Unauthorized         EUA: wrong ledger password (HTTP 403)
    │   │   └── AuthenticationRequired  EUA: missing or wrong bearer token (HTTP 401)
    │   ├── LedgerFenced         EFENCED
    │   │   ├── WriterSuperseded cluster: this node no longer writes the ledger (taken
    │   │   │   │                over); the add may or may not be in it: retry with
    │   │   │   │                ?entry_id=N through any node
    │   │   │   └── NotHandedOver  the writer stopped before it took the add: routed
    │   │   │                    again, inside the node (never stored twice)
    │   │   └── ReplicaFenced    cluster: a replica refused an older epoch (carries the
    │   │                        epoch it is fenced at and its LAC)
    │   ├── LedgerClosed         ECLOSED
    │   ├── EntryConflict        ECONFLICT
    │   ├── NotSealed            ENOTSEALED
    │   ├── HostNotAllowed       EBADREQ: a Host header this server does not answer to
    │   │                        (DNS rebinding; ALLOWED_HOSTS)
    │   ├── ForeignOrigin        EUA (HTTP 403): a browser request from another site
    │   └── BookieLive           EBADREQ (HTTP 409): decommissioning a bookie still registered
    ├── Backpressure             retry later (HTTP 503 + Retry-After)
    │   ├── WriteCacheFull       ETOOMANYREQUESTS
    │   ├── JournalFull          ETOOMANYREQUESTS
    │   ├── SyncTimeout          ETOOMANYREQUESTS: the journal did not sync within a wait
    │   ├── WouldBlock           a ``block=False`` call that would wait; the caller
    │   │                        retries it where waiting is fine (never reaches HTTP)
    │   ├── NotEnoughBookies     cluster: fewer writable bookies than the ensemble needs
    │   ├── MetadataConflict     cluster: a compare-and-swap in etcd lost a race too often
    │   ├── TooManyRequests      ETOOMANYREQUESTS: MAX_CONCURRENT_REQUESTS in flight (503)
    │   └── AuthenticationThrottled  ETOOMANYREQUESTS (HTTP 429): this client failed
    │                            MAX_AUTH_FAILURES password checks within AUTH_FAILURE_WINDOW
    ├── StorageUnavailable       the environment refuses; an operator acts
    │   ├── NotReady             EIO: starting or shutting down (HTTP 503)
    │   ├── ReadOnly             EREADONLY
    │   ├── TooManyLedgers       ETOOMANYLEDGERS: MAX_LEDGERS reached (HTTP 507)
    │   ├── DiskFull             EREADONLY: a write got ENOSPC, rolled back; retry once
    │   │                        space is freed (fsync errors stay DeviceBroken)
    │   ├── DeviceBroken         EIO (an OSError on the journal/entry log)
    │   ├── TierUnavailable      EIO: the remote tier (S3) did not answer; retry later (503)
    │   ├── ConnectionLost       client side: the connection to ledgerd failed or dropped
    │   ├── FormatMismatch       startup: device too small or holding a foreign format
    │   ├── IdentityMismatch     cluster startup: the data directory or journal is not
    │   │                        the one this BOOKIE_ID registered with (its cookie)
    │   ├── InvalidSetting       startup: a setting is out of range (names the setting)
    │   ├── MetadataUnavailable  cluster: etcd did not answer or refused (503)
    │   │   └── LeaseExpired     cluster: this node's membership lease is gone
    │   └── BookieUnreachable    cluster: another node did not answer a node-to-node call
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
    # Seconds after which the same request may well succeed (HTTP Retry-After);
    # None: retrying soon will not help.
    retry_after_s: float | None = None


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


class RequestTooLarge(BadRequest):
    code = "EBADREQ"


class UnsupportedMediaType(BadRequest):
    code = "EBADREQ"


class NotConfigured(CallerError):
    code = "EBADREQ"


class Unauthorized(CallerError):
    code = "EUA"


class AuthenticationRequired(Unauthorized):
    """A bearer token (admin or node-to-node) is missing or wrong."""

    code = "EUA"


class LedgerFenced(CallerError):
    code = "EFENCED"


class LedgerClosed(CallerError):
    code = "ECLOSED"


class EntryConflict(CallerError):
    code = "ECONFLICT"


class NotSealed(CallerError):
    code = "ENOTSEALED"


class HostNotAllowed(BadRequest):
    """The request's Host header is not a name this server answers to: a browser
    tricked by DNS rebinding sends the attacker's name."""

    code = "EBADREQ"


class ForeignOrigin(Unauthorized):
    """A browser sent the request from a page of another site (its ``Origin``)."""

    code = "EUA"


class BookieLive(CallerError):
    """Cluster mode: a bookie cannot be decommissioned while it is registered."""

    code = "EBADREQ"


class WriterSuperseded(LedgerFenced):
    """Cluster mode: another node took the ledger over (a higher writer epoch), so
    this node stopped writing it; a pending add may or may not be in the ledger."""

    code = "EFENCED"


class NotHandedOver(WriterSuperseded):
    """Cluster mode: the writer stopped before it took the add, so nothing of it
    reached a bookie and the node may route it again to the ledger's new writer.
    An add that reached the writer and then failed with ``WriterSuperseded`` is
    not routed again (docs/cluster.md §6.6): the new writer may have recovered
    it, and the client retries with ``?entry_id``."""


class ReplicaFenced(LedgerFenced):
    """Cluster mode: a bookie's replica is fenced at ``fenced_epoch``, above the
    epoch of the add or fence it refused (docs/cluster.md §5.1)."""

    code = "EFENCED"

    def __init__(self, ledger_id: int, fenced_epoch: int, lac: int) -> None:
        super().__init__(f"replica of ledger {ledger_id} is fenced at epoch {fenced_epoch}")
        self.ledger_id = ledger_id
        self.fenced_epoch = fenced_epoch
        self.lac = lac


# --- backpressure --------------------------------------------------------


class Backpressure(LedgerdError):
    code = "ETOOMANYREQUESTS"
    retry_after_s: float | None = 1.0


class WriteCacheFull(Backpressure):
    pass


class JournalFull(Backpressure):
    pass


class SyncTimeout(Backpressure):
    pass


class WouldBlock(Backpressure):
    """An engine call made with ``block=False`` would have to wait (for scrypt, a
    disk read, or room in the write cache or journal) and changed nothing; the
    caller makes it again with ``block=True`` where waiting is fine (off the
    event loop)."""


class NotEnoughBookies(Backpressure):
    """Cluster mode: a ledger needs more writable bookies than are registered."""

    retry_after_s = 5.0


class MetadataConflict(Backpressure):
    """Cluster mode: another node changed a ledger's metadata first, each time we
    tried; the caller re-reads and retries later."""


class TooManyRequests(Backpressure):
    """The server already serves MAX_CONCURRENT_REQUESTS requests."""


class AuthenticationThrottled(Backpressure):
    """This client failed too many password checks lately; until its oldest
    failure leaves the window no password of it is checked (no scrypt runs)."""

    def __init__(self, message: str, retry_after_s: float) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


# --- environment ---------------------------------------------------------


class StorageUnavailable(LedgerdError):
    code = "EIO"


class NotReady(StorageUnavailable):
    """The service is starting or shutting down; retry shortly."""

    code = "EIO"
    retry_after_s = 1.0


class ReadOnly(StorageUnavailable):
    code = "EREADONLY"


class TooManyLedgers(StorageUnavailable):
    """The bookie holds MAX_LEDGERS ledgers: deleting some, or a larger quota, helps."""

    code = "ETOOMANYLEDGERS"


class DiskFull(StorageUnavailable):
    """A write to an entry log failed with ENOSPC (or EDQUOT).  Not corruption:
    the writer rolled the log back to what its last fdatasync covered, so every
    append since the last successful sync is void and must be made again; the
    store keeps accepting writes and they succeed once space is freed (GC,
    deletes).  An fdatasync failure is never this, whatever its errno: it is
    ``DeviceBroken``."""

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


class IdentityMismatch(StorageUnavailable):
    """Cluster mode: this node's data directory or journal is not the one its
    BOOKIE_ID registered with (BookKeeper's cookies): wiped, replaced or swapped.
    Serving would present an empty bookie as one holding its replicas."""

    code = "EIO"


class InvalidSetting(StorageUnavailable):
    code = "EBADREQ"


class MetadataUnavailable(StorageUnavailable):
    """Cluster mode: etcd did not answer, or refused a request."""

    code = "EIO"
    retry_after_s = 2.0


class LeaseExpired(MetadataUnavailable):
    """Cluster mode: this node's lease in etcd expired or was revoked; everything it
    held under the lease (membership, auditor, offload locks) is gone."""


class BookieUnreachable(StorageUnavailable):
    """Cluster mode: another node did not answer a node-to-node call."""

    code = "EIO"
    retry_after_s = 1.0


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
