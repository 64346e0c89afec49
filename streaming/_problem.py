"""problem+json → the one error tree (pure), for clients of the service."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from common import errors

_BY_CODE: Mapping[str, type[errors.LedgerdError]] = {
    "EBADREQ": errors.BadRequest,
    "EUA": errors.Unauthorized,
    "EFENCED": errors.LedgerFenced,
    "ECLOSED": errors.LedgerClosed,
    "ECONFLICT": errors.EntryConflict,
    "ENOTSEALED": errors.NotSealed,
    "EREADONLY": errors.ReadOnly,
    "ETOOMANYREQUESTS": errors.Backpressure,
    "EIO": errors.StorageUnavailable,
}


def error_from_problem(problem: Mapping[str, Any], ledger_id: int) -> errors.LedgerdError:
    """The exception a problem+json body stands for (``ledger_id``: the ledger the
    call was about, for ENOLEDGER)."""
    code = str(problem.get("code", "EIO"))
    status = int(problem.get("status", 500))
    detail = str(problem.get("detail") or problem.get("title") or code)
    exc: errors.LedgerdError
    if code == "ENOLEDGER":
        exc = errors.NoSuchLedger(ledger_id)
    elif code == "EBADREQ" and status == 413:
        exc = errors.EntryTooLarge(detail)
    else:
        exc = _BY_CODE.get(code, errors.StorageUnavailable)(detail)
    exc.add_note(f"HTTP status {status}, code {code}: {detail}")
    return exc
