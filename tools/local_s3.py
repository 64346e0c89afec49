"""A real S3 server for tests, the quick start and benchmarks: Ceph's radosgw.

One mon, one OSD (BlueStore on a sparse file) and radosgw run on loopback from
Debian's Ceph packages (``scripts/install-s3.sh``).  Everything lives under one
state directory; nothing is read from or written to /etc/ceph, /var/lib/ceph or
/var/log/ceph::

    DIR/ceph.conf      rewritten on every start (ports may change)
    DIR/state.json     fsid, OSD uuid, ports, PIDs of the running daemons
    DIR/mon.a/         the monitor's store
    DIR/osd.0/block    BlueStore device: a 10 GiB sparse file
    DIR/rgw/           radosgw's data dir
    DIR/run/           admin sockets
    DIR/log/           daemon logs; NAME.out holds each daemon's stdout/stderr
    DIR/endpoint.json  while the command line's start/run keeps it up: endpoint,
                       region, keys and bucket under the names of the Spark
                       source's options, for ``ledgerd export``/``verify`` in
                       another shell (the quick start's hand-off); stop() removes it

Lifecycle: ``start()`` bootstraps the cluster on first use (monmap, mon mkfs,
``ceph osd new``, OSD mkfs), then runs the three daemons in the foreground as
children in their own session, creates the S3 user and waits until an S3 call
succeeds.  ``stop()`` terminates radosgw, then the OSD, then the mon; the OSD
goes before the mon because it tells the mon it is going down and otherwise
waits 5 s for an answer.  A later ``start()`` on the same directory brings
back the same cluster with its buckets and objects.

Command line (the Makefile's quick start uses it)::

    python -m tools.local_s3 start|stop|status|run --dir DIR [--port P] [--bucket B]

``start`` and ``run`` print ``export NAME=value`` lines (see ``env()``) on
stdout for ``eval`` and write ``DIR/endpoint.json``; logs go to stderr.  Exit
codes: 0 ok, 1 failed to start, 2 Ceph not installed, 3 ``status`` of a stopped
server.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from app import logs

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client
    from mypy_boto3_s3.type_defs import ObjectIdentifierTypeDef

log = logging.getLogger("ledgerd.local_s3")

# Fixed credentials: the server only listens on 127.0.0.1, and tests, the
# quick start and benchmarks all need to know them without a hand-off.
ACCESS_KEY = "ledgerd-local-access-key"
SECRET_KEY = "ledgerd-local-secret-key-not-for-production"
REGION = "us-east-1"
S3_USER = "ledgerd"

# Sparse: only written blocks take disk space.  The OSD reports itself full at
# 95%, so a single run can store about 9.5 GiB.
BLOCK_SIZE_BYTES = 10 * 1024**3
MON_ID = "a"
OSD_ID = 0
RGW_NAME = "client.rgw.ledgerd"
DAEMONS = ("radosgw", "osd", "mon")  # stop order
DAEMON_NAMES = {"mon": f"mon.{MON_ID}", "osd": f"osd.{OSD_ID}", "radosgw": RGW_NAME}
BINARIES = ("ceph", "ceph-mon", "ceph-osd", "monmaptool", "radosgw", "radosgw-admin")
ENDPOINT_FILE_NAME = "endpoint.json"
STOP_TIMEOUT_S = 15.0
CLI_TIMEOUT_S = 30.0


class LocalS3Error(RuntimeError):
    """The local S3 server could not be started or stopped."""


def radosgw_available() -> str | None:
    """None when the Ceph binaries are installed, else why the server can't run."""
    if not sys.platform.startswith("linux"):
        return f"Ceph's radosgw needs Linux, this is {sys.platform}"
    missing = [name for name in BINARIES if shutil.which(name) is None]
    if missing:
        return (f"missing {', '.join(missing)}: run scripts/install-s3.sh as root "
                "(apt-get install radosgw ceph-mon ceph-osd)")
    return None


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nobody listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def port_is_free(port: int) -> bool:
    """True when a daemon could listen on 127.0.0.1:port now.

    SO_REUSEADDR as the daemons set it: connections of a previous run still in
    TIME_WAIT must not make us move the server to another port.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


@dataclass
class _State:
    """What must survive between starts (state.json)."""

    fsid: str
    osd_uuid: str
    mon_port: int
    rgw_port: int
    bootstrapped: bool = False
    user_created: bool = False
    pids: dict[str, int] = field(default_factory=dict)

    @classmethod
    def load(cls, path: Path) -> _State | None:
        try:
            raw: dict[str, Any] = json.loads(path.read_text())
        except FileNotFoundError:
            return None
        return cls(**raw)

    def save(self, path: Path) -> None:
        # Write-then-rename so a crash never leaves a half-written state file.
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(self), indent=2) + "\n")
        os.replace(tmp, path)


def _render_conf(d: Path, state: _State) -> str:
    return f"""\
# Generated by tools/local_s3.py on every start; edits are lost.
[global]
fsid = {state.fsid}
mon host = v2:127.0.0.1:{state.mon_port}
public addr = 127.0.0.1
ms bind ipv6 = false
ms bind msgr1 = false
# Loopback only, so no authentication at all.
auth cluster required = none
auth service required = none
auth client required = none
# radosgw asks for a "secure" mon connection by default, which the "none"
# auth method cannot give: it would retry for 300 s and never connect.
ms mon client mode = crc
run dir = {d}/run
crash dir = {d}/crash
log file = {d}/log/$name.log
# Clients (ceph, radosgw-admin) would all fight over client.admin.asok.
admin socket =
mon cluster log file = default={d}/log/$channel.log cluster={d}/log/cluster.log
osd pool default size = 1
osd pool default min size = 1
osd pool default pg num = 8
osd pool default pgp num = 8
osd pool default pg autoscale mode = off
mon allow pool size one = true
mon warn on pool no redundancy = false
osd crush chooseleaf type = 0
# Commit map changes every 50 ms instead of every second: up in ~5 s, not ~16 s.
paxos propose interval = 0.05
# Do not warn, or stop the mon, when the host disk is fuller than Ceph likes.
mon data avail warn = 1
mon data avail crit = 0
# RocksDB (mon and BlueStore) dumps every option at level 4 on each open.
debug rocksdb = 1/5
# Two cores shared with the service under test: few threads, small caches.
ms async op threads = 2
# A client whose op waits for an OSD asks for a new OSD map only on this tick
# (5 s by default): radosgw would sit out a whole tick after the OSD is up.
objecter tick interval = 0.5
# After a kill -9 the first OSD map a client gets still names the dead OSD;
# the client asks for a newer map only once an op has waited this long (10 s
# by default), so a restart after a crash took 11 s instead of 2 s.
objecter timeout = 1

[mon]
mon data = {d}/mon.$id
admin socket = {d}/run/$name.asok

[osd]
osd data = {d}/osd.$id
admin socket = {d}/run/$name.asok
osd objectstore = bluestore
bluestore block create = true
bluestore block size = {BLOCK_SIZE_BYTES}
osd memory target = 536870912
bluestore cache autotune = false
bluestore cache size = 67108864
osd op num shards = 2
osd op num threads per shard = 1
# Each open/close of the block file waits for the aio thread's poll timeout
# (250 ms by default), about ten times during mkfs and boot.
bdev aio poll ms = 10

[{RGW_NAME}]
admin socket = {d}/run/$name.asok
rgw data = {d}/rgw
# Without tcp_nodelay every GET waits ~44 ms for Nagle + delayed ACK.
rgw frontends = beast endpoint=127.0.0.1:{state.rgw_port} tcp_nodelay=1
rgw thread pool size = 32
rgw dynamic resharding = false
# Lifecycle rules are not used; its worker sleeps 5 s at a time without
# noticing SIGTERM, which made every stop take up to 4 s.
rgw enable lc threads = false
"""


def _pid_is_ours(pid: int, conf: Path) -> bool:
    """True when pid is alive (not a zombie) and was started with our ceph.conf.

    The check on the command line guards against a PID reused by some other
    process after ours died (we would otherwise kill a stranger).
    """
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except (FileNotFoundError, ProcessLookupError):
        return False
    if stat.rsplit(")", 1)[1].split()[0] in ("Z", "X"):
        return False
    return str(conf).encode() in cmdline


class LocalS3Server:
    """A one-node Ceph cluster with radosgw on 127.0.0.1, owned by this object.

    ``port`` fixes radosgw's port; by default the port of the previous start of
    this directory is reused when free, else any free port is taken.
    """

    def __init__(self, directory: Path, *, port: int | None = None) -> None:
        self.directory = Path(directory).resolve()
        self.access_key = ACCESS_KEY
        self.secret_key = SECRET_KEY
        self.region = REGION
        self._requested_port = port
        self._children: dict[str, subprocess.Popen[bytes]] = {}
        self._state: _State | None = None

    # --- paths and derived values ---------------------------------------------

    @property
    def conf_path(self) -> Path:
        return self.directory / "ceph.conf"

    @property
    def _state_path(self) -> Path:
        return self.directory / "state.json"

    @property
    def endpoint_file(self) -> Path:
        return self.directory / ENDPOINT_FILE_NAME

    @property
    def port(self) -> int:
        return self._loaded_state().rgw_port

    @property
    def endpoint_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def env(self) -> dict[str, str]:
        """The environment that points ledgerd (and boto3) at this server."""
        return {
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
            "LEDGERD_S3_ENDPOINT_URL": self.endpoint_url,
        }

    def write_endpoint_file(self, bucket: str | None = None) -> Path:
        """Write ``DIR/endpoint.json`` (see the module docstring); owner-only, since it
        holds the keys."""
        values = {"endpoint": self.endpoint_url, "region": self.region,
                  "access_key": self.access_key, "secret_key": self.secret_key}
        if bucket:
            values["bucket"] = bucket
        tmp = self.endpoint_file.with_suffix(".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(json.dumps(values, indent=2) + "\n")
        os.replace(tmp, self.endpoint_file)
        return self.endpoint_file

    def client(self) -> S3Client:
        """A boto3 S3 client for this server (path-style, signature v4)."""
        return boto3.client(
            "s3",
            endpoint_url=self.endpoint_url,
            aws_access_key_id=self.access_key,
            aws_secret_access_key=self.secret_key,
            region_name=self.region,
            config=Config(
                signature_version="s3v4",
                s3={"addressing_style": "path"},
                retries={"max_attempts": 3, "mode": "standard"},
                connect_timeout=5,
                read_timeout=60,
            ),
        )

    def _loaded_state(self) -> _State:
        if self._state is None:
            self._state = _State.load(self._state_path)
        if self._state is None:
            raise LocalS3Error(f"no local S3 server in {self.directory} (never started)")
        return self._state

    # --- life cycle -----------------------------------------------------------

    def __enter__(self) -> LocalS3Server:
        self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    def running_pids(self) -> dict[str, int]:
        """The daemons of this directory that are alive, by role."""
        state = _State.load(self._state_path)
        if state is None:
            return {}
        return {role: pid for role, pid in state.pids.items()
                if _pid_is_ours(pid, self.conf_path)}

    def start(self, timeout_s: float = 120.0) -> None:
        """Start (or adopt) the cluster and return once S3 answers.

        Raises :class:`LocalS3Error`, with the tail of the failing daemon's log,
        when a stage does not finish before ``timeout_s`` in total.
        """
        began = time.monotonic()
        deadline = began + timeout_s
        reason = radosgw_available()
        if reason is not None:
            raise LocalS3Error(f"S3 server unavailable: {reason}")
        self.directory.mkdir(parents=True, exist_ok=True)
        if self._adopt_running(deadline):
            return
        try:
            self._start_daemons(deadline)
        except BaseException:
            # Leave no half-started cluster behind to hold ports and memory.
            self.stop()
            raise
        log.info("local S3 ready", extra={
            "stage": "ready", "elapsed_s": round(time.monotonic() - began, 2),
            "endpoint": self.endpoint_url, "dir": str(self.directory)})

    def _adopt_running(self, deadline: float) -> bool:
        """True when every daemon already runs (an earlier start): just wait for S3."""
        running = self.running_pids()
        if not running:
            return False
        if set(running) != set(DAEMONS):
            log.warning("local S3 partly running: stopping the leftovers",
                        extra={"stage": "adopt", "partial": running})
            self.stop()
            return False
        self._state = _State.load(self._state_path)
        self._wait_s3(deadline)
        log.info("local S3 already running", extra={
            "stage": "adopt", "pids": running, "endpoint": self.endpoint_url})
        return True

    def _start_daemons(self, deadline: float) -> None:
        state = self._prepare_state()
        self._state = state
        self.conf_path.write_text(_render_conf(self.directory, state))
        for sub in ("run", "log", "crash", "rgw"):
            (self.directory / sub).mkdir(exist_ok=True)
        if not state.bootstrapped:
            self._bootstrap(state, deadline)
        else:
            self._spawn("mon", ["ceph-mon", "-i", MON_ID])
        # The OSD and radosgw boot in parallel: radosgw simply blocks until the
        # OSD is up and its pools can be created.
        self._spawn("osd", ["ceph-osd", "-i", str(OSD_ID)])
        self._spawn("radosgw", ["radosgw", "-n", RGW_NAME])
        state.pids = {role: proc.pid for role, proc in self._children.items()}
        state.save(self._state_path)
        self._stage("rgw_listening",
                    lambda: self._wait_listening("radosgw", state.rgw_port, deadline))
        if not state.user_created:
            self._stage("user_created", self._create_user)
            state.user_created = True
            state.save(self._state_path)
        self._stage("s3_answers", lambda: self._wait_s3(deadline))

    def _prepare_state(self) -> _State:
        """Load state.json or begin a new cluster; pick the ports for this run."""
        state = _State.load(self._state_path)
        if state is None or not state.bootstrapped:
            self._wipe_cluster_data()
            state = _State(fsid=str(uuid.uuid4()), osd_uuid=str(uuid.uuid4()),
                           mon_port=free_port(), rgw_port=0)
        elif not port_is_free(state.mon_port):
            self._readdress_mon(state, free_port())
        if self._requested_port is not None:
            state.rgw_port = self._requested_port
        elif state.rgw_port == 0 or not port_is_free(state.rgw_port):
            state.rgw_port = free_port()
        return state

    def _wipe_cluster_data(self) -> None:
        """Remove what a bootstrap that never finished left behind."""
        for sub in (f"mon.{MON_ID}", f"osd.{OSD_ID}", "rgw", "monmap"):
            path = self.directory / sub
            if path.is_dir():
                shutil.rmtree(path)
            elif path.exists():
                path.unlink()

    def _bootstrap(self, state: _State, deadline: float) -> None:
        """Create the mon and the OSD; leaves the mon running."""
        def mon() -> None:
            monmap = self.directory / "monmap"
            self._run(["monmaptool", "--create", "--clobber", "--fsid", state.fsid,
                       "--addv", MON_ID, f"[v2:127.0.0.1:{state.mon_port}]", str(monmap)])
            self._run(["ceph-mon", "--conf", str(self.conf_path), "--mkfs", "-i", MON_ID,
                       "--monmap", str(monmap)])
            self._spawn("mon", ["ceph-mon", "-i", MON_ID])
            self._wait_listening("mon", state.mon_port, deadline)

        def osd() -> None:
            # `ceph osd new` also waits for the mon to form its quorum of one.
            timeout = max(1.0, deadline - time.monotonic())
            self._ceph(["osd", "new", state.osd_uuid], timeout_s=timeout)
            (self.directory / f"osd.{OSD_ID}").mkdir(exist_ok=True)
            self._run(["ceph-osd", "--conf", str(self.conf_path), "-i", str(OSD_ID),
                       "--mkfs", "--osd-uuid", state.osd_uuid], timeout_s=timeout)

        self._stage("mon_created", mon)
        self._stage("osd_created", osd)
        state.bootstrapped = True
        state.save(self._state_path)

    def _readdress_mon(self, state: _State, port: int) -> None:
        """Move the mon to a new port: the documented extract/edit/inject dance."""
        monmap = str(self.directory / "monmap")
        conf = ["--conf", str(self.conf_path)]
        self._run(["ceph-mon", *conf, "-i", MON_ID, "--extract-monmap", monmap])
        self._run(["monmaptool", monmap, "--rm", MON_ID])
        self._run(["monmaptool", monmap, "--addv", MON_ID, f"[v2:127.0.0.1:{port}]"])
        self._run(["ceph-mon", *conf, "-i", MON_ID, "--inject-monmap", monmap])
        log.info("local S3 monitor readdressed", extra={
            "stage": "mon_readdressed", "old_port": state.mon_port, "new_port": port})
        state.mon_port = port

    def _create_user(self) -> None:
        out = self._run(["radosgw-admin", "--conf", str(self.conf_path), "user", "create",
                         "--uid", S3_USER, "--display-name", S3_USER,
                         "--access-key", self.access_key, "--secret", self.secret_key],
                        ok_codes=(0, 17))  # 17 = EEXIST: created by an earlier run
        log.debug("local S3 radosgw-admin", extra={"output": out.strip()})

    # --- waiting --------------------------------------------------------------

    def _stage(self, name: str, step: Callable[[], None]) -> None:
        began = time.monotonic()
        step()
        log.info("local S3 stage done", extra={
            "stage": name, "elapsed_s": round(time.monotonic() - began, 2)})

    def _check_children(self) -> None:
        """Fail fast, with its log, when a daemon we started has exited."""
        for role, proc in self._children.items():
            code = proc.poll()
            if code is not None:
                raise LocalS3Error(f"{role} exited with code {code}\n{self._log_tail(role)}")

    def _wait_listening(self, role: str, port: int, deadline: float) -> None:
        while True:
            self._check_children()
            with contextlib.suppress(OSError), \
                    socket.create_connection(("127.0.0.1", port), timeout=1):
                return
            self._sleep_or_fail(deadline, role, f"{role} to listen on port {port}")

    def _wait_s3(self, deadline: float) -> None:
        client = self.client()
        while True:
            self._check_children()
            try:
                client.list_buckets()
                return
            except (BotoCoreError, ClientError) as exc:
                last = exc
            self._sleep_or_fail(deadline, "radosgw", f"an S3 answer (last error: {last})")

    def _sleep_or_fail(self, deadline: float, role: str, what: str) -> None:
        if time.monotonic() >= deadline:
            # radosgw waits for the OSD, so its log alone rarely says why.
            roles = ("osd", "radosgw") if role == "radosgw" else (role,)
            tails = "\n".join(self._log_tail(r) for r in roles)
            raise LocalS3Error(f"timed out waiting for {what}\n{tails}")
        time.sleep(0.1)

    def _log_tail(self, role: str, lines: int = 30) -> str:
        name = DAEMON_NAMES[role]
        parts = []
        for path in (self.directory / "log" / f"{name}.out",
                     self.directory / "log" / f"{name}.log"):
            with contextlib.suppress(OSError):
                text = path.read_text(errors="replace").splitlines()[-lines:]
                parts.append(f"--- {path} ---\n" + "\n".join(text))
        return "\n".join(parts) or f"(no log for {role} in {self.directory / 'log'})"

    # --- processes ------------------------------------------------------------

    def _spawn(self, role: str, argv: list[str]) -> None:
        """Run a daemon in the foreground (-f), in its own session.

        Its own session keeps a Ctrl-C at the terminal from reaching it before
        stop() can shut the daemons down in order.
        """
        name = DAEMON_NAMES[role]
        out_path = self.directory / "log" / f"{name}.out"
        with open(out_path, "ab") as out:
            self._children[role] = subprocess.Popen(
                [argv[0], "--conf", str(self.conf_path), *argv[1:], "-f"],
                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                start_new_session=True, cwd=self.directory)
        log.info("local S3 daemon spawned",
                 extra={"role": role, "pid": self._children[role].pid})

    def _run(self, argv: list[str], *, timeout_s: float = CLI_TIMEOUT_S,
             ok_codes: tuple[int, ...] = (0,)) -> str:
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s,
                                  cwd=self.directory, check=False)
        except subprocess.TimeoutExpired as exc:
            raise LocalS3Error(f"{shlex.join(argv)} timed out after {timeout_s:.0f} s") from exc
        if done.returncode not in ok_codes:
            raise LocalS3Error(f"{shlex.join(argv)} failed with code {done.returncode}:\n"
                               f"{done.stdout}{done.stderr}")
        return done.stdout

    def _ceph(self, args: list[str], *, timeout_s: float = CLI_TIMEOUT_S) -> str:
        return self._run(["ceph", "--conf", str(self.conf_path),
                          "--connect-timeout", str(int(timeout_s)), *args],
                         timeout_s=timeout_s + 5)

    def stop(self) -> None:
        """Stop every daemon of this directory (ours or an earlier process's)."""
        state = _State.load(self._state_path)
        pids = dict(state.pids) if state else {}
        pids.update({role: proc.pid for role, proc in self._children.items()})
        began = time.monotonic()
        for role in DAEMONS:
            if role in pids:
                self._terminate(role, pids[role])
        self._children.clear()
        self.endpoint_file.unlink(missing_ok=True)
        if state is not None:
            state.pids = {}
            state.save(self._state_path)
        if pids:
            log.info("local S3 stopped", extra={
                "stage": "stopped", "elapsed_s": round(time.monotonic() - began, 2)})

    def _terminate(self, role: str, pid: int) -> None:
        """SIGTERM, then SIGKILL after STOP_TIMEOUT_S; returns once pid is gone."""
        proc = self._children.get(role)
        if proc is None and not _pid_is_ours(pid, self.conf_path):
            return
        began = time.monotonic()
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
        if not self._wait_gone(role, pid, STOP_TIMEOUT_S):
            log.warning("local S3 daemon ignored SIGTERM: SIGKILL", extra={
                "role": role, "pid": pid, "waited_s": STOP_TIMEOUT_S})
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            self._wait_gone(role, pid, STOP_TIMEOUT_S)
        log.info("local S3 daemon stopped", extra={
            "role": role, "pid": pid, "elapsed_s": round(time.monotonic() - began, 2)})

    def _wait_gone(self, role: str, pid: int, timeout_s: float) -> bool:
        proc = self._children.get(role)
        if proc is not None:
            try:
                proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                return False
            return True
        deadline = time.monotonic() + timeout_s
        while _pid_is_ours(pid, self.conf_path):
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.05)
        return True

    def ensure_bucket(self, bucket: str) -> None:
        """Create ``bucket`` unless it exists (the quick start's LEDGERD_S3_BUCKET)."""
        client = self.client()
        try:
            client.head_bucket(Bucket=bucket)
        except ClientError:
            client.create_bucket(Bucket=bucket)
            log.info("local S3 bucket created", extra={"bucket": bucket})


def delete_bucket(client: S3Client, bucket: str) -> None:
    """Abort pending uploads, delete every object, then the bucket itself."""
    for uploads in client.get_paginator("list_multipart_uploads").paginate(Bucket=bucket):
        for upload in uploads.get("Uploads", []):
            client.abort_multipart_upload(Bucket=bucket, Key=upload["Key"],
                                          UploadId=upload["UploadId"])
    for listing in client.get_paginator("list_objects_v2").paginate(Bucket=bucket):
        keys: list[ObjectIdentifierTypeDef] = [
            {"Key": item["Key"]} for item in listing.get("Contents", [])]
        if keys:
            client.delete_objects(Bucket=bucket, Delete={"Objects": keys, "Quiet": True})
    client.delete_bucket(Bucket=bucket)


# --- command line ------------------------------------------------------------


def configure_logs(environ: Mapping[str, str] = os.environ) -> None:
    """The service's log configuration (``app.logs``), from the same settings:
    LEDGERD_LOG_LEVEL and LEDGERD_LOG_FORMAT (json or text)."""
    level = environ.get("LEDGERD_LOG_LEVEL", "INFO").upper()
    fmt = environ.get("LEDGERD_LOG_FORMAT", "json").lower()
    logs.configure(level if level in ("DEBUG", "INFO", "WARNING", "ERROR") else "INFO",
                   fmt if fmt in ("json", "text") else "json")


def _exports(env: Mapping[str, str]) -> str:
    return "".join(f"export {key}={shlex.quote(value)}\n" for key, value in env.items())


def _wait_for_signal(server: LocalS3Server) -> int:
    """Block until SIGTERM/SIGINT (exit 0) or until a daemon dies (exit 1)."""
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    while not stop.wait(1.0):
        missing = set(DAEMONS) - set(server.running_pids())
        if missing:
            log.error("local S3 daemon(s) died", extra={
                "roles": sorted(missing), "logs": str(server.directory / "log")})
            return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tools.local_s3",
        description="Local S3 server (Ceph radosgw on 127.0.0.1).")
    parser.add_argument("command", choices=["start", "stop", "status", "run"])
    parser.add_argument("--dir", type=Path, required=True, help="state directory")
    parser.add_argument("--port", type=int, default=None, help="radosgw port")
    parser.add_argument("--bucket", default=None, help="create this bucket if missing")
    parser.add_argument("--timeout", type=float, default=120.0, help="start-up timeout, s")
    args = parser.parse_args(argv)
    # Logs go to stderr so that stdout can be given to `eval`, in the service's
    # format: `make serve` and `make cluster` print one log format.
    configure_logs()
    server = LocalS3Server(args.dir, port=args.port)
    if args.command == "stop":
        server.stop()
        return 0
    if args.command == "status":
        running = server.running_pids()
        print(f"running {running} endpoint {server.endpoint_url}" if running else "stopped")
        return 0 if running else 3
    reason = radosgw_available()
    if reason is not None:
        # Exit code 2, not 1: the Makefile's quick start then runs without S3.
        log.warning("local S3 unavailable: the quick start runs without S3 offload",
                    extra={"reason": reason})
        return 2
    try:
        server.start(timeout_s=args.timeout)
        if args.bucket:
            server.ensure_bucket(args.bucket)
        endpoint_file = server.write_endpoint_file(args.bucket)
        # Where `ledgerd export`/`verify` in another shell find it (docs/spark.md).
        log.info("local S3 serving", extra={
            "endpoint": server.endpoint_url, "bucket": args.bucket,
            "endpoint_file": str(endpoint_file)})
    except LocalS3Error as exc:
        log.error("local S3 failed to start", extra={"error": str(exc)})
        return 1
    sys.stdout.write(_exports(server.env()))
    sys.stdout.flush()
    if args.command == "start":
        return 0
    try:
        return _wait_for_signal(server)
    finally:
        server.stop()


if __name__ == "__main__":
    sys.exit(main())
