"""A real uvicorn process (``python -m cli serve``) driven by the generated client."""

from __future__ import annotations

import io

import crc32c
from ledgerd_client import AuthenticatedClient, Client
from ledgerd_client.api.bookie import (
    bookie_info,
    bookie_state,
    get_read_only,
    is_ready,
    last_log_mark,
    list_disk_files,
    list_entry_logs,
    set_read_only,
)
from ledgerd_client.api.ledgers import (
    add_entries,
    add_entries_frames,
    add_entry,
    close_ledger,
    create_ledger,
    delete_ledger,
    fence_ledger,
    get_ledger,
    get_offload,
    list_ledgers,
    read_entries,
    read_entries_frames,
    read_entry,
)
from ledgerd_client.api.service import heartbeat
from ledgerd_client.models import (
    BatchAppend,
    CreateLedger,
    CreateLedgerMetadata,
    ErrorCode,
    LedgerStateName,
    Problem,
    ReadOnlyRequest,
)
from ledgerd_client.types import File

from common.frames import FRAMES_MEDIA_TYPE, decode_download, encode_upload

from .conftest import ADMIN_TOKEN, LiveServer


def test_generated_client_end_to_end(live_server: LiveServer):
    client = Client(base_url=live_server.url, raise_on_unexpected_status=True)
    assert heartbeat.sync(client=client).status == "OK"
    assert is_ready.sync(client=client).ready is True

    created = create_ledger.sync_detailed(
        client=client,
        body=CreateLedger(password="pw", metadata=CreateLedgerMetadata.from_dict({"a": "b"})),
    )
    assert created.status_code == 201
    ledger = created.parsed
    assert ledger.state == LedgerStateName.OPEN and ledger.metadata.to_dict() == {"a": "b"}
    lid = ledger.ledger_id

    # Raw bytes upload through the generated client (application/octet-stream).
    payload = bytes(range(256)) * 10
    added = add_entry.sync_detailed(
        lid, client=client, body=File(payload=io.BytesIO(payload)), x_ledger_password="pw"
    )
    assert added.status_code == 201
    assert added.parsed.entry_id == 0 and added.parsed.crc32c == crc32c.crc32c(payload)
    retry = add_entry.sync_detailed(
        lid,
        client=client,
        body=File(payload=io.BytesIO(payload)),
        x_ledger_password="pw",
        entry_id=0,
    )
    assert retry.status_code == 200
    wrong = add_entry.sync_detailed(
        lid, client=client, body=File(payload=io.BytesIO(b"x")), x_ledger_password="nope"
    )
    assert wrong.status_code == 403
    assert isinstance(wrong.parsed, Problem) and wrong.parsed.code is ErrorCode.EUA

    batch = add_entries.sync_detailed(
        lid, client=client, body=BatchAppend(entries=["YQ==", "YmI="]), x_ledger_password="pw"
    )
    assert batch.status_code == 201
    assert (batch.parsed.first_entry_id, batch.parsed.last_entry_id) == (1, 2)
    frames = add_entries.sync_detailed(
        lid,
        client=client,
        body=File(payload=io.BytesIO(encode_upload([b"c", b"dd"]))),
        x_ledger_password="pw",
    )
    assert frames.status_code == 201 and frames.parsed.last_add_confirmed == 4
    framed = add_entries_frames.sync_detailed(
        lid, client=client, body=File(payload=io.BytesIO(encode_upload([b"e"]))),
        x_ledger_password="pw",
    )
    assert framed.status_code == 201 and framed.parsed.first_entry_id == 5

    one = read_entry.sync_detailed(lid, 0, client=client)
    assert one.status_code == 200 and one.content == payload
    assert one.headers["x-crc32c"] == str(crc32c.crc32c(payload))
    assert one.headers["x-last-add-confirmed"] == "5"
    missing = read_entry.sync_detailed(lid, 6, client=client)
    assert missing.status_code == 404 and missing.parsed.code == "ENOENTRY"

    page = read_entries.sync(lid, client=client, start=1, limit=2)
    assert [e.entry_id for e in page.entries] == [1, 2] and page.next_start == 3

    with client.get_httpx_client().stream(
        "GET", f"/api/v1/ledgers/{lid}/entries", headers={"Accept": FRAMES_MEDIA_TYPE}
    ) as streamed:
        body = b"".join(streamed.iter_bytes())
    everything = [payload, b"a", b"bb", b"c", b"dd", b"e"]
    assert [p for _, _, p in decode_download(body)] == everything
    ranged = read_entries_frames.sync(lid, client=client, start=1, end=4)
    assert [p for _, _, p in decode_download(ranged.payload.read())] == everything[1:5]

    listed = list_ledgers.sync(client=client, limit=1000)
    assert lid in [item.ledger_id for item in listed.ledgers]

    assert fence_ledger.sync(lid, client=client, x_ledger_password="pw").state.value == "FENCED"
    closed = close_ledger.sync(lid, client=client, x_ledger_password="pw")
    assert closed.state.value == "CLOSED" and closed.last_add_confirmed == 5
    assert get_ledger.sync(lid, client=client).length == len(payload) + 7
    assert get_offload.sync(lid, client=client).state.value == "NONE"

    assert bookie_state.sync(client=client).running is True
    assert bookie_info.sync(client=client).total_space > 0
    assert list_disk_files.sync(client=client).files
    assert list_entry_logs.sync(client=client) is not None
    assert last_log_mark.sync(client=client) is not None

    # Admin calls need the token on this server.
    denied = set_read_only.sync_detailed(client=client, body=ReadOnlyRequest(read_only=False))
    assert denied.status_code == 401 and denied.parsed.code is ErrorCode.EUA
    admin = AuthenticatedClient(base_url=live_server.url, token=ADMIN_TOKEN)
    assert (
        set_read_only.sync(client=admin, body=ReadOnlyRequest(read_only=False)).read_only is False
    )
    assert get_read_only.sync(client=client).read_only is False

    assert (
        delete_ledger.sync_detailed(lid, client=client, x_ledger_password="pw").status_code == 204
    )
    assert get_ledger.sync_detailed(lid, client=client).status_code == 404


def test_clean_shutdown_and_restart_keeps_data(tmp_path):
    server = LiveServer(tmp_path / "data").start()
    try:
        client = Client(base_url=server.url)
        lid = create_ledger.sync(client=client, body=CreateLedger(password="p")).ledger_id
        for i in range(50):
            add_entry.sync(
                lid, client=client, body=File(payload=io.BytesIO(b"%d" % i)), x_ledger_password="p"
            )
        server.stop()
        # uvicorn re-raises SIGTERM after its graceful shutdown: -15 is a clean exit.
        assert server.process is not None and server.process.returncode in (0, -15)
        assert "Application shutdown complete" in server.logs()
        server.start()
        client = Client(base_url=server.url)
        assert get_ledger.sync(lid, client=client).last_add_confirmed == 49
        assert read_entry.sync_detailed(lid, 49, client=client).content == b"49"
    finally:
        server.stop()
