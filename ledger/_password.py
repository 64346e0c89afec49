"""Ledger passwords: stored only as salted scrypt hashes, compared in constant time.

Every mutating call carries the password, so verifying it with scrypt each time
would cap adds at ~100/s per core.  After one successful scrypt check the
password's keyed BLAKE2b digest is kept in memory (never on disk) and later
calls compare against it with ``hmac.compare_digest``.  A wrong password always
pays the full scrypt cost, which keeps guessing slow.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import threading
from dataclasses import dataclass

SALT_SIZE_BYTES = 16
HASH_SIZE_BYTES = 32
# scrypt cost: about 9 ms on this class of machine; paid on create and on misses.
_SCRYPT_N = 2**11
_SCRYPT_R = 8
_SCRYPT_P = 1


@dataclass(frozen=True)
class PasswordHash:
    salt: bytes
    digest: bytes

    @classmethod
    def create(cls, password: str) -> PasswordHash:
        salt = os.urandom(SALT_SIZE_BYTES)
        return cls(salt=salt, digest=_scrypt(password, salt))

    def matches(self, password: str) -> bool:
        return hmac.compare_digest(_scrypt(password, self.salt), self.digest)


def _scrypt(password: str, salt: bytes) -> bytes:
    return hashlib.scrypt(
        password.encode("utf-8"), salt=salt, n=_SCRYPT_N, r=_SCRYPT_R, p=_SCRYPT_P,
        dklen=HASH_SIZE_BYTES,
    )


class PasswordVerifier:
    """Constant-time password checks with an in-memory cache of verified digests."""

    def __init__(self) -> None:
        self._key = os.urandom(32)
        self._verified: dict[int, bytes] = {}
        self._lock = threading.Lock()

    def _fast_digest(self, password: str) -> bytes:
        return hashlib.blake2b(password.encode("utf-8"), key=self._key, digest_size=32).digest()

    def verify_cached(self, ledger_id: int, password: str) -> bool:
        """True when ``password`` is the one already verified for the ledger (no
        scrypt); False means only :meth:`verify` can tell."""
        # A dict read is atomic; writers hold the lock only to keep remember/forget
        # from interleaving.  Every add passes here, so it takes no lock.
        known = self._verified.get(ledger_id)
        if known is None:
            return False
        fast = hashlib.blake2b(password.encode(), key=self._key, digest_size=32).digest()
        return hmac.compare_digest(known, fast)

    def verify(self, ledger_id: int, stored: PasswordHash, password: str) -> bool:
        if self.verify_cached(ledger_id, password):
            return True
        if not stored.matches(password):
            return False
        with self._lock:
            self._verified[ledger_id] = self._fast_digest(password)
        return True

    def remember(self, ledger_id: int, password: str) -> None:
        """Record a password just hashed at create time, sparing the first scrypt check."""
        fast = self._fast_digest(password)
        with self._lock:
            self._verified[ledger_id] = fast

    def forget(self, ledger_id: int) -> None:
        with self._lock:
            self._verified.pop(ledger_id, None)
