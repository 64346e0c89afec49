"""RetryingObjectStore: transient failures retried with backoff, the last one
loud, permanent ones at once, listings resumed after the last item handed out.
The failures are injected at exact requests by ``FailOnCue`` (FAULT
INJECTION: a real server does not fail on demand) over the in-memory bucket."""

from __future__ import annotations

from typing import Any

import pytest

from offload import PendingUpload, RemoteStorageError, RetryingObjectStore

from .conftest import offload_settings
from .faulty_store import FailOnCue
from .memory_store import MemoryObjectStore


def _store(inner: Any, delays: list[float], attempts: int = 3) -> RetryingObjectStore:
    settings = offload_settings("memory", None, retry_attempts_max=attempts,
                                retry_backoff_s_initial=0.1, retry_backoff_s_max=0.3)
    return RetryingObjectStore(inner, settings, sleep=delays.append)


def test_transient_failures_are_retried_with_backoff() -> None:
    memory, delays = MemoryObjectStore(), []
    store = _store(FailOnCue(memory, "put_object", times=2), delays)
    store.put_object("k", b"v")
    assert memory.data("k") == b"v"
    assert len(delays) == 2 and 0 <= delays[0] <= 0.1 and 0 <= delays[1] <= 0.2
    stats = store.statistics()
    assert stats["retries"] == 2 and stats["failures"] == 0 and stats["requests_put"] == 1


def test_the_last_failure_is_loud() -> None:
    delays: list[float] = []
    store = _store(FailOnCue(MemoryObjectStore(), "head_object", times=9), delays)
    with pytest.raises(RemoteStorageError) as failed:
        store.head_object("k")
    assert failed.value.attempts == 3 and failed.value.operation == "head_object"
    assert str(failed.value) == ("S3 head_object of 'k' failed after 3 attempt(s): "
                                 "SlowDown (HTTP 503): cue")
    assert len(delays) == 2 and store.statistics()["failures"] == 1


def test_refusals_are_not_retried() -> None:
    delays: list[float] = []
    store = _store(MemoryObjectStore(), delays)
    store.put_object("k", b"v")
    with pytest.raises(RemoteStorageError, match="InvalidRange"):
        store.get_range("k", 5, 6)
    assert delays == [] and store.statistics()["failures"] == 1


def test_a_listing_resumes_after_the_last_item() -> None:
    memory = MemoryObjectStore(list_page_size=2)
    keys = [f"p/{n}" for n in range(7)]
    for key in keys:
        memory.put_object(key, b"")
    cue = FailOnCue(memory, "list_objects", times=2, after_items=3)
    store = _store(cue, [])
    assert [info.key for info in store.list_objects("p/")] == keys
    assert cue.listed_after == [None, "p/2", "p/5"]


def test_list_parts_resumes_after_the_last_part() -> None:
    memory = MemoryObjectStore(list_page_size=1)
    upload_id = memory.create_multipart_upload("seg")
    for number in range(1, 6):
        memory.upload_part("seg", upload_id, number, b"x")
    cue = FailOnCue(memory, "list_parts", times=1, after_items=2)
    store = _store(cue, [])
    assert [p.part_number for p in store.list_parts("seg", upload_id)] == [1, 2, 3, 4, 5]
    assert cue.listed_after == [0, 2]


def test_an_uploads_listing_starts_over_without_repeating_itself() -> None:
    memory = MemoryObjectStore(list_page_size=1)
    ids = [memory.create_multipart_upload("a/seg") for _ in range(3)]
    cue = FailOnCue(memory, "list_multipart_uploads", times=1, after_items=2)
    store = _store(cue, [])
    assert list(store.list_multipart_uploads("a/")) == [PendingUpload("a/seg", i) for i in ids]
    assert cue.calls["list_multipart_uploads"] == 2
