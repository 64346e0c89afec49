"""Ledger passwords: stored only as salted, keyed digests, compared in constant time.

A ledger password is a shared secret between the ledger's writers and this
node, as BookKeeper's master key is (a bookie stores a digest of it); every
mutating call carries it.  docs/api.md ("Security") gives the threat model;
in short:

* New hashes (scheme ``KEYED_BLAKE2B``) are BLAKE2b-256 of the salt followed
  by the password's UTF-8, keyed with the node's password key
  (``ledger/_node_key.py``: 32 random bytes made when the data directory is
  first opened, a 0600 file beside the index, never in the index, the journal
  or S3) and personalised ``ledgerd-pw-v1``; the salt is 16 bytes unique to
  the ledger (a random prefix per process and a counter).  Keyed BLAKE2b is
  a MAC by design (RFC 7693: no HMAC wrapper needed, no length extension) and
  costs about a microsecond, so creating a ledger costs what a write costs and
  every call is checked against the stored digest with no cache and no KDF,
  after a restart too.
* Offline guessing from stolen hashes needs the node key: without it a digest
  says nothing about the password, however weak.  With the key too (someone
  who read the whole data directory, who can read and rewrite the ledgers
  themselves anyway), guessing costs one BLAKE2b a guess, so ledger passwords
  should be random tokens, not human passwords reused elsewhere.
* Online guessing is bounded by the service, not by the hash's cost: a client
  is refused after MAX_AUTH_FAILURES failures within AUTH_FAILURE_WINDOW
  (``app/admission.py``).

``SCRYPT`` (n=2^11, r=8, p=1: 2 MiB, several ms of CPU) is what data
directories written before the scheme tag hold, and what cluster ledgers
created before keyed digests hold in etcd (cluster mode keys with one key
shared by its nodes: node/_cluster_password_key.py); a verifier without a key
still makes them, and only tests use one.  Those are still verified: with scrypt,
then against an in-memory digest, in a cache of at most
``VERIFIED_ENTRIES_MAX`` ledgers (oldest verified first out); the engine then
journals a keyed hash in the scrypt hash's place (``_writes.py``), so each
ledger pays scrypt once, not once per restart.

Every stored hash carries its scheme (``PasswordHash.scheme``; the journal's
CREATE_KEYED record and the index record tag it), so a future scheme is a new
tag, not a format break.
"""

from __future__ import annotations

import enum
import hashlib
import hmac
import itertools
import os
import threading
from dataclasses import dataclass

from common.errors import InvariantViolation, Unauthorized, WouldBlock

SALT_SIZE_BYTES = 16
HASH_SIZE_BYTES = 32
KEY_SIZE_BYTES = 32
# BLAKE2b's personalisation: a digest made for ledger passwords is never valid
# for anything else the same key might one day sign.
_PERSON = b"ledgerd-pw-v1"
# scrypt cost of the old scheme, kept to verify what it stored (and for cluster
# mode's hashes); below OWASP's n=2^17 on purpose: it guarded random tokens.
_SCRYPT_N = 2**11
_SCRYPT_R = 8
_SCRYPT_P = 1
# Ledgers whose scrypt-hashed password is remembered once verified: enough for
# every ledger an old data directory is likely to have in use; past it the
# oldest verified is forgotten and pays scrypt again at its next check.
VERIFIED_ENTRIES_MAX = 65_536

# KDF runs (scrypt) in this process: tests count them (creating keyed ledgers
# and checking them after a restart must run none).  A lock per scrypt is
# nothing next to the scrypt.
_kdf_lock = threading.Lock()
_kdf_run_count = 0


def kdf_runs() -> int:
    """How many scrypt hashes this process has computed so far."""
    return _kdf_run_count


# The public name of a password key: a keyed BLAKE2b of a fixed message under
# the key.  It is a MAC of a known message, so it says nothing of the key, and
# nodes (or a node and etcd) compare it to tell whether they hold the same key.
_KEY_ID_MESSAGE = b"ledgerd cluster password key id"
_KEY_ID_PERSON = b"ledgerd-keyid-v1"
KEY_ID_SIZE_BYTES = 16


def password_key_id(key: bytes) -> str:
    """The hex id of a password key (safe to publish: etcd holds the cluster's)."""
    if len(key) != KEY_SIZE_BYTES:
        raise InvariantViolation(f"a password key is {KEY_SIZE_BYTES} bytes, got {len(key)}")
    return hashlib.blake2b(_KEY_ID_MESSAGE, key=key, person=_KEY_ID_PERSON,
                           digest_size=KEY_ID_SIZE_BYTES).hexdigest()


class PasswordScheme(enum.IntEnum):
    """How a stored digest was made; the value is what records store."""

    SCRYPT = 1  # scrypt(password, salt), n=2^11 r=8 p=1: records without a tag
    KEYED_BLAKE2B = 2  # BLAKE2b-256(salt || password, key=node key, person=_PERSON)


_KEYED = PasswordScheme.KEYED_BLAKE2B


@dataclass(frozen=True, slots=True)
class PasswordHash:
    salt: bytes
    digest: bytes
    # Records written before the tag hold scrypt digests, hence the default.
    scheme: PasswordScheme = PasswordScheme.SCRYPT


def _scrypt(password: str, salt: bytes) -> bytes:
    global _kdf_run_count
    with _kdf_lock:
        _kdf_run_count += 1
    return hashlib.scrypt(
        password.encode("utf-8"), salt=salt, n=_SCRYPT_N, r=_SCRYPT_R, p=_SCRYPT_P,
        dklen=HASH_SIZE_BYTES,
    )


def _keyed_state(key: bytes) -> hashlib.blake2b:
    """BLAKE2b-256 keyed with ``key``, before any message: each digest copies it
    (cheaper than keying a new state: the key is a whole block to compress)."""
    return hashlib.blake2b(key=key, person=_PERSON, digest_size=HASH_SIZE_BYTES)


def _digest(keyed: hashlib.blake2b, salt: bytes, password: str) -> bytes:
    # The salt has a fixed length, so salt || password is unambiguous.
    state = keyed.copy()
    state.update(salt + password.encode("utf-8"))
    return state.digest()


class PasswordVerifier:
    """Hashes new passwords and checks calls' passwords in constant time.

    ``node_key`` (the data directory's password key, or the cluster's) makes new
    hashes keyed; without one they are scrypt.  Verified scrypt passwords are
    remembered under a key random to this process."""

    def __init__(self, node_key: bytes | None = None, *,
                 verified_entries_max: int = VERIFIED_ENTRIES_MAX) -> None:
        if node_key is not None and len(node_key) != KEY_SIZE_BYTES:
            raise InvariantViolation(f"a password key is {KEY_SIZE_BYTES} bytes, "
                                     f"got {len(node_key)}")
        # A keyed hash needs its salts unique (equal passwords get different
        # digests), not unpredictable: a random prefix per process and a counter.
        # os.urandom per create released the GIL on the event loop, and getting
        # it back behind the journal's threads cost more than the rest of a create.
        self._salt_prefix = os.urandom(SALT_SIZE_BYTES - 8)
        self._salt_count = itertools.count()
        self._keyed = None if node_key is None else _keyed_state(node_key)
        self._cache_keyed = _keyed_state(os.urandom(KEY_SIZE_BYTES))
        self._verified_max = verified_entries_max
        # ledger id → keyed digest of its verified scrypt-hashed password, oldest
        # verified first (a dict keeps insertion order).
        self._verified: dict[int, bytes] = {}
        self._lock = threading.Lock()

    def hash(self, password: str) -> PasswordHash:
        """The stored form of a new ledger's password (scrypt without a node key)."""
        if self._keyed is None:
            salt = os.urandom(SALT_SIZE_BYTES)  # scrypt's salt must be unpredictable too
            return PasswordHash(salt, _scrypt(password, salt), PasswordScheme.SCRYPT)
        # next() on a count is atomic under the GIL: no lock for concurrent creates.
        salt = self._salt_prefix + next(self._salt_count).to_bytes(8, "big")
        return PasswordHash(salt, _digest(self._keyed, salt, password),
                            PasswordScheme.KEYED_BLAKE2B)

    def verify_fast(self, ledger_id: int, stored: PasswordHash, password: str) -> bool:
        """True when ``password`` is the ledger's and that takes no KDF: always
        for a keyed hash, for scrypt once it was verified; False means wrong, or
        (scrypt) only :meth:`verify` can tell."""
        keyed = self._keyed
        if stored.scheme is _KEYED and keyed is not None:
            # Every add passes here: _digest inlined (no call layer).
            state = keyed.copy()
            state.update(stored.salt + password.encode())
            return hmac.compare_digest(state.digest(), stored.digest)
        if stored.scheme is _KEYED:
            raise InvariantViolation(f"ledger {ledger_id}: a keyed password hash, and no "
                                     "password key to check it with")
        return self.verified_before(ledger_id, password)

    def verified_before(self, ledger_id: int, password: str) -> bool:
        """True when ``password`` is the scrypt-hashed password this verifier
        verified (or hashed) for the ledger and still remembers."""
        # A dict read is atomic; writers hold the lock only to keep remember,
        # evict and forget from interleaving.  Every add passes here: no lock.
        known = self._verified.get(ledger_id)
        if known is None:
            return False
        return hmac.compare_digest(known, self._cache_digest(ledger_id, password))

    def _cache_digest(self, ledger_id: int, password: str) -> bytes:
        return _digest(self._cache_keyed, ledger_id.to_bytes(SALT_SIZE_BYTES), password)

    def verify(self, ledger_id: int, stored: PasswordHash, password: str) -> bool:
        if self.verify_fast(ledger_id, stored, password):
            return True
        if stored.scheme != PasswordScheme.SCRYPT:
            return False
        if not hmac.compare_digest(_scrypt(password, stored.salt), stored.digest):
            return False
        self._remember(ledger_id, self._cache_digest(ledger_id, password))
        return True

    def check(self, ledger_id: int, stored: PasswordHash, password: str, *,
              block: bool = True) -> bool:
        """Unauthorized unless ``password`` is the ledger's; with ``block=False`` a
        scrypt-hashed password not verified before raises WouldBlock instead of
        paying scrypt (a keyed hash never does: it is answered at once).  True
        when this check ran scrypt, so that the caller may replace the hash."""
        if self.verify_fast(ledger_id, stored, password):
            return False
        if stored.scheme == PasswordScheme.SCRYPT and not block:
            raise WouldBlock(f"ledger {ledger_id}: the password needs a full (scrypt) check")
        if not self.verify(ledger_id, stored, password):
            raise Unauthorized(f"wrong password for ledger {ledger_id}")
        return True

    @property
    def keyed(self) -> bool:
        """Whether new hashes are keyed (this verifier has a node key)."""
        return self._keyed is not None

    def remember(self, ledger_id: int, stored: PasswordHash, password: str) -> None:
        """Record a password just hashed at create time, sparing a scrypt hash
        its first check (a keyed hash needs nothing)."""
        if stored.scheme == PasswordScheme.SCRYPT:
            self._remember(ledger_id, self._cache_digest(ledger_id, password))

    def _remember(self, ledger_id: int, digest: bytes) -> None:
        with self._lock:
            self._verified.pop(ledger_id, None)
            self._verified[ledger_id] = digest
            while len(self._verified) > self._verified_max:
                del self._verified[next(iter(self._verified))]

    def forget(self, ledger_id: int) -> None:
        with self._lock:
            self._verified.pop(ledger_id, None)

    @property
    def verified_count(self) -> int:
        """Scrypt-hashed passwords remembered now (at most ``verified_entries_max``)."""
        return len(self._verified)
