"""The linear reference: its design matrix, its solvers against closed forms, and a fit on real TFRecords."""

from __future__ import annotations

import math

import numpy as np
import pytest
import synthetic

from estimator_lib.evaluation import compute_metrics, read_truth
from estimator_lib.evaluation import reference as ref


def small_design(n: int = 60, seed: int = 0):
    """Two numerics and two categoricals (3 and 4 buckets), and the same rows as a dense matrix."""
    rng = np.random.RandomState(seed)
    numeric = rng.normal(size=(n, 2))
    ids = np.stack([rng.randint(0, 3, n), 3 + rng.randint(0, 4, n)], axis=1)
    dense = np.zeros((n, 2 + 7 + 1))
    dense[:, :2] = numeric
    for j in range(2):
        dense[np.arange(n), 2 + ids[:, j]] = 1.0
    dense[:, -1] = 1.0
    return ref.Design(numeric, ids, 7), dense


def test_the_design_multiplies_like_its_dense_matrix():
    design, dense = small_design()
    w = np.random.RandomState(1).normal(size=(design.width, 3))
    g = np.random.RandomState(2).normal(size=(design.rows, 3))
    np.testing.assert_allclose(design.dot(w), dense @ w, rtol=1e-12)
    np.testing.assert_allclose(design.tdot(g), dense.T @ g, rtol=1e-12)


def test_ridge_equals_the_closed_form():
    design, dense = small_design()
    y = dense @ np.arange(design.width, dtype=np.float64) + np.random.RandomState(3).normal(size=design.rows)
    l2 = 1.0 / design.rows
    w = ref.fit_ridge(design, y, l2)
    penalty = l2 * np.eye(design.width)
    penalty[-1, -1] = 0.0  # the intercept is not penalised
    # The one-hot columns and the intercept are collinear; the penalty makes the solution unique.
    gram = dense.T @ dense / design.rows + penalty
    closed = np.linalg.solve(gram, dense.T @ y / design.rows)
    # Newton-CG stops once the gradient's norm is under its tolerance (1e-10), so its weights are within
    # tolerance / (the smallest eigenvalue of the Hessian) of the optimum; where in that ball it stops depends on
    # the last bits of the BLAS kernels, which differ between CPUs (AVX2, AVX-512).
    bound = 1e-10 / np.linalg.eigvalsh(gram).min()
    assert bound < 1e-6  # still a tight check
    np.testing.assert_allclose(w[:, 0], closed, rtol=0, atol=bound)


def test_logistic_regression_is_at_its_optimum():
    """Multinomial: the penalised gradient is zero; binary with one 0/1 feature and no penalty has the closed
    form logit p(y=1 | x) = log(k_x / (n_x - k_x)), the log odds observed in each group."""
    design, dense = small_design()
    labels = np.random.RandomState(4).randint(0, 3, design.rows)
    l2 = 1.0 / design.rows
    w = ref.fit_logistic(design, labels, 3, l2)
    p = ref._softmax(dense @ w)
    penalty = np.full((design.width, 1), l2)
    penalty[-1] = 0.0
    gradient = dense.T @ (p - np.eye(3)[labels]) / design.rows + penalty * w
    assert np.abs(gradient).max() < 1e-9

    x = np.array([0.0] * 10 + [1.0] * 10)[:, None]
    y = np.array([1] * 3 + [0] * 7 + [1] * 8 + [0] * 2)  # 3 of 10 at x=0, 8 of 10 at x=1
    binary = ref.Design(x, np.zeros((20, 0), np.int64), 0)
    w = ref.fit_logistic(binary, y, 2, l2=0.0)
    logit = binary.dot(w) @ np.array([-1.0, 1.0])
    assert logit[0] == pytest.approx(math.log(3 / 7), abs=1e-8)
    assert logit[-1] == pytest.approx(math.log(8 / 2), abs=1e-8)


@pytest.mark.parametrize(
    "task, metric, value",
    [("binary", "accuracy", 0.905), ("multiclass", "accuracy", 0.89), ("regression", "r2", 0.9309070136)],
)
def test_the_reference_learns_the_synthetic_rule(tmp_path, task, metric, value):
    """The synthetic label is a noisy linear rule of the features (x-2 missing in one row of 17, imputed)."""
    schema = synthetic.make_schema(task)
    train, count = synthetic.write_dataset(str(tmp_path / "train"), synthetic.make_rows(600, 1, task), schema, 2)
    evals, _ = synthetic.write_dataset(str(tmp_path / "eval"), synthetic.make_rows(200, 2, task), schema, 1)
    fitted = ref.fit_reference(schema, [train], count)
    truth = read_truth(evals, schema)
    assert compute_metrics(truth, fitted.scores(evals, truth))[metric] == pytest.approx(value, abs=1e-8)
    assert fitted.rows == 600 and fitted.l2 == pytest.approx(1 / 600)
    kind = "ridge least squares" if task == "regression" else "logistic regression"
    assert fitted.description == f"{kind} on the normalised features (l2 0.00167, 600 training rows)"


def test_a_large_split_is_subsampled_every_kth_row(tmp_path):
    schema = synthetic.make_schema("binary")
    train, count = synthetic.write_dataset(str(tmp_path / "train"), synthetic.make_rows(100, 1), schema, 1)
    keys, _, _ = ref.read_design(schema, [train], stride=3)
    assert keys == [f"row-{i}" for i in range(0, 100, 3)]
    assert ref.fit_reference(schema, [train], count, max_rows=30).rows == 25  # stride ceil(100 / 30) = 4


def test_a_schema_without_categoricals_or_without_numerics_fits(tmp_path):
    for kept in (("x 1", "x-2"), ("colour",)):
        schema = synthetic.make_schema("binary").select(kept)
        train, count = synthetic.write_dataset(str(tmp_path / "-".join(kept)), synthetic.make_rows(50, 1), schema, 1)
        fitted = ref.fit_reference(schema, [train], count)
        assert fitted.weights.shape == (len(schema.numeric) + sum(f.num_buckets for f in schema.categorical) + 1, 2)
