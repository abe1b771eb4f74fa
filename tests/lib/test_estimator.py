"""RunConfig/TPUConfig/TPUEstimator construction for CPU and for a Cloud TPU VM (built, not run: no TPU here)."""

from __future__ import annotations

import pytest
import synthetic
import tensorflow as tf

from estimator_lib import estimator
from estimator_lib.config import JobConfig, TPUSettings, TrainingConfig
from estimator_lib.model import inputs
from estimator_lib.model.inputs import PREDICT_BATCHES_PER_RUN

tpu_lib = tf.compat.v1.estimator.tpu


def test_cpu_run_config(tmp_path):
    job = JobConfig(
        tpu=TPUSettings(iterations_per_loop=50), training=TrainingConfig(seed=9, save_checkpoints_steps=100)
    )
    config = estimator.build_run_config(job, str(tmp_path))
    assert config.cluster_spec.as_dict() == {} and config.master == ""
    assert (config.tf_random_seed, config.save_checkpoints_steps) == (9, 100)
    assert config.tpu_config.num_shards is None and config.tpu_config.iterations_per_loop == 50
    assert config.log_step_count_steps == 50  # a user's model: Estimator's own step counter
    built_in = estimator.build_estimator(job, synthetic.make_schema(), str(tmp_path))
    assert built_in.config.log_step_count_steps is None  # the progress hook's rate over the stage instead


def test_tpu_vm_run_config_uses_the_local_cluster_resolver(tmp_path):
    job = JobConfig(
        tpu=TPUSettings(use_tpu=True, tpu_name="local", num_cores=8, iterations_per_loop=100),
        training=TrainingConfig(train_batch_size=1024, eval_batch_size=256, predict_batch_size=256),
    )
    config = estimator.build_run_config(job, str(tmp_path))
    assert isinstance(config.cluster, tf.distribute.cluster_resolver.TPUClusterResolver)
    assert config.tpu_config.num_shards == 8
    assert config.tpu_config.per_host_input_for_training == tpu_lib.InputPipelineConfig.PER_HOST_V2
    est = estimator.build_estimator(job, synthetic.make_schema(), str(tmp_path))
    assert isinstance(est, tpu_lib.TPUEstimator)
    # The context's replica count and per-replica batch need a TPU to discover; only the request is checked.
    assert (est._ctx._train_batch_size, est._ctx._use_tpu, est.config.tpu_config.num_shards) == (1024, True, 8)
    assert est._export_to_tpu and est._export_to_cpu


def test_several_predict_batches_per_session_run_on_cpu_only(tmp_path):
    schema, batches = synthetic.make_schema(), {PREDICT_BATCHES_PER_RUN: 8}
    tpu = JobConfig(tpu=TPUSettings(use_tpu=True, tpu_name="local", num_cores=8))
    assert estimator.build_estimator(JobConfig(), schema, str(tmp_path), predict_batches_per_run=8).params == batches
    assert estimator.build_estimator(JobConfig(), schema, str(tmp_path)).params == {}
    assert estimator.build_estimator(tpu, schema, str(tmp_path), predict_batches_per_run=8).params == {}
    large = inputs.PREDICT_LOOP_MIN_ROWS
    assert inputs.predict_batches_per_run(1024, large) == inputs.PREDICT_ROWS_PER_RUN // 1024
    assert inputs.predict_batches_per_run(inputs.PREDICT_ROWS_PER_RUN + 1, large) == 1
    assert inputs.predict_batches_per_run(1024, large - 1) == 1  # the loop's start-up would not pay


def test_export_api_version_must_be_1_or_2(tmp_path):
    with pytest.raises(ValueError, match="export_saved_model_api_version=3 must be 1 or 2"):
        estimator.build_estimator(JobConfig(), synthetic.make_schema(), str(tmp_path), export_saved_model_api_version=3)


def test_evaluate_refuses_an_empty_eval_split(tmp_path):
    schema = synthetic.make_schema()
    pattern, _ = synthetic.write_dataset(str(tmp_path / "empty"), [], schema, shards=1)
    with pytest.raises(ValueError, match="holds no record; evaluate needs at least one"):
        estimator.evaluate(JobConfig(), schema, pattern, str(tmp_path / "model"))
