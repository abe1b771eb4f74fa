"""Scheduled retraining on three data snapshots, each run warm-starting from the last published model.

(1) the embedded penguins; (2) three quarters of the Biscoe rows dropped (island's frequency order changes from
Biscoe, Dream, Torgersen to Dream, Torgersen, Biscoe) and body mass shifted by 300 g; (3) snapshot 2 plus rows
from a new island. After a warm start of one step at learning rate 1e-12 the candidate must predict what the
published model predicts on the same rows: all rows for (2), the rows whose values both models know for (3).
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import tensorflow as tf
from penguin_rows import penguin_rows, write_rows

from estimator_lib import release
from estimator_lib.config import JobConfig, PrepareConfig, ValidationConfig
from estimator_lib.data import retrain, validation
from estimator_lib.data.common import DataError
from estimator_lib.estimator import train_prepared
from estimator_lib.export import load_serving_model
from estimator_lib.model.inputs import resolve_files

pytestmark = pytest.mark.slow

COLD = {"training.train_steps": 150, "training.train_batch_size": 32, "training.eval_batch_size": 32}
NEAR_ZERO = {**COLD, "training.train_steps": 1, "training.optimizer.learning_rate": 1e-12}
WARN = ValidationConfig(on_breach="warn")


def snapshot_two(rows):
    kept = [dict(r) for i, r in enumerate(rows) if r["island"] != "Biscoe" or i % 4 == 0]
    for r in kept:
        if r["body_mass_g"] != "NA":
            r["body_mass_g"] = str(float(r["body_mass_g"]) + 300)
    return kept


def snapshot_three(rows):
    two = snapshot_two(rows)
    return two + [{**r, "island": "Anvers", "year": "2010"} for r in two[:40]]


def run(snapshot, root, name, publish_root, overrides, checks=WARN):
    """One scheduled run as the pipeline makes it: prepare against the reference, train, export, publish."""
    reference = release.resolve_model("latest", publish_root)
    config = PrepareConfig(data=(snapshot,), label="species", num_workers=1)
    continued = retrain.prepare_continuing(
        config, str(root / name / "data"), reference, checks, str(root / name / "v.md")
    )
    job = JobConfig().with_overrides({**overrides, "training.warm_start_from": reference})
    prepared = continued.prepared
    train_prepared(job, prepared, str(root / name / "model"))
    export = release.export_verified(
        job,
        prepared.schema,
        str(root / name / "model"),
        str(root / name / "export"),
        data_profile=prepared.profile(),
    )
    based_on = release.latest_version(publish_root)
    published = release.publish_model(export.export_dir, publish_root, based_on=based_on)
    return continued, published


def probabilities(model_dir, examples):
    model = load_serving_model(model_dir)
    try:
        return model.signature(examples=tf.constant(examples))["probabilities"].numpy()
    finally:
        model.close()


def eval_examples(prepared):
    return [r.numpy() for r in tf.data.TFRecordDataset(resolve_files(prepared.files("eval")))]


@pytest.fixture(scope="module")
def history(tmp_path_factory):
    root = tmp_path_factory.mktemp("retrain")
    publish_root = str(root / "published")
    rows = penguin_rows()
    first, v1 = run(write_rows(root / "s1.csv", rows), root, "r1", publish_root, COLD)
    second, v2 = run(write_rows(root / "s2.csv", snapshot_two(rows)), root, "r2", publish_root, NEAR_ZERO)
    third, v3 = run(write_rows(root / "s3.csv", snapshot_three(rows)), root, "r3", publish_root, NEAR_ZERO)
    return {"root": root, "runs": [(first, v1), (second, v2), (third, v3)], "rows": rows, "publish_root": publish_root}


def test_a_reordered_vocabulary_and_a_shifted_column_keep_the_published_models_predictions(history):
    (first, v1), (second, v2), _ = history["runs"]
    assert first.prepared.schema.feature("island").vocabulary == ("Biscoe", "Dream", "Torgersen")
    # Inferred afresh the order would be Dream, Torgersen, Biscoe; continued, the ids stay.
    assert second.prepared.schema.feature("island").vocabulary == ("Biscoe", "Dream", "Torgersen")
    assert second.prepared.manifest["schema_source"] == "reference"
    mass = second.prepared.schema.feature("body_mass_g")
    assert (mass.mean, mass.std) == (
        first.prepared.schema.feature("body_mass_g").mean,
        first.prepared.schema.feature("body_mass_g").std,
    )
    examples = eval_examples(second.prepared)
    published, candidate = probabilities(v1.uri, examples), probabilities(v2.uri, examples)
    np.testing.assert_allclose(candidate, published, atol=1e-4)
    assert np.abs(published - 1 / 3).max() > 0.3  # a trained model, not a uniform one
    # The drift is recorded, not fatal (warn): island's distribution and body mass moved.
    breaches = {(f.feature, f.check) for f in second.report.breaches}
    assert ("island", "distance (PSI)") in breaches and ("body_mass_g", "mean shift (std)") not in breaches
    assert second.report.status == validation.WARNED


def test_a_new_category_gets_a_fresh_row_and_known_rows_keep_their_predictions(history):
    _, (second, v2), (third, v3) = history["runs"]
    assert third.prepared.schema.feature("island").vocabulary == ("Biscoe", "Dream", "Torgersen", "Anvers")
    examples = eval_examples(third.prepared)
    known = [e for e in examples if b"Anvers" not in e and b"2010" not in e]
    assert 0 < len(known) < len(examples)
    np.testing.assert_allclose(probabilities(v3.uri, known), probabilities(v2.uri, known), atol=1e-4)
    unseen = {f.feature: f.value for f in third.report.findings if f.check == "unseen share"}
    assert unseen["island"] == pytest.approx(
        third.prepared.profile()["features"]["island"]["counts"]["Anvers"] / third.prepared.counts["train"]
    )


def test_a_new_label_class_fails_before_training_naming_it_and_the_fix(history, tmp_path):
    rows = [dict(r) for r in history["rows"]]
    rows += [{**r, "species": "Emperor"} for r in rows[:5]]
    reference = release.resolve_model("latest", history["publish_root"])
    config = PrepareConfig(data=(write_rows(tmp_path / "s.csv", rows),), label="species", num_workers=1)
    with pytest.raises(
        DataError, match=r"class\(es\) \['Emperor'\] that the published model does not know .*--warm-start none"
    ):
        retrain.prepare_continuing(config, str(tmp_path / "data"), reference, WARN, str(tmp_path / "v.md"))


def test_the_published_model_carries_its_schema_and_data_profile(history):
    _, (second, v2), _ = history["runs"]
    reference = retrain.load_reference(v2.uri)
    assert reference.schema == second.prepared.schema
    assert reference.profile == json.loads(json.dumps(second.prepared.profile()))
