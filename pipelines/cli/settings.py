"""Flags into settings: the run's `RunConfig` (its overrides, local paths and checks before a run), the Beam
engine, tuning, alerts, and where and how a Vertex AI run goes (image, TPU, steps, retries)."""

from __future__ import annotations

import argparse
import csv
import difflib
import json
import os
import sys
from typing import Any

from estimator_lib import storage
from estimator_lib.config import ConfigError, RunConfig
from estimator_lib.config.alerts import AlertConfig
from estimator_lib.config.beam import BEAM, DATAFLOW_RUNNER, BeamConfig
from estimator_lib.config.registry import RegistryConfig
from estimator_lib.config.run import EMBEDDED_DATA, PREPARED_SPLITS, resolve_run
from estimator_lib.config.tuning import load_space
from estimator_lib.data.embedded import default_dataset
from pipelines import checks, local, vertex
from pipelines import tpu as tpu_presets
from pipelines.image import check_image, default_image
from pipelines.pipeline import VertexSteps
from pipelines.retry import RetryPolicy, vertex_policy
from pipelines.tuning_job import TuningPlan

IMAGE_REPO_ENV = "TPU_PIPELINE_IMAGE_REPO"
DEFAULT_IMAGE_REPO = "tpu-pipeline"
REPO_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def resolve_beam(
    args: argparse.Namespace, image: str | None = None, vertex: dict[str, str] | None = None
) -> BeamConfig | None:
    """The `BeamConfig` of the engine flags, or None for engine inprocess. With `image` (compile, submit,
    schedule) it is Dataflow with the component image as the workers' container; `vertex` supplies defaults
    (project, region, temp_location) from the Vertex AI flags."""
    if args.engine != BEAM:
        return None
    if image is None:
        return BeamConfig(direct_num_workers=args.direct_num_workers)
    vertex = vertex or {}
    try:
        return BeamConfig(
            runner=DATAFLOW_RUNNER,
            project=args.dataflow_project or vertex.get("project"),
            region=args.dataflow_region or vertex.get("region"),
            temp_location=args.dataflow_temp_location or vertex.get("temp_location"),
            max_workers=args.dataflow_max_workers,
            machine_type=args.dataflow_machine_type,
            sdk_container_image=image,
            service_account=args.dataflow_service_account,
        )
    except ConfigError as e:
        raise ConfigError(
            f"--engine beam: {e}; set it with --dataflow-project, --dataflow-region or --dataflow-temp-location"
        ) from None


def resolve_tuning(args: argparse.Namespace) -> TuningPlan | None:
    """The tuning job --tune-space asks for, its space file checked now; None without it."""
    if not args.tune_space:
        return None
    space = load_space(args.tune_space, read_space_file(args.tune_space, "--tune-space"))
    return TuningPlan(space, args.tune_trials, args.tune_parallel)


def resolve_alerts(args: argparse.Namespace) -> AlertConfig:
    """The alerts the flags ask for (`AlertConfig` checks them)."""
    return AlertConfig(emails=tuple(getattr(args, "notify_emails", ())), webhook=args.notify_webhook)


def read_config_file(path: str | None, flag: str = "--config") -> dict[str, Any]:
    """The JSON object in `path` (local or gs://), or {} without a path."""
    if not path:
        return {}
    what = "JSON config file" if flag == "--config" else "JSON file"
    try:
        return json.loads(storage.read_text(path))
    except FileNotFoundError:
        raise ConfigError(f"{flag} {path}: no such file; give the path of a {what}") from None
    except IsADirectoryError:
        raise ConfigError(f"{flag} {path}: is a directory; give the path of a {what}") from None
    except json.JSONDecodeError as e:
        raise ConfigError(f"{flag} {path}: not valid JSON ({e})") from e


def resolve_settings(
    args: argparse.Namespace,
    publish_root: str,
    job_defaults: dict[str, Any] | None = None,
    beam: BeamConfig | None = None,
    placed: bool = False,
) -> RunConfig:
    """The run's `RunConfig` from its flags, config file and `--set` overrides (`config.resolve_run`, where every
    check of a value happens); `job_defaults` are dotted job keys this command defaults (the file and `--set`
    override them); `beam` is the engine's `BeamConfig` (`resolve_beam`); `placed` (submit and schedule when
    they compile for a TPU): the job's tpu settings are the TPU's, as the compiled train stage runs with."""
    label_set = any(text.partition("=")[0].strip() == "prepare.label" for text in args.overrides)
    if args.data and not (args.label or label_set):
        raise ValueError("--label is required with --data: name the column to predict")
    overrides = [*user_model_overrides(args), *slice_overrides(args), *args.overrides]
    given = {
        "publish_root": args.publish_root or publish_root,
        "data": args.data,
        "label": args.label,
        "task": args.task,
        "key_column": args.key_column,
        "eval_fraction": args.eval_fraction,
        "baseline": args.baseline,
        "warm_start": args.warm_start,
        "predict_data": args.predict_data,
        "engine": args.engine,
        "beam": beam,
        "feature_spec": args.feature_spec,
        "eval_data": args.eval_data,
    }
    config = read_config_file(args.config)
    settings = resolve_run(config, overrides, given, job_defaults)
    if getattr(args, "cpu", True):
        return settings
    # submit and schedule for a TPU: the batch sizes against the preset's cores, then (`placed`) the specs placed
    # on it, so that what the run records and --dry-run shows says where it trains.
    preset = tpu_presets.preset(args.tpu, experimental=args.experimental_tpu)
    checks.tpu_target(settings.job, preset.tpu_settings()["num_cores"], f"--tpu {preset.name}")
    if not placed:
        return settings
    placement = {f"tpu.{k}": v for k, v in preset.tpu_settings().items()}
    return resolve_run(config, overrides, given, {**(job_defaults or {}), **placement})


def _hparam_value(text: str) -> Any:
    """A `--hparams KEY=VALUE` value: JSON (an int stays an int, a list a list), else the text itself."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def read_hparams(args: argparse.Namespace) -> dict[str, Any]:
    """The model_fn's hyperparameters: `--hparams-file`'s JSON object, with each `--hparams KEY=VALUE` over it."""
    hparams: dict[str, Any] = {}
    if args.hparams_file:
        loaded = read_config_file(args.hparams_file, "--hparams-file")
        if not isinstance(loaded, dict):
            raise ConfigError(f"--hparams-file {args.hparams_file}: must hold a JSON object {{name: value}}")
        hparams.update(loaded)
    for text in args.hparams:
        key, sep, value = text.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--hparams {text}: expected KEY=VALUE, e.g. --hparams units=64")
        hparams[key.strip()] = _hparam_value(value)
    return hparams


# The user-model flags that are one setting each: (the flag's attribute, the setting).
USER_MODEL_FLAGS = (("model_fn", "model.model_fn"), ("input_fn", "model.input_fn"), ("code", "model.code"))


def user_model_overrides(args: argparse.Namespace) -> list[str]:
    """The user-model flags given as `--set` texts (the same path as every setting): `USER_MODEL_FLAGS`, then
    model.hparams (a JSON object, so its values keep their JSON types)."""
    out = [f"{setting}={getattr(args, name)}" for name, setting in USER_MODEL_FLAGS if getattr(args, name)]
    hparams = read_hparams(args)
    if hparams or args.hparams_file:
        out.append("model.hparams=" + json.dumps(hparams, sort_keys=True))
    return out


def slice_overrides(args: argparse.Namespace) -> list[str]:
    """`--slice` flags as one `--set blessing.slices=[...]` (a JSON list: a cross holds a comma)."""
    return ["blessing.slices=" + json.dumps(args.slices, ensure_ascii=False)] if args.slices else []


def local_csv_header(settings: RunConfig) -> tuple[str, list[str]] | None:
    """(file, columns) of the run's first data file when it is a local CSV (the embedded data included); None
    for other data, which the prepare stage checks before its work."""
    path = default_dataset().path if settings.data == EMBEDDED_DATA else settings.data
    files = [] if storage.is_gcs(path) else sorted(storage.glob(path))
    directory = next((f for f in files if os.path.isdir(f)), None)
    if directory:
        raise checks.UsageError(f"--data {path}: {directory} is a directory; a glob must match files only")
    if not files or not files[0].lower().endswith(".csv"):
        return None
    with open(files[0], newline="", encoding="utf-8-sig") as f:
        return files[0], next(csv.reader(f), [])


def check_label_column(settings: RunConfig, flag: str = "--label") -> None:
    """The label is a column of the run's local CSV data, checked before any stage starts (other data, a user
    model's TFRecords included, is checked by the prepare stage, or against its feature spec).

    Raises:
      checks.UsageError: naming the file, the label given, the closest column names and the fix.
    """
    found = local_csv_header(settings)
    if found is None or settings.label in found[1]:
        return
    path, header = found
    delimiter = next((d for d in ";\t" if len(header) == 1 and d in header[0]), None)
    if delimiter:
        raise checks.UsageError(
            f"{path} seems to be {delimiter!r}-delimited: its header is one column ({header[0]!r}); CSV must be "
            "comma-separated: save it with commas"
        )
    close = difflib.get_close_matches(settings.label, header, n=3, cutoff=0.5)
    lowered = [c for c in header if c.lower() == settings.label.lower() and c not in close]
    close = lowered + close
    hint = f"did you mean {' or '.join(repr(c) for c in close)}? " if close else ""
    raise checks.UsageError(
        f"{flag} {settings.label!r} is not a column of {path}; {hint}give one of its columns: {', '.join(header)} "
        f"(e.g. {flag} {(close or header)[0]})"
    )


def check_slice_columns(settings: RunConfig) -> None:
    """`--slice` features are columns of the run's local CSV data (the first file's header, the label and key
    apart), checked before any stage starts; other data is checked by the evaluate stage, before its work (a user
    model's TFRecords against its local feature spec when the run is resolved)."""
    found = local_csv_header(settings) if settings.blessing.slices else None
    if found is None:
        return
    path, header = found
    features = [c for c in header if c not in (settings.label, settings.key_column)]
    settings.blessing.check_slice_features(features, f"columns of {path} (the label and key apart)")


def resolve_image(args: argparse.Namespace) -> str:
    if args.image:
        return check_image(args.image)
    image = default_image(args.image_repo, REPO_DIR)
    if "/" not in args.image_repo:
        print(
            f"note: components will run on {image}; build and push it to a registry Vertex AI can pull from "
            f"and pass --image-repo (or ${IMAGE_REPO_ENV})",
            file=sys.stderr,
        )
    return image


# Flags that change the compiled pipeline: `--template` (already compiled) cannot take them.
COMPILED_FLAGS = {
    "--experimental-tpu": "experimental_tpu",
    "--tpu-topology": "tpu_topology",
    "--spot": "spot",
    "--reservation": "reservation",
    "--tensorboard": "tensorboard",
    "--experiment": "experiment",
    "--model-registry": "model_registry",
    "--notify-email": "notify_emails",
    "--notify-webhook": "notify_webhook",
    "--retries": "retries",
    "--retry-backoff": "retry_backoff",
    "--tune-space": "tune_space",
}


def resolve_target(args: argparse.Namespace, log_root: str | None = None) -> tpu_presets.TPUTarget | None:
    """Where the TPU stages run (None: every stage on CPU), with their capacity and TensorBoard settings."""
    if args.cpu:
        given = [
            flag for flag in ("--tpu-topology", "--spot", "--reservation", "--tensorboard") if flag_given(args, flag)
        ]
        if given:
            raise ValueError(
                f"{given[0]} applies to the TPU custom jobs, and with --cpu no stage runs as one: "
                f"drop --cpu or {given[0]}"
            )
        return None
    return tpu_presets.TPUTarget(
        tpu_presets.preset(args.tpu, experimental=args.experimental_tpu),
        spot=args.spot,
        reservation=args.reservation,
        topology=args.tpu_topology,
        tensorboard=args.tensorboard,
        log_root=args.tensorboard_logs or log_root,
    )


def resolve_steps(args: argparse.Namespace) -> VertexSteps:
    """The Vertex AI steps the flags ask for: joining an Experiment, registering blessed models."""
    if args.serving_image and not args.model_registry:
        raise ValueError("--serving-image is the registered versions' container: give --model-registry too")
    registry = None
    if args.model_registry is not None:
        registry = RegistryConfig(display_name=args.model_registry, serving_image=args.serving_image)
    return VertexSteps(
        experiment=vertex.check_experiment(args.experiment) if args.experiment is not None else None,
        registry=registry,
        alerts=resolve_alerts(args),
    )


def resolve_retry(args: argparse.Namespace) -> RetryPolicy:
    """The retry policy of every task: --retries and --retry-backoff, or their defaults."""
    return vertex_policy(args.retries, args.retry_backoff)


def flag_given(args: argparse.Namespace, flag: str) -> bool:
    value = getattr(args, COMPILED_FLAGS[flag])  # --retries 0 is given; an empty --notify-email list is not
    return not (value is None or value is False or (isinstance(value, (str, list)) and not value))


def _local_path(uri: str) -> str:
    """A local path made absolute (a trailing "/" kept: it says "directory"); URIs and embedded data as they are."""
    if not uri or "://" in uri or uri.startswith("embedded:"):
        return uri
    return os.path.abspath(uri) + ("/" if uri.endswith("/") else "")


def _local_data_override(text: str) -> str:
    """`--set prepare.data=rows.csv` with the path made absolute, as --data's is (the run records it)."""
    key, sep, value = text.partition("=")
    return f"{key}{sep}{_local_path(value)}" if key.strip() == "prepare.data" and "," not in value else text


def resolve_local_settings(args: argparse.Namespace, output: str) -> RunConfig:
    """A local run's (run-local, tune) `RunConfig`, its local paths made absolute, checked before it starts."""
    if args.data:
        args.data = _local_path(args.data)
    if args.predict_data not in PREPARED_SPLITS:
        args.predict_data = _local_path(args.predict_data)
    for name in ("code", "feature_spec", "eval_data"):
        setattr(args, name, _local_path(getattr(args, name)) or None)
    args.overrides = [_local_data_override(text) for text in args.overrides]
    settings = resolve_settings(
        args, os.path.join(output, local.PUBLISH_DIR), local.local_job_defaults(), beam=resolve_beam(args)
    )
    checks.local_run(settings)
    check_label_column(settings, "--label" if args.label else "prepare.label")
    check_slice_columns(settings)
    return settings


def read_space_file(path: str, flag: str = "--space") -> str:
    """The text of a search space file (local or gs://)."""
    try:
        return storage.read_text(path)
    except (FileNotFoundError, IsADirectoryError):
        raise ConfigError(f"{flag} {path}: no such file; give the path of a YAML or JSON search space") from None
