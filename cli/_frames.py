"""Entries read from stdin as it arrives: lines, or upload frames (the format and
its codec are ``common.frames``, shared with the server and append streams)."""

from __future__ import annotations

from common.errors import BadRequest
from common.frames import UploadSplitter

from ._output import usage_error


class LineSplitter:
    """Lines (without their ``\\n``) out of bytes fed as they arrive; a last line
    without ``\\n`` counts too."""

    def __init__(self) -> None:
        self.rest = b""

    def feed(self, data: bytes) -> list[bytes]:
        lines = (self.rest + data).split(b"\n") if self.rest else data.split(b"\n")
        self.rest = lines.pop()
        return lines

    def finish(self) -> list[bytes]:
        rest, self.rest = self.rest, b""
        return [rest] if rest else []


class UploadFrameSplitter:
    """Payloads of upload frames out of stdin's bytes; a cut frame at the end is a
    usage error naming it."""

    def __init__(self) -> None:
        self._splitter = UploadSplitter()

    def feed(self, data: bytes) -> list[bytes]:
        return self._splitter.feed(data)

    def finish(self) -> list[bytes]:
        try:
            self._splitter.finish()
        except BadRequest as exc:
            raise usage_error(f"stdin: {exc}") from exc
        return []
