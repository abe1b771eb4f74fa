"""Typed, frozen, JSON round-trippable configuration.

One dataclass per concern (`TPUSettings`, `OptimizerConfig`, `TrainingConfig`, `ModelConfig`) and `JobConfig`
that holds them and checks the rules that span several of them (a global batch size must divide evenly over
the TPU replicas; the checkpoint cadence must be a multiple of `iterations_per_loop`).

Every config validates itself on construction and raises `ConfigError` naming the field, the value, what is
wrong and how to fix it. Variants are made with `dataclasses.replace` or `JobConfig.with_overrides`.
"""

from __future__ import annotations

import dataclasses
import json
import typing
from typing import Any, Dict, Mapping, Optional, Tuple

PER_HOST_V2 = "PER_HOST_V2"
INPUT_PIPELINE_MODES = ("PER_HOST_V1", PER_HOST_V2, "BROADCAST", "SLICED")
OPTIMIZERS = ("sgd", "momentum", "adam", "adagrad", "rmsprop")
SCHEDULES = ("constant", "exponential_decay", "cosine_decay", "linear_decay")
BUILTIN_FAMILIES = ("linear", "dnn")
TASKS = ("classification", "regression")


class ConfigError(ValueError):
    """A configuration value is invalid; the message names the field and the fix."""


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise ConfigError(message)


def _positive_int(owner: str, name: str, value: Any) -> None:
    _require(
        isinstance(value, int) and not isinstance(value, bool) and value > 0,
        f"{owner}.{name}={value!r} must be a positive integer",
    )


class _JsonMixin:
    """JSON round trip for frozen dataclasses whose fields are plain values or nested configs."""

    def to_dict(self) -> Dict[str, Any]:
        out: Dict[str, Any] = {}
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            value = getattr(self, f.name)
            if isinstance(value, _JsonMixin):
                value = value.to_dict()
            elif isinstance(value, tuple):
                value = list(value)
            elif isinstance(value, Mapping):
                value = dict(value)
            out[f.name] = value
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]):
        if not isinstance(data, Mapping):
            raise ConfigError(f"{cls.__name__} expects a JSON object, got {type(data).__name__}")
        hints = typing.get_type_hints(cls)
        known = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
        unknown = sorted(set(data) - known)
        _require(not unknown, f"unknown field(s) {unknown} in {cls.__name__}; known fields: {sorted(known)}")
        kwargs = {}
        for name, value in data.items():
            hint = hints[name]
            if isinstance(hint, type) and issubclass(hint, _JsonMixin):
                value = hint.from_dict(value)
            elif typing.get_origin(hint) is tuple or (
                typing.get_origin(hint) is typing.Union
                and any(typing.get_origin(a) is tuple for a in typing.get_args(hint))
            ):
                value = tuple(value) if isinstance(value, list) else value
            kwargs[name] = value
        return cls(**kwargs)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)

    @classmethod
    def from_json(cls, text: str):
        return cls.from_dict(json.loads(text))


@dataclasses.dataclass(frozen=True)
class TPUSettings(_JsonMixin):
    """Where the model runs.

    Attributes:
      use_tpu: False runs the same TPUEstimator on CPU/GPU (tests, local pipelines).
      tpu_name: Cloud TPU name, or "local" on a Cloud TPU VM (Vertex AI TPU machines). Required with use_tpu.
      zone, project: for a named (non-local) TPU; None lets the resolver read them from the metadata server.
      num_cores: TPU cores (replicas) in the slice, e.g. 8 for v2-8/v3-8, 4 for v5litepod-4.
      iterations_per_loop: training steps run on the TPU per host round trip.
      per_host_input: TPU input pipeline deployment; PER_HOST_V2 gives input_fn the per-replica batch.
      eval_on_tpu: run evaluation on the TPU too (needs fixed steps and padded batches, which we provide).
      strict: before running, build the graphs the TPU would run and reject what a TPU would refuse
        (`estimator_lib.strict`). On in tests and local pipeline runs; costs a few seconds.
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

    def __post_init__(self) -> None:
        _positive_int("tpu", "num_cores", self.num_cores)
        _positive_int("tpu", "iterations_per_loop", self.iterations_per_loop)
        _require(
            self.per_host_input in INPUT_PIPELINE_MODES,
            f"tpu.per_host_input={self.per_host_input!r} is not one of {INPUT_PIPELINE_MODES}; use {PER_HOST_V2!r}",
        )
        _require(
            not self.use_tpu or bool(self.tpu_name),
            "tpu.tpu_name is required when tpu.use_tpu=True; use 'local' on a Cloud TPU VM (Vertex AI) "
            "or the name of your Cloud TPU node",
        )

    @property
    def num_replicas(self) -> int:
        """Replicas that split a global batch: the TPU cores, or 1 on CPU."""
        return self.num_cores if self.use_tpu else 1


@dataclasses.dataclass(frozen=True)
class OptimizerConfig(_JsonMixin):
    """Optimizer and learning-rate schedule.

    `decay_steps` defaults (None) to the training steps; `warmup_steps` ramps linearly from 0.
    """

    name: str = "adam"
    learning_rate: float = 0.01
    schedule: str = "constant"
    decay_steps: Optional[int] = None
    decay_rate: float = 0.5
    end_learning_rate: float = 0.0
    warmup_steps: int = 0
    momentum: float = 0.9
    clip_gradient_norm: Optional[float] = None

    def __post_init__(self) -> None:
        _require(self.name in OPTIMIZERS, f"optimizer.name={self.name!r} is unknown; use one of {OPTIMIZERS}")
        _require(self.schedule in SCHEDULES, f"optimizer.schedule={self.schedule!r} is unknown; use one of {SCHEDULES}")
        _require(
            isinstance(self.learning_rate, (int, float)) and self.learning_rate > 0,
            f"optimizer.learning_rate={self.learning_rate!r} must be a number > 0, e.g. 0.01",
        )
        if self.decay_steps is not None:
            _positive_int("optimizer", "decay_steps", self.decay_steps)
        _require(
            isinstance(self.warmup_steps, int) and self.warmup_steps >= 0,
            f"optimizer.warmup_steps={self.warmup_steps!r} must be an integer >= 0",
        )
        _require(
            self.clip_gradient_norm is None or self.clip_gradient_norm > 0,
            f"optimizer.clip_gradient_norm={self.clip_gradient_norm!r} must be > 0 or null (no clipping)",
        )


@dataclasses.dataclass(frozen=True)
class TrainingConfig(_JsonMixin):
    """Global batch sizes (TPUEstimator divides them by the replicas), steps, seed and checkpointing.

    Attributes:
      warm_start_from: a checkpoint prefix, a model directory or a SavedModel directory whose trainable
        variables initialise a fresh model (ignored once the model directory has its own checkpoint).
      deterministic: seed TF, Python and NumPy and enable op determinism (bitwise repeatable on CPU).
    """

    train_batch_size: int = 64
    eval_batch_size: int = 64
    predict_batch_size: int = 64
    train_steps: int = 1000
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
            "train_steps",
            "save_checkpoints_steps",
            "keep_checkpoint_max",
            "shuffle_buffer_size",
        ):
            _positive_int("training", name, getattr(self, name))
        _require(
            isinstance(self.seed, int) and 0 <= self.seed < 2**31,
            f"training.seed={self.seed!r} must be an integer in [0, 2**31)",
        )
        if isinstance(self.optimizer, Mapping):  # tolerate a dict when built by hand
            object.__setattr__(self, "optimizer", OptimizerConfig.from_dict(self.optimizer))


@dataclasses.dataclass(frozen=True)
class ModelConfig(_JsonMixin):
    """Which model family builds the logits, and its hyperparameters.

    Attributes:
      family: "linear", "dnn", or a user plug-in "package.module:function" (see `estimator_lib.models`).
      features: the schema features the model uses (original names); None uses all of them.
      hidden_units: DNN layer widths.
      embedding_dim: width of each categorical embedding (DNN).
      dropout: DNN dropout rate in training.
      l2: L2 weight regularisation.
      hparams: free-form JSON hyperparameters passed to a plug-in family.
    """

    family: str = "dnn"
    features: Optional[Tuple[str, ...]] = None
    hidden_units: Tuple[int, ...] = (64, 32)
    embedding_dim: int = 8
    dropout: float = 0.0
    l2: float = 0.0
    hparams: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        _require(
            self.family in BUILTIN_FAMILIES or (":" in self.family and all(self.family.split(":", 1))),
            f"model.family={self.family!r} is unknown; use one of {BUILTIN_FAMILIES} or a plug-in "
            "'package.module:function' that builds logits",
        )
        object.__setattr__(self, "hidden_units", tuple(self.hidden_units))
        if self.features is not None:
            object.__setattr__(self, "features", tuple(self.features))
            _require(len(self.features) > 0, "model.features=[] selects no feature; list some or use null for all")
        _require(
            all(isinstance(u, int) and u > 0 for u in self.hidden_units),
            f"model.hidden_units={list(self.hidden_units)} must be positive integers, e.g. [64, 32]",
        )
        _positive_int("model", "embedding_dim", self.embedding_dim)
        _require(0.0 <= self.dropout < 1.0, f"model.dropout={self.dropout!r} must be in [0, 1)")
        _require(self.l2 >= 0.0, f"model.l2={self.l2!r} must be >= 0")
        _require(isinstance(self.hparams, Mapping), f"model.hparams must be a JSON object, got {self.hparams!r}")


@dataclasses.dataclass(frozen=True)
class JobConfig(_JsonMixin):
    """Everything a training/evaluation/prediction/export run needs, validated across sections."""

    tpu: TPUSettings = dataclasses.field(default_factory=TPUSettings)
    training: TrainingConfig = dataclasses.field(default_factory=TrainingConfig)
    model: ModelConfig = dataclasses.field(default_factory=ModelConfig)

    def __post_init__(self) -> None:
        replicas = self.tpu.num_replicas
        for name in ("train_batch_size", "eval_batch_size", "predict_batch_size"):
            size = getattr(self.training, name)
            _require(
                size % replicas == 0,
                f"training.{name}={size} is not divisible by tpu.num_cores={replicas} (the TPU replicas): "
                f"use a multiple of {replicas}, e.g. {max(replicas, size - size % replicas)}",
            )
        ipl = self.tpu.iterations_per_loop
        _require(
            self.training.save_checkpoints_steps % ipl == 0,
            f"training.save_checkpoints_steps={self.training.save_checkpoints_steps} is not a multiple of "
            f"tpu.iterations_per_loop={ipl}: checkpoints are only written between TPU loops; use a multiple "
            f"of {ipl}, e.g. {ipl * max(1, round(self.training.save_checkpoints_steps / ipl))}",
        )

    def with_overrides(self, overrides: Mapping[str, Any]) -> "JobConfig":
        """Returns a copy with dotted keys replaced, e.g. {"training.train_steps": 200}."""
        data = self.to_dict()
        for dotted, value in overrides.items():
            set_dotted(data, dotted, value)
        return JobConfig.from_dict(data)


def set_dotted(data: Dict[str, Any], dotted: str, value: Any, *, create: bool = False) -> None:
    """Sets `data["a"]["b"] = value` for `dotted` "a.b", in place: the one way every `--set`, pipeline
    hyperparameter and stage placement reaches a config dict.

    With create=False (for a complete `to_dict()`) each section and the field must exist already, so a typo
    fails here, naming what is known. With create=True missing sections are made, for a partial dict that
    `from_dict` checks afterwards. A part that exists but is not a section fails either way.
    """
    node = data
    parts = dotted.split(".")
    _require(all(parts), f"--set {dotted}: empty part in the key; write it as section.field")
    for part in parts[:-1]:
        if create and part not in node:
            node[part] = {}
        _require(
            isinstance(node.get(part), dict),
            f"--set {dotted}: {part!r} is not a config section; sections here: {sorted(node)}",
        )
        node = node[part]
    _require(create or parts[-1] in node, f"--set {dotted}: unknown field {parts[-1]!r}; known here: {sorted(node)}")
    node[parts[-1]] = value


def parse_override(text: str) -> Tuple[str, Any]:
    """Parses "KEY=VALUE" where VALUE is JSON when it parses as JSON, else a plain string."""
    key, sep, raw = text.partition("=")
    _require(bool(sep) and bool(key), f"--set {text!r} must look like section.field=value")
    try:
        value = json.loads(raw)
    except json.JSONDecodeError:
        value = raw
    return key.strip(), value
