"""Checks of a run's arguments made when the command line is read, before anything starts.

What can be known without running a stage is checked here, so a typo costs a second, not a training run: the
output directory and the publish root are writable directories, the data and the rows to predict exist, and the
batch sizes divide over the TPU cores the run targets. Each check raises `UsageError` (the CLI exits with 2)
naming the flag, the value and the fix.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
import tempfile

from estimator_lib import storage
from estimator_lib.config import ConfigError, JobConfig, RunConfig
from estimator_lib.config.run import DIRECTORY, PREPARED_SPLITS, SPLIT, TFRECORD_EXTENSIONS, prediction_kind


class UsageError(ValueError):
    """An argument fails a check made before the run starts."""


def output_directory(output: str) -> str:
    """The output directory as an absolute path; nothing is created (the run creates it when it starts).

    Raises:
      UsageError: `output` is empty, a file (or under one), or in a directory this process cannot write to.
    """
    if not output.strip():
        raise UsageError("--output is empty; give the directory for the run's outputs, e.g. --output runs/local")
    path = os.path.abspath(output)
    if os.path.exists(path) and not os.path.isdir(path):
        raise UsageError(f"--output {output}: is a file, not a directory; give a directory (created if missing)")
    _writable_directory_or_parent(path, f"--output {output}")
    return path


def publish_root(root: str) -> None:
    """A local publish root must be a directory (or not exist yet) under a directory this process can write to;
    nothing is created (an unblessed run writes nothing there). gs:// roots are checked when publishing."""
    if not storage.is_gcs(root):
        _writable_directory_or_parent(os.path.abspath(root), f"--publish-root {root}")


def _writable_directory_or_parent(path: str, what: str) -> None:
    """`path`, or the nearest of its parents that exists, is a directory this process can write to."""
    existing = path
    while not os.path.exists(existing):
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing):
        raise UsageError(f"{what}: {existing} is a file, not a directory; give a directory")
    _check_writable(existing, what)


def _check_writable(directory: str, what: str) -> None:
    """Creates and deletes a file in `directory`: the only test that holds for every user and file system."""
    try:
        with tempfile.NamedTemporaryFile(dir=directory, prefix=".write-check-"):
            pass
    except OSError as e:
        raise UsageError(
            f"{what}: cannot write in {directory} ({e.strerror}); give a directory you can write to"
        ) from None


def data(uri: str) -> None:
    """The rows to prepare exist: a file or a glob matching files (local or gs://), or embedded data."""
    if uri.startswith("embedded:"):
        return
    if not storage.is_gcs(uri) and os.path.isdir(uri):
        raise UsageError(f"--data {uri}: is a directory; give a file or a glob, e.g. {os.path.join(uri, '*.csv')}")
    if not storage.glob(uri):
        raise UsageError(f"--data {uri}: no such file (nothing matches); give a CSV or JSON Lines file or glob")


def predict_data(value: str) -> None:
    """What batch prediction scores exists: a prepared split, files matching a URI or glob, or a directory
    holding TFRecord files."""
    kind = prediction_kind(value)
    if kind == SPLIT:
        return
    if kind == DIRECTORY:
        if any(storage.glob(storage.join(value, f"*{ext}")) for ext in TFRECORD_EXTENSIONS):
            return
        close = difflib.get_close_matches(os.path.basename(value.rstrip("/")), PREPARED_SPLITS, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise UsageError(
            f"--predict-data {value!r} is neither a prepared split ({', '.join(PREPARED_SPLITS)}) nor a directory "
            f"holding {' or '.join('*' + e for e in TFRECORD_EXTENSIONS)} files{hint}"
        )
    if not storage.glob(value):
        raise UsageError(f"--predict-data {value}: no such file (nothing matches); give existing files or a split")


def tpu_target(job: JobConfig, num_cores: int, target: str) -> None:
    """Batch sizes and the checkpoint cadence against the TPU the run targets (`num_cores` replicas), the rules
    `JobConfig` applies on a TPU; `target` says where that TPU comes from."""
    tpu = dataclasses.replace(job.tpu, use_tpu=True, tpu_name=job.tpu.tpu_name or "local", num_cores=num_cores)
    try:
        JobConfig(tpu=tpu, training=job.training, model=job.model)
    except ConfigError as e:
        raise UsageError(f"{e} ({target})") from None


def local_run(settings: RunConfig) -> None:
    """Everything a local run can check before it starts, beyond what `RunConfig` checks itself."""
    if settings.job.tpu.strict:
        target = f"run-local checks for a TPU of tpu.num_cores={settings.job.tpu.num_cores}; set tpu.num_cores"
        tpu_target(settings.job, settings.job.tpu.num_cores, target)
    data(settings.data)
    predict_data(settings.predict_data)
    publish_root(settings.publish_root)
    user_model(settings)


def user_model(settings: RunConfig) -> None:
    """A user model's files exist: its eval records (`--eval-data`), and the module its model_fn names inside a
    local --code (looked for, not imported: the user's code runs in the stages' own processes only). A built-in
    family sets neither (`RunConfig` refuses them without --model-fn): nothing to check."""
    if settings.eval_data and not storage.glob(settings.eval_data):
        raise UsageError(f"--eval-data {settings.eval_data}: no such file (nothing matches); give TFRecord files")
    code = settings.job.model.code
    if not code or storage.is_gcs(code):
        return
    if code.endswith(".whl"):
        if not os.path.isfile(code):
            raise UsageError(f"--code {code}: no such wheel")
        return
    if not os.path.isdir(code):
        raise UsageError(f"--code {code}: not a directory; give the folder that holds your package")
    model_fn = settings.job.model.model_fn  # given with --code: `JobConfig` refuses code without it
    module = model_fn.partition(":")[0].replace(".", os.sep)
    candidates = [os.path.join(code, module + ".py"), os.path.join(code, module, "__init__.py")]
    if not any(os.path.isfile(c) for c in candidates):
        raise UsageError(
            f"--model-fn {model_fn}: its module is not in --code {code} (looked for {' or '.join(candidates)}); "
            "give MODULE:FUNCTION relative to that folder"
        )
