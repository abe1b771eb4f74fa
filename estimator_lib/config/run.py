"""What one pipeline run is given beyond the job config, and the one source of the pipeline's defaults.

TensorFlow-free, so the CLI can check a run's arguments before anything starts.

- `RunConfig`: the data a run prepares, its job, blessing and prepare configs, the baseline, the warm start,
  what it batch-predicts and the engine that prepares and batch-predicts (`BeamConfig`). Its field defaults
  and `JobConfig`'s are the only defaults a run has: the pipeline function's parameters
  (`RunConfig.parameter_defaults()`), the CLI's flags and the components take theirs from here.
- `HYPERPARAMETERS`: the hyperparameters the pipeline exposes as parameters of their own, each with its dotted
  `JobConfig` key. Both directions read it: `hyperparameters(job)` (config -> parameters, for a run's
  arguments) and `hyperparameter_overrides(values)` (parameters -> config, in the train component).
- `resolve_configs`: a run's config file (a `JobConfig` plus optional "blessing", "prepare" and "validation"
  sections) with `--set` overrides applied.
- `prediction_kind`: what a `predict_data` names.
"""

from __future__ import annotations

import dataclasses
import posixpath
import typing
from collections.abc import Mapping, Sequence
from typing import Any

from estimator_lib.config.base import ConfigError, JsonConfig, parse_override, require, set_dotted
from estimator_lib.config.beam import INPROCESS, BeamConfig, check_engine
from estimator_lib.config.blessing import BlessingConfig
from estimator_lib.config.job import TASKS, JobConfig
from estimator_lib.config.prepare import PrepareConfig
from estimator_lib.config.validation import ValidationConfig

EMBEDDED_DATA = "embedded:penguins"
EMBEDDED_LABEL = "species"  # the label column of the embedded Palmer Penguins
# What a baseline or warm start may name besides a URI: the last published model, or no model.
LATEST_MODEL, NO_MODEL = "latest", "none"
AUTO_TASK = "auto"  # infer the task from the label's values
RUN_TASKS = (AUTO_TASK, *TASKS)
PREPARED_SPLITS = ("train", "eval", "test", "valid")
RAW_EXTENSIONS = (".csv", ".jsonl", ".json", ".ndjson")  # each may end in .gz (gzip-compressed)
GZIP = ".gz"
TFRECORD_EXTENSIONS = (".tfrecord", ".tfrecords")
SPLIT, TFRECORD, RAW, DIRECTORY = "split", "tfrecord", "raw", "directory"

# Pipeline parameter -> dotted `JobConfig` key, for the hyperparameters the pipeline exposes on their own.
HYPERPARAMETERS: dict[str, str] = {
    "model_family": "model.family",
    "hidden_units": "model.hidden_units",
    "learning_rate": "training.optimizer.learning_rate",
    "max_epochs": "training.max_epochs",
    "train_batch_size": "training.train_batch_size",
    "seed": "training.seed",
}
# `RunConfig` fields that hold a whole config -> the pipeline parameter carrying it as a JSON object.
CONFIG_PARAMETERS: dict[str, str] = {
    "prepare_options": "prepare_options",
    "job": "job_config",
    "blessing": "blessing_config",
    "validation": "validation_config",
    "beam": "beam_options",
}
# Sections of a run's config file that are not `JobConfig` sections.
OWN_SECTIONS = ("blessing", "prepare", "validation")


def _field_default(cls: Any, name: str) -> Any:
    return next(f.default for f in dataclasses.fields(cls) if f.name == name)


@dataclasses.dataclass(frozen=True)
class RunConfig(JsonConfig):
    """Everything one pipeline run is given.

    Attributes:
      publish_root: where blessed models are published (versions/ and LATEST).
      data: the rows to prepare (CSV/JSONL path or glob, local or gs://), or "embedded:penguins".
      label: the label column.
      task: "auto", "classification" or "regression".
      key_column: a column of unique row keys, or "" to derive keys from row contents.
      eval_fraction: share of rows in the eval split (`PrepareConfig`'s default).
      prepare_options: other `PrepareConfig` fields.
      job: the training config (model, training, tpu).
      blessing: when a model is blessed.
      validation: how far the data may drift from the reference model's (the warm-start source, else the
        baseline), and what a breach does.
      baseline: "none", "latest", a publish root or a SavedModel directory to compare with.
      warm_start: "none", "latest", a publish root or a SavedModel directory to initialise from.
      predict_data: "eval", "train", "test", a URI or glob of raw CSV / JSON Lines rows (scored through the
        prepared schema; the label is optional), or prepared TFRecords (.tfrecord(s), or a directory of them).
      engine: "inprocess" or "beam": who runs preparation and batch prediction (docs/scale.md).
      beam: with engine="beam", where Beam runs (the DirectRunner here, or Dataflow's settings).
    """

    publish_root: str
    data: str = EMBEDDED_DATA
    label: str = EMBEDDED_LABEL
    task: str = AUTO_TASK
    key_column: str = ""
    eval_fraction: float = _field_default(PrepareConfig, "eval_fraction")
    prepare_options: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    job: JobConfig = dataclasses.field(default_factory=JobConfig)
    blessing: BlessingConfig = dataclasses.field(default_factory=BlessingConfig)
    validation: ValidationConfig = dataclasses.field(default_factory=ValidationConfig)
    baseline: str = LATEST_MODEL
    warm_start: str = NO_MODEL
    predict_data: str = "eval"
    engine: str = INPROCESS
    beam: BeamConfig = dataclasses.field(default_factory=BeamConfig)

    def __post_init__(self) -> None:
        check_engine(self.engine, "--engine")
        require(self.task in RUN_TASKS, f"--task {self.task!r} is not one of {RUN_TASKS}")
        require(bool(self.label), "--label is empty; name the label column of your data")
        require(
            bool(self.publish_root),
            "the publish root is empty; give the directory or gs:// prefix for blessed models",
        )
        require(
            0.0 < self.eval_fraction < 1.0,
            f"eval_fraction={self.eval_fraction!r} must be in (0, 1), e.g. 0.2",
        )
        require(
            bool(self.predict_data),
            f"--predict-data is empty; use one of {PREPARED_SPLITS} or a URI of rows",
        )
        try:
            prediction_kind(self.predict_data)
        except ConfigError as e:
            raise ConfigError(f"--predict-data: {e}") from None

    def arguments(self) -> dict[str, Any]:
        """The pipeline's parameter values: the plain fields, each config as a JSON object without nulls (see
        `without_nulls`), and the hyperparameters read from the job config, so the two always agree."""
        plain = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name not in CONFIG_PARAMETERS}
        return {
            **plain,
            "prepare_options": without_nulls(dict(self.prepare_options)),
            "job_config": parameter_dict(self.job, JobConfig),
            "blessing_config": parameter_dict(self.blessing, BlessingConfig),
            "validation_config": parameter_dict(self.validation, ValidationConfig),
            "beam_options": parameter_dict(self.beam, BeamConfig),
            **hyperparameters(self.job),
        }

    @classmethod
    def parameter_defaults(cls) -> dict[str, Any]:
        """The pipeline parameters' defaults, read from the config types.

        The plain fields' defaults, `JobConfig()`'s hyperparameters, and {} for each whole config ({} rebuilds
        as that config's defaults, so a compiled pipeline holds no copy of them). publish_root has no default:
        a run must say where blessed models go.
        """
        plain = {
            f.name: f.default
            for f in dataclasses.fields(cls)
            if f.name not in CONFIG_PARAMETERS and f.default is not dataclasses.MISSING
        }
        return {**plain, **{name: {} for name in CONFIG_PARAMETERS.values()}, **hyperparameters(JobConfig())}


def hyperparameters(job: JobConfig) -> dict[str, Any]:
    """The pipeline's hyperparameter parameters as `job` sets them: {"model_family": "dnn", ...}."""
    data = job.to_dict()
    out = {}
    for name, dotted in HYPERPARAMETERS.items():
        value = data
        for part in dotted.split("."):
            value = value[part]
        # A KFP float parameter takes a float; `--set training.optimizer.learning_rate=1` parses as an int.
        out[name] = float(value) if _job_field_type(dotted) is float else value
    return out


def hyperparameter_overrides(values: Mapping[str, Any]) -> dict[str, Any]:
    """{"train_steps": 300} -> {"training.train_steps": 300}: hyperparameter parameters as `JobConfig` keys."""
    unknown = sorted(set(values) - set(HYPERPARAMETERS))
    require(not unknown, f"{unknown} are not hyperparameter parameters; use some of {sorted(HYPERPARAMETERS)}")
    return {HYPERPARAMETERS[name]: value for name, value in values.items()}


def _job_field_type(dotted: str) -> Any:
    """The declared type of a dotted `JobConfig` field: "training.optimizer.learning_rate" -> float."""
    hint: Any = JobConfig
    for part in dotted.split("."):
        hint = typing.get_type_hints(hint)[part]
    return hint


def without_nulls(value: Any) -> Any:
    """`value` with null entries of dicts removed, recursively.

    KFP pipeline parameters cannot hold null (protobuf Struct values built by the KFP compiler), so configs
    travel without their null fields; a missing field takes its default when the config is rebuilt.
    """
    if isinstance(value, Mapping):
        return {k: without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, (list, tuple)):
        return [without_nulls(v) for v in value]
    return value


def parameter_dict(config: Any, cls: Any) -> dict[str, Any]:
    """`config.to_dict()` as a pipeline parameter, checked to rebuild the same config."""
    data = without_nulls(config.to_dict())
    if cls.from_dict(data) != config:
        raise ConfigError(
            f"{cls.__name__} sets a field to null whose default is not null; KFP parameters cannot carry "
            "null: set the field to a value instead"
        )
    return data


def _split_sections(config: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """{"job": {...}, "blessing": {...}, "prepare": {...}} from one config file's JSON object."""
    if not isinstance(config, Mapping):
        raise ConfigError(f"the config file must hold a JSON object, got {type(config).__name__}")
    sections: dict[str, dict[str, Any]] = {"job": {}, "blessing": {}, "prepare": {}, "validation": {}}
    for key, value in config.items():
        if key not in OWN_SECTIONS:
            sections["job"][key] = value
        elif not isinstance(value, Mapping):
            raise ConfigError(f"config section {key!r} must be a JSON object")
        else:
            sections[key] = dict(value)
    return sections


def resolve_configs(config: Mapping[str, Any] | None, overrides: Sequence[str]) -> dict[str, Any]:
    """Resolves a config file's JSON and `--set` overrides into a JobConfig, BlessingConfig, prepare options and
    ValidationConfig.

    The config file is JSON: a `JobConfig` (sections "tpu", "training", "model") plus three optional sections of
    its own, "blessing" (a `BlessingConfig`), "prepare" (extra `PrepareConfig` fields) and "validation" (a
    `ValidationConfig`). Each override is
    "KEY=VALUE" with a dotted key: `training.train_steps=300`, `blessing.min_improvement=0.01`,
    `blessing.thresholds={"accuracy": 0.9}`, `prepare.num_shards=4`.

    Returns:
      {"job": JobConfig, "blessing": BlessingConfig, "prepare": dict, "validation": ValidationConfig}.
    """
    sections = _split_sections(config or {})
    job_overrides: dict[str, Any] = {}
    for text in overrides:
        key, value = parse_override(text)
        head, _, rest = key.partition(".")
        if head in OWN_SECTIONS and rest:
            set_dotted(sections[head], rest, value, create=True)
        else:
            job_overrides[key] = value
    job = JobConfig.from_dict(sections["job"]).with_overrides(job_overrides)
    return {
        "job": job,
        "blessing": BlessingConfig.from_dict(sections["blessing"]),
        "prepare": sections["prepare"],
        "validation": ValidationConfig.from_dict(sections["validation"]),
    }


def prediction_kind(data: str) -> str:
    """What `data` names, from its text alone (no I/O, so the CLI can check it before submitting):
    SPLIT ("eval", "train", "test", "valid"), RAW (.csv, .jsonl, .json, .ndjson, each optionally .gz), TFRECORD (.tfrecord, .tfrecords) or
    DIRECTORY (a trailing "/" or no extension: a directory of TFRecords, checked when the stage runs)."""
    if data in PREPARED_SPLITS:
        return SPLIT
    if data.endswith("/"):
        return DIRECTORY
    name = posixpath.basename(data).lower()
    ext = posixpath.splitext(name)[1]
    if ext == GZIP and posixpath.splitext(name[: -len(GZIP)])[1] in RAW_EXTENSIONS:
        return RAW
    if ext in RAW_EXTENSIONS:
        return RAW
    if ext in TFRECORD_EXTENSIONS:
        return TFRECORD
    if not ext:
        return DIRECTORY
    raise ConfigError(
        f"predict_data={data!r}: cannot tell what {ext!r} files hold; use a prepared split {PREPARED_SPLITS}, "
        f"CSV / JSON Lines rows ({', '.join(RAW_EXTENSIONS)}), or prepared TFRecords "
        f"({', '.join(TFRECORD_EXTENSIONS)}, or a directory of them); rename the files to match their format"
    )
