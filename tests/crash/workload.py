"""Self-checking payloads shared by the crash-test writer and its verifier.

A payload is ``token | pseudo-random bytes`` where the bytes are a pure
function of the token, so the verifier can tell an acknowledged entry, an
entry that reached the disk without its ack being seen, and garbage apart.
"""

from __future__ import annotations

import random

SIZES = (0, 10, 100, 1000, 5000, 20000)


def make_payload(token: str) -> bytes:
    rng = random.Random(token)
    return token.encode() + b"|" + rng.randbytes(rng.choice(SIZES))


def token_of(payload: bytes) -> str:
    """The token a well-formed payload starts with; ValueError for garbage."""
    token, sep, _ = payload.partition(b"|")
    if not sep:
        raise ValueError("payload has no token separator")
    text = token.decode()
    if make_payload(text) != payload:
        raise ValueError(f"payload for token {text!r} does not match its generator")
    return text
