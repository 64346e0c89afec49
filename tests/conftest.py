"""Shared fixtures: engine settings on a preallocated file or a real loop device."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from common.units import KiB, MiB
from entrylog import EntryLogSettings
from journal import JournalSettings
from ledger import Bookie, EngineSettings, LedgerLimits, PasswordVerifier, WriteCacheSettings
from ledger._events import CreateEvent
from ledger._password import PasswordScheme
from tools.local_s3 import LocalS3Server, delete_bucket, radosgw_available

HEADER_AREA_BYTES = 8 * KiB


ALLOW_SKIPS_ENV = "LEDGERD_ALLOW_SKIPS"


def require(missing: str | None) -> None:
    """A test that needs a real part (a loop device, S3, etcd, Spark…) fails when
    the part is missing, as in CI; a developer without root may set
    LEDGERD_ALLOW_SKIPS=1 to skip such tests instead."""
    if missing is None:
        return
    if os.environ.get(ALLOW_SKIPS_ENV) == "1":
        pytest.skip(missing)
    pytest.fail(f"{missing} (set {ALLOW_SKIPS_ENV}=1 to skip the tests that need it)",
                pytrace=False)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """No silent skips: a run with skipped tests fails unless skips were allowed."""
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    skipped = reporter.stats.get("skipped", []) if reporter is not None else []
    if skipped and os.environ.get(ALLOW_SKIPS_ENV) != "1" and exitstatus == 0:
        reporter.write_line(f"{len(skipped)} tests were skipped; set {ALLOW_SKIPS_ENV}=1 "
                            "where that is intended", red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def can_use_loop_devices() -> str | None:
    """None when loop devices can be attached here, else the reason they can't."""
    if os.geteuid() != 0:
        return "not root: loop devices need root"
    if shutil.which("losetup") is None:
        return "losetup is not installed"
    return None


class LoopDevice:
    """A real block device: ``losetup --direct-io=on`` over a sparse file."""

    def __init__(self, backing: Path, size_bytes: int) -> None:
        with open(backing, "wb") as f:
            f.truncate(size_bytes)
        out = subprocess.run(
            ["losetup", "--direct-io=on", "--find", "--show", str(backing)],
            check=True, capture_output=True, text=True)
        self.path = Path(out.stdout.strip())

    def detach(self) -> None:
        subprocess.run(["losetup", "--detach", str(self.path)], check=False)


@pytest.fixture(params=["file", "loop"])
def journal_device(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Path | None]:
    """None: the journal preallocates a file under the data dir; else a loop device."""
    if request.param == "file":
        yield None
        return
    require(can_use_loop_devices())
    dev = LoopDevice(tmp_path / "loop-backing.img", 64 * MiB)
    try:
        yield dev.path
    finally:
        dev.detach()


def _run(*command: str) -> None:
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        pytest.fail(f"{' '.join(command)} failed ({done.returncode}): {done.stderr.strip()}")


SMALL_EXT4_SIZE_BYTES = 8 * MiB


class SmallExt4:
    """An ext4 file system on a loop device, mounted at ``mountpoint``."""

    def __init__(self, tmp_path: Path, size_bytes: int = SMALL_EXT4_SIZE_BYTES) -> None:
        reason = can_use_loop_devices()
        if reason is not None or shutil.which("mkfs.ext4") is None:
            pytest.fail(f"cannot build the small ext4 file system: {reason or 'no mkfs.ext4'}")
        self.mountpoint = tmp_path / "mnt"
        self.mountpoint.mkdir()
        self.loop = LoopDevice(tmp_path / "ext4.img", size_bytes)
        self.mounted = False

    def format_and_mount(self) -> None:
        # No blocks reserved for root: the test runs as root and must see the disk full.
        _run("mkfs.ext4", "-q", "-F", "-m", "0", str(self.loop.path))
        self.mount()

    def mount(self) -> None:
        _run("mount", "-t", "ext4", str(self.loop.path), str(self.mountpoint))
        self.mounted = True

    def unmount(self) -> None:
        if self.mounted:
            _run("umount", str(self.mountpoint))
            self.mounted = False

    def fill_up(self) -> None:
        """Take every block left with a file outside the entry logs (another tenant)."""
        fd = os.open(self.mountpoint / "ballast", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            with contextlib.suppress(OSError):
                while True:
                    os.write(fd, bytes(64 * KiB))
            with contextlib.suppress(OSError):
                while True:
                    os.write(fd, b"\0")
            os.fsync(fd)
        finally:
            os.close(fd)

    def free_bytes(self) -> int:
        stats = os.statvfs(self.mountpoint)
        return stats.f_bavail * stats.f_frsize


@pytest.fixture
def ext4(tmp_path: Path) -> Iterator[SmallExt4]:
    """A formatted, mounted 8 MiB ext4 with no blocks reserved for root."""
    fs = SmallExt4(tmp_path)
    try:
        fs.format_and_mount()
        yield fs
    finally:
        with contextlib.suppress(BaseException):
            fs.unmount()
        fs.loop.detach()


def small_engine_settings(data_dir: Path, device: Path | None = None, *,
                          journal_capacity: int = 8 * MiB,
                          write_cache: int = 512 * KiB,
                          flush_interval_s: float = 60.0,
                          entry_log_limit: int = 256 * KiB,
                          **overrides: object) -> EngineSettings:
    """Engine settings sized so flushes, rotations and ring laps happen in tests."""
    journal = JournalSettings(
        device_path=device or data_dir / "journal.dev", capacity_bytes=journal_capacity,
        sliding_window_bytes_max=min(2 * MiB, journal_capacity // 4))
    settings = EngineSettings(
        data_dir=data_dir, journal=journal,
        entry_log=EntryLogSettings(directory=data_dir / "entrylogs",
                                   size_bytes_limit=entry_log_limit),
        write_cache=WriteCacheSettings(size_bytes=write_cache, flush_interval_s=flush_interval_s),
        limits=LedgerLimits(
            entry_size_bytes_max=256 * KiB,
            batch_size_bytes_max=min(1 * MiB, journal.sliding_window_bytes_max // 2)),
        **overrides,  # type: ignore[arg-type]
    )
    settings.check()
    return settings


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalS3Server]:
    """One real S3 server (Ceph radosgw on 127.0.0.1) for the whole session.

    Ceph not installed fails the tests that need it (see :func:`require`); a
    server that is installed but does not start is a test error.
    """
    reason = radosgw_available()
    require(None if reason is None else f"S3 server unavailable: {reason}")
    server = LocalS3Server(tmp_path_factory.mktemp("s3"))
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def s3_bucket(s3_server: LocalS3Server) -> Iterator[tuple[Any, str]]:
    """(boto3 client, name) of a fresh bucket, emptied and deleted afterwards."""
    client = s3_server.client()
    name = f"test-{uuid.uuid4().hex}"
    client.create_bucket(Bucket=name)
    try:
        yield client, name
    finally:
        delete_bucket(client, name)


def create_scrypt_ledger(bookie: Bookie, password: str) -> int:
    """A ledger as the engine created them before keyed password hashes: its
    CREATE record (type 2) holds a scrypt hash, and so will its index record
    (no scheme tag).  The engine no longer makes these; data directories still
    hold them, so tests journal one through the engine's own commit path."""
    hashed = PasswordVerifier().hash(password)  # no node key: scrypt
    assert hashed.scheme == PasswordScheme.SCRYPT

    def decide() -> CreateEvent:
        return CreateEvent(bookie._table.next_ledger_id, time.time(), hashed, {})

    append, ledger = bookie._appender.commit_event(decide, writable=True)
    assert append is not None and ledger is not None
    append.future.result(10.0)
    return ledger.ledger_id
