"""Which S3 failures are worth another attempt, and how long to wait before it.

Kept apart from the client so the decision table is tested without a server:
throttling and 5xx answers, timeouts and broken connections are transient;
a missing key or upload is an answer, not a failure; anything else (403,
400, a bucket that does not exist) fails at once, because retrying the same
request cannot change it.
"""

from __future__ import annotations

import enum
import random

from botocore.exceptions import (
    ClientError,
    ConnectionError,
    HTTPClientError,
    IncompleteReadError,
)


class Verdict(enum.Enum):
    RETRY = "retry"
    NOT_FOUND = "not_found"
    NO_UPLOAD = "no_upload"
    FAIL = "fail"


_THROTTLING_CODES = frozenset({
    "SlowDown", "Throttling", "ThrottlingException", "RequestThrottled",
    "TooManyRequestsException", "RequestLimitExceeded", "RequestTimeout",
    "RequestTimeoutException", "InternalError", "ServiceUnavailable",
    # The body arrived damaged (Content-MD5 mismatch): sending it again helps.
    "BadDigest",
})
_NOT_FOUND_CODES = frozenset({"NoSuchKey", "404", "NotFound"})


def classify(exc: BaseException) -> Verdict:
    """What to do about ``exc`` raised by a botocore call (or reading its body)."""
    if isinstance(exc, ClientError):
        error = exc.response.get("Error", {})
        code = str(error.get("Code", ""))
        status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
        if code in _NOT_FOUND_CODES:
            return Verdict.NOT_FOUND
        if code == "NoSuchUpload":
            return Verdict.NO_UPLOAD
        if code in _THROTTLING_CODES or status >= 500 or status == 429:
            return Verdict.RETRY
        return Verdict.FAIL
    # Connection refused/reset, DNS, connect and read timeouts, a body cut short.
    if isinstance(exc, ConnectionError | HTTPClientError | IncompleteReadError):
        return Verdict.RETRY
    return Verdict.FAIL


def backoff_s(attempt: int, *, initial_s: float, max_s: float, rng: random.Random) -> float:
    """Full-jitter exponential backoff before retry number ``attempt`` (1-based).

    Jitter spreads the retries of many workers throttled at once (SlowDown
    hits every client of a bucket prefix together), so they do not return in
    lockstep and get throttled again.
    """
    ceiling = min(max_s, initial_s * (2 ** (attempt - 1)))
    return rng.uniform(0.0, ceiling)


def failed_retry_delay_s(failures: int, *, initial_s: float, max_s: float,
                         rng: random.Random) -> float:
    """Delay before the automatic retry of an offload that failed ``failures``
    times in a row: exponential, capped, with "equal" jitter (half fixed, half
    random), so a retry never comes much earlier than the schedule says, yet
    ledgers that failed together spread out."""
    ceiling = min(max_s, initial_s * (2 ** max(0, failures - 1)))
    return float(ceiling * rng.uniform(0.5, 1.0))


def describe(exc: BaseException) -> str:
    if isinstance(exc, ClientError):
        error = exc.response.get("Error", {})
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        return f"{error.get('Code', '?')} (HTTP {status}): {error.get('Message', '')}".strip()
    return f"{type(exc).__name__}: {exc}"
