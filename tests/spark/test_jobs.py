"""The pipeline jobs (offload.spark.jobs) and their CLI commands, on real Spark and real S3."""

from __future__ import annotations

import io
import json
import os
import shutil
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from common.errors import InvalidSetting
from offload.spark.jobs import export, plan_export, verify
from tests.cli.conftest import run_ledgerd
from tests.spark.conftest import make_bucket


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


def test_export_refuses_what_overwrite_must_not_touch(offloaded, tmp_path):
    """Checked before Spark (no session here): an existing output needs overwrite,
    and overwrite refuses the offloaded ledgers' prefix, a whole bucket, the cwd."""
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "keep.txt").write_text("x")
    with pytest.raises(InvalidSetting, match="pass --overwrite"):
        plan_export(offloaded.options, str(tmp_path / "out"))
    assert plan_export(offloaded.options, str(tmp_path / "empty-or-new")).ledgers
    bucket = offloaded.bucket
    for url in (f"s3://{bucket}", f"s3://{bucket}/ledgerd", f"s3://{bucket}/ledgerd/x/y"):
        with pytest.raises(InvalidSetting, match="overlaps the offloaded ledgers"):
            plan_export(offloaded.options, url, overwrite=True)
    offloaded.client.put_object(Bucket=bucket, Key="exports/old/part-0.parquet", Body=b"p")
    with pytest.raises(InvalidSetting, match=r"not empty \(1 objects\); pass --overwrite"):
        plan_export(offloaded.options, f"s3://{bucket}/exports/old")
    assert plan_export(offloaded.options, f"s3://{bucket}/exports/old",
                       overwrite=True).existing_keys == ("exports/old/part-0.parquet",)
    _, other = make_bucket(offloaded.server)
    try:
        with pytest.raises(InvalidSetting, match="every object in the bucket"):
            plan_export(offloaded.options, f"s3://{other}", overwrite=True)
    finally:
        offloaded.client.delete_bucket(Bucket=other)
    with pytest.raises(InvalidSetting, match="current directory"):
        plan_export(offloaded.options, str(Path.cwd().parent), overwrite=True)


def test_export_overwrite_replaces_an_earlier_local_export(spark, offloaded, tmp_path):
    out = tmp_path / "out"
    small = min(offloaded.ledgers, key=lambda lid: len(offloaded.ledgers[lid]))
    first = export(spark, {**offloaded.options, "ledgers": str(small)}, str(out))
    assert first.files and all(Path(f).parent == out and Path(f).exists() for f in first.files)
    second = export(spark, offloaded.options, str(out), overwrite=True)
    assert rows_of(pq.read_table(out)) == offloaded.rows()
    assert set(second.files) == {str(p) for p in out.glob("*.parquet")}


def cli_env() -> dict[str, str]:
    """A clean shell: nothing of ledgerd or AWS in the environment."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LEDGERD_", "AWS_"))}
    return {**env, "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable}


def quick_start_dir(offloaded, tmp_path: Path) -> Path:
    """A directory whose data/s3/endpoint.json is what `make serve` leaves for a
    second shell (tools.local_s3 writes it)."""
    written = offloaded.server.write_endpoint_file(offloaded.bucket)
    (tmp_path / "data" / "s3").mkdir(parents=True)
    shutil.move(written, tmp_path / "data" / "s3" / "endpoint.json")
    return tmp_path


def test_verify_command_finds_the_quick_start_s3_and_reports(offloaded, corrupted, tmp_path):
    cwd = quick_start_dir(offloaded, tmp_path)
    good = run_ledgerd("verify", "--master", "local[2]", env=cli_env(), cwd=cwd,
                       timeout_s=300)
    assert good.returncode == 0, good.stderr[-3000:]
    report = json.loads(good.stdout)
    assert report["ok"] is True and report["entries"] == len(offloaded.rows())
    assert report["elapsed_s"] >= report["spark_startup_s"] > 0
    lines = good.stderr.decode().splitlines()
    assert lines[0].startswith("ledgerd: using the local S3 at ")
    # No terminal: plain progress lines, ending at all tasks done; no JVM chatter.
    assert all(line.startswith(("ledgerd: ", "verify: ")) for line in lines), lines
    segments = report["segments"]
    assert lines[-1].startswith(f"verify: {segments}/{segments} tasks (100%)")
    bad = run_ledgerd("verify", "--master", "local[2]", "--bucket",
                      corrupted.offloaded.bucket, env=cli_env(), cwd=cwd, timeout_s=300)
    assert bad.returncode == 1, bad.stderr[-3000:]
    problems = json.loads(bad.stdout)["problems"]
    assert any(corrupted.segment_key in p for p in problems)


def test_export_command_then_refusals_before_spark(offloaded, tmp_path):
    cwd = quick_start_dir(offloaded, tmp_path)
    out = tmp_path / "parquet"
    done = run_ledgerd("export", "--output", str(out), "--master", "local[2]", env=cli_env(),
                       cwd=cwd, timeout_s=300)
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads(done.stdout)
    assert summary["rows"] == len(offloaded.rows())
    assert summary["files"] and set(summary["files"]) == {str(p) for p in out.glob("*.parquet")}
    assert rows_of(pq.read_table(out)) == offloaded.rows()
    assert all(line.startswith(("ledgerd: ", "export: "))
               for line in done.stderr.decode().splitlines())
    # A bogus master proves these are refused before Spark starts: starting it would
    # fail differently (exit 1, "export failed").
    again = run_ledgerd("export", "--output", str(out), "--master", "bogus://x", env=cli_env(),
                        cwd=cwd)
    assert again.returncode == 2
    (line,) = again.stderr.decode().splitlines()[1:]
    assert "already exists" in line and "--overwrite" in line
    refused = run_ledgerd("export", "--output", f"s3://{offloaded.bucket}", "--overwrite",
                          "--master", "bogus://x", env=cli_env(), cwd=cwd)
    assert refused.returncode == 2 and b"overlaps the offloaded ledgers" in refused.stderr
    missing = run_ledgerd("export", "--output", str(out), "--master", "bogus://x",
                          env=cli_env(), cwd=tmp_path / "data")  # no data/s3 here
    assert missing.returncode == 2 and b"no bucket" in missing.stderr
