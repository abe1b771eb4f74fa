"""A user's model through the pipeline's stages: what each stage's component calls when the job names a
`model_fn` (`job.model.model_fn`), on a preparation of their TFRecords (`model.user.prepare`).

Each function takes the typed job (read from the artifacts) and the prepared records, makes the `engine.user.run`
call that does the stage's work, and returns the result type the built-in stage returns (`TrainResult`,
`Evaluation`, `PredictResult`, `ExportResult`), so the components describe both kinds of model the same way.
The user's code is imported here, in the stage's own process: from a local folder, or from the wheel a Vertex
AI run staged (`model.user.package`), copied locally first when it is on gs://.
"""

from __future__ import annotations

import json
import os
import tempfile
from typing import Any, Dict, List, Mapping, Optional, Tuple

import numpy as np
import tensorflow as tf

from estimator_lib import storage
from estimator_lib.config import BlessingConfig, JobConfig
from estimator_lib.config.feature_spec import FeatureSpec
from estimator_lib.config.run import SPLIT, TFRECORD, prediction_kind
from estimator_lib.config.skew import SkewConfig
from estimator_lib.data.common import EVAL, TRAIN
from estimator_lib.engine.user import run
from estimator_lib.engine.user.importance import user_importance
from estimator_lib.estimator import TrainResult
from estimator_lib.evaluation import slices
from estimator_lib.evaluation.blessing import decide_user
from estimator_lib.evaluation.evaluate import Evaluation
from estimator_lib.export import ExportResult
from estimator_lib.export.saved_model import METADATA_FILE, describe_saved_model
from estimator_lib.model import checkpoints, inputs
from estimator_lib.model.user import records
from estimator_lib.model.user.prepare import PreparedRecords
from estimator_lib.predict import PredictResult
from estimator_lib.predict.skew import SkewCheck

_LOCAL_CODE = os.path.join(tempfile.gettempdir(), "tpu-pipeline-user-code")


def locate_code(code: Optional[str]) -> Optional[str]:
    """Where the user's code is imported from: the folder or local wheel itself, or a local copy of a gs://
    wheel (a zip on the import path: the wheel's files are its packages)."""
    if not code or not storage.is_gcs(code):
        return code
    local = os.path.join(_LOCAL_CODE, os.path.basename(code))
    if not os.path.exists(local):
        os.makedirs(_LOCAL_CODE, exist_ok=True)
        storage.download_file(code, local + ".part")
        os.replace(local + ".part", local)
    return local


def user_model(job: JobConfig, prepared: PreparedRecords) -> run.UserModel:
    """The job's model_fn, hyperparameters, code and input_fn, on the prepared records' spec, with the training
    budget resolved once from the train split's count (`params['train_steps']` in every stage)."""
    if not job.model.model_fn:
        raise ValueError("the job names no model_fn (model.model_fn): it trains a built-in family")
    model = job.model
    user = run.UserModel(
        model.model_fn, prepared.spec, dict(model.hparams), locate_code(model.code), input_fn=model.input_fn
    )
    return run.resolve_train_steps(job, user, prepared.counts.get(TRAIN))


def train(job: JobConfig, prepared: PreparedRecords, model_dir: str, progress_seconds: float = 10.0) -> TrainResult:
    """Trains on the train split to the job's budget (resuming from `model_dir`'s newest checkpoint), warm
    started from `job.training.warm_start_from` when the model directory is new; a progress line every
    `progress_seconds`."""
    count = prepared.counts[TRAIN]
    step = run.train(
        job,
        user_model(job, prepared),
        prepared.files(TRAIN),
        model_dir,
        num_train_examples=count,
        warm_start_from=job.training.warm_start_from,
        progress_seconds=progress_seconds,
    )
    checkpoint = checkpoints.selected_checkpoint(model_dir)
    return TrainResult(model_dir, step, checkpoint, step, job.training.budget(count))


def evaluate(
    job: JobConfig,
    prepared: PreparedRecords,
    model_dir: str,
    config: BlessingConfig,
    baseline_dir: Optional[str],
) -> Evaluation:
    """The user's metric_fn on every eval record (padding masked out), and on each slice `config.slices` names
    (in the same pass), and the verdict: the thresholds, the slices' checks, and the comparison with the
    published model `baseline_dir` evaluated on the same records by the same metric_fn; then feature importance by
    the same metric_fn on a sample of them (`engine.user.importance`)."""
    config.check_slice_features(prepared.spec.scalars, "scalar features of the feature spec")  # before any work
    user = user_model(job, prepared)
    count = prepared.counts[EVAL]
    sets = slice_sets(prepared.spec, prepared.files(EVAL), config) if config.slices else ()
    result = run.evaluate(job, user, prepared.files(EVAL), model_dir, num_examples=count, slices=sets)
    overall, entries = run.split_slice_metrics(result.metrics, sets)
    table = None
    if sets:
        table = slices.slice_table(
            config, slices.table_metric(config, config.comparison_metric or ""), overall, entries
        )
    baseline = None
    if baseline_dir:
        with tempfile.TemporaryDirectory(prefix="baseline-") as work_dir:  # the estimator's eval events
            baseline = run.evaluate_published(
                job, user, prepared.files(EVAL), baseline_dir, work_dir, num_examples=count
            ).metrics
    blessing = decide_user(config, overall, count, baseline, baseline_dir, slices=table)
    importance = user_importance(job, user, prepared.files(EVAL), result.checkpoint, count, config)
    return Evaluation(overall, result.global_step, result.checkpoint, blessing, slices=table, importance=importance)


def slice_sets(spec: FeatureSpec, files: List[str], config: BlessingConfig) -> Tuple[slices.SliceSet, ...]:
    """The eval records' slices (`config.slices`), from one host read of the features they name: a float
    feature by quantile buckets of the eval records, an integer or text one by value; at most
    `slices.MAX_USER_SLICES` (the metric_fn runs once per slice in the eval graph)."""
    labels = {}
    for name in config.slice_features:
        values = np.asarray(records.read_column(inputs.resolve_files(files), spec.feature(name)))
        if spec.feature(name).dtype != "float32":
            values = values.astype(str).astype(object)
        labels[name] = slices.value_labels(values, config.slice_buckets)
    return slices.assign_slices(labels, config.slices, slices.MAX_USER_SLICES)


def predict_inputs(prepared: PreparedRecords, data: str) -> Tuple[List[str], Optional[int]]:
    """The files `data` names ("eval" or "train": the prepared split's, or TFRecords the spec describes) and their
    record count when the preparation knows it."""
    if prediction_kind(data) == SPLIT:
        return prepared.files(data), prepared.counts[data]
    pattern = storage.join(data, "*") if data.endswith("/") or prediction_kind(data) != TFRECORD else data
    return inputs.resolve_files(pattern), None


def skew_check(prepared: PreparedRecords, skew: Optional[SkewConfig]) -> Optional[SkewCheck]:
    """The skew check of scored records against the preparation's profile of its train split (`skew`, None: not
    checked); a user's predictions are their own, and are not compared with the eval records'."""
    return None if skew is None else SkewCheck(prepared.profile(), skew)


def predict(
    job: JobConfig,
    prepared: PreparedRecords,
    model_dir: str,
    data: str,
    output_dir: str,
    skew: Optional[SkewConfig] = None,
) -> PredictResult:
    """Predicts `data` ("eval", "train", or TFRecords the spec describes; the label is not read) and publishes
    one JSON Lines row per record, in input order, with the `skew` check's skew.json (None: not checked; on Apache
    Beam: `engine.user.beam.predict_stage`).

    Raises:
      SkewError: with `predict.skew=block`, the records are skewed; nothing is published."""
    files, count = predict_inputs(prepared, data)
    user = user_model(job, prepared)
    finish = run.skew_finish(skew_check(prepared, skew), files, prepared.spec, count)
    return run.predict(job, user, files, model_dir, output_dir, num_examples=count, finish=finish)


def export(job: JobConfig, prepared: PreparedRecords, model_dir: str, export_base: str) -> ExportResult:
    """Exports (`serve` and `serve,tpu`), verified on the first eval records, published as export_base/<version>."""
    user, verify = user_model(job, prepared), prepared.files(EVAL)
    done = run.export(job, user, model_dir, export_base, verify_files=verify, data_profile=prepared.profile())
    export_dir = done["export_dir"]
    metadata: Dict[str, Any] = _read_json(storage.join(export_dir, METADATA_FILE))
    metadata["global_step"] = int(tf.train.load_variable(metadata["checkpoint"], "global_step"))
    metadata["serving"] = {"raw_inputs": [feature.name for feature in prepared.spec.model_features]}  # `raw`'s
    tag_sets = tuple(tuple(tags) for tags in done["tag_sets"])
    return ExportResult(export_dir, tag_sets, describe_saved_model(export_dir), metadata)


def _read_json(uri: str) -> Mapping[str, Any]:
    return dict(json.loads(storage.read_text(uri)))
