"""The batch-predict stage's skew check (`predict.skew`), through its component function on tiny real data:
skew.json beside the predictions and its verdict in their metadata; the predictions against the eval rows' the
evaluate stage recorded in the blessing; "block" publishes nothing; "off" writes no skew.json."""

from __future__ import annotations

import json
import os

import pytest
from skew_cases import predict_stage, rows, trained_stage, write_csv

from estimator_lib.config.skew import SkewConfig
from estimator_lib.config.stages import PredictSpec
from estimator_lib.predict import read_predictions
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
    assert predictions.metadata["skew"]["warning"] == "" and "warning" not in predictions.metadata  # no alert
    # the eval rows' predictions are the ones the blessing recorded: no shift at all
    assert report["predictions"]["figures"] == {"share shift": 0.0} and report["predictions"]["breaches"] == []
    blessed = json.loads(trained[3])  # what evaluate returned: the counts, without the class names
    assert report["predictions"]["rows"] == {"eval": sum(blessed["counts"]), "scored": sum(blessed["counts"])}
    assert report["summary"].endswith("scored rows and their predictions within their thresholds")


def test_warn_scores_skewed_rows_and_records_the_worst_feature(trained):
    scored = write_csv(str(trained[0] / "new.csv"), rows(40, ("red", "purple", "purple")))
    predictions = _predict(trained, "warned", PredictSpec(scored))
    skew = predictions.metadata["skew"]
    assert skew["status"] == "warned" and predictions.metadata["count"] == 40
    assert skew["worst"][0]["feature"] == "colour"
    assert skew["worst"][0]["reading"] == "`colour`: 65% of its values are a category never seen in training"
    # the line a webhook alert carries, and the artifact's "warning" a Vertex AI run's exit task reads
    assert skew["warning"] == f"skew check {skew['summary']}" and skew["summary"].startswith("warned: 1 of 2 ")
    assert predictions.metadata["warning"] == skew["warning"]


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


def test_predictions_whose_class_shares_moved_are_flagged_and_block_publishes_nothing(trained):
    """Sixty copies of one row: the model predicts one class for all of them, where the eval rows got both classes
    (neither above 60%). The features' own shift is let through (per-feature overrides), so the predictions alone
    flag."""
    blessed = json.loads(trained[3])
    assert blessed["kind"] == "classes" and set(blessed) == {"kind", "counts"}  # the schema names the classes
    rows_ = sum(blessed["counts"])
    assert max(blessed["counts"]) / rows_ <= 0.7
    scored = write_csv(str(trained[0] / "one-row.csv"), [rows(1)[0]] * 60)
    quiet = {"x": {"max_distance": 100.0}, "colour": {"max_distance": 100.0}}
    predictions = _predict(trained, "moved", PredictSpec(scored, skew=SkewConfig(features=quiet)))
    with open(os.path.join(predictions.uri, "skew.json"), encoding="utf-8") as f:
        report = json.load(f)
    assert report["status"] == "warned" and report["flagged"] == []
    [label] = {row["class"] for row in read_predictions(predictions.uri)}
    eval_share = blessed["counts"][["no", "yes"].index(label)] / rows_
    moved = report["predictions"]
    assert moved["breaches"] == ["share shift"] and moved["shares"][label] == [round(eval_share, 4), 1.0]
    reading = (
        f"predicted class {label}: 100% of the scored rows, {eval_share:.0%} of the eval rows the model was blessed on"
    )
    assert moved["reading"] == reading and report["summary"] == f"warned: the predictions moved: {reading}"
    assert predictions.metadata["skew"]["predictions"] == reading
    assert predictions.metadata["warning"] == f"skew check warned: the predictions moved: {reading}"

    spec = PredictSpec(scored, skew=SkewConfig(skew="block", features=quiet))
    with pytest.raises(SkewError, match=r"blocked: the predictions moved: predicted class \w+: 100% .*No prediction"):
        _predict(trained, "moved-blocked", spec)
    assert not os.path.exists(os.path.join(str(trained[0]), "moved-blocked", "moved-blocked"))
