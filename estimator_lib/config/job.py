"""The job configs: where the model runs, how it trains, which model it is.

One dataclass per concern (`TPUSettings`, `OptimizerConfig`, `TrainingConfig`, `ModelConfig`) and `JobConfig`
that holds them and checks the rules that span several of them (a global batch size must divide evenly over
the TPU replicas; the checkpoint cadence must be a multiple of `iterations_per_loop`).

Every config validates itself on construction and raises `ConfigError` naming the field, the value, what is
wrong and how to fix it. Variants are made with `dataclasses.replace` or `JobConfig.with_overrides`.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Mapping, Optional, Tuple

from estimator_lib.config.base import JsonConfig, positive_int, require, set_dotted

PER_HOST_V2 = "PER_HOST_V2"
INPUT_PIPELINE_MODES = ("PER_HOST_V1", PER_HOST_V2, "BROADCAST", "SLICED")
OPTIMIZERS = ("sgd", "momentum", "adam", "adagrad", "rmsprop")
SCHEDULES = ("constant", "exponential_decay", "cosine_decay", "linear_decay")
BUILTIN_FAMILIES = ("linear", "dnn")
FAMILY_FIELDS = ("family", "features", "hidden_units", "embedding_dim", "dropout", "l2")
# The training settings a user's model_fn does not read: it builds its own optimizer, and has no validation split.
USER_UNREAD_TRAINING = ("optimizer", "early_stopping")
# The `params` keys TPUEstimator sets itself: no hyperparameter may take them.
RESERVED_PARAMS = ("batch_size", "context")
TASKS = ("classification", "regression")
# The defaults that follow the data (`JobConfig.for_data`), measured on penguins, digits, diabetes and a 600 x 1,000
# table (docs/pipeline.md, "Training: budget, early stopping, the kept checkpoint").
EXAMPLES_PER_SQRT_ROW = 1600  # the budget in examples seen: 1600 * sqrt(rows), e.g. 401 steps of 64 for 257 rows
VALIDATION_ROUNDS = 10  # about this many validation rounds over the budget
L2_PER_FEATURE_ROW = 0.04  # model.l2 = 0.04 * features / rows, in [MIN_L2, MAX_L2]
MIN_L2, MAX_L2 = 0.001, 0.1  # past 0.1 (0.2 measured) the DNN of a wide table collapses to the class prior


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


@dataclasses.dataclass(frozen=True)
class TPUSettings(JsonConfig):
    """Where the model runs.

    Attributes:
      use_tpu: False runs the same TPUEstimator on CPU/GPU (tests, local pipelines).
      tpu_name: Cloud TPU name, or "local" on a Cloud TPU VM (Vertex AI TPU machines). Required with use_tpu.
      zone, project: for a named (non-local) TPU; None lets the resolver read them from the metadata server.
      num_cores: TPU cores (replicas) in the slice, e.g. 8 for v2-8/v3-8, 4 for v5litepod-4.
      iterations_per_loop: training steps run on the TPU per host round trip (on CPU, per `session.run`: a loop
        in the graph; fewer when their batches would pass 64 MB, see `model.inputs.steps_per_run`).
      per_host_input: TPU input pipeline deployment; PER_HOST_V2 gives input_fn the per-replica batch.
      eval_on_tpu: run evaluation on the TPU too (needs fixed steps and padded batches, which we provide).
      strict: before running, build the graphs the TPU would run and reject what a TPU would refuse
        (`estimator_lib.strict`). On in tests and local pipeline runs; costs a few seconds.
      strict_accept: strict-mode findings accepted by name, "RULE:WHERE" with shell wildcards (e.g.
        "cross-shard:*"): a matching finding is reported and recorded, and does not block (docs/strict_mode.md).
    """

    use_tpu: bool = False
    tpu_name: Optional[str] = None
    zone: Optional[str] = None
    project: Optional[str] = None
    num_cores: int = 8
    iterations_per_loop: int = 100
    per_host_input: str = PER_HOST_V2
    eval_on_tpu: bool = True
    strict: bool = False
    strict_accept: Tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "strict_accept", tuple(self.strict_accept))
        bad = [p for p in self.strict_accept if not isinstance(p, str) or ":" not in p or not all(p.split(":", 1))]
        require(
            not bad,
            f"tpu.strict_accept={list(self.strict_accept)}: {bad[0] if bad else ''!r} is not 'RULE:WHERE' "
            "(e.g. 'cross-shard:*'); the rule and where come from the finding's own line",
        )
        positive_int("tpu", "num_cores", self.num_cores)
        positive_int("tpu", "iterations_per_loop", self.iterations_per_loop)
        require(
            self.per_host_input in INPUT_PIPELINE_MODES,
            f"tpu.per_host_input={self.per_host_input!r} is not one of {INPUT_PIPELINE_MODES}; use {PER_HOST_V2!r}",
        )
        require(
            not self.use_tpu or bool(self.tpu_name),
            "tpu.tpu_name is required when tpu.use_tpu=True; use 'local' on a Cloud TPU VM (Vertex AI) "
            "or the name of your Cloud TPU node",
        )

    @property
    def num_replicas(self) -> int:
        """Replicas that split a global batch: the TPU cores, or 1 on CPU."""
        return self.num_cores if self.use_tpu else 1


@dataclasses.dataclass(frozen=True)
class OptimizerConfig(JsonConfig):
    """Optimizer and learning-rate schedule.

    The default, Adam at 0.001 with a cosine decay over the step budget, suits small and large tables alike
    with early stopping (benchmarks/RESULTS.md, model quality). `decay_steps` defaults (None) to the step
    budget; `warmup_steps` ramps linearly from 0.
    """

    name: str = "adam"
    learning_rate: float = 0.001
    schedule: str = "cosine_decay"
    decay_steps: Optional[int] = None
    decay_rate: float = 0.5
    end_learning_rate: float = 0.0
    warmup_steps: int = 0
    momentum: float = 0.9
    clip_gradient_norm: Optional[float] = None

    def __post_init__(self) -> None:
        require(self.name in OPTIMIZERS, f"training.optimizer.name={self.name!r} is unknown; use one of {OPTIMIZERS}")
        require(
            self.schedule in SCHEDULES,
            f"training.optimizer.schedule={self.schedule!r} is unknown; use one of {SCHEDULES}",
        )
        require(
            isinstance(self.learning_rate, (int, float)) and self.learning_rate > 0,
            f"training.optimizer.learning_rate={self.learning_rate!r} must be a number > 0, e.g. 0.01",
        )
        if self.decay_steps is not None:
            positive_int("training.optimizer", "decay_steps", self.decay_steps)
        require(
            isinstance(self.warmup_steps, int) and self.warmup_steps >= 0,
            f"training.optimizer.warmup_steps={self.warmup_steps!r} must be an integer >= 0",
        )
        require(
            _number(self.decay_rate) and self.decay_rate > 0,
            f"training.optimizer.decay_rate={self.decay_rate!r} must be a number > 0, e.g. 0.5",
        )
        require(
            _number(self.end_learning_rate) and self.end_learning_rate >= 0,
            f"training.optimizer.end_learning_rate={self.end_learning_rate!r} must be a number >= 0, e.g. 0.0",
        )
        require(
            _number(self.momentum) and 0 <= self.momentum < 1,
            f"training.optimizer.momentum={self.momentum!r} must be in [0, 1), e.g. 0.9",
        )
        require(
            self.clip_gradient_norm is None or self.clip_gradient_norm > 0,
            f"training.optimizer.clip_gradient_norm={self.clip_gradient_norm!r} must be > 0 or null (no clipping)",
        )


@dataclasses.dataclass(frozen=True)
class EarlyStoppingConfig(JsonConfig):
    """Rounds of training judged on the validation split, and when to stop.

    Training runs in rounds of `every_steps` steps. After each round the model's mean loss over the whole
    validation split (prepare's `valid_fraction`, carved from the training rows by the same stable hash) is
    measured with the padded, fixed-step evaluation a TPU runs; the checkpoint with the lowest loss is kept in
    `model_dir/best/`, and evaluation, prediction and export use it. Without a validation split training runs
    its whole budget and the last checkpoint is the model.

    Attributes:
      patience: rounds in a row without an improvement of more than `min_delta` after which training stops;
        null trains the whole budget (the best checkpoint is still kept).
      every_steps: steps per round; null: the budget over `VALIDATION_ROUNDS` rounds, rounded up to a multiple of
        tpu.iterations_per_loop (`JobConfig.for_data`). Each round rebuilds the graph (a `train()` and an
        `evaluate()` call), so keep rounds coarse.
      min_delta: the decrease in validation loss (its own units: cross entropy, or squared error of the
        standardised label) that counts as an improvement.
    """

    patience: Optional[int] = 3
    every_steps: Optional[int] = None
    min_delta: float = 0.0

    def __post_init__(self) -> None:
        if self.patience is not None:
            positive_int("training.early_stopping", "patience", self.patience)
        if self.every_steps is not None:
            positive_int("training.early_stopping", "every_steps", self.every_steps)
        require(
            isinstance(self.min_delta, (int, float)) and not isinstance(self.min_delta, bool) and self.min_delta >= 0,
            f"training.early_stopping.min_delta={self.min_delta!r} must be a number >= 0, e.g. 0.0",
        )


@dataclasses.dataclass(frozen=True)
class TrainingConfig(JsonConfig):
    """Global batch sizes (TPUEstimator divides them by the replicas), the training budget, seed and checkpoints.

    Attributes:
      train_steps: the step budget; null derives it from the train split's row count (`budget`).
      max_epochs: the budget in passes over the train split when `train_steps` is null; null: it follows the
        data, `EXAMPLES_PER_SQRT_ROW` * sqrt(rows) examples seen (many passes over a small table, fewer over a
        large one). Early stopping usually ends training sooner.
      early_stopping: rounds, validation and patience (see `EarlyStoppingConfig`).
      warm_start_from: a checkpoint prefix, a model directory or a SavedModel directory whose trainable
        variables initialise a fresh model (ignored once the model directory has its own checkpoint).
      deterministic: seed TF, Python and NumPy and enable op determinism (bitwise repeatable on CPU).
    """

    train_batch_size: int = 64
    eval_batch_size: int = 64
    predict_batch_size: int = 64
    train_steps: Optional[int] = None
    max_epochs: Optional[int] = None
    early_stopping: EarlyStoppingConfig = dataclasses.field(default_factory=EarlyStoppingConfig)
    optimizer: OptimizerConfig = dataclasses.field(default_factory=OptimizerConfig)
    seed: int = 42
    save_checkpoints_steps: int = 100
    keep_checkpoint_max: int = 5
    shuffle_buffer_size: int = 10000
    warm_start_from: Optional[str] = None
    deterministic: bool = True

    def __post_init__(self) -> None:
        for name in (
            "train_batch_size",
            "eval_batch_size",
            "predict_batch_size",
            "save_checkpoints_steps",
            "keep_checkpoint_max",
            "shuffle_buffer_size",
        ):
            positive_int("training", name, getattr(self, name))
        for name in ("train_steps", "max_epochs"):
            if getattr(self, name) is not None:
                positive_int("training", name, getattr(self, name))
        require(
            isinstance(self.seed, int) and 0 <= self.seed < 2**31,
            f"training.seed={self.seed!r} must be an integer in [0, 2**31)",
        )
        if isinstance(self.optimizer, Mapping):  # tolerate a dict when built by hand
            object.__setattr__(self, "optimizer", OptimizerConfig.from_dict(self.optimizer, "training.optimizer."))
        if isinstance(self.early_stopping, Mapping):
            object.__setattr__(
                self, "early_stopping", EarlyStoppingConfig.from_dict(self.early_stopping, "training.early_stopping.")
            )

    def budget(self, num_examples: int) -> int:
        """The step budget in whole batches: `train_steps`; else `max_epochs` passes over `num_examples` rows;
        else `EXAMPLES_PER_SQRT_ROW` * sqrt(`num_examples`) examples."""
        if self.train_steps is not None:
            return self.train_steps
        require(
            num_examples > 0,
            "training.train_steps is null, so the budget comes from the train split's row count, which is unknown "
            "or 0; pass the count (prepare's manifest) or set training.train_steps",
        )
        examples = self.max_epochs * num_examples if self.max_epochs else EXAMPLES_PER_SQRT_ROW * num_examples**0.5
        return max(1, math.ceil(examples / self.train_batch_size))


@dataclasses.dataclass(frozen=True)
class ModelConfig(JsonConfig):
    """Which model family builds the logits, and its hyperparameters.

    Attributes:
      family: "linear", "dnn", or a user plug-in "package.module:function" (see `estimator_lib.model.families`).
      features: the schema features the model uses (original names); None uses all of them.
      hidden_units: DNN layer widths.
      embedding_dim: width of each categorical embedding (DNN).
      dropout: DNN dropout rate in training.
      l2: L2 weight regularisation: l2 * sum(w^2) over every kernel and embedding, added to the training loss;
        null: it follows the table's shape, `L2_PER_FEATURE_ROW` * features / rows within [`MIN_L2`, `MAX_L2`]
        (`JobConfig.for_data`, where training knows the data: `estimator.train`): a table wider than it is long
        is regularised more; a training graph built without the data's size takes `MIN_L2`.
      hparams: free-form JSON hyperparameters: a plug-in family's, or a user model_fn's `params` (ints stay ints).
      model_fn: a user's own TPUEstimator model_fn, "package.module:function" (`--model-fn`), instead of a
        family: it reads the records a feature spec describes (`prepare.feature_spec`); the family's fields
        above do not apply to it.
      code: where the user's code is (`--code`): a local folder (put first on the import path), or the staged
        wheel of one (a local or gs:// .whl, `tpu_pipeline_user_code-0+<fingerprint>`); None: installed.
      input_fn: the user's own training input_fn, "package.module:function" (`--input-fn`), called as TPUEstimator
        calls it (`params['batch_size']` per shard); None: the training input is built from the feature spec.
    """

    family: str = "dnn"
    features: Optional[Tuple[str, ...]] = None
    hidden_units: Tuple[int, ...] = (64, 32)
    embedding_dim: int = 8
    dropout: float = 0.0
    l2: Optional[float] = None
    hparams: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    model_fn: Optional[str] = None
    code: Optional[str] = None
    input_fn: Optional[str] = None

    def __post_init__(self) -> None:
        require(
            self.family in BUILTIN_FAMILIES or (":" in self.family and all(self.family.split(":", 1))),
            f"model.family={self.family!r} is unknown; use one of {BUILTIN_FAMILIES} or a plug-in "
            "'package.module:function' that builds logits",
        )
        object.__setattr__(self, "hidden_units", tuple(self.hidden_units))
        if self.features is not None:
            object.__setattr__(self, "features", tuple(self.features))
            require(len(self.features) > 0, "model.features=[] selects no feature; list some or use null for all")
        require(
            all(isinstance(u, int) and u > 0 for u in self.hidden_units),
            f"model.hidden_units={list(self.hidden_units)} must be positive integers, e.g. [64, 32]",
        )
        positive_int("model", "embedding_dim", self.embedding_dim)
        require(0.0 <= self.dropout < 1.0, f"model.dropout={self.dropout!r} must be in [0, 1)")
        require(self.l2 is None or self.l2 >= 0.0, f"model.l2={self.l2!r} must be >= 0, or null (from the data)")
        require(isinstance(self.hparams, Mapping), f"model.hparams must be a JSON object, got {self.hparams!r}")
        self._check_user_model()

    def described(self) -> str:
        """The model as a run's header names it: "your model_fn MODULE:FUNCTION" or "dnn family"."""
        return f"your model_fn {self.model_fn}" if self.model_fn else f"{self.family} family"

    def _check_user_model(self) -> None:
        require(
            self.model_fn is None or _is_reference(self.model_fn),
            f"model.model_fn={self.model_fn!r} must be 'package.module:function', e.g. my_model.model:model_fn",
        )
        require(self.code is None or bool(self.code), "model.code is empty; give your code's folder or null")
        require(
            self.input_fn is None or _is_reference(self.input_fn),
            f"model.input_fn={self.input_fn!r} must be 'package.module:function', e.g. my_model.data:input_fn",
        )
        if self.model_fn is None:
            require(self.code is None, f"model.code={self.code!r} is set without model.model_fn (--model-fn)")
            require(
                self.input_fn is None, f"model.input_fn={self.input_fn!r} is set without model.model_fn (--model-fn)"
            )
            return
        reserved = sorted(set(self.hparams) & set(RESERVED_PARAMS))
        require(
            not reserved,
            f"hyperparameter(s) {reserved}: TPUEstimator sets params['batch_size'] and params['context'] itself; "
            "set the batch sizes with --set training.train_batch_size=... and rename the others",
        )
        changed = [name for name in FAMILY_FIELDS if getattr(self, name) != FAMILY_DEFAULTS[name]]
        require(
            not changed,
            f"model.{changed[0] if changed else ''} is a built-in family's setting, and model.model_fn="
            f"{self.model_fn!r} is your own model, which would ignore it: remove it, or give your model's own "
            "settings with --hparams",
        )


# The built-in families' fields at their defaults: a user model_fn takes none of them (its settings are hparams).
FAMILY_DEFAULTS = {f.name: f.default for f in dataclasses.fields(ModelConfig) if f.name in FAMILY_FIELDS}


def _is_reference(text: Any) -> bool:
    """ "package.module:function"."""
    return isinstance(text, str) and text.count(":") == 1 and all(part.strip() for part in text.split(":"))


def settings_read(job: Mapping[str, Any]) -> dict[str, Any]:
    """A job config's JSON object (`JobConfig.to_dict()`, with or without its nulls) less the settings its model
    does not read (`JobConfig.settings_read`); a copy."""
    data = {section: dict(value) if isinstance(value, Mapping) else value for section, value in job.items()}
    if (data.get("model") or {}).get("model_fn"):
        for name in FAMILY_FIELDS:
            data["model"].pop(name, None)
        for name in USER_UNREAD_TRAINING:
            data.get("training", {}).pop(name, None)
    return data


@dataclasses.dataclass(frozen=True)
class JobConfig(JsonConfig):
    """Everything a training/evaluation/prediction/export run needs, validated across sections."""

    tpu: TPUSettings = dataclasses.field(default_factory=TPUSettings)
    training: TrainingConfig = dataclasses.field(default_factory=TrainingConfig)
    model: ModelConfig = dataclasses.field(default_factory=ModelConfig)

    def __post_init__(self) -> None:
        replicas = self.tpu.num_replicas
        for name in ("train_batch_size", "eval_batch_size", "predict_batch_size"):
            size = getattr(self.training, name)
            require(
                size % replicas == 0,
                f"training.{name}={size} is not divisible by tpu.num_cores={replicas} (the TPU replicas): "
                f"use a multiple of {replicas}, e.g. {max(replicas, size - size % replicas)}",
            )
        ipl = self.tpu.iterations_per_loop
        require(
            self.training.save_checkpoints_steps % ipl == 0,
            f"training.save_checkpoints_steps={self.training.save_checkpoints_steps} is not a multiple of "
            f"tpu.iterations_per_loop={ipl}: checkpoints are only written between TPU loops; use a multiple "
            f"of {ipl}, e.g. {ipl * max(1, round(self.training.save_checkpoints_steps / ipl))}",
        )
        every = self.training.early_stopping.every_steps
        require(
            every is None or every % ipl == 0,
            f"training.early_stopping.every_steps={every} is not a multiple of tpu.iterations_per_loop={ipl}: a "
            f"round ends between TPU loops; use a multiple of {ipl}, e.g. {ipl * max(1, round((every or ipl) / ipl))} "
            f"(or null: the budget over about {VALIDATION_ROUNDS} rounds)",
        )

    def for_data(self, num_examples: int, num_features: int) -> "JobConfig":
        """The job with each setting left null to follow the data set from the train split's row count and the
        model's feature count: the step budget (`TrainingConfig.budget`), the round (the budget over
        `VALIDATION_ROUNDS` rounds, in whole TPU loops) and, for a built-in family, `model.l2`. A setting given
        stays as given; a job already resolved is returned unchanged."""
        training, ipl = self.training, self.tpu.iterations_per_loop
        budget = training.budget(num_examples)
        training, model = dataclasses.replace(training, train_steps=budget), self.model
        if model.model_fn:  # a user's model_fn reads the budget only (no rounds, no l2: `USER_UNREAD_TRAINING`)
            return dataclasses.replace(self, training=training)
        every = training.early_stopping.every_steps or ipl * math.ceil(budget / VALIDATION_ROUNDS / ipl)
        if model.l2 is None:
            l2 = min(MAX_L2, max(MIN_L2, L2_PER_FEATURE_ROW * num_features / num_examples))
            model = dataclasses.replace(model, l2=l2)
        early_stopping = dataclasses.replace(training.early_stopping, every_steps=every)
        training = dataclasses.replace(training, early_stopping=early_stopping)
        return dataclasses.replace(self, training=training, model=model)

    def settings_read(self) -> dict[str, Any]:
        """The job as a JSON object, less the settings its model does not read: a user's model_fn reads none of
        the built-in family's fields (`FAMILY_FIELDS`), nor `USER_UNREAD_TRAINING` (they are refused at their
        defaults' side, so nothing is lost). What a run's summary shows and compares."""
        return settings_read(self.to_dict())

    def with_overrides(self, overrides: Mapping[str, Any]) -> "JobConfig":
        """Returns a copy with dotted keys replaced, e.g. {"training.train_steps": 200}."""
        data = self.to_dict()
        for dotted, value in overrides.items():
            set_dotted(data, dotted, value)
        return JobConfig.from_dict(data)
