"""Train, evaluate, predict and export a user's own TPUEstimator model_fn on their TFRecords.

The same stages and guarantees as the built-in models: seeded, resumable training with static batches; an
evaluation over every record exactly once (padded rows masked out of the user's metric_fn); predictions in
input order, padding dropped, published atomically as sharded JSON Lines with a manifest
(`estimator_lib.predict.verify_output` reads them back); an export with `serve` and `serve,tpu` meta graphs,
verified by running the CPU graph on records before it is published.
"""

from __future__ import annotations

import bisect
import contextlib
import dataclasses
import itertools
import json
import math
import os
import time
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple

import numpy as np
import tensorflow as tf

from estimator_lib import preflight, storage, strict
from estimator_lib.config import JobConfig
from estimator_lib.config.feature_spec import FeatureSpec
from estimator_lib.engine.user import compat
from estimator_lib.estimator import EvalResult, build_user_estimator, record_preflight, recorded_target
from estimator_lib.evaluation.slices import SliceSet
from estimator_lib.export.saved_model import (
    ExportVerificationError,
    check_tag_sets,
    outputs_agree,
    run_cpu_graph,
)
from estimator_lib.model import checkpoints, inputs
from estimator_lib.model.hooks import ProgressHook
from estimator_lib.model.inputs import InputFn, Patterns
from estimator_lib.model.user import inputs as user_inputs
from estimator_lib.model.user import records
from estimator_lib.model.user.model_fn import (
    TRAIN_FILES,
    TRAIN_STEPS,
    SliceNames,
    apply_flags,
    check_hparams,
    check_model_fn,
    load_function,
    named_like,
    slice_metric_name,
    wrap_model_fn,
)
from estimator_lib.predict import PredictionError, PredictResult
from estimator_lib.predict.rows import Batch, HostRows
from estimator_lib.predict.shards import check_num_shards, commit_rows
from estimator_lib.predict.skew import SkewCheck, SkewFinish
from estimator_lib.progress import TrainingProgress
from estimator_lib.schema import INDEX_FEATURE, KEY_FEATURE, PADDING_FEATURE
from estimator_lib.strict import export as strict_export

EXAMPLES_INPUT = "examples"
RAW_SIGNATURE = "raw"
VERIFY_ROWS = 16
# The serving graph runs a batch of another size than the estimator's: a float may differ in its last bits.


@dataclasses.dataclass(frozen=True)
class UserModel:
    """A user's model: their model_fn ("package.module:function"), its hyperparameters (`params`), the spec of
    their records, the folder holding their code (put first on the import path), if any, their own training
    input_fn ("package.module:function"), if any, and the training budget in steps (`params['train_steps']`;
    None: `training.train_steps`, or what `train` counts)."""

    model_fn: str
    spec: FeatureSpec
    hparams: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    code_dir: Optional[str] = None
    slices: SliceNames = ()
    input_fn: Optional[str] = None
    train_steps: Optional[int] = None

    @property
    def params(self) -> Dict[str, Any]:
        """What the library adds to TPUEstimator's params: the hyperparameters and `train_steps` (when known)."""
        return {**self.hparams, **({} if self.train_steps is None else {TRAIN_STEPS: self.train_steps})}

    def load(self) -> Callable:
        """The wrapped model_fn TPUEstimator gets; checks TPUEstimator's contract first (`params`, reserved keys)
        and sets the hyperparameters on the code's absl flags (`apply_flags`). `slices` (each slice spec's slice
        names) makes its evaluation report the metrics per slice too."""
        function = load_function(self.model_fn, "--model-fn", self.code_dir)
        check_model_fn(function, self.model_fn)
        check_hparams(self.hparams, self.train_steps)
        apply_flags(self.hparams, self.model_fn.partition(":")[0])
        added = {} if self.train_steps is None else {TRAIN_STEPS: self.train_steps}
        return wrap_model_fn(function, self.slices, self.spec.single_input, added)

    def load_input_fn(self, train_files: Sequence[str]) -> InputFn:
        """The user's training input_fn (`input_fn`) as TPUEstimator calls it, with `params` holding the
        hyperparameters, `train_steps` and `train_files` (the train records' files); what it yields is checked
        against the spec (`user_inputs.user_input_fn`)."""
        if self.input_fn is None:
            raise ValueError("the user model names no input_fn (--input-fn); its training input is the spec's")
        function = load_function(self.input_fn, "--input-fn", self.code_dir)
        apply_flags(self.hparams, self.input_fn.partition(":")[0])
        given = {**self.params, TRAIN_FILES: list(train_files)}
        return user_inputs.user_input_fn(function, self.input_fn, self.spec, given)


def resolve_train_steps(job: JobConfig, user: UserModel, num_train_examples: Optional[int] = None) -> UserModel:
    """`user` with its training budget (`params['train_steps']`): its own, else the job's (`training.train_steps`,
    or `TrainingConfig.budget` of `num_train_examples` when given); unchanged when neither is known."""
    if user.train_steps is not None or (job.training.train_steps is None and not num_train_examples):
        return user
    return dataclasses.replace(user, train_steps=job.training.budget(num_train_examples or 0))


def _with_hparams(user: UserModel) -> Callable:
    """The user's model_fn as TPUEstimator calls it, its hyperparameters in `params`."""
    wrapped = user.load()
    hparams = user.params

    def model_fn(features, labels, mode, params, config):
        return wrapped(features, labels, mode, {**hparams, **params}, config)

    return named_like(model_fn, wrapped)


def _strict_check(
    job: JobConfig, user: UserModel, train_input_fn: InputFn, files: Sequence[str], count: Optional[int], model_dir: str
) -> None:
    """TPU-strict mode (`tpu.strict`): the user's model_fn built for the TPU target in every mode, on the train
    input_fn (the spec's or the user's own) and padded eval and predict input_fns over the train `files` (`count`
    records, counted when None), with their hyperparameters; its report and preflight recorded in `model_dir`."""
    model_fn = _with_hparams(user)
    eval_input_fn = user_inputs.padded_input_fn_builder(files, user.spec, count, with_label=True)
    count = eval_input_fn.num_examples  # type: ignore[attr-defined]
    report = strict.check_model(
        job,
        None,
        model_fn,
        train_input_fn=train_input_fn,
        eval_input_fn=eval_input_fn,
        predict_input_fn=user_inputs.padded_input_fn_builder(files, user.spec, count, with_label=False),
        accept=job.tpu.strict_accept,
    )
    strict.record_report(report, model_dir)
    found = preflight.run_preflight(job, None, model_fn, train_input_fn=train_input_fn, **recorded_target(job))
    record_preflight(found, model_dir)


def _train_input_fn(job: JobConfig, user: UserModel, files: Sequence[str], model_dir: Optional[str]) -> InputFn:
    """The training input: the user's own input_fn (checked against the spec), or the spec's."""
    if user.input_fn is None:
        training = job.training
        return user_inputs.train_input_fn_builder(
            files, user.spec, training.seed, training.shuffle_buffer_size, model_dir
        )
    input_fn = user.load_input_fn(files)
    _check_user_input(job, input_fn)
    return input_fn


def preflight_user(
    job: JobConfig, user: UserModel, train_files: Patterns, accelerator: str, cores: int, **options: Any
) -> preflight.Preflight:
    """`preflight.run_preflight` of the user's model_fn, it and its train input_fn built as `train` builds them;
    `options` are run_preflight's."""
    input_fn = _train_input_fn(job, user, inputs.resolve_files(train_files), None)
    return preflight.run_preflight(
        job, None, _with_hparams(user), train_input_fn=input_fn, accelerator=accelerator, cores=cores, **options
    )


@contextlib.contextmanager
def _named_records(files: Sequence[str], spec: FeatureSpec, with_label: bool) -> Iterator[None]:
    """Checks the files' first records against the spec; then a parse failure in the input pipeline becomes an
    error naming the file, record and feature."""
    records.check_first_records(files, spec, with_label)
    try:
        yield
    except tf.errors.InvalidArgumentError as e:
        records.raise_for_records(files, spec, with_label, e)


def checkpoint_of(model_dir: str, given: Optional[str], purpose: str) -> str:
    """`given`, or the model's checkpoint (`checkpoints.selected_checkpoint`); an error naming the fix."""
    checkpoint = given or checkpoints.selected_checkpoint(model_dir)
    if checkpoint is None:
        raise FileNotFoundError(f"no checkpoint in {model_dir!r} to {purpose}; train first")
    return checkpoint


def _estimator(job: JobConfig, user: UserModel, model_dir: str, warm_start_from: Optional[str] = None):
    return build_user_estimator(job, user.load(), user.params, model_dir, warm_start_from)


def _check_user_input(job: JobConfig, input_fn: InputFn) -> None:
    """Builds the user's input_fn once as TPUEstimator does on CPU (global batch), so what it yields is checked
    against the spec (`user_inputs.check_user_input`) before strict mode or training build anything. On a TPU
    its first call, with the TPU's params, is checked instead."""
    if job.tpu.use_tpu:
        return
    with tf.Graph().as_default():
        input_fn({"batch_size": job.training.train_batch_size})


def train(
    job: JobConfig,
    user: UserModel,
    train_files: Patterns,
    model_dir: str,
    *,
    num_train_examples: Optional[int] = None,
    warm_start_from: Optional[str] = None,
    progress_seconds: float = 10.0,
) -> int:
    """Trains the user's model to the job's step budget (`training.train_steps`, or `TrainingConfig.budget`
    of the records' count; the model_fn gets it as `params['train_steps']`); a rerun continues from the newest
    checkpoint in `model_dir`. Returns the step.

    The input is built from the spec, or, when `user.input_fn` names one, is the user's own input_fn, checked
    first against what the spec gives the model in evaluation and prediction (`user_inputs.check_user_input`);
    `train_files` are still read for the record count and reach it as `params['train_files']`.

    `warm_start_from`: a SavedModel directory (the last published model), a model directory or a checkpoint
    prefix whose trainable variables initialise the model's by name, when this model directory has no
    checkpoint yet. Before training starts, the source is checked (`compat.check_warm_start`): a published
    model's features against the spec, every trainable variable's name, shape and dtype against the source's.

    `progress_seconds`: the cadence of the progress lines (`hooks.ProgressHook`; the user's model writes its
    own summaries, so the hook writes none).

    Raises:
      IncompatibleModelError: the warm-start source does not fit this model_fn and spec (names what changed).
    """
    files = inputs.resolve_files(train_files)
    count = num_train_examples
    if count is None and job.training.train_steps is None:  # the budget is in epochs: count the records
        count = inputs.count_records(files, records.compression(files))
    budget = job.training.budget(count or 0)
    if user.train_steps not in (None, budget):
        raise ValueError(f"UserModel.train_steps={user.train_steps} is not the job's training budget, {budget} steps")
    user = dataclasses.replace(user, train_steps=budget)
    input_fn = _train_input_fn(job, user, files, model_dir)
    warm = warm_start_from if inputs.start_step(model_dir) == 0 else None
    with _named_records(files, user.spec, with_label=True):
        if warm is not None:  # the checkpoint checked is the one loaded
            warm = compat.check_warm_start(job, user, files, warm)
        if job.tpu.strict:
            _strict_check(job, user, input_fn, files, count, model_dir)
        progress = TrainingProgress(
            budget,
            job.training.train_batch_size,
            inputs.start_step(model_dir),
            time.monotonic(),
            every_seconds=progress_seconds,
        )
        _estimator(job, user, model_dir, warm).train(input_fn, max_steps=budget, hooks=[ProgressHook(progress)])
    return inputs.start_step(model_dir)


def evaluate(
    job: JobConfig,
    user: UserModel,
    eval_files: Patterns,
    model_dir: str,
    *,
    num_examples: Optional[int] = None,
    checkpoint_path: Optional[str] = None,
    slices: Sequence[SliceSet] = (),
) -> EvalResult:
    """Runs the user's metric_fn over every record once (padded to whole batches; padding masked out).

    TPUEstimator's own `loss` (a mean of the batches' losses, padded rows included) is not reported: metrics
    are the metric_fn's, under the user's names. With `slices` (the records' slices, in input order), the
    metric_fn also runs on each slice's rows in the same pass, its metrics named by `slice_metric_name`
    (`split_slice_metrics` takes them apart).
    """
    ids = np.stack([s.ids for s in slices], axis=1) if slices else None
    user = dataclasses.replace(resolve_train_steps(job, user), slices=tuple(s.names for s in slices))
    input_fn = user_inputs.padded_input_fn_builder(eval_files, user.spec, num_examples, True, ids)
    count = input_fn.num_examples  # type: ignore[attr-defined]
    if count == 0:
        raise ValueError(f"the evaluation data {eval_files!r} holds no record; evaluate needs at least one")
    checkpoint = checkpoint_of(model_dir, checkpoint_path, "evaluate")
    steps = inputs.eval_steps(count, job.training.eval_batch_size)
    with _named_records(input_fn.files, user.spec, with_label=True):  # type: ignore[attr-defined]
        raw = _estimator(job, user, model_dir).evaluate(input_fn, steps=steps, checkpoint_path=checkpoint)
    step = int(raw.pop("global_step"))
    raw.pop("loss", None)
    return EvalResult({k: float(v) for k, v in raw.items()}, step, count, steps, checkpoint)


def split_slice_metrics(
    metrics: Mapping[str, float], slices: Sequence[SliceSet]
) -> Tuple[Dict[str, float], List[Dict[str, Any]]]:
    """(the metrics over every record, [{"name", "features", "rows", "metrics"}] per slice) of an evaluation
    with `slices`; a metric a slice's metric_fn gave NaN (no row of it in a class, say) is left out."""
    prefixes = [slice_metric_name(n, "") for s in slices for n in s.names]
    overall = {k: v for k, v in metrics.items() if not any(k.startswith(p) for p in prefixes)}
    entries = []
    for s in slices:
        for name, rows in zip(s.names, s.rows()):
            prefix = slice_metric_name(name, "")
            values = {k[len(prefix) :]: v for k, v in metrics.items() if k.startswith(prefix) and not math.isnan(v)}
            entries.append({"name": name, "features": list(s.features), "rows": rows, "metrics": values})
    return overall, entries


def evaluate_published(
    job: JobConfig,
    user: UserModel,
    eval_files: Patterns,
    export_dir: str,
    work_dir: str,
    *,
    num_examples: Optional[int] = None,
) -> EvalResult:
    """The published model's metrics by the user's metric_fn on `eval_files`: this run's model_fn evaluated with
    the variables of the published SavedModel `export_dir` (a name-based checkpoint, global step included), so
    a new model and the published one are measured by the same code on the same records.

    `work_dir` is the estimator's model directory for this evaluation (its summaries go there). A gs:// export
    evaluated in a local `work_dir` is read through a temporary local copy (`compat.readable_checkpoint`).
    The result's `checkpoint` is `<export_dir>/variables/variables`.

    Raises:
      IncompatibleModelError: `export_dir` is not a user model's export, or a feature or a variable of this
        model_fn and spec differs from the published model's (names it and both versions).
    """
    compat.check_spec(compat.published_metadata(export_dir), user.spec)
    user = resolve_train_steps(job, user)
    input_fn = user_inputs.padded_input_fn_builder(eval_files, user.spec, num_examples, with_label=True)
    count = input_fn.num_examples  # type: ignore[attr-defined]
    published = storage.join(export_dir, compat.VARIABLES_PREFIX)
    with compat.readable_checkpoint(export_dir, work_dir) as checkpoint:
        if count:  # evaluate names an empty evaluation set
            compat.check_restorable(job, user, input_fn, checkpoint, published)
        result = evaluate(job, user, eval_files, work_dir, num_examples=count, checkpoint_path=checkpoint)
    return dataclasses.replace(result, checkpoint=published)


def real_rows(predicted: Batch, first_row: int) -> Batch:
    """A predicted batch's real rows (padding dropped), checked by `example_index` to be input rows
    first_row, first_row + 1, ... in order."""
    batch = dict(predicted)
    real = batch.pop(PADDING_FEATURE) == 0
    index = batch.pop(INDEX_FEATURE)[real]
    expected = np.arange(first_row, first_row + len(index))
    lost = np.flatnonzero(index != expected)
    if lost.size:
        raise PredictionError(
            f"prediction row {expected[lost[0]]} came back as input row {index[lost[0]]}: the order was lost"
        )
    return {name: value[real] for name, value in batch.items()}


def _size(batch: Batch) -> int:
    return len(next(iter(batch.values())))


def _batches(estimator, input_fn, checkpoint: str, count: int) -> Iterator[Batch]:
    """The real rows' predictions a batch at a time, in input order (`real_rows`)."""
    done = 0
    for predicted in estimator.predict(input_fn, checkpoint_path=checkpoint, yield_single_examples=False):
        batch = real_rows(predicted, done)
        done += _size(batch)
        yield batch
    if done != count:
        raise PredictionError(f"predicted {done} rows for {count} input records")


def _rows(estimator, input_fn, checkpoint: str, count: int) -> Iterator[Dict[str, np.ndarray]]:
    """The real rows' predictions one row at a time, in input order."""
    for batch in _batches(estimator, input_fn, checkpoint, count):
        for i in range(_size(batch)):
            yield {name: value[i] for name, value in batch.items()}


def _line(index: int, key: Any, origin: Tuple[str, int], row: Dict[str, np.ndarray]) -> bytes:
    out: Dict[str, Any] = {"index": index}
    if key is not None:
        out["key"] = key
    out["file"], out["record"] = origin
    taken = sorted({"file", "record"} & set(row))
    if taken:
        raise PredictionError(
            f"the model_fn's predictions {taken} take the names of a prediction row's own fields (its input file "
            "and record); rename them in the model_fn's predictions dict"
        )
    out.update((name, records.as_json_value(value)) for name, value in row.items())
    return json.dumps(out, ensure_ascii=False, separators=(",", ":")).encode("utf-8") + b"\n"


class RecordLines:
    """A user model's prediction rows as JSON Lines (`shards.formatted_pieces` calls `format`), each placed in
    its TFRecord file by its position in the input (`files`, with `per_file` records each).

    Attributes:
      fields: the predictions' names, in the model_fn's order, once a batch has been formatted.
    """

    def __init__(self, files: Sequence[str], per_file: Sequence[int]):
        self._files = list(files)
        self._starts = list(itertools.accumulate(per_file, initial=0))[:-1]
        self.fields: List[str] = []

    def format(self, host: HostRows, outputs: Batch, first_row: int) -> bytes:
        """Rows first_row, first_row + 1, ...: their keys (`host[KEY_FEATURE]`, None without a key) and
        predictions, as `_line`s."""
        self.fields[:] = self.fields or list(outputs)
        lines = []
        for i, key in enumerate(host[KEY_FEATURE].tolist()):
            row = first_row + i
            file = bisect.bisect_right(self._starts, row) - 1
            origin = (self._files[file], row - self._starts[file])
            lines.append(_line(row, key, origin, {name: value[i] for name, value in outputs.items()}))
        return b"".join(lines)


def host_rows(keys: Optional[Sequence[Any]], count: int) -> HostRows:
    """`count` rows' keys as `RecordLines.format` takes them (None each without a key)."""
    return {KEY_FEATURE: np.array([None] * count if keys is None else list(keys), dtype=object)}


def prediction_provenance(checkpoint: str, files: Sequence[str], user: UserModel) -> Dict[str, Any]:
    """What a prediction output's manifest records of its source."""
    return {"checkpoint": checkpoint, "inputs": list(files), "model_fn": user.model_fn}


def predict(
    job: JobConfig,
    user: UserModel,
    data: Patterns,
    model_dir: str,
    output_dir: str,
    *,
    num_examples: Optional[int] = None,
    num_shards: int = 1,
    checkpoint_path: Optional[str] = None,
    finish: Optional[SkewFinish] = None,
) -> PredictResult:
    """Predicts every record of `data` and publishes one JSON Lines row per record, in input order:
    {"index": its position in the input, "key": the spec's key feature (when it names one), "file": its TFRecord
    file, "record": its 0-based index in that file, then the user's predictions by their names, tensors as
    nested lists}. Published in one commit, with a manifest, and the skew check's skew.json (`finish`, of
    `skew_finish`; None: not checked).

    Raises:
      SkewError: with `predict.skew=block`, the records are skewed; nothing is published."""
    user = resolve_train_steps(job, user)
    input_fn = user_inputs.padded_input_fn_builder(data, user.spec, num_examples, with_label=False)
    count, files = input_fn.num_examples, input_fn.files  # type: ignore[attr-defined]
    checkpoint = checkpoint_of(model_dir, checkpoint_path, "predict with")
    check_num_shards(num_shards)
    keys = records.read_column(files, user.spec.feature(user.spec.key)) if user.spec.key else None
    compression = records.compression(files)
    lines = RecordLines(files, [inputs.count_records([path], compression) for path in files])

    def joined() -> Iterator[Tuple[HostRows, Batch]]:
        done = 0
        for batch in _batches(_estimator(job, user, model_dir), input_fn, checkpoint, count):
            yield host_rows(None if keys is None else keys[done : done + _size(batch)], _size(batch)), batch
            done += _size(batch)

    with _named_records(files, user.spec, with_label=False):
        provenance = prediction_provenance(checkpoint, files, user)
        return commit_rows(joined(), lines, count, output_dir, num_shards, provenance, finish=finish)


def skew_finish(
    check: Optional[SkewCheck], files: Sequence[str], spec: FeatureSpec, count: Optional[int]
) -> Optional[SkewFinish]:
    """The skew check of the `count` records of `files` (None: not counted) for `predict`'s `finish`: read in a
    thread beside the scoring, or now with "block" (raising `SkewError`); None when not checked."""
    if check is None:
        return None
    return check.finish(check.start(files, spec, count, compression=records.compression(files)), None)


# -- export ---------------------------------------------------------------------------------------------------
def serving_input_receiver_fn(spec: FeatureSpec) -> Callable:
    """Serialized `tf.Example`s in (`examples`, string [None]), parsed by the spec (without the label and key);
    a second signature, `raw`, takes the parsed feature tensors themselves ([None, *shape] each)."""

    def receiver_fn():
        serialized = tf.compat.v1.placeholder(tf.string, [None], name=EXAMPLES_INPUT)
        features = records.parse_batch(serialized, spec, with_label=False)
        return tf.estimator.export.ServingInputReceiver(
            features, {EXAMPLES_INPUT: serialized}, receiver_tensors_alternatives={RAW_SIGNATURE: dict(features)}
        )

    return receiver_fn


def _sample(files: Sequence[str], limit: int) -> List[bytes]:
    dataset = tf.data.TFRecordDataset(list(files), compression_type=records.compression(files)).take(limit)
    return list(dataset.as_numpy_iterator())


def _check_tag_sets(local_dir: str) -> List[List[str]]:
    proto = strict_export.read_saved_model(local_dir)
    check_tag_sets(proto)
    return sorted(sorted(mg.meta_info_def.tags) for mg in proto.meta_graphs)


def _verify(local_dir: str, expected: List[Dict[str, np.ndarray]], sample: List[bytes]) -> int:
    """Runs the fresh CPU graph on `sample` and compares every prediction with the estimator's."""
    got = run_cpu_graph(local_dir, "serving_default", {EXAMPLES_INPUT: np.array(sample, dtype=object)})
    for name in expected[0] if expected else []:
        want = np.stack([row[name] for row in expected])
        have = np.asarray(got.get(name))
        if have.shape != want.shape:
            raise ExportVerificationError(
                f"output {name!r}: the served graph gives shape {have.shape}, the estimator {want.shape}"
            )
        if not outputs_agree(have, want):
            raise ExportVerificationError(
                f"output {name!r}: the served graph and the estimator disagree on {len(sample)} records"
            )
    return len(sample)


def export(
    job: JobConfig,
    user: UserModel,
    model_dir: str,
    export_base: str,
    *,
    verify_files: Optional[Patterns] = None,
    checkpoint_path: Optional[str] = None,
    data_profile: Optional[Dict[str, Any]] = None,
) -> Dict[str, Any]:
    """Exports the checkpoint as one SavedModel (`serve` and `serve,tpu`), verifies it (the tag sets, the TPU
    graph's TPUPartitionedCall, and, with `verify_files`, the CPU graph's predictions on their first records
    against the estimator's), then publishes it atomically as `export_base/<version>`. Returns
    {"export_dir", "tag_sets", "rows_checked"}; writes `assets.extra/export_metadata.json` (the spec, the
    model_fn, the hyperparameters, the job, the checkpoint, and `data_profile`, the training records' profile the
    skew check reads) inside the export: no metadata travels elsewhere."""
    checkpoint = checkpoint_of(model_dir, checkpoint_path, "export")
    user = resolve_train_steps(job, user)
    estimator = _estimator(job, user, model_dir)
    staging = storage.local_staging_dir(storage.join(export_base, "export"))
    try:
        local_dir = estimator.export_saved_model(
            staging, serving_input_receiver_fn(user.spec), checkpoint_path=checkpoint
        ).decode("utf-8")
        tag_sets = _check_tag_sets(local_dir)
        checked = 0
        if verify_files is not None:
            files = inputs.resolve_files(verify_files)
            sample = _sample(files, VERIFY_ROWS)
            path = os.path.join(staging, "verify.tfrecord")
            with tf.io.TFRecordWriter(path) as writer:
                for record in sample:
                    writer.write(record)
            input_fn = user_inputs.padded_input_fn_builder(path, user.spec, len(sample), with_label=False)
            expected = list(_rows(estimator, input_fn, checkpoint, len(sample)))
            checked = _verify(local_dir, expected, sample)
        metadata = {
            "model_fn": user.model_fn,
            "hparams": dict(user.hparams),
            "job": job.to_dict(),  # its predict batch size, and where its code is (`model.code`)
            "feature_spec": user.spec.to_json(),
            "label": user.spec.label,
            "key": user.spec.key,
            "checkpoint": checkpoint,
            "tag_sets": tag_sets,
            "rows_checked": checked,
        }
        if data_profile is not None:
            metadata["data_profile"] = data_profile
        os.makedirs(os.path.join(local_dir, "assets.extra"), exist_ok=True)
        storage.write_text(
            os.path.join(local_dir, "assets.extra", "export_metadata.json"),
            json.dumps(metadata, indent=2, sort_keys=True),
        )
        export_dir = storage.join(export_base, os.path.basename(local_dir))
        storage.commit_directory(local_dir, export_dir)
    finally:
        storage.discard_staging(staging)
    return {"export_dir": export_dir, "tag_sets": tag_sets, "rows_checked": checked}
