"""The fault model itself, without FUSE: ``VolatileFS`` on a temp directory.

Each case does some operations, cuts the power and looks at the backing
directory, which must hold exactly what the model promises survives
(docs/powerloss.md): synced file data and sizes, synced directory entries, and
nothing else; in PARTIAL mode a mix.
"""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from tools.powercut import BLOCK_SIZE_BYTES, CutMode, VolatileFS

B = BLOCK_SIZE_BYTES


def disk(backing: Path) -> dict[str, bytes | None]:
    """The backing tree: path -> content (None for directories)."""
    out: dict[str, bytes | None] = {}
    for root, dirs, files in os.walk(backing):
        for name in dirs:
            out[os.path.relpath(os.path.join(root, name), backing)] = None
        for name in files:
            out[os.path.relpath(os.path.join(root, name), backing)] = (
                Path(root, name).read_bytes())
    return out


def cut(fs: VolatileFS, mode: CutMode = CutMode.STRICT, seed: int = 0) -> None:
    fs.cut(mode, random.Random(seed))


@pytest.fixture
def backing(tmp_path: Path) -> Path:
    path = tmp_path / "disk"
    path.mkdir()
    return path


def test_unsynced_write_is_lost_and_synced_write_kept(backing: Path):
    (backing / "f").write_bytes(b"old-old-old")
    fs = VolatileFS(str(backing))
    node = fs.lookup("/f")
    fs.write(node, 0, b"NEW")
    assert fs.read(node, 0, 100) == b"NEW-old-old"
    cut(fs)
    assert disk(backing) == {"f": b"old-old-old"}

    fs = VolatileFS(str(backing))
    node = fs.lookup("/f")
    fs.write(node, 0, b"NEW")
    fs.sync_file(node)
    fs.write(node, 4, b"LOST")
    cut(fs)
    assert disk(backing) == {"f": b"NEW-old-old"}


def test_appends_past_the_synced_size_are_lost(backing: Path):
    (backing / "f").write_bytes(b"a" * 10)
    fs = VolatileFS(str(backing))
    node = fs.lookup("/f")
    fs.write(node, 10, b"b" * (3 * B))
    fs.sync_file(node)
    fs.write(node, 10 + 3 * B, b"c" * 100)
    assert fs.read(node, 0, 10**6) == b"a" * 10 + b"b" * (3 * B) + b"c" * 100
    cut(fs)
    assert disk(backing) == {"f": b"a" * 10 + b"b" * (3 * B)}


def test_new_file_needs_its_directory_synced(backing: Path):
    fs = VolatileFS(str(backing))
    node = fs.create("/new", 0o644)
    fs.write(node, 0, b"data")
    fs.sync_file(node)  # data durable, but no directory entry names it
    cut(fs)
    assert disk(backing) == {}

    fs = VolatileFS(str(backing))
    node = fs.create("/new", 0o644)
    fs.write(node, 0, b"data")
    fs.sync_dir(fs.root)  # the entry is durable before the data: an empty file
    cut(fs)
    assert disk(backing) == {"new": b""}

    fs = VolatileFS(str(backing))
    synced_file(fs, "/new2", b"data")
    fs.sync_dir(fs.root)
    cut(fs)
    assert disk(backing) == {"new": b"", "new2": b"data"}


def synced_file(fs: VolatileFS, path: str, data: bytes) -> None:
    node = fs.create(path, 0o644)
    fs.write(node, 0, data)
    fs.sync_file(node)


def test_rename_needs_the_directory_synced(backing: Path):
    (backing / "CURRENT").write_bytes(b"MANIFEST-1")
    fs = VolatileFS(str(backing))
    synced_file(fs, "/CURRENT.tmp", b"MANIFEST-2")
    fs.rename("/CURRENT.tmp", "/CURRENT")
    assert fs.read(fs.lookup("/CURRENT"), 0, 100) == b"MANIFEST-2"
    cut(fs)
    assert disk(backing) == {"CURRENT": b"MANIFEST-1"}

    fs = VolatileFS(str(backing))
    synced_file(fs, "/CURRENT.tmp", b"MANIFEST-2")
    fs.rename("/CURRENT.tmp", "/CURRENT")
    fs.sync_dir(fs.root)
    cut(fs)
    assert disk(backing) == {"CURRENT": b"MANIFEST-2"}


def test_unlink_needs_the_directory_synced(backing: Path):
    (backing / "log").write_bytes(b"entries")
    fs = VolatileFS(str(backing))
    fs.unlink("/log")
    with pytest.raises(FileNotFoundError):
        fs.lookup("/log")
    cut(fs)
    assert disk(backing) == {"log": b"entries"}

    fs = VolatileFS(str(backing))
    fs.unlink("/log")
    fs.sync_dir(fs.root)
    cut(fs)
    assert disk(backing) == {}


def test_unlinked_open_file_keeps_working_and_its_data_can_come_back(backing: Path):
    (backing / "log").write_bytes(b"entries")
    fs = VolatileFS(str(backing))
    node = fs.lookup("/log")
    fs.opened(node)
    fs.unlink("/log")
    fs.sync_dir(fs.root)  # the name is gone from the disk; the open inode lives on
    assert fs.read(node, 0, 100) == b"entries"
    fs.write(node, 0, b"E")
    fs.sync_file(node)
    assert fs.read(node, 0, 100) == b"Entries"
    fs.released(node)
    cut(fs)
    assert disk(backing) == {}


def test_new_directory_needs_its_parent_synced(backing: Path):
    fs = VolatileFS(str(backing))
    fs.mkdir("/data", 0o755)
    synced_file(fs, "/data/f", b"x")
    fs.sync_dir(fs.lookup("/data"))  # data/ knows f, but nothing knows data/
    cut(fs)
    assert disk(backing) == {}

    fs = VolatileFS(str(backing))
    fs.mkdir("/data", 0o755)
    synced_file(fs, "/data/f", b"x")
    fs.sync_dir(fs.lookup("/data"))
    fs.sync_dir(fs.root)
    cut(fs)
    assert disk(backing) == {"data": None, "data/f": b"x"}


def test_truncate_then_extend_reads_zeros_and_is_volatile(backing: Path):
    (backing / "f").write_bytes(b"abcdefgh" * 1000)
    fs = VolatileFS(str(backing))
    node = fs.lookup("/f")
    fs.truncate(node, 5)
    fs.truncate(node, 3 * B)
    assert fs.read(node, 0, 10 * B) == b"abcde" + bytes(3 * B - 5)
    cut(fs)
    assert disk(backing) == {"f": b"abcdefgh" * 1000}

    fs = VolatileFS(str(backing))
    node = fs.lookup("/f")
    fs.truncate(node, 5)
    fs.write(node, 2 * B, b"z")
    fs.sync_file(node)
    cut(fs)
    assert disk(backing) == {"f": b"abcde" + bytes(2 * B - 5) + b"z"}


def test_fallocate_extends_with_zeros_until_synced(backing: Path):
    fs = VolatileFS(str(backing))
    node = fs.create("/journal.dev", 0o600)
    fs.fallocate(node, 0, 0, 4 * B)
    assert fs.read(node, 0, 10 * B) == bytes(4 * B)
    fs.sync_file(node)
    fs.sync_dir(fs.root)
    fs.fallocate(node, 1, 0, 100 * B)  # FALLOC_FL_KEEP_SIZE: the size stays
    fs.write(node, B, b"unsynced record")
    cut(fs)
    assert disk(backing) == {"journal.dev": bytes(4 * B)}


def test_partial_cut_keeps_some_unsynced_blocks_and_drops_others(backing: Path):
    (backing / "f").write_bytes(bytes(64 * B))
    fs = VolatileFS(str(backing))
    node = fs.lookup("/f")
    fs.write(node, 0, b"\xff" * (64 * B))
    report = fs.cut(CutMode.PARTIAL, random.Random(7))
    content = (backing / "f").read_bytes()
    blocks = [content[i * B:(i + 1) * B] for i in range(64)]
    kept = sum(block == b"\xff" * B for block in blocks)
    assert all(block in (b"\xff" * B, bytes(B)) for block in blocks), "a block was torn"
    assert 0 < kept < 64
    assert report.blocks_unsynced == 64 and report.blocks_kept == kept


def test_partial_cut_never_shows_bytes_past_the_durable_size(backing: Path):
    (backing / "f").write_bytes(b"a" * 100)
    for seed in range(20):
        fs = VolatileFS(str(backing))
        node = fs.lookup("/f")
        fs.write(node, 100, b"b" * (8 * B))
        report = fs.cut(CutMode.PARTIAL, random.Random(seed))
        content = (backing / "f").read_bytes()
        if report.sizes_kept:
            assert len(content) == 100 + 8 * B
            assert set(content[100:]) <= {0, ord("b")}
        else:
            assert content == b"a" * 100
        (backing / "f").write_bytes(b"a" * 100)


def test_a_cut_removes_the_orphans(backing: Path):
    fs = VolatileFS(str(backing))
    node = fs.create("/never-named", 0o644)
    fs.write(node, 0, b"x")
    fs.sync_file(node)
    assert os.listdir(backing) == [".powercut"]
    cut(fs)
    assert os.listdir(backing) == []
