"""Ledger passwords: stored only as salted scrypt hashes, compared in constant time.

Every mutating call carries the password, so verifying it with scrypt each time
would cap adds at ~100/s per core.  After one successful scrypt check the
password's keyed BLAKE2b digest is kept in memory (never on disk; the key is
random per process) and later calls compare against it with
``hmac.compare_digest``.  A wrong password always pays the full scrypt cost,
which keeps guessing slow.

The cost, n=2^11, r=8, p=1 (2 MiB of memory, about 9 ms of CPU), is below
OWASP's recommendation for user passwords (n=2^17, r=8, p=1: 128 MiB, over
100 ms).  Deliberately:

* The hashes guard who may change a ledger, not what it holds: they lie in the
  journal and the RocksDB index next to the entries, unencrypted.  Whoever can
  read the hashes to crack them offline can read, and rewrite, the data itself.
  A stronger hash only helps a user who reuses a human password elsewhere, so
  ledger passwords should be random tokens, which no cost factor needs to save.
* Online guessing is what the cost slows, and the service bounds it anyway:
  checks run on their own few threads and a client is refused after
  MAX_AUTH_FAILURES failures within AUTH_FAILURE_WINDOW (``app/admission.py``).
* Every check needs the cost's memory at once: 128 MiB a check would let a few
  concurrent creates or first checks after a restart take gigabytes, and make
  each ledger creation cost a tenth of a second of CPU.

Changing the cost needs a format change: a stored hash does not record its
parameters (``PasswordHash`` is salt and digest only).
"""

from __future__ import annotations

import hashlib
import hmac
import os
import threading
from dataclasses import dataclass

from common.errors import Unauthorized, WouldBlock

SALT_SIZE_BYTES = 16
HASH_SIZE_BYTES = 32
# scrypt cost: about 9 ms on this class of machine; paid on create and on misses.
# Below OWASP's n=2^17 on purpose: the module docstring says why.
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
        # Keyed once: copying a keyed state costs less than keying one per add.
        self._keyed = hashlib.blake2b(key=os.urandom(32), digest_size=32)
        self._verified: dict[int, bytes] = {}
        self._lock = threading.Lock()

    def _fast_digest(self, password: str) -> bytes:
        digest = self._keyed.copy()
        digest.update(password.encode())
        return digest.digest()

    def verify_cached(self, ledger_id: int, password: str) -> bool:
        """True when ``password`` is the one already verified for the ledger (no
        scrypt); False means only :meth:`verify` can tell."""
        # A dict read is atomic; writers hold the lock only to keep remember/forget
        # from interleaving.  Every add passes here, so it takes no lock.
        known = self._verified.get(ledger_id)
        if known is None:
            return False
        return hmac.compare_digest(known, self._fast_digest(password))

    def verify(self, ledger_id: int, stored: PasswordHash, password: str) -> bool:
        if self.verify_cached(ledger_id, password):
            return True
        if not stored.matches(password):
            return False
        with self._lock:
            self._verified[ledger_id] = self._fast_digest(password)
        return True

    def check(self, ledger_id: int, stored: PasswordHash, password: str, *,
              block: bool = True) -> None:
        """Unauthorized unless ``password`` is the ledger's; with ``block=False`` a
        password not verified before raises WouldBlock instead of paying scrypt."""
        if self.verify_cached(ledger_id, password):
            return
        if not block:
            raise WouldBlock(f"ledger {ledger_id}: the password needs a full (scrypt) check")
        if not self.verify(ledger_id, stored, password):
            raise Unauthorized(f"wrong password for ledger {ledger_id}")

    def remember(self, ledger_id: int, password: str) -> None:
        """Record a password just hashed at create time, sparing the first scrypt check."""
        fast = self._fast_digest(password)
        with self._lock:
            self._verified[ledger_id] = fast

    def forget(self, ledger_id: int) -> None:
        with self._lock:
            self._verified.pop(ledger_id, None)
