"""End to end: the embedded penguins with the species of the island Dream shuffled among its rows (its labels no
longer follow its measurements) through `tpu-pipeline run-local --slice island` (real KFP local runner, real
TensorFlow). Overall the model is still good enough for every overall check; the slice threshold blocks the
blessing and the verdict names the slice.

Slow (a whole pipeline run): `pytest -m "not slow"` skips it.
"""

from __future__ import annotations

import glob
import json
import os
import random
import subprocess
import sys

import pytest
import tensorflow as tf
from penguin_rows import penguin_rows, write_rows

pytestmark = pytest.mark.slow

TPU_PIPELINE = os.path.join(os.path.dirname(sys.executable), "tpu-pipeline")
FAST = ["--set", "training.train_steps=200", "--set", "prepare.num_workers=1"]
SHUFFLED = "Dream"  # Adelie and Chinstrap: shuffled, its rows are noise; the other islands' stay learnable


def shuffled_island_csv(path) -> str:
    rows = penguin_rows()
    island = [i for i, row in enumerate(rows) if row["island"] == SHUFFLED]
    species = [rows[i]["species"] for i in island]
    random.Random(7).shuffle(species)
    for i, label in zip(island, species):
        rows[i] = {**rows[i], "species": label}
    return write_rows(path, rows)


def test_a_degraded_slice_blocks_the_blessing_and_the_verdict_names_it(tmp_path):
    output = str(tmp_path / "out")
    command = [TPU_PIPELINE, "run-local", "--output", output, "--data", shuffled_island_csv(tmp_path / "p.csv")]
    command += ["--label", "species", *FAST, "--slice", "island"]
    command += ["--set", 'blessing.slice_thresholds={"accuracy": 0.85}']
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    proc = subprocess.run(command, capture_output=True, text=True, timeout=900, env=env, check=False)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    with open(os.path.join(output, "summary.json"), encoding="utf-8") as f:
        summary = json.load(f)
    assert summary["blessed"] is False and summary["export"]["published"] is False
    [reason] = summary["blessing"]["reasons"]  # the overall checks (trivial model, reference) hold
    assert reason.startswith(f"slice island={SHUFFLED} (") and " rows): accuracy=" in reason
    assert reason.endswith(" >= 0.8500 fails")
    slices = summary["slices"]
    assert slices["metric"] == "accuracy" and slices["failed"] == [f"island={SHUFFLED}"]
    assert (slices["count"], slices["min_rows"]) == (3, 20) and type(slices["count"]) is int
    assert slices["worst"][0]["name"] == f"island={SHUFFLED}"
    with open(slices["uri"], encoding="utf-8") as f:
        table = json.load(f)
    by_name = {e["name"]: e for e in table["slices"]}
    assert sorted(by_name) == ["island=Biscoe", "island=Dream", "island=Torgersen"]
    assert sum(e["rows"] for e in table["slices"]) == summary["dataset"]["counts"]["eval"]
    assert by_name["island=Dream"]["metrics"]["accuracy"] < 0.85 <= by_name["island=Biscoe"]["metrics"]["accuracy"]
    for entry in table["slices"]:  # a small slice is judged by its bootstrap interval, when that decides the bound
        low, high = table["intervals"][entry["name"]]["accuracy"] if entry["rows"] < 20 else (0.0, 1.0)
        assert entry["judged"] == (entry["rows"] >= 20 or not low <= 0.85 <= high)
    with open(summary["artifacts"]["report"], encoding="utf-8") as f:
        report = f.read().split('<table id="slice-table">')[1].split("</table>")[0]
    assert f"<td>island={SHUFFLED}</td>" in report and "FAILED" in report
    events = glob.glob(os.path.join(summary["tensorboard_logdir"], "eval", "events.out.tfevents.*"))
    tags = {v.tag for path in events for e in tf.compat.v1.train.summary_iterator(path) for v in e.summary.value}
    assert {f"slices/island={SHUFFLED}/accuracy", f"slices/island={SHUFFLED}/rows"} <= tags
