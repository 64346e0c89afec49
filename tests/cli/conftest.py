"""The CLI through its console script (``ledgerd``) against live servers.

Every test runs the installed entry point in a subprocess, with stdin, stdout
and stderr pipes (so never a terminal), as a user's script would.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest

from tests.app.conftest import REPO, LiveServer

LEDGERD = Path(sys.executable).parent / "ledgerd"


def run_ledgerd(*args: str, url: str | None = None, stdin: bytes | Path | None = None,
                env: dict[str, str] | None = None, cwd: Path = REPO,
                timeout_s: float = 120) -> subprocess.CompletedProcess[bytes]:
    """``ledgerd ARGS`` (the console script); stdin is a pipe fed with ``stdin``'s bytes,
    or the file at ``stdin``; stdout and stderr are pipes."""
    assert LEDGERD.exists(), f"{LEDGERD} missing: run `make install`"
    base = {k: v for k, v in os.environ.items()
            if not k.startswith(("LEDGERD_", "AWS_"))} if env is None else env
    if url is not None:
        base = {**base, "LEDGERD_URL": url}
    command = [str(LEDGERD), *args]
    if isinstance(stdin, Path):
        with stdin.open("rb") as source:
            return subprocess.run(command, stdin=source, capture_output=True, env=base,
                                  cwd=cwd, timeout=timeout_s, check=False)
    return subprocess.run(command, input=stdin, capture_output=True, env=base, cwd=cwd,
                          timeout=timeout_s, check=False)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """A live server (SMALL settings: MAX_BATCH_SIZE is 2 MiB - 8 KiB, entries
    up to 256 KiB) with an admin token."""
    live = LiveServer(tmp_path_factory.mktemp("cli") / "data",
                      {"admin_token": "cli-token"}).start()
    try:
        yield live
    finally:
        live.stop()


class LossyProxy:
    """An HTTP proxy in front of a server that loses the answer of chosen batch appends.

    A fault a real server cannot be asked to produce on cue: the connection breaks
    after the batch request was (``forward=True``) or was not (``forward=False``)
    passed on.  ``lose`` holds the 0-based numbers of batch requests to break.
    """

    def __init__(self, upstream: str, lose: dict[int, bool]) -> None:
        self.lose = dict(lose)
        self.batches_seen = 0
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                self._relay()

            def do_POST(self) -> None:
                self._relay()

            def _relay(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length", 0)))
                if self.path.split("?")[0].endswith(("/entries/batch", "/entries/frames")):
                    number = proxy.batches_seen
                    proxy.batches_seen += 1
                    if number in proxy.lose:
                        if proxy.lose[number]:
                            self._upstream(body)
                        self.close_connection = True  # no answer: the client sees a reset
                        return
                status, headers, content = self._upstream(body)
                self.send_response(status)
                for name, value in headers:
                    self.send_header(name, value)
                self.send_header("content-length", str(len(content)))
                self.end_headers()
                self.wfile.write(content)

            def _upstream(self, body: bytes) -> tuple[int, list[tuple[str, str]], bytes]:
                skip = {"host", "content-length", "transfer-encoding", "connection"}
                headers = {k: v for k, v in self.headers.items() if k.lower() not in skip}
                response = httpx.request(self.command, upstream + self.path, content=body,
                                         headers=headers, timeout=60)
                kept = [(k, v) for k, v in response.headers.items()
                        if k.lower() not in skip | {"content-encoding", "date", "server"}]
                return response.status_code, kept, response.content

        self._http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._http.server_address[1]}"
        self._thread = threading.Thread(target=self._http.serve_forever, daemon=True)

    def __enter__(self) -> LossyProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._http.shutdown()
        self._http.server_close()
