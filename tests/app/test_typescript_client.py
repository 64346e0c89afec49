"""A second language's user: a TypeScript client generated from the checked-in spec
with @hey-api/openapi-ts, used by ``openapi/typescript/src/e2e.ts`` (compiled with
``tsc --strict``, no casts) against a live server.

Node and the packages of ``openapi/typescript`` (installed by ``make install``
from its lockfile) are real parts of this test: without them it FAILS (see
``tests.conftest.require``), and it never downloads anything.
"""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
from pathlib import Path

import httpx

from common.frames import decode_download
from tests.conftest import require

from .conftest import ADMIN_TOKEN, REPO, LiveServer

TS_DIR = REPO / "openapi" / "typescript"
INSTALL_HINT = "run `make install` (scripts/install-typescript.sh: Node >= 20.19, npm ci)"


def _node() -> str:
    node = shutil.which("node")
    require(None if node is not None else f"node is not installed: {INSTALL_HINT}")
    assert node is not None
    return node


def _bin(name: str) -> Path:
    path = TS_DIR / "node_modules" / ".bin" / name
    require(None if path.exists() else f"{path} is missing: {INSTALL_HINT}")
    return path


def _run(*args: str | Path, timeout_s: float = 300) -> subprocess.CompletedProcess[str]:
    result = subprocess.run([str(a) for a in args], capture_output=True, text=True,
                            timeout=timeout_s)
    assert result.returncode == 0, f"{args}:\n{result.stdout}\n{result.stderr}"
    return result


def _project(tmp_path: Path) -> Path:
    """A copy of openapi/typescript with a client freshly generated from the spec."""
    work = tmp_path / "ts"
    (work / "src").mkdir(parents=True)
    for name in ("package.json", "tsconfig.json"):
        shutil.copy(TS_DIR / name, work / name)
    shutil.copy(TS_DIR / "src" / "e2e.ts", work / "src" / "e2e.ts")
    (work / "node_modules").symlink_to(TS_DIR / "node_modules")
    _run(_bin("openapi-ts"), "--input", REPO / "openapi" / "openapi.json",
         "--output", work / "src" / "client", "--client", "@hey-api/client-fetch", "--silent")
    return work


def test_typescript_client_against_a_live_server(live_server: LiveServer, tmp_path: Path):
    node = _node()
    _run(node, TS_DIR / "check-no-casts.js", TS_DIR / "src" / "e2e.ts")
    work = _project(tmp_path)
    # The spec's first server is the generated client's default base URL.
    assert "baseUrl: 'http://127.0.0.1:8080'" in (work / "src/client/client.gen.ts").read_text()
    _run(_bin("tsc"), "--project", work)

    ran = _run(node, work / "dist" / "e2e.js", live_server.url, ADMIN_TOKEN, timeout_s=120)
    summary = json.loads(ran.stdout.splitlines()[-1])
    assert summary["advice"] == ["the ledger is fenced: recover it", "no such ledger"]

    # What the program says it appended is what the server holds, byte for byte.
    payloads = [base64.b64decode(p) for p in summary["payloads"]]
    lid = summary["ledger_id"]
    ledger = httpx.get(f"{live_server.url}/api/v1/ledgers/{lid}").json()
    assert ledger["state"] == "CLOSED" and ledger["last_add_confirmed"] == len(payloads) - 1
    assert ledger["length"] == sum(len(p) for p in payloads) == summary["length"]
    streamed = httpx.get(f"{live_server.url}/api/v1/ledgers/{lid}/entries/frames")
    assert [p for _, _, p in decode_download(streamed.content)] == payloads


def test_the_cast_check_finds_every_bypass(tmp_path: Path):
    bad = tmp_path / "bad.ts"
    bad.write_text('const a = 1 as number;\nlet b: any;\nconst c = b!;\n// @ts-ignore\n'
                   'const d = <number>a;\nconst s = "x as any";\n')
    result = subprocess.run([_node(), str(TS_DIR / "check-no-casts.js"), str(bad)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 1
    flagged = [line.split(": ")[0] for line in result.stderr.splitlines()[:-1]]
    assert flagged == [f"{bad}:1:11", f"{bad}:2:8", f"{bad}:3:11", f"{bad}:5:11", f"{bad}:4"]
