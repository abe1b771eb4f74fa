"""Bootstrap intervals: each replicate's metric is the metric of the resampled rows, by its one definition; the
paired difference with the baseline and its verdict; the same bytes under every NumPy kernel setting."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from numpy.core._multiarray_umath import __cpu_dispatch__, __cpu_features__

from estimator_lib.config import BlessingConfig
from estimator_lib.evaluation import Scores, Truth, compute_metrics
from estimator_lib.evaluation.intervals import AUC_MIN_REPLICATES, _auc_replicates, bootstrap_intervals

CLASSES = ("a", "b", "c")


def classification(rows: int, seed: int) -> tuple:
    """Truth of `rows` rows over three classes and two models' scores, both informative, neither perfect."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 3, rows)
    truth = Truth(tuple(f"k{i}" for i in range(rows)), np.array([CLASSES[i] for i in labels], dtype=object), CLASSES)
    models = []
    for _ in range(2):
        logits = rng.normal(size=(rows, 3))
        logits[np.arange(rows), labels] += 1.0
        probabilities = np.round(np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True), 2)  # ties, as real
        predicted = np.array([CLASSES[i] for i in probabilities.argmax(axis=1)], dtype=object)
        models.append(Scores(predicted, probabilities))
    return truth, models[0], models[1]


def regression(rows: int, seed: int) -> tuple:
    rng = np.random.default_rng(seed)
    labels = rng.normal(size=rows)
    truth = Truth(tuple(f"k{i}" for i in range(rows)), labels)
    return truth, Scores(labels + rng.normal(size=rows)), Scores(labels + 1.5 * rng.normal(size=rows))


def resampled(truth: Truth, scores: Scores, rows: np.ndarray) -> tuple:
    keys = tuple(truth.keys[i] for i in rows)
    probabilities = None if scores.probabilities is None else scores.probabilities[rows]
    return Truth(keys, truth.labels[rows], truth.classes), Scores(scores.predicted[rows], probabilities)


def direct(truth: Truth, candidate: Scores, baseline: Scores, replicates: int, seed: int, confidence: float) -> dict:
    """The intervals computed the plain way: each replicate's rows drawn at once, every model's metrics by
    `compute_metrics` on those rows, percentiles by `np.quantile`."""
    draws = np.random.default_rng(seed).integers(0, len(truth.keys), size=(replicates, len(truth.keys)))
    per_model = [[compute_metrics(*resampled(truth, s, rows)) for rows in draws] for s in (candidate, baseline)]
    quantiles = [(1 - confidence) / 2, (1 + confidence) / 2]
    out = {}
    for name in per_model[0][0]:
        values = np.array([m[name] for m in per_model[0]])
        out[name] = [float(q) for q in np.quantile(values[~np.isnan(values)], quantiles)]
    return out, per_model


@pytest.mark.parametrize("data", [classification, regression])
def test_each_replicate_is_the_metric_of_the_resampled_rows_to_the_bit(data):
    truth, candidate, baseline = data(150, seed=1)
    config = BlessingConfig(bootstrap_replicates=100, bootstrap_seed=7, confidence=0.9)
    values, baseline_values = compute_metrics(truth, candidate), compute_metrics(truth, baseline)
    got = bootstrap_intervals(config, truth, candidate, values, baseline, baseline_values)
    expected, per_model = direct(truth, candidate, baseline, 100, 7, 0.9)
    assert {name: [m["low"], m["high"]] for name, m in got["metrics"].items()} == expected
    assert {name: m["value"] for name, m in got["metrics"].items()} == values
    assert (got["confidence"], got["replicates"], got["seed"]) == (0.9, 100, 7)
    metric = config.comparison_for(truth.task)
    sign = 1.0 if config.higher_is_better(metric) else -1.0
    differences = np.array([sign * (c[metric] - b[metric]) for c, b in zip(*per_model)])
    low, high = (float(q) for q in np.quantile(differences, [(1 - 0.9) / 2, (1 + 0.9) / 2]))
    assert got["baseline"] == {
        "metric": metric,
        "difference": sign * (values[metric] - baseline_values[metric]),
        "low": low,
        "high": high,
        "verdict": "better" if low > 0 else "worse" if high < 0 else "no different",
    }
    assert got["baseline"]["low"] <= got["baseline"]["difference"] <= got["baseline"]["high"]


def test_the_same_seed_gives_the_same_bytes_and_another_seed_other_intervals():
    truth, candidate, baseline = classification(60, seed=2)
    values, baseline_values = compute_metrics(truth, candidate), compute_metrics(truth, baseline)

    def run(seed: int) -> str:
        config = BlessingConfig(bootstrap_replicates=200, bootstrap_seed=seed)
        return json.dumps(bootstrap_intervals(config, truth, candidate, values, baseline, baseline_values))

    assert run(0) == run(0)
    assert run(0) != run(1)
    assert json.loads(run(0))["auc_replicates"] == 200


def test_paired_verdicts_are_signed_in_the_metrics_direction():
    """Identical models differ by exactly zero on every resample; a model right where the other is wrong is
    better (accuracy: higher is better; rmse: lower is better, so its smaller error counts positive)."""
    truth = Truth(tuple(f"k{i}" for i in range(40)), np.array(["a", "b"] * 20, dtype=object), ("a", "b"))
    right = Scores(truth.labels.copy(), np.tile([[0.8, 0.2], [0.2, 0.8]], (20, 1)))
    wrong = Scores(truth.labels[::-1].copy(), np.tile([[0.2, 0.8], [0.8, 0.2]], (20, 1)))
    config = BlessingConfig(bootstrap_replicates=100)
    same = bootstrap_intervals(
        config, truth, right, compute_metrics(truth, right), right, compute_metrics(truth, right)
    )
    assert same["baseline"] == {
        "metric": "accuracy",
        "difference": 0.0,
        "low": 0.0,
        "high": 0.0,
        "verdict": "no different",
    }
    better = bootstrap_intervals(
        config, truth, right, compute_metrics(truth, right), wrong, compute_metrics(truth, wrong)
    )
    assert better["baseline"] == {"metric": "accuracy", "difference": 1.0, "low": 1.0, "high": 1.0, "verdict": "better"}
    worse = bootstrap_intervals(
        config, truth, wrong, compute_metrics(truth, wrong), right, compute_metrics(truth, right)
    )
    assert worse["baseline"]["verdict"] == "worse" and worse["baseline"]["difference"] == -1.0
    numbers = Truth(truth.keys, np.arange(40, dtype=np.float64))
    close, far = Scores(numbers.labels + 0.5), Scores(numbers.labels + 2.0)
    by_rmse = bootstrap_intervals(
        config, numbers, close, compute_metrics(numbers, close), far, compute_metrics(numbers, far)
    )
    assert by_rmse["baseline"] == {"metric": "rmse", "difference": 1.5, "low": 1.5, "high": 1.5, "verdict": "better"}
    assert set(by_rmse["metrics"]) == {"rmse", "mae", "r2"} and "auc_replicates" not in by_rmse
    assert bootstrap_intervals(config, numbers, close, compute_metrics(numbers, close))["baseline"] is None


def test_auc_uses_the_first_replicates_on_large_eval_splits():
    def truth(rows: int, classes: tuple) -> Truth:
        return Truth(tuple(range(rows)), np.array([classes[0]] * rows, dtype=object), classes)

    assert _auc_replicates(truth(10_000, ("a", "b")), 1000) == 1000  # 10,000,000 row draws
    assert _auc_replicates(truth(5_000, CLASSES), 1000) == 666  # a pass per class
    assert _auc_replicates(truth(200_000, ("a", "b")), 1000) == AUC_MIN_REPLICATES == 100
    assert _auc_replicates(truth(200_000, ("a", "b")), 100) == 100


CROSS_KERNEL = textwrap.dedent(
    """
    import json, sys
    sys.path.insert(0, {here!r})
    from test_intervals import classification, regression
    from estimator_lib.config import BlessingConfig
    from estimator_lib.evaluation import compute_metrics
    from estimator_lib.evaluation.intervals import bootstrap_intervals
    out = []
    for data in (classification, regression):
        truth, candidate, baseline = data(3000, seed=5)
        config = BlessingConfig(bootstrap_replicates=100)
        values, baseline_values = compute_metrics(truth, candidate), compute_metrics(truth, baseline)
        out.append(bootstrap_intervals(config, truth, candidate, values, baseline, baseline_values))
    print(json.dumps(out))
    """
)


def test_the_intervals_are_the_same_bytes_without_numpys_vector_kernels():
    """NumPy picks its kernels by the processor's vector instructions: with every optional one disabled (an older
    machine's SSE3 kernels) the intervals are the same bytes."""
    disabled = " ".join(f for f in __cpu_dispatch__ if __cpu_features__.get(f))
    code = CROSS_KERNEL.format(here=os.path.dirname(os.path.abspath(__file__)))
    outputs = []
    for env in ({}, {"NPY_DISABLE_CPU_FEATURES": disabled}):
        done = subprocess.run(
            [sys.executable, "-c", code],
            env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", **env),
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        outputs.append(done.stdout.strip().splitlines()[-1])
    assert outputs[0] == outputs[1]
