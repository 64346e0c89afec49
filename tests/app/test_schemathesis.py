"""The spec's own fuzzer with every check finds nothing (DESIGN §5 precisions).

``schemathesis run --checks all`` (every check it has: server errors, status codes,
content types, headers and bodies against the spec, negative data rejected,
positive data accepted, missing required headers, unsupported methods and their
``Allow``, authentication ignored, use after free, resource availability), with
a fixed seed, in all four phases (examples, coverage, fuzzing, stateful: the
spec's links chain create → append → close → offload → read), against live
servers on the real engine, three ways:

- with an admin token: the checked-in spec, which describes such a server (and is
  what the server serves), every operation;
- without one: the spec the server serves, whose admin calls carry no security
  and no 401 (a loopback server without ADMIN_TOKEN takes them without a token);
  the admin operations, the only ones whose contract differs;
- with S3 configured (the real radosgw): closed ledgers are offloaded at once and
  their local copies dropped by the next GC, so reads go through S3; the ledger
  operations.

``tests/app/schemathesis.toml`` holds the hooks (a serializer for frames, keeping
the bookie writable) and the one relaxation the spec cannot express (``end``
below ``start``).  The first two runs go at once, each with its own server.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from tools.local_s3 import LocalS3Server

from .conftest import ADMIN_TOKEN, REPO, LiveServer

SPEC = REPO / "openapi" / "openapi.json"
CONFIG = REPO / "tests" / "app" / "schemathesis.toml"
SEED = 20261123
EXAMPLES_PER_OPERATION = 30
RUN_TIMEOUT_S = 600
ADMIN_PATHS = r"^/api/v1/(bookie/|ledgers$|ledgers/\{ledger_id\}/(close|offload)$)"


def _fuzz(spec: Path, server: LiveServer, *options: str) -> subprocess.Popen[str]:
    schemathesis = Path(sys.executable).parent / "schemathesis"
    assert schemathesis.exists(), f"{schemathesis} is missing: run `make install`"
    command = [
        str(schemathesis), "--config-file", str(CONFIG), "--no-color", "run", str(spec),
        "--url", server.url, "--checks", "all", "--seed", str(SEED),
        "--max-examples", str(EXAMPLES_PER_OPERATION), "--generation-database", "none",
        "--request-timeout", "30", *options,
    ]
    env = {**os.environ, "PYTHONPATH": str(REPO)}  # the hooks module
    return subprocess.Popen(command, cwd=REPO, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def _assert_nothing_found(runs: dict[str, subprocess.Popen[str]]) -> None:
    """Every run passed; otherwise fail with the report of each that did not."""
    reports = []
    for name, run in runs.items():
        output, _ = run.communicate(timeout=RUN_TIMEOUT_S)
        # What the run covered, for the log (pytest -s or -rP shows it).
        print(name, *(line.strip() for line in output.splitlines()
                      if re.search(r"generated|API Links|Scenarios|Operations:", line)), sep="\n  ")
        if run.returncode != 0:
            reports.append(f"===== {name}: exit {run.returncode} =====\n{output[-20000:]}")
    assert not reports, "\n".join(reports)


def _served_spec(server: LiveServer) -> dict[str, Any]:
    spec: dict[str, Any] = httpx.get(f"{server.url}/openapi.json", timeout=30).json()
    return spec


def test_fuzzer_finds_nothing_with_and_without_an_admin_token(tmp_path: Path):
    with_token = LiveServer(tmp_path / "token" / "data", {"admin_token": ADMIN_TOKEN}).start()
    without = LiveServer(tmp_path / "open" / "data").start()
    try:
        # The checked-in spec is what a server with a token serves.
        assert _served_spec(with_token) == json.loads(SPEC.read_text())
        open_spec = tmp_path / "open.json"
        open_spec.write_text(json.dumps(_served_spec(without)))
        runs = {
            "with an admin token": _fuzz(SPEC, with_token,
                                         "--header", f"Authorization: Bearer {ADMIN_TOKEN}"),
            "without an admin token": _fuzz(open_spec, without,
                                            "--include-path-regex", ADMIN_PATHS),
        }
        _assert_nothing_found(runs)
    finally:
        with_token.stop()
        without.stop()


def test_fuzzer_finds_nothing_with_s3(tmp_path: Path, s3_server: LocalS3Server,
                                      s3_bucket: tuple[Any, str],
                                      monkeypatch: pytest.MonkeyPatch):
    for name, value in s3_server.env().items():  # boto3's standard credential chain
        monkeypatch.setenv(name, value)
    _, bucket = s3_bucket
    server = LiveServer(tmp_path / "data", {
        "admin_token": ADMIN_TOKEN, "s3_endpoint_url": s3_server.endpoint_url,
        "s3_bucket": bucket, "offload_after_close": "true", "offload_deletion_lag": 0,
        "gc_wait_time": 1,
    }).start()
    try:
        assert _served_spec(server) == json.loads(SPEC.read_text())
        runs = {"with S3": _fuzz(SPEC, server, "--include-tag", "ledgers",
                                 "--header", f"Authorization: Bearer {ADMIN_TOKEN}")}
        _assert_nothing_found(runs)
        # The run did reach S3: ledgers it closed were offloaded.
        listed = httpx.get(f"{server.url}/api/v1/ledgers", params={"state": "CLOSED"}).json()
        states = {ledger["offload"]["state"] for ledger in listed["ledgers"]}
        assert "OFFLOADED" in states, states
    finally:
        server.stop()
