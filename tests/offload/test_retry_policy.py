"""The retry decision table and the backoff (no server needed)."""

from __future__ import annotations

import random

import pytest
from botocore.exceptions import (
    ClientError,
    ConnectionClosedError,
    EndpointConnectionError,
    IncompleteReadError,
    NoCredentialsError,
    ReadTimeoutError,
    ResponseStreamingError,
)

from offload._retry import Verdict, backoff_s, classify, failed_retry_delay_s


def _client_error(code: str, status: int) -> ClientError:
    return ClientError({"Error": {"Code": code, "Message": "m"},
                        "ResponseMetadata": {"HTTPStatusCode": status}}, "Op")


@pytest.mark.parametrize(
    ("exc", "verdict"),
    [
        (_client_error("SlowDown", 503), Verdict.RETRY),
        (_client_error("ServiceUnavailable", 503), Verdict.RETRY),
        (_client_error("InternalError", 500), Verdict.RETRY),
        (_client_error("Whatever", 502), Verdict.RETRY),  # any 5xx
        (_client_error("Throttling", 400), Verdict.RETRY),
        (_client_error("RequestTimeout", 400), Verdict.RETRY),
        (_client_error("TooManyRequests", 429), Verdict.RETRY),
        (_client_error("BadDigest", 400), Verdict.RETRY),
        (EndpointConnectionError(endpoint_url="http://s3"), Verdict.RETRY),
        (ConnectionClosedError(endpoint_url="http://s3"), Verdict.RETRY),
        (ReadTimeoutError(endpoint_url="http://s3"), Verdict.RETRY),
        (ResponseStreamingError(error="reset"), Verdict.RETRY),
        (IncompleteReadError(actual_bytes=1, expected_bytes=2), Verdict.RETRY),
        (_client_error("NoSuchKey", 404), Verdict.NOT_FOUND),
        (_client_error("404", 404), Verdict.NOT_FOUND),  # HEAD has no body, just the status
        (_client_error("NoSuchUpload", 404), Verdict.NO_UPLOAD),
        (_client_error("AccessDenied", 403), Verdict.FAIL),
        (_client_error("NoSuchBucket", 404), Verdict.FAIL),
        (_client_error("EntityTooSmall", 400), Verdict.FAIL),
        (NoCredentialsError(), Verdict.FAIL),
        (ValueError("a bug"), Verdict.FAIL),
    ],
)
def test_classify(exc: BaseException, verdict: Verdict) -> None:
    assert classify(exc) is verdict


def test_backoff_is_jittered_exponential_and_capped() -> None:
    rng = random.Random(1)
    for attempt, ceiling in [(1, 0.1), (2, 0.2), (3, 0.4), (10, 5.0)]:
        samples = [backoff_s(attempt, initial_s=0.1, max_s=5.0, rng=rng) for _ in range(200)]
        assert all(0 <= s <= ceiling for s in samples)
        assert max(samples) > ceiling * 0.8  # full jitter uses the whole range


def test_failed_offloads_wait_longer_each_time_up_to_the_cap() -> None:
    rng = random.Random(2)
    for failures, ceiling in [(0, 30.0), (1, 30.0), (2, 60.0), (3, 120.0), (7, 1800.0),
                              (40, 1800.0)]:
        samples = [failed_retry_delay_s(failures, initial_s=30.0, max_s=1800.0, rng=rng)
                   for _ in range(200)]
        # Half fixed, half jitter: never sooner than half the schedule.
        assert all(ceiling / 2 <= s <= ceiling for s in samples)
        assert max(samples) - min(samples) > ceiling * 0.3
