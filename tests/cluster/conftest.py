"""A real etcd (Debian etcd-server) on loopback for the whole session.

It FAILS, never skips, when etcd is missing: cluster mode cannot be tested
without it (scripts/install-etcd.sh installs it)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tools.local_etcd import LocalEtcd, etcd_available


@pytest.fixture(scope="session")
def local_etcd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalEtcd]:
    reason = etcd_available()
    if reason is not None:
        pytest.fail(f"etcd unavailable: {reason}")
    with LocalEtcd(tmp_path_factory.mktemp("etcd")) as etcd:
        yield etcd
