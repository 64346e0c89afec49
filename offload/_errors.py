"""Offload's additions to the one error tree (``ledger/errors.py``).

They subclass the tree's classes, so ``app/``'s single handler maps them
without knowing offload exists::

    StorageUnavailable
    └── RemoteStorageError     S3 refused or stayed unreachable after the retries
        ├── ObjectNotFound     404 for a key we expected (internal: callers decide
        │                      whether a missing object is normal or data loss)
        └── UploadNotFound     a multipart upload id S3 no longer knows
"""

from __future__ import annotations

from ledger.errors import StorageUnavailable


class RemoteStorageError(StorageUnavailable):
    """An S3 request failed for good: what, on which key, after how many attempts."""

    code = "EIO"

    def __init__(self, operation: str, key: str, attempts: int, reason: str) -> None:
        super().__init__(f"S3 {operation} of {key!r} failed after {attempts} attempt(s): {reason}")
        self.operation = operation
        self.key = key
        self.attempts = attempts
        self.reason = reason


class ObjectNotFound(RemoteStorageError):
    def __init__(self, operation: str, key: str) -> None:
        super().__init__(operation, key, 1, "no such key")


class UploadNotFound(RemoteStorageError):
    def __init__(self, operation: str, key: str) -> None:
        super().__init__(operation, key, 1, "no such multipart upload")
