"""``tools.add_path`` reports the files one add runs through, from a real server.

Standalone only (the cluster half needs etcd and three nodes, and runs the same
profiler): the profiler must see the add's own layers, and nothing of the
warm-up or the creation, which ran before it was switched on.
"""

from __future__ import annotations

from pathlib import Path

from tools.add_path import standalone


def test_one_standalone_add_runs_through_each_layer_of_the_write_path(tmp_path: Path) -> None:
    files = standalone(tmp_path)["standalone"]
    for layer in ("app/routes_ledgers.py", "node/_ledgers.py", "ledger/_bookie.py",
                  "ledger/_writes.py", "ledger/_appender.py", "journal/_journal.py"):
        assert layer in files, files
    # Not on an add's path: the create (before the window) and the read routes.
    assert "cli/_server.py" not in files
    assert not any("/.venv/" in f or f.startswith("/") for f in files), files
