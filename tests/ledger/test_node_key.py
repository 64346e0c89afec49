"""The node's password key (ledger/_node_key.py) on a real Bookie, and data
directories whose ledgers were hashed with scrypt before keyed hashes."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from common.errors import DeviceBroken, Unauthorized, WouldBlock
from ledger import Bookie, kdf_runs
from ledger._node_key import KEY_FILE_NAME, load_node_key
from ledger._password import KEY_SIZE_BYTES
from tests.conftest import create_scrypt_ledger, small_engine_settings

T = 10.0


def test_the_key_is_made_once_0600_and_read_back(tmp_path: Path):
    old_umask = os.umask(0)  # the widest umask: the file's mode must not follow it
    try:
        made = load_node_key(tmp_path)
    finally:
        os.umask(old_umask)
    path = tmp_path / KEY_FILE_NAME
    assert made.made and len(made.key) == KEY_SIZE_BYTES and path.read_bytes() == made.key
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    again = load_node_key(tmp_path)
    assert (again.key, again.made) == (made.key, False)
    assert [p.name for p in tmp_path.iterdir()] == [KEY_FILE_NAME]  # no partial file left


def test_a_damaged_key_is_refused_not_replaced(tmp_path: Path):
    (tmp_path / KEY_FILE_NAME).write_bytes(b"short")
    with pytest.raises(DeviceBroken, match="restore it"):
        load_node_key(tmp_path)
    assert (tmp_path / KEY_FILE_NAME).read_bytes() == b"short"


def test_a_restart_keeps_the_key_and_checks_passwords_without_a_kdf(tmp_path: Path):
    """Created once with the data directory, reused at every open: after a clean
    restart and after a crash (CREATEs replayed from the journal), every keyed
    ledger's password is checked at once, no scrypt anywhere, and the key is
    in no other file of the data directory (index, journal, entry logs)."""
    settings = small_engine_settings(tmp_path / "data")
    before = kdf_runs()
    b = Bookie.open(settings)
    key = (settings.data_dir / KEY_FILE_NAME).read_bytes()
    checkpointed = [b.create_ledger(password=f"pw{i}", metadata={}).result(T).ledger_id
                    for i in range(20)]
    b.close()
    b = Bookie.open(settings)
    journaled = [b.create_ledger(password=f"new{i}", metadata={}).result(T).ledger_id
                 for i in range(20)]
    b.journal.close()  # as a crash would leave it: these CREATEs only in the journal
    b.storage.close()
    b = Bookie.open(settings)
    try:
        assert (settings.data_dir / KEY_FILE_NAME).read_bytes() == key
        for i, lid in enumerate(checkpointed):
            b.authorize(lid, password=f"pw{i}", block=False)
        for i, lid in enumerate(journaled):
            b.authorize(lid, password=f"new{i}", block=False)
            b.delete_ledger(lid, password=f"new{i}").result(T)
        b.close_ledger(checkpointed[0], password="pw0").result(T)
        with pytest.raises(Unauthorized):
            b.authorize(checkpointed[1], password="pw2", block=False)
        assert kdf_runs() == before
    finally:
        b.close()
    for path in settings.data_dir.rglob("*"):
        if path.is_file() and path.name != KEY_FILE_NAME:
            assert key not in path.read_bytes(), path


def test_a_lost_key_stops_the_open_rather_than_lock_ledgers_out(tmp_path: Path):
    """A directory whose ledgers hold keyed digests, its key gone: the open
    refuses, naming the key, and leaves no new key behind, so putting the old
    one back is all it takes."""
    settings = small_engine_settings(tmp_path / "data")
    b = Bookie.open(settings)
    lid = b.create_ledger(password="pw", metadata={}).result(T).ledger_id
    b.close()
    path = settings.data_dir / KEY_FILE_NAME
    key = path.read_bytes()
    path.unlink()
    with pytest.raises(DeviceBroken, match=r"password key .* is missing and 1 ledgers"):
        Bookie.open(settings)
    assert not path.exists()
    path.write_bytes(key)
    b = Bookie.open(settings)
    try:
        b.authorize(lid, password="pw", block=False)
    finally:
        b.close()


def test_a_data_directory_with_scrypt_hashes_still_opens_and_verifies(tmp_path: Path):
    """Ledgers created before keyed hashes (scrypt, untagged records) in the
    index and in the journal: a keyed engine opens the directory, makes its key,
    verifies their passwords (one scrypt each, then from memory), replaces each
    verified scrypt hash by a keyed one (REHASH), so that after a restart, clean
    or not, no check runs scrypt, and creates keyed ledgers beside them."""
    settings = small_engine_settings(tmp_path / "data")
    b = Bookie.open(settings)
    in_index = create_scrypt_ledger(b, "old-a")
    b.close()
    (settings.data_dir / KEY_FILE_NAME).unlink()  # the old code made none
    b = Bookie.open(settings)
    in_journal = create_scrypt_ledger(b, "old-b")
    b.journal.close()  # a crash: this CREATE (type 2) only in the journal
    b.storage.close()
    b = Bookie.open(settings)
    try:
        for lid, password in ((in_index, "old-a"), (in_journal, "old-b")):
            with pytest.raises(Unauthorized):
                b.authorize(lid, password="wrong")
            before = kdf_runs()
            b.authorize(lid, password=password)
            b.append(lid, [(None, (b"x",))], password=password)[0].result(T)
            assert kdf_runs() == before + 1
        keyed = b.create_ledger(password="new", metadata={}).result(T).ledger_id
        b.authorize(keyed, password="new", block=False)
        # The REHASHes are durable.
        b.append(in_index, [(None, (b"y",))], password="old-a")[0].result(T)
        b.journal.close()  # a crash: the REHASH records only in the journal
        b.storage.close()
        for _clean in (False, True):
            b = Bookie.open(settings)
            before = kdf_runs()
            for lid, password in ((in_index, "old-a"), (in_journal, "old-b")):
                b.authorize(lid, password=password, block=False)
                with pytest.raises(Unauthorized):
                    b.authorize(lid, password="wrong", block=False)
            assert kdf_runs() == before
            b.close()  # the checkpoint persists the keyed hashes in the index
    finally:
        b.close()


def test_a_read_only_bookie_verifies_old_hashes_and_rehashes_them_later(tmp_path: Path):
    """REHASH is best effort: a read-only bookie verifies a scrypt password and
    keeps the scrypt hash (nothing is journaled); a writable one replaces it
    at the next scrypt verification."""
    settings = small_engine_settings(tmp_path / "data")
    b = Bookie.open(settings)
    lid = create_scrypt_ledger(b, "pw")
    b.set_read_only(True)
    offset = b.journal.appended_offset
    b.authorize(lid, password="pw")  # scrypt; the REHASH is refused
    assert b.journal.appended_offset == offset
    b.set_read_only(False)
    b.close()
    for rehashed in (False, True):
        b = Bookie.open(settings)
        try:
            if rehashed:
                b.authorize(lid, password="pw", block=False)
            else:
                with pytest.raises(WouldBlock):
                    b.authorize(lid, password="pw", block=False)
                b.authorize(lid, password="pw")  # scrypt, then REHASH
        finally:
            b.close()
