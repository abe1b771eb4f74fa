"""What the skew check's tests share: the penguins' schema as the profile code sees it, and a tiny model trained
through the real prepare, train and evaluate components with rows a test can skew (`trained_stage`,
`predict_stage`)."""

from __future__ import annotations

import csv
import os
from typing import Any, Sequence

from kfp.dsl import HTML, ClassificationMetrics, Dataset, Markdown, Metrics, Model

from components.artifact_types import ModelBlessing
from components.batch_predict import batch_predict
from components.evaluate import evaluate_model
from components.prepare import prepare_data
from components.train import train_model
from estimator_lib.config import BlessingConfig, JobConfig, PrepareConfig
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
