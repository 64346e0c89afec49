"""The volatile layer: a file system whose backing directory is the disk.

The backing directory always holds exactly what a disk would hold after a power
cut *now*: the content and size every file had at its last completed fsync or
fdatasync, and the entries every directory had at its last completed fsync.
Everything newer lives in memory:

- per file, the 4 KiB blocks written since its last sync (``Node.dirty``), its
  live size, and how much of the durable content a truncate has hidden
  (``Node.zero_from``);
- per directory, its live entries (``Node.entries``) beside the entries its
  backing directory has (``Node.durable``).

A file or directory not yet durably named anywhere lives in the backing
directory's hidden ``.powercut/`` (an orphan, as an inode that no directory entry
points at yet): its synced data is kept there, so a later fsync of its parent
makes it appear with that data.  A power cut (``cut``) forgets the memory and
deletes ``.powercut/``, which leaves the backing directory as the disk after the
cut.  ``CutMode.PARTIAL`` first lets a random subset of what was not synced reach
the disk, as a real disk may have written some of its cache.

Not modelled: timestamps, permissions and ownership (they pass straight through
to the backing files), symlinks, device nodes, extended attributes.
"""

from __future__ import annotations

import enum
import errno
import os
import random
import shutil
import stat
from collections.abc import Iterator
from dataclasses import dataclass, field

BLOCK_SIZE_BYTES = 4096
ORPHANS_NAME = ".powercut"
FALLOC_FL_KEEP_SIZE = 0x01


class CutMode(enum.Enum):
    """What reaches the disk at a power cut, beyond what was synced."""

    STRICT = "strict"
    """Nothing: every unsynced write, size change and directory change is lost."""

    PARTIAL = "partial"
    """A random subset: each unsynced 4 KiB block, each file's pending size change
    and each directory's pending entries (as a whole) survive with probability 1/2."""


class Kind(enum.Enum):
    FILE = "file"
    DIR = "dir"


def _error(code: int, what: str) -> OSError:
    return OSError(code, f"{os.strerror(code)}: {what}")


@dataclass(eq=False)
class Node:
    """An inode: one file or directory, with its durable and its live state."""

    node_id: int
    kind: Kind
    fd: int
    """Descriptor on the backing inode; follows it through backing renames."""
    links: set[tuple[Node, str]] = field(default_factory=set)
    """(backing directory node, name) pairs naming this inode on the disk (or in
    the orphans directory)."""
    live_link_count: int = 0
    open_count: int = 0
    size: int = 0
    durable_size: int = 0
    zero_from: int | None = None
    """Durable bytes at and after this offset read as zeros (a truncate not yet
    synced); None when nothing is hidden."""
    dirty: dict[int, bytes] = field(default_factory=dict)
    entries: dict[str, Node] = field(default_factory=dict)
    durable: dict[str, Node] = field(default_factory=dict)

    def __hash__(self) -> int:
        return self.node_id

    @property
    def unsynced(self) -> bool:
        """True when a sync of this node would change the disk."""
        if self.kind is Kind.DIR:
            return self.entries.keys() != self.durable.keys() or any(
                self.durable[name] is not node for name, node in self.entries.items())
        return bool(self.dirty) or self.size != self.durable_size or self.zero_from is not None


@dataclass
class CutReport:
    """What a power cut threw away (and, in PARTIAL mode, let through)."""

    mode: str
    files_unsynced: int = 0
    blocks_unsynced: int = 0
    blocks_kept: int = 0
    sizes_unsynced: int = 0
    sizes_kept: int = 0
    dirs_unsynced: int = 0
    dirs_kept: int = 0
    unsynced_paths: list[str] = field(default_factory=list)
    """Live paths of the files and directories with something unsynced (sorted)."""


class VolatileFS:
    """Path-addressed file system over ``backing``; not thread-safe (callers lock).

    Paths are absolute within the file system (``/data/journal.dev``).
    """

    def __init__(self, backing: str) -> None:
        self.backing = os.path.abspath(backing)
        self._next_id = 1
        self.cut_report: CutReport | None = None
        orphans_path = os.path.join(self.backing, ORPHANS_NAME)
        # Whatever a previous mount left unnamed is garbage now (fsck's lost inodes).
        shutil.rmtree(orphans_path, ignore_errors=True)
        os.mkdir(orphans_path, 0o700)
        self.orphans = self._new_node(Kind.DIR, os.open(orphans_path, os.O_RDONLY | os.O_DIRECTORY))
        self.root = self._new_node(Kind.DIR, os.open(self.backing, os.O_RDONLY | os.O_DIRECTORY))
        self.root.live_link_count = 1
        self._load(self.root, {})

    # --- loading the disk -------------------------------------------------

    def _new_node(self, kind: Kind, fd: int) -> Node:
        node = Node(self._next_id, kind, fd)
        self._next_id += 1
        return node

    def _load(self, directory: Node, seen: dict[tuple[int, int], Node]) -> None:
        for name in sorted(os.listdir(directory.fd)):
            if directory is self.root and name == ORPHANS_NAME:
                continue
            st = os.stat(name, dir_fd=directory.fd, follow_symlinks=False)
            node = seen.get((st.st_dev, st.st_ino))
            if node is None:
                if stat.S_ISDIR(st.st_mode):
                    fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY, dir_fd=directory.fd)
                    node = self._new_node(Kind.DIR, fd)
                    self._load(node, seen)
                elif stat.S_ISREG(st.st_mode):
                    fd = os.open(name, os.O_RDWR | os.O_CLOEXEC, dir_fd=directory.fd)
                    node = self._new_node(Kind.FILE, fd)
                    node.size = node.durable_size = st.st_size
                else:
                    raise _error(errno.ENOTSUP, f"{name}: only files and directories")
                seen[(st.st_dev, st.st_ino)] = node
            node.links.add((directory, name))
            node.live_link_count += 1
            directory.entries[name] = directory.durable[name] = node

    # --- names ------------------------------------------------------------

    def lookup(self, path: str) -> Node:
        node = self.root
        for part in path.split("/"):
            if not part:
                continue
            if node.kind is not Kind.DIR:
                raise _error(errno.ENOTDIR, path)
            child = node.entries.get(part)
            if child is None:
                raise _error(errno.ENOENT, path)
            node = child
        return node

    def _parent(self, path: str) -> tuple[Node, str]:
        head, _, name = path.rstrip("/").rpartition("/")
        parent = self.lookup(head)
        if parent.kind is not Kind.DIR:
            raise _error(errno.ENOTDIR, path)
        if not name or name in (".", "..") or (parent is self.root and name == ORPHANS_NAME):
            raise _error(errno.EPERM, path)
        return parent, name

    def walk(self) -> Iterator[Node]:
        """Every live node reachable from the root, and every open orphan."""
        seen: set[int] = set()
        stack = [self.root, self.orphans]
        while stack:
            node = stack.pop()
            if node.node_id in seen:
                continue
            seen.add(node.node_id)
            yield node
            stack.extend(node.entries.values())
            stack.extend(node.durable.values())

    # --- creating and removing (live only; the disk changes at fsyncdir) ----

    @staticmethod
    def _orphan_name(node_id: int) -> str:
        return f"i{node_id}"

    def mkdir(self, path: str, mode: int) -> Node:
        parent, name = self._parent(path)
        if name in parent.entries:
            raise _error(errno.EEXIST, path)
        oname = self._orphan_name(self._next_id)
        os.mkdir(oname, mode, dir_fd=self.orphans.fd)
        node = self._new_node(Kind.DIR, os.open(oname, os.O_RDONLY | os.O_DIRECTORY,
                                                dir_fd=self.orphans.fd))
        self._adopt_orphan(node, oname)
        self._link_live(parent, name, node)
        return node

    def create(self, path: str, mode: int) -> Node:
        parent, name = self._parent(path)
        existing = parent.entries.get(name)
        if existing is not None:
            return existing
        oname = self._orphan_name(self._next_id)
        fd = os.open(oname, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, mode,
                     dir_fd=self.orphans.fd)
        node = self._new_node(Kind.FILE, fd)
        self._adopt_orphan(node, oname)
        self._link_live(parent, name, node)
        return node

    def _adopt_orphan(self, node: Node, oname: str) -> None:
        node.links.add((self.orphans, oname))
        self.orphans.entries[oname] = self.orphans.durable[oname] = node

    def _link_live(self, parent: Node, name: str, node: Node) -> None:
        parent.entries[name] = node
        node.live_link_count += 1

    def _unlink_live(self, parent: Node, name: str) -> Node:
        node = parent.entries.pop(name)
        node.live_link_count -= 1
        self.reap(node)
        return node

    def unlink(self, path: str) -> None:
        parent, name = self._parent(path)
        node = parent.entries.get(name)
        if node is None:
            raise _error(errno.ENOENT, path)
        if node.kind is Kind.DIR:
            raise _error(errno.EISDIR, path)
        self._unlink_live(parent, name)

    def rmdir(self, path: str) -> None:
        parent, name = self._parent(path)
        node = parent.entries.get(name)
        if node is None:
            raise _error(errno.ENOENT, path)
        if node.kind is not Kind.DIR:
            raise _error(errno.ENOTDIR, path)
        if node.entries:
            raise _error(errno.ENOTEMPTY, path)
        self._unlink_live(parent, name)

    def rename(self, old: str, new: str) -> None:
        old_parent, old_name = self._parent(old)
        new_parent, new_name = self._parent(new)
        node = old_parent.entries.get(old_name)
        if node is None:
            raise _error(errno.ENOENT, old)
        target = new_parent.entries.get(new_name)
        if target is node:
            return
        if node.kind is Kind.DIR and self._is_within(new_parent, node):
            raise _error(errno.EINVAL, new)
        if target is not None:
            if target.kind is Kind.DIR and node.kind is not Kind.DIR:
                raise _error(errno.EISDIR, new)
            if target.kind is not Kind.DIR and node.kind is Kind.DIR:
                raise _error(errno.ENOTDIR, new)
            if target.kind is Kind.DIR and target.entries:
                raise _error(errno.ENOTEMPTY, new)
        # Link the new name first: unlinking the old one must not reap the node.
        if target is not None:
            self._unlink_live(new_parent, new_name)
        self._link_live(new_parent, new_name, node)
        self._unlink_live(old_parent, old_name)

    def _is_within(self, node: Node, ancestor: Node) -> bool:
        stack = [ancestor]
        while stack:
            current = stack.pop()
            if current is node:
                return True
            stack.extend(c for c in current.entries.values() if c.kind is Kind.DIR)
        return False

    def link(self, existing: str, new: str) -> None:
        node = self.lookup(existing)
        if node.kind is Kind.DIR:
            raise _error(errno.EPERM, existing)
        parent, name = self._parent(new)
        if name in parent.entries:
            raise _error(errno.EEXIST, new)
        self._link_live(parent, name, node)

    def opened(self, node: Node) -> None:
        node.open_count += 1

    def released(self, node: Node) -> None:
        node.open_count -= 1
        self.reap(node)

    def reap(self, node: Node) -> None:
        """Free the backing inode of a node nothing can reach any more.

        A node still named on the disk is kept: a cut would bring it back.
        """
        if node.live_link_count > 0 or node.open_count > 0 or node is self.root:
            return
        for parent, name in list(node.links):
            if parent is self.orphans:
                self._destroy_link(node, parent, name)

    # --- file data ----------------------------------------------------------

    def _durable_range(self, node: Node, start: int, stop: int) -> bytes:
        """Disk bytes [start, stop) as the live file sees them (zeros past the end)."""
        valid = node.durable_size if node.zero_from is None else min(node.durable_size,
                                                                       node.zero_from)
        data = b""
        if start < valid:
            data = _pread_all(node.fd, min(stop, valid) - start, start)
        return data + bytes(stop - start - len(data))

    def _block(self, node: Node, index: int) -> bytes:
        block = node.dirty.get(index)
        if block is None:
            start = index * BLOCK_SIZE_BYTES
            block = self._durable_range(node, start, start + BLOCK_SIZE_BYTES)
        return block

    def read(self, node: Node, offset: int, size: int) -> bytes:
        end = min(offset + size, node.size)
        if offset >= end:
            return b""
        first, last = offset // BLOCK_SIZE_BYTES, (end - 1) // BLOCK_SIZE_BYTES
        parts: list[bytes] = []
        index = first
        while index <= last:
            block = node.dirty.get(index)
            if block is not None:
                parts.append(block)
                index += 1
                continue
            run_end = index + 1
            while run_end <= last and run_end not in node.dirty:
                run_end += 1
            parts.append(self._durable_range(node, index * BLOCK_SIZE_BYTES,
                                             run_end * BLOCK_SIZE_BYTES))
            index = run_end
        skip = offset - first * BLOCK_SIZE_BYTES
        return b"".join(parts)[skip:skip + end - offset]

    def write(self, node: Node, offset: int, data: bytes) -> int:
        view = memoryview(data)
        end = offset + len(view)
        position = offset
        while position < end:
            index = position // BLOCK_SIZE_BYTES
            block_start = index * BLOCK_SIZE_BYTES
            count = min(end, block_start + BLOCK_SIZE_BYTES) - position
            chunk = view[position - offset:position - offset + count]
            if count == BLOCK_SIZE_BYTES:
                node.dirty[index] = bytes(chunk)
            else:
                block = bytearray(self._block(node, index))
                block[position - block_start:position - block_start + count] = chunk
                node.dirty[index] = bytes(block)
            position += count
        node.size = max(node.size, end)
        return len(view)

    def truncate(self, node: Node, size: int) -> None:
        if node.kind is not Kind.FILE:
            raise _error(errno.EISDIR, "truncate")
        if size < node.size:
            for index in [i for i in node.dirty if i * BLOCK_SIZE_BYTES >= size]:
                del node.dirty[index]
            if size % BLOCK_SIZE_BYTES:
                index = size // BLOCK_SIZE_BYTES
                block = bytearray(self._block(node, index))
                block[size % BLOCK_SIZE_BYTES:] = bytes(BLOCK_SIZE_BYTES - size % BLOCK_SIZE_BYTES)
                node.dirty[index] = bytes(block)
            # Invariant: live bytes at or past the size read as zeros, so a
            # later extension (truncate up, write past the end) shows zeros.
            node.zero_from = size if node.zero_from is None else min(node.zero_from, size)
        node.size = size

    def fallocate(self, node: Node, mode: int, offset: int, length: int) -> None:
        if mode & ~FALLOC_FL_KEEP_SIZE:
            raise _error(errno.EOPNOTSUPP, f"fallocate mode {mode:#x}")
        if not mode & FALLOC_FL_KEEP_SIZE and offset + length > node.size:
            node.size = offset + length  # the new range reads as zeros (invariant above)

    # --- syncs: the only way anything reaches the disk ---------------------

    def sync_file(self, node: Node) -> None:
        """fsync or fdatasync: data and size become durable (both, in this model)."""
        if node.kind is Kind.DIR:
            self.sync_dir(node)
            return
        self._write_blocks(node, sorted(node.dirty), node.size, hide=node.zero_from)

    def _write_blocks(self, node: Node, indexes: list[int], size: int,
                      hide: int | None) -> None:
        """Put ``indexes`` of the dirty blocks on the disk, with the file ``size``.

        ``hide``: cut the disk file there first (a pending truncate).  Blocks past
        ``size`` are clipped, so the disk never holds bytes past its size.
        """
        if hide is not None:
            if hide < node.durable_size:
                os.ftruncate(node.fd, hide)
                node.durable_size = hide
            node.zero_from = None
        for start, data in _runs(node, indexes):
            data = data[:max(0, size - start)]
            if data:
                _pwrite_all(node.fd, data, start)
                node.durable_size = max(node.durable_size, start + len(data))
        if node.durable_size != size:
            os.ftruncate(node.fd, size)
            node.durable_size = size

    def sync_dir(self, directory: Node) -> None:
        """fsync of a directory: its disk entries become its live entries."""
        for name, node in list(directory.durable.items()):
            if directory.entries.get(name) is not node:
                self._detach(directory, name, node)
        for name, node in directory.entries.items():
            if directory.durable.get(name) is not node:
                self._attach(directory, name, node)

    def sync_all(self) -> None:
        """What a clean unmount does: every file, then every directory."""
        nodes = list(self.walk())
        for node in nodes:
            if node.kind is Kind.FILE:
                self.sync_file(node)
        for node in nodes:
            if node.kind is Kind.DIR and node is not self.orphans:
                self.sync_dir(node)

    def _alive(self, node: Node) -> bool:
        return node.live_link_count > 0 or node.open_count > 0 or node is self.root

    def _detach(self, directory: Node, name: str, node: Node) -> None:
        """Remove ``directory/name`` from the disk, keeping a live inode as an orphan."""
        others = node.links - {(directory, name)}
        if not others and self._alive(node):
            orphan = (self.orphans, self._orphan_name(node.node_id))
            self._move_link(node, (directory, name), orphan)
        else:
            self._destroy_link(node, directory, name)

    def _destroy_link(self, node: Node, directory: Node, name: str) -> None:
        if node.kind is Kind.DIR:
            for child_name, child in list(node.durable.items()):
                self._detach(node, child_name, child)
            os.rmdir(name, dir_fd=directory.fd)
        else:
            os.unlink(name, dir_fd=directory.fd)
        del directory.durable[name]
        if directory is self.orphans:
            directory.entries.pop(name, None)
        node.links.discard((directory, name))
        if not node.links and not self._alive(node):
            os.close(node.fd)
            node.fd = -1

    def _attach(self, directory: Node, name: str, node: Node) -> None:
        orphan = next(((p, n) for p, n in node.links if p is self.orphans), None)
        if orphan is not None:
            self._move_link(node, orphan, (directory, name))
        elif node.kind is Kind.FILE:
            source_dir, source_name = next(iter(node.links))
            os.link(source_name, name, src_dir_fd=source_dir.fd, dst_dir_fd=directory.fd,
                    follow_symlinks=False)
            node.links.add((directory, name))
            directory.durable[name] = node
        else:
            # A directory moved between parents: its one disk entry moves now,
            # which changes the old parent on the disk too (see docs/powerloss.md).
            self._move_link(node, next(iter(node.links)), (directory, name))

    def _move_link(self, node: Node, source: tuple[Node, str],
                   target: tuple[Node, str]) -> None:
        (source_dir, source_name), (target_dir, target_name) = source, target
        os.rename(source_name, target_name, src_dir_fd=source_dir.fd, dst_dir_fd=target_dir.fd)
        del source_dir.durable[source_name]
        if source_dir is self.orphans:
            source_dir.entries.pop(source_name, None)
        target_dir.durable[target_name] = node
        if target_dir is self.orphans:
            target_dir.entries[target_name] = node
        node.links.discard(source)
        node.links.add(target)

    # --- power cut --------------------------------------------------------

    def cut(self, mode: CutMode, rng: random.Random) -> CutReport:
        """Lose power: the disk keeps what was synced (plus, PARTIAL, a random part
        of the rest); memory and orphans are gone.  The file system is unusable
        afterwards."""
        report = CutReport(mode=mode.value)
        paths = self._live_paths()
        report.unsynced_paths = sorted(paths[n.node_id] for n in self.walk()
                                       if n.node_id in paths and n.unsynced)
        nodes = [n for n in self.walk() if n is not self.orphans]
        for node in nodes:
            if node.kind is Kind.FILE and node.unsynced:
                self._cut_file(node, mode, rng, report)
        for node in nodes:
            if node.kind is Kind.DIR and node.unsynced:
                report.dirs_unsynced += 1
                if mode is CutMode.PARTIAL and rng.random() < 0.5:
                    self.sync_dir(node)
                    report.dirs_kept += 1
        for node in self.walk():
            if node.fd >= 0:
                os.close(node.fd)
                node.fd = -1
        shutil.rmtree(os.path.join(self.backing, ORPHANS_NAME), ignore_errors=True)
        self.cut_report = report
        return report

    def _live_paths(self) -> dict[int, str]:
        """node id -> one live path, for every node the live tree reaches."""
        paths = {self.root.node_id: "/"}
        stack = [(self.root, "")]
        while stack:
            directory, prefix = stack.pop()
            for name, node in directory.entries.items():
                if node.node_id not in paths:
                    paths[node.node_id] = f"{prefix}/{name}"
                    if node.kind is Kind.DIR:
                        stack.append((node, f"{prefix}/{name}"))
        return paths

    def _cut_file(self, node: Node, mode: CutMode, rng: random.Random,
                  report: CutReport) -> None:
        report.files_unsynced += 1
        report.blocks_unsynced += len(node.dirty)
        size_pending = node.size != node.durable_size or node.zero_from is not None
        report.sizes_unsynced += size_pending
        if mode is CutMode.STRICT:
            return
        kept = sorted(i for i in node.dirty if rng.random() < 0.5)
        keep_size = size_pending and rng.random() < 0.5
        report.blocks_kept += len(kept)
        report.sizes_kept += keep_size
        if keep_size:
            self._write_blocks(node, kept, node.size, hide=node.zero_from)
        else:
            # The size on the disk stays: kept blocks past it are clipped.
            self._write_blocks(node, kept, node.durable_size, hide=None)


def _runs(node: Node, indexes: list[int]) -> Iterator[tuple[int, bytes]]:
    """(offset, bytes) of each run of consecutive ``indexes``, popped from ``node.dirty``."""
    run: list[bytes] = []
    run_start = 0
    for index in indexes:
        if run and index != run_start + len(run):
            yield run_start * BLOCK_SIZE_BYTES, b"".join(run)
            run = []
        if not run:
            run_start = index
        run.append(node.dirty.pop(index))
    if run:
        yield run_start * BLOCK_SIZE_BYTES, b"".join(run)


def _pread_all(fd: int, size: int, offset: int) -> bytes:
    parts: list[bytes] = []
    while size > 0:
        chunk = os.pread(fd, size, offset)
        if not chunk:
            break
        parts.append(chunk)
        size -= len(chunk)
        offset += len(chunk)
    return b"".join(parts)


def _pwrite_all(fd: int, data: bytes, offset: int) -> None:
    view = memoryview(data)
    while view:
        written = os.pwrite(fd, view, offset)
        view = view[written:]
        offset += written
