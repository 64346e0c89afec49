"""The controlling side: start the daemon, arm triggers, cut, unmount."""

from __future__ import annotations

import contextlib
import ctypes.util
import json
import os
import queue
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterable
from dataclasses import asdict
from pathlib import Path
from types import TracebackType
from typing import IO, Any, Self

from ._model import CutMode
from ._trigger import Trigger

REPO = Path(__file__).resolve().parents[2]


class PowercutError(RuntimeError):
    """The daemon could not mount, or refused or did not answer a command."""


def fuse_unavailable() -> str | None:
    """None when a powercut file system can be mounted here, else why not."""
    if not os.path.exists("/dev/fuse"):
        return "/dev/fuse does not exist (no FUSE in this kernel or container)"
    if shutil.which("fusermount3") is None:
        return "fusermount3 is not installed (Debian package fuse3)"
    if ctypes.util.find_library("fuse3") is None:
        return "libfuse3 is not installed (Debian package libfuse3-3)"
    try:
        import mfusepy  # noqa: F401
    except (ImportError, OSError) as exc:
        return f"mfusepy cannot be imported: {exc}"
    return None


class PowercutMount:
    """One mount of ``backing`` at ``mountpoint``: one power epoch, at most one cut.

    After a cut (by :meth:`cut` or by an armed trigger) the mount answers EIO
    until :meth:`unmount`; mount again for the next epoch.
    """

    def __init__(self, backing: Path, mountpoint: Path, *, mode: CutMode = CutMode.STRICT,
                 seed: int = 0, log_path: Path | None = None,
                 timeout_s: float = 30.0) -> None:
        self.backing = backing
        self.mountpoint = mountpoint
        self.mode = mode
        self.seed = seed
        self.log_path = log_path
        self.timeout_s = timeout_s
        self._process: subprocess.Popen[str] | None = None
        self._replies: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self._log: IO[str] | None = None

    def start(self) -> Self:
        self.backing.mkdir(parents=True, exist_ok=True)
        self.mountpoint.mkdir(parents=True, exist_ok=True)
        self._log = open(self.log_path, "a") if self.log_path else None  # noqa: SIM115
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(
            p for p in (os.environ.get("PYTHONPATH"), str(REPO)) if p)}
        self._process = subprocess.Popen(
            [sys.executable, "-m", "tools.powercut", "serve", str(self.backing),
             str(self.mountpoint), "--mode", self.mode.value, "--seed", str(self.seed)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=self._log if self._log else subprocess.DEVNULL,
            text=True, env=env, cwd=REPO)
        threading.Thread(target=self._read_replies, daemon=True).start()
        first = self._next_reply()
        if first.get("event") != "mounted":
            self._kill()
            raise PowercutError(f"powercut daemon did not mount: {first}")
        return self

    def _read_replies(self) -> None:
        assert self._process is not None and self._process.stdout is not None
        for line in self._process.stdout:
            self._replies.put(json.loads(line))
        self._replies.put(None)

    def _next_reply(self) -> dict[str, Any]:
        try:
            reply = self._replies.get(timeout=self.timeout_s)
        except queue.Empty:
            raise PowercutError(f"powercut daemon silent for {self.timeout_s}s") from None
        if reply is None:
            raise PowercutError(f"powercut daemon exited:\n{self._log_tail()}")
        return reply

    def _log_tail(self) -> str:
        if self.log_path is None or not self.log_path.exists():
            return "(no log)"
        return self.log_path.read_text(errors="replace")[-3000:]

    def _request(self, command: dict[str, Any]) -> dict[str, Any]:
        if self._process is None or self._process.stdin is None:
            raise PowercutError("not mounted")
        self._process.stdin.write(json.dumps(command) + "\n")
        self._process.stdin.flush()
        reply = self._next_reply()
        if not reply.get("ok"):
            raise PowercutError(f"{command['cmd']}: {reply.get('error')}")
        return reply

    def arm(self, trigger: Trigger, pids: Iterable[int] = ()) -> None:
        """Cut at the operation ``trigger`` names, killing its caller and ``pids``."""
        self._request({"cmd": "arm", "trigger": asdict(trigger), "pids": list(pids)})

    def disarm(self) -> None:
        self._request({"cmd": "disarm"})

    def cut(self, pids: Iterable[int] = ()) -> dict[str, Any]:
        """Kill ``pids`` and lose power now (a no-op after a trigger fired); the report."""
        report = self._request({"cmd": "cut", "pids": list(pids)})["report"]
        assert isinstance(report, dict)
        return report

    def sync(self) -> None:
        """Make everything durable now, as ``sync(1)`` would."""
        self._request({"cmd": "sync"})

    def status(self) -> dict[str, Any]:
        return self._request({"cmd": "status"})

    def unmount(self) -> None:
        """Unmount (a clean one syncs everything unless the power was cut) and wait."""
        if self._process is None:
            return
        result = subprocess.run(["fusermount3", "-u", str(self.mountpoint)],
                                capture_output=True, text=True, check=False)
        if result.returncode != 0:
            # Still busy (a process has a file open there): detach it anyway.
            subprocess.run(["fusermount3", "-u", "-z", str(self.mountpoint)],
                           capture_output=True, check=False)
        try:
            self._process.wait(self.timeout_s)
        except subprocess.TimeoutExpired:
            self._kill()
            raise PowercutError(f"powercut daemon did not exit after unmount:\n"
                                f"{self._log_tail()}") from None
        finally:
            self._close_pipes()
        if self._process.returncode != 0:
            code = self._process.returncode
            raise PowercutError(f"powercut daemon exited with {code}:\n{self._log_tail()}")
        self._process = None

    def _kill(self) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.kill()
            self._process.wait()
        subprocess.run(["fusermount3", "-u", "-z", str(self.mountpoint)],
                       capture_output=True, check=False)
        self._close_pipes()
        self._process = None

    def _close_pipes(self) -> None:
        if self._process is not None and self._process.stdin is not None:
            with contextlib.suppress(OSError):
                self._process.stdin.close()
        if self._log is not None:
            self._log.close()
            self._log = None

    def __enter__(self) -> Self:
        return self.start() if self._process is None else self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if exc_type is None:
            self.unmount()
        else:
            self._kill()
