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
    hyperparameters,
    resolve_configs,
    set_dotted,
)
from estimator_lib.config.run import STAGE_PARAMETERS, resolve_run, without_nulls
from estimator_lib.config.stages import EvaluateSpec, PredictSpec, PrepareSpec, TrainSpec

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


def test_hyperparameters_are_a_view_of_the_job_config():
    assert hyperparameters(JOB) == {
        "model_family": "linear",
        "hidden_units": [16],
        "learning_rate": 1.0,
        "max_epochs": 30,
        "train_batch_size": 32,
        "seed": 7,
    }
    assert isinstance(hyperparameters(JOB)["learning_rate"], float)  # a float field: set as 1, held as 1.0


def test_every_hyperparameter_names_a_job_config_field():
    data = JobConfig().to_dict()
    for dotted in HYPERPARAMETERS.values():
        set_dotted(data, dotted, "checked", create=False)  # raises on an unknown section or field


def test_arguments_are_each_stages_spec_as_json_text_with_ints_kept():
    run = RunConfig(publish_root="/p", job=JOB, blessing=BlessingConfig(min_improvement=0.01), baseline="none")
    arguments = run.arguments()
    assert set(arguments) == {"publish_root", "baseline", "warm_start", *STAGE_PARAMETERS.values()}
    assert (arguments["publish_root"], arguments["baseline"], arguments["warm_start"]) == ("/p", "none", "none")
    train = TrainSpec.from_json(arguments["train_spec"])
    assert train.job == JOB and type(train.job.training.train_batch_size) is int
    assert '"train_batch_size":32' in arguments["train_spec"] and "\n" not in arguments["train_spec"]
    assert EvaluateSpec.from_json(arguments["evaluate_spec"]).blessing == BlessingConfig(min_improvement=0.01)
    prepare = PrepareSpec.from_json(arguments["prepare_spec"])
    assert prepare.prepare == run.prepare_config() and prepare.validation == ValidationConfig()
    assert PredictSpec.from_json(arguments["predict_spec"]) == PredictSpec(data="eval")


def test_the_view_shows_the_configs_without_nulls_and_the_hyperparameters():
    view = RunConfig(publish_root="/p", job=JOB, blessing=BlessingConfig(min_improvement=0.01)).view()
    assert view["max_epochs"] == 30 and view["model_family"] == "linear"
    assert "warm_start_from" not in view["job_config"]["training"]
    assert view["blessing_config"] == {
        "thresholds": {},
        "beat_trivial": True,
        "min_improvement": 0.01,
        "confidence": 0.95,
        "reference_margin": 0.02,
        "directions": {},
        "leakage_threshold": 0.99,
        "allow_leakage": [],
        "importance_rows": 1000,
        "importance_repeats": 2,
        "slices": [],
        "slice_buckets": 4,
        "min_slice_rows": 20,
        "slice_thresholds": {},
        "slice_max_gap": {},
        "bootstrap_replicates": 1000,
        "bootstrap_seed": 0,
        "baseline_test": "paired",
    }
    assert view["publish_root"] == "/p" and view["prepare_options"] == {} and view["data"] == "embedded:penguins"


def test_from_specs_is_the_inverse_of_stage_specs():
    run = RunConfig(
        publish_root="/p",
        data="/d/rows.csv",
        label="y",
        task="regression",
        key_column="id",
        eval_fraction=0.3,
        prepare_options={"num_shards": 4, "missing_values": ["?"]},
        job=JOB,
        validation=ValidationConfig(on_breach="warn"),
        baseline="/models/v1",
        predict_data="test",
    )
    again = RunConfig.from_specs(run.stage_specs(), "/p", "/models/v1", "none")
    assert again == run
    assert again.stage_specs() == run.stage_specs()


def test_without_nulls():
    assert without_nulls({"a": None, "b": {"c": None, "d": [1, {"e": None}]}}) == {"b": {"d": [1, {}]}}


def test_resolve_run_is_the_one_resolution():
    run = resolve_run(
        {"training": {"train_steps": 5}, "prepare": {"eval_fraction": 0.3, "num_shards": 3}},
        ["model.hidden_units=8", "prepare.label=island"],
        {"publish_root": "/p", "task": None},
        {"tpu.strict": True},
    )
    assert run.job.training.train_steps == 5 and run.job.model.hidden_units == (8,) and run.job.tpu.strict
    assert (run.eval_fraction, run.label, run.task, run.prepare_options) == (0.3, "island", "auto", {"num_shards": 3})
    with pytest.raises(ConfigError, match=r"^--label y and --set prepare.label=island disagree; give one of them$"):
        resolve_run(None, ["prepare.label=island"], {"publish_root": "/p", "label": "y"})
    with pytest.raises(ConfigError, match=r"prepare.data=\['a', 'b'\]: a run prepares one path or glob"):
        resolve_run({"prepare": {"data": ["a", "b"]}}, [], {"publish_root": "/p"})
    with pytest.raises(ConfigError, match=r"prepare_options set \['label'\], which the run sets itself"):
        RunConfig(publish_root="/p", prepare_options={"label": "y"})


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
        "beam": {},
    }


def test_a_user_model_run_has_importance_off_unless_set():
    user = ["model.model_fn=m.model:model_fn"]
    assert resolve_configs(None, user)["blessing"].importance_rows is None
    assert resolve_configs(None, [*user, "blessing.importance_rows=200"])["blessing"].importance_rows == 200
    assert resolve_configs({"blessing": {"importance_rows": 300}}, user)["blessing"].importance_rows == 300
    assert resolve_configs(None, [])["blessing"].importance_rows == BlessingConfig().importance_rows == 1000


def test_a_user_model_runs_view_shows_only_the_settings_it_reads():
    user = ["model.model_fn=m.model:model_fn", 'model.hparams={"units": 8}', "training.train_steps=9"]
    given = {"publish_root": "/p", "data": "gs://b/r.tfrecord", "label": "y", "feature_spec": "gs://b/spec.json"}
    view = resolve_run(None, [*user, "blessing.comparison_metric=accuracy"], given).view()
    assert sorted(view["job_config"]["model"]) == ["hparams", "model_fn"]
    assert "optimizer" not in view["job_config"]["training"] and "early_stopping" not in view["job_config"]["training"]
    assert view["job_config"]["training"]["train_steps"] == 9
    assert not {"beat_trivial", "confidence", "reference_metric", "bootstrap_seed"} & set(view["blessing_config"])
    assert view["validation_config"] == {} and "model_family" not in view
    builtin = resolve_run(None, [], {"publish_root": "/p"}).view()
    assert builtin["job_config"]["model"]["family"] == "dnn" and "optimizer" in builtin["job_config"]["training"]
    assert builtin["blessing_config"]["beat_trivial"] is True and builtin["validation_config"]


def test_resolve_configs_refuses_what_is_not_an_object():
    with pytest.raises(ConfigError, match="the config file must hold a JSON object, got list"):
        resolve_configs([1], [])
    with pytest.raises(ConfigError, match="config section 'blessing' must be a JSON object"):
        resolve_configs({"blessing": 3}, [])


def test_a_threshold_metric_the_task_does_not_have_is_refused_before_any_work():
    from estimator_lib.config.blessing import BlessingError

    rmse = BlessingConfig(thresholds={"rmse": 0.1})
    for given in ({}, {"task": "classification", "data": "x.csv", "label": "y"}):  # the penguins' species; a task
        with pytest.raises(BlessingError, match=r"\['rmse'\] do not apply to a classification label"):
            RunConfig(publish_root="/tmp/p", blessing=rmse, **given)
    RunConfig(
        publish_root="/tmp/p", blessing=rmse, task="regression", data="x.csv", label="y"
    )  # holds for a regression label
    RunConfig(
        publish_root="/tmp/p", blessing=rmse, data="x.csv", label="y"
    )  # the task is inferred from the data: checked at evaluate
