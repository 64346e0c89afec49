"""An asyncio event loop on simulated time, for the seeded simulation.

The production driver (``cluster.Driver``) is asyncio code: it spawns a task per
call, sleeps between retries and reads ``loop.time()``.  To run it unchanged in a
deterministic simulation the loop itself is simulated (TigerBeetle's simulator
does the same with its time and I/O): nothing waits on a real clock — when no
callback is ready, time jumps to the next timer — and no selector or socket is
involved.  Every callback the loop runs (a timer, a task step, a future's
done-callback) is one *step*, after which ``after_step`` runs (the simulation
checks its invariants there).  An exception in any callback or task stops the
run and is raised from :meth:`SimulatedLoop.run_until`.

Determinism: callbacks run in the order they were scheduled, timers in time
order (ties in the heap's order, itself a function of the schedule), so one
seed gives one trace.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Callable, Coroutine
from typing import Any


class Deadlock(RuntimeError):
    """Nothing is ready and no timer is set: the simulated system cannot move."""


class _TimeJump:
    """Stands where a selector would: "waiting" ``timeout`` seconds moves the
    clock to the next timer at once."""

    def __init__(self, loop: SimulatedLoop) -> None:
        self._loop = loop

    def select(self, timeout: float | None) -> list[Any]:
        if timeout is None:
            raise Deadlock("nothing is ready and no timer is set")
        if timeout > 0:
            self._loop.advance(timeout)
        return []

    def close(self) -> None:
        pass


class SimulatedLoop(asyncio.BaseEventLoop):
    def __init__(self) -> None:
        super().__init__()
        self._now = 0.0
        self._selector = _TimeJump(self)
        self.steps = 0
        self.after_step: Callable[[], None] | None = None
        self._failure: BaseException | None = None
        self._shutting_down = False
        self.set_exception_handler(self._on_exception)

    # --- what BaseEventLoop asks of a concrete loop -------------------------------

    def time(self) -> float:
        return self._now

    def _process_events(self, event_list: list[Any]) -> None:
        pass

    def _write_to_self(self) -> None:
        pass

    # --- steps -------------------------------------------------------------------

    def advance(self, seconds: float) -> None:
        scheduled = self._scheduled  # type: ignore[attr-defined]
        target = self._now + seconds
        if scheduled:
            # Land exactly on the next timer, not a float's width before it.
            target = max(target, scheduled[0].when())
        self._now = target

    def call_soon(self, callback: Callable[..., Any], *args: Any,
                  context: contextvars.Context | None = None) -> asyncio.Handle:
        return super().call_soon(self._step, callback, *args, context=context)

    def call_at(self, when: float, callback: Callable[..., Any], *args: Any,
                context: contextvars.Context | None = None) -> asyncio.TimerHandle:
        return super().call_at(when, self._step, callback, *args, context=context)

    def _step(self, callback: Callable[..., Any], *args: Any) -> None:
        callback(*args)
        self.steps += 1
        if self.after_step is not None and self._failure is None:
            self.after_step()

    def spawn(self, coro: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        """A task whose failure stops the run (a task's exception is otherwise only
        reported when it is garbage-collected)."""
        task = self.create_task(coro)
        task.add_done_callback(self._task_done)
        return task

    def _task_done(self, task: asyncio.Task[None]) -> None:
        if not task.cancelled() and task.exception() is not None:
            self._fail(task.exception())

    def _on_exception(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        self._fail(context.get("exception") or RuntimeError(context.get("message")))

    def _fail(self, error: BaseException | None) -> None:
        if self._shutting_down:
            return
        if self._failure is None and error is not None:
            self._failure = error
        self.stop()

    # --- running -------------------------------------------------------------------

    def run_until(self, until_s: float, done: Callable[[], bool] | None = None) -> None:
        """Run every callback due up to simulated time ``until_s``, or until
        ``done()`` holds after a step; the first failure is raised."""
        stop = self.call_at(until_s, self.stop)
        after_step = self.after_step

        def step_then_test() -> None:
            if after_step is not None:
                after_step()
            if done is not None and done():
                self.stop()
        self.after_step = step_then_test
        try:
            self.run_forever()
        finally:
            self.after_step = after_step
            stop.cancel()
        if self._failure is not None:
            raise self._failure

    def shut_down(self) -> None:
        """Cancel what is still running, let it unwind (no checks), and close."""
        self.after_step = None
        self._shutting_down = True
        tasks = [t for t in asyncio.all_tasks(self) if not t.done()]
        for task in tasks:
            task.cancel()
        if tasks:
            self.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
        self.close()
