"""``ledgerd ledger append --lines/--frames``: bulk appends from stdin in batches,
exactly once across lost answers and reruns."""

from __future__ import annotations

import json
import os
import random
import struct
import subprocess
import time
from pathlib import Path

import crc32c

from tests.cli.conftest import LEDGERD, LossyProxy, run_ledgerd


def new_ledger(url: str) -> int:
    result = run_ledgerd("ledger", "create", "-p", "pw", url=url)
    assert result.returncode == 0, result.stderr
    return int(json.loads(result.stdout)["ledger_id"])


def stored(url: str, lid: int) -> list[bytes]:
    """Every entry of the ledger, read back as a frame stream."""
    body = run_ledgerd("ledger", "read", str(lid), "--format", "frames", url=url).stdout
    payloads, offset = [], 0
    while offset < len(body):
        entry_id, crc, length = struct.unpack_from(">QII", body, offset)
        payload = body[offset + 16 : offset + 16 + length]
        assert entry_id == len(payloads) and crc == crc32c.crc32c(payload)
        payloads.append(payload)
        offset += 16 + length
    return payloads


def append(url: str, lid: int, *args: str,
           stdin: bytes | Path) -> subprocess.CompletedProcess[bytes]:
    return run_ledgerd("ledger", "append", str(lid), "-p", "pw", *args, stdin=stdin, url=url)


def frames_of(payloads: list[bytes]) -> bytes:
    return b"".join(struct.pack(">I", len(p)) + p for p in payloads)


def test_lines_from_a_pipe_in_batches(server):
    lid = new_ledger(server.url)
    lines = [f"line {i} {'x' * (i % 50)}".encode() for i in range(5000)]
    lines[7] = b""  # an empty line is an empty entry
    data = b"\n".join(lines) + b"\n"
    result = append(server.url, lid, "--lines", "--batch-entries", "700", stdin=data)
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["appended"] == 5000 and summary["batches"] == 8  # ceil(5000 / 700)
    assert (summary["first_entry_id"], summary["last_entry_id"]) == (0, 4999)
    assert summary["payload_bytes"] == sum(map(len, lines))
    assert stored(server.url, lid) == lines
    # Not a terminal: plain progress lines, the last one the final figures.
    last = result.stderr.decode().splitlines()[-1]
    assert last.startswith(f"append to ledger {lid}: ") and "5000 entries" in last


def test_frames_from_a_file_with_oversized_batches_split(server, tmp_path):
    """--batch-size above the server's MAX_BATCH_SIZE (2 MiB - 8 KiB here): the
    server refuses with 413 and each refused batch is split until it fits."""
    rng = random.Random(7)
    payloads = [rng.randbytes(rng.randrange(0, 200 * 1024)) for _ in range(120)]
    path = tmp_path / "in.frames"
    path.write_bytes(frames_of(payloads))
    lid = new_ledger(server.url)
    result = append(server.url, lid, "--frames", "--batch-size", str(16 * 1024 * 1024),
                    stdin=path)
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["appended"] == 120 and summary["payload_bytes"] == sum(map(len, payloads))
    assert stored(server.url, lid) == payloads
    # stdin was a file: the bar knew its end and reached it.
    assert "(100%)" in result.stderr.decode().splitlines()[-1]


def test_cut_frame_is_an_input_error_and_says_what_was_appended(server):
    lid = new_ledger(server.url)
    payloads = [bytes([i]) * 10 for i in range(30)]
    cut = frames_of(payloads) + struct.pack(">I", 100) + b"short"
    result = append(server.url, lid, "--frames", "--batch-entries", "10", stdin=cut)
    assert result.returncode == 2
    message = result.stderr.decode().splitlines()[-1]
    assert "frame 30: declares 100 bytes, only 5 follow" in message
    assert "30 entries were appended, ids 0..29" in message
    assert "--first-entry-id 0" in message
    assert stored(server.url, lid) == payloads


def test_rerun_with_first_entry_id_skips_what_is_there(server):
    lid = new_ledger(server.url)
    lines = [f"{i}".encode() for i in range(1000)]
    data = b"\n".join(lines) + b"\n"
    first = append(server.url, lid, "--lines", stdin=b"\n".join(lines[:400]) + b"\n")
    assert first.returncode == 0, first.stderr
    rerun = append(server.url, lid, "--lines", "--first-entry-id", "0", stdin=data)
    assert rerun.returncode == 0, rerun.stderr
    summary = json.loads(rerun.stdout)
    assert (summary["skipped"], summary["appended"]) == (400, 600)
    assert stored(server.url, lid) == lines
    again = append(server.url, lid, "--lines", "--first-entry-id", "0", stdin=data)
    assert json.loads(again.stdout)["appended"] == 0  # idempotent
    other = append(server.url, lid, "--lines", "--first-entry-id", "0",
                   stdin=b"not the same input\n")
    assert other.returncode == 1 and b"CRC32C differs" in other.stderr
    gap = append(server.url, lid, "--lines", "--first-entry-id", "2000", stdin=data)
    assert gap.returncode == 1 and b"next entry is 1000" in gap.stderr
    assert stored(server.url, lid) == lines


def test_lost_answers_are_settled_exactly_once(server):
    """Batch 2's answer is lost after the server appended it, batch 4's request is
    lost before: the first must not be appended twice, the second must be sent again."""
    lid = new_ledger(server.url)
    lines = [f"entry {i}".encode() for i in range(600)]
    with LossyProxy(server.url, lose={2: True, 4: False}) as proxy:
        result = append(proxy.url, lid, "--lines", "--batch-entries", "100",
                        stdin=b"\n".join(lines) + b"\n")
        assert result.returncode == 0, result.stderr
        assert proxy.batches_seen == 7  # six batches, the fifth sent twice
    summary = json.loads(result.stdout)
    assert summary["appended"] == 600 and summary["batches"] == 6
    assert stored(server.url, lid) == lines


def test_lost_first_answer_asks_for_first_entry_id(server):
    lid = new_ledger(server.url)
    with LossyProxy(server.url, lose={0: True}) as proxy:
        result = append(proxy.url, lid, "--lines", stdin=b"a\nb\n")
    assert result.returncode == 1
    assert b"whether it was appended is unknown" in result.stderr
    assert b"--first-entry-id" in result.stderr
    rerun = append(server.url, lid, "--lines", "--first-entry-id", "0", stdin=b"a\nb\n")
    assert json.loads(rerun.stdout)["skipped"] == 2
    assert stored(server.url, lid) == [b"a", b"b"]


def test_a_quiet_pipe_does_not_hold_back_a_partial_batch(server):
    """`tail -f log | ledgerd ledger append --lines`: lines are appended while the
    pipe stays open, not when a batch of --batch-entries has filled up."""
    lid = new_ledger(server.url)
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("LEDGERD_")},
           "LEDGERD_URL": server.url}
    with subprocess.Popen([str(LEDGERD), "ledger", "append", str(lid), "-p", "pw", "--lines"],
                          stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, env=env) as child:
        assert child.stdin is not None
        child.stdin.write(b"first\nsecond\n")
        child.stdin.flush()
        deadline = time.monotonic() + 30
        while stored(server.url, lid) != [b"first", b"second"]:
            assert time.monotonic() < deadline, "the partial batch was held back"
            assert child.poll() is None
        child.stdin.write(b"third\n")
        child.stdin.close()
        assert child.wait(30) == 0
    assert stored(server.url, lid) == [b"first", b"second", b"third"]


def test_lines_and_frames_over_an_append_stream(server):
    """`--stream`: the same input over one WebSocket append stream (DESIGN §5a), with
    many messages in flight; a second run with --first-entry-id appends after it."""
    lid = new_ledger(server.url)
    lines = [f"streamed {i}".encode() for i in range(3000)]
    result = append(server.url, lid, "--lines", "--stream", stdin=b"\n".join(lines) + b"\n")
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["appended"] == 3000 and summary["last_entry_id"] == 2999
    more = [b"", b"\x00binary\xff", b"z" * 70_000]
    result = append(server.url, lid, "--frames", "--stream", "--first-entry-id", "3000",
                    stdin=frames_of(more))
    assert result.returncode == 0, result.stderr
    assert stored(server.url, lid) == lines + more
    wrong = run_ledgerd("ledger", "append", str(lid), "-p", "nope", "--lines", "--stream",
                        stdin=b"x\n", url=server.url)
    assert wrong.returncode == 1 and b"Traceback" not in wrong.stderr
    assert b"EUA" in wrong.stderr
