"""`estimator_lib.config.job`: the job configs' own rules, exact messages, types checked when read from JSON, and
the values derived from them (replicas, budget, rounds). Cross-section rules beside these are in test_config.py."""

from __future__ import annotations

import pytest

from estimator_lib.config import (
    ConfigError,
    JobConfig,
    ModelConfig,
    OptimizerConfig,
    TPUSettings,
    TrainingConfig,
)


def test_replicas_are_the_tpu_cores_only_on_a_tpu():
    assert TPUSettings(num_cores=8).num_replicas == 1
    assert TPUSettings(use_tpu=True, tpu_name="local", num_cores=8).num_replicas == 8


@pytest.mark.parametrize(
    "fields, message",
    [
        ({"decay_rate": 0}, "training.optimizer.decay_rate=0 must be a number > 0, e.g. 0.5"),
        ({"end_learning_rate": -0.1}, "training.optimizer.end_learning_rate=-0.1 must be a number >= 0, e.g. 0.0"),
        ({"momentum": 1.0}, "training.optimizer.momentum=1.0 must be in [0, 1), e.g. 0.9"),
        ({"momentum": float("nan")}, "training.optimizer.momentum=nan must be in [0, 1), e.g. 0.9"),
        ({"warmup_steps": -1}, "training.optimizer.warmup_steps=-1 must be an integer >= 0"),
        ({"decay_steps": 0}, "training.optimizer.decay_steps=0 must be a positive integer"),
        ({"clip_gradient_norm": 0}, "training.optimizer.clip_gradient_norm=0 must be > 0 or null (no clipping)"),
        ({"schedule": "step"}, "training.optimizer.schedule='step' is unknown; use one of ('constant', "),
    ],
)
def test_optimizer_settings_name_the_whole_key(fields, message):
    with pytest.raises(ConfigError) as e:
        OptimizerConfig(**fields)
    assert str(e.value).startswith(message)


@pytest.mark.parametrize(
    "data, message",
    [
        ({"model": {"hidden_units": 64}}, "model.hidden_units=64 must be a list of integers (e.g. 64,32)"),
        ({"model": {"hidden_units": [64.0]}}, "model.hidden_units=[64.0] must be a list of integers (e.g. 64,32)"),
        ({"training": {"train_steps": 300.0}}, "training.train_steps=300.0 must be an integer or null"),
        ({"tpu": {"use_tpu": "yes"}}, "tpu.use_tpu='yes' must be true or false"),
        (
            {"training": {"optimizer": {"learning_rate": "0.1"}}},
            "training.optimizer.learning_rate='0.1' must be a number",
        ),
        ({"training": 5}, "training must be a JSON object, got int"),
    ],
)
def test_a_job_read_from_json_takes_its_declared_types_only(data, message):
    with pytest.raises(ConfigError) as e:
        JobConfig.from_dict(data)
    assert str(e.value) == message


def test_a_job_read_from_json_keeps_ints_and_tuples():
    job = JobConfig.from_dict({"model": {"hidden_units": [16, 8]}, "training": {"optimizer": {"learning_rate": 1}}})
    assert job.model.hidden_units == (16, 8) and job.training.optimizer.learning_rate == 1.0
    assert type(job.training.optimizer.learning_rate) is float
    assert JobConfig.from_json(job.to_json()) == job


def test_with_overrides_makes_a_validated_variant():
    job = JobConfig().with_overrides({"model.hidden_units": [8], "training.train_steps": 5})
    assert (job.model.hidden_units, job.training.train_steps) == ((8,), 5)
    with pytest.raises(ConfigError) as e:
        JobConfig().with_overrides({"model.hidden_unit": [8]})
    assert str(e.value).endswith("did you mean 'hidden_units'?")


def test_budget_and_rounds():
    assert TrainingConfig(max_epochs=2, train_batch_size=64).budget(100) == 4  # ceil(2 * 100 / 64)
    job = JobConfig(tpu=TPUSettings(iterations_per_loop=10), training=TrainingConfig(train_batch_size=8))
    assert job.round_steps(100) == 20  # 13 steps an epoch, rounded up to whole loops of 10


def test_model_lists_become_tuples():
    model = ModelConfig(hidden_units=[4, 2], features=["a"])
    assert model.hidden_units == (4, 2) and model.features == ("a",)
