"""Feature importance of a user's model_fn, by its own metric_fn (`evaluation.importance` has the method).

Permutation importance: a seeded sample of the eval records, and, for each feature of the feature spec and each
repeat, the same records with that feature's entries permuted across them, all written to one temporary file. ONE
evaluation scores every copy: the copies are the slices of that evaluation (`run.evaluate(slices=...)`), so the
user's metric_fn runs once per copy on that copy's rows, in the eval graph, and its `blessing.comparison_metric`
on a permuted copy against the original copy is the feature's importance. A metric_fn is called once per slice
in the graph, so at most `slices.MAX_USER_SLICES` copies fit one evaluation: repeats are cut to fit, and a spec
with more features than that is not ranked (the record says why).

Integrated gradients: the float32 features of the spec (fixed length, not decoded), from their mean over the
sampled rows, of the model's `probabilities` prediction (the predicted class's) or its one float prediction;
None when there is no such output or no gradient reaches a feature.
"""

from __future__ import annotations

import os
import tempfile
from typing import Any, Dict, List, Optional, Sequence

import numpy as np
import tensorflow as tf

from estimator_lib.config import BlessingConfig, BlessingError, JobConfig
from estimator_lib.engine.user import run
from estimator_lib.evaluation import importance as method
from estimator_lib.evaluation.slices import MAX_USER_SLICES, SliceSet
from estimator_lib.model import inputs
from estimator_lib.model.user import records

ModeKeys = tf.estimator.ModeKeys


def user_importance(
    job: JobConfig,
    user: run.UserModel,
    eval_files: inputs.Patterns,
    checkpoint: str,
    count: int,
    config: BlessingConfig,
) -> Optional[Dict[str, Any]]:
    """Permutation importance of a user's model on its eval records by its metric_fn's
    `config.comparison_metric`, and integrated gradients of its float32 features where they have a gradient;
    None when `config.importance_rows` is None."""
    if config.importance_rows is None:
        return None
    features = [f.name for f in user.spec.inputs]
    seed, metric = job.training.seed, config.comparison_metric
    repeats = min(config.importance_repeats, max(1, (MAX_USER_SLICES - 1) // max(len(features), 1)))
    files = inputs.resolve_files(eval_files)
    compression = records.compression(files)
    n = method.sample_size(config.importance_rows, count, len(features), repeats)
    note = method.too_wide(n, count, len(features), repeats) or _too_many_copies(len(features))
    if note:
        sample = method.sample_records(files, count, min(method.IG_ROWS, count), seed, compression)
        return method.skipped(metric, config, note, user_attributions(user, checkpoint, sample))
    sample = method.sample_records(files, count, n, seed, compression)
    copies = method.permuted_copies(sample, features, repeats, seed)
    scored = _score_copies(job, user, checkpoint, copies, metric)
    values = {(copy.feature, copy.repeat): v for copy, v in zip(copies[1:], scored[1:])}
    out = method.summarize(metric, config.higher_is_better(metric), n, repeats, values, scored[0])
    if repeats < config.importance_repeats:
        out["note"] = (
            f"{repeats} repeat(s) per feature, not blessing.importance_repeats={config.importance_repeats}: one "
            f"evaluation scores at most {MAX_USER_SLICES} copies of the sample"
        )
    out["attributions"] = user_attributions(user, checkpoint, sample[: method.IG_ROWS])
    return out


def _too_many_copies(features: int) -> Optional[str]:
    if 1 + features <= MAX_USER_SLICES:
        return None
    return (
        f"{features} features: one evaluation scores at most {MAX_USER_SLICES} copies of the sample (the original "
        "and one permuted copy per feature), so permutation importance was skipped"
    )


def _score_copies(
    job: JobConfig, user: run.UserModel, checkpoint: str, copies: Sequence[method.Copy], metric: str
) -> List[float]:
    """`metric` of the user's metric_fn on each copy's rows, from one evaluation of the copies in one file."""
    n = len(copies[0].rows)
    names = tuple(f"copy-{c}" for c in range(len(copies)))
    groups = SliceSet("importance copies", (), names, np.repeat(np.arange(len(copies), dtype=np.int64), n))
    with tempfile.TemporaryDirectory(prefix="importance-") as work:
        path = os.path.join(work, "copies.tfrecord")
        method.write_copies(path, copies, None)
        result = run.evaluate(
            job,
            user,
            path,
            os.path.join(work, "model"),
            num_examples=len(copies) * n,
            checkpoint_path=checkpoint,
            slices=(groups,),
        )
    overall, entries = run.split_slice_metrics(result.metrics, (groups,))
    if metric not in overall:
        raise BlessingError(
            f"blessing.comparison_metric={metric!r} is not a metric of your metric_fn (it reports "
            f"{sorted(overall)}); name one of them"
        )
    return [float(entry["metrics"].get(metric, float("nan"))) for entry in entries]


def user_attributions(
    user: run.UserModel, checkpoint: str, rows: Sequence[tf.train.Example]
) -> Optional[Dict[str, Any]]:
    """Integrated gradients of a user model's float32 features (fixed length, not decoded) on `rows`, from
    the sampled rows' mean; None when it has none, or its predictions hold no attributable output or no gradient
    reaches them."""
    spec = user.spec
    floats = [f for f in spec.inputs if f.dtype == "float32" and not f.var_len and not f.decode]
    if not floats or not rows:
        return None
    model_fn = user.load()
    params = {**dict(user.hparams), "use_tpu": False, "batch_size": len(rows) * (method.IG_STEPS + 1)}
    with tf.Graph().as_default():
        tf.compat.v1.set_random_seed(0)  # initializers are built, then overwritten by the checkpoint
        serialized = tf.constant([row.SerializeToString() for row in rows])
        real = records.parse_batch(serialized, spec, with_label=False)
        means = {f.name: tf.zeros_like(real[f.name]) + tf.reduce_mean(real[f.name], axis=0) for f in floats}
        run_config = tf.compat.v1.estimator.tpu.RunConfig()  # TPUEstimator always passes one
        found = method.attribute(
            lambda features: model_fn(features, None, ModeKeys.PREDICT, params, run_config).predictions,
            real,
            means,
            checkpoint,
            method.IG_STEPS,
        )
    if found is None:
        return None
    names = {f.name: f.name for f in spec.inputs}
    left_out = [name for name in names if name not in found[1]]
    return method.attribution_record(*found, names, "the sampled rows' mean of each float feature", len(rows), left_out)
