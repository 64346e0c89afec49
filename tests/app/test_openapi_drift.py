"""The checked-in spec and generated client match the app (what CI's drift check runs)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from .conftest import REPO


def test_spec_is_up_to_date():
    result = subprocess.run(
        [sys.executable, "openapi/export.py", "--check"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr


def test_spec_check_reports_drift(tmp_path):
    stale = tmp_path / "openapi.json"
    stale.write_text("{}\n")
    result = subprocess.run(
        [sys.executable, "openapi/export.py", "--check", "--output", str(stale)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 1
    assert "out of date" in result.stderr and "+++" in result.stderr


def test_generated_client_is_up_to_date():
    # The generator and ruff of the interpreter running the tests.
    env = {**os.environ, "BIN": str(Path(sys.executable).parent)}
    result = subprocess.run(
        ["bash", "openapi/generate_client.sh", "--check"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert result.returncode == 0, result.stdout + result.stderr
