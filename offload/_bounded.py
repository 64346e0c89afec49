"""At most N tasks in flight on a shared executor; the submitter waits for room.

The submitter producing chunks blocks instead of queueing them, so an offload
holds at most ``limit`` chunks in flight plus the one being filled, however
large the ledger.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Executor, Future, wait
from typing import Generic, TypeVar

T = TypeVar("T")


class BoundedTasks(Generic[T]):
    def __init__(self, executor: Executor, limit: int) -> None:
        self._executor = executor
        self._limit = limit
        self._pending: set[Future[T]] = set()
        self._results: list[T] = []

    def submit(self, task: Callable[[], T]) -> None:
        while len(self._pending) >= self._limit:
            self._collect(FIRST_COMPLETED)
        self._pending.add(self._executor.submit(task))

    def results(self) -> list[T]:
        """Wait for every task; the first failure is raised (after all finished,
        so no task still runs against an upload the caller is about to abort)."""
        while self._pending:
            self._collect(FIRST_COMPLETED)
        return self._results

    def cancel(self) -> None:
        """Drop tasks not started yet and wait for the running ones."""
        for future in self._pending:
            future.cancel()
        wait(self._pending)
        self._pending = set()

    def _collect(self, mode: str) -> None:
        done, self._pending = wait(self._pending, return_when=mode)
        failed = [f for f in done if f.exception() is not None]
        if failed:
            wait(self._pending)
            self._pending = set()
            raise failed[0].exception()  # type: ignore[misc]
        self._results.extend(f.result() for f in done)
