"""Which of the repository's source files one add runs through, in each mode.

``python -m tools.add_path [--out FILE]`` starts a standalone server, then a
three-node cluster on a local etcd (E = Qw = Qa = 3), each process with a
profiler that records the file of every Python function called while it is on.
After warm-up adds, it turns the profilers on, makes one single 1 KiB add over
HTTP (standalone; on the cluster at the ledger's writer), waits for every
replica to have stored it, turns them off, and prints the files per process,
grouped by package.  Issue 29 asks for this count before and after the change
to one write path; run it from a checkout of either (it needs only
``tools.local_server``, ``tools.local_cluster`` and ``tools.local_etcd``).

The profiler is installed by a ``sitecustomize`` module put first on the
servers' ``PYTHONPATH`` (nothing in the service knows of it) and switched by
signals: SIGUSR1 starts recording, SIGUSR2 stops and writes the files seen to
``$LEDGERD_ADD_PATH_OUT.<pid>``.  It profiles every thread (the journal's
included), so what one add costs in other threads' code is counted too; a
timer that fires during the window adds its files, which is why the window is
one add, made after warm-up, and why the output lists each file (check it).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import tempfile
import time
from pathlib import Path

import httpx

from tools.local_cluster import LiveCluster
from tools.local_etcd import LocalEtcd
from tools.local_server import REPO, ServerProcess

_SITECUSTOMIZE = '''
import os, signal, sys, threading

_out = os.environ.get("LEDGERD_ADD_PATH_OUT")
if _out:
    _root = os.environ["LEDGERD_ADD_PATH_ROOT"]
    _seen = set()
    _on = [False]

    def _profile(frame, event, arg):
        if _on[0] and event == "call":
            _seen.add(frame.f_code.co_filename)

    def _start(signum, frame):
        _seen.clear()
        _on[0] = True

    def _stop(signum, frame):
        _on[0] = False
        files = sorted(f for f in _seen if f.startswith(_root) and "/.venv/" not in f)
        with open(f"{_out}.{os.getpid()}", "w") as out:
            out.write("\\n".join(files))

    sys.setprofile(_profile)
    threading.setprofile(_profile)
    signal.signal(signal.SIGUSR1, _start)
    signal.signal(signal.SIGUSR2, _stop)
'''

SETTINGS = {"JOURNAL_CAPACITY": "64MiB", "WRITE_CACHE_SIZE": "16MiB",
            "READ_CACHE_SIZE": "16MiB", "ACCESS_LOG": "false", "FLUSH_INTERVAL": "60"}
WARM_UP_ADDS = 20
PAYLOAD = b"x" * 1024


def _profiled(work: Path) -> dict[str, str]:
    """The environment that gives a server the profiler (its output under ``work``)."""
    site = work / "site"
    site.mkdir(parents=True, exist_ok=True)
    (site / "sitecustomize.py").write_text(_SITECUSTOMIZE)
    return {"PYTHONPATH": str(site), "LEDGERD_ADD_PATH_OUT": str(work / "files"),
            "LEDGERD_ADD_PATH_ROOT": str(REPO) + os.sep}


def _collect(work: Path, pids: list[int], timeout_s: float = 10.0) -> dict[int, list[str]]:
    found: dict[int, list[str]] = {}
    deadline = time.monotonic() + timeout_s
    while len(found) < len(pids) and time.monotonic() < deadline:
        for pid in pids:
            path = work / f"files.{pid}"
            if pid not in found and path.exists():
                found[pid] = [f.removeprefix(str(REPO) + os.sep)
                              for f in path.read_text().splitlines() if f]
        time.sleep(0.05)  # the signal handlers write their files asynchronously
    if len(found) < len(pids):
        raise RuntimeError(f"no file list from {set(pids) - set(found)}")
    return found


def _signal(pids: list[int], signum: int) -> None:
    for pid in pids:
        os.kill(pid, signum)


def _add(url: str, ledger_id: int, http: httpx.Client) -> None:
    response = http.post(f"{url}/api/v1/ledgers/{ledger_id}/entries", content=PAYLOAD,
                         headers={"X-Ledger-Password": "pw",
                                  "Content-Type": "application/octet-stream"})
    response.raise_for_status()


def _one_add_profiled(url: str, create: dict[str, object], pids: list[int],
                      work: Path) -> dict[int, list[str]]:
    """Create a ledger at ``url`` (``create``: the request's body), add to it until
    warm, then profile ``pids`` for one more add: the files each ran."""
    with httpx.Client(timeout=30) as http:
        created = http.post(f"{url}/api/v1/ledgers", json={"password": "pw", **create})
        created.raise_for_status()
        ledger_id = int(created.json()["ledger_id"])
        for _ in range(WARM_UP_ADDS):
            _add(url, ledger_id, http)
        _signal(pids, signal.SIGUSR1)
        # On a cluster the add's ack (Qa = E) means every replica stored it.
        _add(url, ledger_id, http)
        _signal(pids, signal.SIGUSR2)
    return _collect(work, pids)


def standalone(work: Path) -> dict[str, list[str]]:
    server = ServerProcess({**SETTINGS, "DATA_DIR": str(work / "data")},
                           log_path=work / "server.log", extra_env=_profiled(work)).start()
    try:
        assert server.process is not None
        pid = server.process.pid
        return {"standalone": _one_add_profiled(server.url, {}, [pid], work)[pid]}
    finally:
        server.stop()


def cluster(work: Path) -> dict[str, list[str]]:
    with LocalEtcd(work / "etcd") as etcd, LiveCluster(
            work / "cluster", etcd.metadata_url("add-path"), 3,
            settings={**SETTINGS, "REREPLICATION_DELAY": "600"},
            extra_env=_profiled(work)) as nodes:
        pids = [n.process.pid for n in nodes.nodes if n.process is not None]
        files = _one_add_profiled(nodes.nodes[0].url, {
            "ensemble_size": 3, "write_quorum": 3, "ack_quorum": 3}, pids, work)
        return {"cluster writer": files[pids[0]],
                **{f"cluster replica {n}": files[pid] for n, pid in
                   enumerate(pids[1:], start=1)}}


def _summary(files: list[str]) -> str:
    by_package: dict[str, int] = {}
    for name in files:
        package = name.split("/")[0] if "/" in name else "."
        by_package[package] = by_package.get(package, 0) + 1
    return ", ".join(f"{p} {n}" for p, n in sorted(by_package.items()))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.add_path", description=__doc__)
    parser.add_argument("--out", type=Path, help="write the file lists here as JSON")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="ledgerd-add-path-") as scratch:
        work = Path(scratch)
        result = {**standalone(work / "standalone"), **cluster(work / "cluster")}
    for process, files in result.items():
        print(f"{process}: {len(files)} files ({_summary(files)})")
        for name in files:
            print(f"    {name}")
    if args.out is not None:
        args.out.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
