"""The batch-predict stage's skew check (`predict.skew`), through its component function on tiny real data:
skew.json beside the predictions and its verdict in their metadata; "block" publishes nothing; "off" writes no
skew.json."""

from __future__ import annotations

import json
import os

import pytest
from skew_cases import predict_stage, rows, trained_stage, write_csv

from estimator_lib.config.skew import SkewConfig
from estimator_lib.config.stages import PredictSpec
from estimator_lib.predict.skew import SkewError


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    return trained_stage(tmp_path_factory.mktemp("skew"))


def _predict(trained, name: str, spec: PredictSpec):
    return predict_stage(*trained, name, spec)


def test_the_eval_split_passes_and_its_skew_json_sits_beside_the_predictions(trained):
    predictions = _predict(trained, "eval", PredictSpec("eval"))
    with open(os.path.join(predictions.uri, "skew.json"), encoding="utf-8") as f:
        report = json.load(f)
    assert (report["status"], report["mode"], report["flagged"]) == ("passed", "warn", [])
    assert [f["feature"] for f in report["features"]] == ["x", "colour"]
    assert predictions.metadata["skew"]["status"] == "passed" and predictions.metadata["skew"]["worst"] == []


def test_warn_scores_skewed_rows_and_records_the_worst_feature(trained):
    scored = write_csv(str(trained[0] / "new.csv"), rows(40, ("red", "purple", "purple")))
    predictions = _predict(trained, "warned", PredictSpec(scored))
    skew = predictions.metadata["skew"]
    assert skew["status"] == "warned" and predictions.metadata["count"] == 40
    assert skew["worst"][0]["feature"] == "colour"
    assert skew["worst"][0]["reading"] == "`colour`: 65% of its values are a category never seen in training"


def test_block_fails_before_any_prediction_is_published(trained):
    scored = write_csv(str(trained[0] / "blocked.csv"), rows(40, ("red", "purple", "purple")))
    spec = PredictSpec(scored, skew=SkewConfig(skew="block"))
    with pytest.raises(SkewError, match=r"blocked: 1 of 2 features skewed: `colour`: 65% .*No prediction"):
        _predict(trained, "blocked", spec)
    assert not os.path.exists(os.path.join(str(trained[0]), "blocked", "blocked"))


def test_off_writes_no_skew_json(trained):
    predictions = _predict(trained, "off", PredictSpec("eval", skew=SkewConfig(skew="off")))
    assert not os.path.exists(os.path.join(predictions.uri, "skew.json")) and "skew" not in predictions.metadata
    assert predictions.metadata["count"] > 0
