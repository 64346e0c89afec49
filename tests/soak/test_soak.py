"""The soak's short version (the full one is ``python -m bench.soak``, 10 minutes):
mixed load against a real server with SIGKILL/restart and the real S3 server;
every check of the soak must pass."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench.soak import run
from tools.local_s3 import LocalS3Server


def test_short_soak_with_kills(tmp_path: Path, s3_server: LocalS3Server,
                               s3_bucket: tuple[Any, str]) -> None:
    _client, bucket = s3_bucket
    result = run(duration_s=20.0, kill_every_s=7.0, workdir=tmp_path, seed=7,
                 s3_env={**s3_server.env(), "LEDGERD_S3_BUCKET": bucket}, gc_every_s=2.0,
                 kills_min=2)
    assert result.failed == 0, result.checks
    assert result.passed >= 5
    assert result.stats["kills"] >= 2 and result.stats["acked_entries"] > 100
