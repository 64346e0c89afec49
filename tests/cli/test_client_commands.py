"""Client commands through the ``ledgerd`` console script against a live server:
ledger life cycle, passwords beyond ASCII, reads in every format, errors."""

from __future__ import annotations

import base64
import json
import os
import struct
import subprocess
import sys

import crc32c
import httpx
import pytest

from tests.app.conftest import REPO
from tests.cli.conftest import run_ledgerd

FORBIDDEN_IMPORTS = {"app", "ledger", "journal", "entrylog", "compaction", "offload",
                     "fastapi", "starlette", "uvicorn", "pyspark", "boto3", "rocksdict"}


def created(server, *args: str) -> int:
    result = run_ledgerd("ledger", "create", *args, url=server.url)
    assert result.returncode == 0, result.stderr
    return int(json.loads(result.stdout)["ledger_id"])


def ok(result: subprocess.CompletedProcess[bytes]) -> subprocess.CompletedProcess[bytes]:
    assert result.returncode == 0, result.stderr.decode()
    assert result.stderr.count(b"\n") <= 1  # at most a progress line
    return result


def test_client_commands_import_neither_server_nor_engine(server, tmp_path):
    lid = created(server, "--password", "pw")
    modules = tmp_path / "modules.txt"
    script = (
        "import atexit, sys\n"
        f"atexit.register(lambda: open({str(modules)!r}, 'w').write("
        "'\\n'.join(sorted(sys.modules))))\n"
        "from cli import main\n"
        "main(sys.argv[1:])\n")
    for args in (["ledger", "get", str(lid)], ["ledger", "list"],
                 ["ledger", "append", str(lid), "x", "-p", "pw"],
                 ["ledger", "read", str(lid)]):
        result = subprocess.run([sys.executable, "-c", script, *args, "--url", server.url],
                                capture_output=True, cwd=REPO, timeout=60, check=False)
        assert result.returncode == 0, result.stderr
        loaded = {name.split(".")[0] for name in modules.read_text().split()}
        assert "ledgerd_client" in loaded and "httpx" in loaded
        assert loaded & FORBIDDEN_IMPORTS == set(), args


def test_ledger_life_cycle(server):
    lid = created(server, "--password", "pw", "--meta", "team=a", "-m", "k=v=w")
    got = json.loads(ok(run_ledgerd("ledger", "get", str(lid), url=server.url)).stdout)
    assert got["metadata"] == {"team": "a", "k": "v=w"} and got["state"] == "OPEN"
    added = json.loads(ok(run_ledgerd("ledger", "append", str(lid), "hello", "-p", "pw",
                                      url=server.url)).stdout)
    assert added == {"entry_id": 0, "last_add_confirmed": 0, "crc32c": crc32c.crc32c(b"hello")}
    piped = ok(run_ledgerd("ledger", "append", str(lid), "-p", "pw", stdin=b"\x00bin\xff",
                           url=server.url))
    assert json.loads(piped.stdout)["entry_id"] == 1
    retry = ok(run_ledgerd("ledger", "append", str(lid), "--entry-id", "1", "-p", "pw",
                           stdin=b"\x00bin\xff", url=server.url))
    assert json.loads(retry.stdout)["entry_id"] == 1  # idempotent: the same entry
    fenced = json.loads(ok(run_ledgerd("ledger", "fence", str(lid), "-p", "pw",
                                       url=server.url)).stdout)
    assert fenced["state"] == "FENCED"
    refused = run_ledgerd("ledger", "append", str(lid), "late", "-p", "pw", url=server.url)
    assert refused.returncode == 1 and b"EFENCED 409" in refused.stderr
    closed = json.loads(ok(run_ledgerd("ledger", "close", str(lid), "-p", "pw",
                                       url=server.url)).stdout)
    assert closed["state"] == "CLOSED" and closed["last_add_confirmed"] == 1
    status = json.loads(ok(run_ledgerd("ledger", "offload-status", str(lid),
                                       url=server.url)).stdout)
    assert status["state"] == "NONE"
    listed = json.loads(ok(run_ledgerd("ledger", "list", "--json", "--state", "closed",
                                       url=server.url)).stdout)
    assert lid in [item["ledger_id"] for item in listed]
    table = ok(run_ledgerd("ledger", "list", url=server.url)).stdout.decode().splitlines()
    assert table[0].split() == ["ledger_id", "state", "last_add_confirmed", "entries",
                                "length", "offload"]
    assert [str(lid), "CLOSED", "1", "2", "10", "NONE"] in [row.split() for row in table]
    deleted = json.loads(ok(run_ledgerd("ledger", "delete", str(lid), "-p", "pw",
                                        url=server.url)).stdout)
    assert deleted == {"ledger_id": lid, "deleted": True}
    gone = run_ledgerd("ledger", "get", str(lid), url=server.url)
    assert gone.returncode == 1
    assert gone.stderr.decode() == f"ledgerd: error: ledger {lid} does not exist (ENOLEDGER 404)\n"


@pytest.mark.parametrize("password", ["pässwörd", "密码 🔒", " tab\tand spaces ",
                                      "UTF-8''100%41"])
def test_passwords_beyond_ascii(server, password):
    lid = created(server, "--password", password)
    ok(run_ledgerd("ledger", "append", str(lid), "a", "-p", password, url=server.url))
    via_env = {**{k: v for k, v in os.environ.items() if not k.startswith("LEDGERD_")},
               "LEDGERD_PASSWORD": password, "LEDGERD_URL": server.url}
    ok(run_ledgerd("ledger", "append", str(lid), "b", env=via_env))
    wrong = run_ledgerd("ledger", "append", str(lid), "c", "-p", password + "x", url=server.url)
    assert wrong.returncode == 1 and b"EUA 403" in wrong.stderr
    assert b"Traceback" not in wrong.stderr
    closed = ok(run_ledgerd("ledger", "close", str(lid), "-p", password, url=server.url))
    assert json.loads(closed.stdout)["last_add_confirmed"] == 1


def test_password_header_encodings_on_the_wire(server):
    """What other ecosystems send: the RFC 8187 form, raw UTF-8 bytes, plain ASCII."""
    lid = created(server, "--password", "pässwörd")
    ascii_lid = created(server, "--password", "a%41")
    url = f"{server.url}/api/v1/ledgers"

    def fence(ledger_id: int, header: bytes) -> httpx.Response:
        return httpx.post(f"{url}/{ledger_id}/fence", headers={"X-Ledger-Password": header})

    assert fence(lid, b"utf-8''p%C3%A4ssw%C3%B6rd").status_code == 200
    assert fence(lid, "pässwörd".encode()).status_code == 200  # curl's raw UTF-8
    assert fence(lid, b"UTF-8''p%C3%A4ssw%C3%B6rdx").status_code == 403
    for malformed in (b"UTF-8''p%C3%A4ssw%C3", b"UTF-8''%zz", b"UTF-8''%"):
        answer = fence(lid, malformed)
        assert answer.status_code == 400 and answer.json()["code"] == "EBADREQ", malformed
    assert fence(ascii_lid, b"a%41").status_code == 200  # ASCII keeps its meaning, % too
    assert fence(ascii_lid, b"aA").status_code == 403


def test_missing_password_says_what_is_missing(server):
    lid = created(server, "--password", "pw")
    missing = run_ledgerd("ledger", "close", str(lid), url=server.url)
    assert missing.returncode == 1
    message = missing.stderr.decode()
    assert "none was given" in message and "--password" in message
    assert "LEDGERD_PASSWORD" in message and "wrong" not in message


def test_read_every_format(server):
    lid = created(server, "--password", "pw")
    payloads = [b"", b"a", b"\x00\n\xff" * 100, os.urandom(200 * 1024), b"last"]
    frames = b"".join(struct.pack(">I", len(p)) + p for p in payloads)
    ok(run_ledgerd("ledger", "append", str(lid), "--frames", "-p", "pw", stdin=frames,
                   url=server.url))

    def read(*args: str) -> bytes:
        return ok(run_ledgerd("ledger", "read", str(lid), *args, url=server.url)).stdout

    assert read("3") == payloads[3]  # one entry: raw by default
    (line,) = read("3", "--format", "jsonl").splitlines()
    assert json.loads(line) == {"entry_id": 3, "crc32c": crc32c.crc32c(payloads[3]),
                                "payload": base64.b64encode(payloads[3]).decode()}
    assert read("2", "-f", "frames") == _download_frame(2, payloads[2])
    lines = [json.loads(line) for line in read().splitlines()]  # a range: jsonl
    assert [base64.b64decode(e["payload"]) for e in lines] == payloads
    assert [e["entry_id"] for e in lines] == [0, 1, 2, 3, 4]
    assert read("--start", "1", "--end", "3", "--format", "raw") == b"".join(payloads[1:4])
    assert read("--start", "2", "--limit", "2", "--format", "frames") == (
        _download_frame(2, payloads[2]) + _download_frame(3, payloads[3]))
    assert read("--start", "5") == b""
    missing = run_ledgerd("ledger", "read", str(lid), "5", url=server.url)
    assert missing.returncode == 1 and b"ENOENTRY 404" in missing.stderr
    both = run_ledgerd("ledger", "read", str(lid), "1", "--start", "0", url=server.url)
    assert both.returncode == 2 and both.stdout == b""


def _download_frame(entry_id: int, payload: bytes) -> bytes:
    return struct.pack(">QII", entry_id, crc32c.crc32c(payload), len(payload)) + payload


def test_errors_are_one_unwrapped_line_without_traceback(server):
    unreachable = run_ledgerd("ledger", "get", "1", "--url", "127.0.0.1:1")
    assert unreachable.returncode == 3
    (line,) = unreachable.stderr.decode().splitlines()  # one line, longer than 80 columns
    assert len(line) > 80 and line.startswith("ledgerd: error: cannot reach http://127.0.0.1:1")
    usage = run_ledgerd("ledger", "get", "seven", url=server.url)
    assert usage.returncode == 2 and b"Invalid value" in usage.stderr
    bad_url = run_ledgerd("ledger", "get", "1", "--url", "ftp://x")
    assert bad_url.returncode == 2 and b"not an http:// or https:// URL" in bad_url.stderr
    no_token = run_ledgerd("gc", url=server.url)
    assert no_token.returncode == 1 and b"--token or LEDGERD_ADMIN_TOKEN" in no_token.stderr
    long_meta = run_ledgerd("ledger", "create", "-m", "k=" + "v" * 20_000, url=server.url)
    assert long_meta.returncode == 1
    (line,) = long_meta.stderr.decode().splitlines()
    assert "EBADREQ" in line
    for result in (unreachable, usage, bad_url, no_token, long_meta):
        assert b"Traceback" not in result.stderr and b"\xe2\x94" not in result.stderr  # no box


def test_admin_commands_with_token(server):
    lid = created(server, "--password", "pw")
    ok(run_ledgerd("ledger", "close", str(lid), "-p", "pw", url=server.url))
    gc = ok(run_ledgerd("gc", "--major", "--token", "cli-token", url=server.url))
    run = json.loads(gc.stdout)
    assert run["forced"] is True and run["major"] is True and run["errors"] == []
    # Offload is not configured on this server: the server's 503, in one line.
    offload = run_ledgerd("offload", str(lid), "--token", "cli-token", url=server.url)
    assert offload.returncode == 1 and b"offload is not configured" in offload.stderr


def test_serve_help_shows_the_settings_defaults():
    from app import ServiceSettings

    result = ok(run_ledgerd("serve", "--help", env={**os.environ, "COLUMNS": "200"}))
    text = result.stdout.decode()
    for name in ("host", "port"):
        assert f"default {ServiceSettings.model_fields[name].default}" in text


def test_openapi_command_prints_the_checked_in_spec():
    result = ok(run_ledgerd("openapi"))
    assert result.stdout.decode() == (REPO / "openapi" / "openapi.json").read_text()
