"""The only module that builds `RunConfig`, `TPUConfig` and `TPUEstimator`; `train` (with early stopping on
the validation split; `train_prepared` on a prepared dataset) and `evaluate`.

`tf.estimator` ends with TensorFlow 2.15: keeping its construction here keeps a later move to
`tf.distribute` small. Everything is passed in as arguments; nothing here reads flags or the environment.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import random
import time
from typing import Any, Dict, Optional

import numpy as np
import tensorflow as tf
from tensorflow_estimator.python.estimator.tpu.tpu_estimator import ExportSavedModelApiVersion

from estimator_lib import preflight, storage, strict
from estimator_lib.config import JobConfig
from estimator_lib.data.common import TRAIN, VALID
from estimator_lib.data.prepare import PrepareResult
from estimator_lib.model import checkpoints, inputs, metrics, races
from estimator_lib.model.hooks import ProgressHook
from estimator_lib.model.inputs import PREDICT_BATCHES_PER_RUN, STEPS_PER_RUN, Patterns
from estimator_lib.model.model_fn import EVAL_ROWS_PER_STEP, TARGET_STEP, build_model_fn, learning_rate
from estimator_lib.progress import TrainingProgress, duration, early_stop_line
from estimator_lib.schema import Schema

tpu_lib = tf.compat.v1.estimator.tpu
log = logging.getLogger(__name__)
PREFLIGHT_FILE = "preflight.json"  # beside the checkpoints: the train stage's preflight (`record_preflight`)


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


def build_run_config(job: JobConfig, model_dir: str, count_steps: bool = True) -> tpu_lib.RunConfig:
    """RunConfig with TPUConfig for `job`: a TPUClusterResolver when use_tpu, plain CPU otherwise.

    `count_steps`: Estimator's own `global_step/sec` and `examples/sec` (logged and summarised every
    `iterations_per_loop` steps, measured within one `train()` call). The built-in models turn them off: their
    progress hook reports the rate over the whole stage (`model.hooks.ProgressHook`).
    """
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
        log_step_count_steps=tpu.iterations_per_loop if count_steps else None,
        tpu_config=tpu_config,
    )


def build_estimator(
    job: JobConfig,
    schema: Schema,
    model_dir: str,
    export_saved_model_api_version: int = 1,
    metric_fn: Optional[metrics.MetricFn] = None,
    target_step: Optional[int] = None,
    predict_batches_per_run: int = 1,
    eval_rows_per_step: Optional[float] = None,
) -> tpu_lib.TPUEstimator:
    """The TPUEstimator for `job`. Batch sizes are global; TPUEstimator divides them by the replicas.

    `export_saved_model` writes a CPU (`serve`) and a TPU (`serve,tpu`) meta graph into one SavedModel.
    `metric_fn` replaces the label head's eval metrics (see `build_model_fn`). `target_step`, the `max_steps`
    of a `train()` call, lets training on CPU run several steps per `session.run` (`_cpu_loop_params`);
    `predict_batches_per_run` > 1 does the same for prediction on CPU (with `inputs.predict_input_fn_builder`'s
    input only: `model_fn.predict_loop`). `eval_rows_per_step`, the eval rows over the eval steps, makes the
    evaluation's `loss` the exact mean loss of the real rows (`model_fn.EVAL_ROWS_PER_STEP`).
    """
    api_versions = {1: ExportSavedModelApiVersion.V1, 2: ExportSavedModelApiVersion.V2}
    if export_saved_model_api_version not in api_versions:
        raise ValueError(f"export_saved_model_api_version={export_saved_model_api_version} must be 1 or 2")
    return _tpu_estimator(
        job,
        model_dir,
        build_model_fn(schema, job, metric_fn),
        {
            **_cpu_loop_params(job, schema, target_step, predict_batches_per_run),
            **({} if eval_rows_per_step is None else {EVAL_ROWS_PER_STEP: eval_rows_per_step}),
        },
        count_steps=False,
        export_saved_model_api_version=api_versions[export_saved_model_api_version],
    )


def build_user_estimator(
    job: JobConfig, model_fn, hparams: Dict, model_dir: str, warm_start_from: Optional[str] = None
) -> tpu_lib.TPUEstimator:
    """The TPUEstimator for a user's own model_fn (`model.user.model_fn.wrap_model_fn` of it), with `hparams` as
    `params` (the user's hyperparameters and the library's `train_steps`, `engine.user.run.UserModel.params`;
    TPUEstimator adds `batch_size`, `use_tpu` and, on a TPU, `context`, and passes them to the input_fn too).

    The run config and the batch sizes are the job's, as for the built-in models; `warm_start_from` (a
    checkpoint or SavedModel variables directory) initialises the variables the checkpoint shares by name.
    """
    return _tpu_estimator(job, model_dir, model_fn, dict(hparams), warm_start_from=warm_start_from)


def _tpu_estimator(
    job: JobConfig, model_dir: str, model_fn, params: Dict, count_steps: bool = True, **options
) -> tpu_lib.TPUEstimator:
    """The one TPUEstimator construction: the job's run config, batch sizes (global) and TPU settings, exporting
    a CPU and a TPU meta graph; `options` are the remaining TPUEstimator arguments. When the job asks for
    determinism: op determinism enabled first, and the training step's unordered reads and writes of a variable
    ordered read first (`model.races`: a learning rate reading the global step its own train_op increments)."""
    if job.training.deterministic:
        enable_determinism(job.training.seed)
        model_fn = races.ordered_model_fn(model_fn)
    return tpu_lib.TPUEstimator(
        model_fn=model_fn,
        config=build_run_config(job, model_dir, count_steps),
        use_tpu=job.tpu.use_tpu,
        train_batch_size=job.training.train_batch_size,
        eval_batch_size=job.training.eval_batch_size,
        predict_batch_size=job.training.predict_batch_size,
        eval_on_tpu=job.tpu.eval_on_tpu,
        export_to_tpu=True,
        export_to_cpu=True,
        params=params,
        **options,
    )


def _cpu_loop_params(
    job: JobConfig, schema: Schema, target_step: Optional[int], predict_batches_per_run: int
) -> Dict[str, int]:
    """On CPU, training runs `inputs.steps_per_run` steps per `session.run` (a loop in the graph, as
    `iterations_per_loop` runs on a TPU), which saves the per-step round trip through the session and its hooks;
    prediction likewise runs `predict_batches_per_run` batches. On a TPU, TPUEstimator's own loop does this."""
    if job.tpu.use_tpu:
        return {}
    params = {PREDICT_BATCHES_PER_RUN: predict_batches_per_run} if predict_batches_per_run > 1 else {}
    if target_step is None:
        return params
    steps = inputs.steps_per_run(job.tpu.iterations_per_loop, job.training.train_batch_size, schema)
    return {**params, STEPS_PER_RUN: steps, TARGET_STEP: target_step}


@dataclasses.dataclass(frozen=True)
class TrainResult:
    """What training leaves behind.

    Attributes:
      model_dir: the estimator's model directory.
      global_step: the step of `checkpoint`.
      checkpoint: the checkpoint that is the model (`checkpoints.selected_checkpoint`, which evaluation,
        prediction and export use by default): the best by validation loss (its copy in `model_dir/best/`), or
        the newest when there is no validation split.
      trained_steps: the step training reached (the newest checkpoint).
      budget: the step budget (`TrainingConfig.budget`).
      validation: the rounds' validation losses, the best round and why training stopped; None without a
        validation split.
    """

    model_dir: str
    global_step: int
    checkpoint: str
    trained_steps: int = 0
    budget: int = 0
    validation: Optional[checkpoints.ValidationHistory] = None


@dataclasses.dataclass(frozen=True)
class EvalResult:
    """Metrics over the real rows of the evaluation data (padding weighted out)."""

    metrics: Dict[str, float]
    global_step: int
    num_examples: int
    steps: int
    checkpoint: str


def train(
    job: JobConfig,
    schema: Schema,
    train_files: Patterns,
    model_dir: str,
    *,
    num_train_examples: Optional[int] = None,
    valid_files: Optional[Patterns] = None,
    num_valid_examples: Optional[int] = None,
    progress_seconds: float = 10.0,
) -> TrainResult:
    """Trains for the step budget, in rounds judged on the validation split when there is one.

    The settings left null to follow the data are set first (`JobConfig.for_data`: the budget, the rounds, the l2)
    from the train split's row count and the model's features. Without validation rows, one `train()` call runs the
    budget and the newest checkpoint is the model. With them, training runs in rounds of
    `training.early_stopping.every_steps` steps; after each, the mean loss over every validation row is measured
    with the padded, fixed-step evaluation (on the TPU when training runs there); a checkpoint that lowers it is
    copied to `model_dir/best/`; training stops after `training.early_stopping.patience` rounds without an
    improvement, or when the budget is spent. The rounds are recorded in `model_dir/validation.json`, so a rerun
    resumes from the newest checkpoint and the recorded rounds (and a finished run returns at once).

    Args:
      job: the job config.
      schema: the prepared dataset's schema.
      train_files: TFRecord patterns of the train split.
      model_dir: the estimator's model directory (local or gs://).
      num_train_examples: rows in the train split (prepare's manifest); counted from the files when None.
      valid_files, num_valid_examples: the validation split and its row count (counted when None); None, or a
        count of 0, trains without early stopping.
      progress_seconds: the cadence of the progress lines (`TrainingProgress`): step, loss, steps/s over the
        stage's wall time (validation and checkpoints included), and the ETA of the stage's remaining work.

    Raises:
      DataError: the files' records were not prepared with `schema` (`inputs.check_records`, which reads the
        first record of each file before anything trains): a feature of another type, or one they lack.
    """
    count = inputs.count_records(train_files) if num_train_examples is None else num_train_examples
    job = job.for_data(count, len(schema.select(job.model.features).features))  # the model_fn reads the budget, l2
    input_fn = _train_input_fn(job, schema, train_files, model_dir, count)
    valid_fn = _validation_input_fn(valid_files, schema, num_valid_examples)
    if job.tpu.strict:  # every mode: a model that cannot predict on a TPU should not be trained for one
        model_fn, accept = build_model_fn(schema, job), job.tpu.strict_accept
        report = strict.check_model(
            job, schema, model_fn, train_input_fn=input_fn, eval_input_fn=valid_fn, accept=accept
        )
        strict.record_report(report, model_dir)
        found = preflight.run_preflight(job, schema, model_fn, train_input_fn=input_fn, **recorded_target(job))
        record_preflight(found, model_dir)
    progress = _stage_progress(job, model_dir, valid_fn is not None, progress_seconds)
    if valid_fn is None:
        _train_to(job, schema, model_dir, input_fn, job.training.train_steps, progress)
        step = inputs.start_step(model_dir)
        _log_trained(progress, step)
        return TrainResult(model_dir, step, tf.train.latest_checkpoint(model_dir), step, job.training.train_steps)
    history = _train_in_rounds(job, schema, model_dir, input_fn, valid_fn, progress)
    _log_trained(progress, inputs.start_step(model_dir))
    return TrainResult(
        model_dir,
        int(history.best_step),
        storage.join(model_dir, str(history.best_checkpoint)),
        inputs.start_step(model_dir),
        job.training.train_steps,
        history,
    )


def _train_input_fn(
    job: JobConfig, schema: Schema, files: Patterns, model_dir: Optional[str], count: int
) -> inputs.InputFn:
    training = job.training
    return inputs.train_input_fn_builder(
        files, schema, training.seed, training.shuffle_buffer_size, model_dir=model_dir, num_examples=count
    )


def recorded_target(job: JobConfig) -> Dict[str, Any]:
    """What strict mode's preflight is made for (`run_preflight`'s arguments): a job names its cores
    (`tpu.num_cores`) but not its chip, so the chip of the product's default TPU type, v3 (`tpu-pipeline preflight
    --tpu TYPE` plans for another). A record, not a decision (the stage trains whatever it finds), kept cheap: the
    step compiled once, at the job's batch (the largest batch is searched by `tpu-pipeline preflight`), the input
    measured for 0.5 s."""
    return {"accelerator": "TPU_V3", "cores": job.tpu.num_cores, "input_seconds": 0.5, "max_compiles": 1}


def record_preflight(found: preflight.Preflight, model_dir: str) -> str:
    """Writes `found.to_dict()` with its verdict line ("line") and console block ("lines") as `PREFLIGHT_FILE` in
    the model directory, beside strict mode's record, and logs it; returns its URI."""
    uri = storage.join(model_dir, PREFLIGHT_FILE)
    record = {**found.to_dict(), "line": found.verdict_line(), "lines": found.lines()}
    storage.write_text(uri, json.dumps(record, indent=2, sort_keys=True))
    log.info("%s", found.describe())
    return uri


def preflight_prepared(
    job: JobConfig, prepared: PrepareResult, accelerator: str, cores: int, **options: Any
) -> preflight.Preflight:
    """`preflight.run_preflight` of a built-in family on a prepared dataset, its model_fn and train input_fn built
    as `train` builds them (`job` resolved for the data: `JobConfig.for_data`); `options` are run_preflight's."""
    schema = prepared.schema
    input_fn = _train_input_fn(job, schema, prepared.files(TRAIN), None, prepared.counts[TRAIN])
    model_fn = build_model_fn(schema, job)
    return preflight.run_preflight(
        job, schema, model_fn, train_input_fn=input_fn, accelerator=accelerator, cores=cores, **options
    )


def _stage_progress(job: JobConfig, model_dir: str, validates: bool, every_seconds: float) -> TrainingProgress:
    """The progress of this training stage from now: rounds of `every_steps` when it validates."""
    training = job.training
    return TrainingProgress(
        budget=training.train_steps,
        batch_size=training.train_batch_size,
        start_step=inputs.start_step(model_dir),
        started=time.monotonic(),
        round_steps=training.early_stopping.every_steps if validates else None,
        patience=training.early_stopping.patience if validates else None,
        every_seconds=every_seconds,
    )


def _log_trained(progress: TrainingProgress, step: int) -> None:
    now = time.monotonic()
    if step > progress.start_step:
        log.info(
            "trained to step %d in %s (%.1f steps/s, validation included)",
            step,
            duration(now - progress.started),
            progress.steps_per_second(step, now),
        )


def train_prepared(
    job: JobConfig, prepared: PrepareResult, model_dir: str, progress_seconds: float = 10.0
) -> TrainResult:
    """`train` on a prepared dataset: its train split, with its validation split (when it has rows) judging the
    rounds; the row counts come from the manifest. What the train stage calls."""
    return train(
        job,
        prepared.schema,
        prepared.files(TRAIN),
        model_dir,
        num_train_examples=prepared.counts[TRAIN],
        valid_files=prepared.files(VALID),
        num_valid_examples=prepared.counts.get(VALID, 0),
        progress_seconds=progress_seconds,
    )


def _validation_input_fn(files: Optional[Patterns], schema: Schema, count: Optional[int]):
    """The padded eval input_fn over the validation rows, or None when there are none."""
    if files is None or count == 0:
        return None
    input_fn = inputs.eval_input_fn_builder(files, schema, count)
    return input_fn if input_fn.num_examples else None  # type: ignore[attr-defined]


def _train_to(
    job: JobConfig, schema: Schema, model_dir: str, input_fn: inputs.InputFn, step: int, progress: TrainingProgress
) -> None:
    """Trains to global step `step`, reporting the stage's progress on the way (a session run trains
    `iterations_per_loop` steps, on a TPU and on CPU; the hook reads the global step after each)."""
    training = job.training
    hook = ProgressHook(progress, model_dir, lambda s: learning_rate(training.optimizer, training.train_steps, s))
    build_estimator(job, schema, model_dir, target_step=step).train(input_fn, max_steps=step, hooks=[hook])


def _train_in_rounds(
    job: JobConfig, schema: Schema, model_dir: str, input_fn, valid_fn, progress: TrainingProgress
) -> checkpoints.ValidationHistory:
    """The early-stopping loop: validate the newest checkpoint unless recorded, stop or train one more round."""
    history = checkpoints.read_history(model_dir)
    progress.rounds_since_best = history.rounds_since_best()
    budget, round_steps = job.training.train_steps, progress.round_steps
    while True:
        step = inputs.start_step(model_dir)
        if step > 0 and step not in history.steps:
            started = time.monotonic()
            history = _validate(job, schema, model_dir, valid_fn, step, history)
            progress.validated(time.monotonic() - started, history.best_step == step)
        stopped = _stop_reason(history, step, budget, job.training.early_stopping.patience)
        if stopped:
            break
        _train_to(job, schema, model_dir, input_fn, min(budget, (step // round_steps + 1) * round_steps), progress)
    if history.stopped != stopped:
        history = dataclasses.replace(history, stopped=stopped)
        checkpoints.write_history(model_dir, history)
    if stopped == "patience":
        log.info(early_stop_line(step, job.training.early_stopping.patience, history.best_step, history.best_loss))
    return history


def _stop_reason(history: checkpoints.ValidationHistory, step: int, budget: int, patience: Optional[int]):
    if step >= budget:
        return "budget"
    if patience is not None and history.rounds_since_best() >= patience:
        return "patience"
    return None


def _validate(job, schema, model_dir, valid_fn, step, history) -> checkpoints.ValidationHistory:
    """Measures the newest checkpoint's mean loss on the validation rows and keeps it if it is the best."""
    checkpoint = tf.train.latest_checkpoint(model_dir)
    loss = _evaluate(job, schema, model_dir, valid_fn, checkpoint, "valid", metrics.loss_metric_fn).metrics["loss"]
    improved = history.improves(loss, job.training.early_stopping.min_delta)
    if improved:
        checkpoints.keep_best(checkpoint, model_dir)
    history = history.with_round(step, loss, checkpoints.kept_name(checkpoint) if improved else None)
    checkpoints.write_history(model_dir, history)
    log.info("step %d: validation loss %.6f%s", step, loss, " (best so far)" if improved else "")
    return history


def evaluate(
    job: JobConfig,
    schema: Schema,
    eval_files: Patterns,
    model_dir: str,
    num_examples: Optional[int] = None,
    checkpoint_path: Optional[str] = None,
    name: Optional[str] = None,
) -> EvalResult:
    """Evaluates a checkpoint (by default the model's: `checkpoints.selected_checkpoint`) on every eval record
    exactly once.

    Runs `eval_steps(N, eval_batch_size)` steps over batches padded to full size; metrics ignore padding.

    Raises:
      DataError: the files' records were not prepared with `schema` (`inputs.check_records`).
    """
    input_fn = inputs.eval_input_fn_builder(eval_files, schema, num_examples)
    count = input_fn.num_examples  # type: ignore[attr-defined]
    if count == 0:
        raise ValueError(f"the evaluation data {eval_files!r} holds no record; evaluate needs at least one")
    checkpoint = checkpoint_path or checkpoints.selected_checkpoint(model_dir)
    if checkpoint is None:
        raise FileNotFoundError(f"no checkpoint in {model_dir!r} to evaluate; train first")
    if job.tpu.strict:
        steps = inputs.eval_steps(count, job.training.eval_batch_size)
        model_fn, accept = build_model_fn(schema, job), job.tpu.strict_accept
        strict.check_model(
            job, schema, model_fn, eval_input_fn=input_fn, eval_steps=steps, modes=("eval",), accept=accept
        )
    return _evaluate(job, schema, model_dir, input_fn, checkpoint, name)


def _evaluate(job, schema, model_dir, input_fn, checkpoint: str, name: Optional[str], metric_fn=None) -> EvalResult:
    count = input_fn.num_examples
    steps = inputs.eval_steps(count, job.training.eval_batch_size)
    estimator = build_estimator(job, schema, model_dir, metric_fn=metric_fn, eval_rows_per_step=count / steps)
    raw = estimator.evaluate(input_fn, steps=steps, checkpoint_path=checkpoint, name=name)
    step = int(raw.pop("global_step"))
    values = {k: float(v) for k, v in raw.items()}
    return EvalResult(metrics.readable_names(values, schema.label), step, count, steps, checkpoint)
