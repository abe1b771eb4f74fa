"""The batch-predict stage's skew check (`predict.skew`), through its component function on tiny real data:
skew.json beside the predictions and its verdict in their metadata; "block" publishes nothing; "off" writes no
skew.json."""

from __future__ import annotations

import csv
import json
import os

import pytest
from kfp.dsl import Dataset, Markdown, Model

from components.batch_predict import batch_predict
from components.prepare import prepare_data
from components.train import train_model
from estimator_lib.config import JobConfig, PrepareConfig
from estimator_lib.config.skew import SkewConfig
from estimator_lib.config.stages import PredictSpec, PrepareSpec, TrainSpec
from estimator_lib.predict.skew import SkewError

CPU = '{"use_tpu": false}'
JOB = JobConfig().with_overrides(
    {"training.train_steps": 10, "model.family": "linear", "training.train_batch_size": 32, "training.seed": 1}
)


def _write(path: str, rows) -> str:
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["x", "colour", "label"])
        writer.writerows(rows)
    return path


def _rows(n: int, colours=("red", "blue", "green")):
    """Row i: x spread over [0, 100) (every row distinct: keys derive from contents), colour i's in turn."""
    return [[(i * 7919) % 1000 / 10, colours[i % len(colours)], "yes" if i % 3 else "no"] for i in range(n)]


def _artifact(cls, directory, name):
    return cls(name=name, uri=os.path.join(str(directory), name, name), metadata={})


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    work = tmp_path_factory.mktemp("skew")
    data = _write(str(work / "data.csv"), _rows(200))
    dataset = _artifact(Dataset, work, "dataset")
    config = PrepareConfig(data=(data,), label="label", eval_fraction=0.25, num_workers=1)
    prepare_data(
        spec=PrepareSpec(config).to_json(indent=None),
        data_version="v1",
        reference="none",
        dataset=dataset,
        validation=_artifact(Markdown, work, "validation"),
    )
    model = _artifact(Model, work, "model")
    train_model(
        dataset=dataset,
        spec=TrainSpec(JOB).to_json(indent=None),
        tpu=CPU,
        warm_start="none",
        blessing_metrics="[]",
        publish_root=str(work / "published"),
        model=model,
    )
    return work, dataset, model


def _predict(trained, name: str, spec: PredictSpec) -> Dataset:
    work, dataset, model = trained
    predictions = _artifact(Dataset, work, name)
    batch_predict(dataset=dataset, model=model, spec=spec.to_json(indent=None), tpu=CPU, predictions=predictions)
    return predictions


def test_the_eval_split_passes_and_its_skew_json_sits_beside_the_predictions(trained):
    predictions = _predict(trained, "eval", PredictSpec("eval"))
    with open(os.path.join(predictions.uri, "skew.json"), encoding="utf-8") as f:
        report = json.load(f)
    assert (report["status"], report["mode"], report["flagged"]) == ("passed", "warn", [])
    assert [f["feature"] for f in report["features"]] == ["x", "colour"]
    assert predictions.metadata["skew"]["status"] == "passed" and predictions.metadata["skew"]["worst"] == []


def test_warn_scores_skewed_rows_and_records_the_worst_feature(trained):
    rows = _write(str(trained[0] / "new.csv"), _rows(40, ("red", "purple", "purple")))
    predictions = _predict(trained, "warned", PredictSpec(rows))
    skew = predictions.metadata["skew"]
    assert skew["status"] == "warned" and predictions.metadata["count"] == 40
    assert skew["worst"][0]["feature"] == "colour"
    assert skew["worst"][0]["reading"] == "`colour`: 65% of its values are a category never seen in training"


def test_block_fails_before_any_prediction_is_published(trained):
    rows = _write(str(trained[0] / "blocked.csv"), _rows(40, ("red", "purple", "purple")))
    spec = PredictSpec(rows, skew=SkewConfig(skew="block"))
    with pytest.raises(SkewError, match=r"blocked: 1 of 2 features skewed: `colour`: 65% .*No prediction"):
        _predict(trained, "blocked", spec)
    assert not os.path.exists(os.path.join(str(trained[0]), "blocked", "blocked"))


def test_off_writes_no_skew_json(trained):
    predictions = _predict(trained, "off", PredictSpec("eval", skew=SkewConfig(skew="off")))
    assert not os.path.exists(os.path.join(predictions.uri, "skew.json")) and "skew" not in predictions.metadata
    assert predictions.metadata["count"] > 0
