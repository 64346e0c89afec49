"""Cookies (node/_cookie.py, docs/cluster.md §13.1) against a real etcd: a bookie's
data directory and journal must be the ones its BOOKIE_ID registered with."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar

import pytest

from cluster import ClusterKeys, EtcdClient
from common.errors import BookieLive, IdentityMismatch
from node._cookie import COOKIE_FILE, check_cookie, decommission, decommissioned, read_local
from tools.local_etcd import LocalEtcd

T = TypeVar("T")


def run(local_etcd: LocalEtcd, body: Callable[[EtcdClient, ClusterKeys], Awaitable[T]]) -> T:
    async def main() -> T:
        async with EtcdClient([local_etcd.endpoint]) as etcd:
            return await body(etcd, ClusterKeys(f"cookies-{uuid.uuid4().hex}"))
    return asyncio.run(main())


def test_a_first_start_writes_the_cookie_and_a_restart_finds_it(
        local_etcd: LocalEtcd, tmp_path: Path) -> None:
    async def body(etcd: EtcdClient, keys: ClusterKeys) -> None:
        first = await check_cookie(etcd, keys, bookie_id="b1", data_dir=tmp_path,
                                   journal_id=7)
        assert read_local(tmp_path) == first
        stored = await etcd.get(keys.cookie("b1"))
        assert stored is not None and stored.value == first.encode()
        again = await check_cookie(etcd, keys, bookie_id="b1", data_dir=tmp_path,
                                   journal_id=7)
        assert again == first
    run(local_etcd, body)


def test_a_wiped_directory_is_refused_and_says_the_way_on(
        local_etcd: LocalEtcd, tmp_path: Path) -> None:
    async def body(etcd: EtcdClient, keys: ClusterKeys) -> None:
        await check_cookie(etcd, keys, bookie_id="b1", data_dir=tmp_path, journal_id=7)
        (tmp_path / COOKIE_FILE).unlink()
        with pytest.raises(IdentityMismatch, match=r"wiped or replaced.*decommission b1"):
            await check_cookie(etcd, keys, bookie_id="b1", data_dir=tmp_path, journal_id=7)
        assert not (tmp_path / COOKIE_FILE).exists()  # nothing written on refusal
    run(local_etcd, body)


def test_another_bookies_directory_a_swapped_one_and_a_new_journal_are_refused(
        local_etcd: LocalEtcd, tmp_path: Path) -> None:
    async def body(etcd: EtcdClient, keys: ClusterKeys) -> None:
        one, two = tmp_path / "one", tmp_path / "two"
        one.mkdir()
        two.mkdir()
        await check_cookie(etcd, keys, bookie_id="b1", data_dir=one, journal_id=7)
        await check_cookie(etcd, keys, bookie_id="b2", data_dir=two, journal_id=8)
        with pytest.raises(IdentityMismatch, match="belongs to bookie b2, not b1"):
            await check_cookie(etcd, keys, bookie_id="b1", data_dir=two, journal_id=8)
        # b2's directory under b1's name in a fresh scope: etcd has no cookie for it.
        with pytest.raises(IdentityMismatch, match="no cookie for it"):
            await check_cookie(etcd, ClusterKeys(f"other-{uuid.uuid4().hex}"),
                               bookie_id="b2", data_dir=two, journal_id=8)
        # An old copy of b1's directory made before b1 was registered again.
        (one / COOKIE_FILE).write_bytes((two / COOKIE_FILE).read_bytes().replace(
            b'"b2"', b'"b1"'))
        with pytest.raises(IdentityMismatch, match="holds instance"):
            await check_cookie(etcd, keys, bookie_id="b1", data_dir=one, journal_id=8)
        await etcd.delete(keys.cookie("b2"))
        (two / COOKIE_FILE).unlink()
        await check_cookie(etcd, keys, bookie_id="b2", data_dir=two, journal_id=8)
        with pytest.raises(IdentityMismatch, match="journal of bookie b2 is not the one"):
            await check_cookie(etcd, keys, bookie_id="b2", data_dir=two, journal_id=9)
    run(local_etcd, body)


def test_decommission_waits_for_the_bookie_to_leave_and_its_id_is_never_taken_again(
        local_etcd: LocalEtcd, tmp_path: Path) -> None:
    async def body(etcd: EtcdClient, keys: ClusterKeys) -> None:
        await check_cookie(etcd, keys, bookie_id="b1", data_dir=tmp_path, journal_id=7)
        lease = await etcd.lease_grant(30)
        await etcd.put(keys.bookie("b1"), b"{}", lease=lease)
        with pytest.raises(BookieLive):
            await decommission(etcd, keys, "b1", by="b2", at=0.0)
        assert await decommissioned(etcd, keys) == set()
        await etcd.lease_revoke(lease)
        await decommission(etcd, keys, "b1", by="b2", at=0.0)
        assert await decommissioned(etcd, keys) == {"b1"}
        assert await etcd.get(keys.cookie("b1")) is None
        fresh = tmp_path / "fresh"
        fresh.mkdir()
        for directory in (tmp_path, fresh):
            with pytest.raises(IdentityMismatch, match="b1 was decommissioned"):
                await check_cookie(etcd, keys, bookie_id="b1", data_dir=directory,
                                   journal_id=7)
    run(local_etcd, body)
