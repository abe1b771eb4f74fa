"""`reproduce.verify_record` on small hand-written records: a record that agrees with its files has nothing to
report; an edited prediction shard, summary metric, summary seed or summary fingerprint is named with the value
recorded and the value found. Real runs are edited in tests/e2e/test_reproduce_edits.py."""

from __future__ import annotations

import hashlib
import json
import os

from estimator_lib.fingerprints import fingerprint_files, json_digest
from pipelines import reproduce
from pipelines.run_summary import RunSummary

SHARD = "predictions-00000-of-00002.jsonl"


def write_json(path: str, value: dict) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(value, f)


def small_record(tmp_path) -> reproduce.Record:
    """A record of two stages, batch_predict (two shards) and evaluate (metrics), and train's job config."""
    predictions = str(tmp_path / "batch-predict" / "predictions")
    os.makedirs(predictions)
    shards = [os.path.join(predictions, SHARD), os.path.join(predictions, "predictions-00001-of-00002.jsonl")]
    for i, shard in enumerate(shards):
        with open(shard, "w", encoding="utf-8") as f:
            f.write(f'{{"key": {i}, "class": "Adelie"}}\n')
    # What the predictions' manifest.json records of each shard.
    recorded = [
        {"file": os.path.basename(s), "sha256": hashlib.sha256(open(s, "rb").read()).hexdigest()} for s in shards
    ]
    fingerprint = fingerprint_files(shards, predictions)
    metrics = {"accuracy": 0.9828, "blessed": 1.0}
    write_json(
        str(tmp_path / "batch-predict" / "stage.json"),
        {"outputs": {"predictions": {"shards": shards, "manifest": {"shards": recorded}}}},
    )
    write_json(
        str(tmp_path / "evaluate" / "stage.json"),
        {"outputs": {"metrics": metrics, "blessing": {"candidate_metrics": {"accuracy": 0.9828}}}},
    )
    metrics_uri = str(tmp_path / "evaluate" / "metrics")
    manifests = {
        "batch_predict": {"outputs": {"predictions": {"uri": predictions, "fingerprint": fingerprint}}, "config": {}},
        "evaluate": {"outputs": {"metrics": {"uri": metrics_uri, "fingerprint": json_digest(metrics)}}},
        "train": {"outputs": {}, "config": {"job": {"training": {"seed": 42}}}},
    }
    with open(os.path.join(os.path.dirname(__file__), "recorded_summary.json"), encoding="utf-8") as f:
        recorded = json.load(f)  # a real run's summary.json
    summary = {
        **recorded,
        "fingerprints": {"predictions": fingerprint},
        "metrics": {"accuracy": 0.9828},
        "blessing": {**recorded["blessing"], "candidate_metrics": {"accuracy": 0.9828}},
        "config": {"job_config": {"training": {"seed": 42}}},
    }
    return reproduce.Record(str(tmp_path / "summary.json"), RunSummary.from_dict(summary), manifests)


def test_a_record_that_agrees_with_its_files_has_nothing_to_report(tmp_path):
    assert reproduce.verify_record(small_record(tmp_path)) == []


def test_one_changed_byte_of_a_prediction_shard_is_named_by_its_file(tmp_path):
    record = small_record(tmp_path)
    shard = tmp_path / "batch-predict" / "predictions" / SHARD
    before = hashlib.sha256(shard.read_bytes()).hexdigest()
    shard.write_bytes(shard.read_bytes().replace(b"0", b"7", 1))
    after = hashlib.sha256(shard.read_bytes()).hexdigest()
    assert reproduce.verify_record(record) == [
        f"batch_predict: {SHARD}: its bytes no longer match the recorded sha256 (recorded {before[:12]}..., "
        f"found {after[:12]}...)"
    ]


def test_a_missing_shard_is_named(tmp_path):
    record = small_record(tmp_path)
    os.remove(tmp_path / "batch-predict" / "predictions" / SHARD)
    [line] = reproduce.verify_record(record)
    assert line.startswith("batch_predict: predictions: a file of it is missing (") and SHARD in line


def test_an_edited_metric_seed_or_fingerprint_in_the_summary_is_named_with_both_values(tmp_path):
    record = small_record(tmp_path)
    record.results.metrics["accuracy"] = 0.99
    record.summary.config["job_config"]["training"]["seed"] = 7
    record.results.fingerprints["predictions"] = "f" * 64
    recorded = record.manifests["batch_predict"]["outputs"]["predictions"]["fingerprint"]
    assert reproduce.verify_record(record) == [
        f'summary.json: fingerprints.predictions "{"f" * 64}" differs from the batch_predict stage\'s record '
        f'"{recorded}"',
        "summary.json: metrics.accuracy 0.99 differs from the evaluate stage's record 0.9828",
        "summary.json: config.job_config.training.seed 7 differs from the train stage's record 42",
    ]


def test_a_metric_only_one_side_has_is_named_absent(tmp_path):
    record = small_record(tmp_path)
    record.results.metrics["auc"] = 1.0
    assert reproduce.verify_record(record) == [
        "summary.json: metrics.auc 1.0 differs from the evaluate stage's record (absent)"
    ]
