"""A local run's summary.json as one frozen, typed value (`RunSummary`), TensorFlow-free.

`from_dict` and `read` check every key and value type; an int field takes a whole float (KFP's metadata numbers
come back as floats). `to_dict` gives the JSON back: a field that defaults to None is left out while None."""

from __future__ import annotations

import dataclasses
import json
import typing
from typing import Any, Optional, Union

from estimator_lib import storage


class SummaryError(ValueError):
    """A file that is not a run's summary: the message names the file and the key that is missing or mistyped."""

    def __init__(self, path: str, reason: str):
        super().__init__(f"{path}: {reason}")
        self.path, self.reason = path, reason


@dataclasses.dataclass(frozen=True)
class RunInfo:
    """`resumed` is set from a run's second attempt; `reused`, `seconds` (per stage) and `ended` when it ends."""

    id: str
    dir: str
    log: str
    started: str
    attempts: int
    resumed: Optional[str] = None
    reused: Optional[list[str]] = None
    seconds: Optional[dict[str, float]] = None
    ended: Optional[str] = None


@dataclasses.dataclass(frozen=True)
class Blessing:
    summary: str
    reasons: list[str]
    candidate_metrics: dict[str, Any]
    baseline_metrics: dict[str, Any]
    baseline_uri: str
    based_on: str


@dataclasses.dataclass(frozen=True)
class Intervals:
    confidence: float
    replicates: int
    seed: int
    metrics: dict[str, dict[str, float]]
    baseline: Optional[dict[str, Any]]
    auc_replicates: Optional[int] = None


@dataclasses.dataclass(frozen=True)
class Importance:
    metric: str
    higher_is_better: bool
    rows: int
    repeats: int
    features: int
    permutation: list[dict[str, Any]]
    attribution_output: str
    attributions: list[dict[str, Any]]
    note: str
    uri: str


@dataclasses.dataclass(frozen=True)
class SliceEntry:
    name: str
    features: list[str]
    rows: int
    metrics: dict[str, float]
    judged: bool
    passed: Optional[bool]


@dataclasses.dataclass(frozen=True)
class Slices:
    metric: str
    min_rows: int
    overall: dict[str, float]
    count: int
    judged: int
    failed: list[str]
    worst: list[SliceEntry]
    uri: str


@dataclasses.dataclass(frozen=True)
class Dataset:
    counts: dict[str, int]
    schema_uri: str
    task: str


@dataclasses.dataclass(frozen=True)
class Data:
    counts: dict[str, int]
    rows: int
    quarantined: int
    quarantine_uri: str
    columns_all_missing: dict[str, list[str]]
    notes: list[str]
    unlabelled: int = 0


@dataclasses.dataclass(frozen=True)
class Validation:
    status: str
    summary: str
    rows: dict[str, int]
    breaches: list[Any]
    breach_count: float  # a KFP metadata number, recorded as it came
    report_uri: str
    details_uri: str
    reference: Optional[str] = None  # absent for a user model's records
    on_breach: Optional[str] = None


@dataclasses.dataclass(frozen=True)
class Preflight:
    """Strict mode's preflight (docs/preflight.md): its TPU type, verdict and verdict line; the record at `uri`."""

    tpu_type: str
    verdict: str
    line: str
    uri: str


@dataclasses.dataclass(frozen=True)
class Strict:
    checks: int
    counts: dict[str, int]
    findings: list[dict[str, Any]]
    uri: str
    preflight: Optional[Preflight] = None


@dataclasses.dataclass(frozen=True)
class Model:
    uri: str
    global_step: int
    trained_steps: int
    budget: int
    stopped: str


@dataclasses.dataclass(frozen=True)
class SkewFeature:
    """One of the skew check's worst features: its figures ({check: value}), the checks beyond their threshold
    and its one-line reading."""

    feature: str
    figures: dict[str, float]
    breaches: list[str]
    reading: str


@dataclasses.dataclass(frozen=True)
class Skew:
    """Batch prediction's skew check (docs/predict_export.md): its verdict, `predict.skew`, one line, the worst
    flagged features (at most five), its skew.json at `uri`, the predictions' reading when they moved against
    the eval rows' (else ""), and the warning a webhook alert carries ("" unless the check warned)."""

    status: str
    mode: str
    summary: str
    worst: list[SkewFeature]
    uri: str
    predictions: str = ""
    warning: str = ""


@dataclasses.dataclass(frozen=True)
class Predictions:
    """`skew`: None when the check wrote no skew.json (`predict.skew=off`)
    or the run predates it."""

    uri: str
    count: int
    data: str
    shards: list[str]
    skew: Optional[Skew] = None


@dataclasses.dataclass(frozen=True)
class Export:
    uri: str
    tag_sets: list[list[str]]
    signatures: dict[str, list[str]]
    published: bool
    published_uri: str
    published_version: str
    reason: str


@dataclasses.dataclass(frozen=True)
class Serving:
    rows_checked: int
    signatures: list[str]
    skipped: dict[str, Any]
    max_abs_diff: dict[str, dict[str, float]]
    rtol: float
    atol: float
    compared: str
    record_uri: str


@dataclasses.dataclass(frozen=True)
class Results:
    """What a run that got to the end produced. `artifacts`: {stage (report, verdict): URI}; `fingerprints`:
    {artifact: fingerprint}; `manifests`: {stage: its manifest's URI} (`components.registry` names them)."""

    metrics: dict[str, float]
    blessed: bool
    blessing: Blessing
    intervals: Optional[Intervals]
    importance: Optional[Importance]
    slices: Optional[Slices]
    artifacts: dict[str, str]
    dataset: Dataset
    data: Data
    tensorboard_logdir: str
    validation: Validation
    strict: Optional[Strict]
    model: Model
    predictions: Predictions
    export: Export
    serving: Serving
    fingerprints: dict[str, str]
    manifests: dict[str, str]


@dataclasses.dataclass(frozen=True)
class RunSummary:
    """A run's summary.json. `results` is None until the run got to the end (a failed or interrupted run's summary
    has none); `report` names the run's report.html: the evaluation report of a run that ended ok, the short
    failure report of one that did not (None while it runs, or when the disk refused that report)."""

    status: str
    stage: Optional[str]
    error: Optional[str]
    run: RunInfo
    config: dict[str, Any]
    arguments: Optional[dict[str, Any]] = None
    results: Optional[Results] = None
    report: Optional[str] = None

    def to_dict(self) -> dict[str, Any]:
        """The JSON of summary.json: the results' keys at its top level."""
        out = _encode(self)
        out.update(out.pop("results", {}))
        return out

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)

    @classmethod
    def from_dict(cls, data: Any, path: str = "summary.json") -> "RunSummary":
        """The summary in `data` (summary.json's JSON). Raises SummaryError naming `path` and the key that is
        missing, unknown or of another type."""
        results = {k: v for k, v in data.items() if k in _RESULT_KEYS} if isinstance(data, dict) else {}
        summary = decode(cls, {k: v for k, v in data.items() if k not in results} if results else data, path)
        return dataclasses.replace(summary, results=decode(Results, results, path)) if results else summary

    @classmethod
    def read(cls, path: str) -> "RunSummary":
        """The summary in the file `path` (local or gs://). Raises FileNotFoundError, or SummaryError: it is
        not JSON, or not a summary."""
        text = storage.read_text(path)
        try:
            data = json.loads(text)
        except ValueError as e:
            raise SummaryError(path, f"not valid JSON: {e}") from None
        return cls.from_dict(data, path)


_RESULT_KEYS = frozenset(f.name for f in dataclasses.fields(Results))
_T = typing.TypeVar("_T")


def decode(kind: type[_T], data: Any, path: str) -> _T:
    """`data` (JSON) as the dataclass `kind`; SummaryError names `path` and the key that is wrong."""
    try:
        return _decode(kind, data, "")
    except ValueError as e:  # what `_decode` found wrong, naming the key
        raise SummaryError(path, str(e)) from None


_JSON_TYPES = {dict: "an object", list: "a list", str: "a string", bool: "true or false", int: "an integer"}


def _decode(kind: Any, value: Any, key: str) -> Any:
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if kind is Any:
        return value
    if origin is Union:  # Optional[X]
        return None if value is None else _decode(args[0], value, key)
    if dataclasses.is_dataclass(kind):
        return _decode_fields(kind, value, key)
    if origin in (dict, list) and isinstance(value, origin):
        if origin is list:
            return [_decode(args[0], item, f"{key}[{i}]") for i, item in enumerate(value)]
        return {name: _decode(args[1], item, _join(key, name)) for name, item in value.items()}
    if kind is int and isinstance(value, float) and value.is_integer():
        return int(value)
    if kind is float and type(value) in (int, float):
        return float(value)
    if kind in (str, bool, int) and type(value) is kind:
        return value
    expected = "a number" if kind is float else _JSON_TYPES[origin or kind]
    found = "null" if value is None else json.dumps(value)[:60]
    raise ValueError(f"{key or 'the file'} is {found}, not {expected}")


def _decode_fields(kind: Any, value: Any, key: str) -> Any:
    if not isinstance(value, dict):
        raise ValueError(f"{key or 'the file'} is not a JSON object" + (" (a run's summary is one)" if not key else ""))
    fields = dataclasses.fields(kind)
    missing = [f.name for f in fields if f.name not in value and f.default is dataclasses.MISSING]
    unknown = sorted(set(value) - {f.name for f in fields})
    if missing or unknown:
        what = f"missing key {_join(key, missing[0])}" if missing else f"unknown key {_join(key, unknown[0])}"
        raise ValueError(what + ("" if key else "; not a run's summary"))
    hints = typing.get_type_hints(kind)
    return kind(**{name: _decode(hints[name], item, _join(key, name)) for name, item in value.items()})


def _join(key: str, name: str) -> str:
    return f"{key}.{name}" if key else name


def _encode(value: Any) -> Any:
    if dataclasses.is_dataclass(value):
        fields = ((f, getattr(value, f.name)) for f in dataclasses.fields(value))
        return {f.name: _encode(item) for f, item in fields if item is not None or f.default is not None}
    if isinstance(value, dict):
        return {name: _encode(item) for name, item in value.items()}
    if isinstance(value, list):
        return [_encode(item) for item in value]
    return value
