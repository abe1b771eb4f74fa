"""Sliced metrics: the eval rows cut by a feature's values (or a cross of features), each slice's rows and metrics,
and the per-slice checks of the blessing (`BlessingConfig.slices`, `slice_thresholds`, `slice_max_gap`).

A row's slice comes from its ORIGINAL value, not from what the model reads: a categorical's value by name (also a
value the vocabulary does not know), a numeric's quantile bucket, with the bucket edges computed on the eval rows
themselves ("bill_length_mm=[32.1, 40.5)", the last bucket closed), and a missing value as a value of its own,
"missing". A cross ("island,sex") cuts by every pair of values that occurs ("island=Dream,sex=male").

A built-in family's slice metrics are `evaluation.metrics.compute_metrics` on the slice's rows: the one definition
of every metric, the same numbers the overall metrics are. A user model's are its own metric_fn's, called once
more per slice in the same eval pass (`model.user.model_fn`), with the slice assignment computed here from a host
read of the same records. Both end in the same table (`slice_table`), judged by the same rules (`findings`).

Runs on the host CPU, in NumPy.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple

import numpy as np
import tensorflow as tf

from estimator_lib.config import BlessingConfig
from estimator_lib.config.blessing import BlessingError
from estimator_lib.evaluation.intervals import bootstrap_intervals
from estimator_lib.evaluation.metrics import Scores, Truth, compute_metrics
from estimator_lib.model.inputs import Patterns, resolve_files
from estimator_lib.schema import KEY_FEATURE, NUMERIC, FeatureSpec, Schema

MISSING = "missing"
MAX_SLICES = 256  # per run: the table, the Metrics artifact and TensorBoard hold one entry per slice and metric
MAX_USER_SLICES = 64  # a user model's metric_fn is called once per slice in the eval graph
SHOWN_SLICES = 10  # the worst slices an artifact's metadata and the run summary keep (slices.json has all)
_READ_BATCH = 4096


# -- which slice each row is in ------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class SliceSet:
    """The eval rows cut by one slice spec.

    Attributes:
      spec: the spec as configured, "island" or "island,sex".
      features: the features it crosses, in the spec's order.
      names: each slice's name, "island=Dream,sex=male", in id order.
      ids: int64 [N]: each row's slice, an index into `names`.
    """

    spec: str
    features: Tuple[str, ...]
    names: Tuple[str, ...]
    ids: np.ndarray

    def rows(self) -> List[int]:
        """Each slice's row count, in `names` order."""
        return np.bincount(self.ids, minlength=len(self.names)).tolist()


def read_original_values(
    schema: Schema, files: Sequence[Patterns], features: Sequence[str], positions: Optional[Sequence[int]] = None
) -> Tuple[List[str], Dict[str, np.ndarray]]:
    """Reads prepared TFRecords' keys and the original values of `features` (original names). Host CPU.

    Returns (keys, {feature: values}): numerics float64 [N] with NaN where missing, categoricals object [N] of
    their canonical text with None where missing (a prepared record omits a missing value). With `positions`,
    only the records at those positions (counted in the files' order) are parsed, kept in the files' order.
    """
    specs = [schema.feature(name) for name in features]
    parse: Dict[str, Any] = {KEY_FEATURE: tf.io.FixedLenFeature([], tf.string, default_value="")}
    for f in specs:
        numeric = f.kind == NUMERIC
        kind, missing = (tf.float32, math.nan) if numeric else (tf.string, "")
        parse[f.key] = tf.io.FixedLenFeature([], kind, default_value=missing)
    paths = [p for pattern in files for p in resolve_files(pattern)]
    keys: List[str] = []
    columns: Dict[str, List[np.ndarray]] = {f.name: [] for f in specs}
    dataset = tf.data.TFRecordDataset(paths)
    if positions is not None:
        wanted = tf.constant(list(positions) or [-1], tf.int64)
        dataset = dataset.enumerate().filter(lambda i, _: tf.reduce_any(tf.equal(i, wanted))).map(lambda _, s: s)
    for batch in dataset.batch(_READ_BATCH):
        parsed = tf.io.parse_example(batch, parse)
        keys.extend(k.decode("utf-8") for k in parsed[KEY_FEATURE].numpy())
        for f in specs:
            columns[f.name].append(parsed[f.key].numpy())
    return keys, {f.name: _original(f, columns[f.name]) for f in specs}


def _original(feature: FeatureSpec, batches: List[np.ndarray]) -> np.ndarray:
    """One feature's parsed batches as one column: float64 (NaN missing) or object text (None missing)."""
    values = np.concatenate(batches) if batches else np.zeros(0)
    if feature.kind == NUMERIC:
        return values.astype(np.float64)
    return np.array([v.decode("utf-8") or None for v in values], dtype=object)


def value_labels(values: np.ndarray, buckets: int) -> np.ndarray:
    """object [N]: each row's slice value. Text values as they are; numbers by the quantile bucket of the
    non-missing `values` they fall in ("[a, b)"; the last bucket "[a, b]"; fewer than `buckets` when values
    repeat); a missing value (None, NaN) "missing"."""
    if values.dtype.kind != "f":
        return np.array([MISSING if v is None else str(v) for v in values], dtype=object)
    present = ~np.isnan(values)
    labels = np.full(len(values), MISSING, dtype=object)
    if not present.any():
        return labels
    edges = np.unique(np.quantile(values[present], np.linspace(0.0, 1.0, buckets + 1)))
    labels[present] = _bucket_names(edges)[np.searchsorted(edges[1:-1], values[present], side="right")]
    return labels


def _bucket_names(edges: np.ndarray) -> np.ndarray:
    """object [max(1, E - 1)]: "[lo, hi)" per pair of sorted distinct edges, the last closed; "[v, v]" for one."""
    if len(edges) == 1:
        return np.array([f"[{edges[0]:.6g}, {edges[0]:.6g}]"], dtype=object)
    last = len(edges) - 2
    pairs = enumerate(zip(edges, edges[1:]))
    return np.array([f"[{lo:.6g}, {hi:.6g}{']' if i == last else ')'}" for i, (lo, hi) in pairs], dtype=object)


def _cross(labels: Mapping[str, np.ndarray], features: Sequence[str]) -> Tuple[List[str], np.ndarray]:
    """(names of the value combinations that occur, sorted by value, feature by feature; each row's index into
    them): one feature at a time, so the ids stay below rows x values."""
    names, ids = [""], np.zeros(len(labels[features[0]]), np.int64)
    for feature in features:
        values, inverse = np.unique(labels[feature].astype(str), return_inverse=True)
        codes, ids = np.unique(ids * len(values) + inverse.reshape(-1), return_inverse=True)
        joined = [(names[c // len(values)], f"{feature}={values[c % len(values)]}") for c in codes]
        names = [f"{head},{part}" if head else part for head, part in joined]
    return names, ids.reshape(-1)


def assign_slices(
    labels: Mapping[str, np.ndarray], specs: Sequence[str], limit: int = MAX_SLICES
) -> Tuple[SliceSet, ...]:
    """The slices of every spec over the rows, from each feature's `value_labels`; the slices that occur only.

    Raises:
      BlessingError: the specs make more than `limit` slices.
    """
    out = []
    for spec in specs:
        features = tuple(spec.split(","))
        names, ids = _cross(labels, features)
        out.append(SliceSet(spec, features, tuple(names), ids.astype(np.int64)))
    total = sum(len(s.names) for s in out)
    if total > limit:
        sizes = {s.spec: len(s.names) for s in out}
        raise BlessingError(
            f"blessing.slices {list(specs)} cut the eval rows into {total} slices {sizes}, more than {limit}: slice by "
            "features of fewer values, cross fewer features, or lower blessing.slice_buckets"
        )
    return tuple(out)


def slices_of_rows(
    schema: Schema, files: Sequence[Patterns], keys: Sequence[str], config: BlessingConfig
) -> Tuple[SliceSet, ...]:
    """The slices of the eval rows `keys` (in that order) that `config.slices` names, from one host read of the
    prepared records `files`."""
    read_keys, values = read_original_values(schema, files, config.slice_features)
    position = {k: i for i, k in enumerate(read_keys)}
    order = np.array([position[k] for k in keys], dtype=np.int64)
    labels = {name: value_labels(column[order], config.slice_buckets) for name, column in values.items()}
    return assign_slices(labels, config.slices)


# -- the table -----------------------------------------------------------------------------------------------
def finite(metrics: Mapping[str, float]) -> Dict[str, float]:
    """The metrics that are finite numbers (on a slice, auc needs both classes, r2 two distinct labels): NaN and
    infinities are left out."""
    return {k: float(v) for k, v in metrics.items() if math.isfinite(float(v))}


def table_metric(config: BlessingConfig, task_metric: str) -> str:
    """The metric the table is sorted by: the first judged one, else the run's comparison metric."""
    return next(iter([*config.slice_thresholds, *config.slice_max_gap]), task_metric)


def _parts(truth: Truth, scores: Scores, sets: Sequence[SliceSet]) -> Iterator[Tuple[SliceSet, str, Truth, Scores]]:
    """(its set, its name, its rows' labels and scores) of every slice."""
    keys = np.array(truth.keys, dtype=object)
    for s in sets:
        for index, name in enumerate(s.names):
            mask = s.ids == index
            probabilities = None if scores.probabilities is None else scores.probabilities[mask]
            yield (
                s,
                name,
                Truth(tuple(keys[mask]), truth.labels[mask], truth.classes),
                Scores(scores.predicted[mask], probabilities),
            )


def slice_metrics(truth: Truth, scores: Scores, sets: Sequence[SliceSet]) -> List[Dict[str, Any]]:
    """[{"name", "features", "rows", "metrics"}] of every slice: `compute_metrics` on its rows."""
    return [
        {
            "name": name,
            "features": list(s.features),
            "rows": len(part.keys),
            "metrics": finite(compute_metrics(part, p)),
        }
        for s, name, part, p in _parts(truth, scores, sets)
    ]


def small_slice_intervals(
    config: BlessingConfig, truth: Truth, scores: Scores, sets: Sequence[SliceSet]
) -> Dict[str, Dict[str, List[float]]]:
    """{slice: {metric: [low, high]}} of every slice of fewer than `min_slice_rows` rows: each headline metric's
    bootstrap interval on its rows (`intervals.bootstrap_intervals`, at `confidence`); an undefined one is left
    out."""
    out = {}
    for _, name, part, p in _parts(truth, scores, sets):
        if len(part.keys) < config.min_slice_rows:
            spans = bootstrap_intervals(config, part, p, compute_metrics(part, p))["metrics"]
            out[name] = {m: [v["low"], v["high"]] for m, v in spans.items() if not math.isnan(v["low"])}
    return out


def slice_table(
    config: BlessingConfig,
    metric: str,
    overall: Mapping[str, float],
    slices: Sequence[Mapping[str, Any]],
    intervals: Optional[Mapping[str, Mapping[str, Sequence[float]]]] = None,
) -> Dict[str, Any]:
    """The `Evaluation.slices` table: {"metric", "min_rows", "overall", "slices": [{"name", "features", "rows",
    "metrics", "judged", "passed"}]} and, when given, "intervals" ({slice: {metric: [low, high]}} of the small
    slices, `small_slice_intervals`), judged slices first, each part worst first by `metric` (a slice without it
    last). A slice of `min_slice_rows` rows or more is judged by its value, a smaller one by its interval when
    that decides every bound or fails one (else it is too small to judge either way: judged False); a judged one
    passed when each of its checks holds (`findings`); passed is None for a slice no check decides."""
    table: Dict[str, Any] = {
        "metric": metric,
        "min_rows": config.min_slice_rows,
        "overall": finite(overall),
        "slices": [{**s, "judged": s["rows"] >= config.min_slice_rows, "passed": None} for s in slices],
        **({"intervals": {k: dict(v) for k, v in intervals.items()}} if intervals is not None else {}),
    }
    found = findings(config, table)
    for entry in table["slices"]:
        verdicts = {f.passed for f in found if f.slice == entry["name"]}
        entry["passed"] = False if False in verdicts else True if verdicts == {True} else None
        entry["judged"] = entry["judged"] or entry["passed"] is not None
    sign = 1.0 if config.higher_is_better(metric) else -1.0

    def order(entry):
        value = entry["metrics"].get(metric)
        return (not entry["judged"], value is None, sign * value if value is not None else 0.0, entry["name"])

    table["slices"].sort(key=order)
    return table


# -- the checks ----------------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Finding:
    """One slice against one bound: `value` of `metric` against `bound`, in the metric's direction; `passed` None
    for a small slice whose interval does not decide it."""

    slice: str
    rows: int
    metric: str
    value: float
    bound: float
    passed: Optional[bool]
    message: str


def _bounds(config: BlessingConfig, overall: Mapping[str, float]) -> List[Tuple[str, float, str]]:
    """(metric, bound, how it was set) of every slice check."""
    out = [(m, float(b), "") for m, b in sorted(config.slice_thresholds.items())]
    for metric, gap in sorted(config.slice_max_gap.items()):
        if metric in overall:
            sign = -1.0 if config.higher_is_better(metric) else 1.0
            why = f" (at most {gap:g} worse than the overall {overall[metric]:.4f}, blessing.slice_max_gap)"
            out.append((metric, overall[metric] + sign * float(gap), why))
    return out


def findings(config: BlessingConfig, table: Mapping[str, Any]) -> List[Finding]:
    """Every slice against every slice bound (`slice_thresholds`, `slice_max_gap` from the overall metric): a
    slice of `min_slice_rows` rows or more by its value, a smaller one by its interval (`_by_interval`); a metric
    a slice does not define (auc of a slice with one class) is not judged on it."""
    out = []
    for metric, bound, why in _bounds(config, table["overall"]):
        higher = config.higher_is_better(metric)
        for entry in table["slices"]:
            value = entry["metrics"].get(metric)
            if value is None:
                continue
            if entry["rows"] < config.min_slice_rows:
                span = table.get("intervals", {}).get(entry["name"], {}).get(metric)
                passed, said = _by_interval(config, span, bound, higher)
                under = f"under blessing.min_slice_rows={config.min_slice_rows}"
                message = f"slice {entry['name']} ({entry['rows']} rows, {under}): {metric}={value:.4f}, {said}{why}"
            else:
                passed = value >= bound if higher else value <= bound
                relation, verdict = (">=" if higher else "<="), ("holds" if passed else "fails")
                message = (
                    f"slice {entry['name']} ({entry['rows']} rows): {metric}={value:.4f} {relation} {bound:.4f} "
                    f"{verdict}{why}"
                )
            out.append(Finding(entry["name"], entry["rows"], metric, value, bound, passed, message))
    return out


def _by_interval(
    config: BlessingConfig, span: Optional[Sequence[float]], bound: float, higher: bool
) -> Tuple[Optional[bool], str]:
    """A small slice's verdict on one bound: failed (or held) when its interval lies wholly on the wrong (or the
    right) side of it, else None: too few rows to judge either way (also without an interval: a user model's)."""
    if span is None:
        return None, f"too few rows to judge against {bound:.4f} either way"
    low, high = span
    interval = f"its {config.confidence:g} interval [{low:.4f}, {high:.4f}]"
    if low <= bound <= high:
        return None, f"{interval} holds {bound:.4f}: too few rows to judge either way"
    side = "over" if low > bound else "under"
    passed = (side == "over") == higher
    return passed, f"{interval} lies wholly {side} {bound:.4f}: {'holds' if passed else 'fails'}"


# -- what is shown -------------------------------------------------------------------------------------------
def shown(table: Mapping[str, Any], uri: str = "", limit: int = SHOWN_SLICES) -> Dict[str, Any]:
    """The table's bounded part (metadata, the run summary): the first `limit` slices (the worst judged), how many
    there are, how many are judged and failed, and where the full table is."""
    entries = list(table["slices"])
    return {
        "metric": table["metric"],
        "min_rows": table["min_rows"],
        "overall": dict(table["overall"]),
        "count": len(entries),
        "judged": sum(1 for e in entries if e["judged"]),
        "failed": [e["name"] for e in entries if e["passed"] is False][:limit],
        "worst": entries[:limit],
        "uri": uri,
    }


def flat_metrics(table: Mapping[str, Any]) -> Dict[str, float]:
    """{"island=Dream/accuracy": value, "island=Dream/rows": rows, ...}: one scalar per slice and metric."""
    out: Dict[str, float] = {}
    for entry in table["slices"]:
        out[f"{entry['name']}/rows"] = float(entry["rows"])
        out.update({f"{entry['name']}/{m}": float(v) for m, v in entry["metrics"].items()})
    return out


def write_summaries(
    directory: str, step: int, metrics: Mapping[str, float], table: Optional[Mapping[str, Any]]
) -> None:
    """The eval metrics by their names (`estimator_lib.vocabulary`) and every slice's metrics and rows as
    "slices/<slice>/<metric>" (when `table` is not None), TensorBoard scalars at `step`, in one event file of
    `directory` (the evaluations' directory, `summaries.EVAL_DIR`)."""
    writer = tf.summary.create_file_writer(directory)
    with writer.as_default():
        for name, value in sorted(metrics.items()):
            tf.summary.scalar(name, value, step=step)
        for tag, value in (flat_metrics(table) if table is not None else {}).items():
            tf.summary.scalar(f"slices/{tag}", value, step=step)
    writer.close()


def optional_table(
    config: BlessingConfig,
    truth: Truth,
    scores: Scores,
    sets: Optional[Sequence[SliceSet]],
    overall: Mapping[str, float],
    task_metric: str,
) -> Optional[Dict[str, Any]]:
    """The built-in families' table of `sets` (None when no slice is configured)."""
    if not sets:
        return None
    bounded = config.slice_thresholds or config.slice_max_gap
    intervals = small_slice_intervals(config, truth, scores, sets) if bounded else None
    metric = table_metric(config, task_metric)
    return slice_table(config, metric, overall, slice_metrics(truth, scores, sets), intervals)
