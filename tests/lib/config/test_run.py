"""`RunConfig` and the hyperparameter table: validation with fix-it messages, JSON round trip, the pipeline's
arguments, and a config file with `--set` overrides."""

from __future__ import annotations

import pytest

from estimator_lib.config import (
    HYPERPARAMETERS,
    BlessingConfig,
    ConfigError,
    JobConfig,
    RunConfig,
    ValidationConfig,
    hyperparameter_overrides,
    hyperparameters,
    resolve_configs,
    set_dotted,
)
from estimator_lib.config.run import parameter_dict, without_nulls

JOB = JobConfig().with_overrides(
    {
        "model.family": "linear",
        "model.hidden_units": [16],
        "training.optimizer.learning_rate": 1,
        "training.max_epochs": 30,
        "training.train_batch_size": 32,
        "training.seed": 7,
    }
)


def test_json_round_trip_is_exact():
    run = RunConfig(
        publish_root="gs://b/published",
        data="gs://b/x.csv",
        label="y",
        task="regression",
        prepare_options={"num_shards": 4},
        job=JOB,
        blessing=BlessingConfig(thresholds={"rmse": 2.0}),
        warm_start="latest",
        predict_data="gs://b/new/*.jsonl",
    )
    assert RunConfig.from_json(run.to_json()) == run


@pytest.mark.parametrize(
    "fields, message",
    [
        ({"task": "ranking"}, "--task (prepare.task) 'ranking' is not one of ('auto', 'classification', 'regression')"),
        ({"label": ""}, "--label (prepare.label) is empty; name the label column of your data"),
        ({"publish_root": ""}, "the publish root is empty; give the directory or gs:// prefix for blessed models"),
        ({"eval_fraction": 1.0}, "prepare.eval_fraction=1.0 must be in (0, 1), e.g. 0.2"),
        (
            {"predict_data": ""},
            "--predict-data is empty; use one of ('train', 'eval', 'test', 'valid') or a URI of rows",
        ),
    ],
)
def test_invalid_runs_are_refused_with_the_fix(fields, message):
    with pytest.raises(ConfigError) as error:
        RunConfig(**{"publish_root": "/p", **fields})
    assert str(error.value) == message


def test_hyperparameters_are_read_from_the_job_config():
    assert hyperparameters(JOB) == {
        "model_family": "linear",
        "hidden_units": [16],
        "learning_rate": 1.0,
        "max_epochs": 30,
        "train_batch_size": 32,
        "seed": 7,
    }
    assert isinstance(hyperparameters(JOB)["learning_rate"], float)  # a KFP float parameter, though set as 1


def test_hyperparameter_overrides_are_the_inverse():
    overrides = hyperparameter_overrides(hyperparameters(JOB))
    assert overrides["training.optimizer.learning_rate"] == 1.0 and overrides["model.family"] == "linear"
    assert JobConfig().with_overrides(overrides) == JOB
    assert set(overrides) == set(HYPERPARAMETERS.values())


def test_every_hyperparameter_names_a_job_config_field():
    data = JobConfig().to_dict()
    for dotted in HYPERPARAMETERS.values():
        set_dotted(data, dotted, "checked", create=False)  # raises on an unknown section or field


def test_arguments_carry_the_configs_without_nulls():
    run = RunConfig(publish_root="/p", job=JOB, blessing=BlessingConfig(min_improvement=0.01))
    arguments = run.arguments()
    assert arguments["max_epochs"] == 30 and arguments["model_family"] == "linear"
    assert "warm_start_from" not in arguments["job_config"]["training"]  # KFP parameters cannot carry null
    assert JobConfig.from_dict(arguments["job_config"]) == JOB
    assert arguments["blessing_config"] == {
        "thresholds": {},
        "beat_trivial": True,
        "min_improvement": 0.01,
        "confidence": 0.95,
        "reference_margin": 0.02,
    }
    assert arguments["publish_root"] == "/p" and arguments["prepare_options"] == {}
    assert ValidationConfig.from_dict(arguments["validation_config"]) == ValidationConfig()


def test_without_nulls_and_parameter_dict():
    assert without_nulls({"a": None, "b": {"c": None, "d": [1, {"e": None}]}}) == {"b": {"d": [1, {}]}}
    assert JobConfig.from_dict(parameter_dict(JobConfig(), JobConfig)) == JobConfig()


def test_resolve_configs_routes_sections_and_overrides():
    configs = resolve_configs(
        {"model": {"family": "linear"}, "blessing": {"thresholds": {"accuracy": 0.8}}, "prepare": {"num_shards": 2}},
        [
            "training.train_steps=7",
            'blessing.thresholds={"auc": 0.9}',
            "prepare.bad_rows=quarantine",
            "validation.on_breach=warn",
        ],
    )
    assert configs["job"] == JobConfig().with_overrides({"model.family": "linear", "training.train_steps": 7})
    assert configs["blessing"] == BlessingConfig(thresholds={"auc": 0.9})
    assert configs["prepare"] == {"num_shards": 2, "bad_rows": "quarantine"}
    assert configs["validation"] == ValidationConfig(on_breach="warn")
    assert resolve_configs(None, []) == {
        "job": JobConfig(),
        "blessing": BlessingConfig(),
        "prepare": {},
        "validation": ValidationConfig(),
    }


def test_resolve_configs_refuses_what_is_not_an_object():
    with pytest.raises(ConfigError, match="the config file must hold a JSON object, got list"):
        resolve_configs([1], [])
    with pytest.raises(ConfigError, match="config section 'blessing' must be a JSON object"):
        resolve_configs({"blessing": 3}, [])
