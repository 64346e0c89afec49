"""The JSON batch body ``{"entries": [base64, ...]}``, parsed entry by entry (pure:
bytes in, payloads out).

A general JSON parser builds the whole document before anything can be checked:
a body of tiny strings (``"",`` is three bytes) is millions of Python objects.
:func:`parse_json_batch` reads only this one shape, decodes each string as it
goes and stops at the first entry over ``count_max``, so no body costs more than
``count_max + 1`` payloads.  It is CPU work: callers run it off the event loop.

:func:`json_batch_bytes_max` is the largest body a valid batch needs, so that the
transport can refuse a larger one before reading it.
"""

from __future__ import annotations

import binascii
import json
import re

from common.errors import BadRequest

# What the cap allows besides the base64 text: per entry its two quotes, a comma
# and whitespace (pretty-printers indent each entry on its own line); once, the
# envelope ``{"entries": [ ]}`` with whitespace.
_ENTRY_SEPARATOR_BYTES_MAX = 3 + 16
_ENVELOPE_BYTES_MAX = 256

_WHITESPACE = re.compile(rb"[ \t\n\r]*")
# The rest of a JSON string once its opening quote is read (escapes included).
_STRING_REST = re.compile(rb'(?:[^"\\]|\\.)*"', re.DOTALL)


class MalformedJson(ValueError):
    """Not JSON, or not the batch's shape; ``loc`` is where, as pydantic spells it."""

    def __init__(self, loc: tuple[str | int, ...], msg: str) -> None:
        super().__init__(msg)
        self.loc = loc
        self.msg = msg


def json_batch_bytes_max(batch_size_bytes_max: int, entry_count_max: int) -> int:
    """The largest body of a valid batch: ``batch_size_bytes_max`` payload bytes in
    ``entry_count_max`` entries.  Base64 turns ``k`` bytes into ``4 * ceil(k / 3)``
    characters, at most ``4 * (k + 2) / 3``, so n entries holding B bytes in all
    need at most ``4 * (B + 2n) / 3``.  Escaped characters (``\\/``) are not
    budgeted: base64 needs none."""
    base64_bytes = (4 * (batch_size_bytes_max + 2 * entry_count_max) + 2) // 3
    return (_ENVELOPE_BYTES_MAX + base64_bytes
            + entry_count_max * _ENTRY_SEPARATOR_BYTES_MAX)


def parse_json_batch(body: bytes | bytearray, *, count_max: int) -> list[bytes]:
    """The payloads of a JSON batch body.  Raises :class:`MalformedJson` for a body
    that is not JSON or not ``{"entries": [string, ...]}``, and BadRequest for a
    string that is not base64 and as soon as entry ``count_max + 1`` shows."""
    reader = _Reader(body)
    reader.expect(b"{", ())
    payloads: list[bytes] | None = None
    if not reader.take(b"}"):
        while True:
            key = reader.string(())
            reader.expect(b":", (key,))
            if key != "entries":
                raise MalformedJson((key,), "Extra inputs are not permitted")
            if payloads is not None:
                raise MalformedJson((key,), "entries given twice")
            payloads = reader.entries(count_max)
            if reader.take(b"}"):
                break
            reader.expect(b",", ())
    if payloads is None:
        raise MalformedJson(("entries",), "Field required")
    reader.end()
    return payloads


class _Reader:
    def __init__(self, body: bytes | bytearray) -> None:
        self._body = body
        self._view = memoryview(body)
        self._at = 0

    def _skip_whitespace(self) -> None:
        match = _WHITESPACE.match(self._body, self._at)
        assert match is not None  # the pattern matches the empty string
        self._at = match.end()

    def take(self, token: bytes) -> bool:
        """Consume ``token`` (after whitespace) if it comes next."""
        self._skip_whitespace()
        if self._body.startswith(token, self._at):
            self._at += len(token)
            return True
        return False

    def expect(self, token: bytes, loc: tuple[str | int, ...]) -> None:
        if not self.take(token):
            raise self._invalid(loc, f"expected {token.decode()!r}")

    def end(self) -> None:
        self._skip_whitespace()
        if self._at != len(self._body):
            raise self._invalid((), "trailing characters")

    def entries(self, count_max: int) -> list[bytes]:
        if not self.take(b"["):
            raise MalformedJson(("entries",), "Input should be a valid list")
        payloads: list[bytes] = []
        if self.take(b"]"):
            return payloads
        while True:
            index = len(payloads)
            if index == count_max:
                raise BadRequest(f"a batch holds at most {count_max} entries "
                                 "(MAX_BATCH_ENTRIES)")
            payloads.append(self._base64(index))
            if self.take(b"]"):
                return payloads
            self.expect(b",", ("entries", index))

    def string(self, loc: tuple[str | int, ...]) -> str:
        self._skip_whitespace()
        if not self._body.startswith(b'"', self._at):
            raise self._invalid(loc, "expected a string")
        start, end = self._string_span(loc)
        return self._unescape(start, end, loc)

    def _base64(self, index: int) -> bytes:
        loc: tuple[str | int, ...] = ("entries", index)
        start, end = self._string_span(loc)
        if self._body.find(b"\\", start, end) < 0:
            text = self._view[start:end]  # base64 needs no escapes: decode in place
        else:
            text = memoryview(self._unescape(start, end, loc).encode("utf-8"))
        try:
            return binascii.a2b_base64(text, strict_mode=True)
        except (binascii.Error, ValueError) as exc:
            raise BadRequest(f"entries[{index}] is not valid base64") from exc

    def _string_span(self, loc: tuple[str | int, ...]) -> tuple[int, int]:
        """Where the next string's characters are (quotes excluded)."""
        if not self.take(b'"'):
            if self._at == len(self._body):
                raise self._invalid(loc, "unexpected end")
            raise MalformedJson(loc, "Input should be a valid string")
        start = self._at
        end = self._body.find(b'"', start)
        if end >= 0 and self._body.find(b"\\", start, end) >= 0:
            match = _STRING_REST.match(self._body, start)
            end = -1 if match is None else match.end() - 1
        if end < 0:
            raise self._invalid(loc, "EOF while parsing a string")
        self._at = end + 1
        return start, end

    def _unescape(self, start: int, end: int, loc: tuple[str | int, ...]) -> str:
        try:
            text = json.loads(bytes(self._view[start - 1:end + 1]))
        except ValueError as exc:
            raise self._invalid(loc, "invalid string") from exc
        assert isinstance(text, str)
        return text

    def _invalid(self, loc: tuple[str | int, ...], what: str) -> MalformedJson:
        return MalformedJson(loc, f"Invalid JSON: {what} at byte {self._at}")
