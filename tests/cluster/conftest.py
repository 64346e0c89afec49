"""A real etcd (Debian etcd-server) on loopback for the whole session.

It FAILS, never skips, when etcd is missing: cluster mode cannot be tested
without it (scripts/install-etcd.sh installs it)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from cluster import Etcd, EtcdClient, InProcessEtcd
from tools.local_etcd import LocalEtcd, etcd_available

MakeEtcd = Callable[[], Etcd]


@pytest.fixture(scope="session")
def local_etcd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalEtcd]:
    reason = etcd_available()
    if reason is not None:
        pytest.fail(f"etcd unavailable: {reason}")
    with LocalEtcd(tmp_path_factory.mktemp("etcd")) as etcd:
        yield etcd


@pytest.fixture(params=["etcd", "in-process"])
def etcd_api(request: pytest.FixtureRequest) -> MakeEtcd:
    """The contract, on both implementations: a real etcd's JSON gateway, and the
    in-process store a cluster of one and the simulation use."""
    if request.param == "etcd":
        local: LocalEtcd = request.getfixturevalue("local_etcd")
        return lambda: EtcdClient([local.endpoint])
    return InProcessEtcd().client
