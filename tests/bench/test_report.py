"""The report generator turns result JSON files into markdown + PNG charts."""

from __future__ import annotations

from pathlib import Path

from bench._harness import Row, write_json
from bench.report import write_report

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _journal_rows() -> list[Row]:
    rows = []
    for size in (100, 16384):
        for writers, mb_s in ((1, 10.0), (16, 80.0), (64, 120.0)):
            rows.append(Row("journal_append", {"writers": writers, "entry": size}, mb_s, "MB/s",
                            limit=300.0, limit_name="raw 256KiB O_DIRECT+fdatasync",
                            extra={"entries_per_s": mb_s * 1e6 / size, "p50_ms": writers / 10,
                                   "p99_ms": writers / 2}))
    return rows


def _redis_rows() -> list[Row]:
    rows = []
    for conc in (1, 16, 64):
        params = {"conc": conc, "entry": 1024, "batch": 100}
        peer = Row("redis_xadd_pipeline", params, 20.0 + conc, "MB/s",
                   extra={"p50_ms": 1.0, "p99_ms": 3.0})
        ours = Row("ledgerd_batch_add", params, 30.0 + conc, "MB/s", limit=peer.value,
                   limit_name="Redis redis_xadd_pipeline (appendfsync always)",
                   extra={"p50_ms": 2.0, "p99_ms": 5.0})
        rows += [peer, ours]
    return rows


def _peer_rows() -> list[Row]:
    params = {"entry": 1024, "conc": 16, "in_flight": 16}
    return [
        Row("redis_stream", params, 40000.0, "entries/s",
            extra={"p99_ms": 2.0, "client_cpu_s": 0.5, "server_cpu_s": 2.5}),
        Row("ledgerd_stream", params, 10000.0, "entries/s", limit=40000.0,
            limit_name="Redis XADD -c N -P 16",
            extra={"p99_ms": 9.0, "client_cpu_s": 0.7, "server_cpu_s": 3.0}),
        Row("ledgerd_stream_paced", {"entry": 1024, "conc": 16, "rate": 5000}, 6.0, "p99 ms",
            limit=4.0, limit_name="2 x raw group commit p99"),
    ]


def test_report_from_two_partial_runs(tmp_path: Path) -> None:
    results = tmp_path / "results"
    write_json("journal", _journal_rows(), "python -m bench --only journal",
               results_dir=results)
    write_json("redis", _redis_rows(), "python -m bench --quick --only redis",
               notes={"peer": "Redis 7 (appendfsync always)"}, results_dir=results)
    write_json("peers", _peer_rows(), "python -m bench --only peers",
               notes={"machine": "Shared machine: provisional."}, results_dir=results)
    write_json("engine", [Row("engine_vs_journal_adds", {"writers": 64, "entry": 1024,
                                                         "rounds": 3}, 9552.0, "entries/s",
                              limit=12000.0, limit_name="journal appends alone",
                              extra={"engine_p99_ms": 15.0, "journal_p99_ms": 10.0,
                                     "p99_ratio": 1.5})],
               "python -m bench --only engine", results_dir=results)
    doc, charts = tmp_path / "docs" / "benchmarks.md", tmp_path / "docs" / "benchmarks"

    written = write_report(results, doc, charts)

    text = doc.read_text()
    assert "## Journal appends" in text and "## ledgerd over HTTP vs Redis" in text
    assert "command: `python -m bench --only journal`" in text
    assert "command: `python -m bench --quick --only redis`" in text
    assert "- peer: Redis 7 (appendfsync always)" in text
    assert text.count("Quick smoke run") == 1  # only the --quick section says so
    assert "| 16 KiB | 64 | 120 | 300 | **0.40** |" in text
    # the old headline, built on redis-py's ceiling, is gone
    assert "ledgerd batch add ÷ Redis pipelined XADD (appendfsync always):" not in text
    assert ("16 streams x 16 in flight ÷ Redis `-c 16 -P 16`: **0.250** (target ≥ 1: not met)"
            in text)
    assert "stream ack p99 at half that rate ÷ 2 x raw group-commit p99: **1.500**" in text
    assert "Shared machine: provisional." in text
    assert "Targets of issue 13, same device, alternating rounds" in text
    # 0.796: two decimals would show 0.80, as if it met ≥ 0.8
    assert ("engine adds (1 KiB, 64 writers) ÷ journal appends alone: **0.796** "
            "(target ≥ 0.8: not met)") in text
    assert "engine add p99 ÷ the journal's: **1.500** (target ≤ 2: met)" in text
    assert "| client cpu s | server cpu s |" in text
    pngs = sorted(p.name for p in written if p.suffix == ".png")
    assert pngs == ["journal.png", "redis_batch.png"]
    for name in pngs:
        assert (charts / name).read_bytes().startswith(PNG_MAGIC)
        assert f"](benchmarks/{name})" in text


def test_report_without_results_says_how_to_get_them(tmp_path: Path) -> None:
    doc = tmp_path / "benchmarks.md"
    assert write_report(tmp_path / "none", doc, tmp_path / "charts") == [doc]
    assert "run `make bench`" in doc.read_text()


def test_the_cli_names_every_bench_suite() -> None:
    """`ledgerd bench --only` lists the suites `python -m bench` has, no more, no less."""
    from bench.__main__ import SUITES
    from cli._server import BENCH_SUITES

    assert list(BENCH_SUITES) == list(SUITES)


def test_the_idle_bench_derives_each_codes_marginal_rss_per_ledger() -> None:
    from bench.idle_bench import marginal_rows

    def rss(code: str, ledgers: int, per_ledger: float) -> Row:
        return Row("cluster_rss_per_ledger", {"ledgers": ledgers, "code": code},
                   per_ledger, "bytes")
    rows = [rss("before", 1000, 5000.0), rss("now", 1000, 4000.0),
            rss("before", 10_000, 2000.0), rss("now", 10_000, 1300.0)]
    before, now = marginal_rows(rows)
    assert before.params == {"from": 1000, "ledgers": 10_000, "code": "before"}
    assert before.value == (20e6 - 5e6) / 9000 and before.limit is None
    assert now.value == (13e6 - 4e6) / 9000 and now.limit == before.value
    assert marginal_rows(rows[:2]) == []  # one N per code: no slope
