"""`estimator_lib.config.job`: the job configs' own rules, exact messages, types checked when read from JSON, and
the values derived from them (replicas, budget, rounds, the settings that follow the data). Cross-section rules
beside these are in test_config.py."""

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
from estimator_lib.config.job import EXAMPLES_PER_SQRT_ROW, L2_PER_FEATURE_ROW, MAX_L2, MIN_L2


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
    assert job.for_data(100, 3).training.early_stopping.every_steps == 200  # 1600 * sqrt(100) / 8 steps, 10 rounds
    job = JobConfig(tpu=TPUSettings(iterations_per_loop=10), training=TrainingConfig(max_epochs=9, train_batch_size=8))
    assert job.for_data(100, 3).training.early_stopping.every_steps == 20  # 113 steps / 10, up to whole loops of 10


def test_the_default_budget_is_examples_seen_growing_with_the_square_root_of_the_rows():
    training = TrainingConfig(train_batch_size=64)
    assert training.max_epochs is None and EXAMPLES_PER_SQRT_ROW == 1600
    assert training.budget(257) == 401  # ceil(1600 * sqrt(257) / 64): 100 passes over the embedded penguins
    assert training.budget(1260) == 888  # 45 passes over digits' train split
    assert training.budget(1_000_000) == 25_000  # 1.6 passes: bounded for a large table
    assert TrainingConfig(max_epochs=3).budget(1_000_000) == 46_875  # given passes win
    assert TrainingConfig(max_epochs=3, train_steps=7).budget(1_000_000) == 7  # and a given budget over both


def test_the_job_follows_the_data_where_its_settings_are_null():
    job = JobConfig().for_data(1260, 64)
    assert job.training.train_steps == 888
    assert job.training.early_stopping.every_steps == 100  # 888 / 10 rounds up to a whole loop of 100
    assert job.model.l2 == pytest.approx(L2_PER_FEATURE_ROW * 64 / 1260) and L2_PER_FEATURE_ROW == 0.04
    wide = JobConfig().for_data(403, 1000)
    assert wide.model.l2 == pytest.approx(0.04 * 1000 / 403)  # wider than long: regularised more
    assert JobConfig().for_data(100_000, 10).model.l2 == MIN_L2 == 0.001  # long and narrow: the floor
    assert JobConfig().for_data(200, 5000).model.l2 == MAX_L2 == 0.1  # past it the DNN collapses to the prior
    large = JobConfig().for_data(1_000_000, 10).training
    assert (large.train_steps, large.early_stopping.every_steps) == (25_000, 2500)  # ten rounds, not one an epoch


def test_a_given_setting_wins_and_a_resolved_job_resolves_to_itself():
    given = JobConfig().with_overrides(
        {"training.train_steps": 300, "training.early_stopping.every_steps": 200, "model.l2": 0.0}
    )
    assert given.for_data(403, 1000) == given
    resolved = JobConfig().for_data(403, 1000)
    assert resolved.for_data(403, 1000) == resolved and resolved.for_data(50, 2) == resolved
    assert JobConfig.from_json(resolved.to_json()) == resolved


def test_a_user_model_fn_keeps_its_l2_null():
    job = JobConfig(model=ModelConfig(model_fn="my_model.model:model_fn")).for_data(403, 1000)
    assert job.model.l2 is None and job.training.train_steps == 502


def test_model_lists_become_tuples():
    model = ModelConfig(hidden_units=[4, 2], features=["a"])
    assert model.hidden_units == (4, 2) and model.features == ("a",)
