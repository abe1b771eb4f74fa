"""`estimator_lib.config.stages`: one frozen spec per stage, as one JSON parameter decoded with exact types."""

from __future__ import annotations

import pytest

from estimator_lib.config import ConfigError, JobConfig
from estimator_lib.config.prepare import PrepareConfig
from estimator_lib.config.stages import EvaluateSpec, PredictSpec, PrepareSpec, TrainSpec


def test_each_spec_round_trips_through_one_line_of_json_with_its_types():
    train = TrainSpec(JobConfig().with_overrides({"model.hidden_units": (64, 32), "training.train_steps": 300}))
    text = train.to_json(indent=None)
    assert "\n" not in text and '"hidden_units":[64,32]' in text and '"train_steps":300' in text
    back = TrainSpec.from_json(text)
    assert back == train and type(back.job.training.train_steps) is int
    assert back.job.model.hidden_units == (64, 32)
    for spec in (PrepareSpec(PrepareConfig(data=["a.csv"], label="y")), EvaluateSpec(), PredictSpec(data="test")):
        assert type(spec).from_json(spec.to_json(indent=None)) == spec


def test_a_float_where_an_int_is_declared_is_refused_not_repaired():
    text = TrainSpec().to_json(indent=None).replace('"train_batch_size":64', '"train_batch_size":64.0')
    with pytest.raises(ConfigError, match="train_batch_size"):
        TrainSpec.from_json(text)


@pytest.mark.parametrize("spec", [PrepareSpec, PredictSpec])
def test_an_unknown_engine_is_refused(spec):
    with pytest.raises(ConfigError, match="engine"):
        spec(PrepareConfig(data=["a.csv"], label="y"), engine="spark") if spec is PrepareSpec else spec(engine="spark")
