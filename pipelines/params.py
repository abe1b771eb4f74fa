"""Pipeline arguments: one frozen, validated settings object resolved from a config file and `--set` overrides.

The config file is JSON: a `JobConfig` (sections "tpu", "training", "model") plus two optional sections of
our own, "blessing" (a `BlessingConfig`) and "prepare" (extra `PrepareConfig` fields). `--set KEY=VALUE`
overrides any of them with a dotted key: `training.train_steps=300`, `blessing.min_improvement=0.01`,
`blessing.thresholds={"accuracy": 0.9}`, `prepare.num_shards=4`.

`RunSettings.arguments()` gives the pipeline's parameter values; the explicit hyperparameter parameters
(model_family, train_steps, ...) are taken from the resolved job config, so the two always agree.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any, Dict, Mapping, Optional, Sequence

from estimator_lib.config import BlessingConfig, ConfigError, JobConfig, parse_override, set_dotted
from estimator_lib.config.beam import INPROCESS, BeamConfig, check_engine
from estimator_lib.config.run import EMBEDDED_DATA, PREPARED_SPLITS, prediction_kind

OWN_SECTIONS = ("blessing", "prepare")
TASKS = ("auto", "classification", "regression")


@dataclasses.dataclass(frozen=True)
class RunSettings:
    """Everything one pipeline run is given.

    Attributes:
      data: the rows to prepare (CSV/JSONL path or glob, local or gs://), or "embedded:penguins".
      label: the label column.
      task: "auto", "classification" or "regression".
      key_column: a column of unique row keys, or "" to derive keys from row contents.
      eval_fraction: share of rows in the eval split.
      prepare_options: other `PrepareConfig` fields.
      job: the training config (model, training, tpu).
      blessing: when a model is blessed.
      publish_root: where blessed models are published (versions/ and LATEST).
      baseline: "none", "latest", a publish root or a SavedModel directory to compare with.
      warm_start: "none", "latest", a publish root or a SavedModel directory to initialise from.
      predict_data: "eval", "train", "test", a URI or glob of raw CSV / JSON Lines rows (scored through the
        prepared schema; the label is optional), or prepared TFRecords (.tfrecord(s), or a directory of them).
      engine: "inprocess" or "beam": who runs preparation and batch prediction (docs/scale.md).
      beam_options: with engine="beam", a `BeamConfig` dict (runner, Dataflow settings).
    """

    publish_root: str
    data: str = EMBEDDED_DATA
    label: str = "species"
    task: str = "auto"
    key_column: str = ""
    eval_fraction: float = 0.2
    prepare_options: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    job: JobConfig = dataclasses.field(default_factory=JobConfig)
    blessing: BlessingConfig = dataclasses.field(default_factory=BlessingConfig)
    baseline: str = "latest"
    warm_start: str = "none"
    predict_data: str = "eval"
    engine: str = INPROCESS
    beam_options: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        check_engine(self.engine, "--engine")
        BeamConfig.from_dict(self.beam_options)  # fails here, naming the setting, not in a stage
        if self.task not in TASKS:
            raise ConfigError(f"--task {self.task!r} is not one of {TASKS}")
        if not self.label:
            raise ConfigError("--label is empty; name the label column of your data")
        if not self.publish_root:
            raise ConfigError("the publish root is empty; give the directory or gs:// prefix for blessed models")
        if not 0.0 < self.eval_fraction < 1.0:
            raise ConfigError(f"eval_fraction={self.eval_fraction!r} must be in (0, 1), e.g. 0.2")
        if not self.predict_data:
            raise ConfigError(f"--predict-data is empty; use one of {PREPARED_SPLITS} or a URI of rows")
        try:
            prediction_kind(self.predict_data)
        except ConfigError as e:
            raise ConfigError(f"--predict-data: {e}") from None

    def arguments(self) -> Dict[str, Any]:
        """The pipeline's parameter values (dicts without nulls: see `without_nulls`)."""
        job = self.job
        return {
            "publish_root": self.publish_root,
            "data": self.data,
            "label": self.label,
            "task": self.task,
            "key_column": self.key_column,
            "eval_fraction": self.eval_fraction,
            "prepare_options": without_nulls(dict(self.prepare_options)),
            "job_config": parameter_dict(job, JobConfig),
            "model_family": job.model.family,
            "hidden_units": list(job.model.hidden_units),
            "learning_rate": float(job.training.optimizer.learning_rate),
            "train_steps": job.training.train_steps,
            "train_batch_size": job.training.train_batch_size,
            "seed": job.training.seed,
            "blessing_config": parameter_dict(self.blessing, BlessingConfig),
            "baseline": self.baseline,
            "warm_start": self.warm_start,
            "predict_data": self.predict_data,
            "engine": self.engine,
            "beam_options": without_nulls(dict(self.beam_options)),
        }


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


def parameter_dict(config: Any, cls: Any) -> Dict[str, Any]:
    """`config.to_dict()` as a pipeline parameter, checked to rebuild the same config."""
    data = without_nulls(config.to_dict())
    if cls.from_dict(data) != config:
        raise ConfigError(
            f"{cls.__name__} sets a field to null whose default is not null; KFP parameters cannot carry "
            "null: set the field to a value instead"
        )
    return data


def _split_sections(config: Mapping[str, Any]) -> Dict[str, Dict[str, Any]]:
    """{"job": {...}, "blessing": {...}, "prepare": {...}} from one config file's JSON object."""
    if not isinstance(config, Mapping):
        raise ConfigError(f"the config file must hold a JSON object, got {type(config).__name__}")
    sections: Dict[str, Dict[str, Any]] = {"job": {}, "blessing": {}, "prepare": {}}
    for key, value in config.items():
        if key not in OWN_SECTIONS:
            sections["job"][key] = value
        elif not isinstance(value, Mapping):
            raise ConfigError(f"config section {key!r} must be a JSON object")
        else:
            sections[key] = dict(value)
    return sections


def resolve_configs(config: Optional[Mapping[str, Any]], overrides: Sequence[str]) -> Dict[str, Any]:
    """Resolves the config file's JSON and `--set` overrides into a JobConfig, BlessingConfig and prepare options.

    Returns:
      {"job": JobConfig, "blessing": BlessingConfig, "prepare": dict}.
    """
    sections = _split_sections(config or {})
    job_overrides: Dict[str, Any] = {}
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
    }


def read_config_file(path: Optional[str]) -> Dict[str, Any]:
    """The JSON object in `path` (local or gs://), or {} without a path."""
    if not path:
        return {}
    from estimator_lib import storage

    try:
        return json.loads(storage.read_text(path))
    except json.JSONDecodeError as e:
        raise ConfigError(f"--config {path}: not valid JSON ({e})") from e
