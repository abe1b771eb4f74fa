"""The skew check of a user's model_fn through its stages: preparation profiles the train records by the feature
spec (profile.json), batch prediction checks the records it scores against it (skew.json beside the predictions,
the same bytes on Beam's workers as in-process; "block" publishes nothing), and the export carries the profile,
so `predict` with the published model checks its records the same way."""

from __future__ import annotations

import json
import os

import pytest
from skew_cases import USER_MODEL, USER_SPEC_JSON, user_records

from estimator_lib import release
from estimator_lib.config import JobConfig, ModelConfig, PrepareConfig, TPUSettings, TrainingConfig
from estimator_lib.config.skew import SkewConfig
from estimator_lib.engine import published
from estimator_lib.engine.user import stages
from estimator_lib.model.user.prepare import prepare_records
from estimator_lib.predict import read_predictions, skew


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    root = tmp_path_factory.mktemp("user-skew")
    code = root / "code"
    code.mkdir()
    (code / "tabular_model.py").write_text(USER_MODEL, encoding="utf-8")
    (root / "spec.json").write_text(json.dumps(USER_SPEC_JSON), encoding="utf-8")
    data = user_records(str(root / "data.tfrecord"), 1500, seed=0)
    config = PrepareConfig(data=(data,), label="label", key_column="id", feature_spec=str(root / "spec.json"))
    prepared = prepare_records(config, str(root / "prepared"))
    job = JobConfig(
        model=ModelConfig(model_fn="tabular_model:model_fn", code=str(code)),
        tpu=TPUSettings(use_tpu=False, iterations_per_loop=10),
        training=TrainingConfig(train_batch_size=32, predict_batch_size=64, train_steps=10),
    )
    model_dir = str(root / "model")
    stages.train(job, prepared, model_dir)
    skewed = user_records(str(root / "skewed.tfrecord"), 500, seed=9, shift=2.0, new_colour=0.3, no_tokens=0.5)
    return root, job, prepared, model_dir, skewed


def test_preparation_profiles_the_train_records_by_the_spec(trained):
    _, _, prepared, _, _ = trained
    profile = prepared.profile()
    assert profile["rows"] == prepared.counts["train"]
    assert sorted(profile["features"]) == ["bytes(blob)", "colour", "count", "len(ids)", "len(tokens)", "x"]


def test_batch_prediction_checks_the_records_it_scores_in_process_and_on_beam_with_the_same_bytes(trained, tmp_path):
    from estimator_lib.engine.user import beam as user_beam

    root, job, prepared, model_dir, skewed = trained
    out = str(tmp_path / "inprocess")
    result = stages.predict(job, prepared, model_dir, skewed, out, SkewConfig())
    report = skew.read_report(out)
    assert result.count == 500 and len(read_predictions(out)) == 500
    assert report["status"] == "warned" and sorted(report["flagged"]) == ["colour", "len(tokens)", "x"]
    beam_out = str(tmp_path / "beam")
    user_beam.predict_stage(job, prepared, model_dir, skewed, beam_out, user_beam.BeamConfig(), SkewConfig())
    with open(os.path.join(out, "skew.json"), "rb") as a, open(os.path.join(beam_out, "skew.json"), "rb") as b:
        assert a.read() == b.read()

    held_out = str(tmp_path / "eval")
    stages.predict(job, prepared, model_dir, "eval", held_out, SkewConfig())
    assert skew.read_report(held_out)["status"] == "passed"

    blocked = str(tmp_path / "blocked")
    with pytest.raises(skew.SkewError, match="colour"):
        stages.predict(job, prepared, model_dir, skewed, blocked, SkewConfig(skew="block"))
    assert not os.path.exists(blocked)


def test_the_export_carries_the_profile_and_predict_with_it_checks_the_records(trained, tmp_path):
    root, job, prepared, model_dir, skewed = trained
    export = stages.export(job, prepared, model_dir, str(tmp_path / "export"))
    assert export.metadata["data_profile"] == prepared.profile()
    model = release.publish_model(export.export_dir, str(tmp_path / "published")).root
    out = str(tmp_path / "predicted")
    scored = published.predict_published(model, [skewed], out)
    assert scored.skew.status == "warned" and scored.skew.flagged[0].feature in ("colour", "len(tokens)", "x")
    assert skew.read_report(out)["flagged"] == [f.feature for f in scored.skew.flagged]
    with pytest.raises(skew.SkewError):
        published.predict_published(model, [skewed], str(tmp_path / "b"), skew=SkewConfig(skew="block"))
    assert not os.path.exists(tmp_path / "b")
