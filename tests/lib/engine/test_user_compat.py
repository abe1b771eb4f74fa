"""model/user/compat.py and its callers: a user model (examples/image_cnn on scikit-learn's digits) warm-starts
from its published export only when the feature spec and the variables still fit, and is refused otherwise with
the feature or variable that changed and both versions of it, before anything trains; the published model is
evaluated with the current model_fn and gives the metrics of the checkpoint it was exported from."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import sys

import pytest
import tensorflow as tf
from user_examples import trained_example

from estimator_lib import storage
from estimator_lib.config import JobConfig, TPUSettings, TrainingConfig
from estimator_lib.config.feature_spec import FeatureSpec
from estimator_lib.engine.user import (
    IncompatibleModelError,
    UserModel,
    check_spec,
    check_variables,
    evaluate,
    evaluate_published,
    export,
    published_metadata,
    train,
)

HPARAMS = {"filters": 4, "units": 8, "learning_rate": 0.01}
TRAINABLE = {
    "cnn/conv2d/kernel": [3, 3, 1, 4],
    "cnn/conv2d/bias": [4],
    "cnn/dense/kernel": [64, 8],
    "cnn/dense/bias": [8],
    "cnn/dense_1/kernel": [8, 10],
    "cnn/dense_1/bias": [10],
}
NO_MODEL = "run without the published model (--warm-start none --baseline none)"
VARIABLE_FIX = (
    "the model_fn, its hyperparameters or the feature spec changed it: restore the ones the checkpoint was trained "
    f"with, or {NO_MODEL}"
)


@dataclasses.dataclass(frozen=True)
class Published:
    root: str
    job: JobConfig
    user: UserModel
    model_dir: str
    export_dir: str

    def records(self, name: str) -> str:
        return os.path.join(self.root, name)

    @property
    def variables(self) -> str:
        return os.path.join(self.export_dir, "variables", "variables")


@pytest.fixture(scope="module")
def published(tmp_path_factory) -> Published:
    """The digits CNN trained 20 steps and exported: the model a scheduled retraining continues."""
    job = JobConfig(
        tpu=TPUSettings(iterations_per_loop=10),
        training=TrainingConfig(train_batch_size=16, eval_batch_size=64, predict_batch_size=64, train_steps=20),
    )
    root = str(tmp_path_factory.mktemp("published"))
    trained = trained_example("image_cnn", "digits_cnn.model:model_fn", "label", HPARAMS, job, root)
    export_dir = export(job, trained.user, trained.model_dir, os.path.join(root, "exports"))["export_dir"]
    return Published(root, job, trained.user, trained.model_dir, export_dir)


def one_step(job: JobConfig) -> JobConfig:
    return dataclasses.replace(job, training=dataclasses.replace(job.training, train_steps=1))


def with_spec(user: UserModel, image_shape: list) -> UserModel:
    data = {"image": {"dtype": "float32", "shape": image_shape}, "label": {"dtype": "int32", "shape": []}}
    return dataclasses.replace(user, spec=FeatureSpec.from_json(data, "label", source="new_spec.json"))


# -- warm start ----------------------------------------------------------------------------------------------
def test_a_warm_start_from_the_published_export_begins_at_its_variables(published, tmp_path):
    model_dir = str(tmp_path / "retrained")
    train_files = published.records("train.tfrecord")
    step = train(one_step(published.job), published.user, train_files, model_dir, warm_start_from=published.export_dir)

    assert step == 1
    source = dict(tf.train.list_variables(published.variables))
    assert source == {**TRAINABLE, "global_step": []}
    value = lambda checkpoint, name: tf.train.load_variable(checkpoint, name).tobytes()
    start = os.path.join(model_dir, "model.ckpt-0")  # written before the first step
    assert all(value(start, name) == value(published.variables, name) for name in TRAINABLE)
    after = os.path.join(model_dir, "model.ckpt-1")
    assert value(after, "cnn/dense/kernel") != value(published.variables, "cnn/dense/kernel")


def test_a_changed_feature_shape_is_refused_naming_the_feature_and_both_shapes(published, tmp_path):
    # The same 64 values per record as [16, 4, 1]: after the 2x2 pooling still 16 positions, so every variable
    # keeps its shape; only the spec shows that the model would read other images.
    reshaped = with_spec(published.user, [16, 4, 1])
    train_files = published.records("train.tfrecord")
    assert check_variables(published.job, reshaped, train_files, published.export_dir) == published.variables

    message = (
        "feature 'image': the published model reads float32 [8, 8, 1], new_spec.json gives float32 [16, 4, 1]; "
        f"restore the published feature spec, or {NO_MODEL}"
    )
    model_dir = str(tmp_path / "retrained")
    with pytest.raises(IncompatibleModelError) as e:
        train(published.job, reshaped, train_files, model_dir, warm_start_from=published.export_dir)
    assert str(e.value) == message
    assert tf.train.latest_checkpoint(model_dir) is None  # refused before anything trained
    with pytest.raises(IncompatibleModelError) as e:
        evaluate_published(
            published.job, reshaped, published.records("eval.tfrecord"), published.export_dir, str(tmp_path / "w")
        )
    assert str(e.value) == message


def test_a_wider_layer_is_refused_naming_the_variable_and_both_shapes(published, tmp_path):
    wider = dataclasses.replace(published.user, hparams={**HPARAMS, "units": 12})
    message = (
        f"variable 'cnn/dense/kernel': {published.variables} holds [64, 8] float32, this model_fn makes [64, 12] "
        f"float32; {VARIABLE_FIX}"
    )
    model_dir = str(tmp_path / "retrained")
    with pytest.raises(IncompatibleModelError) as e:
        train(
            published.job, wider, published.records("train.tfrecord"), model_dir, warm_start_from=published.export_dir
        )
    assert str(e.value) == message
    assert tf.train.latest_checkpoint(model_dir) is None
    with pytest.raises(IncompatibleModelError) as e:
        evaluate_published(
            published.job, wider, published.records("eval.tfrecord"), published.export_dir, str(tmp_path / "w")
        )
    assert str(e.value) == message


def test_a_variable_the_published_model_lacks_is_named(published):
    def with_scale(features, labels, mode, params):
        spec = published.user.load()(features, labels, mode, params, None)
        tf.compat.v1.get_variable("extra/scale", [3], tf.float32)
        return spec

    module = type(sys)("scaled_model")
    module.model_fn = with_scale
    sys.modules["scaled_model"] = module
    scaled = UserModel("scaled_model:model_fn", published.user.spec, HPARAMS)
    with pytest.raises(IncompatibleModelError) as e:
        check_variables(published.job, scaled, published.records("train.tfrecord"), published.export_dir)
    assert str(e.value) == (
        f"variable 'extra/scale' ([3] float32) of this model_fn is not in {published.variables}; {VARIABLE_FIX}"
    )


def test_an_export_that_is_not_a_user_models_is_refused_with_the_fix(published, tmp_path):
    bare = str(tmp_path / "bare")  # a SavedModel without our metadata
    shutil.copytree(published.export_dir, bare, ignore=shutil.ignore_patterns("assets.extra"))
    with pytest.raises(IncompatibleModelError) as e:
        published_metadata(bare)
    assert str(e.value) == (
        f"{bare} has no assets.extra/export_metadata.json: it is not the export of a user's model_fn (the user "
        f"model's export writes its feature spec there); give such an export, or {NO_MODEL}"
    )
    with pytest.raises(IncompatibleModelError, match="has no assets.extra/export_metadata.json"):
        evaluate_published(published.job, published.user, published.records("eval.tfrecord"), bare, str(tmp_path / "w"))
    # Its variables fit, so it can still be warm-started from: there is no spec to compare.
    train_files = published.records("train.tfrecord")
    assert (
        train(one_step(published.job), published.user, train_files, str(tmp_path / "bare_start"), warm_start_from=bare)
        == 1
    )

    builtin = str(tmp_path / "builtin")  # a built-in model's export records its schema, not a model_fn and spec
    shutil.copytree(published.export_dir, builtin)
    with open(os.path.join(builtin, "assets.extra", "export_metadata.json"), "w") as f:
        json.dump({"schema": {"features": []}, "checkpoint": "model.ckpt-20"}, f)
    with pytest.raises(IncompatibleModelError) as e:
        train(published.job, published.user, train_files, str(tmp_path / "retrained"), warm_start_from=builtin)
    assert str(e.value) == (
        f"{builtin}: its assets.extra/export_metadata.json records no model_fn or feature_spec: it is a built-in "
        f"model's export, not a user model_fn's, and cannot be continued by one; give a user model's export, or "
        f"{NO_MODEL}"
    )


# -- the spec alone ------------------------------------------------------------------------------------------
PUBLISHED_SPEC = {
    "tokens": {"dtype": "int64", "shape": [6], "var_len": True, "default": 0},
    "score": {"dtype": "float32", "shape": [2]},
    "id": {"dtype": "bytes", "shape": []},
    "label": {"dtype": "int64", "shape": []},
}
METADATA = {"model_fn": "m:model_fn", "feature_spec": PUBLISHED_SPEC, "label": "label", "key": "id"}


def spec(changes: dict, key="id") -> FeatureSpec:
    data = {name: entry for name, entry in {**PUBLISHED_SPEC, **changes}.items() if entry is not None}
    return FeatureSpec.from_json(data, "label", key, source="new.json")


@pytest.mark.parametrize(
    "changes, key, message",
    [
        (
            {"tokens": {"dtype": "int32", "shape": [6], "var_len": True}},
            "id",
            "feature 'tokens': the published model reads int64 [6] var_len (default 0), new.json gives int32 [6] "
            "var_len (default 0)",
        ),
        (
            {"tokens": {"dtype": "int64", "shape": [6], "var_len": True, "default": 1}},
            "id",
            "feature 'tokens': the published model reads int64 [6] var_len (default 0), new.json gives int64 [6] "
            "var_len (default 1)",
        ),
        (
            {"tokens": {"dtype": "int64", "shape": [6]}},
            "id",
            "feature 'tokens': the published model reads int64 [6] var_len (default 0), new.json gives int64 [6]",
        ),
        (
            {"score": None},
            "id",
            "feature 'score' (float32 [2]): the published model reads it, but new.json does not give it to the "
            "model_fn (its label is 'label', its key 'id')",
        ),
        (
            {"id": {"dtype": "bytes", "shape": []}},
            None,
            "feature 'id' (bytes []) in new.json is new: the published model does not read it",
        ),
    ],
)
def test_check_spec_names_the_first_feature_the_model_would_read_differently(changes, key, message):
    with pytest.raises(IncompatibleModelError) as e:
        check_spec(METADATA, spec(changes, key))
    assert str(e.value) == f"{message}; restore the published feature spec, or {NO_MODEL}"


def test_check_spec_names_a_change_of_the_form_the_model_fn_gets_its_input_in():
    fix = f"restore the published feature spec, or {NO_MODEL}"
    in_features = FeatureSpec.from_json(
        {"features": {n: e for n, e in PUBLISHED_SPEC.items()}, "label_in_features": True}, "label", "id", "new.json"
    )
    with pytest.raises(IncompatibleModelError) as e:
        check_spec(METADATA, in_features)
    assert str(e.value) == (
        "the published model's model_fn got its input as a dict, the label apart, new.json gives a dict holding "
        f"the label; {fix}"
    )
    pixels = {"pixels": {"dtype": "bytes", "shape": [4], "decode": "raw", "raw_dtype": "uint8"}}
    published = {"model_fn": "m:model_fn", "feature_spec": {"features": pixels, "single_input": "pixels"}}
    with pytest.raises(IncompatibleModelError) as e:
        check_spec(published, FeatureSpec.from_json(pixels, source="new.json"))
    assert str(e.value) == (
        f"the published model's model_fn got its input as the tensor of 'pixels' alone, new.json gives a dict, the "
        f"label apart; {fix}"
    )
    wider = {"pixels": {**pixels["pixels"], "raw_dtype": "float32"}}
    with pytest.raises(IncompatibleModelError) as e:
        check_spec({**published, "feature_spec": pixels}, FeatureSpec.from_json(wider, source="new.json"))
    assert str(e.value) == (
        f"feature 'pixels': the published model reads bytes [4] decode raw to uint8, new.json gives bytes [4] "
        f"decode raw to float32; {fix}"
    )


def test_check_spec_ignores_what_the_model_fn_does_not_read():
    # Another label dtype and no key field at all: the model_fn gets the same features.
    metadata = {**METADATA, "feature_spec": {**PUBLISHED_SPEC, "id": {"dtype": "int64", "shape": []}}}
    assert check_spec(metadata, spec({"id": None, "label": {"dtype": "int32", "shape": []}}, key=None)) is None


# -- evaluating the published model --------------------------------------------------------------------------
def test_the_published_model_evaluated_with_the_current_model_fn_gives_its_checkpoints_metrics(published, tmp_path):
    eval_files = published.records("eval.tfrecord")
    original = evaluate(published.job, published.user, eval_files, published.model_dir)
    result = evaluate_published(published.job, published.user, eval_files, published.export_dir, str(tmp_path / "w"))

    assert original.checkpoint == os.path.join(published.model_dir, "model.ckpt-20")
    assert result.metrics == original.metrics and sorted(result.metrics) == ["accuracy"]
    assert (result.global_step, result.num_examples, result.steps) == (20, 297, 5)
    assert result.checkpoint == published.variables


def test_a_published_model_on_gcs_is_evaluated_through_a_local_copy(published, tmp_path, gcs_prefix):
    exported = export(published.job, published.user, published.model_dir, f"{gcs_prefix}/exports")["export_dir"]
    eval_files = published.records("eval.tfrecord")
    result = evaluate_published(published.job, published.user, eval_files, exported, str(tmp_path / "w"))

    assert result.metrics == evaluate(published.job, published.user, eval_files, published.model_dir).metrics
    assert result.global_step == 20 and result.checkpoint == f"{exported}/variables/variables"
    assert storage.exists(f"{exported}/variables/variables.index")
