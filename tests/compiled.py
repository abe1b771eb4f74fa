"""Compiling the pipeline in a process of its own, as users run `tpu-pipeline compile`.

KFP parses each component's source with `ast`. Late in a long test session that imported TensorFlow, CPython
3.11 can refuse that parse ("AST constructor recursion depth mismatch"), so tests that need a compiled spec get
it from `python -m pipelines compile`.
"""

from __future__ import annotations

import subprocess
import sys

import yaml
from repo import ROOT

# The compiled pipeline's stage tasks and the stage each runs: what the tests expect a compiled spec to hold.
STAGE_TASKS = {
    "resolve-inputs": "resolve",
    "prepare-data": "prepare",
    "train-model": "train",
    "evaluate-model": "evaluate",
    "batch-predict": "batch_predict",
    "export-model": "export",
    "check-serving": "serving_check",
    "release-model": "release",
}


def compiled_spec(output: str, *args: str) -> dict:
    """Compiles with `args` to `output` and returns the parsed pipeline spec."""
    command = [sys.executable, "-m", "pipelines", "compile", "--output", output, *args]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    with open(output, encoding="utf-8") as f:
        return yaml.safe_load(f)
