"""The cluster pack bench end to end at a small size: a real 3-node cluster, the
etcd it starts, radosgw; it reads every entry back itself (a wrong byte raises)."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from bench.pack_bench import _cluster_rows
from offload import OffloadSettings
from tools.local_s3 import LocalS3Server


def test_the_cluster_pack_bench_packs_and_reads_back(
        s3_server: LocalS3Server, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in s3_server.env().items():
        monkeypatch.setenv(name, value)
    settings = OffloadSettings(bucket="pack-bench", endpoint_url=s3_server.endpoint_url,
                               cluster="bench", bookie_id="b1", pack=True)
    rows = {row.name: row for row in _cluster_rows(
        settings, tmp_path, ledger_count=6, entries=2, entry_bytes=64 * 1024,
        bucket=f"cpb-{uuid.uuid4().hex[:12]}")}
    objects = rows["cluster_pack_objects_per_gib"].extra
    # One pack (data and index) per node that took locks: every node took two.
    assert objects["packs"] == 3 and objects["objects"] == 6
    assert rows["cluster_pack_read_gets_per_gib"].value > 0
