"""Feature importance on the eval split: permutation importance for every model, integrated gradients where the
model is differentiable in its inputs.

Permutation importance: a seeded sample of the eval rows (`BlessingConfig.importance_rows`, shrunk so that
rows x (1 + features x repeats) stays within `MAX_PREDICTED_ROWS`, and that times the features within
`MAX_PREDICTED_VALUES`: a wide table's copies cost features^2; when fewer than `MIN_ROWS` rows fit, the
permutation is skipped and the record says why), and, for each feature the model reads and
each of `importance_repeats` seeded permutations, the same rows with that feature's values moved across rows.
A prepared row holds one entry per feature (absent when the value is missing), so the whole entry moves: a
missing value travels with its permutation. A feature's importance is how much the blessing's comparison metric
(`BlessingConfig.comparison_for`) loses on the permuted rows, signed so that positive means the model needs the
feature: metric(original) - metric(permuted) for a metric where higher is better, the reverse for rmse or
log_loss. Its mean and std over the repeats are reported, most important first.

  * built-in families: every copy goes into one temporary TFRecord file (each row under a key of its own) and the
    candidate predicts it in ONE pass, by the evaluate stage's own path (`predict.batch_predict` from the
    evaluated checkpoint, on the TPU or the CPU); each copy is scored by `metrics.compute_metrics`, the one
    definition of each metric.
  * a user's model_fn (`engine.user.importance`): every copy goes into one temporary file too, and the user's
    metric_fn scores each copy in ONE evaluation, called once per copy on that copy's rows (the mechanism of a
    user model's slices).

Integrated gradients (host CPU): the model's PREDICT graph built once, from the evaluated checkpoint, on the
first `IG_ROWS` rows of the sample. Each numeric input moves along a straight path from a baseline to the row's
value in `IG_STEPS` midpoint steps; the attribution is (value - baseline) x the mean gradient of the output along
the path, in the output's units, and a feature's figure is the mean |attribution| over the rows. The output is
the predicted class's probability (classification) or the prediction (regression); the baseline is the
training mean (the standardised zero a missing value is imputed with). Categorical ids have no gradient and are
listed as not attributed. A user's model: the float32 features of the spec (baseline: their mean over the
sampled rows) and its `probabilities` prediction (the predicted class's) or its one float prediction; None when
there is no such output or no gradient reaches a feature.
"""

from __future__ import annotations

import dataclasses
import os
import tempfile
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np
import tensorflow as tf

from estimator_lib.config import BlessingConfig, JobConfig
from estimator_lib.evaluation.metrics import Truth, compute_metrics, scores_from_rows
from estimator_lib.model import inputs, transform
from estimator_lib.model.model_fn import build_model_fn
from estimator_lib.predict import batch_predict, read_predictions
from estimator_lib.predict.origins import RecordOrigins
from estimator_lib.schema import CLASSIFICATION, KEY_FEATURE, LABEL_KEY, Schema

MAX_PREDICTED_ROWS = 100_000
MAX_PREDICTED_VALUES = 5_000_000
MIN_ROWS = 10
IG_STEPS = 32
IG_ROWS = 64
_READ_BATCH = 4096
ModeKeys = tf.estimator.ModeKeys
Example = tf.train.Example


# -- the sample and its permuted copies ------------------------------------------------------------------------------
def sample_size(rows: int, count: int, features: int, repeats: int) -> int:
    """Rows to sample: `rows` (the setting), at most the eval rows `count`, and few enough that the original
    and every permuted copy together stay within MAX_PREDICTED_ROWS rows and MAX_PREDICTED_VALUES feature values."""
    copies = 1 + features * repeats
    return min(rows, count, MAX_PREDICTED_ROWS // copies, MAX_PREDICTED_VALUES // (copies * max(features, 1)))


def too_wide(rows: int, count: int, features: int, repeats: int) -> Optional[str]:
    """Why permutation importance is skipped when fewer than MIN_ROWS rows (or every eval row) fit in the budget
    (`sample_size` gave `rows`); None when it runs."""
    if rows >= min(MIN_ROWS, count):
        return None
    return (
        f"{features} features x {repeats} repeats: fewer than {MIN_ROWS} rows fit in {MAX_PREDICTED_VALUES:,} "
        "predicted feature values, so permutation importance was skipped; list fewer features (model.features) "
        "or set blessing.importance_repeats=1"
    )


def sample_records(files: Sequence[str], count: int, rows: int, seed: int, compression: str = "") -> List[Example]:
    """A seeded sample of `rows` of the `count` records of `files` ("GZIP" `compression` or none), in file order
    (host CPU, one read)."""
    chosen = np.zeros(count, dtype=bool)
    chosen[np.random.RandomState(seed).choice(count, size=min(rows, count), replace=False)] = True
    dataset = tf.data.TFRecordDataset(list(files), compression_type=compression)
    out: List[Example] = []
    position = 0
    for batch in dataset.batch(_READ_BATCH).as_numpy_iterator():
        keep = chosen[position : position + len(batch)]
        out.extend(Example.FromString(record) for record in batch[: len(keep)][keep])
        position += len(batch)
    if position != count:
        raise ValueError(f"{list(files)} hold {position} records, not the {count} their manifest counts")
    return out


def with_entry_of(row: Example, donor: Example, key: str) -> Example:
    """`row` with feature `key` as `donor` holds it (absent when the donor lacks it: a missing value)."""
    out = Example()
    out.CopyFrom(row)
    if key in donor.features.feature:
        out.features.feature[key].CopyFrom(donor.features.feature[key])
    elif key in out.features.feature:
        del out.features.feature[key]
    return out


@dataclasses.dataclass(frozen=True)
class Copy:
    """One permuted copy of the sample: `feature` (None: the original rows) permuted by repeat `repeat`."""

    feature: Optional[str]
    repeat: int
    rows: List[Example]


def permuted_copies(rows: Sequence[Example], keys: Sequence[str], repeats: int, seed: int) -> List[Copy]:
    """The original rows, then for each feature key in `keys` and each repeat, the rows with that feature's
    entries permuted across rows by a seeded permutation (the same seed gives the same copies)."""
    rng = np.random.RandomState(seed)
    copies = [Copy(None, 0, list(rows))]
    for key in keys:
        for repeat in range(repeats):
            order = rng.permutation(len(rows))
            copies.append(Copy(key, repeat, [with_entry_of(row, rows[j], key) for row, j in zip(rows, order)]))
    return copies


def copy_key(copy: int, row: int) -> str:
    """The key of row `row` of copy `copy` in the importance file: short, so it travels whole through the model."""
    return f"{copy}:{row}"


def write_copies(path: str, copies: Sequence[Copy], key_feature: Optional[str]) -> int:
    """Writes every copy's rows to one TFRecord file, in copy order; each row re-keyed `copy_key` when the
    records carry a key (`key_feature`). Returns the rows written."""
    written = 0
    with tf.io.TFRecordWriter(path) as writer:
        for c, copy in enumerate(copies):
            for r, row in enumerate(copy.rows):
                if key_feature is not None:
                    keyed = Example()
                    keyed.CopyFrom(row)
                    keyed.features.feature[key_feature].bytes_list.value[:] = [copy_key(c, r).encode("utf-8")]
                    row = keyed
                writer.write(row.SerializeToString())
                written += 1
    return written


def summarize(
    metric: str, higher: bool, rows: int, repeats: int, values: Dict[Tuple[str, int], float], original: float
) -> Dict[str, Any]:
    """The importance record (without attributions): each feature's loss of `metric`, mean and std over repeats,
    most important first. `values`: {(feature, repeat): metric on that permuted copy}."""
    losses: Dict[str, List[float]] = {}
    for (feature, _), value in values.items():
        losses.setdefault(feature, []).append(original - value if higher else value - original)
    permutation = [
        {"feature": name, "importance": float(np.mean(v)), "std": float(np.std(v))} for name, v in losses.items()
    ]
    permutation.sort(key=lambda entry: (-entry["importance"], entry["feature"]))
    return {
        "metric": metric,
        "higher_is_better": higher,
        "rows": rows,
        "repeats": repeats,
        "permutation": permutation,
        "attributions": None,
    }


def skipped(metric: str, config: BlessingConfig, note: str, attributions: Optional[Dict[str, Any]]) -> Dict[str, Any]:
    """The importance record of a table too wide for permutation importance: no ranking, `note` saying why."""
    out = summarize(metric, config.higher_is_better(metric), 0, config.importance_repeats, {}, 0.0)
    return {**out, "attributions": attributions, "note": note}


# -- built-in families -----------------------------------------------------------------------------------------------
def sample_truth(rows: Sequence[Example], schema: Schema) -> Truth:
    """The labels of prepared rows (class index or value in their `label` entry), keyed by position."""
    entries = [row.features.feature[LABEL_KEY] for row in rows]
    keys = tuple(str(r) for r in range(len(rows)))
    if schema.label.task == CLASSIFICATION:
        classes = schema.label.classes
        labels = np.array([classes[e.int64_list.value[0]] for e in entries], dtype=object)
        return Truth(keys, labels, classes)
    return Truth(keys, np.array([e.float_list.value[0] for e in entries], dtype=np.float64))


def score_copies(predicted: Sequence[Dict[str, Any]], truth: Truth, copies: int, metric: str) -> List[float]:
    """`metric` (`metrics.compute_metrics`) of each copy's rows of `predicted` (prediction rows, copy after copy,
    keyed `copy_key`) against the sample's labels `truth`."""
    n, out = len(truth.keys), []
    for c in range(copies):
        keyed = dataclasses.replace(truth, keys=tuple(copy_key(c, r) for r in range(n)))
        scores = scores_from_rows(predicted[c * n : (c + 1) * n], keyed, "importance")
        out.append(compute_metrics(keyed, scores)[metric])
    return out


def builtin_importance(
    job: JobConfig,
    schema: Schema,
    model_dir: str,
    checkpoint: str,
    eval_files: inputs.Patterns,
    count: int,
    config: BlessingConfig,
) -> Optional[Dict[str, Any]]:
    """Permutation importance and integrated gradients of a built-in family's checkpoint on the prepared eval
    rows `eval_files` (`count` records); None when `config.importance_rows` is None. One prediction pass."""
    if config.importance_rows is None:
        return None
    features = schema.select(job.model.features).features
    repeats, seed = config.importance_repeats, job.training.seed
    n = sample_size(config.importance_rows, count, len(features), repeats)
    metric = config.comparison_for(schema.label.task)
    note = too_wide(n, count, len(features), repeats)
    if note:
        sample = sample_records(inputs.resolve_files(eval_files), count, min(IG_ROWS, count), seed)
        return skipped(metric, config, note, builtin_attributions(job, schema, checkpoint, sample))
    sample = sample_records(inputs.resolve_files(eval_files), count, n, seed)
    copies = permuted_copies(sample, [f.key for f in features], repeats, seed)
    with tempfile.TemporaryDirectory(prefix="importance-") as work:
        path, output = os.path.join(work, "copies.tfrecord"), os.path.join(work, "predictions")
        total = write_copies(path, copies, KEY_FEATURE)
        origins = RecordOrigins([path], [total])  # one file of `total` records: no pass counts them
        batch_predict(
            job, schema, model_dir, path, output, num_examples=total, checkpoint_path=checkpoint, origins=origins
        )
        scored = score_copies(read_predictions(output), sample_truth(sample, schema), len(copies), metric)
    names = {f.key: f.name for f in features}
    values = {(names[copy.feature], copy.repeat): v for copy, v in zip(copies[1:], scored[1:])}
    out = summarize(metric, config.higher_is_better(metric), n, repeats, values, scored[0])
    out["attributions"] = builtin_attributions(job, schema, checkpoint, sample[:IG_ROWS])
    return out


def path_points(real: tf.Tensor, baseline: tf.Tensor, steps: int) -> tf.Tensor:
    """[steps * n, ...]: the midpoints of `steps` equal steps from `baseline` to `real` ([n, ...] each), step by
    step (row s * n + i is step s of row i)."""
    alphas = (np.arange(steps, dtype=np.float32) + 0.5) / steps
    shape = [steps] + [1] * real.shape.rank
    points = baseline[None] + tf.reshape(alphas, shape) * (real - baseline)[None]
    return tf.reshape(points, tf.concat([[-1], tf.shape(real)[1:]], axis=0))


def integrate(gradients: np.ndarray, real: np.ndarray, baseline: np.ndarray, steps: int) -> np.ndarray:
    """float [n]: each row's attribution, (real - baseline) x the mean gradient along the path, summed over the
    feature's elements. gradients [steps * n, ...]; real [n, ...]; baseline [n, ...]."""
    mean = gradients.reshape((steps,) + real.shape).mean(axis=0)
    return (mean * (real - baseline)).reshape(len(real), -1).sum(axis=1)


def _target(predictions: Any, steps: int) -> Tuple[Optional[tf.Tensor], str]:
    """(the summed output the path rows are attributed, its description), from predictions of [path rows; real
    rows]: the probability of the class predicted for the real row, or the one float prediction."""
    if not isinstance(predictions, dict):
        predictions = {"predictions": predictions}
    if "probabilities" in predictions:
        probabilities = predictions["probabilities"]
        n = tf.shape(probabilities)[0] // (steps + 1)
        chosen = tf.stop_gradient(tf.argmax(probabilities[steps * n :], axis=1, output_type=tf.int32))
        picked = tf.gather(probabilities[: steps * n], tf.tile(chosen, [steps]), axis=1, batch_dims=1)
        return tf.reduce_sum(picked), "probability of the predicted class"
    floats = [(k, v) for k, v in sorted(predictions.items()) if v.dtype.is_floating]
    if len(floats) != 1 or floats[0][1].shape.rank not in (1, 2) or floats[0][1].shape[1:].num_elements() != 1:
        return None, ""
    name, value = floats[0]
    n = tf.shape(value)[0] // (steps + 1)
    return tf.reduce_sum(value[: steps * n]), "prediction" if name == "predictions" else name


def attribute(
    build: Callable[[Dict[str, tf.Tensor]], Any],
    real: Dict[str, tf.Tensor],
    attributed: Dict[str, tf.Tensor],
    checkpoint: str,
    steps: int,
) -> Optional[Tuple[str, Dict[str, float]]]:
    """Runs integrated gradients in the current graph: `build(features)` gives the model's predictions for the
    features [path rows; real rows]; `attributed` {key: baseline [n, ...]} are the inputs moved along the path, the
    others repeated. Returns (the output's description, {key: mean |attribution|}) or None (no output, no gradient)."""
    paths = {k: path_points(real[k], b, steps) for k, b in attributed.items()}
    features = {}
    for key, value in real.items():
        moved = paths[key] if key in paths else tf.tile(value, [steps] + [1] * (value.shape.rank - 1))
        features[key] = tf.concat([moved, value], axis=0)
    target, output = _target(build(features), steps)
    if target is None:
        return None
    keys = sorted(paths)
    try:
        gradients = tf.gradients(target, [paths[k] for k in keys])
    except LookupError:  # an op on the path has no gradient function: the model is not differentiable there
        return None
    found = [(k, g) for k, g in zip(keys, gradients) if g is not None]
    if not found:
        return None
    saver = tf.compat.v1.train.Saver(tf.compat.v1.global_variables())
    with tf.compat.v1.Session() as session:
        saver.restore(session, checkpoint)
        session.run(tf.compat.v1.tables_initializer())
        values = session.run({"g": dict(found), "x": {k: real[k] for k, _ in found}, "b": dict(attributed)})
    figures = {k: integrate(values["g"][k], values["x"][k], values["b"][k], steps) for k, _ in found}
    return output, {k: float(np.mean(np.abs(v))) for k, v in figures.items()}


def attribution_record(
    output: str, figures: Dict[str, float], names: Dict[str, str], baseline: str, rows: int, left_out: List[str]
) -> Dict[str, Any]:
    """The attributions record: each attributed feature's mean |attribution|, largest first."""
    features = [{"feature": names[k], "attribution": v} for k, v in figures.items()]
    features.sort(key=lambda entry: (-entry["attribution"], entry["feature"]))
    return {
        "method": "integrated_gradients",
        "output": output,
        "steps": IG_STEPS,
        "baseline": baseline,
        "rows": rows,
        "features": features,
        "not_attributed": sorted(left_out),
    }


def builtin_attributions(
    job: JobConfig, schema: Schema, checkpoint: str, rows: Sequence[Example]
) -> Optional[Dict[str, Any]]:
    """Integrated gradients of a built-in family's numeric inputs on `rows` (host CPU, one graph, one run);
    None when the model reads no numeric feature or no gradient reaches one."""
    model_schema = schema.select(job.model.features)
    if not model_schema.numeric or not rows:
        return None
    model_fn = build_model_fn(schema, job)
    params = {"use_tpu": False, "batch_size": len(rows) * (IG_STEPS + 1)}
    with tf.Graph().as_default():
        tf.compat.v1.set_random_seed(0)  # initializers are built, then overwritten by the checkpoint
        serialized = tf.constant([row.SerializeToString() for row in rows])
        real = transform.to_model_features(tf.io.parse_example(serialized, transform.parse_spec(schema, False)), schema)
        baselines = {f.key: tf.fill([len(rows)], tf.constant(f.mean, tf.float32)) for f in model_schema.numeric}
        found = attribute(
            lambda features: model_fn(features, None, ModeKeys.PREDICT, params, None).predictions,
            real,
            baselines,
            checkpoint,
            IG_STEPS,
        )
    if found is None:
        return None
    names = {f.key: f.name for f in model_schema.features}
    left_out = [names[k] for k in names if k not in found[1]]
    return attribution_record(*found, names, "the training mean of each numeric feature", len(rows), left_out)
