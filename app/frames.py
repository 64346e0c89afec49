"""Batch bodies of ``application/x-ledgerd-frames`` split as they arrive (the format
and its codec: ``common.frames``)."""

from __future__ import annotations

from collections.abc import AsyncIterable

from common.frames import UploadSplitter


async def decode_upload(chunks: AsyncIterable[bytes], *, count_max: int,
                        size_max: int) -> list[bytes]:
    """Split a batch body into payloads as its chunks arrive: each payload is copied
    once, out of the chunks, and the body is never joined.  Refuses a cut frame,
    too many frames (BadRequest) or one larger than ``size_max`` (EntryTooLarge)
    as soon as it shows, without reading on."""
    splitter = UploadSplitter(count_max=count_max, size_max=size_max)
    payloads: list[bytes] = []
    async for chunk in chunks:
        payloads += splitter.feed(chunk)
    splitter.finish()
    return payloads
