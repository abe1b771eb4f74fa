"""Feature importance: the permuted copies of a sample, permutation importance of a trained built-in model
(friedman1), and integrated gradients, exact on a linear model."""

from __future__ import annotations

import csv

import numpy as np
import pytest
import synthetic
import tensorflow as tf

from estimator_lib import estimator
from estimator_lib.config import BlessingConfig, JobConfig, ModelConfig, PrepareConfig, TrainingConfig
from estimator_lib.data import prepare, records
from estimator_lib.evaluation import importance
from estimator_lib.model import checkpoints
from estimator_lib.model.model_fn import build_model_fn
from estimator_lib.schema import KEY_FEATURE

Example = tf.train.Example


# -- the sample and its copies ---------------------------------------------------------------------------------------
def examples(n=6):
    schema = synthetic.make_schema("binary")
    rows = synthetic.make_rows(n, seed=3)
    rows[2]["x-2"] = None  # a missing value: the entry is absent
    return schema, [records.encode_example(row, schema, key=f"row-{i}") for i, row in enumerate(rows)]


def test_the_sample_is_seeded_in_file_order_and_checks_the_count(tmp_path):
    schema, rows = examples(10)
    path = str(tmp_path / "eval.tfrecord")
    records.write_tfrecord(path, rows)
    first = importance.sample_records([path], 10, 4, seed=7)
    keys = [r.features.feature[KEY_FEATURE].bytes_list.value[0].decode() for r in first]
    assert keys == [k for k in (f"row-{i}" for i in range(10)) if k in keys] and len(keys) == 4
    again = importance.sample_records([path], 10, 4, seed=7)
    assert [r.SerializeToString() for r in again] == [r.SerializeToString() for r in first]
    assert len(importance.sample_records([path], 10, 50, seed=7)) == 10
    with pytest.raises(ValueError, match=r"eval.tfrecord'\] hold 10 records, not the 12 their manifest counts"):
        importance.sample_records([path], 12, 4, seed=7)


def test_the_sample_shrinks_so_every_copy_together_stays_bounded():
    assert importance.sample_size(1000, 70, features=6, repeats=2) == 70
    assert importance.sample_size(1000, 5000, features=6, repeats=2) == 1000
    assert importance.sample_size(100_000, 10**6, features=10, repeats=3) == 100_000 // 31
    assert importance.sample_size(1000, 10**6, features=100, repeats=2) == 5_000_000 // (201 * 100)
    assert importance.too_wide(248, 10**6, features=100, repeats=2) is None
    assert importance.too_wide(5, 5, features=3, repeats=2) is None  # every eval row
    wide = importance.sample_size(1000, 10**6, features=800, repeats=2)
    assert wide == 3 and importance.too_wide(wide, 10**6, features=800, repeats=2) == (
        "800 features x 2 repeats: fewer than 10 rows fit in 5,000,000 predicted feature values, so permutation "
        "importance was skipped; list fewer features (model.features) or set blessing.importance_repeats=1"
    )


def test_a_copy_moves_one_feature_whole_across_rows_missing_values_included():
    schema, rows = examples()
    copies = importance.permuted_copies(rows, ["f_x_2", "f_colour"], repeats=2, seed=1)
    assert [(c.feature, c.repeat) for c in copies] == [
        (None, 0),
        ("f_x_2", 0),
        ("f_x_2", 1),
        ("f_colour", 0),
        ("f_colour", 1),
    ]
    assert [r.SerializeToString() for r in copies[0].rows] == [r.SerializeToString() for r in rows]
    for copy in copies[1:]:
        moved = [records.decode_example(r.SerializeToString(), schema) for r in copy.rows]
        original = [records.decode_example(r.SerializeToString(), schema) for r in rows]
        name = {"f_x_2": "x-2", "f_colour": "colour"}[copy.feature]
        assert sorted(map(str, (m[name] for m in moved))) == sorted(map(str, (o[name] for o in original)))
        assert None in [m["x-2"] for m in moved]  # the missing value travels (or stays) with its entry
        for m, o in zip(moved, original):
            assert {k: v for k, v in m.items() if k != name} == {k: v for k, v in o.items() if k != name}
    assert [r.SerializeToString() for r in copies[1].rows] != [r.SerializeToString() for r in copies[2].rows]
    again = importance.permuted_copies(rows, ["f_x_2", "f_colour"], repeats=2, seed=1)
    assert [[r.SerializeToString() for r in c.rows] for c in again] == [
        [r.SerializeToString() for r in c.rows] for c in copies
    ]


def test_the_copies_go_into_one_file_each_row_keyed_by_copy_and_row(tmp_path):
    schema, rows = examples(3)
    copies = importance.permuted_copies(rows, ["f_colour"], repeats=1, seed=1)
    path = str(tmp_path / "copies.tfrecord")
    assert importance.write_copies(path, copies, KEY_FEATURE) == 6
    written = [records.decode_example(r, schema) for r in records.read_tfrecords([path])]
    assert [w["__key__"] for w in written] == ["0:0", "0:1", "0:2", "1:0", "1:1", "1:2"]
    assert rows[0].features.feature[KEY_FEATURE].bytes_list.value[0] == b"row-0"  # the sample is left as it was


def test_importance_is_the_metric_lost_signed_so_positive_matters_most_important_first():
    values = {("a", 0): 0.70, ("a", 1): 0.80, ("b", 0): 0.90, ("b", 1): 0.90, ("c", 0): 0.92, ("c", 1): 0.92}
    out = importance.summarize("accuracy", True, 50, 2, values, 0.90)
    assert [(e["feature"], round(e["importance"], 6), round(e["std"], 6)) for e in out["permutation"]] == [
        ("a", 0.15, 0.05),
        ("b", 0.0, 0.0),
        ("c", -0.02, 0.0),
    ]
    rmse = importance.summarize("rmse", False, 50, 1, {("a", 0): 3.0, ("b", 0): 2.0}, 2.5)
    assert [(e["feature"], e["importance"]) for e in rmse["permutation"]] == [("a", 0.5), ("b", -0.5)]
    assert {k: rmse[k] for k in ("metric", "higher_is_better", "rows", "repeats", "attributions")} == {
        "metric": "rmse",
        "higher_is_better": False,
        "rows": 50,
        "repeats": 1,
        "attributions": None,
    }


def test_the_path_and_its_integral_are_exact_for_a_linear_function():
    real, baseline = np.array([[1.0, 2.0], [3.0, -1.0]], np.float32), np.zeros((2, 2), np.float32)
    points = importance.path_points(tf.constant(real), tf.constant(baseline), 4).numpy()
    np.testing.assert_allclose(points[:2], real * 0.125) and np.testing.assert_allclose(points[6:], real * 0.875)
    gradients = np.tile(np.array([[2.0, -3.0]], np.float32), (8, 1))  # f = 2 x0 - 3 x1
    np.testing.assert_allclose(importance.integrate(gradients, real, baseline, 4), [2 - 6, 6 + 3])


# -- friedman1: a trained DNN ranks the informative features above the noise ----------------------------------------
def write_friedman1(path, n, seed=0):
    """Friedman #1: ten uniform features; y = 10 sin(pi x0 x1) + 20 (x2 - 0.5)^2 + 10 x3 + 5 x4 + N(0, 1); x5..x9
    are noise."""
    rng = np.random.RandomState(seed)
    x = rng.uniform(size=(n, 10))
    y = 10 * np.sin(np.pi * x[:, 0] * x[:, 1]) + 20 * (x[:, 2] - 0.5) ** 2 + 10 * x[:, 3] + 5 * x[:, 4]
    y = y + rng.normal(size=n)
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow([f"x{i}" for i in range(10)] + ["y"])
        writer.writerows([list(map(float, row)) + [float(t)] for row, t in zip(x, y)])
    return str(path)


@pytest.fixture(scope="module")
def friedman(tmp_path_factory):
    root = tmp_path_factory.mktemp("friedman1")
    data = write_friedman1(root / "friedman1.csv", 2000)
    config = PrepareConfig(data=(data,), label="y", task="regression", num_workers=1, eval_fraction=0.25)
    prepared = prepare.prepare(config, str(root / "p"))
    job = JobConfig(
        model=ModelConfig(hidden_units=(32, 16), l2=0.0),
        training=TrainingConfig(max_epochs=40, train_batch_size=64, predict_batch_size=256),
    )
    estimator.train_prepared(job, prepared, str(root / "model"))
    return job, prepared, str(root / "model")


def test_permutation_importance_ranks_friedman1_informative_features_above_the_noise(friedman):
    job, prepared, model_dir = friedman
    checkpoint = checkpoints.selected_checkpoint(model_dir)
    config = BlessingConfig(importance_repeats=3)
    count = prepared.counts["eval"]
    out = importance.builtin_importance(
        job, prepared.schema, model_dir, checkpoint, prepared.files("eval"), count, config
    )
    assert (out["metric"], out["higher_is_better"], out["rows"], out["repeats"]) == ("rmse", False, count, 3)
    by_name = {e["feature"]: e["importance"] for e in out["permutation"]}
    assert sorted(by_name) == [f"x{i}" for i in range(10)]
    informative, noise = [by_name[f"x{i}"] for i in range(5)], [by_name[f"x{i}"] for i in range(5, 10)]
    assert min(informative) > max(noise), out["permutation"]
    assert [e["importance"] for e in out["permutation"]] == sorted(by_name.values(), reverse=True)
    attributions = out["attributions"]
    assert (attributions["method"], attributions["output"], attributions["steps"]) == (
        "integrated_gradients",
        "prediction",
        32,
    )
    by_name = {e["feature"]: e["attribution"] for e in attributions["features"]}
    assert min(by_name[f"x{i}"] for i in (0, 1, 3, 4)) > max(by_name[f"x{i}"] for i in range(5, 10))


# -- integrated gradients: exact on a linear model ------------------------------------------------------------------
def random_checkpoint(directory, job, schema, seed=3):
    """A checkpoint of the model_fn's PREDICT variables, set to seeded random values (no training needed)."""
    model_fn = build_model_fn(schema, job)
    with tf.Graph().as_default():
        tf.compat.v1.set_random_seed(seed)
        features = {f.key: tf.zeros([2], tf.float32 if f.kind == "numeric" else tf.int32) for f in schema.features}
        model_fn(features, None, tf.estimator.ModeKeys.PREDICT, {"use_tpu": False, "batch_size": 2}, None)
        rng = np.random.RandomState(seed)
        with tf.compat.v1.Session() as session:
            for variable in tf.compat.v1.global_variables():
                variable.load(rng.normal(size=variable.shape).astype(np.float32), session)
            return tf.compat.v1.train.Saver().save(session, str(directory / "model.ckpt"))


def test_integrated_gradients_of_a_linear_regression_are_the_weight_times_the_distance_from_the_mean(tmp_path):
    schema = synthetic.make_schema("regression")
    job = JobConfig(model=ModelConfig(family="linear"))
    checkpoint = random_checkpoint(tmp_path, job, schema)
    rows = synthetic.make_rows(12, seed=4, task="regression")  # row 0's x-2 is missing: imputed, the mean
    encoded = [records.encode_example(row, schema, key=str(i)) for i, row in enumerate(rows)]
    out = importance.builtin_attributions(job, schema, checkpoint, encoded)
    kernel = tf.train.load_variable(checkpoint, "linear/numeric/kernel")[:, 0]
    label = schema.label
    expected = {}
    for w, f in zip(kernel, schema.numeric):
        values = np.array([f.mean if row[f.name] is None else row[f.name] for row in rows])
        expected[f.name] = float(np.mean(np.abs(w * label.std / f.std * (values - f.mean))))
    got = {e["feature"]: e["attribution"] for e in out["features"]}
    assert got == pytest.approx(expected, rel=1e-5)
    assert [e["feature"] for e in out["features"]] == sorted(expected, key=lambda name: -expected[name])
    assert {k: v for k, v in out.items() if k != "features"} == {
        "method": "integrated_gradients",
        "output": "prediction",
        "steps": 32,
        "baseline": "the training mean of each numeric feature",
        "rows": 12,
        "not_attributed": ["colour"],
    }


def test_integrated_gradients_of_a_classifier_add_up_to_the_predicted_class_probability_gained(tmp_path):
    schema = synthetic.make_schema("multiclass")
    job = JobConfig(model=ModelConfig(family="linear", features=("x 1", "x-2")))
    checkpoint = random_checkpoint(tmp_path, job, schema.select(job.model.features))
    rows = [{"x 1": 5.0, "x-2": -2.0, "colour": "red", "target": "low"}]
    encoded = [records.encode_example(row, schema, key="0") for row in rows]
    out = importance.builtin_attributions(job, schema, checkpoint, encoded)
    assert out["output"] == "probability of the predicted class" and out["not_attributed"] == []
    w = tf.train.load_variable(checkpoint, "linear/numeric/kernel")
    b = tf.train.load_variable(checkpoint, "linear/numeric/bias")
    z = np.array([(5.0 - 2.0) / 3.0, (-2.0 + 1.0) / 0.5])

    def softmax(logits):
        e = np.exp(logits - logits.max())
        return e / e.sum()

    p, p0 = softmax(z @ w + b), softmax(b)
    gained = p.max() - p0[p.argmax()]
    attributions = {e["feature"]: e["attribution"] for e in out["features"]}
    assert sorted(attributions) == ["x 1", "x-2"]
    # One row: the mean |attribution| is |attribution|; completeness holds up to the 32-step midpoint rule.
    signed = importance_signs(w, z, p.argmax(), b)
    assert sum(s * attributions[n] for s, n in zip(signed, ("x 1", "x-2"))) == pytest.approx(gained, rel=2e-3)


def importance_signs(w, z, k, b, steps=2000):
    """The signs of each input's integrated gradient, by a fine Riemann sum in NumPy."""
    total = np.zeros(len(z))
    for alpha in (np.arange(steps) + 0.5) / steps:
        logits = alpha * z @ w + b
        p = np.exp(logits - logits.max())
        p /= p.sum()
        total += p[k] * (w[:, k] - p @ w.T) * z / steps  # d p_k / d z_i = p_k (w_ik - sum_j p_j w_ij)
    return np.sign(total)
