"""`components.adapter`: KFP parameters (numbers as floats, configs without nulls) back into typed configs; the
files stages hand to each other, and the refusal to go on without them."""

from __future__ import annotations

import inspect
import json
import os

import pytest

from components import adapter
from components.train import train_model
from estimator_lib.config import HYPERPARAMETERS, BlessingConfig, ConfigError, JobConfig, TPUSettings
from estimator_lib.data.embedded import default_dataset
from estimator_lib.evaluation.blessing import Blessing, Check

TPU = {"use_tpu": True, "tpu_name": "local", "num_cores": 8.0}


def test_typed_restores_ints_that_kfp_turned_into_floats():
    data = {
        "training": {"train_steps": 300.0, "optimizer": {"learning_rate": 1.0}},
        "model": {"hidden_units": [64.0]},
        "tpu": {"num_cores": 8.0, "tpu_name": "local"},
    }
    typed = adapter.typed(JobConfig, data)
    assert typed["training"]["train_steps"] == 300 and isinstance(typed["training"]["train_steps"], int)
    assert typed["model"]["hidden_units"] == [64] and isinstance(typed["model"]["hidden_units"][0], int)
    assert typed["tpu"]["num_cores"] == 8 and isinstance(typed["tpu"]["num_cores"], int)
    assert isinstance(typed["training"]["optimizer"]["learning_rate"], float)  # declared float: stays 1.0
    assert adapter.typed(TPUSettings, {"num_cores": 8.5})["num_cores"] == 8.5  # not whole: left for the config


def test_training_job_later_wins_config_then_hyperparameters_then_warm_start_then_placement():
    job_config = {
        "model": {"family": "dnn", "hidden_units": [4.0]},
        "training": {"train_steps": 5.0, "warm_start_from": "/old", "save_checkpoints_steps": 100.0},
        "tpu": {"use_tpu": False, "num_cores": 2.0},
    }
    sent = json.dumps(job_config)
    job = adapter.training_job(
        job_config,
        {"model_family": "linear", "max_epochs": 7.0, "hidden_units": [16.0]},
        TPU,
        warm_start_from="/published/versions/1",
    )
    assert (job.model.family, job.training.max_epochs, job.model.hidden_units) == ("linear", 7, (16,))
    assert job.training.warm_start_from == "/published/versions/1"
    assert (job.tpu.use_tpu, job.tpu.tpu_name, job.tpu.num_cores) == (True, "local", 8)
    assert json.dumps(job_config) == sent  # the parameter is not changed


def test_training_job_keeps_the_configs_warm_start_without_a_source():
    job = adapter.training_job({"training": {"warm_start_from": "/old"}}, {}, {})
    assert job.training.warm_start_from == "/old" and job == JobConfig().with_overrides(
        {"training.warm_start_from": "/old"}
    )


def test_training_job_refuses_an_unknown_hyperparameter():
    with pytest.raises(ConfigError, match=r"\['epochs'\] are not hyperparameter parameters; use some of"):
        adapter.training_job({}, {"epochs": 3}, {})


def test_the_train_component_takes_every_hyperparameter():
    assert set(HYPERPARAMETERS) <= set(inspect.signature(train_model).parameters)


def test_stage_job_places_the_recorded_config(tmp_path):
    model_uri = str(tmp_path / "model")
    recorded = JobConfig().with_overrides({"training.train_steps": 40, "tpu.strict": True})
    adapter.write_job_config(model_uri, recorded)
    job = adapter.stage_job(model_uri, TPU)
    assert job.training == recorded.training and job.model == recorded.model
    assert (job.tpu.use_tpu, job.tpu.tpu_name, job.tpu.num_cores, job.tpu.strict) == (True, "local", 8, True)
    assert adapter.stage_job(model_uri, {}) == recorded


def test_prepare_config_reads_auto_and_empty_as_inferred():
    config = adapter.prepare_config("embedded:penguins", "species", "auto", "", 0.25, {"num_shards": 4.0})
    assert config.data == (default_dataset().path,) and config.label == "species"
    assert config.task is None and config.key_column is None
    assert config.eval_fraction == 0.25 and config.num_shards == 4 and isinstance(config.num_shards, int)
    explicit = adapter.prepare_config("/d/x.csv", "y", "regression", "id", 0.2, {})
    assert (explicit.data, explicit.task, explicit.key_column) == (("/d/x.csv",), "regression", "id")


def test_blessing_config_from_the_parameter():
    assert adapter.blessing_config({}) == BlessingConfig()
    config = adapter.blessing_config({"thresholds": {"accuracy": 0.9}, "min_improvement": 0.01})
    assert config.thresholds == {"accuracy": 0.9} and config.min_improvement == 0.01


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
        adapter.stage_job(str(tmp_path / "model"), {"use_tpu": False})
    with pytest.raises(adapter.OutputMissingError, match="the evaluation's blessing was not written"):
        adapter.read_blessing(str(tmp_path / "blessing"))
    adapter.require_output(str(tmp_path), "the work directory")  # exists: no error


def test_placement_is_config_overrides():
    assert adapter.placement({"use_tpu": False}) == {"tpu.use_tpu": False}
    assert adapter.placement({}) == {}
