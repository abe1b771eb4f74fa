"""The evaluate stage on tiny real tables: prepare, train (early stopping), evaluate and bless, as the pipeline does."""

from __future__ import annotations

import csv
import math
import os

import numpy as np
import pytest
import synthetic
import tensorflow as tf

from estimator_lib import estimator
from estimator_lib.config import BlessingConfig, JobConfig, PrepareConfig, TrainingConfig
from estimator_lib.data import prepare, records
from estimator_lib.data.prepare import PrepareResult
from estimator_lib.evaluation import evaluate_and_bless
from estimator_lib.evaluation.worst import row_losses
from estimator_lib.model import inputs

TPUEstimator = tf.compat.v1.estimator.tpu.TPUEstimator


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


# -- one pass, metrics computed once ---------------------------------------------------------------------------------
PREDICT_BATCH = 16


def write_classes(path, n=300, seed=5):
    """Four standard-normal features; the label is low, mid or high as a - b plus noise is below -0.5, between,
    or above 0.5."""
    rng = np.random.RandomState(seed)
    x, noise = rng.normal(size=(n, 4)), rng.normal(size=n)
    score = x[:, 0] - x[:, 1] + 0.5 * noise
    labels = np.where(score < -0.5, "low", np.where(score > 0.5, "high", "mid"))
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["a", "b", "c", "d", "y"])
        writer.writerows([list(map(float, row)) + [str(t)] for row, t in zip(x, labels)])
    return str(path)


class Counted:
    """What the evaluate stage runs: TPUEstimator calls, and every TFRecord read with its files."""

    def __init__(self):
        self.estimator_calls, self.reads = [], []

    def install(self, patch: pytest.MonkeyPatch) -> None:
        for method in ("train", "evaluate", "predict"):
            original = getattr(TPUEstimator, method)

            def spy(est, *args, _name=method, _original=original, **kwargs):
                self.estimator_calls.append(_name)
                return _original(est, *args, **kwargs)

            patch.setattr(TPUEstimator, method, spy)
        reads = self.reads

        class CountedDataset(tf.data.TFRecordDataset):
            def __init__(self, filenames, *args, **kwargs):
                reads.append(tuple(filenames) if isinstance(filenames, (list, tuple)) else (filenames,))
                super().__init__(filenames, *args, **kwargs)

        patch.setattr(tf.data, "TFRecordDataset", CountedDataset)


@pytest.fixture(scope="module")
def classes_run(tmp_path_factory):
    """A three-class model, trained; then the evaluate stage, counted. Its eval split is not a multiple of the
    predict batch, so the last batch is padded."""
    root = tmp_path_factory.mktemp("classes")
    data = write_classes(root / "table.csv")
    prepared = prepare.prepare(PrepareConfig(data=(data,), label="y", num_workers=1), str(root / "p"))
    job = JobConfig(
        training=TrainingConfig(max_epochs=60, eval_batch_size=PREDICT_BATCH, predict_batch_size=PREDICT_BATCH)
    )
    model_dir = str(root / "model")
    estimator.train_prepared(job, prepared, model_dir)
    counted = Counted()
    with pytest.MonkeyPatch.context() as patch:
        counted.install(patch)
        evaluation = evaluate_and_bless(job, prepared, model_dir, BlessingConfig(), None, str(root / "evaluation"))
    return job, prepared, model_dir, evaluation, counted


def test_the_candidate_passes_over_the_eval_split_once(classes_run):
    _, prepared, _, evaluation, counted = classes_run
    assert prepared.counts["eval"] % PREDICT_BATCH != 0  # a padded last batch
    # No TPUEstimator eval (its metric_fn would be a second pass): the eval split's prediction, then one over the
    # feature importance's sample and its permuted copies, a file of their own.
    assert counted.estimator_calls == ["predict", "predict"]
    eval_files = set(inputs.resolve_files(prepared.files("eval")))
    eval_reads = [files for files in counted.reads if eval_files & set(files)]
    # The model's one pass (the predict input), one host read for the labels and the linear reference's inputs,
    # the importance's sample, and the worst rows' original values (only their records parsed). Before: an
    # estimator eval, a prediction, and two host reads (labels; the reference's inputs).
    assert len(eval_reads) == 4, counted.reads
    assert evaluation.global_step > 0 and evaluation.checkpoint.endswith(f"model.ckpt-{evaluation.global_step}")


def test_the_worst_rows_are_the_highest_log_losses_on_their_input_lines(classes_run):
    _, prepared, _, evaluation, _ = classes_run
    worst = evaluation.worst_rows
    losses = row_losses(evaluation.truth, evaluation.candidate)
    assert [row["loss"] for row in worst] == sorted(losses, reverse=True)[:10]
    with open(os.path.join(os.path.dirname(prepared.output_dir), "table.csv"), encoding="utf-8") as f:
        lines = f.read().splitlines()
    header = lines[0].split(",")
    for row in worst:
        i = evaluation.truth.keys.index(row["key"])
        assert row["probability"] == evaluation.candidate.probabilities[i].max()
        assert row["source"]["file"] == "table.csv"
        line = dict(zip(header, lines[row["source"]["line"] - 1].split(",")))
        assert line["y"] == row["label"]
        assert {name: float(line[name]) for name in row["values"]} == pytest.approx(row["values"], rel=1e-6)


def test_the_evaluation_ranks_the_features_the_label_is_made_of_first(classes_run):
    _, prepared, _, evaluation, _ = classes_run
    importance = evaluation.importance
    assert (importance["metric"], importance["higher_is_better"]) == ("accuracy", True)
    assert (importance["rows"], importance["repeats"]) == (prepared.counts["eval"], 2)
    assert sorted(e["feature"] for e in importance["permutation"][:2]) == ["a", "b"]  # the label is a - b + noise
    attributions = importance["attributions"]
    assert attributions["output"] == "probability of the predicted class"
    assert sorted(e["feature"] for e in attributions["features"][:2]) == ["a", "b"]


def independent_rows(job, prepared, model_dir, checkpoint):
    """(labels [N] class index, probabilities float64 [N, K]) of the real eval rows, through a plain
    TPUEstimator.predict on padded batches with the padding dropped here, and the labels decoded from the records."""
    schema, pattern = prepared.schema, prepared.files("eval")
    est = estimator.build_estimator(job, schema, model_dir)
    probabilities, index, padded = [], [], 0
    for batch in est.predict(
        inputs.predict_input_fn_builder(pattern, schema), yield_single_examples=False, checkpoint_path=checkpoint
    ):
        real = batch["is_padding"] == 0
        probabilities.append(batch["probabilities"][real])
        index.append(batch["example_index"][real])
        padded += int((~real).sum())
    rows = [records.decode_example(r, schema) for r in records.read_tfrecords(inputs.resolve_files(pattern))]
    np.testing.assert_array_equal(np.concatenate(index), np.arange(len(rows)))
    assert padded == -len(rows) % PREDICT_BATCH > 0
    labels = np.array([schema.label.classes.index(r["y"]) for r in rows])
    return labels, np.concatenate(probabilities).astype(np.float64)


def pair_auc(positive, score):
    """ROC AUC by its definition: the share of (positive, negative) pairs ordered right, ties half."""
    pairs = [1.0 if p > n else 0.5 if p == n else 0.0 for p in score[positive] for n in score[~positive]]
    return sum(pairs) / len(pairs)


def step_average_precision(positive, score):
    """Average precision by its definition: precision at each distinct score, weighted by the recall gained."""
    total, recall_before = 0.0, 0.0
    for threshold in sorted(set(score.tolist()), reverse=True):
        chosen = score >= threshold
        hits = int(np.sum(chosen & positive))
        recall = hits / int(positive.sum())
        total += (recall - recall_before) * hits / int(chosen.sum())
        recall_before = recall
    return total


def expected_metrics(labels, probabilities, classes):
    predicted = probabilities.argmax(axis=1)
    log_loss = -float(np.mean(np.log(probabilities[np.arange(len(labels)), labels])))
    out = {"accuracy": float(np.mean(predicted == labels)), "log_loss": log_loss}
    for k, name in enumerate(classes):
        actual, chosen = labels == k, predicted == k
        out[f"precision/{name}"] = float(np.sum(actual & chosen) / chosen.sum()) if chosen.any() else 0.0
        out[f"recall/{name}"] = float(np.sum(actual & chosen) / actual.sum())
        out[f"auc/{name}"] = pair_auc(actual, probabilities[:, k])
        out[f"auc_pr/{name}"] = step_average_precision(actual, probabilities[:, k])
    for base in ("precision", "recall", "auc_pr"):
        out[f"macro_{base}"] = float(np.mean([out[f"{base}/{name}"] for name in classes]))
    out["auc"] = float(np.mean([out[f"auc/{name}"] for name in classes]))
    return out


def test_every_reported_metric_is_exact_on_the_real_rows(classes_run):
    job, prepared, model_dir, evaluation, _ = classes_run
    classes = prepared.schema.label.classes
    assert sorted(classes) == ["high", "low", "mid"]
    labels, probabilities = independent_rows(job, prepared, model_dir, evaluation.checkpoint)
    expected = expected_metrics(labels, probabilities, classes)
    assert sorted(evaluation.metrics) == sorted(expected)
    for name, value in expected.items():
        assert evaluation.metrics[name] == pytest.approx(value, rel=1e-6, abs=1e-9), name
    assert 0.6 < evaluation.metrics["accuracy"] < 1.0  # a model that learned something, on rows it did not see


def test_no_metric_name_has_two_values(classes_run):
    *_, evaluation, _ = classes_run
    blessing = evaluation.blessing
    assert set(blessing.candidate_metrics) == {"accuracy", "log_loss", "auc"}
    for name, value in blessing.candidate_metrics.items():
        assert value == evaluation.metrics[name], name  # the same number, not a second computation of it
    assert not any(name.startswith("streaming_") for name in evaluation.metrics)  # no TPU eval's approximations
    assert all(math.isfinite(v) for v in evaluation.metrics.values())


def test_an_empty_eval_split_or_a_model_without_checkpoint_fails_before_any_work(tmp_path):
    def prepared(eval_rows):
        return PrepareResult(str(tmp_path / "p"), synthetic.make_schema("binary"), {"train": 10, "eval": eval_rows}, {})

    work = str(tmp_path / "evaluation")
    with pytest.raises(ValueError, match=r"holds no row; evaluation needs at least one: prepare more rows or a larger"):
        evaluate_and_bless(JobConfig(), prepared(0), str(tmp_path / "model"), BlessingConfig(), None, work)
    with pytest.raises(FileNotFoundError, match=r"no checkpoint in '.*model' to evaluate; train first"):
        evaluate_and_bless(JobConfig(), prepared(5), str(tmp_path / "model"), BlessingConfig(), None, work)
