"""One seeded run: build the lab, start etcd and the nodes, run the workload under
the nemesis, heal, let the cluster settle, read the final state, check, report.

Everything it made (processes, namespaces, veths) is removed in ``finally``, also
when the run fails; every wait is bounded.
"""

from __future__ import annotations

import base64
import json
import random
import re
import shutil
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from . import checker
from .lab import NetLab, call_in, missing_parts
from .nemesis import FAULTS, Nemesis, Window, schedule
from .processes import EtcdMember, NodeMember, faketime_missing
from .workload import PW, History, Reader, Shared, Writer, make_payload, token_of

WRITE_OPS = ("create", "add", "batch", "stream", "close", "fence")


@dataclass
class RunConfig:
    seed: int
    duration_s: float = 30.0
    nodes: int = 3
    faults: tuple[str, ...] = FAULTS
    ttl_s: float = 2.0
    timeout_s: float = 3.0  # per request
    settle_s: float = 20.0
    writers: int = 3
    readers: int = 2
    out_dir: Path = field(default_factory=lambda: Path("data/partitions"))


def requirements() -> list[str]:
    missing = missing_parts()
    if faketime_missing() is not None:
        missing.append(str(faketime_missing()))
    if shutil.which("etcd") is None:
        missing.append("etcd (scripts/install-etcd.sh)")
    return missing


def run(config: RunConfig) -> dict[str, Any]:
    """The report of one run (also written to ``out_dir/seed-N/``)."""
    out = config.out_dir / f"seed-{config.seed}"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    names = [f"n{i}" for i in range(config.nodes)]
    lab = NetLab(["etcd", "client", *names])
    etcd = EtcdMember(lab, out)
    nodes = {n: NodeMember(lab, n, out, etcd, {"MEMBERSHIP_TTL": str(config.ttl_s)})
             for n in names}
    stop = threading.Event()
    threads: list[threading.Thread] = []
    try:
        lab.create()
        etcd.spawn()
        etcd.wait_ready(30)
        for node in nodes.values():
            node.spawn()
        for node in nodes.values():
            node.wait_ready(60)
        client_ns = lab.netns("client")
        urls = {n: m.url for n, m in nodes.items()}
        call_in(client_ns, lambda: wait_members(urls, config.nodes, 30.0), 40)

        history, shared = History(), Shared()
        clients: list[Writer | Reader] = [
            Writer(f"w{i}", urls, history, shared, random.Random(config.seed * 1000 + i),
                   config.seed, config.timeout_s) for i in range(config.writers)]
        clients += [Reader(f"r{i}", urls, history, shared,
                           random.Random(config.seed * 1000 + 100 + i), config.seed,
                           config.timeout_s) for i in range(config.readers)]

        def ledgers() -> list[int]:
            with shared.lock:
                return list(shared.ledgers)
        nemesis = Nemesis(lab, etcd, nodes, ledgers, config.ttl_s)
        steps = schedule(config.seed, config.duration_s, config.faults, config.ttl_s)
        started = time.monotonic()
        threads = [threading.Thread(target=c.run, args=(stop, client_ns), daemon=True)
                   for c in clients]
        threads.append(threading.Thread(target=nemesis.run, args=(steps, started, stop),
                                        daemon=True))
        for thread in threads:
            thread.start()
        stop.wait(config.duration_s)
        stop.set()
        for thread in threads:  # every client call is bounded by timeout_s
            thread.join(max(0.0, started + config.duration_s + 4 * config.timeout_s + 10
                            - time.monotonic()))
        stragglers = [t.name for t in threads if t.is_alive()]
        ended = time.monotonic()
        nemesis.heal_all()
        healed = time.monotonic()
        ledger_ids = ledgers()
        settle = call_in(client_ns, lambda: settle_cluster(urls, ledger_ids, config.settle_s),
                         config.settle_s + 30)
        final = call_in(client_ns, lambda: final_views(urls, ledger_ids, config.timeout_s * 5),
                        120)
        ops = sorted(history.ops, key=lambda o: o["i"])
        verdicts = checker.check(ops, final, settle)
        by_window = violations_by_window(verdicts, ops, nemesis.windows)
        for verdict in verdicts.values():
            del verdict["all"]
        report = {
            "seed": config.seed, "duration_s": config.duration_s, "nodes": config.nodes,
            "ttl_s": config.ttl_s, "run_id": lab.run_id,
            "history_size": len(ops), "ledgers": len(ledger_ids),
            "acked_entries": len(checker.acked_entries(ops)),
            "ops": dict(sorted(Counter(f"{o['f']}:{o['outcome']}" for o in ops).items())),
            "schedule": [vars(s) for s in steps],
            "windows": availability(ops, nemesis.windows, started, ended),
            "heal_to_settled_s": round(settle.get("after_s", -1.0), 2),
            "settle": settle, "stragglers": stragglers,
            "healed_after_s": round(healed - ended, 2),
            "verdicts": verdicts, "violations_by_window": by_window,
        }
        (out / "history.jsonl").write_text("".join(json.dumps(o) + "\n" for o in ops))
        (out / "report.json").write_text(json.dumps(report, indent=1))
        (out / "report.md").write_text(markdown(report))
        return report
    finally:
        stop.set()
        for node in nodes.values():
            node.kill()
        etcd.kill()
        lab.destroy()


def wait_members(urls: dict[str, str], count: int, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    with httpx.Client(timeout=2.0) as http:
        while time.monotonic() < deadline:
            try:
                if all(len(http.get(f"{u}/api/v1/cluster").json()["nodes"]) == count
                       for u in urls.values()):
                    return True
            except (httpx.HTTPError, ValueError, KeyError):
                pass
            time.sleep(0.2)  # polling other processes
    raise TimeoutError(f"the cluster did not reach {count} members in {timeout_s}s")


def settle_cluster(urls: dict[str, str], ledgers: list[int],
                   timeout_s: float) -> dict[str, Any]:
    """Until every node sees every member, the nodes agree on each ledger, and a new
    ledger takes an add (bounded by ``timeout_s``)."""
    start = time.monotonic()
    deadline = start + timeout_s
    why = "no answer"
    with httpx.Client(timeout=3.0) as http:
        while time.monotonic() < deadline:
            try:
                members = [len(http.get(f"{u}/api/v1/cluster").json()["nodes"])
                           for u in urls.values()]
                if any(m != len(urls) for m in members):
                    why = f"members seen {members}"
                    raise ValueError(why)
                for ledger in ledgers:
                    views = {(d["state"], d["last_add_confirmed"]) for d in (
                        http.get(f"{u}/api/v1/ledgers/{ledger}").json()
                        for u in urls.values())}
                    if len(views) != 1:
                        why = f"L{ledger}: nodes answer {sorted(views)}"
                        raise ValueError(why)
                first = next(iter(urls.values()))
                created = http.post(f"{first}/api/v1/ledgers", json={"password": "pw"})
                if created.status_code != 201:
                    why = f"create answered {created.status_code}"
                    raise ValueError(why)
                lid = created.json()["ledger_id"]
                added = http.post(f"{urls[sorted(urls)[-1]]}/api/v1/ledgers/{lid}/entries",
                                  content=b"settled", headers=PW)
                if added.status_code != 201:
                    why = f"add answered {added.status_code}"
                    raise ValueError(why)
                return {"ok": True, "after_s": time.monotonic() - start}
            except (httpx.HTTPError, ValueError, KeyError) as exc:
                why = why if isinstance(exc, ValueError) else repr(exc)
            time.sleep(0.3)  # polling other processes
    return {"ok": False, "after_s": time.monotonic() - start,
            "why": f"not settled after {timeout_s}s: {why}"}


def final_views(urls: dict[str, str], ledgers: list[int],
                timeout_s: float) -> dict[str, dict[int, dict[str, Any]]]:
    """node -> ledger -> state, LAC and every entry up to it, read from that node."""
    views: dict[str, dict[int, dict[str, Any]]] = {}
    with httpx.Client(timeout=timeout_s) as http:
        for node, url in sorted(urls.items()):
            views[node] = {}
            for ledger in ledgers:
                try:
                    doc = http.get(f"{url}/api/v1/ledgers/{ledger}").json()
                    entries: dict[int, list[Any]] = {}
                    start: int | None = 0
                    lac = int(doc["last_add_confirmed"])
                    while start is not None and start <= lac:
                        page = http.get(f"{url}/api/v1/ledgers/{ledger}/entries", params={
                            "start": start, "end": lac, "limit": 1000}).json()
                        for item in page["entries"]:
                            data = base64.b64decode(item["payload"])
                            token = token_of(data)
                            entries[int(item["entry_id"])] = [
                                token, len(data), data == make_payload(token, len(data))]
                        start = page["next_start"]
                    views[node][ledger] = {"state": doc["state"], "lac": lac,
                                           "entries": entries}
                except (httpx.HTTPError, ValueError, KeyError):
                    continue  # a missing view fails `durable` for that node's entries
    return views


def availability(ops: list[dict[str, Any]], windows: list[Window], started: float,
                 ended: float) -> list[dict[str, Any]]:
    """Per fault window (and the calm between them): how many writes that began in
    it succeeded, and how many reads were answered (not timed out or 503)."""
    spans = [(w.start, w.end, w.kind, w.detail, w.errors) for w in windows]
    rows = []
    calm = [o for o in ops if not any(s <= o["t0"] < e for s, e, *_ in spans)]
    faulty = sum(e - s for s, e, *_ in spans)
    for start, end, kind, detail, errors in [
            *spans, (started, ended - faulty, "calm", "outside every fault window", [])]:
        inside = calm if kind == "calm" else [o for o in ops if start <= o["t0"] < end]
        writes = [o for o in inside if o["f"] in WRITE_OPS]
        reads = [o for o in inside if o["f"] not in WRITE_OPS]
        rows.append({
            "kind": kind, "detail": detail, "errors": errors,
            "from_s": round(start - started, 1), "length_s": round(end - start, 1),
            "writes_ok": sum(o["outcome"] == "ok" for o in writes), "writes": len(writes),
            # a read's definite refusal (404 past the end) is a right answer too
            "reads_answered": sum(o["outcome"] != "info" for o in reads), "reads": len(reads),
            "max_write_latency_s": round(max((o["t1"] - o["t0"] for o in writes),
                                             default=0.0), 2)})
    return rows


def violations_by_window(verdicts: dict[str, dict[str, Any]], ops: list[dict[str, Any]],
                         windows: list[Window]) -> dict[str, dict[str, int]]:
    """property -> fault kind (or "calm") -> violations whose operation began in
    that fault's window or within a second after it (the first ``op N`` a
    violation names is the answer that broke the property)."""
    counts: dict[str, dict[str, int]] = {}
    for prop, verdict in verdicts.items():
        tally: Counter[str] = Counter()
        for text in verdict["all"]:
            found = re.search(r"\bop (\d+)", text)
            if found is None:
                tally["after healing"] += 1
                continue
            begun = ops[int(found.group(1))]["t0"]
            tally[next((w.kind for w in windows if w.start <= begun < w.end + 1.0),
                       "calm")] += 1
        if tally:
            counts[prop] = dict(tally.most_common())
    return counts


def markdown(report: dict[str, Any]) -> str:
    lines = [f"# Partition run: seed {report['seed']}", "",
             f"{report['nodes']} nodes, {report['duration_s']} s, TTL {report['ttl_s']} s, "
             f"history {report['history_size']} ops, {report['ledgers']} ledgers, "
             f"{report['acked_entries']} entries acked; settled "
             f"{report['heal_to_settled_s']} s after healing.", "",
             "## Verdicts", "", "| property | verdict | violations | example |",
             "| --- | --- | --- | --- |"]
    for prop, v in report["verdicts"].items():
        example = v["examples"][0].replace("|", "\\|") if v["examples"] else ""
        lines.append(f"| {prop} | {'ok' if v['ok'] else 'VIOLATED'} | {v['violations']} "
                     f"| {example} |")
    lines += ["", "Violations by the fault window their operation began in (or the "
              "second after it):", ""]
    lines += [f"- {prop}: {', '.join(f'{k} {n}' for k, n in tally.items())}"
              for prop, tally in report["violations_by_window"].items()]
    lines += ["", "## Operations", "", "| op:outcome | count |", "| --- | --- |"]
    lines += [f"| {k} | {n} |" for k, n in report["ops"].items()]
    lines += ["", "## Availability per fault window", "",
              "| from (s) | length (s) | fault | detail | writes ok | reads answered | "
              "slowest write (s) |", "| --- | --- | --- | --- | --- | --- | --- |"]
    for w in report["windows"]:
        detail = w['detail'].replace('|', '\\|')
        lines.append(f"| {w['from_s']} | {w['length_s']} | {w['kind']} | {detail} | "
                     f"{w['writes_ok']}/{w['writes']} | {w['reads_answered']}/{w['reads']} | "
                     f"{w['max_write_latency_s']} |")
    lines += ["", "## Violations (first of each)", ""]
    for prop, v in report["verdicts"].items():
        lines += [f"- {prop}: {e}" for e in v["examples"]]
    return "\n".join(lines) + "\n"
