"""The FUSE daemon: ``VolatileFS`` behind libfuse3 (mfusepy), driven over stdin.

Every operation runs under one lock, so a power cut falls between two
operations: ones that returned before it happened before the cut, and every
later one fails with EIO.  A cut kills the processes named for it (and, for a
trigger, the process whose operation tripped it) *while holding the lock*, so a
killed process never sees the result of an operation after the cut: a FUSE
request already sent to the daemon holds its caller until the reply, and the
pending SIGKILL ends the caller before it returns to user space.

Control protocol: one JSON object per line on stdin, one reply per line on
stdout (``{"ok": true, ...}`` or ``{"ok": false, "error": ...}``); the first line
on stdout is ``{"event": "mounted"}``.  Commands:

- ``{"cmd": "arm", "trigger": {...}, "pids": [...]}`` cut when an operation
  matches the trigger (see :class:`Trigger`);
- ``{"cmd": "disarm"}`` forget the trigger;
- ``{"cmd": "cut", "pids": [...]}`` cut now (killing ``pids`` first);
- ``{"cmd": "sync"}`` make everything durable, as ``sync(1)`` would;
- ``{"cmd": "status"}`` operation counts, the trigger that fired, the cut report.

End of stdin (the controlling process died) unmounts the file system.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import random
import resource
import signal
import stat
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any, TypeVar

from ._model import CutMode, Kind, Node, VolatileFS
from ._trigger import MUTATING_OPS, Trigger

# Debian ships libfuse 2 beside libfuse 3, and mfusepy picks "fuse" first.
os.environ.setdefault("FUSE_LIBRARY_NAME", "fuse3")
import mfusepy

T = TypeVar("T")
@dataclass
class _Handle:
    node: Node
    path: str


def _eio() -> OSError:
    return OSError(errno.EIO, "power cut")


class PowercutOperations(mfusepy.Operations):  # type: ignore[misc]
    use_ns = True
    # With both set, libfuse hands operations on open files their handle and no
    # path: a file unlinked while open (hard_remove) stays usable, as on a disk.
    flag_nopath = True
    flag_nullpath_ok = True

    def __init__(self, fs: VolatileFS, *, mode: CutMode, seed: int, mountpoint: str) -> None:
        self._fs = fs
        self._mode = mode
        self._rng = random.Random(seed)
        self._mountpoint = mountpoint
        self._lock = threading.Lock()
        self._handles: dict[int, _Handle] = {}
        self._next_fh = 1
        self._trigger: Trigger | None = None
        self._trigger_pids: set[int] = set()
        self._trigger_seen = 0
        self._fired: dict[str, Any] | None = None
        self._frozen = False
        self.stats: Counter[str] = Counter()

    # --- plumbing ---------------------------------------------------------

    def _run(self, op: str, path: str, action: Callable[[], T], offset: int | None = None) -> T:
        with self._lock:
            if self._frozen:
                raise _eio()
            trigger = self._trigger
            fire = self._tripped(op, path, offset)
            if fire and trigger is not None and trigger.when == "before":
                self._fire_locked(op, path)
                raise _eio()
            result = action()
            self.stats[op] += 1
            if fire:
                self._fire_locked(op, path)
                raise _eio()
            return result

    def _tripped(self, op: str, path: str, offset: int | None) -> bool:
        trigger = self._trigger
        if trigger is None or op not in MUTATING_OPS or not trigger.matches(op, path, offset):
            return False
        self._trigger_seen += 1
        return self._trigger_seen > trigger.skip

    def _fire_locked(self, op: str, path: str) -> None:
        caller = mfusepy.fuse_get_context()[2]
        pids = set(self._trigger_pids)
        if caller > 0 and caller != os.getpid():
            pids.add(caller)
        self._fired = {"op": op, "path": path, "caller_pid": caller}
        self._cut_locked(pids)

    def _cut_locked(self, pids: set[int]) -> None:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)  # a thread id kills its whole process
        self._frozen = True
        self._trigger = None
        self._fs.cut(self._mode, self._rng)

    def _handle(self, fh: int | None, path: str | None) -> tuple[Node, str]:
        if fh is not None and fh in self._handles:
            handle = self._handles[fh]
            return handle.node, handle.path
        if path is None:
            raise OSError(errno.EBADF, "no path and no handle")
        return self._fs.lookup(path), path

    def _open_handle(self, node: Node, path: str) -> int:
        fh = self._next_fh
        self._next_fh += 1
        self._handles[fh] = _Handle(node, path)
        self._fs.opened(node)
        return fh

    # --- control ----------------------------------------------------------

    def control(self, command: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            cmd = command.get("cmd")
            if cmd == "arm":
                if self._frozen:
                    raise RuntimeError("already cut")
                self._trigger = Trigger(**command["trigger"])
                self._trigger_pids = {int(p) for p in command.get("pids", [])}
                self._trigger_seen = 0
                return {"ok": True}
            if cmd == "disarm":
                self._trigger = None
                return {"ok": True}
            if cmd == "cut":
                if not self._frozen:
                    self._cut_locked({int(p) for p in command.get("pids", [])})
                return {"ok": True, "report": self._report()}
            if cmd == "sync":
                if self._frozen:
                    raise RuntimeError("already cut")
                self._fs.sync_all()
                return {"ok": True}
            if cmd == "status":
                return {"ok": True, "stats": dict(self.stats), "fired": self._fired,
                        "cut": self._report(), "armed": self._trigger is not None}
            raise ValueError(f"unknown command {cmd!r}")

    def _report(self) -> dict[str, Any] | None:
        report = self._fs.cut_report
        return None if report is None else {**asdict(report), "fired": self._fired}

    # --- lifecycle --------------------------------------------------------

    def init_with_config(self, conn_info: Any, config_3: Any) -> None:
        thread = threading.Thread(target=self._serve_control, name="powercut-control",
                                  daemon=True)
        thread.start()

    def _serve_control(self) -> None:
        _emit({"event": "mounted"})
        for line in sys.stdin:
            if not line.strip():
                continue
            try:
                reply = self.control(json.loads(line))
            except Exception as exc:
                reply = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
            _emit(reply)
        # The controlling process is gone: do not leave a mount behind.
        subprocess.run(["fusermount3", "-u", "-z", self._mountpoint], check=False)

    def destroy(self, path: str) -> None:
        with self._lock:
            if not self._frozen:
                self._fs.sync_all()  # a clean unmount writes everything, as a disk's would

    # --- attributes -------------------------------------------------------

    def getattr(self, path: str | None, fh: int | None = None) -> dict[str, Any]:
        with self._lock:
            if self._frozen:
                raise _eio()
            node, _ = self._handle(fh, path)
            st = os.fstat(node.fd)
            size = node.size if node.kind is Kind.FILE else st.st_size
            kind_bits = stat.S_IFDIR if node.kind is Kind.DIR else stat.S_IFREG
            return {
                "st_mode": kind_bits | stat.S_IMODE(st.st_mode),
                "st_nlink": max(1, node.live_link_count) if node.kind is Kind.FILE else 2,
                "st_size": size, "st_blocks": -(-size // 512), "st_blksize": 4096,
                "st_uid": st.st_uid, "st_gid": st.st_gid,
                "st_atime": st.st_atime_ns, "st_mtime": st.st_mtime_ns,
                "st_ctime": st.st_ctime_ns,
            }

    def chmod(self, path: str | None, mode: int) -> int:
        if path is not None:  # not modelled: straight to the backing inode
            self._run("chmod", path, lambda: os.fchmod(self._fs.lookup(path).fd, mode))
        return 0

    def chown(self, path: str | None, uid: int, gid: int) -> int:
        if path is not None:
            self._run("chown", path, lambda: os.fchown(self._fs.lookup(path).fd, uid, gid))
        return 0

    def utimens(self, path: str | None, times: tuple[int, int] | None = None) -> int:
        if path is not None:
            def action() -> None:
                fd = self._fs.lookup(path).fd
                if times is None:
                    os.utime(fd)
                else:
                    os.utime(fd, ns=times)
            self._run("utimens", path, action)
        return 0

    def access(self, path: str, amode: int) -> int:
        return 0

    def statfs(self, path: str) -> dict[str, int]:
        if self._frozen:
            raise _eio()
        st = os.statvfs(self._fs.backing)
        return {key: getattr(st, key) for key in (
            "f_bsize", "f_frsize", "f_blocks", "f_bfree", "f_bavail", "f_files", "f_ffree",
            "f_favail", "f_namemax")}

    # --- names ------------------------------------------------------------

    def mkdir(self, path: str, mode: int) -> int:
        self._run("mkdir", path, lambda: self._fs.mkdir(path, stat.S_IMODE(mode)))
        return 0

    def unlink(self, path: str) -> int:
        self._run("unlink", path, lambda: self._fs.unlink(path))
        return 0

    def rmdir(self, path: str) -> int:
        self._run("rmdir", path, lambda: self._fs.rmdir(path))
        return 0

    def rename(self, old: str, new: str) -> int:
        self._run("rename", new, lambda: self._fs.rename(old, new))
        return 0

    def link(self, target: str, source: str) -> int:
        self._run("link", target, lambda: self._fs.link(source, target))
        return 0

    def opendir(self, path: str) -> int:
        def action() -> int:
            node = self._fs.lookup(path)
            if node.kind is not Kind.DIR:
                raise OSError(errno.ENOTDIR, path)
            return self._open_handle(node, path)
        return self._run("opendir", path, action)

    def readdir(self, path: str | None, fh: int) -> list[str]:
        def action() -> list[str]:
            node, _ = self._handle(fh, path)
            return [".", "..", *node.entries]
        return self._run("readdir", path or "", action)

    def releasedir(self, path: str | None, fh: int) -> int:
        return self.release(path, fh)

    def fsyncdir(self, path: str | None, datasync: int, fh: int) -> int:
        with self._lock:
            node, node_path = self._handle(fh, path)
        self._run("fsyncdir", node_path, lambda: self._fs.sync_dir(node))
        return 0

    # --- files ------------------------------------------------------------

    def create(self, path: str, mode: int, flags: int = 0) -> int:
        def action() -> int:
            node = self._fs.create(path, stat.S_IMODE(mode))
            if flags & os.O_TRUNC:
                self._fs.truncate(node, 0)
            self._count_direct(flags)
            return self._open_handle(node, path)
        return self._run("create", path, action)

    def open(self, path: str, flags: int) -> int:
        def action() -> int:
            node = self._fs.lookup(path)
            if flags & os.O_TRUNC and node.kind is Kind.FILE:
                self._fs.truncate(node, 0)
            self._count_direct(flags)
            return self._open_handle(node, path)
        return self._run("truncate" if flags & os.O_TRUNC else "open", path, action)

    def _count_direct(self, flags: int) -> None:
        if flags & os.O_DIRECT:
            self.stats["direct_opens"] += 1

    def read(self, path: str | None, size: int, offset: int, fh: int) -> bytes:
        def action() -> bytes:
            node, _ = self._handle(fh, path)
            return self._fs.read(node, offset, size)
        return self._run("read", path or "", action)

    def write(self, path: str | None, data: bytes, offset: int, fh: int) -> int:
        with self._lock:
            node, node_path = self._handle(fh, path)
        return self._run("write", node_path, lambda: self._fs.write(node, offset, data),
                         offset=offset)

    def truncate(self, path: str | None, length: int, fh: int | None = None) -> int:
        with self._lock:
            node, node_path = self._handle(fh, path)
        self._run("truncate", node_path, lambda: self._fs.truncate(node, length))
        return 0

    def fallocate(self, path: str | None, mode: int, offset: int, size: int, fh: int) -> int:
        with self._lock:
            node, node_path = self._handle(fh, path)
        self._run("fallocate", node_path, lambda: self._fs.fallocate(node, mode, offset, size))
        return 0

    def fsync(self, path: str | None, datasync: int, fh: int) -> int:
        with self._lock:
            node, node_path = self._handle(fh, path)
        self._run("fsync", node_path, lambda: self._fs.sync_file(node))
        return 0

    def flush(self, path: str | None, fh: int) -> int:
        return 0

    def release(self, path: str | None, fh: int) -> int:
        with self._lock:
            handle = self._handles.pop(fh, None)
            if handle is not None and not self._frozen:
                self._fs.released(handle.node)
        return 0


class _Fuse(mfusepy.FUSE):  # type: ignore[misc]
    def rename_fuse_3(self, old: bytes, new: bytes, flags: int) -> int:
        # mfusepy drops the flags; RENAME_NOREPLACE or RENAME_EXCHANGE must not
        # silently become a plain rename.
        if flags:
            return -errno.EINVAL
        return int(self.rename_fuse_2(old, new))


def _emit(message: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def serve(backing: str, mountpoint: str, *, mode: CutMode, seed: int) -> None:
    """Mount ``backing`` at ``mountpoint`` and serve until unmounted."""
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # one descriptor per inode
    fs = VolatileFS(backing)
    operations = PowercutOperations(fs, mode=mode, seed=seed, mountpoint=mountpoint)
    # hard_remove: an unlinked open file keeps working through its handle (no
    # .fuse_hidden renames, which would show up as extra directory entries);
    # auto_unmount: the mount goes away if this process dies.
    _Fuse(operations, mountpoint, foreground=True, hard_remove=True, auto_unmount=True,
          fsname="powercut", subtype="powercut")
