"""Search space files: what they hold once checked, and the message of each mistake (naming the file, the key and
what was expected)."""

from __future__ import annotations

import pytest

from estimator_lib.config import ConfigError, JobConfig, ModelConfig
from estimator_lib.config.tuning import (
    Parameter,
    SearchSpace,
    best_trial,
    check_tunable,
    load_space,
    trial_values,
)

SPACE = """
metric: accuracy
parameters:
  training.optimizer.learning_rate: {type: float, min: 0.0003, max: 0.03, scale: log}
  model.hidden_units: {type: categorical, values: ["64,32", [32], "16,16"]}
  model.embedding_dim: {type: int, min: 4, max: 16}
"""


def test_a_yaml_space_keeps_its_parameters_in_file_order():
    space = load_space("space.yaml", SPACE)
    assert space == SearchSpace(
        "space.yaml",
        "accuracy",
        (
            Parameter("training.optimizer.learning_rate", "float", 0.0003, 0.03, "log"),
            Parameter("model.hidden_units", "categorical", values=("64,32", "[32]", "16,16")),
            Parameter("model.embedding_dim", "int", 4, 16),
        ),
        "maximize",
    )
    assert space.higher_is_better


def test_a_json_space_defaults_to_the_validation_loss_which_is_lower_is_better():
    space = load_space("space.json", '{"parameters": {"model.dropout": {"type": "float", "min": 0, "max": 0.5}}}')
    assert (space.metric, space.higher_is_better) == ("loss", False)
    assert space.parameters == (Parameter("model.dropout", "float", 0, 0.5),)


def test_a_trials_values_become_set_texts_and_hyperparameters_merge_into_model_hparams():
    space = load_space(
        "s.yaml",
        "parameters:\n  hparams.units: {type: int, min: 8, max: 64}\n"
        "  hparams.act: {type: categorical, values: [relu, tanh]}\n"
        "  training.optimizer.learning_rate: {type: float, min: 0.001, max: 0.1}",
    )
    values = {"hparams.units": 16, "hparams.act": "tanh", "training.optimizer.learning_rate": 0.01}
    assert space.overrides(values, {"depth": 2, "units": 4}) == [
        "training.optimizer.learning_rate=0.01",
        'model.hparams={"act": "tanh", "depth": 2, "units": 16}',
    ]
    assert space.hparam_keys == ("hparams.units", "hparams.act")


@pytest.mark.parametrize(
    "text, message",
    [
        (
            "parameters:\n  training.optimizer.learnin_rate: {type: float, min: 0.001, max: 0.1}",
            "--space s.yaml: parameter training.optimizer.learnin_rate: --set training.optimizer.learnin_rate: "
            "unknown field 'learnin_rate'; known here: ['clip_gradient_norm', 'decay_rate', 'decay_steps', "
            "'end_learning_rate', 'learning_rate', 'momentum', 'name', 'schedule', 'warmup_steps']; did you mean "
            "'learning_rate'?",
        ),
        (
            "parameters:\n  learning_rate: {type: float, min: 0.001, max: 0.1}",
            "--space s.yaml: parameter learning_rate: --set learning_rate: unknown section 'learning_rate'; sections: "
            "['beam', 'blessing', 'model', 'predict', 'prepare', 'tpu', 'training', 'validation']; did you mean "
            "'training.optimizer.learning_rate'?",
        ),
        (
            "parameters:\n  prepare.num_shards: {type: int, min: 1, max: 4}",
            "--space s.yaml: parameter prepare.num_shards: a trial reuses the run's prepared data and is judged before "
            "any blessing, so it varies model.* or training.* settings (or hparams.* of your model_fn), not prepare.*",
        ),
        (
            "parameters:\n  model.embedding_dim: {type: float, min: 1.5, max: 3}",
            "--space s.yaml: parameter model.embedding_dim: --set model.embedding_dim=1.5: '1.5' is not an integer",
        ),
        (
            "parameters:\n  model.hidden_units: {type: categorical, values: [wide]}",
            "--space s.yaml: parameter model.hidden_units: --set model.hidden_units=wide: 'wide' is not a list of "
            "integers (e.g. 64,32)",
        ),
        (
            "parameters:\n  model.embedding_dim: {type: int, min: 4, max: 16, step: 2}",
            "--space s.yaml: parameter model.embedding_dim: unknown field of an int parameter 'step'; expected "
            "['type', 'min', 'max', 'scale']",
        ),
        (
            "parameters:\n  model.embedding_dim: {type: integer, min: 4, max: 16}",
            "--space s.yaml: parameter model.embedding_dim: type 'integer' is not one of ['float', 'int', "
            "'categorical']",
        ),
        (
            "parameters:\n  model.dropout: {type: float, min: 0.5, max: 0.1}",
            "--space s.yaml: parameter model.dropout: min=0.5 must be below max=0.1",
        ),
        (
            "parameters:\n  model.l2: {type: float, min: 0, max: 0.1, scale: log}",
            "--space s.yaml: parameter model.l2: scale log needs min > 0, got min=0",
        ),
        (
            "parameters:\n  model.hidden_units: {type: categorical, values: [32, '32']}",
            "--space s.yaml: parameter model.hidden_units: values [32, '32'] repeat a value; list each once",
        ),
        (
            "metric: acuracy\nparameters:\n  model.l2: {type: float, min: 0, max: 0.1}",
            "--space s.yaml: metric 'acuracy' is not in the metric vocabulary (docs/metrics.md): ['accuracy', "
            "'log_loss', 'auc', 'precision', 'recall', 'auc_pr', 'precision/<class>', 'recall/<class>', 'auc/<class>', "
            "'auc_pr/<class>', 'macro_precision', 'macro_recall', 'macro_auc_pr', 'rmse', 'mae', 'mse', 'r2', 'loss']; "
            "did you mean 'accuracy'? For a metric of your own model_fn's metric_fn, give its direction: direction: "
            "maximize (or minimize)",
        ),
        (
            "metric: accuracy\ndirection: minimize\nparameters:\n  model.l2: {type: float, min: 0, max: 0.1}",
            "--space s.yaml: metric 'accuracy' is better higher (docs/metrics.md), and direction says minimize: "
            "remove direction (a name of the vocabulary has its own), or rename your metric",
        ),
        (
            "metric: nll\ndirection: lower\nparameters:\n  model.l2: {type: float, min: 0, max: 0.1}",
            "--space s.yaml: direction 'lower' is not one of ['maximize', 'minimize']",
        ),
        (
            "objective: accuracy\nparameters: {}",
            "--space s.yaml: unknown top-level key 'objective'; expected ['metric', 'direction', 'parameters']",
        ),
        (
            "metric: accuracy",
            "--space s.yaml: 'parameters' must map each setting to its values, e.g. {training.optimizer.learning_rate: "
            "{type: float, min: 0.0001, max: 0.1, scale: log}}",
        ),
        ("[1, 2]", "--space s.yaml: must hold an object with ['metric', 'direction', 'parameters'], got list"),
        ("parameters: {a: [", "--space s.yaml: not valid YAML or JSON"),
    ],
)
def test_a_mistake_names_the_file_the_key_and_what_was_expected(text, message):
    with pytest.raises(ConfigError) as raised:
        load_space("s.yaml", text)
    assert str(raised.value).startswith(message), str(raised.value)


def test_the_json_form_reads_back_as_the_same_space():
    space = load_space("space.yaml", SPACE)
    assert load_space("space.yaml", space.to_json()) == space


def test_a_vertex_trials_values_apply_to_the_job_by_the_settings_types():
    space = load_space("space.yaml", SPACE)
    given = {
        "training__optimizer__learning_rate": "0.01",
        "model__hidden_units": "16,16",
        "model__embedding_dim": "6.0",
    }
    job = space.trial_job(JobConfig(), given)
    assert (job.training.optimizer.learning_rate, job.model.hidden_units, job.model.embedding_dim) == (
        0.01,
        (16, 16),
        6,
    )
    with pytest.raises(ConfigError, match=r"^trial: no value for --model__embedding_dim \(model.embedding_dim\)"):
        space.trial_job(JobConfig(), {k: v for k, v in given.items() if k != "model__embedding_dim"})


def _vertex_trial(number, state, value, units):
    measurement = {"metrics": [{"metric_id": "accuracy", "value": value}]} if value is not None else {}
    parameters = [{"parameter_id": "model__hidden_units", "value": units}]
    return {"id": str(number), "state": state, "parameters": parameters, "final_measurement": measurement}


def test_the_best_vertex_trial_is_the_first_succeeded_one_of_the_best_value():
    space = load_space(
        "s.yaml", "metric: accuracy\nparameters:\n  model.hidden_units: {type: categorical, values: ['32', '16']}"
    )
    trials = [
        _vertex_trial(1, "SUCCEEDED", 0.9, "32"),
        _vertex_trial(2, "INFEASIBLE", 1.0, "16"),
        _vertex_trial(3, "SUCCEEDED", 0.95, "16"),
        _vertex_trial(4, "SUCCEEDED", 0.95, "32"),
    ]
    best = best_trial(trials, space)
    assert (best["id"], trial_values(best)) == ("3", {"model__hidden_units": "16"})
    with pytest.raises(ConfigError, match=r"^no trial of the tuning job succeeded with a measurement of 'accuracy'"):
        best_trial([_vertex_trial(1, "SUCCEEDED", None, "32")], space)


USER_JOB = JobConfig(model=ModelConfig(model_fn="my_model.model:model_fn"))


def test_a_user_metric_has_the_direction_the_file_gives_and_a_vocabulary_name_its_own():
    space = load_space(
        "s.yaml", "metric: nll\ndirection: minimize\nparameters:\n  hparams.units: {type: int, min: 8, max: 64}"
    )
    assert (space.metric, space.direction, space.higher_is_better) == ("nll", "minimize", False)
    assert load_space("s.yaml", space.to_json()) == space
    check_tunable(space, USER_JOB)
    assert load_space(
        "s.yaml", "metric: auc\ndirection: maximize\nparameters: {hparams.a: {type: int, min: 1, max: 2}}"
    ).higher_is_better


@pytest.mark.parametrize(
    "text, job, message",
    [
        (
            "metric: accuracy\nparameters:\n  model.hidden_units: {type: categorical, values: ['32']}",
            USER_JOB,
            "--space s.yaml: parameter model.hidden_units is a setting your model_fn (my_model.model:model_fn) does "
            "not read: tune its hyperparameters (hparams.NAME, as --hparams NAME=... gives them) or the training "
            "settings it reads (e.g. training.train_batch_size)",
        ),
        (
            "metric: accuracy\nparameters:\n  training.optimizer.learning_rate: {type: float, min: 0.01, max: 0.1}",
            USER_JOB,
            "--space s.yaml: parameter training.optimizer.learning_rate is a setting your model_fn",
        ),
        (
            "parameters:\n  hparams.units: {type: int, min: 8, max: 64}",
            USER_JOB,
            "--space s.yaml: metric 'loss' is a built-in family's validation loss; your model_fn is judged by its "
            "metric_fn: name one of its metrics (metric: accuracy), with its direction when the name is not in "
            "docs/metrics.md (direction: maximize or minimize)",
        ),
        (
            "metric: accuracy\nparameters:\n  hparams.units: {type: int, min: 8, max: 64}",
            JobConfig(),
            "--space s.yaml: parameter hparams.units is a hyperparameter of your own model_fn, and this run trains a "
            "built-in family (no --model-fn): tune its settings, e.g. model.hidden_units",
        ),
        (
            "metric: nll\ndirection: minimize\nparameters:\n  model.l2: {type: float, min: 0, max: 0.1}",
            JobConfig(),
            "--space s.yaml: metric 'nll' is not in the metric vocabulary (docs/metrics.md), and a built-in family "
            "reports only its names: use one of them (a metric of your own is for your own --model-fn)",
        ),
    ],
)
def test_a_space_the_run_cannot_judge_is_refused_naming_what_it_can_tune(text, job, message):
    with pytest.raises(ConfigError) as raised:
        check_tunable(load_space("s.yaml", text), job)
    assert str(raised.value).startswith(message), str(raised.value)


def test_a_user_model_tunes_its_hyperparameters_and_the_training_settings_it_reads():
    space = load_space(
        "s.yaml",
        "metric: accuracy\nparameters:\n  hparams.units: {type: int, min: 8, max: 64}\n"
        "  training.train_batch_size: {type: categorical, values: [16, 32]}",
    )
    check_tunable(space, USER_JOB)
    job = space.trial_job(USER_JOB, {"hparams__units": "12.0", "training__train_batch_size": "16"})
    assert (dict(job.model.hparams), job.training.train_batch_size) == ({"units": 12}, 16)
