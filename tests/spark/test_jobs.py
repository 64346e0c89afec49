"""The pipeline jobs (offload.spark.jobs) and their CLI commands, on real Spark and real S3."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys

import pyarrow.parquet as pq

from offload.spark.jobs import export, verify


def rows_of(table) -> set[tuple[int, int, bytes]]:
    return set(zip(table.column("ledger_id").to_pylist(), table.column("entry_id").to_pylist(),
                   table.column("payload").to_pylist(), strict=True))


def test_export_to_a_local_path_round_trips(spark, offloaded, tmp_path):
    result = export(spark, offloaded.options, str(tmp_path / "out"))
    assert result.rows == len(offloaded.rows())
    assert rows_of(pq.read_table(tmp_path / "out")) == offloaded.rows()


def test_export_to_s3_round_trips(spark, offloaded):
    big, small, _, _ = offloaded.ledgers
    options = {**offloaded.options, "ledgers": f"{small},{big}"}
    url = f"s3://{offloaded.bucket}/exports/run1"
    result = export(spark, options, url)
    assert result.files and all(k.startswith("exports/run1/part-") for k in result.files)
    client = offloaded.client
    manifest = json.loads(client.get_object(Bucket=offloaded.bucket,
                                            Key="exports/run1/_SUCCESS")["Body"].read())
    assert [p["key"] for p in manifest["parts"]] == list(result.files)
    got: set[tuple[int, int, bytes]] = set()
    for key in result.files:
        body = client.get_object(Bucket=offloaded.bucket, Key=key)["Body"].read()
        got |= rows_of(pq.read_table(io.BytesIO(body)))
    assert got == {r for r in offloaded.rows() if r[0] in (big, small)}


def test_verify_passes_a_good_bucket_and_names_the_damage_in_a_bad_one(spark, offloaded,
                                                                       corrupted):
    good = verify(spark, offloaded.options)
    assert good.ok, good.problems
    assert good.ledgers == len(offloaded.ledgers)
    assert good.entries == len(offloaded.rows())
    bad = verify(spark, corrupted.offloaded.options)
    assert not bad.ok
    assert any(f"ledger {corrupted.ledger_id} entry {corrupted.entry_id}" in p
               and corrupted.segment_key in p for p in bad.problems)


def run_cli(offloaded, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, **offloaded.server.env(), "SPARK_LOCAL_IP": "127.0.0.1",
           "PYSPARK_PYTHON": sys.executable}
    return subprocess.run([sys.executable, "-m", "app.cli", *args,
                           "--endpoint", offloaded.server.endpoint_url,
                           "--bucket", offloaded.bucket, "--master", "local[2]"],
                          capture_output=True, text=True, env=env, timeout=180, check=False)


def test_verify_command_exit_codes(offloaded, corrupted):
    good = run_cli(offloaded, "verify")
    assert good.returncode == 0, good.stderr[-2000:]
    assert json.loads(good.stdout)["ok"] is True
    bad = run_cli(corrupted.offloaded, "verify")
    assert bad.returncode == 1, bad.stderr[-2000:]
    report = json.loads(bad.stdout)
    assert any(corrupted.segment_key in p for p in report["problems"])
