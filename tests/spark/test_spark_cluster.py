"""The jobs and the stream on a real Spark standalone cluster (``spark://``), not local[*].

A master and two workers (one core, 512 MiB each) on loopback, started once for
the module with the PySpark distribution's own launcher (``bin/spark-class``
``org.apache.spark.deploy.master.Master`` / ``…worker.Worker``; the pip wheel
has no ``sbin/start-master.sh``).  ``ledgerd export``, ``ledgerd verify`` and
``ledgerd tail`` run against it as a user runs them: the CLI ships ledgerd to
the executors itself (docs/spark.md, "On a cluster"), and the executors run in
the workers' own directories, so they import the worktree's ledgerd only from
what was shipped.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import httpx
import pyspark
import pytest

from bench._server import free_port
from tests.app.conftest import REPO, LiveServer
from tests.cli.conftest import run_ledgerd
from tests.spark.conftest import make_bucket, offload_ledgers
from tests.spark.test_spark_live import append, create, expected, payloads, sink_rows
from tools.local_s3 import LocalS3Server, delete_bucket

SPARK_CLASS = Path(pyspark.__file__).parent / "bin" / "spark-class"
_READY_TIMEOUT_S = 60


@dataclass
class Standalone:
    master_url: str
    processes: list[subprocess.Popen[bytes]]


def _launch(args: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen([str(SPARK_CLASS), *args], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, start_new_session=True)


def _wait_for_line(process: subprocess.Popen[bytes], marker: bytes, log: Path) -> None:
    """Read the daemon's log as it writes it until ``marker`` (its own "ready" line)."""
    stream: IO[bytes] | None = process.stdout
    assert stream is not None
    with log.open("ab") as copy:
        for line in stream:
            copy.write(line)
            if marker in line:
                break
        else:
            raise AssertionError(f"{log.name}: exited ({process.poll()}) before {marker!r}")
    # Keep draining so the daemon never blocks on a full pipe.
    import shutil
    import threading

    def drain() -> None:
        with log.open("ab") as rest:
            shutil.copyfileobj(stream, rest)

    threading.Thread(target=drain, daemon=True).start()


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Standalone]:
    work = tmp_path_factory.mktemp("standalone")
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable,
           "SPARK_LOG_DIR": str(work), "SPARK_WORKER_DIR": str(work / "work"),
           "SPARK_NO_DAEMONIZE": "1"}
    # Executors must not find the worktree on a path of their own: they run in
    # the workers' directories and import what the job shipped.
    env.pop("PYTHONPATH", None)
    port = free_port()
    master = _launch(["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                      "--port", str(port), "--webui-port", str(free_port())], env)
    processes = [master]
    try:
        _wait_for_line(master, b"I have been elected leader", work / "master.log")
        url = f"spark://127.0.0.1:{port}"
        for n in range(2):
            worker = _launch(["org.apache.spark.deploy.worker.Worker", url, "--host",
                              "127.0.0.1", "--cores", "1", "--memory", "512m",
                              "--webui-port", str(free_port()),
                              "--work-dir", str(work / f"worker{n}")], env)
            processes.append(worker)
        for n, worker in enumerate(processes[1:]):
            _wait_for_line(worker, b"Successfully registered with master",
                           work / f"worker{n}.log")
        yield Standalone(url, processes)
    finally:
        for process in reversed(processes):
            process.terminate()
        for process in processes:
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def _cluster_env() -> dict[str, str]:
    """The CLI's environment: executors get 512 MiB and one core each, and run this
    interpreter (it has ledgerd's dependencies); the CLI itself imports this
    checkout's ledgerd (PYTHONPATH), which is what it ships."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LEDGERD_", "AWS_"))}
    env.update({"PYTHONPATH": os.pathsep.join((str(REPO), str(REPO / "openapi" / "client"))),
                "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable,
                "PYSPARK_SUBMIT_ARGS": "--executor-memory 512m --total-executor-cores 2 "
                                       "pyspark-shell"})
    return env


def test_export_and_verify_on_a_standalone_cluster(
        standalone: Standalone, s3_server: LocalS3Server, tmp_path: Path) -> None:
    client, bucket = make_bucket(s3_server)
    try:
        ledgers = offload_ledgers(s3_server, tmp_path / "bookie", bucket,
                                  [payloads(400, seed=11), payloads(100, seed=12)])
        env = {**_cluster_env(), **s3_server.env()}
        flags = ["--endpoint", s3_server.endpoint_url, "--bucket", bucket,
                 "--master", standalone.master_url]
        verified = run_ledgerd("verify", *flags, env=env)
        assert verified.returncode == 0, verified.stderr.decode()[-2000:]
        report = json.loads(verified.stdout)
        assert report["ok"] and report["entries"] == 500
        exported = run_ledgerd("export", *flags, "--output", str(tmp_path / "out"), env=env)
        assert exported.returncode == 0, exported.stderr.decode()[-2000:]
        assert json.loads(exported.stdout)["rows"] == 500
        import pyarrow.parquet as pq

        table = pq.read_table(tmp_path / "out")
        rows = sorted(zip(table["ledger_id"].to_pylist(), table["entry_id"].to_pylist(),
                          table["payload"].to_pylist(), strict=True))
        assert rows == expected(ledgers)
    finally:
        delete_bucket(client, bucket)


def test_tail_on_a_standalone_cluster(standalone: Standalone, tmp_path: Path) -> None:
    node = LiveServer(tmp_path / "node" / "data").start()
    try:
        with httpx.Client(base_url=node.url, timeout=30) as http:
            written = {create(http, job="cluster"): payloads(200, seed=21),
                       create(http, job="cluster"): payloads(50, seed=22)}
            for ledger_id, ps in written.items():
                append(http, ledger_id, ps)
        out = tmp_path / "out"
        tailed = run_ledgerd("tail", "--url", node.url, "--ledgers", "metadata.job=cluster",
                             "--output", str(out), "--checkpoint", str(tmp_path / "checkpoint"),
                             "--once", "--master", standalone.master_url, env=_cluster_env())
        assert tailed.returncode == 0, tailed.stderr.decode()[-2000:]
        assert sink_rows(out) == expected(written)
    finally:
        node.stop()
