"""The README's library example runs exactly as printed, from the repository root."""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys

import pytest
from repo import ROOT

pytestmark = pytest.mark.slow


def _library_example() -> str:
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        readme = f.read()
    section = re.search(r"^## The library.*?$(.*?)(?=^## )", readme, re.S | re.M)
    assert section, "README.md has no '## The library' section"
    blocks = re.findall(r"^```python\n(.*?)^```", section.group(1), re.S | re.M)
    assert len(blocks) == 1, f"the library section should hold one python example, found {len(blocks)}"
    return blocks[0]


def test_the_library_example_runs_from_the_repository_root():
    out = os.path.join(ROOT, "out")  # where the example writes
    assert not os.path.exists(out), f"{out} exists already; remove it before running this test"
    try:
        run = subprocess.run(
            [sys.executable, "-c", _library_example()],
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": ROOT, "TF_CPP_MIN_LOG_LEVEL": "2"},
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert run.returncode == 0, run.stderr[-3000:]
        printed = run.stdout.strip().splitlines()[-1]
        metrics = ast.literal_eval(printed)  # the example prints a dict of floats
        assert metrics["accuracy"] > 0.9 and 0 < metrics["loss"] < 0.5
        assert os.path.exists(os.path.join(out, "prepared", "schema.json"))
    finally:
        shutil.rmtree(out, ignore_errors=True)
