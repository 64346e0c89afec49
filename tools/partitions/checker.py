"""The checker: properties of a recorded history and of the cluster's final state,
in the spirit of Jepsen's checkers (Knossos checks one register, Elle cycles in
transactions; ledgerd's objects are append-only logs with one writer each, so the
properties are checked directly, each over the whole history).

=====================  =========================================================
durable                every acknowledged entry (add, batch, stream ack) is, once
                       the cluster settled, at most the LAC on every node and
                       reads back from every node with the bytes acked for it
one-value              one value per (ledger, entry id): every read of an id,
                       during the run and after, returns the same bytes, intact
exactly-once           a payload is stored at one id, the one its client wrote it
                       at; a retry with ``?entry_id`` / ``?first_entry_id`` by the
                       ledger's only writer is never refused ECONFLICT
no-read-past-close     no read returns an entry past a closed ledger's end, no
                       answer names a LAC past it, and every close answer and the
                       final metadata agree on that end
close-covers-acks      a closed ledger's end is at least every entry acknowledged
                       (before or after the close)
closed-is-final        an answer that began after a close was acknowledged says
                       CLOSED (never OPEN), and no add begun after it is acked
lac-monotonic          for each ledger, any answer naming a readable end (LAC of
                       an ack, a ledger read, an entry read's
                       ``X-Last-Add-Confirmed``, a close) is at least every LAC any
                       node reported in an answer completed before it began
settled                after healing: every node sees every member and the nodes
                       agree on each ledger's state and LAC, and a new ledger takes
                       an add, within the settle bound
=====================  =========================================================
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

PROPERTIES = ("durable", "one-value", "exactly-once", "no-read-past-close",
              "close-covers-acks", "closed-is-final", "lac-monotonic", "settled")
EXAMPLES = 8  # violations kept per property in the report


def intended(token: str) -> tuple[int, int]:
    """(ledger, entry id) a payload was written for (workload.make_payload)."""
    _, ledger, entry, *_ = token.split(":")
    return int(ledger), int(entry)


def acked_entries(ops: list[dict[str, Any]]) -> dict[tuple[int, int], tuple[str, int, int]]:
    """(ledger, id) -> (token, length, op index) of every acknowledged entry."""
    acked: dict[tuple[int, int], tuple[str, int, int]] = {}
    for op in ops:
        if op["f"] not in ("add", "batch", "stream"):
            continue
        last = op["last"] if op["outcome"] == "ok" else op.get("acked_last")
        if last is None:
            continue
        for k, entry in enumerate(range(op["first"], last + 1)):
            acked[(op["ledger"], entry)] = (op["tokens"][k], op["lengths"][k], op["i"])
    return acked


def check(ops: list[dict[str, Any]], final: dict[str, dict[int, dict[str, Any]]],
          settle: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Verdicts: property -> {"ok", "violations" (count), "examples", "all"}.  ``final``:
    node -> ledger -> {"state", "lac", "entries": {id: [token, length, intact]}}."""
    found: dict[str, list[str]] = {p: [] for p in PROPERTIES}
    acked = acked_entries(ops)
    ok_ops = [op for op in ops if op["outcome"] == "ok"]

    # durable
    for (ledger, entry), (token, length, i) in sorted(acked.items()):
        for node, views in sorted(final.items()):
            view = views.get(ledger)
            if view is None or view["lac"] < entry:
                found["durable"].append(f"L{ledger}#{entry} (op {i}) past {node}'s LAC "
                                        f"{None if view is None else view['lac']}")
                continue
            held = view["entries"].get(entry)
            if held is None or held[0] != token or held[1] != length or not held[2]:
                found["durable"].append(f"L{ledger}#{entry} (op {i}) on {node}: {held} "
                                        f"instead of {token}")

    # one-value
    seen: dict[tuple[int, int], set[tuple[str, int]]] = defaultdict(set)
    for op in ok_ops:
        if op["f"] == "read":
            seen[(op["ledger"], op["entry"])].add((op["token"], op["length"]))
            if not op["intact"]:
                found["one-value"].append(f"op {op['i']}: L{op['ledger']}#{op['entry']} "
                                          f"from {op['node']} corrupt")
    for node, views in final.items():
        for ledger, view in views.items():
            for entry, held in view["entries"].items():
                seen[(ledger, entry)].add((held[0], held[1]))
                if not held[2]:
                    found["one-value"].append(f"L{ledger}#{entry} on {node} corrupt")
    for (ledger, entry), values in sorted(seen.items()):
        if len(values) > 1:
            found["one-value"].append(f"L{ledger}#{entry} read as {sorted(values)}")

    # exactly-once
    places: dict[str, set[tuple[int, int]]] = defaultdict(set)
    for (ledger, entry), values in seen.items():
        for token, _ in values:
            places[token].add((ledger, entry))
    for token, where in sorted(places.items()):
        if len(where) > 1 or intended(token) not in where:
            found["exactly-once"].append(f"payload {token} stored at {sorted(where)}")
    for op in ops:
        if op["f"] in ("add", "batch") and op.get("code") == "ECONFLICT":
            found["exactly-once"].append(
                f"op {op['i']}: {op['f']} L{op['ledger']}#{op['first']} attempt "
                f"{op['attempt']} through {op['node']} refused ECONFLICT")
        if op["outcome"] == "ok" and op["f"] in ("add", "batch") \
                and op.get("acked_first") not in (None, op["first"]):
            found["exactly-once"].append(f"op {op['i']}: asked id {op['first']}, "
                                         f"acked as {op['acked_first']}")

    # the end of each closed ledger: close answers, then the settled metadata
    closes = [op for op in ok_ops if op["f"] in ("close", "fence")]
    ends: dict[int, int] = {}
    for op in closes:
        if op["state"] != "CLOSED":
            found["no-read-past-close"].append(f"op {op['i']}: {op['f']} answered "
                                               f"{op['state']}")
        elif ends.setdefault(op["ledger"], op["lac"]) != op["lac"]:
            found["no-read-past-close"].append(
                f"L{op['ledger']} closed at {ends[op['ledger']]} and at {op['lac']}")
    for node, views in final.items():
        for ledger, view in views.items():
            if view["state"] == "CLOSED" and \
                    ends.setdefault(ledger, view["lac"]) != view["lac"]:
                found["no-read-past-close"].append(
                    f"L{ledger}: {node} says closed at {view['lac']}, "
                    f"a close said {ends[ledger]}")
    for op in ok_ops:
        end = ends.get(op["ledger"]) if op["ledger"] is not None else None
        if end is None:
            continue
        if op["f"] == "read" and op["entry"] > end:
            found["no-read-past-close"].append(
                f"op {op['i']}: read L{op['ledger']}#{op['entry']} from {op['node']}, "
                f"closed at {end}")
        if op.get("lac") is not None and op["lac"] > end:
            found["no-read-past-close"].append(
                f"op {op['i']}: {op['f']} via {op['node']} named LAC {op['lac']} of "
                f"L{op['ledger']}, closed at {end}")

    # close-covers-acks
    for (ledger, entry), (_, _, i) in sorted(acked.items()):
        if ledger in ends and entry > ends[ledger]:
            found["close-covers-acks"].append(f"L{ledger}#{entry} acked (op {i}), "
                                              f"closed at {ends[ledger]}")

    # closed-is-final
    first_close: dict[int, float] = {}
    for op in closes:
        first_close[op["ledger"]] = min(first_close.get(op["ledger"], op["t1"]), op["t1"])
    for op in ok_ops:
        closed_at = first_close.get(op["ledger"]) if op["ledger"] is not None else None
        if closed_at is None or op["t0"] <= closed_at:
            continue
        late = op["t0"] - closed_at
        if op["f"] == "state" and op["state"] != "CLOSED":
            found["closed-is-final"].append(
                f"op {op['i']}: {op['node']} answered L{op['ledger']} {op['state']} "
                f"{late:.1f}s after its close was acked")
        if op["f"] in ("add", "batch", "stream"):
            found["closed-is-final"].append(
                f"op {op['i']}: {op['f']} acked by {op['node']} {late:.1f}s after "
                f"L{op['ledger']}'s close")

    # lac-monotonic: sweep the answers by start, the LACs reported by end
    by_ledger: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for op in ok_ops:
        if op.get("lac") is not None and op["ledger"] is not None:
            by_ledger[op["ledger"]].append(op)
    for ledger, answers in sorted(by_ledger.items()):
        ended = sorted(answers, key=lambda o: o["t1"])
        k, best, best_op = 0, -1, None
        for op in sorted(answers, key=lambda o: o["t0"]):
            while k < len(ended) and ended[k]["t1"] < op["t0"]:
                if ended[k]["lac"] > best:
                    best, best_op = ended[k]["lac"], ended[k]
                k += 1
            if op["lac"] < best and best_op is not None:
                found["lac-monotonic"].append(
                    f"L{ledger}: op {op['i']} ({op['f']} via {op['node']}) named LAC "
                    f"{op['lac']} after op {best_op['i']} ({best_op['f']} via "
                    f"{best_op['node']}) named {best} (back {best - op['lac']})")

    # settled
    if not settle.get("ok"):
        found["settled"].append(str(settle.get("why", "did not settle")))

    return {p: {"ok": not v, "violations": len(v), "examples": v[:EXAMPLES], "all": v}
            for p, v in found.items()}
