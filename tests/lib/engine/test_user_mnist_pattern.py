"""The MNIST layout through `estimator_lib.model.user` with TPU-strict mode on (tests/tpu_patterns/mnist_pattern):
raw uint8 image bytes and an int64 label; a model_fn that takes the image tensor itself and reads absl FLAGS;
trained once through its own input_fn (`--input-fn`) and once through a spec that decodes the raw bytes, each
then evaluated (accuracy equal to NumPy's on the prediction rows of an eval set that is not a batch multiple),
predicted in order and exported; the step budget reaches `params['train_steps']` in every mode; an input_fn that
yields other tensors than the spec gives in evaluation is refused before training."""

from __future__ import annotations

import dataclasses
import os
import sys

import numpy as np
import pytest
import tensorflow as tf
from tpu_patterns import mnist_pattern

from estimator_lib.config import JobConfig, TPUSettings, TrainingConfig
from estimator_lib.config.feature_spec import FeatureSpec
from estimator_lib.engine.user import UserModel, evaluate, export, predict, train
from estimator_lib.engine.user.run import resolve_train_steps
from estimator_lib.model.user import UserCodeError
from estimator_lib.predict import read_predictions

MODEL_FN = "tpu_patterns.mnist_pattern:model_fn"
INPUT_FN = "tpu_patterns.mnist_pattern:train_input_fn"
HPARAMS = {"mnist_learning_rate": 0.02, "mnist_hidden_units": 24}
TRAIN_ROWS, EVAL_ROWS = 320, 75  # 75 = 2 batches of 32 and 11 rows: the third batch is padded
JOB = JobConfig(
    tpu=TPUSettings(iterations_per_loop=50, num_cores=8, strict=True),
    training=TrainingConfig(train_batch_size=32, eval_batch_size=32, predict_batch_size=32, train_steps=150),
)


@pytest.fixture(scope="module")
def mnist(tmp_path_factory):
    """The records, the spec, and the model trained through the input_fn and through the spec."""
    root = str(tmp_path_factory.mktemp("mnist"))
    train_path, eval_path = os.path.join(root, "train.tfrecord"), os.path.join(root, "eval.tfrecord")
    mnist_pattern.write_records(train_path, TRAIN_ROWS, seed=1)
    labels = mnist_pattern.write_records(eval_path, EVAL_ROWS, seed=2)
    spec = FeatureSpec.from_json(mnist_pattern.SPEC, label="label", source="mnist_spec.json")
    models = {}
    for name, input_fn in (("input_fn", INPUT_FN), ("spec", None)):
        user = UserModel(MODEL_FN, spec, HPARAMS, input_fn=input_fn)
        model_dir = os.path.join(root, name)
        assert train(JOB, user, train_path, model_dir) == 150
        models[name] = (user, model_dir)
    return root, eval_path, labels, models


@pytest.mark.parametrize("trained_through", ["input_fn", "spec"])
def test_a_model_taking_the_image_tensor_evaluates_to_numpys_accuracy_and_predicts_in_order(
    mnist, tmp_path, trained_through
):
    _, eval_path, labels, models = mnist
    user, model_dir = models[trained_through]
    result = evaluate(JOB, user, eval_path, model_dir)
    assert (result.num_examples, result.steps, result.global_step) == (EVAL_ROWS, 3, 150)
    out = str(tmp_path / "predictions")
    assert predict(JOB, user, eval_path, model_dir, out).count == EVAL_ROWS
    rows = read_predictions(out)
    assert [r["index"] for r in rows] == list(range(EVAL_ROWS))
    class_ids = np.array([r["class_ids"] for r in rows])
    accuracy = np.float32(np.mean(class_ids == labels))
    assert np.float32(result.metrics["accuracy"]) == accuracy and accuracy > 0.9


def test_the_export_takes_serialized_records_and_the_raw_image(mnist, tmp_path):
    _, eval_path, _, models = mnist
    user, model_dir = models["input_fn"]
    result = export(JOB, user, model_dir, str(tmp_path / "exports"), verify_files=eval_path)
    assert result["tag_sets"] == [["serve"], ["serve", "tpu"]] and result["rows_checked"] == 16
    loaded = tf.saved_model.load(result["export_dir"], tags=["serve"])
    raw = loaded.signatures["raw:serving_default"]
    image = mnist_pattern.images(np.array([3]), seed=9)
    assert raw.structured_input_signature[1]["image_raw"].dtype == tf.uint8
    assert raw(image_raw=tf.constant(image))["probabilities"].shape == (1, 10)


def test_the_codes_absl_flags_are_parsed_and_set_from_the_hyperparameters(mnist):
    _, _, _, models = mnist
    user, model_dir = models["spec"]
    assert tf.train.load_variable(model_dir, "hidden/kernel").shape == (64, 24)  # not the flag's default 16
    assert mnist_pattern.FLAGS.mnist_hidden_units == 24 and mnist_pattern.FLAGS.mnist_learning_rate == 0.02
    wrong = dataclasses.replace(user, hparams={**HPARAMS, "mnist_hidden_units": "wide"})
    with pytest.raises(UserCodeError) as e:
        wrong.load()
    assert str(e.value) == (
        "hyperparameter mnist_hidden_units='wide': your code's absl flag --mnist_hidden_units (int) does not take "
        "it: flag --mnist_hidden_units=wide: invalid literal for int() with base 10: 'wide'; give a value of its "
        "type in --hparams"
    )
    user.load()  # set again: the flag holds the hyperparameter, not the refused value
    assert mnist_pattern.FLAGS.mnist_hidden_units == 24


def _probe_module(name: str, seen: dict) -> str:
    """A module `name` whose model_fn records params['train_steps'] per mode, then runs the MNIST one."""

    def model_fn(features, labels, mode, params):
        seen[mode] = params["train_steps"]
        return mnist_pattern.model_fn(features, labels, mode, params)

    module = type(sys)(name)
    module.model_fn = model_fn
    sys.modules[name] = module
    return f"{name}:model_fn"


def test_the_step_budget_reaches_params_in_every_mode_export_included(mnist, tmp_path):
    root, eval_path, _, models = mnist
    seen: dict = {}
    user = dataclasses.replace(models["spec"][0], model_fn=_probe_module("budget_probe", seen))
    job = dataclasses.replace(JOB, training=dataclasses.replace(JOB.training, train_steps=4))
    job = dataclasses.replace(job, tpu=dataclasses.replace(job.tpu, strict=False))
    model_dir = str(tmp_path / "model")
    train(job, user, os.path.join(root, "train.tfrecord"), model_dir)
    evaluate(job, user, eval_path, model_dir)
    predict(job, user, eval_path, model_dir, str(tmp_path / "out"))
    assert seen == {"train": 4, "eval": 4, "infer": 4}
    seen.clear()
    export(job, user, model_dir, str(tmp_path / "exports"))
    assert seen == {"infer": 4}  # TPUEstimator gives no batch_size at export; the budget is there


def _input_module(name: str, transform) -> str:
    """A module `name` whose input_fn is the MNIST one with `transform` applied to its batches."""

    def input_fn(params):
        return mnist_pattern.train_input_fn(params).map(transform)

    module = type(sys)(name)
    module.input_fn = input_fn
    sys.modules[name] = module
    return f"{name}:input_fn"


@pytest.mark.parametrize(
    "transform, found",
    [
        (
            lambda image, label: (tf.cast(image, tf.float32), label),
            "the features: float32 [batch, 8, 8], the spec gives uint8 [batch, 8, 8]",
        ),
        (
            lambda image, label: ({"image_raw": image}, label),
            "the features: a dict of ['image_raw'], the spec gives uint8 [batch, 8, 8]",
        ),
        (
            lambda image, label: (image, tf.cast(label, tf.int32)),
            "the label 'label': int32 [batch], the spec gives int64 [batch]",
        ),
        (lambda image, label: image, "it yields no labels, but the spec's label 'label' reaches the model_fn as"),
    ],
)
def test_an_input_fn_that_yields_other_tensors_than_evaluation_is_refused_before_training(
    mnist, tmp_path, transform, found
):
    root, _, _, models = mnist
    user = dataclasses.replace(models["spec"][0], input_fn=_input_module("other_input", transform))
    with pytest.raises(UserCodeError) as e:
        train(JOB, user, os.path.join(root, "train.tfrecord"), str(tmp_path / "model"))
    assert str(e.value).startswith(f"--input-fn other_input:input_fn: {found}")
    assert str(e.value).endswith(
        "Evaluation and prediction build the model's input from mnist_spec.json (every record once, in order), so a "
        "model trained on your input_fn must get the same tensors there: make the input_fn yield them, or change "
        "the feature spec"
    )
    assert not os.path.exists(str(tmp_path / "model"))  # refused before anything was written


def test_the_budget_is_resolved_once_from_the_train_records_and_a_different_train_steps_hparam_refused(mnist):
    user = mnist[3]["spec"][0]
    epochs = dataclasses.replace(JOB, training=dataclasses.replace(JOB.training, train_steps=None, max_epochs=2))
    assert resolve_train_steps(epochs, user, TRAIN_ROWS).train_steps == 20  # 2 passes of 320 records in 32s
    assert resolve_train_steps(epochs, user).train_steps is None  # unknown without the count: left out of params
    assert resolve_train_steps(JOB, user).params == {**HPARAMS, "train_steps": 150}
    same = dataclasses.replace(user, hparams={**HPARAMS, "train_steps": 150}, train_steps=150)
    same.load()
    with pytest.raises(UserCodeError, match=r"^hyperparameter train_steps=99: params\['train_steps'\] is the training"):
        dataclasses.replace(same, hparams={**HPARAMS, "train_steps": 99}).load()
