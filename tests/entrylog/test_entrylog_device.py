"""The device seam: the in-memory file system behaves as the real one, and the
faulty one crashes and fails as its docstring says."""

from __future__ import annotations

import errno
import random
from collections.abc import Iterator
from pathlib import Path

import pytest

from common.units import KiB
from entrylog import FileSystem, OsFileSystem
from entrylog._device import IOV_MAX
from entrylog.testing import FaultyFileSystem, MemoryFileSystem

# --- the same answers from the real and the in-memory file system ---------------


@pytest.fixture(params=["os", "memory"])
def fs_and_directory(request: pytest.FixtureRequest,
                     tmp_path: Path) -> Iterator[tuple[FileSystem, Path]]:
    if request.param == "os":
        yield OsFileSystem(), tmp_path / "a" / "b"
    else:
        yield MemoryFileSystem(), Path("/data/a/b")


def test_files_and_names_behave_as_the_system_calls(
        fs_and_directory: tuple[FileSystem, Path]) -> None:
    fs, directory = fs_and_directory
    fs.make_directory(directory)
    fs.make_directory(directory)  # mkdir -p: no error the second time.
    assert fs.list_directory(directory) == []
    path = directory / "x.log"
    handle = fs.create_exclusive(path)
    with pytest.raises(FileExistsError):
        fs.create_exclusive(path)
    assert fs.pwritev(handle, [b"abc", memoryview(b"defg"), bytearray(b"h")], 0) == 8
    assert fs.pwritev(handle, [b"XY"], 10) == 2  # Past the end: a hole of zeros.
    fs.fdatasync(handle)
    assert fs.size_bytes(path) == 12
    reader = fs.open_read(path)
    assert fs.pread(reader, 100, 0) == b"abcdefgh\0\0XY"
    assert fs.pread(reader, 4, 10) == b"XY"
    assert fs.pread(reader, 4, 50) == b""
    with pytest.raises(OSError) as info:
        fs.pwritev(reader, [b"no"], 0)
    assert info.value.errno == errno.EBADF
    with pytest.raises(OSError) as info:
        fs.pwritev(handle, [b"."] * (IOV_MAX + 1), 0)
    assert info.value.errno == errno.EINVAL
    fs.truncate(handle, 5)
    assert fs.pread(reader, 100, 0) == b"abcde"
    assert fs.list_directory(directory) == ["x.log"]
    fs.sync_directory(directory)
    fs.unlink(path)
    assert fs.list_directory(directory) == []
    assert fs.pread(reader, 3, 0) == b"abc"  # Open handles outlive the name.
    with pytest.raises(FileNotFoundError):
        fs.unlink(path)
    with pytest.raises(FileNotFoundError):
        fs.open_read(path)
    with pytest.raises(FileNotFoundError):
        fs.size_bytes(path)
    writer = fs.create_exclusive(path)  # The name is free again.
    fs.close(writer)
    fs.close(handle)
    fs.close(reader)
    with pytest.raises(OSError) as info:
        fs.close(reader)
    assert info.value.errno == errno.EBADF


# --- the crash model ------------------------------------------------------------------

SEEDS = range(60)


def _file(fs: FaultyFileSystem, name: str = "/d/x") -> tuple[Path, int]:
    fs.make_directory(Path("/d"))
    path = Path(name)
    handle = fs.create_exclusive(path)
    fs.sync_directory(Path("/d"))
    return path, handle


def test_synced_bytes_survive_and_unsynced_ones_are_kept_dropped_or_torn() -> None:
    synced = bytes(range(256)) * 32  # 8 KiB
    later = b"\xee" * (3 * 4096)
    fates: set[str] = set()
    for seed in SEEDS:
        fs = FaultyFileSystem(rng=random.Random(seed))
        path, handle = _file(fs)
        fs.pwritev(handle, [synced], 0)
        fs.fdatasync(handle)
        fs.pwritev(handle, [later], len(synced))
        fs.crash()
        fs.restart()
        data = fs.file_bytes(path)
        assert data[:len(synced)] == synced
        for block in range(3):
            piece = data[len(synced) + block * 4096:len(synced) + (block + 1) * 4096]
            kept = len(piece) - len(piece.lstrip(b"\xee"))
            assert kept % 512 == 0 and piece[kept:] == bytes(len(piece) - kept)
            fates.add("kept" if kept == 4096 else "dropped" if kept == 0 else "torn")
    assert fates == {"kept", "dropped", "torn"}


def test_a_name_needs_a_directory_fsync() -> None:
    outcomes: dict[str, set[bool]] = {"created": set(), "synced": set(), "unlinked": set()}
    for seed in SEEDS:
        fs = FaultyFileSystem(rng=random.Random(seed))
        fs.make_directory(Path("/d"))
        for name in ("synced", "unlinked"):
            handle = fs.create_exclusive(Path(f"/d/{name}"))
            fs.pwritev(handle, [name.encode()], 0)
            fs.fdatasync(handle)
            fs.close(handle)
        fs.sync_directory(Path("/d"))
        handle = fs.create_exclusive(Path("/d/created"))
        fs.pwritev(handle, [b"created"], 0)
        fs.fdatasync(handle)
        fs.unlink(Path("/d/unlinked"))
        fs.crash()
        fs.restart()
        names = fs.list_directory(Path("/d"))
        for name in outcomes:
            outcomes[name].add(name in names)
        if "unlinked" in names:
            assert fs.file_bytes(Path("/d/unlinked")) == b"unlinked"
    assert outcomes == {"created": {True, False}, "synced": {True}, "unlinked": {True, False}}


def test_after_a_failed_fdatasync_a_successful_one_does_not_save_the_data() -> None:
    lost = 0
    for seed in SEEDS:
        fs = FaultyFileSystem(rng=random.Random(seed))
        path, handle = _file(fs)
        fs.pwritev(handle, [b"\xaa" * 8192], 0)
        fs.fail_next("fdatasync")
        with pytest.raises(OSError):
            fs.fdatasync(handle)
        assert fs.file_bytes(path) == b"\xaa" * 8192  # The page cache still shows it...
        fs.fdatasync(handle)  # ... and the retry "succeeds".
        fs.crash()
        fs.restart()
        lost += fs.file_bytes(path) != b"\xaa" * 8192
    assert 0 < lost < len(SEEDS)


def test_a_full_file_system_writes_what_fits_then_fails_with_enospc() -> None:
    fs = FaultyFileSystem(capacity_bytes=16 * KiB)
    path, handle = _file(fs)
    assert fs.pwritev(handle, [b"a" * 10_000, b"b" * 10_000], 0) == 16 * KiB  # Short.
    with pytest.raises(OSError) as info:
        fs.pwritev(handle, [b"c"], 16 * KiB)
    assert info.value.errno == errno.ENOSPC
    assert fs.failures[-1][:2] == ("pwritev", errno.ENOSPC)
    assert fs.pwritev(handle, [b"z" * 100], 0) == 100  # Overwriting needs no space.
    other, reader = Path("/d/y"), fs.open_read(path)
    fs.unlink(path)
    with pytest.raises(OSError):  # Still held by the open handles.
        fs.pwritev(fs.create_exclusive(other), [b"d"], 0)
    fs.close(handle)
    fs.close(reader)
    writer = fs.open_write(other)
    assert fs.pwritev(writer, [b"d" * 4096], 0) == 4096


def test_injected_failures_fire_once_and_a_crash_stops_every_call() -> None:
    fs = FaultyFileSystem()
    path, handle = _file(fs)
    fs.fail_next("pwritev", errno.ENOSPC)
    with pytest.raises(OSError) as info:
        fs.pwritev(handle, [b"x"], 0)
    assert info.value.errno == errno.ENOSPC
    assert fs.pwritev(handle, [b"x"], 0) == 1
    fs.short_next_write(3)
    assert fs.pwritev(handle, [b"abcdef"], 0) == 3
    assert fs.pwritev(handle, [b"abcdef"], 0) == 6
    with pytest.raises(ValueError):
        fs.fail_next("rename")
    fs.crash()
    for call in (lambda: fs.pread(handle, 1, 0), lambda: fs.list_directory(Path("/d"))):
        with pytest.raises(OSError):
            call()
    fs.close(handle)  # Harmless after a crash.
    fs.restart()
    assert fs.size_bytes(path) in range(0, 7)
