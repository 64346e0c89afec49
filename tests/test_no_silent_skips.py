"""A test that needs a missing real part fails the run: skips are refused unless a
developer allows them (tests/conftest.py ``require`` and its session hook)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _run(probe: Path, *args: str, **env: str) -> int:
    environ = {k: v for k, v in os.environ.items() if k != "LEDGERD_ALLOW_SKIPS"}
    environ.update(env, PYTHONPATH=str(REPO))
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "tests.conftest",
                           *args, str(probe)], cwd=REPO, env=environ, capture_output=True,
                          check=False).returncode


def test_a_skipped_test_fails_the_run_unless_skips_are_allowed(tmp_path: Path) -> None:
    probe = tmp_path / "test_probe.py"
    probe.write_text("from tests.conftest import require\n\n"
                     "def test_needs_a_part():\n    require('no such part here')\n")
    assert _run(probe) == 1
    assert _run(probe, LEDGERD_ALLOW_SKIPS="1") == 0


def test_a_skip_in_a_worker_fails_the_run_as_make_test_runs_it(tmp_path: Path) -> None:
    """``make test`` runs pytest with two xdist workers: the hook sees their skips."""
    probe = tmp_path / "test_probe.py"
    probe.write_text("import pytest\n\ndef test_skips():\n    pytest.skip('no part')\n")
    assert _run(probe, "-n", "2") == 1
    assert _run(probe, "-n", "2", LEDGERD_ALLOW_SKIPS="1") == 0
