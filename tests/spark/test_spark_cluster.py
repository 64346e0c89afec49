"""The jobs and the stream on a real Spark standalone cluster (``spark://``), not local[*].

A master and two workers (one core, 512 MiB each) on loopback, started once for
the module with the PySpark distribution's own launcher (``bin/spark-class``
``org.apache.spark.deploy.master.Master`` / ``…worker.Worker``; the pip wheel
has no ``sbin/start-master.sh``).  ``The jobs of ``ledgerd verify``, ``ledgerd
export`` and ``ledgerd tail --once`` run against it in one driver (the
functions the CLI calls, with its session set-up), which ships ledgerd to the
executors itself (docs/spark.md, "On a cluster"); the executors run in the
workers' own directories, so they import this checkout's ledgerd only from
what was shipped.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import httpx
import pyarrow.parquet as pq
import pyspark
import pytest

from tests.app.conftest import REPO, LiveServer
from tests.spark.conftest import make_bucket, offload_ledgers
from tests.spark.test_spark_live import append, create, expected, payloads, sink_rows
from tools.local_s3 import LocalS3Server, delete_bucket, free_port

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
    def drain() -> None:
        with log.open("ab") as rest:
            shutil.copyfileobj(stream, rest)

    threading.Thread(target=drain, daemon=True).start()


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Standalone]:
    work = tmp_path_factory.mktemp("standalone")
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable,
           "SPARK_LOG_DIR": str(work), "SPARK_WORKER_DIR": str(work / "work"),
           "SPARK_NO_DAEMONIZE": "1",
           # No REST submission server: its fixed port would clash with another run.
           "SPARK_MASTER_OPTS": "-Dspark.master.rest.enabled=false"}
    # Executors must not find the worktree on a path of their own: they run in
    # the workers' directories and import what the job shipped.
    env.pop("PYTHONPATH", None)
    port = free_port()
    master = _launch(["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                      "--port", str(port), "--webui-port", str(free_port())], env)
    processes = [master]
    try:
        # The workers start with the master (they retry until it answers): three
        # JVMs starting at once, not one after the other.
        url = f"spark://127.0.0.1:{port}"
        for n in range(2):
            worker = _launch(["org.apache.spark.deploy.worker.Worker", url, "--host",
                              "127.0.0.1", "--cores", "1", "--memory", "512m",
                              "--webui-port", str(free_port()),
                              "--work-dir", str(work / f"worker{n}")], env)
            processes.append(worker)
        _wait_for_line(master, b"I have been elected leader", work / "master.log")
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


# One driver runs all three jobs (each driver and its executors cost a JVM start
# apiece): what `ledgerd verify`, `export` and `tail --once` run, through the same
# functions and the same session set-up, shipping included (spark_session).
_DRIVER = """
import json, sys
from offload.spark.jobs import export, spark_session, start_tail, verify
master, s3, live, out, tail_out, checkpoint = sys.argv[1:7]
s3, live = json.loads(s3), json.loads(live)
conf = {"spark.executor.memory": "512m", "spark.cores.max": "2",
        "spark.ui.enabled": "false",
        "spark.executorEnv.AWS_ACCESS_KEY_ID": s3["access_key"],
        "spark.executorEnv.AWS_SECRET_ACCESS_KEY": s3["secret_key"]}
spark = spark_session(master, conf=conf, quiet=True)
report = verify(spark, s3)
result = export(spark, s3, out)
query = start_tail(spark, live, tail_out, checkpoint, once=True)
query.awaitTermination()
executors = spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size() - 1
print(json.dumps({"ok": report.ok, "problems": report.problems, "entries": report.entries,
                  "rows": result.rows, "tail_failed": str(query.exception() or ""),
                  "executors": executors}))
spark.stop()
"""


def test_verify_export_and_tail_on_a_standalone_cluster(
        standalone: Standalone, s3_server: LocalS3Server, tmp_path: Path) -> None:
    client, bucket = make_bucket(s3_server)
    node = LiveServer(tmp_path / "node" / "data")
    node.spawn()  # starts while the ledgers below are offloaded
    try:
        offloaded = offload_ledgers(s3_server, tmp_path / "bookie", bucket,
                                    [payloads(400, seed=11), payloads(100, seed=12)])
        node.wait_ready()
        with httpx.Client(base_url=node.url, timeout=30) as http:
            live = {create(http, job="cluster"): payloads(200, seed=21),
                    create(http, job="cluster"): payloads(50, seed=22)}
            for ledger_id, ps in live.items():
                append(http, ledger_id, ps)
        s3 = {"endpoint": s3_server.endpoint_url, "bucket": bucket,
              "access_key": s3_server.access_key, "secret_key": s3_server.secret_key}
        env = {k: v for k, v in os.environ.items() if not k.startswith(("LEDGERD_", "AWS_"))}
        env.update({"SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable,
                    # The driver imports this checkout's ledgerd, which is what it ships.
                    "PYTHONPATH": str(REPO)})
        out, tail_out = tmp_path / "out", tmp_path / "tail"
        driver = subprocess.run(
            [sys.executable, "-c", _DRIVER, standalone.master_url, json.dumps(s3),
             json.dumps({"url": node.url, "ledgers": "metadata.job=cluster"}), str(out),
             str(tail_out), str(tmp_path / "checkpoint")],
            cwd=tmp_path, env=env, capture_output=True, timeout=300, check=False)
        assert driver.returncode == 0, driver.stderr.decode()[-3000:]
        result = json.loads(driver.stdout.decode().strip().splitlines()[-1])
        assert result == {"ok": True, "problems": [], "entries": 500, "rows": 500,
                          "tail_failed": "", "executors": 2}
        table = pq.read_table(out)
        rows = sorted(zip(table["ledger_id"].to_pylist(), table["entry_id"].to_pylist(),
                          table["payload"].to_pylist(), strict=True))
        assert rows == expected(offloaded)
        assert sink_rows(tail_out) == expected(live)
    finally:
        node.stop()
        delete_bucket(client, bucket)
