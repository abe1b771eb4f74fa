"""A run of a user's own model_fn: what it needs, and the settings it would not read refused before it starts."""

from __future__ import annotations

import json

import pytest

from estimator_lib.config import ConfigError
from estimator_lib.config.run import resolve_run

USER = [
    "model.model_fn=digits_cnn.model:model_fn",
    "prepare.feature_spec=gs://bucket/spec.json",
    "prepare.data=gs://bucket/train.tfrecord",
    "prepare.label=label",
    "blessing.comparison_metric=accuracy",
]


def run(*overrides: str, given=None):
    return resolve_run(None, [*USER, *overrides], {"publish_root": "/p", **(given or {})})


def test_a_user_run_carries_its_model_fn_spec_and_hparams_with_their_types():
    settings = run('model.hparams={"units": 64, "sizes": [3, 4]}', "prepare.num_shards=3")
    specs = settings.stage_specs()
    assert specs.train.job.model.hparams == {"units": 64, "sizes": [3, 4]}
    assert type(specs.train.job.model.hparams["units"]) is int
    assert specs.prepare.prepare.feature_spec == "gs://bucket/spec.json" and specs.prepare.prepare.num_shards == 3
    assert settings.view()["model_fn"] == "digits_cnn.model:model_fn" and "model_family" not in settings.view()


@pytest.mark.parametrize(
    "override, name",
    [
        ("training.optimizer.learning_rate=0.1", "training.optimizer"),
        ("training.early_stopping.patience=2", "training.early_stopping"),
        ("prepare.bad_rows=quarantine", "prepare.bad_rows"),
        ("validation.on_breach=warn", "validation"),
        ("blessing.beat_trivial=false", "blessing.beat_trivial"),
        ("blessing.bootstrap_replicates=200", "blessing.bootstrap_replicates"),
        ("model.hidden_units=8", "model.hidden_units"),
        ("predict.max_prediction_shift=0.3", "predict.max_prediction_shift"),  # a model_fn's predictions are its own
    ],
)
def test_a_setting_the_user_model_would_not_read_is_refused(override, name):
    with pytest.raises(ConfigError) as raised:
        run(override)
    family = f"{name} is a built-in family's setting, and model.model_fn='digits_cnn.model:model_fn' is your own"
    unread = f"{name} is set, and with --model-fn digits_cnn.model:model_fn nothing reads it"
    assert str(raised.value).startswith(family if name.startswith("model.") else unread), str(raised.value)


def test_a_user_runs_skew_check_takes_its_mode_and_thresholds():
    spec = run("predict.skew=block", 'predict.features={"len(tokens)": {"max_missing_change": 0.3}}').stage_specs()
    assert spec.batch_predict.skew.skew == "block"
    assert spec.batch_predict.skew.thresholds("len(tokens)")["max_missing_change"] == 0.3


def test_a_user_run_predicts_on_beam_and_its_specs_say_so():
    specs = run(given={"engine": "beam"}).stage_specs()
    assert (specs.batch_predict.engine, specs.prepare.engine) == ("beam", "beam")  # prepare: in-process (docs)


def test_what_a_user_run_needs_is_named():
    with pytest.raises(ConfigError, match=r"needs --feature-spec FILE.json \(prepare.feature_spec\)"):
        resolve_run(None, ["model.model_fn=m.model:fn"], {"publish_root": "/p", "data": "gs://b/t.tfrecord"})
    with pytest.raises(ConfigError, match="blessing.comparison_metric is not set"):
        resolve_run(None, USER[:-1], {"publish_root": "/p"})
    with pytest.raises(
        ConfigError, match="--predict-data rows.csv: a user model predicts 'eval', 'train' or TFRecords"
    ):
        run(given={"predict_data": "rows.csv"})
    with pytest.raises(ConfigError, match=r"hyperparameter\(s\) \['batch_size'\]: TPUEstimator sets"):
        run('model.hparams={"batch_size": 8}')


def test_a_local_spec_is_read_when_the_run_is_resolved(tmp_path):
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"image": {"dtype": "float32", "shape": [4]}, "y": {"dtype": "int32", "shape": []}}))
    with pytest.raises(ConfigError, match=r"the label 'label' is not a feature; the features are \['image', 'y'\]"):
        run(f"prepare.feature_spec={spec}")
    assert run(f"prepare.feature_spec={spec}", "prepare.label=y").label == "y"
    spec.write_text(json.dumps({"image": {"dtype": "float64", "shape": [4]}}))
    with pytest.raises(ConfigError, match="feature 'image': dtype 'float64' is not one of"):
        run(f"prepare.feature_spec={spec}")


def test_a_slice_of_a_local_spec_must_be_one_of_its_scalar_features(tmp_path):
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"image": {"dtype": "float32", "shape": [4]}, "y": {"dtype": "int32", "shape": []}}))
    assert run(f"prepare.feature_spec={spec}", "prepare.label=y", "blessing.slices=y").blessing.slices == ("y",)
    with pytest.raises(
        ConfigError,
        match=rf"blessing.slices \['image'\] names \['image'\], which are not scalar features of --feature-spec "
        rf"{spec}; they are \['y'\]: give --slice one of them",
    ):
        run(f"prepare.feature_spec={spec}", "prepare.label=y", "blessing.slices=image")
