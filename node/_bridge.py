"""Bridges from the engine's threads and futures to the event loop the node's
API runs on: blocking engine calls go to worker threads, durable outcomes are
awaited without holding one."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import ParamSpec, TypeVar

import anyio.to_thread

from common.errors import WouldBlock
from ledger import Pending

P = ParamSpec("P")
T = TypeVar("T")


async def blocking(func: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """Run a blocking engine call on a worker thread, never on the event loop."""
    return await anyio.to_thread.run_sync(lambda: func(*args, **kwargs))


async def settled(pending: Pending[T]) -> T:
    """Await a pending engine call without holding a thread."""
    if not pending.done():
        await asyncio.wrap_future(pending.future)
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
