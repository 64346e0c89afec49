"""How a long-running ledgerd process keeps Python's garbage collector out of
its latency: :func:`objects_frozen_out_of_gc`, used by the service's lifespan
and by the benchmarks that measure the engine as the service runs it."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

# Allocations (net) between two young-generation passes of Python's collector.
YOUNG_COLLECTION_THRESHOLD = 10_000


@contextmanager
def objects_frozen_out_of_gc() -> Iterator[None]:
    """What exists now (modules, the app, the bookie's ledger table) lives as long
    as the service.  Left to Python's collector, each full pass walks all of it,
    every few seconds under load, stalling every add; frozen, the passes walk
    only what requests create.  A request allocates a few hundred objects that die
    with it; a young pass every 700 of them (the default) costs single adds a
    measurable share of their rate (docs/benchmarks.md), so passes are spaced out."""
    gc.collect()
    gc.freeze()
    thresholds = gc.get_threshold()
    gc.set_threshold(YOUNG_COLLECTION_THRESHOLD, *thresholds[1:])
    try:
        yield
    finally:
        gc.set_threshold(*thresholds)
        gc.unfreeze()  # torn down in a longer-lived process (tests, benchmarks)
