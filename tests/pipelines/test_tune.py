"""`tpu-pipeline tune`'s parts that need no training: the space checked against the run, the default trial, the
seeded sampler, the table, and the metric file a Vertex AI trial reports to."""

from __future__ import annotations

import dataclasses
import json

import pytest
import tensorflow as tf

from estimator_lib.config import ConfigError
from estimator_lib.config.run import resolve_run
from estimator_lib.config.tuning import load_space
from estimator_lib.data import prepare
from estimator_lib.data.embedded import default_dataset
from estimator_lib.engine.tuning import report_metric
from pipelines import cli, tune, tune_trial
from pipelines.cli.settings import resolve_local_settings

SPACE = """
metric: accuracy
parameters:
  training.optimizer.learning_rate: {type: float, min: 0.0003, max: 0.03, scale: log}
  model.hidden_units: {type: categorical, values: ["32", "64,32"]}
"""


def resolver(tmp_path, *flags: str):
    args = cli.build_parser().parse_args(["tune", "--space", "s.yaml", *flags])
    given = list(args.overrides)

    def resolve(extra):
        args.overrides = [*given, *extra]
        return resolve_local_settings(args, str(tmp_path))

    return resolve


def trial(number, objective, default=False):
    values = {"training.optimizer.learning_rate": 0.001, "model.hidden_units": "32"}
    overrides = ("training.optimizer.learning_rate=0.001", "model.hidden_units=32")
    return tune.Trial(number, values, overrides, objective, {"accuracy": objective}, default, 100, "budget")


def test_the_default_config_is_the_first_trial_when_the_space_holds_it(tmp_path):
    space = load_space("s.yaml", SPACE)
    settings = tune.check_space(space, resolver(tmp_path))
    assert tune.default_values(space, settings.job) == {
        "training.optimizer.learning_rate": 0.001,
        "model.hidden_units": "64,32",
    }
    study = tune.make_study(space, 42, 6)
    study.enqueue_trial(tune.default_values(space, settings.job))
    assert study.ask(tune.distributions(space)).params == {
        "training.optimizer.learning_rate": 0.001,
        "model.hidden_units": "64,32",
    }


def test_no_trial_is_the_default_when_a_default_lies_outside_the_space(tmp_path):
    space = load_space("s.yaml", "parameters:\n  model.hidden_units: {type: categorical, values: ['32', '16']}")
    settings = tune.check_space(space, resolver(tmp_path))
    assert tune.default_values(space, settings.job) is None


def test_the_seeded_sampler_asks_the_same_values_again():
    space = load_space("s.yaml", SPACE)
    asked = []
    for _ in range(2):
        study = tune.make_study(space, 7, 6)
        params = []
        for value in range(4):
            t = study.ask(tune.distributions(space))
            params.append(t.params)
            study.tell(t, float(value))
        asked.append(params)
    assert asked[0] == asked[1]
    assert len({json.dumps(p, sort_keys=True) for p in asked[0]}) == 4


def test_an_edge_of_the_space_that_makes_an_invalid_run_is_refused_before_anything_trains(tmp_path):
    space = load_space("s.yaml", "parameters:\n  training.optimizer.learning_rate: {type: float, min: 0, max: 0.1}")
    with pytest.raises(ConfigError) as raised:
        tune.check_space(space, resolver(tmp_path))
    assert str(raised.value) == (
        "--space s.yaml: parameter training.optimizer.learning_rate=0: training.optimizer.learning_rate=0.0 must be "
        "a number > 0, e.g. 0.01"
    )


def test_a_model_fn_hyperparameter_on_a_built_in_family_is_refused(tmp_path):
    space = load_space("s.yaml", "parameters:\n  hparams.units: {type: int, min: 8, max: 64}")
    with pytest.raises(ConfigError, match=r"parameter hparams.units is a hyperparameter of your own model_fn"):
        tune.check_space(space, resolver(tmp_path))


def test_the_best_trial_wins_and_a_tie_goes_to_the_earlier_one():
    trials = [trial(0, 0.9, default=True), trial(1, 0.95), trial(2, 0.95)]
    assert tune._best(trials, higher_is_better=True).number == 1
    assert tune._best(trials, higher_is_better=False).number == 0


def test_the_table_shows_each_trial_its_values_and_objective_then_the_winner():
    space = load_space("s.yaml", SPACE)
    trials = [trial(0, 0.9655, default=True), trial(1, 1.0)]
    assert tune.format_trials(space, trials, trials[1]).splitlines() == [
        "trial        training.optimizer.learning_rate  model.hidden_units  accuracy",
        "0 (default)  0.0010                            32                  0.9655",
        "1            0.0010                            32                  1.000",
        "winner: trial 1 (accuracy=1.000, higher is better): --set training.optimizer.learning_rate=0.001 --set "
        "model.hidden_units=32; it now runs the whole pipeline (evaluate, bless, release)",
    ]


def test_a_vertex_trial_reports_its_metric_in_the_hypertune_file(tmp_path):
    path = str(tmp_path / "hypertune" / "output.metrics")
    environ = {"CLOUD_ML_HP_METRIC_FILE": path, "CLOUD_ML_TRIAL_ID": "3"}
    assert report_metric("accuracy", 0.75, 200, environ) == path
    report_metric("accuracy", 1, 300, environ)
    lines = [json.loads(line) for line in open(path, encoding="utf-8")]
    assert [{k: v for k, v in line.items() if k != "timestamp"} for line in lines] == [
        {"trial": "3", "accuracy": "0.75", "global_step": "200", "checkpoint_path": ""},
        {"trial": "3", "accuracy": "1.0", "global_step": "300", "checkpoint_path": ""},
    ]


@pytest.mark.slow
def test_a_vertex_trial_trains_the_spec_with_its_values_and_reports_the_validation_metric(tmp_path, monkeypatch):
    settings = resolve_run(None, ["training.train_steps=100", "prepare.num_workers=1"], {"publish_root": "-"})
    dataset = str(tmp_path / "prepared")
    config = settings.prepare_config()
    prepare.prepare(dataclasses.replace(config, data=(default_dataset().path,)), dataset)
    metric_file = str(tmp_path / "hypertune" / "output.metrics")
    monkeypatch.setenv("CLOUD_ML_HP_METRIC_FILE", metric_file)
    space = load_space("s.yaml", SPACE)
    argv = ["--dataset", dataset, "--spec", settings.arguments()["train_spec"], "--tpu", '{"use_tpu": false}']
    argv += ["--space", space.to_json(), "--output", str(tmp_path / "trial")]
    assert tune_trial.main([*argv, "--training__optimizer__learning_rate=0.01", "--model__hidden_units=32"]) == 0

    shapes = dict(tf.train.list_variables(str(tmp_path / "trial" / "model")))
    assert (shapes["dnn/hidden_0/bias"], "dnn/hidden_1/bias" in shapes) == ([32], False)  # hidden_units=32
    [line] = [json.loads(text) for text in open(metric_file, encoding="utf-8")]
    assert line["global_step"] == "100" and 0.5 < float(line["accuracy"]) <= 1.0
