"""The harness drops what it must, through a real FUSE mount.

Programs (``record_writer.py``, or this test process itself) write through the
mount; the power is cut; the backing directory must then hold exactly what the
fault model says survives.  These are what keep the ledgerd power-loss test
from passing vacuously: if the mount kept unsynced data, these would fail.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from tests.powerloss._records import durable_records, run_writer_until
from tests.powerloss.conftest import MountFactory
from tools.powercut import CutMode, Trigger


def sync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def test_writes_without_fdatasync_are_lost(mount: MountFactory, tmp_path: Path):
    m = mount()
    acked, report = run_writer_until(m, tmp_path / "mnt/log", 50, "--no-sync")
    m.unmount()
    assert len(acked) >= 50
    assert durable_records(tmp_path / "disk/log") == set()
    assert (tmp_path / "disk/log").stat().st_size == 0  # created and synced empty
    assert report["blocks_unsynced"] >= 50


def test_fdatasync_keeps_every_acknowledged_record(mount: MountFactory, tmp_path: Path):
    m = mount()
    acked, _ = run_writer_until(m, tmp_path / "mnt/log", 50, "--sync")
    m.unmount()
    durable = durable_records(tmp_path / "disk/log")
    assert set(acked) <= durable
    # At most the one record written but not yet synced at the cut is missing.
    assert durable <= set(range(len(acked) + 1))


def test_o_direct_is_not_durable_without_fdatasync(mount: MountFactory, tmp_path: Path):
    m = mount()
    acked, _ = run_writer_until(m, tmp_path / "mnt/log", 30, "--direct", "--no-sync")
    m.unmount()
    assert len(acked) >= 30
    assert durable_records(tmp_path / "disk/log") == set()

    m = mount()
    acked, _ = run_writer_until(m, tmp_path / "mnt/log2", 30, "--direct", "--sync")
    stats = m.status()["stats"]
    m.unmount()
    assert stats["direct_opens"] >= 1, "the kernel did not pass O_DIRECT through"
    assert set(acked) <= durable_records(tmp_path / "disk/log2")


def write_synced(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)


def test_rename_without_directory_fsync_is_lost(mount: MountFactory, tmp_path: Path):
    disk, mnt = tmp_path / "disk", tmp_path / "mnt"
    disk.mkdir()
    (disk / "CURRENT").write_bytes(b"MANIFEST-000001\n")
    m = mount()
    write_synced(mnt / "CURRENT.tmp", b"MANIFEST-000002\n")
    os.rename(mnt / "CURRENT.tmp", mnt / "CURRENT")
    assert (mnt / "CURRENT").read_bytes() == b"MANIFEST-000002\n"
    report = m.cut()
    m.unmount()
    assert sorted(os.listdir(disk)) == ["CURRENT"]
    assert (disk / "CURRENT").read_bytes() == b"MANIFEST-000001\n"
    assert report["dirs_unsynced"] == 1

    m = mount()
    write_synced(mnt / "CURRENT.tmp", b"MANIFEST-000003\n")
    os.rename(mnt / "CURRENT.tmp", mnt / "CURRENT")
    sync_dir(mnt)
    m.cut()
    m.unmount()
    assert sorted(os.listdir(disk)) == ["CURRENT"]
    assert (disk / "CURRENT").read_bytes() == b"MANIFEST-000003\n"


def test_new_files_and_directories_need_their_parent_synced(mount: MountFactory, tmp_path: Path):
    disk, mnt = tmp_path / "disk", tmp_path / "mnt"
    m = mount()
    (mnt / "data").mkdir()
    write_synced(mnt / "data/log", b"synced data")
    sync_dir(mnt / "data")  # data/ names log, but nothing durable names data/
    m.cut()
    m.unmount()
    assert os.listdir(disk) == []

    m = mount()
    (mnt / "data").mkdir()
    write_synced(mnt / "data/log", b"synced data")
    sync_dir(mnt / "data")
    sync_dir(mnt)
    os.unlink(mnt / "data/log")  # not synced: comes back
    m.cut()
    m.unmount()
    assert (disk / "data/log").read_bytes() == b"synced data"


def test_everything_fails_after_a_cut_until_remounted(mount: MountFactory, tmp_path: Path):
    mnt = tmp_path / "mnt"
    m = mount()
    (mnt / "f").write_bytes(b"x")
    m.cut()
    for action in (lambda: os.listdir(mnt), lambda: (mnt / "f").read_bytes(),
                   lambda: (mnt / "g").write_bytes(b"y")):
        with pytest.raises(OSError) as info:
            action()
        assert info.value.errno == errno.EIO
    m.unmount()
    m = mount()
    assert os.listdir(mnt) == []


@pytest.mark.parametrize("when", ["before", "after"])
def test_a_trigger_cuts_at_the_named_operation(mount: MountFactory, tmp_path: Path, when: str):
    m = mount()
    # fsync number 1 is the writer's own set-up; record n is synced by fsync n + 2.
    m.arm(Trigger(op="fsync", path="/log", skip=10, when=when))
    acked, report = run_writer_until(m, tmp_path / "mnt/log", 10**6, "--sync")
    m.unmount()
    assert report["fired"]["op"] == "fsync"
    assert acked == list(range(9)), "the writer was not killed by its 11th fsync"
    durable = durable_records(tmp_path / "disk/log")
    # before: record 9's fsync never happened; after: it did, but no ACK was seen.
    assert durable == (set(range(9)) if when == "before" else set(range(10)))


def test_partial_cut_keeps_a_random_subset_of_unsynced_blocks(mount: MountFactory,
                                                              tmp_path: Path):
    m = mount(mode=CutMode.PARTIAL, seed=3)
    acked, report = run_writer_until(m, tmp_path / "mnt/log", 200, "--direct", "--no-sync")
    m.unmount()
    durable = durable_records(tmp_path / "disk/log")
    # The record after the last ACK may have been written before the cut, too.
    assert durable <= set(range(max(acked) + 2))
    assert 0 < len(durable & set(acked)) < len(acked)
    assert report["blocks_kept"] == len(durable)
