"""The only module that builds `RunConfig`, `TPUConfig` and `TPUEstimator`; `train` and `evaluate`.

`tf.estimator` ends with TensorFlow 2.15: keeping its construction here keeps a later move to
`tf.distribute` small. Everything is passed in as arguments; nothing here reads flags or the environment.
"""

from __future__ import annotations

import dataclasses
import random
from typing import Dict, Optional

import numpy as np
import tensorflow as tf
from tensorflow_estimator.python.estimator.tpu.tpu_estimator import ExportSavedModelApiVersion

from estimator_lib import strict
from estimator_lib.config import JobConfig
from estimator_lib.model import inputs, metrics
from estimator_lib.model.inputs import Patterns
from estimator_lib.model.model_fn import build_model_fn
from estimator_lib.schema import Schema

tpu_lib = tf.compat.v1.estimator.tpu


def enable_determinism(seed: int) -> None:
    """Seeds Python, NumPy and TensorFlow and makes TF ops deterministic (bitwise repeatable on CPU).

    All three are needed: the graph seed (RunConfig.tf_random_seed) fixes initialisers and dropout,
    `set_random_seed` fixes anything drawing from Python/NumPy/Keras, op determinism fixes kernels.
    """
    random.seed(seed)
    np.random.seed(seed)
    tf.keras.utils.set_random_seed(seed)
    tf.config.experimental.enable_op_determinism()


def _cluster_resolver(job: JobConfig):
    tpu = job.tpu
    return tf.distribute.cluster_resolver.TPUClusterResolver(tpu=tpu.tpu_name, zone=tpu.zone, project=tpu.project)


def build_run_config(job: JobConfig, model_dir: str) -> tpu_lib.RunConfig:
    """RunConfig with TPUConfig for `job`: a TPUClusterResolver when use_tpu, plain CPU otherwise."""
    tpu = job.tpu
    tpu_config = tpu_lib.TPUConfig(
        iterations_per_loop=tpu.iterations_per_loop,
        num_shards=tpu.num_cores if tpu.use_tpu else None,
        per_host_input_for_training=getattr(tpu_lib.InputPipelineConfig, tpu.per_host_input),
    )
    return tpu_lib.RunConfig(
        cluster=_cluster_resolver(job) if tpu.use_tpu else None,
        model_dir=model_dir,
        tf_random_seed=job.training.seed,
        save_checkpoints_steps=job.training.save_checkpoints_steps,
        keep_checkpoint_max=job.training.keep_checkpoint_max,
        log_step_count_steps=tpu.iterations_per_loop,
        tpu_config=tpu_config,
    )


def build_estimator(
    job: JobConfig, schema: Schema, model_dir: str, export_saved_model_api_version: int = 1
) -> tpu_lib.TPUEstimator:
    """The TPUEstimator for `job`. Batch sizes are global; TPUEstimator divides them by the replicas.

    `export_saved_model` writes a CPU (`serve`) and a TPU (`serve,tpu`) meta graph into one SavedModel.
    """
    if job.training.deterministic:
        enable_determinism(job.training.seed)
    api_versions = {1: ExportSavedModelApiVersion.V1, 2: ExportSavedModelApiVersion.V2}
    if export_saved_model_api_version not in api_versions:
        raise ValueError(f"export_saved_model_api_version={export_saved_model_api_version} must be 1 or 2")
    return tpu_lib.TPUEstimator(
        model_fn=build_model_fn(schema, job),
        config=build_run_config(job, model_dir),
        use_tpu=job.tpu.use_tpu,
        train_batch_size=job.training.train_batch_size,
        eval_batch_size=job.training.eval_batch_size,
        predict_batch_size=job.training.predict_batch_size,
        eval_on_tpu=job.tpu.eval_on_tpu,
        export_to_tpu=True,
        export_to_cpu=True,
        export_saved_model_api_version=api_versions[export_saved_model_api_version],
    )


@dataclasses.dataclass(frozen=True)
class TrainResult:
    model_dir: str
    global_step: int
    checkpoint: str


@dataclasses.dataclass(frozen=True)
class EvalResult:
    """Metrics over the real rows of the evaluation data (padding weighted out)."""

    metrics: Dict[str, float]
    global_step: int
    num_examples: int
    steps: int
    checkpoint: str


def train(job: JobConfig, schema: Schema, train_files: Patterns, model_dir: str) -> TrainResult:
    """Trains until `job.training.train_steps` (resuming from the newest checkpoint in `model_dir`)."""
    estimator = build_estimator(job, schema, model_dir)
    input_fn = inputs.train_input_fn_builder(
        train_files, schema, job.training.seed, job.training.shuffle_buffer_size, model_dir=model_dir
    )
    if job.tpu.strict:  # every mode: a model that cannot predict on a TPU should not be trained for one
        strict.check_model(job, schema, build_model_fn(schema, job), train_input_fn=input_fn)
    estimator.train(input_fn, max_steps=job.training.train_steps)
    checkpoint = estimator.latest_checkpoint()
    return TrainResult(model_dir, inputs.start_step(model_dir), checkpoint)


def evaluate(
    job: JobConfig,
    schema: Schema,
    eval_files: Patterns,
    model_dir: str,
    num_examples: Optional[int] = None,
    checkpoint_path: Optional[str] = None,
    name: Optional[str] = None,
) -> EvalResult:
    """Evaluates a checkpoint (the newest in `model_dir` by default) on every eval record exactly once.

    Runs `eval_steps(N, eval_batch_size)` steps over batches padded to full size; metrics ignore padding.
    """
    estimator = build_estimator(job, schema, model_dir)
    input_fn = inputs.eval_input_fn_builder(eval_files, schema, num_examples)
    count = input_fn.num_examples  # type: ignore[attr-defined]
    if count == 0:
        raise ValueError(f"the evaluation data {eval_files!r} holds no record; evaluate needs at least one")
    steps = inputs.eval_steps(count, job.training.eval_batch_size)
    checkpoint = checkpoint_path or estimator.latest_checkpoint()
    if checkpoint is None:
        raise FileNotFoundError(f"no checkpoint in {model_dir!r} to evaluate; train first")
    if job.tpu.strict:
        model_fn = build_model_fn(schema, job)
        strict.check_model(job, schema, model_fn, eval_input_fn=input_fn, eval_steps=steps, modes=("eval",))
    raw = estimator.evaluate(input_fn, steps=steps, checkpoint_path=checkpoint, name=name)
    step = int(raw.pop("global_step"))
    raw.pop("loss", None)  # averages padded batch losses; "mean_loss" is the exact one
    values = {k: float(v) for k, v in raw.items()}
    return EvalResult(metrics.readable_names(values, schema.label), step, count, steps, checkpoint)
