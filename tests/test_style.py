"""The code's style: `ruff check` (the rules in pyproject.toml) and `ruff format --check` pass on the repository.

ruff comes with the `test` extra, pinned (another version formats differently); without it these tests fail,
they are not skipped, so a missing linter does not pass for clean code.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest
from repo import ROOT


def ruff(*args: str) -> subprocess.CompletedProcess:
    if importlib.util.find_spec("ruff") is None:
        pytest.fail(
            f"ruff is not installed for {sys.executable}: run `bash scripts/setup.sh` (ruff is in the `test` extra)"
        )
    return subprocess.run(
        [sys.executable, "-m", "ruff", *args, str(ROOT)], cwd=ROOT, capture_output=True, text=True, check=False
    )


def test_ruff_check_finds_nothing():
    done = ruff("check")
    assert done.returncode == 0, f"ruff check found problems:\n{done.stdout}{done.stderr}"


def test_the_code_is_ruff_formatted():
    done = ruff("format", "--check")
    assert done.returncode == 0, (
        f"ruff format --check: files to reformat (run `ruff format .`):\n{done.stdout}{done.stderr}"
    )
