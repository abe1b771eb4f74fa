"""`components.adapter`: a stage's spec and placement decoded by their types (nothing merged, nothing repaired);
the files stages hand to each other, and the refusal to go on without them."""

from __future__ import annotations

import dataclasses
import inspect
import os

import pytest

from components import adapter, records
from components.batch_predict import batch_predict
from components.evaluate import evaluate_model
from components.prepare import prepare_data
from components.train import train_model
from estimator_lib.config import ConfigError, JobConfig, RunConfig
from estimator_lib.config.stages import PrepareSpec, TrainSpec
from estimator_lib.data.embedded import default_dataset
from estimator_lib.evaluation.blessing import Blessing, Check

TPU = '{"use_tpu": true, "tpu_name": "local", "num_cores": 8}'


def test_a_spec_is_decoded_by_its_types_ints_as_ints():
    text = TrainSpec(JobConfig().with_overrides({"training.train_steps": 300})).to_json(indent=None)
    job = adapter.decode_spec(TrainSpec, text).job
    assert job.training.train_steps == 300 and type(job.training.train_steps) is int
    assert job.model.hidden_units == (64, 32) and all(type(u) is int for u in job.model.hidden_units)
    # What a protobuf Struct would have made of it is refused, not repaired.
    with pytest.raises(ConfigError, match=r"^job.training.train_steps=300.0 must be an integer or null$"):
        adapter.decode_spec(TrainSpec, text.replace('"train_steps":300', '"train_steps":300.0'))
    with pytest.raises(ConfigError, match=r"^job.model.hidden_units=64 must be a list of integers"):
        adapter.decode_spec(TrainSpec, '{"job": {"model": {"hidden_units": 64}}}')


def test_placement_is_config_overrides_with_exact_types():
    assert adapter.placement(TPU) == {"tpu.use_tpu": True, "tpu.tpu_name": "local", "tpu.num_cores": 8}
    assert adapter.placement('{"use_tpu": false}') == {"tpu.use_tpu": False}
    with pytest.raises(ConfigError, match=r"tpu.num_cores=8.0 must be an integer"):
        adapter.placement('{"num_cores": 8.0}')
    with pytest.raises(ConfigError, match=r"names \['cores'\], which are not TPUSettings fields"):
        adapter.placement('{"cores": 8}')


def test_training_job_is_the_specs_with_the_warm_start_source_and_the_placement():
    spec = TrainSpec(JobConfig().with_overrides({"model.family": "linear", "training.warm_start_from": "/old"}))
    job = adapter.training_job(spec, TPU, warm_start_from="/published/versions/1")
    assert job.model == spec.job.model and job.training.warm_start_from == "/published/versions/1"
    assert (job.tpu.use_tpu, job.tpu.tpu_name, job.tpu.num_cores) == (True, "local", 8)
    assert adapter.training_job(spec, '{"use_tpu": false}') == spec.job  # no source: the spec's own warm start


def test_the_components_take_one_spec_parameter_each():
    for component in (prepare_data, train_model, evaluate_model, batch_predict):
        assert "spec" in inspect.signature(component).parameters
    assert set(inspect.signature(train_model).parameters) == {
        "dataset",
        "spec",
        "tpu",
        "warm_start",
        "publish_root",
        "blessing_metrics",
        "model",
    }


def test_stage_job_places_the_recorded_config(tmp_path):
    model_uri = str(tmp_path / "model")
    recorded = JobConfig().with_overrides({"training.train_steps": 40, "tpu.strict": True})
    adapter.write_job_config(model_uri, recorded)
    job = adapter.stage_job(model_uri, TPU)
    assert job.training == recorded.training and job.model == recorded.model
    assert (job.tpu.use_tpu, job.tpu.tpu_name, job.tpu.num_cores, job.tpu.strict) == (True, "local", 8, True)
    assert adapter.stage_job(model_uri, "{}") == recorded


def test_prepare_config_locates_the_data_and_changes_nothing_else():
    run = RunConfig(publish_root="/p", eval_fraction=0.25, prepare_options={"num_shards": 4})
    spec = run.stage_specs().prepare
    config = adapter.prepare_config(adapter.decode_spec(PrepareSpec, spec.to_json(indent=None)))
    assert config.data == (default_dataset().path,) and config.label == "species"
    assert config.task is None and config.key_column is None
    assert config.eval_fraction == 0.25 and config.num_shards == 4 and type(config.num_shards) is int
    assert dataclasses.replace(config, data=spec.prepare.data) == spec.prepare


def test_blessing_round_trip(tmp_path):
    verdict = Blessing(
        blessed=False,
        checks=(Check("threshold", "accuracy", 0.8, 0.9, False, "threshold: accuracy=0.8000 >= 0.9000 fails"),),
        candidate_metrics={"accuracy": 0.8},
        comparison_metric="accuracy",
        num_examples=12,
    )
    blessing_uri = str(tmp_path / "blessing")
    adapter.write_blessing(blessing_uri, verdict)
    assert os.path.exists(os.path.join(blessing_uri, adapter.BLESSING_FILE))
    assert adapter.read_blessing(blessing_uri) == verdict


def test_missing_inputs_fail_the_stage(tmp_path):
    with pytest.raises(adapter.OutputMissingError, match="the trained model's job config was not written"):
        adapter.stage_job(str(tmp_path / "model"), '{"use_tpu": false}')
    with pytest.raises(adapter.OutputMissingError, match="the evaluation's blessing was not written"):
        adapter.read_blessing(str(tmp_path / "blessing"))
    adapter.require_output(str(tmp_path), "the work directory")  # exists: no error


def test_progress_lines_come_often_for_a_terminal_and_at_a_steady_cadence_for_logs(monkeypatch):
    """The local runner sets `CONSOLE_TTY_ENV` for its stages (their output is a pipe to it)."""
    monkeypatch.delenv(records.CONSOLE_TTY_ENV, raising=False)
    assert adapter.progress_seconds() == 10.0
    monkeypatch.setenv(records.CONSOLE_TTY_ENV, "1")
    assert adapter.progress_seconds() == 1.0
    monkeypatch.setenv(records.CONSOLE_TTY_ENV, "0")
    assert adapter.progress_seconds() == 10.0
