"""A user's own TPUEstimator model_fn on their TFRecords (`estimator_lib.model.user`), with the example CNN of
examples/image_cnn on scikit-learn's digits: trained, evaluated with the user's metric_fn on an eval set that is
not a multiple of the batch (the metric equals NumPy's on the real rows), predicted in order with padding
dropped, exported with both tag sets and verified, warm-started; hyperparameters arrive with their types; a
record that does not match the spec is named."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import sys

import numpy as np
import pytest
import tensorflow as tf
from user_examples import trained_example

from estimator_lib.config import BlessingConfig, BlessingError, JobConfig, TPUSettings, TrainingConfig
from estimator_lib.config.feature_spec import FeatureSpec
from estimator_lib.engine.user import UserModel, evaluate, export, predict, train
from estimator_lib.engine.user.importance import user_importance
from estimator_lib.engine.user.run import split_slice_metrics
from estimator_lib.engine.user.stages import slice_sets
from estimator_lib.evaluation import slices
from estimator_lib.evaluation.blessing import decide_user
from estimator_lib.evaluation.slices import slice_table
from estimator_lib.model.user import RecordMismatchError, UserCodeError, records
from estimator_lib.predict import read_predictions, verify_output

HPARAMS = {"filters": 8, "units": 32, "learning_rate": 0.01}
EVAL_ROWS = 297


@pytest.fixture(scope="module")
def digits(tmp_path_factory):
    job = JobConfig(
        tpu=TPUSettings(iterations_per_loop=50),
        training=TrainingConfig(train_batch_size=32, eval_batch_size=64, predict_batch_size=64, train_steps=150),
    )
    root = str(tmp_path_factory.mktemp("digits"))
    trained = trained_example("image_cnn", "digits_cnn.model:model_fn", "label", HPARAMS, job, root)
    return trained.root, trained.job, trained.user, trained.model_dir


def test_the_users_metric_is_numpys_on_the_real_rows_and_predictions_keep_input_order(digits, tmp_path):
    root, job, user, model_dir = digits
    result = evaluate(job, user, os.path.join(root, "eval.tfrecord"), model_dir)
    assert (result.num_examples, result.steps, result.global_step) == (EVAL_ROWS, 5, 150)  # 5 * 64 = 320 rows
    assert sorted(result.metrics) == ["accuracy"]  # the user's names; TPUEstimator's padded `loss` is left out

    out = str(tmp_path / "predictions")
    predicted = predict(job, user, os.path.join(root, "predict.tfrecord.gz"), model_dir, out, num_shards=2)
    rows = read_predictions(out)
    assert predicted.count == EVAL_ROWS and verify_output(out)["count"] == EVAL_ROWS
    assert [r["index"] for r in rows] == list(range(EVAL_ROWS))
    assert list(rows[0]) == ["index", "file", "record", "class_id", "probabilities"]
    assert len(rows[0]["probabilities"]) == 10
    path = os.path.join(root, "predict.tfrecord.gz")  # one gzip file: each row is its record of that file
    assert [(r["file"], r["record"]) for r in rows] == [(path, i) for i in range(EVAL_ROWS)]
    labels = [
        int(tf.train.Example.FromString(r).features.feature["label"].int64_list.value[0])
        for r in tf.data.TFRecordDataset(os.path.join(root, "eval.tfrecord")).as_numpy_iterator()
    ]
    class_ids = np.array([r["class_id"] for r in rows])
    assert class_ids.tolist() == np.argmax([r["probabilities"] for r in rows], axis=1).tolist()
    accuracy = np.float32(np.mean(class_ids == np.array(labels)))
    assert np.float32(result.metrics["accuracy"]) == accuracy and accuracy > 0.8


def test_export_has_both_tag_sets_is_verified_and_carries_its_metadata(digits, tmp_path):
    root, job, user, model_dir = digits
    result = export(job, user, model_dir, str(tmp_path / "exports"), verify_files=os.path.join(root, "eval.tfrecord"))
    assert result["tag_sets"] == [["serve"], ["serve", "tpu"]] and result["rows_checked"] == 16
    with open(os.path.join(result["export_dir"], "assets.extra", "export_metadata.json")) as f:
        metadata = json.load(f)
    assert metadata["hparams"] == HPARAMS and metadata["feature_spec"]["image"] == {
        "dtype": "float32",
        "shape": [8, 8, 1],
    }


def test_a_second_run_warm_starts_from_the_first_by_variable_name(digits, tmp_path, caplog):
    root, job, user, model_dir = digits
    caplog.set_level(logging.INFO, logger="estimator_lib.progress")
    still = dataclasses.replace(user, hparams={**HPARAMS, "learning_rate": 0.0})
    one_step = dataclasses.replace(job, training=dataclasses.replace(job.training, train_steps=1))
    second = str(tmp_path / "second")
    train(one_step, still, os.path.join(root, "train.tfrecord"), second, warm_start_from=model_dir)
    first, warmed = tf.train.latest_checkpoint(model_dir), tf.train.latest_checkpoint(second)
    for name in ("cnn/conv2d/kernel", "cnn/dense_1/bias"):
        assert tf.train.load_variable(first, name).tobytes() == tf.train.load_variable(warmed, name).tobytes()
    lines = [r.getMessage() for r in caplog.records if r.name == "estimator_lib.progress"]
    assert len(lines) == 1 and lines[0].startswith("step 1/1 (100%), ETA 0s, loss ")  # the progress hook's line


def test_hyperparameters_reach_params_with_their_types(digits, tmp_path):
    root, job, user, _ = digits
    seen = {}

    def probe(features, labels, mode, params):
        seen.update({k: params[k] for k in ("units", "layers", "name", "batch_size")})
        return user.load()(features, labels, mode, params, None)  # noqa: B023

    module = type(sys)("probe_model")
    module.model_fn = probe
    sys.modules["probe_model"] = module
    hparams = {**HPARAMS, "layers": [64, 32], "name": "cnn"}
    probed = UserModel("probe_model:model_fn", user.spec, hparams)
    one_step = dataclasses.replace(job, training=dataclasses.replace(job.training, train_steps=1))
    train(one_step, probed, os.path.join(root, "train.tfrecord"), str(tmp_path / "probe"))
    assert seen == {"units": 32, "layers": [64, 32], "name": "cnn", "batch_size": 32}
    assert type(seen["units"]) is int


def test_a_record_that_lacks_a_feature_is_named_by_file_record_and_feature(digits, tmp_path):
    root, job, user, _ = digits
    records = list(tf.data.TFRecordDataset(os.path.join(root, "eval.tfrecord")).take(40).as_numpy_iterator())
    broken = tf.train.Example.FromString(records[37])
    del broken.features.feature["image"]
    records[37] = broken.SerializeToString()
    path = str(tmp_path / "broken.tfrecord")
    with tf.io.TFRecordWriter(path) as writer:
        for record in records:
            writer.write(record)
    with pytest.raises(RecordMismatchError) as e:
        evaluate(job, user, path, digits[3])
    assert str(e.value) == (
        f"{path}: record 37: feature 'image': expected 64 value(s) in float_list (float32, shape [8, 8, 1]), "
        "found no such feature in the record"
    )


def test_a_spec_of_the_wrong_dtype_names_the_feature_the_expected_and_the_found(digits):
    root, job, user, model_dir = digits
    wrong = FeatureSpec.from_json(
        {"image": {"dtype": "int64", "shape": [8, 8, 1]}, "label": {"dtype": "int64"}}, "label"
    )
    with pytest.raises(
        RecordMismatchError,
        match=r"eval.tfrecord: record 0: feature 'image': expected 64 value\(s\) in "
        r"int64_list \(int64, shape \[8, 8, 1\]\), found 64 value\(s\) in float_list",
    ):
        evaluate(job, dataclasses.replace(user, spec=wrong), os.path.join(root, "eval.tfrecord"), model_dir)


def test_a_model_fn_without_params_or_with_reserved_hparams_is_refused_before_it_runs(digits):
    _, _, user, _ = digits
    module = type(sys)("no_params_model")
    module.model_fn = lambda features, labels, mode: None
    sys.modules["no_params_model"] = module
    with pytest.raises(UserCodeError, match=r"--model-fn no_params_model:model_fn: the function must take a `params`"):
        UserModel("no_params_model:model_fn", user.spec).load()
    with pytest.raises(UserCodeError, match=r"hyperparameter\(s\) \['batch_size'\]: TPUEstimator sets"):
        dataclasses.replace(user, hparams={"batch_size": 8}).load()
    with pytest.raises(UserCodeError, match=r"--model-fn 'nowhere:fn': module 'nowhere' cannot be imported"):
        UserModel("nowhere:fn", user.spec).load()


def test_importance_of_a_users_model_by_its_metric_fn_and_its_gradients(digits):
    root, job, user, model_dir = digits
    eval_files = os.path.join(root, "eval.tfrecord")
    checkpoint = tf.train.latest_checkpoint(model_dir)
    config = BlessingConfig(comparison_metric="accuracy")
    out = user_importance(job, user, eval_files, checkpoint, EVAL_ROWS, config)
    assert (out["metric"], out["higher_is_better"], out["rows"], out["repeats"]) == ("accuracy", True, EVAL_ROWS, 2)
    ((image,),) = [out["permutation"]]
    accuracy = evaluate(job, user, eval_files, model_dir).metrics["accuracy"]
    # Every row in the sample: the unpermuted copy is the eval split; with the images shuffled, about chance is left.
    assert image["feature"] == "image" and accuracy - 0.2 < image["importance"] < accuracy
    attributions = out["attributions"]
    assert (attributions["output"], attributions["rows"], attributions["not_attributed"]) == (
        "probability of the predicted class",
        64,
        [],
    )
    assert [e["feature"] for e in attributions["features"]] == ["image"] and attributions["features"][0][
        "attribution"
    ] > 0
    with pytest.raises(
        BlessingError, match=r"blessing.comparison_metric='auc' is not a metric of your metric_fn \(it "
    ):
        user_importance(job, user, eval_files, checkpoint, EVAL_ROWS, BlessingConfig(comparison_metric="auc"))


def test_the_metric_fn_runs_per_slice_in_the_same_pass_and_is_numpys_on_each_slices_rows(digits, tmp_path):
    """Sliced by the label (a scalar feature of the spec): per-class accuracy, from the same eval pass."""
    root, job, user, model_dir = digits
    files = [os.path.join(root, "eval.tfrecord")]
    config = BlessingConfig(
        slices=("label",), comparison_metric="accuracy", slice_thresholds={"accuracy": 0.9}, min_slice_rows=1
    )
    sets = slice_sets(user.spec, files, config)
    assert sets[0].names == tuple(f"label={c}" for c in range(10))
    result = evaluate(job, user, files, model_dir, slices=sets)
    overall, entries = split_slice_metrics(result.metrics, sets)
    assert sorted(overall) == ["accuracy"] and result.steps == 5  # one pass, the overall metric as without slices
    predict(job, user, files, model_dir, str(tmp_path / "p"))
    predicted = np.array([r["class_id"] for r in read_predictions(str(tmp_path / "p"))])
    labels = np.array(records.read_column(files, user.spec.feature("label")))
    for c, entry in enumerate(entries):
        rows = labels == c
        assert (entry["name"], entry["rows"]) == (f"label={c}", int(rows.sum()))
        assert np.float32(entry["metrics"]["accuracy"]) == np.float32(np.mean(predicted[rows] == c))
    table = slice_table(config, "accuracy", overall, entries)
    blessing = decide_user(config, overall, EVAL_ROWS, slices=table)
    failing = [e for e in table["slices"] if e["metrics"]["accuracy"] < 0.9]
    assert blessing.reasons == tuple(
        f"slice {e['name']} ({e['rows']} rows): accuracy={e['metrics']['accuracy']:.4f} >= 0.9000 fails"
        for e in failing
    )


def test_slices_beyond_the_bound_or_of_a_feature_that_is_not_scalar_are_refused(digits, monkeypatch):
    root, _, user, _ = digits
    files = [os.path.join(root, "eval.tfrecord")]
    monkeypatch.setattr(slices, "MAX_USER_SLICES", 5)  # the digits' one scalar feature, the label, has 10 values
    with pytest.raises(BlessingError, match=r"into 10 slices \{'label': 10\}, more than 5: slice by features of"):
        slice_sets(user.spec, files, BlessingConfig(slices=("label",)))
    config = BlessingConfig(slices=("image",))
    with pytest.raises(BlessingError, match=r"names \['image'\], which are not scalar features of the feature spec"):
        config.check_slice_features(user.spec.scalars, "scalar features of the feature spec")


def test_a_float_feature_is_sliced_by_quantile_buckets_and_a_text_one_by_value(tmp_path):
    spec = FeatureSpec.from_json({"w": {"dtype": "float32", "shape": []}, "s": {"dtype": "bytes", "shape": []}})
    path = str(tmp_path / "r.tfrecord")
    with tf.io.TFRecordWriter(path) as writer:
        for weight, shape in ((0.5, b"round"), (1.0, b"square"), (2.0, b"round"), (4.0, b"round")):
            feature = {
                "w": tf.train.Feature(float_list=tf.train.FloatList(value=[weight])),
                "s": tf.train.Feature(bytes_list=tf.train.BytesList(value=[shape])),
            }
            writer.write(tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString())
    (by_weight, crossed) = slice_sets(spec, [path], BlessingConfig(slices=("w", "s,w"), slice_buckets=2))
    assert by_weight.names == ("w=[0.5, 1.5)", "w=[1.5, 4]") and by_weight.ids.tolist() == [0, 0, 1, 1]
    assert crossed.names == ("s=round,w=[0.5, 1.5)", "s=round,w=[1.5, 4]", "s=square,w=[0.5, 1.5)")
    assert crossed.rows() == [1, 2, 1]
