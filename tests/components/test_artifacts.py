"""`components.artifacts`: an output that is not there fails the stage before any metadata is written; what is
there is described with its fingerprint. Real result types over small hand-written files; the describe calls on
real stage outputs are in test_components.py."""

from __future__ import annotations

import dataclasses
import json
import os
from types import SimpleNamespace

import pytest
from kfp.dsl import Artifact, Dataset, Model
from synthetic import make_schema

from components import adapter, artifacts
from estimator_lib import release
from estimator_lib.config import JobConfig
from estimator_lib.data.prepare import PrepareResult
from estimator_lib.engine import Rows
from estimator_lib.estimator import TrainResult
from estimator_lib.export.saved_model import ExportResult
from estimator_lib.fingerprints import fingerprint_files
from estimator_lib.predict import PredictResult, serving_check
from pipelines.run_summary import Importance, decode


def artifact(cls, directory, name):
    return cls(name=name, uri=os.path.join(str(directory), name), metadata={})


def write(path: str, text: str) -> str:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    return path


def test_predictions_are_described_with_their_fingerprint(tmp_path):
    predictions = artifact(Dataset, tmp_path, "predictions")
    shards = tuple(write(os.path.join(predictions.uri, f"predictions-0000{i}-of-00002.jsonl"), "{}\n") for i in (0, 1))
    write(os.path.join(predictions.uri, "manifest.json"), '{"inputs": ["/tmp/run-1/eval/part-0.tfrecord"]}')
    result = PredictResult(predictions.uri, 2, shards, {"count": 2})
    artifacts.describe_predictions(predictions, result)
    assert predictions.metadata == {
        "count": 2,
        "shards": list(shards),
        "manifest": {"count": 2},
        "scored_rows_uri": "",
        "fingerprint": fingerprint_files(shards, predictions.uri),
    }


def test_the_predictions_fingerprint_covers_the_shards_not_the_paths_their_manifest_records(tmp_path):
    described = []
    for run, inputs in (("one", "/tmp/run-1/eval"), ("two", "/tmp/run-2/eval")):
        predictions = artifact(Dataset, tmp_path / run, "predictions")
        shard = write(os.path.join(predictions.uri, "predictions-00000-of-00001.jsonl"), '{"class": "a"}\n')
        write(os.path.join(predictions.uri, "manifest.json"), json.dumps({"inputs": [inputs]}))
        artifacts.describe_predictions(predictions, PredictResult(predictions.uri, 1, (shard,), {}))
        described.append(predictions.metadata["fingerprint"])
    assert described[0] == described[1]
    write(shard, '{"class": "b"}\n')
    artifacts.describe_predictions(predictions, PredictResult(predictions.uri, 1, (shard,), {}))
    assert predictions.metadata["fingerprint"] != described[0]


def test_a_missing_prediction_shard_fails_the_stage(tmp_path):
    predictions = artifact(Dataset, tmp_path, "predictions")
    shard = os.path.join(predictions.uri, "predictions-00000-of-00001.jsonl")
    with pytest.raises(adapter.OutputMissingError, match="a prediction shard was not written: .*00001.jsonl"):
        artifacts.describe_predictions(predictions, PredictResult(predictions.uri, 1, (shard,), {}))
    assert predictions.metadata == {}


def test_a_missing_encoded_rows_manifest_fails_the_stage(tmp_path):
    predictions = artifact(Dataset, tmp_path, "predictions")
    shard = write(os.path.join(predictions.uri, "predictions-00000-of-00001.jsonl"), "{}\n")
    manifest = {"raw": {"encoded": predictions.uri + "-rows"}}
    with pytest.raises(adapter.OutputMissingError, match="the encoded rows' manifest was not written"):
        artifacts.describe_predictions(predictions, PredictResult(predictions.uri, 1, (shard,), manifest))


def test_a_missing_checkpoint_fails_the_train_stage(tmp_path):
    model = artifact(Model, tmp_path, "model")
    result = TrainResult(model.uri, 40, os.path.join(model.uri, "model.ckpt-40"))
    with pytest.raises(
        adapter.OutputMissingError, match=r"the final checkpoint was not written: .*model.ckpt-40.index"
    ):
        artifacts.describe_model(model, result, JobConfig(), None)
    assert model.metadata == {}


def test_a_missing_schema_fails_the_prepare_stage(tmp_path):
    dataset = artifact(Dataset, tmp_path, "dataset")
    with pytest.raises(adapter.OutputMissingError, match="the prepared schema was not written"):
        artifacts.describe_dataset(dataset, Rows(PrepareResult(dataset.uri, make_schema(), {"train": 1}, {})))


def test_a_missing_blessing_file_fails_the_evaluate_stage(tmp_path):
    blessing = artifact(Artifact, tmp_path, "blessing")
    with pytest.raises(adapter.OutputMissingError, match="the evaluation's blessing was not written"):
        artifacts.describe_evaluation(None, None, None, blessing, "none")


def test_a_missing_saved_model_fails_the_export_stage(tmp_path):
    exported = artifact(Model, tmp_path, "exported")
    export = ExportResult(exported.uri, (("serve",),), {}, {})
    with pytest.raises(adapter.OutputMissingError, match="the exported SavedModel was not written"):
        artifacts.describe_export(exported, export)
    assert exported.metadata == {}


def test_a_missing_publication_record_fails_the_release_stage(tmp_path):
    publication = artifact(Artifact, tmp_path, "publication")
    with pytest.raises(adapter.OutputMissingError, match="the publication record was not written"):
        artifacts.describe_release(publication, release.Release(None, "not published: not blessed"), "none", "f" * 64)
    assert publication.metadata == {}


SERVING_RESULT = {
    "rows_checked": 3,
    "signatures": ["predict", "raw:predict"],
    "skipped": {},
    "max_abs_diff": {"predict": {"probabilities": 1e-7}, "raw:predict": {"probabilities": 0.0}},
    "rtol": 1e-5,
    "atol": 1e-6,
    "tags": ["serve"],
    "input_files": 1,
}


def test_a_missing_serving_check_record_fails_the_stage(tmp_path):
    checked = artifact(Artifact, tmp_path, "checked")
    with pytest.raises(adapter.OutputMissingError, match="the serving check's record was not written"):
        artifacts.describe_serving_check(checked, {**SERVING_RESULT, "compared": "x"})
    assert checked.metadata == {}


def test_the_serving_check_fingerprint_covers_what_was_found_not_where_the_rows_were(tmp_path):
    described = []
    for run in ("one", "two"):
        checked = artifact(Artifact, tmp_path / run, "checked")
        result = {**SERVING_RESULT, "compared": f"the first 3 predicted records of ['{tmp_path / run}/eval.tfrecord']"}
        serving_check.write_record(checked.uri, result)
        artifacts.describe_serving_check(checked, result)
        described.append(checked.metadata)
    assert described[0]["fingerprint"] == described[1]["fingerprint"]
    assert described[0]["record_uri"] == str(tmp_path / "one" / "checked" / "serving_check.json")
    assert described[0]["max_abs_diff"] == SERVING_RESULT["max_abs_diff"] and described[0]["rows_checked"] == 3


def published(tmp_path, run: str, version: str, export_fingerprint: str) -> Artifact:
    """A release stage's publication of `version` (its record's URI and time differ with the version)."""
    publication = artifact(Artifact, tmp_path / run, "publication")
    model = release.PublishedModel("/root", version, f"/root/versions/{version}", "files", f"{version} time")
    outcome = release.Release(model, f"published version {version} at {model.uri}")
    adapter.write_publication(publication.uri, outcome, "none")
    artifacts.describe_release(publication, outcome, "none", export_fingerprint)
    return publication


def test_the_publication_fingerprint_names_the_export_not_the_versions_time_stamped_name(tmp_path):
    first = published(tmp_path, "one", "20260101T000000Z-aaaa", "e" * 64).metadata
    second = published(tmp_path, "two", "20260202T000000Z-bbbb", "e" * 64).metadata
    other = published(tmp_path, "three", "20260202T000000Z-bbbb", "d" * 64).metadata
    assert first["published_version"] != second["published_version"]
    assert first["fingerprint"] == second["fingerprint"] != other["fingerprint"]


def test_importance_goes_whole_into_a_file_and_its_top_ten_into_the_blessings_metadata_and_the_summary(tmp_path):
    blessing = artifact(Artifact, tmp_path, "blessing")
    ranking = [{"feature": f"x{i}", "importance": 1.0 - i / 20, "std": 0.01} for i in range(12)]
    ranking[9]["feature"] = "long " * 30  # 150 characters: 99 of them and an ellipsis in the metadata
    attributions = {"method": "integrated_gradients", "output": "prediction", "steps": 32, "features": ranking[:3]}
    importance = {
        "metric": "rmse",
        "higher_is_better": False,
        "rows": 500,
        "repeats": 2,
        "permutation": ranking,
        "attributions": attributions,
    }
    described = artifacts.describe_importance(SimpleNamespace(importance=importance), blessing)
    uri = os.path.join(blessing.uri, "importance.json")
    with open(uri, encoding="utf-8") as f:
        assert json.load(f) == importance
    assert described == {
        "metric": "rmse",
        "higher_is_better": False,
        "rows": 500,
        "repeats": 2,
        "features": 12,
        "permutation": [*ranking[:9], {**ranking[9], "feature": ("long " * 30)[:99] + "…"}],
        "attribution_output": "prediction",
        "attributions": ranking[:3],
        "note": "",
        "uri": uri,
    }
    through_kfp = {**described, "rows": 500.0, "repeats": 2.0, "features": 12.0}  # metadata numbers come back floats
    summary = decode(Importance, through_kfp, "summary.json")  # as the run's summary reads it back
    assert dataclasses.asdict(summary) == described and type(summary.rows) is int
    assert artifacts.describe_importance(SimpleNamespace(importance=None), blessing) == {}
