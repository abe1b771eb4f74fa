"""Configs: validation at construction with fix-it messages, JSON round trip, overrides."""

from __future__ import annotations

import pytest
import synthetic

from estimator_lib.config import (
    BlessingConfig,
    ConfigError,
    EarlyStoppingConfig,
    JobConfig,
    ModelConfig,
    OptimizerConfig,
    PrepareConfig,
    TPUSettings,
    TrainingConfig,
    parse_override,
    set_dotted,
)
from estimator_lib.model.model_fn import build_model_fn

TPU8 = TPUSettings(use_tpu=True, tpu_name="local", num_cores=8, iterations_per_loop=100)


def test_json_round_trip_is_exact():
    job = JobConfig(
        tpu=TPU8,
        training=TrainingConfig(
            train_batch_size=128, optimizer=OptimizerConfig(name="momentum", schedule="cosine_decay")
        ),
        model=ModelConfig(family="dnn", features=("x 1", "colour"), hidden_units=(32, 16), hparams={"a": [1, 2]}),
    )
    again = JobConfig.from_json(job.to_json())
    assert again == job
    assert again.model.features == ("x 1", "colour") and again.model.hidden_units == (32, 16)


def test_indivisible_global_batch_is_rejected_with_the_fix():
    with pytest.raises(ConfigError) as e:
        JobConfig(tpu=TPU8, training=TrainingConfig(train_batch_size=12))
    assert str(e.value) == (
        "training.train_batch_size=12 is not divisible by tpu.num_cores=8 (the TPU replicas): "
        "use a multiple of 8, e.g. 8"
    )
    with pytest.raises(ConfigError, match=r"training.eval_batch_size=100 is not divisible by tpu.num_cores=8"):
        JobConfig(tpu=TPU8, training=TrainingConfig(eval_batch_size=100))
    assert JobConfig(training=TrainingConfig(train_batch_size=12)).training.train_batch_size == 12  # CPU: 1 replica


def test_checkpoint_cadence_must_be_a_multiple_of_iterations_per_loop():
    with pytest.raises(ConfigError) as e:
        JobConfig(tpu=TPUSettings(iterations_per_loop=100), training=TrainingConfig(save_checkpoints_steps=250))
    assert str(e.value) == (
        "training.save_checkpoints_steps=250 is not a multiple of tpu.iterations_per_loop=100: checkpoints are "
        "only written between TPU loops; use a multiple of 100, e.g. 200"
    )


def test_unknown_model_family_is_rejected():
    with pytest.raises(ConfigError, match=r"model.family='boosted_trees' is unknown; use one of \('linear', 'dnn'\)"):
        ModelConfig(family="boosted_trees")


def test_unknown_feature_is_rejected_when_the_model_fn_is_built():
    job = JobConfig(model=ModelConfig(features=("x 1", "wingspan")))
    with pytest.raises(ConfigError) as e:
        build_model_fn(synthetic.make_schema("binary"), job)
    assert "model.features: unknown feature 'wingspan'; the schema has: ['x 1', 'x-2', 'colour']" in str(e.value)


def test_unloadable_plugin_is_rejected_when_the_model_fn_is_built():
    job = JobConfig(model=ModelConfig(family="no_such_module:fn"))
    with pytest.raises(ValueError, match=r"cannot import module 'no_such_module'"):
        build_model_fn(synthetic.make_schema("binary"), job)
    with pytest.raises(ValueError, match=r"module 'plugin_model' has no function 'nope'"):
        build_model_fn(synthetic.make_schema("binary"), JobConfig(model=ModelConfig(family="plugin_model:nope")))


@pytest.mark.parametrize(
    "build, message",
    [
        (lambda: TPUSettings(use_tpu=True), "tpu.tpu_name is required when tpu.use_tpu=True; use 'local'"),
        (lambda: TPUSettings(num_cores=0), "tpu.num_cores=0 must be a positive integer"),
        (lambda: TPUSettings(per_host_input="PER_HOST_V9"), "tpu.per_host_input='PER_HOST_V9' is not one of"),
        (lambda: OptimizerConfig(name="lion"), "optimizer.name='lion' is unknown; use one of"),
        (lambda: OptimizerConfig(learning_rate=0), "optimizer.learning_rate=0 must be a number > 0"),
        (lambda: TrainingConfig(train_steps=-5), "training.train_steps=-5 must be a positive integer"),
        (lambda: TrainingConfig(seed=-1), "training.seed=-1 must be an integer in [0, 2**31)"),
        (lambda: ModelConfig(dropout=1.0), "model.dropout=1.0 must be in [0, 1)"),
        (lambda: ModelConfig(hidden_units=(0,)), "model.hidden_units=[0] must be positive integers"),
        (lambda: JobConfig.from_dict({"training": {"steps": 3}}), "unknown field(s) ['steps'] in TrainingConfig"),
        (lambda: TrainingConfig(max_epochs=0), "training.max_epochs=0 must be a positive integer"),
        (lambda: EarlyStoppingConfig(patience=0), "training.early_stopping.patience=0 must be a positive integer"),
        (lambda: EarlyStoppingConfig(every_steps=-1), "training.early_stopping.every_steps=-1 must be a positive"),
        (lambda: EarlyStoppingConfig(min_delta=-0.1), "training.early_stopping.min_delta=-0.1 must be a number >= 0"),
        (
            lambda: JobConfig.from_dict({"training": {"early_stopping": {"patients": 3}}}),
            "unknown field(s) ['patients'] in EarlyStoppingConfig",
        ),
        (
            lambda: PrepareConfig(data="d.csv", label="y", valid_fraction=1.0),
            "valid_fraction=1.0 must be in [0, 1), e.g. 0.1 (0: no validation split)",
        ),
        (
            lambda: PrepareConfig(data="d.csv", label="y", eval_fraction=0.5, valid_fraction=0.5),
            "prepare.eval_fraction + test_fraction + valid_fraction = 1 leaves no training rows; "
            "keep their sum below 1 (prepare.eval_fraction=0.5, prepare.test_fraction=0.0, prepare.valid_fraction=0.5)",
        ),
        (
            lambda: BlessingConfig(confidence=0.4),
            "confidence=0.4 must be a number in [0.5, 1), e.g. 0.95 (0.5: a plain comparison",
        ),
        (
            lambda: BlessingConfig(reference_margin=-0.01),
            "reference_margin=-0.01 must be a finite number >= 0, e.g. 0.02, or null to skip the comparison",
        ),
        (lambda: BlessingConfig(reference_metric="f1"), "unknown blessing metric 'f1'"),
        (
            lambda: BlessingConfig(importance_rows=5),
            "blessing.importance_rows=5 must be a whole number >= 10, e.g. 1000 (the eval rows feature importance is "
            "measured on), or null to skip feature importance",
        ),
        (
            lambda: BlessingConfig(importance_repeats=0),
            "blessing.importance_repeats=0 must be a whole number from 1 to 20, e.g. 2 (permutations of each feature",
        ),
    ],
)
def test_bad_values_name_the_field(build, message):
    with pytest.raises(ConfigError) as e:
        build()
    assert message in str(e.value)


def test_overrides_make_validated_variants():
    job = JobConfig()
    variant = job.with_overrides(
        dict([parse_override("training.train_steps=250"), parse_override("model.family=linear")])
    )
    assert (variant.training.train_steps, variant.model.family) == (250, "linear")
    assert job.training.train_steps is None  # frozen original unchanged
    with pytest.raises(ConfigError, match=r"--set training.stepz: unknown field 'stepz'"):
        job.with_overrides({"training.stepz": 1})
    with pytest.raises(ConfigError, match=r"not divisible by tpu.num_cores=8"):
        job.with_overrides({"tpu.use_tpu": True, "tpu.tpu_name": "local", "training.train_batch_size": 20})
    assert parse_override("model.hidden_units=[8, 4]") == ("model.hidden_units", [8, 4])


def test_set_dotted_is_strict_on_a_complete_dict_and_creates_sections_on_request():
    full = JobConfig().to_dict()
    set_dotted(full, "training.train_steps", 7)
    assert full["training"]["train_steps"] == 7
    with pytest.raises(
        ConfigError, match=r"'trainig' is not a config section; sections here: \['model', 'tpu', 'training'\]"
    ):
        set_dotted(full, "trainig.train_steps", 7)
    with pytest.raises(ConfigError, match=r"'train_steps' is not a config section"):
        set_dotted(full, "training.train_steps.x", 7)  # a field, not a section: never overwritten
    with pytest.raises(ConfigError, match="empty part"):
        set_dotted(full, "training..train_steps", 7)

    partial = {"model": {"family": "dnn"}}
    set_dotted(partial, "training.train_steps", 7, create=True)
    set_dotted(partial, "model.hidden_units", [4], create=True)
    assert partial == {"model": {"family": "dnn", "hidden_units": [4]}, "training": {"train_steps": 7}}
    with pytest.raises(ConfigError, match="'family' is not a config section"):
        set_dotted(partial, "model.family.x", 1, create=True)


def test_early_stopping_rounds_must_end_between_tpu_loops():
    with pytest.raises(ConfigError) as e:
        JobConfig(training=TrainingConfig(early_stopping=EarlyStoppingConfig(every_steps=150)))
    assert str(e.value) == (
        "training.early_stopping.every_steps=150 is not a multiple of tpu.iterations_per_loop=100: a round ends "
        "between TPU loops; use a multiple of 100, e.g. 200 (or null: the budget over about 10 rounds)"
    )


def test_the_budget_comes_from_epochs_unless_steps_are_given():
    training = TrainingConfig(max_epochs=10, train_batch_size=64)
    assert training.budget(1000) == 157  # ceil(10 * 1000 / 64)
    assert TrainingConfig(train_steps=300).budget(1000) == 300
    with pytest.raises(ConfigError) as e:
        training.budget(0)
    assert str(e.value) == (
        "training.train_steps is null, so the budget comes from the train split's row count, which is unknown or 0; "
        "pass the count (prepare's manifest) or set training.train_steps"
    )


def test_a_round_is_a_tenth_of_the_budget_rounded_up_to_whole_tpu_loops():
    job = JobConfig(tpu=TPUSettings(iterations_per_loop=50), training=TrainingConfig(max_epochs=10))
    assert job.for_data(100, 4).training.early_stopping.every_steps == 50  # 16 steps: one loop
    assert job.for_data(6400, 4).training.early_stopping.every_steps == 100  # 1000 steps: two loops
    assert job.for_data(6500, 4).training.early_stopping.every_steps == 150  # 1016 steps
    fixed = JobConfig(
        tpu=TPUSettings(iterations_per_loop=50), training=TrainingConfig(early_stopping={"every_steps": 200})
    )
    assert fixed.for_data(6500, 4).training.early_stopping.every_steps == 200


def test_new_defaults_round_trip_through_json_and_dotted_overrides():
    job = JobConfig().with_overrides({"training.early_stopping.patience": None, "training.max_epochs": 20})
    assert job.training.early_stopping == EarlyStoppingConfig(patience=None)
    assert JobConfig.from_json(job.to_json()) == job
    blessing = BlessingConfig(reference_margin=None, confidence=0.5, reference_metric="rmse")
    assert BlessingConfig.from_json(blessing.to_json()) == blessing
