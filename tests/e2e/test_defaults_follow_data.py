"""End to end: on a table wider than it is long, the default model is as good as the run's own linear reference.

600 rows of 1,000 numeric columns and a binary label drawn from a logistic model of 20 of the columns (seeded), as
issue 45 describes: with fixed defaults (l2 0.001, 100 epochs) the DNN reached 0.564 accuracy against the reference's
0.679. With nothing set, `JobConfig.for_data` sets the budget from the train split's rows and the l2 from the features
against the rows; the model must reach the reference's accuracy less one standard error of their paired per-row
difference, and beat its log loss. One pipeline run of the wide table (four minutes here: every graph of 1,000 inputs
takes seconds to build). Slow: `pytest -m "not slow"` skips it.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import numpy as np
import pytest

from estimator_lib.config.job import EXAMPLES_PER_SQRT_ROW

pytestmark = pytest.mark.slow

TPU_PIPELINE = os.path.join(os.path.dirname(sys.executable), "tpu-pipeline")
ROWS, COLUMNS, INFORMATIVE = 600, 1000, 20


def wide_csv(path: str) -> str:
    """ROWS x COLUMNS standard normals; the label is Bernoulli(sigmoid(8 * x_I . w / sqrt(20))) over INFORMATIVE
    columns I at seeded places, so a ridge logistic regression reaches about 0.67 accuracy (5-fold, scikit-learn)."""
    rng = np.random.default_rng(45)
    features = rng.normal(size=(ROWS, COLUMNS))
    logit = features[:, :INFORMATIVE] @ rng.normal(size=INFORMATIVE) / math.sqrt(INFORMATIVE) * 8.0
    label = (rng.random(ROWS) < 1.0 / (1.0 + np.exp(-logit))).astype(int)
    features = features[:, rng.permutation(COLUMNS)].round(4)
    with open(path, "w", encoding="utf-8") as f:
        f.write(",".join([f"x{i}" for i in range(COLUMNS)] + ["label"]) + "\n")
        for row, y in zip(features, label):
            f.write(",".join(map(str, row)) + f",{y}\n")
    return path


def test_the_default_model_of_a_wide_table_is_as_good_as_the_linear_reference(tmp_path):
    data, output = wide_csv(str(tmp_path / "wide.csv")), str(tmp_path / "out")
    command = [TPU_PIPELINE, "run-local", "--data", data, "--label", "label", "--output", output]
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    proc = subprocess.run(command, capture_output=True, text=True, timeout=1800, env=env, check=False)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    with open(os.path.join(output, "summary.json"), encoding="utf-8") as f:
        summary = json.load(f)
    with open(os.path.join(summary["artifacts"]["evaluate"], "blessing.json"), encoding="utf-8") as f:
        blessing = json.load(f)

    train_rows = summary["data"]["counts"]["train"]
    assert summary["model"]["budget"] == math.ceil(EXAMPLES_PER_SQRT_ROW * math.sqrt(train_rows) / 64)
    candidate, reference = blessing["candidate_metrics"], blessing["reference_metrics"]
    assert reference["accuracy"] > 0.6, blessing["reference"]  # the table has a signal a linear model finds
    # The tolerance: one standard error of the paired per-row difference, as the blessing measures it (0.031 over the
    # 140 eval rows, 4 rows), less than the blessing's own 0.02 + 1.64 of them. Measured: 0.657 to 0.671 over l2 and
    # dropout variants against 0.679 (0.564 with the old defaults: 3.7 of them below).
    tolerance = blessing["reference_errors"]["accuracy"]
    assert candidate["accuracy"] >= reference["accuracy"] - tolerance, (candidate, reference, tolerance)
    assert candidate["log_loss"] < reference["log_loss"]  # measured 0.60 against 1.08: probabilities, not just labels
    assert summary["blessed"] is True, blessing["reasons"]
