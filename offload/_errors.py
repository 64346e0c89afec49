"""Offload's addition to the one error tree (``common/errors.py``), and the
answers and signals inside the package that are not errors of the tree.

``RemoteStorageError`` subclasses the tree's ``TierUnavailable``, so
``app/``'s single handler maps it (503 ``EIO`` + Retry-After: the bookie is
fine, S3 is not, yet) without knowing offload exists::

    StorageUnavailable
    └── TierUnavailable
        └── RemoteStorageError     S3 refused or stayed unreachable after the retries

``ObjectNotFound`` and ``UploadNotFound`` are answers ("no such key", "no such
multipart upload") that the caller inside offload turns into a decision: a
missing index means a segment to redo, a missing segment under an OFFLOADED
ledger is data loss (``CorruptRecord``), a vanished upload at completion means
"verify".  They are public because implementations of the ``ObjectStore``
seam raise them; they never leave the offloader's or the reader's methods.

``TransientStorageError`` is what one attempt of a request raises when another
attempt may succeed (5xx, SlowDown, a timeout, a reset connection);
:class:`~offload._retrying.RetryingObjectStore` retries it and turns the last
one into ``RemoteStorageError``.  ``OffloadCancelled`` is the service stopping:
the offload stays IN_PROGRESS and its multipart upload open, to be resumed.
"""

from __future__ import annotations

from common.errors import TierUnavailable


class RemoteStorageError(TierUnavailable):
    """An S3 request failed for good: what, on which key, after how many attempts."""

    code = "EIO"

    def __init__(self, operation: str, key: str, attempts: int, reason: str) -> None:
        super().__init__(f"S3 {operation} of {key!r} failed after {attempts} attempt(s): {reason}")
        self.operation = operation
        self.key = key
        self.attempts = attempts
        self.reason = reason


class ObjectNotFound(Exception):
    def __init__(self, operation: str, key: str) -> None:
        super().__init__(f"S3 {operation}: no such key {key!r}")
        self.operation = operation
        self.key = key


class UploadNotFound(Exception):
    def __init__(self, operation: str, key: str) -> None:
        super().__init__(f"S3 {operation}: no such multipart upload for {key!r}")
        self.operation = operation
        self.key = key


class TransientStorageError(Exception):
    """One attempt failed in a way another attempt may not: what, on which key, why."""

    def __init__(self, operation: str, key: str, reason: str) -> None:
        super().__init__(f"S3 {operation} of {key!r}: {reason}")
        self.operation = operation
        self.key = key
        self.reason = reason


class OffloadCancelled(Exception):
    """The service is stopping; the ledger stays IN_PROGRESS and is resumed."""
