"""End to end: two runs on penguins that differ only by their training seed. The second is scored against the
first's published model on the same eval rows; their paired difference is noise, so it is not blessed (the
default `blessing.baseline_test=paired`) and LATEST still names the first. The first's summary holds the bootstrap
interval of its accuracy.

Slow (two pipeline runs): `pytest -m "not slow"` skips it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from estimator_lib import release

pytestmark = pytest.mark.slow

TPU_PIPELINE = os.path.join(os.path.dirname(sys.executable), "tpu-pipeline")


def run_local(output: str, *args: str) -> dict:
    """`tpu-pipeline run-local --output OUTPUT ARGS...`, which must succeed: its summary."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    command = [TPU_PIPELINE, "run-local", "--output", output, "--set", "prepare.num_workers=1", *args]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=900, env=env, check=False)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    with open(os.path.join(output, "summary.json"), encoding="utf-8") as f:
        return json.load(f)


def test_a_second_run_differing_only_by_seed_is_not_called_an_improvement(tmp_path):
    first = run_local(str(tmp_path / "first"), "--set", "training.seed=1")
    root = os.path.join(str(tmp_path / "first"), "published")
    assert first["export"]["published"] is True
    accuracy, interval = first["metrics"]["accuracy"], first["intervals"]["metrics"]["accuracy"]
    assert interval["value"] == accuracy and interval["low"] <= accuracy <= interval["high"]
    assert interval["low"] < interval["high"]
    assert (first["intervals"]["replicates"], first["intervals"]["seed"], first["intervals"]["baseline"]) == (
        1000,
        0,
        None,
    )
    latest_before = release.latest(root)

    second = run_local(str(tmp_path / "second"), "--publish-root", root, "--set", "training.seed=2")
    assert second["blessing"]["baseline_uri"] == latest_before.uri
    paired = second["intervals"]["baseline"]
    assert paired["metric"] == "accuracy" and paired["verdict"] == "no different"
    assert paired["low"] <= 0 <= paired["high"]
    assert second["blessed"] is False
    assert second["blessing"]["reasons"] == [
        f"vs baseline {first['metrics']['accuracy']:.4f}: difference {paired['difference']:+.4f} "
        f"[{paired['low']:+.4f}, {paired['high']:+.4f}] at 0.95, not better beyond the noise "
        "(blessing.baseline_test=paired; 'plain' compares the point values)"
    ]
    assert second["export"]["published"] is False
    assert release.latest(root) == latest_before
