"""What one pipeline run is given beyond the job config, and the one source of the pipeline's defaults.

TensorFlow-free, so the CLI can check a run's arguments before anything starts.

Configuration flows one way: the CLI's flags, a config file and `--set` overrides are resolved once
(`resolve_run`, the only place a `RunConfig` is built from what a user gave), every value checked there, before
any stage starts. From the `RunConfig` come the stages' specs (`RunConfig.stage_specs()`, `stages`), each
sent to its stage as one parameter (`RunConfig.arguments()`) and recorded by the stage; later stages,
`reproduce` and `diff` read those records (`RunConfig.from_specs`) and never merge again.

- `RunConfig`: the data a run prepares, its job, blessing and prepare configs, the baseline, the warm start,
  what it batch-predicts and the engine that prepares and batch-predicts (`BeamConfig`). Its field defaults
  and `JobConfig`'s are the only defaults a run has: the pipeline function's parameters
  (`RunConfig.parameter_defaults()`), the CLI's flags and the components take theirs from here; a local run
  adds `LOCAL_JOB_DEFAULTS`.
- `HYPERPARAMETERS`, `hyperparameters(job)`: the headline hyperparameters, a view of the job config for a run's
  summary (nothing reads them back).
- `resolve_configs`, `resolve_run`: a run's config file (a `JobConfig` plus optional "blessing", "prepare" and
  "validation" sections) with `--set` overrides parsed by their fields' types, and the run's flags.
- `prediction_kind`: what a `predict_data` names.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import posixpath
from collections.abc import Mapping, Sequence
from typing import Any

from estimator_lib.config.base import (
    ConfigError,
    JsonConfig,
    dotted_fields,
    field_hint,
    parse_typed,
    require,
    set_dotted,
    split_override,
)
from estimator_lib.config.beam import BEAM, INPROCESS, BeamConfig, check_engine
from estimator_lib.config.blessing import BlessingConfig
from estimator_lib.config.feature_spec import FeatureSpec, FeatureSpecError
from estimator_lib.config.job import TASKS, USER_UNREAD_TRAINING, JobConfig
from estimator_lib.config.prepare import PrepareConfig
from estimator_lib.config.skew import SkewConfig
from estimator_lib.config.stages import (
    EvaluateSpec,
    PredictSpec,
    PrepareSpec,
    StageSpecs,
    TrainSpec,
)
from estimator_lib.config.validation import ValidationConfig

EMBEDDED_DATA = "embedded:penguins"
EMBEDDED_LABEL = "species"  # the label column of the embedded Palmer Penguins
# What a baseline or warm start may name besides a URI: the last published model, or no model; "auto": the last
# published model if it is of the run's lineage (the same label and task), else none (`release.resolve_sources`).
LATEST_MODEL, NO_MODEL, AUTO_MODEL = "latest", "none", "auto"
AUTO_TASK = "auto"  # infer the task from the label's values
RUN_TASKS = (AUTO_TASK, *TASKS)
PREPARED_SPLITS = ("train", "eval", "test", "valid")
RAW_EXTENSIONS = (".csv", ".jsonl", ".json", ".ndjson")  # each may end in .gz (gzip-compressed)
GZIP = ".gz"
TFRECORD_EXTENSIONS = (".tfrecord", ".tfrecords", ".tf_record", ".tfrec")
SPLIT, TFRECORD, RAW, DIRECTORY = "split", "tfrecord", "raw", "directory"

# Headline hyperparameter -> dotted `JobConfig` key: the view a run's summary shows (`hyperparameters`).
HYPERPARAMETERS: dict[str, str] = {
    "model_family": "model.family",
    "hidden_units": "model.hidden_units",
    "learning_rate": "training.optimizer.learning_rate",
    "max_epochs": "training.max_epochs",
    "train_batch_size": "training.train_batch_size",
    "seed": "training.seed",
}
# What a local run (`tpu-pipeline run-local`) defaults in the job config: CPU, with the TPU-strict checks on (they
# catch on CPU what a TPU would reject later). Defaults, not fixed: a config file or `--set tpu.strict=false`
# overrides them.
LOCAL_JOB_DEFAULTS: dict[str, Any] = {"tpu.use_tpu": False, "tpu.strict": True}
# Stage -> the pipeline parameter carrying its spec (`stages`) as JSON text.
STAGE_PARAMETERS: dict[str, str] = {
    "prepare": "prepare_spec",
    "train": "train_spec",
    "evaluate": "evaluate_spec",
    "batch_predict": "predict_spec",
}
# `RunConfig` fields that hold a whole config -> its name in the run's `view()`.
CONFIG_PARAMETERS: dict[str, str] = {
    "prepare_options": "prepare_options",
    "job": "job_config",
    "blessing": "blessing_config",
    "validation": "validation_config",
    "beam": "beam_options",
    "predict": "predict_config",
}
# Sections of a run's config file that are not `JobConfig` sections.
OWN_SECTIONS = ("beam", "blessing", "prepare", "validation", "predict")


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
      prepare_options: the other `PrepareConfig` fields (the five above are the run's own: never here).
      job: the training config (model, training, tpu).
      blessing: when a model is blessed.
      validation: how far the data may drift from the reference model's (the warm-start source, else the
        baseline), and what a breach does.
      baseline: "auto", "none", "latest", a publish root or a SavedModel directory to compare with; "auto": the
        last published model when it predicts the run's label (and task), else none.
      warm_start: "none", "latest", a publish root or a SavedModel directory to initialise from.
      predict_data: "eval", "train", "test", a URI or glob of raw CSV / JSON Lines rows (scored through the
        prepared schema; the label is optional), or prepared TFRecords (.tfrecord(s), or a directory of them);
        with a user model (`job.model.model_fn`), "eval", "train" or TFRecords the feature spec describes (the
        label is optional).
      feature_spec: with a user model_fn, the JSON file describing its TFRecords (`--feature-spec`); "" for
        the built-in families' raw rows.
      eval_data: with a feature spec, TFRecords to evaluate on (`--eval-data`); "": `data` is split.
      engine: "inprocess" or "beam": who runs preparation and batch prediction (docs/scale.md). With a user
        model_fn, batch prediction only: its records are always prepared (copied and checked) in-process.
      beam: with engine="beam", where Beam runs (the DirectRunner here, or Dataflow's settings).
      predict: the skew check of the rows batch prediction scores against the training data (`--set predict.*`).
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
    baseline: str = AUTO_MODEL
    warm_start: str = NO_MODEL
    predict_data: str = "eval"
    engine: str = INPROCESS
    beam: BeamConfig = dataclasses.field(default_factory=BeamConfig)
    feature_spec: str = ""
    eval_data: str = ""
    predict: SkewConfig = dataclasses.field(default_factory=SkewConfig)

    def __post_init__(self) -> None:
        check_engine(self.engine, "--engine")
        require(self.task in RUN_TASKS, f"--task (prepare.task) {self.task!r} is not one of {RUN_TASKS}")
        require(bool(self.label), "--label (prepare.label) is empty; name the label column of your data")
        require(
            bool(self.publish_root),
            "the publish root is empty; give the directory or gs:// prefix for blessed models",
        )
        require(
            bool(self.predict_data),
            f"--predict-data is empty; use one of {PREPARED_SPLITS} or a URI of rows",
        )
        try:
            prediction_kind(self.predict_data)
        except ConfigError as e:
            raise ConfigError(f"--predict-data: {e}") from None
        twice = sorted(set(self.prepare_options) & set(RUN_PREPARE_FIELDS))
        require(
            not twice,
            f"prepare_options set {twice}, which the run sets itself (data, label, task, key_column, "
            "eval_fraction): give them as the run's own fields",
        )
        self.prepare_config()  # checks the prepare section now, before any stage starts
        if self.job.model.model_fn or self.feature_spec:
            self._check_user_model()
        else:
            require(
                not self.blessing.directions,
                f"blessing.directions={dict(self.blessing.directions)} names the direction of your own model_fn's "
                "metrics, and this run trains a built-in family (no --model-fn): remove it",
            )
            embedded = self.data == EMBEDDED_DATA and self.label == EMBEDDED_LABEL
            known = TASKS[0] if embedded and self.task == AUTO_TASK else self.task  # the penguins' species: classes
            self.blessing.check_task(None if known == AUTO_TASK else known)  # a threshold the task has, before work

    def _ignored_by_user_model(self) -> list[str]:
        """The settings a run of a user's model_fn would not read, set to other than their defaults."""
        defaults = JobConfig().training
        out = [f"prepare.{name}" for name in sorted(self.prepare_options) if name not in USER_PREPARE_OPTIONS]
        out += [
            f"training.{name}"
            for name in USER_UNREAD_TRAINING
            if getattr(self.job.training, name) != getattr(defaults, name)
        ]
        if self.validation != ValidationConfig():
            out.append("validation")
        if self.predict.max_prediction_shift != SkewConfig().max_prediction_shift:
            out.append("predict.max_prediction_shift")
        blessing = BlessingConfig()
        out += [f"blessing.{n}" for n in USER_UNREAD_BLESSING if getattr(self.blessing, n) != getattr(blessing, n)]
        return out

    def _check_user_model(self) -> None:
        """A user model_fn reads TFRecords a feature spec describes: both are given, the spec names the label,
        and what the run predicts and blesses fits it."""
        model_fn = self.job.model.model_fn
        require(
            bool(model_fn),
            f"--feature-spec (prepare.feature_spec) {self.feature_spec} describes TFRecords for your own model, but "
            "no --model-fn (model.model_fn) is given: the built-in families read raw rows (CSV, JSON Lines)",
        )
        require(
            bool(self.feature_spec),
            f"--model-fn {model_fn} needs --feature-spec FILE.json (prepare.feature_spec), the JSON description of "
            "your TFRecords' "
            'features, e.g. {"image": {"dtype": "float32", "shape": [784]}, "label": {"dtype": "int64", "shape": []}}',
        )
        require(
            self.data != EMBEDDED_DATA,
            f"--model-fn {model_fn} trains on your TFRecords: give them with --data (a path or glob)",
        )
        kind = prediction_kind(self.predict_data)
        require(
            kind != RAW and self.predict_data not in ("test", "valid"),
            f"--predict-data {self.predict_data}: a user model predicts 'eval', 'train' or TFRecords its feature "
            "spec describes",
        )
        self.blessing.check_user_metrics()
        ignored = self._ignored_by_user_model()
        require(
            not ignored,
            f"{ignored[0] if ignored else ''} is set, and with --model-fn {model_fn} nothing reads it (your model_fn "
            "has its own optimizer; your records are checked against the feature spec, not profiled as rows): remove "
            "it (your model's settings go in --hparams)",
        )
        if "://" not in self.feature_spec:  # a local spec is checked now; a gs:// one by the prepare stage
            spec = load_feature_spec(self.feature_spec, self.label, self.key_column)
            require(
                spec.label is not None,
                f"--feature-spec {self.feature_spec}: give --label, the feature that is the label",
            )
            self.blessing.check_slice_features(spec.scalars, f"scalar features of --feature-spec {self.feature_spec}")

    def prepare_config(self) -> PrepareConfig:
        """The prepare stage's `PrepareConfig`: the prepare options with the run's data, label, task ("auto":
        inferred), key column ("": derived from row contents) and eval fraction. The data stays as given
        ("embedded:penguins" is located by the stage)."""
        fields = {
            **self.prepare_options,
            "data": [self.data],
            "label": self.label,
            "task": None if self.task == AUTO_TASK else self.task,
            "key_column": self.key_column or None,
            "eval_fraction": self.eval_fraction,
            "feature_spec": self.feature_spec or None,
            "eval_data": [self.eval_data] if self.eval_data else [],
        }
        return PrepareConfig.from_dict(fields, "prepare.")

    def stage_specs(self) -> StageSpecs:
        """The spec of each stage, cut from this configuration: the one place they are made."""
        return StageSpecs(
            prepare=PrepareSpec(self.prepare_config(), self.validation, self.engine, self.beam),
            train=TrainSpec(self.job),
            evaluate=EvaluateSpec(self.blessing),
            batch_predict=PredictSpec(self.predict_data, self.engine, self.beam, self.predict),
        )

    def arguments(self) -> dict[str, Any]:
        """The pipeline's parameter values: where models are published and which ones the run starts from and
        compares with, and each stage's spec as JSON text (`STAGE_PARAMETERS`; a stage decodes it by the spec's
        types, so its ints arrive as ints: KFP's dict parameters would turn them into floats)."""
        specs = self.stage_specs()
        texts = {name: getattr(specs, stage).to_json(indent=None) for stage, name in STAGE_PARAMETERS.items()}
        return {"publish_root": self.publish_root, "baseline": self.baseline, "warm_start": self.warm_start, **texts}

    def view(self) -> dict[str, Any]:
        """The run's settings as a person reads them (a run's summary records them): the plain fields, each
        config as a JSON object, and the hyperparameters read from the job config (a view: nothing reads them
        back)."""
        plain = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name not in CONFIG_PARAMETERS}
        blessing, validation = self.blessing.to_dict(), self.validation.to_dict()
        if self.job.model.model_fn:  # only what a user's model_fn run reads (the rest is refused off its default)
            blessing = {k: v for k, v in blessing.items() if k not in USER_UNREAD_BLESSING}
            validation = {}
        return {
            **plain,
            "prepare_options": without_nulls(dict(self.prepare_options)),
            "job_config": without_nulls(self.job.settings_read()),
            "blessing_config": without_nulls(blessing),
            "validation_config": without_nulls(validation),
            "beam_options": without_nulls(self.beam.to_dict()),
            "predict_config": self.predict.to_dict(),
            **hyperparameters(self.job),
        }

    @classmethod
    def field_defaults(cls) -> dict[str, Any]:
        """The defaults of the plain fields (the CLI's flags show them)."""
        return {f.name: f.default for f in dataclasses.fields(cls) if f.default is not dataclasses.MISSING}

    @classmethod
    def parameter_defaults(cls, beam: BeamConfig | None = None) -> dict[str, Any]:
        """The pipeline parameters' defaults: the default run's `arguments()` (with `beam`, on Apache Beam with
        those settings), but for publish_root, which has none: a run must say where blessed models go."""
        given = {"publish_root": "-", **({"engine": BEAM, "beam": beam} if beam else {})}
        defaults = resolve_run(None, [], given).arguments()
        defaults.pop("publish_root")
        return defaults

    @classmethod
    def from_specs(cls, specs: StageSpecs, publish_root: str, baseline: str, warm_start: str) -> RunConfig:
        """The run whose `stage_specs()` are `specs` (recorded by a run's stages): the inverse of `stage_specs`,
        by decoding, not merging. Prepare options at their defaults are left out."""
        prepare = specs.prepare.prepare.to_dict()
        defaults = {f.name: f.default for f in dataclasses.fields(PrepareConfig)}
        options = {k: v for k, v in prepare.items() if k not in RUN_PREPARE_FIELDS and v != _listed(defaults[k])}
        run = {
            **{name: _run_level(name, prepare[name]) for name in RUN_PREPARE_FIELDS},
            "publish_root": publish_root,
            "prepare_options": options,
            "job": specs.train.job.to_dict(),
            "blessing": specs.evaluate.blessing.to_dict(),
            "validation": specs.prepare.validation.to_dict(),
            "baseline": baseline,
            "warm_start": warm_start,
            "predict_data": specs.batch_predict.data,
            "predict": specs.batch_predict.skew.to_dict(),
            "engine": specs.prepare.engine,
            "beam": specs.prepare.beam.to_dict(),
        }
        return cls.from_dict(run)


# The blessing settings a user model's run does not read: the built-in checks (trivial model, linear reference),
# and the bootstrap (a metric_fn gives aggregates only, no per-row outputs to resample).
USER_UNREAD_BLESSING = (
    "beat_trivial",
    "confidence",
    "reference_metric",
    "reference_margin",
    "bootstrap_replicates",
    "bootstrap_seed",
)
# A user model's blessing defaults: feature importance off (it evaluates the model once more per feature and
# repeat, plus integrated gradients, which for an image or text model costs many times the evaluation itself);
# `--set blessing.importance_rows=N` turns it on.
USER_MODEL_BLESSING_DEFAULTS = {"importance_rows": None}

# What a user model's run reads of the prepare options (the run's own fields aside): the rest is about raw rows.
USER_PREPARE_OPTIONS = ("num_shards", "num_workers")


def _listed(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


def hyperparameters(job: JobConfig) -> dict[str, Any]:
    """The headline hyperparameters as `job` sets them: {"model_family": "dnn", ...} (a view); for a user model,
    its model_fn and hyperparameters instead of the built-in family's."""
    data = job.to_dict()
    if job.model.model_fn:
        names = ("max_epochs", "train_batch_size", "seed")
        own = {name: data["training"][name] for name in names}
        return {"model_fn": job.model.model_fn, "hparams": dict(job.model.hparams), **own}
    out = {}
    for name, dotted in HYPERPARAMETERS.items():
        value = data
        for part in dotted.split("."):
            value = value[part]
        out[name] = value
    return out


def without_nulls(value: Any) -> Any:
    """`value` with null entries of dicts removed, recursively.

    A run's `view()` shows its configs without their null fields (a missing field is its default).
    """
    if isinstance(value, Mapping):
        return {k: without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, (list, tuple)):
        return [without_nulls(v) for v in value]
    return value


# `PrepareConfig` fields a run gives at its own level (the resolve stage reads the data too; the CLI has flags for
# them): "prepare.<field>" sets the run's field, so each has one value.
RUN_PREPARE_FIELDS = ("data", "label", "task", "key_column", "eval_fraction", "feature_spec", "eval_data")
SECTION_TYPES: dict[str, Any] = {
    "beam": BeamConfig,
    "blessing": BlessingConfig,
    "prepare": PrepareConfig,
    "validation": ValidationConfig,
    "predict": SkewConfig,
}
JOB_SECTIONS = tuple(f.name for f in dataclasses.fields(JobConfig))


def _split_sections(config: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """{"job": {...}, "blessing": {...}, "prepare": {...}, "validation": {...}} from one config file's JSON
    object."""
    if not isinstance(config, Mapping):
        raise ConfigError(f"the config file must hold a JSON object, got {type(config).__name__}")
    sections: dict[str, dict[str, Any]] = {"job": {}, "beam": {}, "blessing": {}, "prepare": {}, "validation": {}}
    sections["predict"] = {}
    for key, value in config.items():
        if key not in OWN_SECTIONS:
            sections["job"][key] = value
        elif not isinstance(value, Mapping):
            raise ConfigError(f"config section {key!r} must be a JSON object")
        else:
            sections[key] = dict(value)
    return sections


def _merge(base: dict[str, Any], given: Mapping[str, Any]) -> dict[str, Any]:
    """`given` over `base`, section by section (a deep copy; neither is changed)."""
    out = json.loads(json.dumps(base))
    for key, value in given.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


def _closest_keys(key: str) -> list[str]:
    """The full keys a section-less `--set` key may mean: those ending in it (train_steps ->
    training.train_steps), else the closest by spelling."""
    keys = [*dotted_fields(JobConfig)]
    keys += [f"{section}.{k}" for section, cls in SECTION_TYPES.items() for k in dotted_fields(cls)]
    ending = [k for k in keys if k.endswith("." + key)]
    return ending[:3] or difflib.get_close_matches(key, keys, n=3)


def typed_override(text: str) -> tuple[str, str, Any]:
    """`--set KEY=VALUE` as (section, field key within it, value parsed by the field's declared type): the
    section is "job" for the `JobConfig` sections (tpu, training, model), else "blessing", "prepare" or
    "validation". An unknown section or field fails here, naming what is known and the closest name."""
    key, raw = split_override(text)
    head, _, rest = key.partition(".")
    if head in SECTION_TYPES and rest:
        section, cls, dotted = head, SECTION_TYPES[head], rest
    elif head in JOB_SECTIONS:
        section, cls, dotted = "job", JobConfig, key
    else:
        known = sorted((*JOB_SECTIONS, *SECTION_TYPES))
        close = difflib.get_close_matches(head, known, n=1) or _closest_keys(key)
        hint = f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
        raise ConfigError(f"--set {key}: unknown section {head!r}; sections: {known}{hint}")
    return section, dotted, parse_typed(field_hint(cls, dotted, key), raw, key)


def resolve_configs(
    config: Mapping[str, Any] | None, overrides: Sequence[str], job_defaults: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """Resolves a config file's JSON and `--set` overrides into a JobConfig, BlessingConfig, prepare options and
    ValidationConfig.

    The config file is JSON: a `JobConfig` (sections "tpu", "training", "model") plus three optional sections of
    its own, "blessing" (a `BlessingConfig`), "prepare" (`PrepareConfig` fields) and "validation" (a
    `ValidationConfig`). Each override is "KEY=VALUE" with a dotted key, its value parsed by the field's
    declared type: `training.train_steps=300`, `model.hidden_units=64,32`, `blessing.min_improvement=0.01`,
    `blessing.thresholds={"accuracy": 0.9}`, `prepare.num_shards=4`, `training.warm_start_from=null`.
    Layers, each over the one before: `JobConfig`'s defaults, `job_defaults` (dotted keys an environment
    defaults, e.g. run-local's `tpu.strict`), the file, the overrides. A user model's run (`model.model_fn`) has
    blessing defaults of its own, `USER_MODEL_BLESSING_DEFAULTS`, under the file and the overrides.

    Returns:
      {"job": JobConfig, "blessing": BlessingConfig, "prepare": dict, "validation": ValidationConfig, "beam":
      dict}; the prepare options are checked by `RunConfig`, which adds the run's data, label, task, key column
      and eval fraction; the beam settings by `resolve_run`, over the engine flags' `BeamConfig`.
    """
    sections = _split_sections(config or {})
    job = JobConfig().with_overrides(dict(job_defaults or {})).to_dict()
    sections["job"] = _merge(job, sections["job"])
    for text in overrides:
        section, dotted, value = typed_override(text)
        set_dotted(sections[section], dotted, value, create=True)
    if sections["job"].get("model", {}).get("model_fn"):
        sections["blessing"] = {**USER_MODEL_BLESSING_DEFAULTS, **sections["blessing"]}
    return {
        "job": JobConfig.from_dict(sections["job"]),
        "blessing": BlessingConfig.from_dict(sections["blessing"], "blessing."),
        "prepare": sections["prepare"],
        "validation": ValidationConfig.from_dict(sections["validation"], "validation."),
        "beam": sections["beam"],
    }


def resolve_run(
    config: Mapping[str, Any] | None,
    overrides: Sequence[str],
    given: Mapping[str, Any],
    job_defaults: Mapping[str, Any] | None = None,
) -> RunConfig:
    """The run's one resolved, validated, frozen configuration: the only place a `RunConfig` is built from what
    a user gave.

    Args:
      config: the config file's JSON object (None: no file).
      overrides: the `--set KEY=VALUE` texts.
      given: `RunConfig` fields given on the command line ({"publish_root": ..., "eval_fraction": 0.3}); None or
        absent keeps the default. A field of `RUN_PREPARE_FIELDS` may also come from the file's or a `--set`'s
        "prepare" section; a flag and a `--set` that disagree are refused.
      job_defaults: dotted `JobConfig` keys the environment defaults (the file and `--set` override them).

    Raises:
      ConfigError: naming the key, the value and what is allowed.
    """
    configs = resolve_configs(config, overrides, job_defaults)
    prepare = dict(configs["prepare"])
    from_set = {}
    for text in overrides:
        section, dotted, value = typed_override(text)
        if section == "prepare" and dotted in RUN_PREPARE_FIELDS:
            from_set[dotted] = text
    fields = {name: value for name, value in given.items() if value is not None}
    for name in RUN_PREPARE_FIELDS:
        if name not in prepare:
            continue
        value = _run_level(name, prepare.pop(name))
        if name in from_set and name in fields and fields[name] != value:
            raise ConfigError(
                f"--{name.replace('_', '-')} {fields[name]} and --set {from_set[name]} disagree; give one of them"
            )
        if name in from_set or name not in fields:
            fields[name] = value
    fields["beam"] = _beam(fields.get("beam"), configs["beam"], overrides)
    return RunConfig(
        **fields,
        job=configs["job"],
        blessing=configs["blessing"],
        validation=configs["validation"],
        predict=_predict(config, overrides),
        prepare_options=prepare,
    )


def _predict(config: Mapping[str, Any] | None, overrides: Sequence[str]) -> SkewConfig:
    """The "predict" section (`SkewConfig`): the config file's, with the `--set predict.*` overrides over it."""
    section = _split_sections(config or {})["predict"]
    for text in overrides:
        name, dotted, value = typed_override(text)
        if name == "predict":
            set_dotted(section, dotted, value, create=True)
    return SkewConfig.from_dict(section, "predict.")


def _beam(flags: BeamConfig | None, section: Mapping[str, Any], overrides: Sequence[str]) -> BeamConfig:
    """The engine flags' `BeamConfig` (None: the defaults) with the config file's and `--set`'s "beam" section
    over it; a `--set` that disagrees with a flag's setting is refused."""
    base = (flags or BeamConfig()).to_dict()
    for text in overrides:
        key, _ = split_override(text)
        name = key.partition(".")[2]
        if key.startswith("beam.") and flags is not None and base[name] != getattr(BeamConfig(), name):
            require(
                base[name] == section[name],
                f"--set {text} disagrees with the engine flags' beam.{name}={base[name]!r}; give one of them",
            )
    return BeamConfig.from_dict({**base, **section}, "beam.")


def _run_level(name: str, value: Any) -> Any:
    """A "prepare" section's value of a `RUN_PREPARE_FIELDS` field as the run holds it."""
    if name == "data":
        items = [value] if isinstance(value, str) else list(value)
        require(
            len(items) == 1 and isinstance(items[0], str),
            f"prepare.data={value!r}: a run prepares one path or glob; use a glob for several files",
        )
        return items[0]
    if name == "task":
        return AUTO_TASK if value is None else value
    if name in ("key_column", "feature_spec"):
        return value or ""
    if name == "eval_data":
        items = [value] if isinstance(value, str) else list(value or [])
        require(len(items) <= 1, f"prepare.eval_data={value!r}: give one path or glob")
        return items[0] if items else ""
    return value


def load_feature_spec(path: str, label: str, key_column: str) -> FeatureSpec:
    """The local feature spec file, with the run's label and key (a ConfigError naming the file and feature)."""
    try:
        return FeatureSpec.read(path, label or None, key_column or None)
    except FeatureSpecError as e:
        raise ConfigError(str(e)) from None


def prediction_kind(data: str) -> str:
    """What `data` names, from its text alone (no I/O, so the CLI can check it before submitting):
    SPLIT ("eval", "train", "test", "valid"), RAW (.csv, .jsonl, .json, .ndjson, each optionally .gz),
    TFRECORD (.tfrecord, .tfrecords, .tf_record, .tfrec, each optionally .gz) or DIRECTORY (a trailing "/" or no
    extension: a directory of TFRecords, checked when the stage runs)."""
    if data in PREPARED_SPLITS:
        return SPLIT
    if data.endswith("/"):
        return DIRECTORY
    name = posixpath.basename(data).lower()
    ext = posixpath.splitext(name)[1]
    if ext == GZIP and posixpath.splitext(name[: -len(GZIP)])[1] in RAW_EXTENSIONS:
        return RAW
    if ext == GZIP and posixpath.splitext(name[: -len(GZIP)])[1] in TFRECORD_EXTENSIONS:
        return TFRECORD
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
