"""Is a published user model compatible with this run's model_fn and feature spec? Checked before a warm start
and before the published model is evaluated with the current model_fn, so an incompatible one is refused with
the feature or variable that changed, never half-loaded.

- The spec: the features the model_fn reads (`FeatureSpec.inputs`: all but the label and the key) must be the
  ones the published model read, each with the same dtype, shape, var_len (and padding default) and decoding,
  as recorded in the export's `assets.extra/export_metadata.json` (`run.export` writes it).
- The variables: the user's model_fn is built (not run: no session, no training step) in a fresh graph on the
  input_fn the estimator would use, and each variable the published checkpoint must fill (the trainable ones
  for a warm start, which is what TensorFlow's warm start initialises; every global one for an evaluation,
  which restores them all) must be in it with the same shape and dtype.

TensorFlow refuses such a model too, but only once the estimator runs, for the first variable it meets, and
without saying what changed or what to do. The graph is built as on CPU (`params['use_tpu']` False, no
`context`): a model_fn's variable names and shapes do not depend on the target.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import tempfile
from typing import Any, Callable, Dict, Iterator, Mapping, Protocol, Tuple

import tensorflow as tf

from estimator_lib import storage
from estimator_lib.config import JobConfig
from estimator_lib.config.feature_spec import Feature, FeatureSpec
from estimator_lib.data.retrain import EXPORT_METADATA as METADATA_FILE
from estimator_lib.estimator import build_run_config
from estimator_lib.model.inputs import InputFn, Patterns
from estimator_lib.model.user import inputs as user_inputs
from estimator_lib.model.warm_start import resolve_checkpoint

VARIABLES_PREFIX = "variables/variables"
# The keys only a user model's export records (a built-in model's records a `schema` instead).
USER_KEYS = ("model_fn", "feature_spec")
NO_PUBLISHED_MODEL = "run without the published model (--warm-start none --baseline none)"
ModeKeys = tf.estimator.ModeKeys
# {variable name: (shape, dtype name)}
Variables = Dict[str, Tuple[list, str]]


class UserModel(Protocol):
    """What the checks use of a `run.UserModel` (run.py imports this module, so this one cannot import it)."""

    @property
    def spec(self) -> FeatureSpec: ...

    @property
    def hparams(self) -> Mapping[str, Any]: ...

    def load(self) -> Callable: ...


class IncompatibleModelError(ValueError):
    """A published model (or checkpoint) that this run's model_fn and feature spec cannot warm-start from or
    evaluate: the message names the feature or variable that changed, both versions of it, and the fix."""


def published_metadata(export_dir: str) -> Dict[str, Any]:
    """The metadata `run.export` recorded in a user model's SavedModel (local or gs://).

    Raises:
      IncompatibleModelError: `export_dir` holds no metadata, or a built-in model's (no model_fn and spec).
    """
    path = storage.join(export_dir, METADATA_FILE)
    if not storage.exists(path):
        raise IncompatibleModelError(
            f"{export_dir} has no {METADATA_FILE}: it is not the export of a user's model_fn (the user model's "
            f"export writes its feature spec there); give such an export, or {NO_PUBLISHED_MODEL}"
        )
    metadata = json.loads(storage.read_text(path))
    missing = [key for key in USER_KEYS if key not in metadata]
    if missing:
        raise IncompatibleModelError(
            f"{export_dir}: its {METADATA_FILE} records no {' or '.join(missing)}: it is a built-in model's export, "
            f"not a user model_fn's, and cannot be continued by one; give a user model's export, or "
            f"{NO_PUBLISHED_MODEL}"
        )
    return metadata


def _describe(feature: Feature) -> str:
    """e.g. "float32 [8, 8, 1]", "int64 [128] var_len (default 0)", "bytes [32, 32, 3] decode image"."""
    text = f"{feature.dtype} {list(feature.shape)}"
    if feature.var_len:
        text += f" var_len (default {feature.default})"
    if feature.decode:
        text += f" decode {feature.decode}" + (f" to {feature.raw_dtype}" if feature.raw_dtype else "")
    return text


def _input_form(spec: FeatureSpec) -> str:
    """How the model_fn gets its input, e.g. "the tensor of 'image' alone", "a dict, the label apart"."""
    if spec.single_input:
        return f"the tensor of {spec.single_input!r} alone"
    return "a dict holding the label" if spec.label_in_features else "a dict, the label apart"


def check_spec(published: Dict[str, Any], spec: FeatureSpec) -> None:
    """Checks that `spec` gives the model_fn the features the published model read (`published_metadata`), in
    the same form (`FeatureSpec.options`: one tensor, or the label among the features): the same names, and for
    each the same dtype, shape, var_len (with its default) and decoding.

    Raises:
      IncompatibleModelError: for the first feature that differs, naming it and both versions.
    """
    old = FeatureSpec.from_json(
        published["feature_spec"], published.get("label"), published.get("key"), "the published feature spec"
    )
    new_inputs = {f.name: f for f in spec.inputs}
    fix = f"restore the published feature spec, or {NO_PUBLISHED_MODEL}"
    if old.options != spec.options:
        raise IncompatibleModelError(
            f"the published model's model_fn got its input as {_input_form(old)}, {spec.source} gives "
            f"{_input_form(spec)}; {fix}"
        )
    for before in old.inputs:
        now = new_inputs.pop(before.name, None)
        if now is None:
            raise IncompatibleModelError(
                f"feature {before.name!r} ({_describe(before)}): the published model reads it, but {spec.source} "
                f"does not give it to the model_fn (its label is {spec.label!r}, its key {spec.key!r}); {fix}"
            )
        if now.to_json() != before.to_json():
            raise IncompatibleModelError(
                f"feature {before.name!r}: the published model reads {_describe(before)}, {spec.source} gives "
                f"{_describe(now)}; {fix}"
            )
    if new_inputs:
        name, feature = next(iter(new_inputs.items()))
        raise IncompatibleModelError(
            f"feature {name!r} ({_describe(feature)}) in {spec.source} is new: the published model does not read "
            f"it; {fix}"
        )


def _variable(var: tf.Variable) -> Tuple[str, list]:
    """(checkpoint name, full shape): a partitioned variable's slice is saved under its whole variable's name."""
    info = getattr(var, "_save_slice_info", None)
    if info is not None:
        return info.full_name, list(info.full_shape)
    return var.name.split(":")[0], var.shape.as_list()


def _cpu_job(job: JobConfig) -> JobConfig:
    return dataclasses.replace(job, tpu=dataclasses.replace(job.tpu, use_tpu=False))


def model_variables(job: JobConfig, user: UserModel, input_fn: InputFn, mode: str, batch_size: int) -> Variables:
    """The variables the user's model_fn creates in `mode` on a batch of `input_fn` ({name: (shape, dtype)}):
    the trainable ones in TRAIN mode (what a warm start initialises), every global one otherwise (what
    evaluation restores). Builds the graph as the estimator does on CPU; runs nothing."""
    model_fn = user.load()
    with tf.Graph().as_default():
        tf.compat.v1.set_random_seed(job.training.seed)  # op determinism refuses unseeded initialisers
        tf.compat.v1.train.get_or_create_global_step()
        batch = tf.compat.v1.data.make_one_shot_iterator(input_fn({"batch_size": batch_size})).get_next()
        features, labels = batch if isinstance(batch, tuple) else (batch, None)
        params = {**dict(user.hparams), "batch_size": batch_size, "use_tpu": False}
        model_fn(features, labels, mode, params, build_run_config(_cpu_job(job), None))
        made = tf.compat.v1.trainable_variables() if mode == ModeKeys.TRAIN else tf.compat.v1.global_variables()
        variables = {}
        for var in made:
            name, shape = _variable(var)
            variables[name] = (shape, var.dtype.base_dtype.name)
        return variables


def compare_variables(variables: Variables, checkpoint: str, where: str) -> None:
    """Checks that every one of `variables` is in `checkpoint` with the same shape and dtype; messages call the
    checkpoint `where` (its published location, when `checkpoint` is a local copy).

    Raises:
      IncompatibleModelError: for the first that is missing or differs, naming it and both versions.
    """
    reader = tf.train.load_checkpoint(checkpoint)
    shapes, dtypes = reader.get_variable_to_shape_map(), reader.get_variable_to_dtype_map()
    fix = (
        "the model_fn, its hyperparameters or the feature spec changed it: restore the ones the checkpoint was "
        f"trained with, or {NO_PUBLISHED_MODEL}"
    )
    for name, (shape, dtype) in variables.items():
        if name not in shapes:
            raise IncompatibleModelError(
                f"variable {name!r} ({shape} {dtype}) of this model_fn is not in {where}; {fix}"
            )
        there = (list(shapes[name]), dtypes[name].name)
        if (shape, dtype) != there:
            raise IncompatibleModelError(
                f"variable {name!r}: {where} holds {there[0]} {there[1]}, this model_fn makes {shape} {dtype}; {fix}"
            )


def check_variables(job: JobConfig, user: UserModel, files: Patterns, source: str) -> str:
    """Checks that `source` (a SavedModel directory, a model directory or a checkpoint prefix) holds every
    trainable variable the user's model_fn creates in TRAIN mode on the training input over `files`, by name,
    with the same shape and dtype: what the estimator's warm start initialises. Returns the checkpoint prefix
    checked (for a SavedModel, its `variables/variables`).

    Raises:
      IncompatibleModelError: a variable is missing in `source` or has another shape (or dtype) there.
    """
    checkpoint = resolve_checkpoint(source)
    input_fn = user_inputs.train_input_fn_builder(files, user.spec, job.training.seed, job.training.shuffle_buffer_size)
    variables = model_variables(job, user, input_fn, ModeKeys.TRAIN, job.training.train_batch_size)
    compare_variables(variables, checkpoint, checkpoint)
    return checkpoint


def check_warm_start(job: JobConfig, user: UserModel, files: Patterns, source: str) -> str:
    """The checks before a warm start from `source`: the spec against the published one (when `source` is an
    export with metadata; a SavedModel without any is checked by its variables alone), then the trainable
    variables (`check_variables`). Returns the checkpoint prefix to warm-start from.

    Raises:
      IncompatibleModelError: a feature or variable changed, or `source` is a built-in model's export.
    """
    if storage.exists(storage.join(source, METADATA_FILE)):
        check_spec(published_metadata(source), user.spec)
    return check_variables(job, user, files, source)


def check_restorable(job: JobConfig, user: UserModel, eval_input_fn: InputFn, checkpoint: str, where: str) -> None:
    """Checks that `checkpoint` holds every variable the user's model_fn creates in EVAL mode on `eval_input_fn`
    (the padded eval input), with the same shape and dtype: what evaluating that checkpoint restores.

    Raises:
      IncompatibleModelError: naming the variable that is missing or differs.
    """
    variables = model_variables(job, user, eval_input_fn, ModeKeys.EVAL, job.training.eval_batch_size)
    compare_variables(variables, checkpoint, where)


@contextlib.contextmanager
def readable_checkpoint(export_dir: str, work_dir: str) -> Iterator[str]:
    """The checkpoint prefix of a SavedModel's variables (`<export_dir>/variables/variables`), readable by an
    estimator whose model directory is `work_dir`: a gs:// export with a local `work_dir` is downloaded to a
    temporary directory first (deleted afterwards), so a host whose TensorFlow cannot read that gs:// (an
    emulator, no credentials for TensorFlow's own file system) reads it through `storage`. A gs:// `work_dir`
    (on a TPU) reads the export where it is."""
    if not storage.is_gcs(export_dir) or storage.is_gcs(work_dir):
        yield storage.join(export_dir, VARIABLES_PREFIX)
        return
    local = tempfile.mkdtemp(prefix="published-variables-")
    try:
        folder = storage.join(export_dir, "variables") + "/"
        os.makedirs(os.path.join(local, "variables"))
        for uri in storage.list_files(folder):
            storage.download_file(uri, os.path.join(local, "variables", uri[len(folder) :]))
        yield os.path.join(local, VARIABLES_PREFIX)
    finally:
        shutil.rmtree(local, ignore_errors=True)
