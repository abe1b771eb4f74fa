"""What the skew check's tests share: the penguins' schema as the profile code sees it, a tiny model trained
through the real prepare, train and evaluate components with rows a test can skew (`trained_stage`,
`predict_stage`), and a user's records of every kind of feature a test can skew (`user_records`)."""

from __future__ import annotations

import csv
import os
from typing import Any, Sequence

import numpy as np
import tensorflow as tf
from kfp.dsl import HTML, ClassificationMetrics, Dataset, Markdown, Metrics, Model

from components.artifact_types import ModelBlessing
from components.batch_predict import batch_predict
from components.evaluate import evaluate_model
from components.prepare import prepare_data
from components.train import train_model
from estimator_lib.config import BlessingConfig, JobConfig, PrepareConfig
from estimator_lib.config.feature_spec import FeatureSpec as RecordSpec
from estimator_lib.config.stages import EvaluateSpec, PredictSpec, PrepareSpec, TrainSpec
from estimator_lib.schema import CATEGORICAL, NUMERIC, FeatureSpec, LabelSpec, Schema

NUMERICS = ("bill_length_mm", "bill_depth_mm", "flipper_length_mm", "body_mass_g", "year")
CATEGORICALS = ("island", "sex")
PENGUIN_SCHEMA = Schema(
    tuple(FeatureSpec(n, f"f_{n}", NUMERIC) for n in NUMERICS)
    + tuple(FeatureSpec(n, f"f_{n}", CATEGORICAL, value_type="string") for n in CATEGORICALS),
    LabelSpec("species", "classification", classes=("Adelie", "Chinstrap", "Gentoo")),
)
CPU = '{"use_tpu": false}'
JOB = JobConfig().with_overrides(
    {"training.train_steps": 10, "model.family": "linear", "training.train_batch_size": 32, "training.seed": 1}
)


def write_csv(path: str, rows: Sequence[Sequence[Any]]) -> str:
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["x", "colour", "label"])
        writer.writerows(rows)
    return path


def rows(n: int, colours: Sequence[str] = ("red", "blue", "green")) -> list:
    """Row i: x spread over [0, 100) (every row distinct: keys derive from contents), colour i's in turn."""
    return [[(i * 7919) % 1000 / 10, colours[i % len(colours)], "yes" if i % 3 else "no"] for i in range(n)]


def artifact(cls: Any, directory: Any, name: str) -> Any:
    return cls(name=name, uri=os.path.join(str(directory), name, name), metadata={})


def trained_stage(work: Any) -> tuple:
    """A linear model trained 10 steps on 200 rows in `work`, by the prepare and train components, and
    evaluated by the evaluate component: (work, dataset, model, the eval predictions evaluate returned)."""
    data = write_csv(str(work / "data.csv"), rows(200))
    dataset = artifact(Dataset, work, "dataset")
    config = PrepareConfig(data=(data,), label="label", eval_fraction=0.25, num_workers=1)
    prepare_data(
        spec=PrepareSpec(config).to_json(indent=None),
        data_version="v1",
        reference="none",
        dataset=dataset,
        validation=artifact(Markdown, work, "validation"),
    )
    model = artifact(Model, work, "model")
    train_model(
        dataset=dataset,
        spec=TrainSpec(JOB).to_json(indent=None),
        tpu=CPU,
        warm_start="none",
        blessing_metrics="[]",
        publish_root=str(work / "published"),
        model=model,
    )
    eval_predictions = evaluate_model(
        dataset=dataset,
        model=model,
        spec=EvaluateSpec(BlessingConfig(beat_trivial=False, leakage_threshold=None)).to_json(indent=None),
        baseline="none",
        publish_root=str(work / "published"),
        tpu=CPU,
        metrics=artifact(Metrics, work, "metrics"),
        classification_metrics=artifact(ClassificationMetrics, work, "classification_metrics"),
        blessing=artifact(ModelBlessing, work, "blessing"),
        report=artifact(HTML, work, "report"),
        verdict=artifact(Markdown, work, "verdict"),
        slice_metrics=artifact(Metrics, work, "slice_metrics"),
    )
    return work, dataset, model, eval_predictions


def predict_stage(work: Any, dataset: Any, model: Any, eval_predictions: str, name: str, spec: PredictSpec) -> Any:
    """The batch-predict component's predictions artifact `name`, scored by `spec` (its predictions compared with
    `eval_predictions`, the evaluate component's return value)."""
    predictions = artifact(Dataset, work, name)
    spec_json = spec.to_json(indent=None)
    batch_predict(
        dataset=dataset,
        model=model,
        spec=spec_json,
        tpu=CPU,
        eval_predictions=eval_predictions,
        predictions=predictions,
    )
    return predictions


# -- a user's records (a model_fn's feature spec) ----------------------------------------------------------
USER_SPEC_JSON = {
    "x": {"dtype": "float32", "shape": []},
    "count": {"dtype": "int64", "shape": []},
    "colour": {"dtype": "bytes", "shape": []},
    "blob": {"dtype": "bytes", "shape": []},
    "tokens": {"dtype": "int64", "shape": [8], "var_len": True},
    "ids": {"dtype": "int32", "shape": [6]},
    "pixels": {"dtype": "float32", "shape": [2, 2]},
    "id": {"dtype": "bytes", "shape": []},
    "label": {"dtype": "int64", "shape": []},
}
USER_SPEC = RecordSpec.from_json(USER_SPEC_JSON, "label", "id")
COLOURS = ("red", "green", "blue")


def user_example(x, count, colour, blob, tokens, ids, label):
    def ints(values):
        return tf.train.Feature(int64_list=tf.train.Int64List(value=list(values)))

    def text(value):
        return tf.train.Feature(bytes_list=tf.train.BytesList(value=[value]))

    feature = {
        "x": tf.train.Feature(float_list=tf.train.FloatList(value=[x])),
        "count": ints([count]),
        "colour": text(colour.encode()),
        "blob": text(blob),
        "ids": ints(ids),
        "pixels": tf.train.Feature(float_list=tf.train.FloatList(value=[0.0] * 4)),
        "id": text(b"row"),
        "label": ints([label]),
    }
    if tokens:
        feature["tokens"] = ints(tokens)
    return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()


def user_records(path, n, seed, shift=0.0, new_colour=0.0, no_tokens=0.0):
    """`n` records drawn from one distribution; `shift` moves x by that many standard deviations, `new_colour`
    and `no_tokens` are the shares of records with a colour never seen and without tokens."""
    rng = np.random.default_rng(seed)
    with tf.io.TFRecordWriter(path) as writer:
        for _ in range(n):
            colour = "purple" if rng.random() < new_colour else COLOURS[rng.choice(3, p=[0.5, 0.3, 0.2])]
            tokens = [] if rng.random() < no_tokens else list(rng.integers(1, 100, rng.integers(1, 9)))
            real = int(rng.integers(1, 7))
            ids = list(rng.integers(1, 50, real)) + [0] * (6 - real)
            blob = rng.bytes(int(rng.integers(300, 400)))  # a blob, not a category
            x = rng.normal(10.0, 2.0) + 2.0 * shift
            writer.write(user_example(x, int(rng.poisson(4)), colour, blob, tokens, ids, int(rng.integers(0, 2))))
    return path


# A user's model_fn on two scalar features of `USER_SPEC` (the module tabular_model.py of a code folder).
USER_MODEL = '''
import tensorflow as tf

TPUEstimatorSpec = tf.compat.v1.estimator.tpu.TPUEstimatorSpec


def model_fn(features, labels, mode, params):
    """A logistic regression on two scalar features."""
    x = tf.stack([features["x"], tf.cast(features["count"], tf.float32)], axis=1)
    logit = tf.compat.v1.layers.dense(x, 1)[:, 0]
    if mode == tf.estimator.ModeKeys.PREDICT:
        return TPUEstimatorSpec(mode, predictions={"score": tf.sigmoid(logit)})
    labels = tf.cast(tf.reshape(labels, [-1]), tf.float32)
    loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels=labels, logits=logit))
    if mode == tf.estimator.ModeKeys.EVAL:
        metric_fn = lambda value: {"mean_loss": tf.compat.v1.metrics.mean(value)}
        return TPUEstimatorSpec(mode, loss=loss, eval_metrics=(metric_fn, [tf.reshape(loss, [1])]))
    train_op = tf.compat.v1.train.GradientDescentOptimizer(0.01).minimize(loss, tf.compat.v1.train.get_global_step())
    return TPUEstimatorSpec(mode, loss=loss, train_op=train_op)
'''
