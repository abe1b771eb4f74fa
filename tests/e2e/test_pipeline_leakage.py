"""End to end: the embedded penguins with a leaked column (`leak`, a copy of the label `species`) through
`tpu-pipeline run-local` (real KFP local runner, real TensorFlow): not blessed, the reason naming `leak`, nothing
published; blessed and published when `blessing.allow_leakage` lists it.

Slow (a whole pipeline run each): `pytest -m "not slow"` skips them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from penguin_rows import penguin_rows, write_rows

pytestmark = pytest.mark.slow

TPU_PIPELINE = os.path.join(os.path.dirname(sys.executable), "tpu-pipeline")
FAST = ["--set", "training.train_steps=200", "--set", "prepare.num_workers=1"]


@pytest.fixture(scope="module")
def leaked_csv(tmp_path_factory) -> str:
    rows = [{**row, "leak": row["species"]} for row in penguin_rows()]
    return write_rows(tmp_path_factory.mktemp("data") / "penguins_leak.csv", rows)


def run_local(output: str, data: str, *args: str) -> dict:
    """`tpu-pipeline run-local` on `data` (label species), which must succeed: its summary."""
    command = [TPU_PIPELINE, "run-local", "--output", output, "--data", data, "--label", "species", *FAST, *args]
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    proc = subprocess.run(command, capture_output=True, text=True, timeout=900, env=env, check=False)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    with open(os.path.join(output, "summary.json"), encoding="utf-8") as f:
        return json.load(f)


def blessing_record(summary: dict) -> dict:
    with open(os.path.join(summary["artifacts"]["evaluate"], "blessing.json"), encoding="utf-8") as f:
        return json.load(f)


def test_a_leaked_column_is_not_blessed_and_the_reason_names_it(leaked_csv, tmp_path):
    summary = run_local(str(tmp_path / "out"), leaked_csv)
    assert summary["blessed"] is False and summary["export"]["published"] is False
    [reason] = summary["blessing"]["reasons"]  # every other check holds: the leak makes the model perfect
    assert reason.startswith("leakage: feature 'leak' alone predicts the label: ")
    assert "scores accuracy=1.0000 >= " in reason and "blessing.leakage_threshold=0.99" in reason
    assert reason.endswith("allow it: --set blessing.allow_leakage=leak")
    scores = blessing_record(summary)["leakage"]
    assert set(scores) == {"island", "bill_length_mm", "bill_depth_mm", "flipper_length_mm", "body_mass_g", "sex",
                           "year", "leak"}  # fmt: skip
    assert scores["leak"] == {"accuracy": 1.0, "skill": 1.0}
    assert max(s["skill"] for name, s in scores.items() if name != "leak") < 0.9


def test_an_allowed_leak_is_blessed_and_recorded(leaked_csv, tmp_path):
    summary = run_local(str(tmp_path / "out"), leaked_csv, "--set", "blessing.allow_leakage=leak")
    assert summary["blessed"] is True, summary["blessing"]
    assert summary["export"]["published"] is True
    record = blessing_record(summary)
    [leakage] = [c for c in record["checks"] if c["name"] == "leakage"]
    assert leakage["passed"] and leakage["message"].endswith("; allowed by blessing.allow_leakage")
    assert record["leakage"]["leak"] == {"accuracy": 1.0, "skill": 1.0}
