"""The persisted offload state carries the multipart upload of an offload under
way (key, id, parts) across a restart, and ledger records written before
those fields existed still decode."""

from __future__ import annotations

from pathlib import Path

from ledger import Bookie, OffloadInfo, OffloadState
from ledger._ledger_record import LedgerRecord

from .conftest import engine_settings, write_closed_ledger


def test_the_upload_under_way_survives_a_restart(tmp_path: Path) -> None:
    info = OffloadInfo(state=OffloadState.IN_PROGRESS, bucket="b", key_prefix="p/7/",
                       upload_key="p/7/seg-0/segment", upload_id="2~abc",
                       upload_parts=((1, 5242880, "0" * 32), (3, 17, "f" * 32)))
    bookie = Bookie.open(engine_settings(tmp_path / "data"))
    try:
        ledger_id = write_closed_ledger(bookie, [b"x"]).ledger_id
        bookie.set_offload(ledger_id, info)
    finally:
        bookie.close()
    bookie = Bookie.open(engine_settings(tmp_path / "data"))
    try:
        assert bookie.get_ledger(ledger_id).offload == info
    finally:
        bookie.close()


# A ledger record as the version before the upload fields wrote it.
RECORD_BEFORE_UPLOAD_FIELDS = (
    b'{"closed":2.0,"created":1.0,"hash":"' + b"68" * 32 + b'","id":7,"last":0,"length":1,'
    b'"meta":{},"offload":{"bucket":"b","error":"S3 down","key_prefix":"p/7/",'
    b'"local_deleted":false,"offloaded_at":null,"segment_bytes":0,"state":"FAILED"},'
    b'"salt":"' + b"73" * 16 + b'","state":"CLOSED","v":1}')


def test_a_record_from_before_the_upload_fields_decodes() -> None:
    record = LedgerRecord.decode(RECORD_BEFORE_UPLOAD_FIELDS)
    assert record.offload == OffloadInfo(state=OffloadState.FAILED, bucket="b",
                                         key_prefix="p/7/", error="S3 down")
    assert record.offload.upload_parts == () and record.offload.upload_id is None
    assert LedgerRecord.decode(record.encode()) == record
