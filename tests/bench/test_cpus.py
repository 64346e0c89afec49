"""The benches' one-CPU runs hold what they say to the CPU they name: the
engine's threads (inherited affinity) and a server process (taskset)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading

from bench._harness import last_cpu, threads_on_cpus
from tools.local_server import ServerProcess


def _one_cpu() -> set[int]:
    cpus = os.sched_getaffinity(0)
    one = last_cpu()
    # On a one-CPU machine there is nothing to hold to: the benches run as usual.
    assert one == (max(cpus) if len(cpus) > 1 else None)
    return cpus if one is None else {one}


def test_threads_started_inside_inherit_the_cpus_and_the_caller_gets_its_own_back() -> None:
    before = os.sched_getaffinity(0)
    one = _one_cpu()
    seen: list[set[int]] = []
    with threads_on_cpus(one):
        thread = threading.Thread(target=lambda: seen.append(os.sched_getaffinity(0)))
        thread.start()
        thread.join()
        assert os.sched_getaffinity(0) == one
    assert seen == [one]
    assert os.sched_getaffinity(0) == before


def test_a_server_command_with_cpus_runs_on_them_only() -> None:
    one = _one_cpu()
    server = ServerProcess({}, cpus=one)
    probe = [sys.executable, "-c", "import os; print(sorted(os.sched_getaffinity(0)))"]
    out = subprocess.run(server.command(probe), capture_output=True, text=True, check=True)
    assert out.stdout.strip() == str(sorted(one))
    assert ServerProcess({}).command(probe) == probe
