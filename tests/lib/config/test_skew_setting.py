"""`--set predict.*`: the skew check's settings reach the batch-predict stage's spec, and a bad key or value is
an error naming it."""

from __future__ import annotations

import pytest

from estimator_lib.config import ConfigError
from estimator_lib.config.run import resolve_run
from estimator_lib.config.skew import SkewConfig

GIVEN = {"publish_root": "/p"}


def test_predict_settings_reach_the_batch_predict_spec():
    run = resolve_run(None, ["predict.skew=block", 'predict.features={"island": {"max_unseen_share": 0.5}}'], GIVEN)
    spec = run.stage_specs().batch_predict
    assert spec.skew == SkewConfig(skew="block", features={"island": {"max_unseen_share": 0.5}})
    assert resolve_run(None, [], GIVEN).stage_specs().batch_predict.skew == SkewConfig()


@pytest.mark.parametrize(
    "override, message",
    [
        ("predict.skw=block", r"--set predict.skw: unknown field 'skw'.*did you mean 'skew'"),
        ("predict.skew=stop", r"predict.skew='stop' must be one of \['off', 'warn', 'block'\]"),
        ("predict.max_out_of_range=-0.1", r"predict.max_out_of_range=-0.1 must be a number >= 0"),
    ],
)
def test_a_bad_predict_setting_is_an_error_naming_it(override, message):
    with pytest.raises(ConfigError, match=message):
        resolve_run(None, [override], GIVEN)


def test_block_on_beam_reaches_the_batch_predict_spec():
    """The Beam engine runs the skew check too (its workers profile the rows): block is no longer refused there."""
    spec = resolve_run(None, ["predict.skew=block"], {**GIVEN, "engine": "beam"}).stage_specs().batch_predict
    assert (spec.engine, spec.skew) == ("beam", SkewConfig(skew="block"))
