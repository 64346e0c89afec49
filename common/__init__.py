"""What every ledgerd package shares, importing nothing of the project.

- :mod:`common.errors` — the one error tree (every error ledgerd raises on purpose);
- :mod:`common.units` — ``KiB``, ``MiB``, ``GiB``, ``TiB``;
- :mod:`common.collector` — Python's collector kept out of a service's latency.
- :mod:`common.headers` — header values a client sends (``X-Ledger-Password``);
- :mod:`common.memory` — freed heap memory given back to the operating system;
- :mod:`common.states` — state machines: an enum and a table of checked moves.

This is the bottom layer: ``journal/``, ``entrylog/``, ``ledger/`` and everything
above them import it; it imports nothing of theirs (``tests/test_layers.py``).
"""
