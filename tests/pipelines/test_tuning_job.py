"""`compile --tune-space`: the compiled pipeline runs a Vertex AI hyperparameter tuning job between prepare and
train, whose study spec (metric, goal, parameters) is the space file's, and train trains the best trial's spec.
Read from the YAML (nothing here reaches Vertex AI)."""

from __future__ import annotations

import dataclasses
import json

import pytest
from compiled import compiled_spec

from estimator_lib.config import ConfigError
from estimator_lib.config.tuning import load_space
from pipelines.tuning_job import TuningPlan

IMAGE = "us-central1-docker.pkg.dev/proj/repo/tpu-pipeline@sha256:" + "ab" * 32
SPACE = """
metric: log_loss
parameters:
  training.optimizer.learning_rate: {type: float, min: 0.0003, max: 0.03, scale: log}
  model.hidden_units: {type: categorical, values: ["64,32", "32"]}
  model.embedding_dim: {type: int, min: 4, max: 16}
"""


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    base = tmp_path_factory.mktemp("tuning")
    space = base / "space.yaml"
    space.write_text(SPACE, encoding="utf-8")
    args = ["--image", IMAGE, "--tune-space", str(space), "--tune-trials", "6", "--tune-parallel", "2"]
    return compiled_spec(str(base / "p.yaml"), "--tpu", "v3-8", *args)


def _constant(task, name):
    return task["inputs"]["parameters"][name]["runtimeValue"]["constant"]


def test_the_study_spec_is_the_space_files_with_the_vocabularys_goal(compiled):
    tasks = compiled["root"]["dag"]["tasks"]
    job = tasks["hyperparameter-tuning-job"]
    assert _constant(job, "study_spec_metrics") == [{"metric_id": "log_loss", "goal": 2.0}]  # MINIMIZE
    assert _constant(job, "study_spec_parameters") == [
        {
            "parameter_id": "training__optimizer__learning_rate",
            "double_value_spec": {"min_value": 0.0003, "max_value": 0.03},
            "scale_type": 2.0,  # UNIT_LOG_SCALE
            "conditional_parameter_specs": [],
        },
        {
            "parameter_id": "model__hidden_units",
            "categorical_value_spec": {"values": ["64,32", "32"]},
            "scale_type": 0.0,
            "conditional_parameter_specs": [],
        },
        {
            "parameter_id": "model__embedding_dim",
            "integer_value_spec": {"min_value": "4", "max_value": "16"},
            "scale_type": 1.0,  # UNIT_LINEAR_SCALE
            "conditional_parameter_specs": [],
        },
    ]
    assert (_constant(job, "max_trial_count"), _constant(job, "parallel_trial_count")) == (6, 2)
    assert job["inputs"]["parameters"]["worker_pool_specs"]["taskOutputParameter"]["producerTask"] == "trial-pool"


def test_each_trial_runs_the_trial_command_on_the_image_and_tpu_of_the_train_stage(compiled):
    pool = json.loads(_constant(compiled["root"]["dag"]["tasks"]["trial-pool"], "pool"))
    assert pool["machine_spec"] == {"machine_type": "cloud-tpu", "accelerator_type": "TPU_V3", "accelerator_count": 8}
    assert pool["container_spec"]["image_uri"] == IMAGE
    assert pool["container_spec"]["command"] == ["python", "-m", "pipelines.tune_trial"]


def test_train_trains_the_best_trials_spec(compiled):
    tasks = compiled["root"]["dag"]["tasks"]
    spec = tasks["train-model"]["inputs"]["parameters"]["spec"]
    assert spec == {"taskOutputParameter": {"outputParameterKey": "Output", "producerTask": "best-train-spec"}}
    best = tasks["best-train-spec"]["inputs"]["parameters"]
    assert best["gcp_resources"]["taskOutputParameter"]["producerTask"] == "hyperparameter-tuning-job"


def test_a_plan_needs_a_trial_and_at_most_as_many_at_once_as_trials():
    space = load_space("s.yaml", SPACE)
    with pytest.raises(ConfigError, match=r"^--tune-trials 0: run at least one trial$"):
        TuningPlan(space, 0)
    with pytest.raises(ConfigError, match=r"^--tune-parallel 4: use 1 to --tune-trials \(3\)$"):
        TuningPlan(space, 3, 4)


def test_the_tuning_tasks_carry_the_pipelines_retry_policy_like_every_task(compiled):
    tasks = compiled["root"]["dag"]["tasks"]
    assert [name for name, task in tasks.items() if task.get("retryPolicy", {}).get("maxRetryCount") != 2] == []


def test_a_user_models_space_compiles_into_the_study_with_its_hparams_and_its_metrics_direction(tmp_path):
    space = tmp_path / "space.yaml"
    space.write_text(
        "metric: error_rate\ndirection: minimize\nparameters:\n  hparams.units: {type: int, min: 8, max: 64}\n"
        "  hparams.activation: {type: categorical, values: [relu, tanh]}\n",
        encoding="utf-8",
    )
    compiled = compiled_spec(str(tmp_path / "p.yaml"), "--image", IMAGE, "--tune-space", str(space))
    tasks = compiled["root"]["dag"]["tasks"]
    job = tasks["hyperparameter-tuning-job"]
    assert _constant(job, "study_spec_metrics") == [{"metric_id": "error_rate", "goal": 2.0}]  # MINIMIZE
    assert [p["parameter_id"] for p in _constant(job, "study_spec_parameters")] == [
        "hparams__units",
        "hparams__activation",
    ]
    given = load_space("the tuning job's space", _constant(tasks["trial-pool"], "space"))
    assert (given.metric, given.direction, given.hparam_keys) == (
        "error_rate",
        "minimize",
        ("hparams.units", "hparams.activation"),
    )
    assert load_space("b", _constant(tasks["best-train-spec"], "space")) == dataclasses.replace(given, source="b")
