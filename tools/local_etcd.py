"""A real etcd for tests, the cluster quick start and benchmarks, on loopback.

Debian's ``etcd-server`` (``scripts/install-etcd.sh``) runs as one member with a
client and a peer port on 127.0.0.1 (free ports unless given) and its data under
one directory::

    DIR/data/         etcd's data dir (kept across stop/start)
    DIR/state.json    PID and ports of the running member
    DIR/etcd.log      its output

Python: ``with LocalEtcd(tmp_dir) as etcd: etcd.endpoint`` (``http://127.0.0.1:P``),
``etcd.metadata_url("scope")`` (``etcd://127.0.0.1:P/scope``, the ``METADATA_URL``
setting).  Command line::

    python -m tools.local_etcd start|stop|run --dir DIR [--port P]

``start`` and ``run`` print ``export LEDGERD_ETCD_ENDPOINT=…`` lines for ``eval``.
Exit codes: 0 ok, 1 failed to start, 2 etcd not installed.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType

import httpx

from tools.local_s3 import free_port

BINARY = "etcd"
START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 10.0


class LocalEtcdError(RuntimeError):
    """The local etcd could not be started or stopped."""


def etcd_available() -> str | None:
    """None when the etcd binary is installed, else why the server can't run."""
    if shutil.which(BINARY) is None:
        return "etcd is not installed: run scripts/install-etcd.sh as root " \
               "(apt-get install etcd-server)"
    return None


class LocalEtcd:
    """One etcd member on 127.0.0.1 whose state lives in ``directory``."""

    def __init__(self, directory: Path, *, port: int | None = None) -> None:
        self.directory = Path(directory)
        self.port = port or free_port()
        self.peer_port = free_port()
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def metadata_url(self, scope: str = "ledgerd") -> str:
        return f"etcd://127.0.0.1:{self.port}/{scope}"

    def env(self) -> dict[str, str]:
        return {"LEDGERD_ETCD_ENDPOINT": self.endpoint,
                "LEDGERD_METADATA_URL": self.metadata_url()}

    def __enter__(self) -> LocalEtcd:
        self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    def start(self, timeout_s: float = START_TIMEOUT_S) -> None:
        reason = etcd_available()
        if reason is not None:
            raise LocalEtcdError(reason)
        self.directory.mkdir(parents=True, exist_ok=True)
        peer = f"http://127.0.0.1:{self.peer_port}"
        argv = [BINARY, "--name", "ledgerd", "--data-dir", str(self.directory / "data"),
                "--listen-client-urls", self.endpoint, "--advertise-client-urls", self.endpoint,
                "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
                "--initial-cluster", f"ledgerd={peer}", "--initial-cluster-state", "new",
                "--logger", "zap", "--log-level", "warn"]
        log = open(self.directory / "etcd.log", "ab")  # noqa: SIM115 - the child owns it
        try:
            self._process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                             stdin=subprocess.DEVNULL, start_new_session=True)
        finally:
            log.close()
        (self.directory / "state.json").write_text(json.dumps(
            {"pid": self._process.pid, "port": self.port, "peer_port": self.peer_port}))
        self._wait_ready(time.monotonic() + timeout_s)

    def _wait_ready(self, deadline: float) -> None:
        assert self._process is not None
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise LocalEtcdError(f"etcd exited with {self._process.returncode}: "
                                     f"{self._log_tail()}")
            try:
                response = httpx.get(f"{self.endpoint}/health", timeout=1.0)
                if response.status_code == 200 and response.json().get("health") == "true":
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
        self.stop()
        raise LocalEtcdError(f"etcd did not become healthy in time: {self._log_tail()}")

    def _log_tail(self, lines: int = 20) -> str:
        try:
            text = (self.directory / "etcd.log").read_text(errors="replace")
        except FileNotFoundError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])

    def stop(self) -> None:
        pid = self._pid()
        if pid is None:
            return
        with_suppressed_missing(lambda: os.kill(pid, signal.SIGTERM))
        deadline = time.monotonic() + STOP_TIMEOUT_S
        while time.monotonic() < deadline and _alive(pid, self._process):
            time.sleep(0.05)
        if _alive(pid, self._process):
            with_suppressed_missing(lambda: os.kill(pid, signal.SIGKILL))
        if self._process is not None:
            self._process.wait(timeout=STOP_TIMEOUT_S)
            self._process = None
        (self.directory / "state.json").unlink(missing_ok=True)

    def kill(self) -> None:
        """SIGKILL, for tests of etcd going away while the service runs."""
        pid = self._pid()
        if pid is not None:
            with_suppressed_missing(lambda: os.kill(pid, signal.SIGKILL))
            if self._process is not None:
                self._process.wait(timeout=STOP_TIMEOUT_S)
                self._process = None
            (self.directory / "state.json").unlink(missing_ok=True)

    def _pid(self) -> int | None:
        if self._process is not None:
            return self._process.pid
        try:
            state = json.loads((self.directory / "state.json").read_text())
        except FileNotFoundError:
            return None
        self.port = int(state["port"])
        return int(state["pid"])


def _alive(pid: int, process: subprocess.Popen[bytes] | None) -> bool:
    if process is not None:
        return process.poll() is None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def with_suppressed_missing(action: Callable[[], None]) -> None:
    with contextlib.suppress(ProcessLookupError):  # already gone
        action()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.local_etcd")
    parser.add_argument("command", choices=("start", "stop", "run"))
    parser.add_argument("--dir", type=Path, required=True)
    parser.add_argument("--port", type=int)
    args = parser.parse_args(argv)
    if args.command != "stop" and etcd_available() is not None:
        print(etcd_available(), file=sys.stderr)
        return 2
    etcd = LocalEtcd(args.dir, port=args.port)
    if args.command == "stop":
        etcd.stop()
        return 0
    try:
        etcd.start()
    except LocalEtcdError as exc:
        print(f"local etcd: {exc}", file=sys.stderr)
        return 1
    for name, value in etcd.env().items():
        print(f"export {name}={value}")
    sys.stdout.flush()
    if args.command == "start":
        etcd._process = None  # leave it running; `stop` finds it through state.json
        return 0
    stop = {"now": False}

    def on_signal(signum: int, frame: object) -> None:
        stop["now"] = True
    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    while not stop["now"]:
        time.sleep(0.2)
    etcd.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
