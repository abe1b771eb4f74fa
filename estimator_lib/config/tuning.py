"""A hyperparameter search space: the settings a tuning run varies, the values each may take, and the objective.

TensorFlow-free, so the CLI checks a space file before anything trains, and the pipeline compiler turns it into a
Vertex AI study spec. The file (YAML or JSON) reads:

    metric: accuracy                  # a name from the metric vocabulary (docs/metrics.md); default "loss"
    direction: maximize               # needed only for a metric of your model_fn's own (not in the vocabulary)
    parameters:
      training.optimizer.learning_rate: {type: float, min: 0.0003, max: 0.03, scale: log}
      model.hidden_units: {type: categorical, values: ["64,32", "32", "128,64"]}
      model.embedding_dim: {type: int, min: 4, max: 16}
      hparams.units: {type: int, min: 16, max: 128}   # a user model_fn's hyperparameter (--hparams units=...)

A parameter's key is a `--set` key of the model or training section (typed and checked as `--set` is, with its
did-you-mean for a key that is not a setting), or "hparams.NAME" for a user model_fn. A trial applies its values
as `--set` texts (`SearchSpace.overrides`), so each value is parsed by its field's declared type in one place.
The objective's direction is the vocabulary's for its names; a user metric_fn's own metric needs `direction`.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import math
from collections.abc import Mapping, Sequence
from typing import Any, Optional, Tuple, Union

import yaml

from estimator_lib import vocabulary
from estimator_lib.config.base import ConfigError, field_hint, parse_typed, set_dotted
from estimator_lib.config.job import USER_UNREAD_TRAINING, JobConfig
from estimator_lib.config.run import JOB_SECTIONS, SECTION_TYPES, typed_override

FLOAT, INT, CATEGORICAL = "float", "int", "categorical"
TYPES = (FLOAT, INT, CATEGORICAL)
LINEAR, LOG = "linear", "log"
SCALES = (LINEAR, LOG)
HPARAMS = "hparams."
DEFAULT_METRIC = "loss"
MAXIMIZE, MINIMIZE = "maximize", "minimize"
DIRECTIONS = (MAXIMIZE, MINIMIZE)
# The sections a trial may vary: a trial reuses one prepared dataset and is judged before any blessing.
TUNABLE_SECTIONS = ("model", "training")
TOP_LEVEL = ("metric", "direction", "parameters")
FIELDS = {FLOAT: ("type", "min", "max", "scale"), INT: ("type", "min", "max", "scale"), CATEGORICAL: ("type", "values")}

Number = Union[int, float]


@dataclasses.dataclass(frozen=True)
class Parameter:
    """One tuned setting.

    Attributes:
      key: a `--set` key ("training.optimizer.learning_rate") or "hparams.NAME" (a user model_fn's).
      type: "float" or "int" (a range from `low` to `high`, both included) or "categorical" (`values`).
      low, high: the range of a float or int parameter.
      scale: "linear" or "log": how a range is searched.
      values: a categorical parameter's values, each as the `--set` text of the value ("64,32", "0.1").
    """

    key: str
    type: str
    low: Optional[Number] = None
    high: Optional[Number] = None
    scale: str = LINEAR
    values: Tuple[str, ...] = ()

    @property
    def hparam(self) -> Optional[str]:
        """The user model_fn hyperparameter's name, or None for a `--set` key."""
        return self.key[len(HPARAMS) :] if self.key.startswith(HPARAMS) else None

    def edges(self) -> Tuple[Any, ...]:
        """The values a trial may take at the edges of the space: both ends of a range, every categorical value."""
        return self.values if self.type == CATEGORICAL else (self.low, self.high)


@dataclasses.dataclass(frozen=True)
class SearchSpace:
    """A search space file, checked: where it came from, the objective metric and its direction ("maximize" or
    "minimize": the file's, else the vocabulary's), the parameters in file order."""

    source: str
    metric: str
    parameters: Tuple[Parameter, ...]
    direction: str

    @property
    def higher_is_better(self) -> bool:
        return self.direction == MAXIMIZE

    @property
    def hparam_keys(self) -> Tuple[str, ...]:
        return tuple(p.key for p in self.parameters if p.hparam is not None)

    def overrides(self, values: Mapping[str, Any], hparams: Mapping[str, Any]) -> list[str]:
        """The `--set` texts of one trial's `values` ({key: value}); "hparams.NAME" values are merged over the
        run's `hparams` into one `model.hparams` object (a `--set` replaces the whole object)."""
        texts = [f"{key}={set_text(value)}" for key, value in values.items() if not key.startswith(HPARAMS)]
        tuned = {key[len(HPARAMS) :]: hparam_value(value) for key, value in values.items() if key.startswith(HPARAMS)}
        if tuned:
            texts.append("model.hparams=" + json.dumps({**hparams, **tuned}, sort_keys=True))
        return texts

    def to_json(self) -> str:
        """The space as the JSON form of its file (`load_space` reads it back): what a Vertex AI trial is given."""
        parameters = {}
        for p in self.parameters:
            if p.type == CATEGORICAL:
                parameters[p.key] = {"type": p.type, "values": list(p.values)}
            else:
                parameters[p.key] = {"type": p.type, "min": p.low, "max": p.high, "scale": p.scale}
        data = {"metric": self.metric, "direction": self.direction, "parameters": parameters}
        return json.dumps(data, separators=(",", ":"))

    def trial_job(self, job: JobConfig, given: Mapping[str, str]) -> JobConfig:
        """`job` with one trial's values applied as their `--set` texts are: `given` maps each parameter's
        `parameter_id` to its value as text (as Vertex AI passes it on the trial's command line).

        Raises:
          ConfigError: a parameter has no value, or its value is not of the setting's type.
        """
        values = {}
        for p in self.parameters:
            text = given.get(parameter_id(p.key))
            if text is None:
                raise ConfigError(f"trial: no value for --{parameter_id(p.key)} ({p.key}); the study passes each")
            values[p.key] = int(float(text)) if p.type == INT else float(text) if p.type == FLOAT else text
        data = job.to_dict()
        for text in self.overrides(values, job.model.hparams):
            _, dotted, value = typed_override(text)
            set_dotted(data, dotted, value)
        return JobConfig.from_dict(data)


def check_tunable(space: SearchSpace, job: JobConfig) -> None:
    """A space whose trials the run can judge. A built-in family: its settings, and a metric of the vocabulary. A
    user model_fn: its hyperparameters ("hparams.NAME") and the training settings it reads, and a metric of its
    metric_fn (checked by name after the first trial: only an evaluation lists them).

    Raises:
      ConfigError: naming the parameter or metric, why the run cannot tune it, and what it can tune.
    """
    where = f"--space {space.source}"
    if job.model.model_fn:
        unread = [p.key for p in space.parameters if p.hparam is None and not _user_reads(p.key)]
        if unread:
            raise ConfigError(
                f"{where}: parameter {unread[0]} is a setting your model_fn ({job.model.model_fn}) does not read: "
                "tune its hyperparameters (hparams.NAME, as --hparams NAME=... gives them) or the training settings "
                "it reads (e.g. training.train_batch_size)"
            )
        if space.metric == DEFAULT_METRIC:
            raise ConfigError(
                f"{where}: metric {DEFAULT_METRIC!r} is a built-in family's validation loss; your model_fn is judged "
                "by its metric_fn: name one of its metrics (metric: accuracy), with its direction when the name is "
                "not in docs/metrics.md (direction: maximize or minimize)"
            )
        return
    if space.hparam_keys:
        raise ConfigError(
            f"{where}: parameter {space.hparam_keys[0]} is a hyperparameter of your own model_fn, and this run "
            "trains a built-in family (no --model-fn): tune its settings, e.g. model.hidden_units"
        )
    if _known_direction(space.metric) is None:
        raise ConfigError(
            f"{where}: metric {space.metric!r} is not in the metric vocabulary (docs/metrics.md), and a built-in "
            "family reports only its names: use one of them (a metric of your own is for your own --model-fn)"
        )


def _user_reads(key: str) -> bool:
    """Whether a run of a user model_fn reads the setting `key` (a `--set` key)."""
    section, _, rest = key.partition(".")
    return section == "training" and rest.partition(".")[0] not in USER_UNREAD_TRAINING


def parameter_id(key: str) -> str:
    """A parameter's id in a Vertex AI study, its trial's flag name: the key with "__" for each "."."""
    return key.replace(".", "__")


def set_text(value: Any) -> str:
    """A value as `--set` text: a text as it is, a number or list as JSON."""
    return value if isinstance(value, str) else json.dumps(value)


def hparam_value(value: Any) -> Any:
    """A categorical hyperparameter's text as JSON when it is JSON (as `--hparams` reads it), else the text."""
    if not isinstance(value, str):
        return value
    try:
        return json.loads(value)
    except json.JSONDecodeError:
        return value


def load_space(path: str, text: str) -> SearchSpace:
    """The search space in `text`, the content of the file `path` (YAML, of which JSON is a part).

    Raises:
      ConfigError: naming the file, the key and what was expected.
    """
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise ConfigError(f"--space {path}: not valid YAML or JSON ({e})") from None
    where = f"--space {path}"
    if not isinstance(data, Mapping):
        raise ConfigError(f"{where}: must hold an object with {list(TOP_LEVEL)}, got {type(data).__name__}")
    _check_names(where, data, TOP_LEVEL, "top-level key")
    metric = data.get("metric", DEFAULT_METRIC)
    direction = _direction(where, metric, data.get("direction"))
    parameters = data.get("parameters")
    if not isinstance(parameters, Mapping) or not parameters:
        raise ConfigError(
            f"{where}: 'parameters' must map each setting to its values, e.g. "
            "{training.optimizer.learning_rate: {type: float, min: 0.0001, max: 0.1, scale: log}}"
        )
    return SearchSpace(
        path,
        metric,
        tuple(_parameter(f"{where}: parameter {key}", key, v) for key, v in parameters.items()),
        direction,
    )


def _check_names(where: str, data: Mapping[str, Any], known: Sequence[str], what: str) -> None:
    for name in data:
        if name not in known:
            close = difflib.get_close_matches(str(name), known, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise ConfigError(f"{where}: unknown {what} {name!r}; expected {list(known)}{hint}")


def _known_direction(metric: str) -> Optional[str]:
    """The vocabulary's direction of `metric` ("maximize" or "minimize"), or None for a name it does not hold."""
    try:
        return MAXIMIZE if vocabulary.describe(metric).better == vocabulary.HIGHER else MINIMIZE
    except KeyError:
        return None


def _direction(where: str, metric: Any, given: Any) -> str:
    """The objective's direction: a vocabulary metric's own (a `given` one must agree), else `given`."""
    if not isinstance(metric, str) or not metric:
        raise ConfigError(f"{where}: metric {metric!r} must name a metric, e.g. accuracy")
    if given is not None and given not in DIRECTIONS:
        raise ConfigError(f"{where}: direction {given!r} is not one of {list(DIRECTIONS)}")
    known = _known_direction(metric)
    if known is not None and given not in (None, known):
        raise ConfigError(
            f"{where}: metric {metric!r} is better {vocabulary.describe(metric).better} (docs/metrics.md), and "
            f"direction says {given}: remove direction (a name of the vocabulary has its own), or rename your metric"
        )
    if known is None and given is None:
        names = [m.name for m in vocabulary.METRICS]
        close = difflib.get_close_matches(metric, names, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise ConfigError(
            f"{where}: metric {metric!r} is not in the metric vocabulary (docs/metrics.md): {names}{hint or '.'} For a "
            "metric of your own model_fn's metric_fn, give its direction: direction: maximize (or minimize)"
        )
    return known or given


def _parameter(where: str, key: Any, spec: Any) -> Parameter:
    if not isinstance(key, str) or not isinstance(spec, Mapping):
        raise ConfigError(f"{where}: expected KEY: {{type: float|int|categorical, ...}}, got {spec!r}")
    kind = spec.get("type")
    if kind not in TYPES:
        raise ConfigError(f"{where}: type {kind!r} is not one of {list(TYPES)}")
    _check_names(where, spec, FIELDS[kind], f"field of {'an' if kind == INT else 'a'} {kind} parameter")
    hint = _setting_type(where, key)
    if kind == CATEGORICAL:
        return Parameter(key, kind, values=_values(where, key, spec.get("values"), hint))
    low, high, scale = spec.get("min"), spec.get("max"), spec.get("scale", LINEAR)
    number = int if kind == INT else (int, float)
    for name, value in (("min", low), ("max", high)):
        if not isinstance(value, number) or isinstance(value, bool) or not math.isfinite(value):
            raise ConfigError(f"{where}: {name}={value!r} must be {'an integer' if kind == INT else 'a number'}")
    if not low < high:
        raise ConfigError(f"{where}: min={low!r} must be below max={high!r}")
    if scale not in SCALES:
        raise ConfigError(f"{where}: scale {scale!r} is not one of {list(SCALES)}")
    if scale == LOG and low <= 0:
        raise ConfigError(f"{where}: scale log needs min > 0, got min={low!r}")
    if hint is not None:
        for value in (low, high):
            _parse(where, hint, set_text(value), key)
    return Parameter(key, kind, low, high, scale)


def _setting_type(where: str, key: str) -> Any:
    """The declared type of the setting `key`, or None for a user model_fn's "hparams.NAME" (any JSON value)."""
    if key.startswith(HPARAMS):
        if not key[len(HPARAMS) :]:
            raise ConfigError(f"{where}: name the hyperparameter, e.g. hparams.units")
        return None
    head = key.partition(".")[0]
    if head in (*JOB_SECTIONS, *SECTION_TYPES) and head not in TUNABLE_SECTIONS:
        raise ConfigError(
            f"{where}: a trial reuses the run's prepared data and is judged before any blessing, so it varies "
            f"{' or '.join(s + '.*' for s in TUNABLE_SECTIONS)} settings (or hparams.* of your model_fn), not {head}.*"
        )
    try:
        if head not in JOB_SECTIONS:
            typed_override(f"{key}=")  # fails on the unknown section, with the did-you-mean of --set
        return field_hint(JobConfig, key)
    except ConfigError as e:
        raise ConfigError(f"{where}: {e}") from None


def _values(where: str, key: str, values: Any, hint: Any) -> Tuple[str, ...]:
    """A categorical parameter's values as `--set` texts, each parsed by the setting's type (`hint`)."""
    if not isinstance(values, list) or not values:
        raise ConfigError(f'{where}: values must be a non-empty list, e.g. ["64,32", "32"]')
    texts = tuple(set_text(v) for v in values)
    if len(set(texts)) != len(texts):
        raise ConfigError(f"{where}: values {values!r} repeat a value; list each once")
    if hint is not None:
        for text in texts:
            _parse(where, hint, text, key)
    return texts


def _parse(where: str, hint: Any, text: str, key: str) -> None:
    try:
        parse_typed(hint, text, key)
    except ConfigError as e:
        raise ConfigError(f"{where}: {e}") from None


def best_trial(trials: Sequence[Mapping[str, Any]], space: SearchSpace) -> Mapping[str, Any]:
    """The best succeeded trial of a Vertex AI tuning job by the space's metric and direction; of equal ones the
    first. `trials` are the job's trials as JSON (`Trial` protos with their field names: "id", "state",
    "parameters" [{"parameter_id", "value"}], "final_measurement" {"metrics": [{"metric_id", "value"}]}).

    Raises:
      ConfigError: no trial succeeded with a measurement of the metric.
    """
    measured = []
    for trial in trials:
        metrics = (trial.get("final_measurement") or {}).get("metrics", [])
        values = [m["value"] for m in metrics if m.get("metric_id") == space.metric]
        if trial.get("state") == "SUCCEEDED" and values:
            measured.append((float(values[0]), trial))
    if not measured:
        raise ConfigError(
            f"no trial of the tuning job succeeded with a measurement of {space.metric!r}; see its trials"
        )
    sign = -1.0 if space.higher_is_better else 1.0
    return min(enumerate(measured), key=lambda item: (sign * item[1][0], item[0]))[1][1]


def trial_values(trial: Mapping[str, Any]) -> dict[str, str]:
    """A Vertex AI trial's values as its command line passes them: {parameter id: value as text}."""
    return {p["parameter_id"]: set_text(p["value"]) for p in trial.get("parameters", [])}
