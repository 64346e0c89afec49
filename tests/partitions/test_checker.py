"""The partition checker on hand-made histories: each property passes a clean
history and catches the violation it names (no lab, no root: pure functions)."""

from __future__ import annotations

from typing import Any

from tools.partitions import check

SEED = 7


def token(ledger: int, entry: int, n: int = 1) -> str:
    return f"{SEED}:{ledger}:{entry}:w0:{n}"


def op(i: int, f: str, t0: float, t1: float, **fields: Any) -> dict[str, Any]:
    return {"i": i, "p": "w0", "f": f, "ledger": 1, "node": "n0", "t0": t0, "t1": t1,
            "outcome": "ok", **fields}


def add(i: int, entry: int, t0: float, lac: int, **fields: Any) -> dict[str, Any]:
    return op(i, "add", t0, t0 + 0.1, first=entry, last=entry, tokens=[token(1, entry)],
              lengths=[50], attempt=1, lac=lac, acked_first=entry, **fields)


def final_with(entries: dict[int, str], state: str = "OPEN",
               lac: int | None = None) -> dict[str, dict[int, dict[str, Any]]]:
    held = {e: [t, 50, True] for e, t in entries.items()}  # [token, length, intact]
    view = {"state": state, "lac": max(entries) if lac is None else lac, "entries": held}
    return {"n0": {1: view}, "n1": {1: view}}


def clean_history() -> list[dict[str, Any]]:
    return [add(0, 0, 0.0, 0), add(1, 1, 1.0, 1),
            op(2, "state", 2.0, 2.1, state="OPEN", lac=1),
            op(3, "read", 2.2, 2.3, entry=1, token=token(1, 1), length=50, intact=True,
               lac=1),
            op(4, "close", 3.0, 3.1, state="CLOSED", lac=1),
            op(5, "state", 4.0, 4.1, state="CLOSED", lac=1)]


def verdicts(ops: list[dict[str, Any]], final: dict[str, Any] | None = None,
             settled: bool = True) -> dict[str, bool]:
    final = final if final is not None else final_with({0: token(1, 0), 1: token(1, 1)},
                                                       "CLOSED")
    return {p: v["ok"] for p, v in check(ops, final, {"ok": settled}).items()}


def broken(ops: list[dict[str, Any]], final: dict[str, Any] | None = None,
           settled: bool = True) -> set[str]:
    return {p for p, ok in verdicts(ops, final, settled).items() if not ok}


def test_a_clean_history_passes_every_property() -> None:
    assert broken(clean_history()) == set()


def test_an_acked_entry_missing_after_healing_is_not_durable() -> None:
    final = final_with({0: token(1, 0)}, "CLOSED", lac=1)
    assert "durable" in broken(clean_history(), final)


def test_two_values_read_for_one_id_break_one_value() -> None:
    ops = [*clean_history(), op(6, "read", 5.0, 5.1, entry=1, token=token(1, 1, n=2),
                                length=50, intact=True, lac=1)]
    assert broken(ops) == {"one-value"}


def test_a_payload_at_two_ids_or_a_conflict_on_retry_breaks_exactly_once() -> None:
    twice = final_with({0: token(1, 0), 1: token(1, 1), 2: token(1, 1)}, "CLOSED", lac=1)
    assert broken(clean_history(), twice) >= {"exactly-once"}
    conflict = add(6, 2, 0.5, 0, code="ECONFLICT") | {"outcome": "fail", "lac": None}
    assert broken([*clean_history(), conflict]) == {"exactly-once"}


def test_a_read_past_a_closed_end_and_an_ack_past_it_are_caught() -> None:
    past = op(6, "read", 5.0, 5.1, entry=2, token=token(1, 2), length=50, intact=True,
              lac=2)
    assert "no-read-past-close" in broken([*clean_history(), past])
    late_ack = add(6, 2, 0.5, 2)
    assert "close-covers-acks" in broken([*clean_history(), late_ack])


def test_open_after_an_acked_close_breaks_closed_is_final() -> None:
    stale = op(6, "state", 5.0, 5.1, state="OPEN", lac=1)
    assert broken([*clean_history(), stale]) == {"closed-is-final"}


def test_a_lac_lower_than_one_reported_before_the_request_began_is_caught() -> None:
    ops = clean_history()
    ops[2] = op(2, "state", 2.0, 2.1, state="OPEN", lac=0)  # after op 1 acked LAC 1
    assert broken(ops) == {"lac-monotonic"}
    # Overlapping requests may see either value: not a violation.
    ops[2] = op(2, "state", 1.05, 2.1, state="OPEN", lac=0)
    assert broken(ops) == set()


def test_a_cluster_that_did_not_settle_is_reported() -> None:
    assert broken(clean_history(), settled=False) == {"settled"}
