"""At most N tasks in flight on a shared executor; the submitter waits for room.

The submitter producing chunks blocks instead of queueing them, so an offload
holds at most ``limit`` chunks in flight plus the one being filled, however
large the ledger.  Each result is handed out once, by whichever of
:meth:`take_finished`, :meth:`as_finished` or :meth:`results` sees it first,
so one stage's results can feed the next stage while it is still running.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
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
            self._collect(timeout_s=None)
        self._pending.add(self._executor.submit(task))

    def take_finished(self) -> list[T]:
        """Results of the tasks finished so far and not yet handed out; never waits."""
        if self._pending:
            self._collect(timeout_s=0)
        taken, self._results = self._results, []
        return taken

    def as_finished(self) -> Iterator[T]:
        """Every result not yet handed out, each as soon as its task finishes."""
        while True:
            yield from self.take_finished()
            if not self._pending:
                return
            self._collect(timeout_s=None)

    def results(self) -> list[T]:
        """Wait for every task; the first failure is raised (after all finished,
        so no task still runs against an upload the caller is about to abort)."""
        return list(self.as_finished())

    def cancel(self) -> None:
        """Drop tasks not started yet and wait for the running ones."""
        for future in self._pending:
            future.cancel()
        wait(self._pending)
        self._pending = set()

    def _collect(self, *, timeout_s: float | None) -> None:
        """Move finished tasks' results over, after waiting up to ``timeout_s``
        (``None``: until one finishes) for at least one."""
        done, self._pending = wait(self._pending, timeout=timeout_s,
                                   return_when=FIRST_COMPLETED)
        failed = [f for f in done if f.exception() is not None]
        if failed:
            wait(self._pending)
            self._pending = set()
            raise failed[0].exception()  # type: ignore[misc]
        self._results.extend(f.result() for f in done)
