"""Bridges from the engine's threads and futures to the event loop the node's
API runs on: blocking engine calls go to worker threads, durable outcomes are
awaited without holding one."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import weakref
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, ParamSpec, TypeVar

import anyio.to_thread

from common.errors import WouldBlock
from ledger import Pending

P = ParamSpec("P")
T = TypeVar("T")


async def blocking(func: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """Run a blocking engine call on a worker thread, never on the event loop."""
    return await anyio.to_thread.run_sync(lambda: func(*args, **kwargs))


class _Completions:
    """Futures resolved on another thread (the journal's), handed to one
    event loop in batches.  ``asyncio.wrap_future`` wakes the loop once per future
    (a ``call_soon_threadsafe``: a write to its self-pipe and a pass of the loop);
    a group commit resolves tens of adds at once, so here the first of them
    schedules one drain and the rest join it."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._done: deque[tuple[Future[Any], asyncio.Future[None]]] = deque()
        self._lock = threading.Lock()
        self._scheduled = False

    def waiter(self, future: Future[Any]) -> asyncio.Future[None]:
        waiter: asyncio.Future[None] = self._loop.create_future()
        future.add_done_callback(lambda done: self._resolved(done, waiter))
        return waiter

    def _resolved(self, future: Future[Any], waiter: asyncio.Future[None]) -> None:
        self._done.append((future, waiter))
        with self._lock:
            if self._scheduled:
                return
            self._scheduled = True
        with contextlib.suppress(RuntimeError):  # a closed loop: nobody waits any more
            self._loop.call_soon_threadsafe(self._drain)

    def _drain(self) -> None:
        with self._lock:
            self._scheduled = False
        while self._done:
            future, waiter = self._done.popleft()
            if waiter.done():  # cancelled: the request went away
                continue
            error = future.exception()
            if error is None:
                waiter.set_result(None)
            else:
                waiter.set_exception(error)


_COMPLETIONS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Completions] = (
    weakref.WeakKeyDictionary())


def durable(future: Future[Any]) -> asyncio.Future[None]:
    """An asyncio future of the running loop, done when ``future`` is."""
    loop = asyncio.get_running_loop()
    completions = _COMPLETIONS.get(loop)
    if completions is None:
        completions = _COMPLETIONS[loop] = _Completions(loop)
    return completions.waiter(future)


async def settled(pending: Pending[T]) -> T:
    """Await a pending engine call without holding a thread."""
    if not pending.done():
        await durable(pending.future)
    return pending.result()


async def settle(func: Callable[P, Pending[T]], *args: P.args, **kwargs: P.kwargs) -> T:
    """Call an engine method that returns a Pending (it may block briefly for
    space or scrypt) on a worker thread, then await it without holding a thread."""
    pending = await anyio.to_thread.run_sync(lambda: func(*args, **kwargs))
    return await settled(pending)


async def settle_now(call: Callable[[bool], Pending[T]]) -> T:
    """:func:`settle` for an engine call taking ``block`` (adds): ``call(False)``
    runs right here on the event loop, sparing a worker-thread hop per add, since
    the common case waits for nothing; when it would wait (scrypt for a password
    not yet verified, a read-back for an idempotent retry, full caches) it raises
    WouldBlock having changed nothing, and ``call(True)`` runs on a worker thread."""
    try:
        pending = call(False)
    except WouldBlock:
        pending = await anyio.to_thread.run_sync(call, True)
    return await settled(pending)
