"""Strict mode on the patterns of the canonical public TPUEstimator models (tests/tpu_patterns/strict_models.py,
written here): each is checked in every mode with its own input_fns, as `check_model` runs in a stage, and
reports exactly what a TPU would do with it; an error of the model's own code is named as such."""

from __future__ import annotations

import inspect
import json

import numpy as np
import pytest
import tensorflow as tf
from tpu_patterns import strict_models as models

from estimator_lib import strict
from estimator_lib.config import JobConfig, ModelConfig, TPUSettings, TrainingConfig
from estimator_lib.model.user.model_fn import wrap_model_fn

# Global batch 16 over the 8-core target: 2 rows per replica, 16 batches of the 32 rows per host.
JOB = JobConfig(
    tpu=TPUSettings(num_cores=8, iterations_per_loop=10),
    training=TrainingConfig(
        train_batch_size=16, eval_batch_size=16, predict_batch_size=16, train_steps=2, save_checkpoints_steps=10
    ),
    model=ModelConfig(family="linear"),
)
ALL_CHECKS = 26  # config; per mode: input (3 or 4), model graph, host functions, cross-shard, xla


def check(model_fn, input_fns, **kwargs) -> strict.StrictReport:
    report = strict.check_model(JOB, None, model_fn, **input_fns, **kwargs)
    assert report.passed and len(report.checks) == ALL_CHECKS
    return report


def names(findings):
    return [(f.name, f.severity) for f in findings]


def test_a_learning_rate_schedule_reading_the_global_step_passes():
    report = check(models.schedule_model_fn, models.input_fns(models.image_input_fn))
    assert report.findings == ()
    assert {"train: xla", "train: cross-shard", "eval: xla", "infer: xla"} <= set(report.checks)


def test_bert_gradients_through_cross_shard_apply_gradients_are_one_difference_accepted_by_name():
    input_fns = models.input_fns(models.token_input_fn)
    report = check(models.bert_like_model_fn_builder(), input_fns)
    (finding,) = report.findings
    assert report.differs == (finding,)
    assert names([finding]) == [("cross-shard:_clipped_cross_shard_step", strict.DIFFERS)]
    assert finding.message.startswith(
        "train model_fn tpu_patterns.strict_models.bert_like_model_fn_builder.<locals>.model_fn: 7 of the 7 "
        "gradients passed to CrossShardOptimizer.apply_gradients (by _clipped_cross_shard_step; optimizer "
        "DecoupledWeightDecayAdam; e.g. 'embeddings') were not computed by CrossShardOptimizer.compute_gradients"
    )
    assert finding.message.endswith(
        "so the loss is not scaled by 1/num_replicas as compute_gradients does: on 8 replicas the update applies the "
        "SUM of the shards' gradients, not their mean. Harmless for scale-invariant Adam-type optimizers (Adam, "
        "AdamW, LAMB); with SGD or momentum each step is 8 times too large. Fix: grads_and_vars = "
        "optimizer.compute_gradients(loss) with the CrossShardOptimizer, or divide the loss by "
        "params['context'].num_replicas before taking its gradients"
    )
    accepted = check(models.bert_like_model_fn_builder(), input_fns, accept=["cross-shard:*"])
    assert accepted.accepted == (finding,) and accepted.differs == ()
    assert "accepted by 'cross-shard:*'" in accepted.describe()


def test_the_sum_differs_with_sgd_too_and_is_a_failure_without_cross_shard_optimizer():
    input_fns = models.input_fns(models.token_input_fn)
    (finding,) = check(models.bert_like_model_fn_builder(use_sgd=True), input_fns).findings
    assert finding.severity == strict.DIFFERS and "optimizer GradientDescentOptimizer" in finding.message
    with pytest.raises(strict.TPUStrictError) as excinfo:
        strict.check_model(JOB, None, models.bert_like_model_fn_builder(cross_shard=False), **input_fns)
    report = excinfo.value.report
    variables = ["classifier/bias", "classifier/kernel", "dense/bias", "dense/kernel", "embeddings"]
    variables += ["layer_norm/beta", "layer_norm/gamma"]
    assert names(report.blocking) == [(f"cross-shard:{v}", strict.FAILS) for v in variables]
    assert "with a gradient not summed across TPU replicas (no CrossReplicaSum)" in report.blocking[0].message
    assert str(excinfo.value).splitlines()[1] == "  [cross-shard] 7:"


def test_fused_batch_norm_passes_and_a_plain_estimator_spec_in_predict_is_named():
    input_fns = models.input_fns(models.image_input_fn)
    with pytest.raises(strict.TPUStrictError) as excinfo:
        strict.check_model(JOB, None, models.resnet_like_model_fn, **input_fns)
    report = excinfo.value.report
    assert names(report.findings) == [("spec:infer", strict.FAILS)]  # no [static-shape] for the reserve space
    assert "its TPU prediction loop raises RuntimeError" in report.findings[0].message
    assert {"train: static-shape (model graph)", "train: xla", "infer: xla"} <= set(report.checks)
    assert check(models.resnet_like_model_fn, input_fns, accept=["spec:infer"]).accepted == report.findings


def test_a_users_resnet_pattern_passes_as_the_pipeline_runs_it():
    # The user-model wrapper hands TPUEstimator the TPUEstimatorSpec its TPU prediction loop needs.
    wrapped = wrap_model_fn(models.resnet_like_model_fn)
    assert check(wrapped, models.input_fns(models.image_input_fn)).findings == ()
    assert f"{wrapped.__module__}.{wrapped.__qualname__}" == "tpu_patterns.strict_models.resnet_like_model_fn"


def test_an_int64_label_and_the_image_itself_as_features_get_notes_only():
    report = check(
        models.mnist_like_model_fn, models.input_fns(models.image_input_fn, label_dtype=np.int64, as_dict=False)
    )
    assert names(report.findings) == [("dtype:label", strict.NOTE)] * 2  # train and eval read the label
    assert report.findings[0].message.startswith(
        "train input: the label is int64: a TPU emulates 64-bit integers (slowly) and a few ops refuse them. "
        "Advice: cast it to int32 in the input pipeline"
    )
    assert check(models.mnist_like_model_fn, models.input_fns(models.image_input_fn, as_dict=False)).findings == ()


def test_float64_and_string_inputs_still_fail():
    def unconverted_input_fn(params):
        def add(features, label):
            x = tf.cast(label, tf.float64)
            return {"image": features["image"], "x": x, "name": tf.strings.as_string(label)}, label

        return models.image_input_fn("train")(params).map(add)

    with pytest.raises(strict.TPUStrictError) as excinfo:
        strict.check_model(JOB, None, models.schedule_model_fn, train_input_fn=unconverted_input_fn, modes=("train",))
    assert names(excinfo.value.report.blocking) == [("dtype:name", strict.FAILS), ("dtype:x", strict.FAILS)]
    assert "feature 'x' is float64, which cannot enter a TPU computation" in str(excinfo.value)


def test_a_key_error_of_the_models_own_code_is_named_with_its_file_and_line():
    line = next(
        n for n, text in enumerate(inspect.getsource(models).splitlines(), 1) if "the line the error names" in text
    )
    with pytest.raises(strict.ModelBuildError) as excinfo:
        strict.check_model(JOB, None, models.missing_key_model_fn, **models.input_fns(models.image_input_fn))
    assert str(excinfo.value).splitlines()[0] == (
        "model_fn tpu_patterns.strict_models:missing_key_model_fn raised KeyError: 'label_ids' at "
        f"tpu_patterns/strict_models.py:{line} (in missing_key_model_fn) while building the train graph"
    )
    assert "params['use_tpu']" not in str(excinfo.value) and not isinstance(excinfo.value, strict.TPUStrictError)
    assert isinstance(excinfo.value.__cause__, KeyError)


def test_an_unparsed_absl_flag_read_by_the_model_is_named_as_its_own_error():
    line = next(n for n, text in enumerate(inspect.getsource(models).splitlines(), 1) if "the flag the error" in text)
    with pytest.raises(strict.ModelBuildError) as excinfo:
        strict.check_model(JOB, None, models.unparsed_flags_model_fn, **models.input_fns(models.image_input_fn))
    first = str(excinfo.value).splitlines()[0]
    assert first.startswith(
        "model_fn tpu_patterns.strict_models:unparsed_flags_model_fn raised UnparsedFlagAccessError: Trying to access "
        "flag --learning_rate before flags were parsed."
    )
    assert first.endswith(
        f"at tpu_patterns/strict_models.py:{line} (in unparsed_flags_model_fn) while building the train graph"
    )


def test_the_train_stage_records_the_report_with_what_accepted_each_finding(tmp_path):
    input_fns = models.input_fns(models.image_input_fn, label_dtype=np.int64, as_dict=False)
    report = check(models.mnist_like_model_fn, input_fns, accept=["dtype:label"])
    uri = strict.record_report(report, str(tmp_path))
    assert uri == str(tmp_path / strict.STRICT_FILE)
    with open(uri, encoding="utf-8") as f:
        record = json.load(f)
    assert record["checks"] == ALL_CHECKS and record["accept"] == ["dtype:label"]
    assert record["counts"] == {"fails": 0, "accepted": 2, "differs": 0, "notes": 0}
    assert [(f["name"], f["severity"], f["accepted_by"]) for f in record["findings"]] == [
        ("dtype:label", strict.NOTE, "dtype:label")
    ] * 2
    assert record["findings"][0]["message"] == report.findings[0].message


def test_a_python_branch_on_a_tensor_is_refused_with_the_users_line():
    def branching_model_fn(features, labels, mode, params):
        if tf.reduce_mean(features["image"]) > 0:  # a host-side Python decision on a TPU tensor
            features = {"image": -features["image"]}
        return models.schedule_model_fn(features, labels, mode, params)

    with pytest.raises(strict.TPUStrictError) as excinfo:
        strict.check_model(JOB, None, branching_model_fn, **models.input_fns(models.image_input_fn))
    report = excinfo.value.report
    assert [f.name for f in report.blocking] == ["model:train", "model:eval", "model:infer"]
    line = inspect.getsourcelines(branching_model_fn)[1] + 1
    assert "TensorFlow raised OperatorNotAllowedInGraphError: Using a symbolic `tf.Tensor` as a Python `bool`" in (
        report.blocking[0].message
    )
    assert f" at test_patterns.py:{line} (in {branching_model_fn.__qualname__})." in report.blocking[0].message
