from ledger._password import PasswordHash, PasswordVerifier


def test_hash_matches_only_the_password():
    h = PasswordHash.create("secret")
    assert h.matches("secret")
    assert not h.matches("Secret")
    assert b"secret" not in h.salt + h.digest


def test_verifier_caches_success_but_rechecks_failures():
    verifier = PasswordVerifier()
    h = PasswordHash.create("pw")
    assert verifier.verify(1, h, "pw")
    assert verifier.verify(1, h, "pw")  # cached path
    assert not verifier.verify(1, h, "other")
    verifier.forget(1)
    assert verifier.verify(1, h, "pw")


def test_salts_differ():
    assert PasswordHash.create("a").salt != PasswordHash.create("a").salt
