"""Password key files: ``{data_dir}/password.key``, 32 random bytes.

Made once, the first time a data directory is opened without one (a new
directory, or one written before keyed password hashes, which holds only
scrypt hashes), and read at every open after.  It keys every new ledger's
password digest (``_password.py``), so it is a secret: created 0600 with
O_EXCL (two openers cannot both make one), written and fsynced before its name
is made durable, and never copied into the index, the journal or S3.  Losing it
makes the keyed ledgers' passwords unverifiable (docs/api.md, "Security").

Cluster mode keeps the cluster's shared key in another file of the same kind
(``cluster-password.key``, node/_cluster_password_key.py): :func:`read_key_file`
and :func:`create_key_file` are the one way to read and make either.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from pathlib import Path

from common.errors import DeviceBroken, InvariantViolation
from common.files import sync_directory

from ._password import KEY_SIZE_BYTES

log = logging.getLogger(__name__)

KEY_FILE_NAME = "password.key"
_KEY_FILE_MODE = 0o600


@dataclass(frozen=True)
class NodeKey:
    key: bytes = field(repr=False)
    made: bool  # made by this open: the directory had none


def load_node_key(data_dir: Path) -> NodeKey:
    """The data directory's password key, made now if it has none.  A key made
    now cannot check a digest made before: the bookie refuses to open a
    directory whose ledgers need the key it lost (:func:`refuse_lost_key`)."""
    path = data_dir / KEY_FILE_NAME
    key = read_key_file(path)
    if key is not None:
        return NodeKey(key, made=False)
    return NodeKey(create_key_file(path), made=True)


def read_key_file(path: Path) -> bytes | None:
    """The key ``path`` holds, None when there is no such file; ``DeviceBroken``
    when it cannot be read or does not hold a key."""
    try:
        return _read(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise DeviceBroken(f"cannot read the password key {path}: {exc}") from exc


def create_key_file(path: Path, key: bytes | None = None) -> bytes:
    """Make ``path`` hold ``key`` (default: 32 new random bytes), durably and 0600;
    ``DeviceBroken`` when it cannot, or when the file exists already (it is never
    replaced)."""
    if key is None:
        key = os.urandom(KEY_SIZE_BYTES)
    if len(key) != KEY_SIZE_BYTES:
        raise InvariantViolation(f"a password key is {KEY_SIZE_BYTES} bytes, got {len(key)}")
    try:
        _create(path, key)
    except OSError as exc:
        raise DeviceBroken(f"cannot create the password key {path}: {exc}") from exc
    return key


def refuse_lost_key(data_dir: Path, keyed_ledger_count: int) -> None:
    """After a key was made at open: DeviceBroken, and the new key removed (no
    digest was made with it yet), when ledgers hold digests of the lost one.
    A new key would lock them all out and hide that the key is missing."""
    if keyed_ledger_count == 0:
        return
    path = data_dir / KEY_FILE_NAME
    path.unlink(missing_ok=True)
    sync_directory(data_dir)
    raise DeviceBroken(
        f"the password key {path} is missing and {keyed_ledger_count} ledgers' password "
        "digests need it: restore it from a backup (docs/api.md, Security, says how "
        "to start without it if it is lost for good)")


def _read(path: Path) -> bytes:
    key = path.read_bytes()
    if len(key) != KEY_SIZE_BYTES:
        # A torn creation cannot leave this (the name becomes durable after the
        # bytes); a truncated or foreign file must not silently key new ledgers.
        raise DeviceBroken(f"the password key {path} holds {len(key)} bytes, not "
                           f"{KEY_SIZE_BYTES}: restore it from a backup (docs/api.md, "
                           "Security)")
    return key


def _create(path: Path, key: bytes) -> None:
    partial = path.with_name(path.name + ".new")
    partial.unlink(missing_ok=True)  # left by a crash before the rename
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, _KEY_FILE_MODE)
    try:
        os.fchmod(fd, _KEY_FILE_MODE)  # the umask cannot widen it, but may narrow it
        written = os.write(fd, key)
        if written != KEY_SIZE_BYTES:
            raise OSError(f"short write of the password key ({written} bytes)")
        os.fsync(fd)
    finally:
        os.close(fd)
    # link(2), not rename(2): it fails when the key exists, so a key another
    # opener made meanwhile is never replaced.
    try:
        os.link(partial, path)
    finally:
        partial.unlink()
    sync_directory(path.parent)
    log.info("created the password key %s", path)
