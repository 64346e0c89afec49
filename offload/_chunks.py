"""Cutting a segment's byte stream into chunks, and the MD5s S3 answers with (pure).

Chunks are cut at exact multiples of the chunk size, not at frame
boundaries: chunk ``k`` starts at byte ``k * chunk_size`` of the segment.  So
every chunk but the last is exactly ``chunk_size`` (>= 5 MiB), which makes
each one a valid non-final multipart part (part ``k + 1``), and the same
entries always give the same parts and bytes, which lets a restarted offload
keep the parts (or, in the chunk layout, the chunk objects) that a previous
attempt uploaded.
"""

from __future__ import annotations

import base64
import hashlib
import re
from typing import NamedTuple

_MD5_HEX = re.compile(r"[0-9a-f]{32}")
# What AWS and radosgw answer: the MD5 of one PUT, or the MD5 of the parts'
# binary MD5s followed by "-" and the part count for a multipart upload.
_S3_ETAG = re.compile(r"[0-9a-f]{32}(-[1-9][0-9]*)?")


class Chunk(NamedTuple):
    byte_position: int
    # The cutter's own buffer, handed over: nothing writes to it afterwards.
    data: bytearray


class ChunkCutter:
    """Accumulates bytes; hands out each chunk once bytes past its end arrive.

    Each chunk is one ``bytearray`` allocated at its full size and filled in
    place, so every byte of a segment is copied exactly once on its way to a
    PUT: no concatenated frames, no growing buffer that is sliced and shifted.
    """

    def __init__(self, chunk_size_bytes: int) -> None:
        self.chunk_size_bytes = chunk_size_bytes
        self._buffer = bytearray(chunk_size_bytes)
        self._filled_bytes = 0
        self._position = 0
        self.chunks_cut = 0

    def add(self, *pieces: bytes) -> list[Chunk]:
        """Append ``pieces`` (a frame header and its payload, say) in order."""
        cut: list[Chunk] = []
        for piece in pieces:
            view = memoryview(piece)
            while view:
                # Cut only once bytes past a full chunk arrive: a segment of
                # exactly one chunk stays a "small" segment, stored with one
                # PUT instead of a one-part multipart upload.
                if self._filled_bytes == self.chunk_size_bytes:
                    cut.append(self._hand_over(bytearray(self.chunk_size_bytes)))
                room = view[:self.chunk_size_bytes - self._filled_bytes]
                self._buffer[self._filled_bytes:self._filled_bytes + len(room)] = room
                self._filled_bytes += len(room)
                view = view[len(room):]
        self.chunks_cut += len(cut)
        return cut

    def finish(self) -> Chunk:
        """The last (possibly short, possibly empty) piece."""
        del self._buffer[self._filled_bytes:]
        return self._hand_over(bytearray())

    def _hand_over(self, next_buffer: bytearray) -> Chunk:
        chunk = Chunk(self._position, self._buffer)
        self._position += self._filled_bytes
        self._buffer, self._filled_bytes = next_buffer, 0
        return chunk


def md5_of(data: bytes | bytearray) -> tuple[str, str]:
    """``(hex, base64)`` MD5: hex to compare with ETags, base64 for Content-MD5."""
    digest = hashlib.md5(data, usedforsecurity=False).digest()
    return digest.hex(), base64.b64encode(digest).decode()


def is_md5(etag: str) -> bool:
    return _MD5_HEX.fullmatch(etag) is not None


def etag_matches(etag: str, md5_hex: str) -> bool:
    """Whether an ETag confirms these bytes.  Servers that do not use the MD5 as
    the ETag (encrypted objects) give no evidence either way: accepted, since
    Content-MD5 already made the server check the body on upload."""
    return etag == md5_hex or not is_md5(etag)


def multipart_etag(part_md5s_hex: list[str]) -> str:
    """The ETag S3 gives an object assembled from parts with these MD5s."""
    joined = b"".join(bytes.fromhex(md5_hex) for md5_hex in part_md5s_hex)
    return f"{hashlib.md5(joined, usedforsecurity=False).hexdigest()}-{len(part_md5s_hex)}"


def object_etag_matches(etag: str, expected: str) -> bool:
    """Whether an object's ETag confirms the bytes ``expected`` (an MD5, or a
    :func:`multipart_etag`) stands for.  An ETag of another shape (encrypted
    objects, other servers) gives no evidence either way: the size decides."""
    return etag == expected or _S3_ETAG.fullmatch(etag) is None
