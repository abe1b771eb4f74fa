"""Training in rounds judged on a validation split: the best checkpoint is kept and is what later stages use."""

from __future__ import annotations

import json
import logging
import os

import numpy as np
import pytest
import synthetic
import tensorflow as tf

from estimator_lib import estimator
from estimator_lib.config import JobConfig, TPUSettings, TrainingConfig
from estimator_lib.model import checkpoints
from estimator_lib.predict import batch_predict


def make_job(**training) -> JobConfig:
    base = dict(train_steps=400, save_checkpoints_steps=50, early_stopping={"every_steps": 50, "patience": 2})
    base.update(training)
    return JobConfig(tpu=TPUSettings(iterations_per_loop=50), training=TrainingConfig(**base))


def flipped(rows):
    """The same rows with the binary label swapped: the better a model learns the rule, the worse it does here."""
    return [dict(r, target={"yes": "no", "no": "yes"}[r["target"]]) for r in rows]


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("data")
    schema = synthetic.make_schema("binary")
    train, n_train = synthetic.write_dataset(str(root / "train"), synthetic.make_rows(600, 1), schema, 2)
    valid, n_valid = synthetic.write_dataset(str(root / "valid"), synthetic.make_rows(200, 3), schema, 1)
    adverse, _ = synthetic.write_dataset(str(root / "adverse"), flipped(synthetic.make_rows(200, 3)), schema, 1)
    return schema, (train, n_train), (valid, n_valid), adverse


def train(job, data, model_dir, valid_split="valid"):
    schema, (train_files, n_train), (valid, n_valid), adverse = data
    valid_files = {"valid": valid, "adverse": adverse}[valid_split]
    return estimator.train(
        job,
        schema,
        train_files,
        model_dir,
        num_train_examples=n_train,
        valid_files=valid_files,
        num_valid_examples=n_valid,
    )


def _variables(checkpoint):
    return {name: tf.train.load_variable(checkpoint, name) for name, _ in tf.train.list_variables(checkpoint)}


@pytest.mark.determinism
def test_early_stopping_keeps_the_best_checkpoint_and_later_stages_use_it(data, tmp_path, caplog):
    """On labels opposite to the training rule the validation loss only rises: the first round is the best,
    and training stops `patience` rounds later, which one line says. Run twice: bitwise the same."""
    schema, _, _, adverse = data
    caplog.set_level(logging.INFO, logger="estimator_lib.estimator")
    results = {}
    for run in ("a", "b"):
        results[run] = train(make_job(), data, str(tmp_path / run), valid_split="adverse")
    result, model_dir = results["a"], str(tmp_path / "a")
    history = result.validation
    assert (history.steps, history.best_step, history.stopped) == ((50, 100, 150), 50, "patience")
    assert history.best_loss == history.losses[0][1] < min(history.losses[1][1], history.losses[2][1])
    assert (result.global_step, result.trained_steps, result.budget) == (50, 150, 400)
    assert result.checkpoint == os.path.join(model_dir, "best", "model.ckpt-50")
    assert checkpoints.selected_checkpoint(model_dir) == result.checkpoint
    assert tf.train.latest_checkpoint(model_dir).endswith("model.ckpt-150")
    with open(os.path.join(model_dir, checkpoints.HISTORY_FILE)) as f:
        assert checkpoints.ValidationHistory.from_dict(json.load(f)) == history
    stops = [r.getMessage() for r in caplog.records if r.getMessage().startswith("early stopping")]
    assert stops == 2 * [  # one per run
        "early stopping at step 150: no improvement of the validation loss for 2 rounds; "
        f"the model is step 50's checkpoint, validation loss {history.best_loss:.6g}"
    ]

    again = estimator.evaluate(make_job(), schema, adverse, model_dir)  # the model's checkpoint by default
    assert (again.global_step, again.checkpoint) == (50, result.checkpoint)
    assert again.metrics["loss"] == pytest.approx(history.best_loss, rel=1e-6)
    predicted = batch_predict(make_job(), schema, model_dir, adverse, str(tmp_path / "predictions"))
    assert predicted.manifest["source"]["checkpoint"] == result.checkpoint

    assert results["b"].validation == history
    a, b = _variables(result.checkpoint), _variables(results["b"].checkpoint)
    assert all(a[name].tobytes() == b[name].tobytes() for name in a)


def test_a_rerun_resumes_and_a_finished_run_returns_at_once(data, tmp_path):
    model_dir = str(tmp_path / "m")
    first = train(make_job(train_steps=100, early_stopping={"every_steps": 50, "patience": None}), data, model_dir)
    assert (first.validation.steps, first.validation.stopped, first.trained_steps) == ((50, 100), "budget", 100)
    more = make_job(train_steps=150, early_stopping={"every_steps": 50, "patience": None})
    resumed = train(more, data, model_dir)
    assert (resumed.validation.steps, resumed.trained_steps) == ((50, 100, 150), 150)
    assert resumed.validation.best_loss == min(loss for _, loss in resumed.validation.losses)
    assert train(more, data, model_dir) == resumed  # nothing left to do: no round, no checkpoint
    assert tf.train.latest_checkpoint(model_dir).endswith("model.ckpt-150")


def test_without_validation_rows_the_budget_runs_and_the_newest_checkpoint_is_the_model(data, tmp_path):
    schema, (train_files, n_train), (valid, _), _ = data
    model_dir = str(tmp_path / "m")
    job = make_job(train_steps=None, max_epochs=1)  # 600 rows in batches of 64: 10 steps
    result = estimator.train(job, schema, train_files, model_dir, valid_files=valid, num_valid_examples=0)
    assert (result.global_step, result.budget, result.validation) == (10, 10, None)
    assert result.checkpoint == tf.train.latest_checkpoint(model_dir) == checkpoints.selected_checkpoint(model_dir)
    assert not os.path.exists(os.path.join(model_dir, "best"))


# -- the checkpoints module ------------------------------------------------------------------------------------
def _fake_checkpoint(directory, step):
    for suffix in (".index", ".data-00000-of-00001"):
        with open(os.path.join(directory, f"model.ckpt-{step}{suffix}"), "wb") as f:
            f.write(f"{step}{suffix}".encode())
    return os.path.join(directory, f"model.ckpt-{step}")


def test_keep_best_copies_the_checkpoint_and_drops_the_previous_best(tmp_path):
    model_dir = str(tmp_path)
    assert checkpoints.best_checkpoint(model_dir) is None
    first = checkpoints.keep_best(_fake_checkpoint(model_dir, 100), model_dir)
    second = checkpoints.keep_best(_fake_checkpoint(model_dir, 300), model_dir)
    best_dir = os.path.join(model_dir, "best")
    assert (first, second) == (os.path.join(best_dir, "model.ckpt-100"), os.path.join(best_dir, "model.ckpt-300"))
    assert sorted(os.listdir(best_dir)) == ["checkpoint", "model.ckpt-300.data-00000-of-00001", "model.ckpt-300.index"]
    with open(second + ".index", "rb") as f:
        assert f.read() == b"300.index"
    assert checkpoints.best_checkpoint(model_dir) == checkpoints.selected_checkpoint(model_dir) == second
    with pytest.raises(FileNotFoundError, match="has no .index file; it cannot be kept as the best one"):
        checkpoints.keep_best(os.path.join(model_dir, "model.ckpt-7"), model_dir)


def test_validation_history_counts_rounds_since_the_best():
    history = checkpoints.ValidationHistory()
    assert history.improves(5.0, min_delta=0.0) and history.rounds_since_best() == 0
    history = history.with_round(100, 1.0, "best/model.ckpt-100")
    history = history.with_round(200, 0.95, None)  # better, but not by more than min_delta: not kept
    assert not history.improves(0.95, min_delta=0.1) and history.improves(0.89, min_delta=0.1)
    assert (history.best_step, history.rounds_since_best(), history.steps) == (100, 1, (100, 200))
    assert checkpoints.ValidationHistory.from_dict(json.loads(json.dumps(history.to_dict()))) == history
    assert np.isclose(history.best_loss, 1.0)
