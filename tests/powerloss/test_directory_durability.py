"""Directories ledgerd creates must survive a power cut (two bugs this found).

A new directory's entry in its parent is durable only after an fsync of the
parent (fsync(2): "an explicit fsync() on a file descriptor for the directory is
also needed"); ext4 and XFS usually persist it anyway with a later journal
commit, the fault model (docs/powerloss.md) does not.  ledgerd made three
directories with ``mkdir(parents=True, exist_ok=True)`` and fsynced none of their
parents:

- ``DATA_DIR`` itself (``Bookie.open``, ledger/_bookie.py), when it did not
  exist yet (the quick start's ``./data``);
- ``DATA_DIR/index`` (``LocationIndex``, ledger/_index.py) and
  ``DATA_DIR/entrylogs`` (``EntryLogStore``, entrylog/_store.py).  The journal's
  file creation happens to fsync ``DATA_DIR`` afterwards, which covers them, but
  only when the journal file lives in ``DATA_DIR``: with ``JOURNAL_DEVICE``
  elsewhere (production: a raw partition) nothing ever does.

In both cases every acknowledged entry that was checkpointed (and so trimmed
from the journal) was gone after the cut: the ledger read 404.  Now every
directory is created by ``common.files.make_directory``, which fsyncs each
parent after it got a new entry.
"""

from __future__ import annotations

from pathlib import Path

import httpx

from tests.crash.http_workload import PASSWORD_HEADERS
from tests.crash.workload import make_payload
from tests.powerloss._ledgerd import SERVER_SETTINGS, create_ledger, wait_checkpointed
from tests.powerloss.conftest import MountFactory
from tools.local_server import ServerProcess

ENTRIES = 50


def acknowledged_and_checkpointed(server: ServerProcess) -> tuple[int, list[bytes]]:
    with httpx.Client(base_url=server.url, timeout=10.0) as client:
        ledger_id = create_ledger(client)
        assert ledger_id is not None
        payloads = [make_payload(f"{ledger_id}/dir/{n}") for n in range(ENTRIES)]
        for payload in payloads:
            response = client.post(f"/api/v1/ledgers/{ledger_id}/entries", content=payload,
                                   headers={**PASSWORD_HEADERS,
                                            "Content-Type": "application/octet-stream"})
            assert response.status_code == 201, response.text
    assert wait_checkpointed(server.url, timeout_s=30)  # the journal no longer holds them
    return ledger_id, payloads


def cut_and_restart(mount: MountFactory, tmp_path: Path, settings: dict[str, str]) -> None:
    m = mount()
    server = ServerProcess(settings, log_path=tmp_path / "server.log").start()
    try:
        ledger_id, payloads = acknowledged_and_checkpointed(server)
        assert server.process is not None
        m.cut(pids=[server.process.pid])
        server.process.wait(30)
    finally:
        server.kill()
        m.unmount()
    m = mount()
    try:
        server.start()
        with httpx.Client(base_url=server.url, timeout=10.0) as client:
            for entry_id, payload in enumerate(payloads):
                response = client.get(f"/api/v1/ledgers/{ledger_id}/entries/{entry_id}")
                assert response.status_code == 200, f"entry {entry_id}: {response.text}"
                assert response.content == payload
    finally:
        server.kill()
        m.unmount()


def test_with_an_existing_data_dir_every_checkpointed_entry_survives(mount: MountFactory,
                                                                    tmp_path: Path):
    """The control: the operator made DATA_DIR (durably) and the journal lives in it."""
    m = mount()
    (tmp_path / "mnt/data").mkdir()
    m.sync()
    m.unmount()
    cut_and_restart(mount, tmp_path, {**SERVER_SETTINGS, "DATA_DIR": str(tmp_path / "mnt/data")})


def test_a_data_dir_ledgerd_created_survives(mount: MountFactory, tmp_path: Path):
    cut_and_restart(mount, tmp_path, {**SERVER_SETTINGS, "DATA_DIR": str(tmp_path / "mnt/data")})


def test_index_and_entry_logs_survive_with_the_journal_elsewhere(mount: MountFactory,
                                                                 tmp_path: Path):
    m = mount()
    (tmp_path / "mnt/data").mkdir()
    (tmp_path / "mnt/journal").mkdir()
    m.sync()
    m.unmount()
    cut_and_restart(mount, tmp_path, {
        **SERVER_SETTINGS, "DATA_DIR": str(tmp_path / "mnt/data"),
        "JOURNAL_DEVICE": str(tmp_path / "mnt/journal/journal.dev")})
