"""Ledger password hashing (ledger/_password.py): keyed BLAKE2b digests under the
node key, and the scrypt hashes older data directories (and cluster mode) hold."""

import hmac
import os

import pytest

from common.errors import InvariantViolation, Unauthorized, WouldBlock
from ledger import kdf_runs
from ledger._ledger_record import LedgerRecord
from ledger._model import LedgerState
from ledger._password import (
    KEY_SIZE_BYTES,
    PasswordHash,
    PasswordScheme,
    PasswordVerifier,
)

KEY = bytes(range(KEY_SIZE_BYTES))


def test_a_keyed_hash_matches_only_the_password_and_runs_no_kdf():
    verifier = PasswordVerifier(KEY)
    before = kdf_runs()
    h = verifier.hash("secret")
    assert h.scheme == PasswordScheme.KEYED_BLAKE2B
    assert (len(h.salt), len(h.digest)) == (16, 32)
    assert verifier.verify_fast(1, h, "secret")
    assert not verifier.verify_fast(1, h, "Secret")
    assert not verifier.verify(1, h, "")
    verifier.check(1, h, "secret", block=False)
    with pytest.raises(Unauthorized):  # answered at once: nothing to wait for
        verifier.check(1, h, "secret ", block=False)
    assert b"secret" not in h.salt + h.digest
    assert kdf_runs() == before


def test_salts_differ_so_equal_passwords_have_different_digests():
    verifier = PasswordVerifier(KEY)
    a, b = verifier.hash("a"), verifier.hash("a")
    assert a.salt != b.salt and a.digest != b.digest


def test_the_digest_needs_the_node_key():
    """Another key (a stolen index without the key file, guessed at) verifies
    nothing: the digest is a MAC of the password under the node's key."""
    h = PasswordVerifier(KEY).hash("secret")
    assert not PasswordVerifier(os.urandom(KEY_SIZE_BYTES)).verify(1, h, "secret")
    with pytest.raises(InvariantViolation):  # no key at all: a bug, not a wrong password
        PasswordVerifier().verify(1, h, "secret")


def test_checks_compare_in_constant_time(monkeypatch: pytest.MonkeyPatch):
    """Every comparison of a digest goes through hmac.compare_digest (a spy on
    it, not a fault: the test asserts which primitive compares)."""
    compared: list[tuple[bytes, bytes]] = []
    compare = hmac.compare_digest

    def spy(a: bytes, b: bytes) -> bool:
        compared.append((a, b))
        return compare(a, b)

    keyed = PasswordVerifier(KEY)
    h = keyed.hash("pw")
    legacy = PasswordVerifier()
    old = legacy.hash("pw")
    monkeypatch.setattr(hmac, "compare_digest", spy)  # the module _password calls through
    assert keyed.verify(1, h, "pw") and not keyed.verify(1, h, "px")
    assert legacy.verify(2, old, "pw") and legacy.verify(2, old, "pw")
    assert not legacy.verify(2, old, "px")
    # keyed: 2; scrypt: the scrypt compare, then the cached compare, then the
    # wrong one's cached compare and its scrypt compare.
    assert len(compared) == 6


def test_a_verifier_without_a_node_key_makes_scrypt_hashes():
    verifier = PasswordVerifier()
    before = kdf_runs()
    h = verifier.hash("pw")
    assert h.scheme == PasswordScheme.SCRYPT
    assert kdf_runs() == before + 1


def test_scrypt_hashes_verify_once_then_from_memory_and_failures_always_pay():
    h = PasswordVerifier().hash("pw")  # as data directories before keyed hashes hold
    verifier = PasswordVerifier(KEY)  # a keyed node checking an old ledger
    with pytest.raises(WouldBlock):
        verifier.check(1, h, "pw", block=False)
    before = kdf_runs()
    assert verifier.verify(1, h, "pw")
    assert verifier.verify(1, h, "pw")  # remembered: no scrypt
    verifier.check(1, h, "pw", block=False)
    assert kdf_runs() == before + 1
    assert not verifier.verify(1, h, "other")
    with pytest.raises(Unauthorized):
        verifier.check(1, h, "other")
    assert kdf_runs() == before + 3  # a wrong password is never remembered
    verifier.forget(1)
    assert verifier.verify(1, h, "pw")
    assert kdf_runs() == before + 4


def test_the_scrypt_cache_is_bounded_oldest_verified_first_out():
    legacy = PasswordVerifier()
    hashes = {lid: legacy.hash(f"pw{lid}") for lid in (1, 2, 3)}
    verifier = PasswordVerifier(KEY, verified_entries_max=2)
    for lid, h in hashes.items():
        assert verifier.verify(lid, h, f"pw{lid}")
    assert verifier.verified_count == 2
    assert not verifier.verified_before(1, "pw1")  # the oldest went
    assert verifier.verified_before(2, "pw2") and verifier.verified_before(3, "pw3")
    before = kdf_runs()
    assert verifier.verify(1, hashes[1], "pw1")  # scrypt again, then remembered
    assert kdf_runs() == before + 1
    assert verifier.verified_count == 2 and not verifier.verified_before(2, "pw2")


def test_the_index_record_tags_keyed_hashes_and_reads_untagged_ones_as_scrypt():
    keyed = PasswordVerifier(KEY).hash("pw")
    record = LedgerRecord(ledger_id=7, state=LedgerState.OPEN, password=keyed,
                          last_entry_id=-1, length=0, created_at=1.0, closed_at=None)
    raw = record.encode()
    assert raw[2] == PasswordScheme.KEYED_BLAKE2B  # the packed record's scheme byte
    assert LedgerRecord.decode(raw) == record
    # A record as the code before the tag wrote it: no pw_scheme.
    old = (b'{"closed":null,"created":1.0,"hash":"' + b"ab" * 32 + b'","id":7,"last":-1,'
           b'"length":0,"meta":{},"offload":{"state":"NONE"},"salt":"' + b"cd" * 16
           + b'","state":"OPEN","v":1}')
    decoded = LedgerRecord.decode(old)
    assert decoded.password == PasswordHash(b"\xcd" * 16, b"\xab" * 32, PasswordScheme.SCRYPT)
    # and written back packed, still scrypt
    assert LedgerRecord.decode(decoded.encode()).password.scheme == PasswordScheme.SCRYPT
