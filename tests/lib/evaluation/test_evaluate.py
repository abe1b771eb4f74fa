"""The evaluate stage on tiny real tables: prepare, train (early stopping), evaluate and bless, as the pipeline does."""

from __future__ import annotations

import csv

import numpy as np
import pytest

from estimator_lib import estimator
from estimator_lib.config import BlessingConfig, JobConfig, PrepareConfig, TrainingConfig
from estimator_lib.data import prepare
from estimator_lib.evaluation import evaluate_and_bless


def write_table(path, label_rule, n=500, seed=11):
    """Four standard-normal features; the label is `label_rule(x, noise)`."""
    rng = np.random.RandomState(seed)
    x, noise = rng.normal(size=(n, 4)), rng.normal(size=n)
    y = label_rule(x, noise)
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["a", "b", "c", "d", "y"])
        writer.writerows([list(map(float, row)) + [float(t)] for row, t in zip(x, y)])
    return str(path)


def run_stages(tmp_path, label_rule):
    data = write_table(tmp_path / "table.csv", label_rule)
    prepared = prepare.prepare(
        PrepareConfig(data=(data,), label="y", task="regression", num_workers=1), str(tmp_path / "p")
    )
    job = JobConfig(training=TrainingConfig(max_epochs=20))
    model_dir = str(tmp_path / "model")
    estimator.train_prepared(job, prepared, model_dir)
    return evaluate_and_bless(job, prepared, model_dir, BlessingConfig(), None, str(tmp_path / "evaluation"))


def test_a_label_of_pure_noise_is_not_blessed_and_the_summary_says_why(tmp_path):
    evaluation = run_stages(tmp_path, lambda x, noise: noise)
    blessing = evaluation.blessing
    assert not blessing.blessed
    (reason,) = blessing.reasons
    n = blessing.num_examples
    assert reason.startswith(f"better than the trivial model (the mean: r2 0, plus 1.64^2/{n} rows for chance): r2=")
    assert reason.endswith(f"> {1.6448536269514722**2 / n:.4f} fails")
    assert blessing.summary() == "not blessed: " + reason
    assert blessing.reference_metrics["r2"] < 0.01  # the linear reference cannot explain noise either


def test_a_learnable_label_is_blessed_beside_its_linear_reference(tmp_path):
    evaluation = run_stages(tmp_path, lambda x, noise: 3 * x[:, 0] - 2 * x[:, 1] + 0.5 * noise)
    blessing = evaluation.blessing
    assert blessing.blessed, blessing.reasons
    assert [c.name for c in blessing.checks] == ["trivial", "reference"]
    assert blessing.reference.startswith("ridge least squares on the normalised features")
    assert blessing.reference_metrics["r2"] == pytest.approx(0.97, abs=0.02)  # noise 0.5 against signal 3.6
    assert blessing.candidate_metrics["r2"] >= blessing.reference_metrics["r2"] - 0.03
