"""Every field of every config type a run takes, set through `--set`: generated from the dataclasses.

For each field a valid value other than the run's default reaches the spec of the stage that consumes it (only the
resolution runs), and an invalid value makes the CLI exit 2 before any stage starts, naming the key. A field added
tomorrow is covered without editing this test, unless it is a text whose valid values only its config knows: then
`VALID` (and `INVALID`, or `FREE_TEXT`) must say them, and `test_every_field_is_generated` fails until they do.
"""

from __future__ import annotations

import dataclasses
import math
import typing
from typing import Any

import pytest

from estimator_lib.config import BlessingConfig, JobConfig, JsonConfig, PrepareConfig, ValidationConfig
from estimator_lib.config.beam import BeamConfig
from estimator_lib.config.run import LOCAL_JOB_DEFAULTS
from estimator_lib.config.stages import EvaluateSpec, PredictSpec, PrepareSpec, StageSpecs, TrainSpec
from pipelines import cli, local
from pipelines.cli.settings import resolve_beam

SECTIONS = (
    ("", JobConfig),
    ("prepare.", PrepareConfig),
    ("blessing.", BlessingConfig),
    ("validation.", ValidationConfig),
    ("beam.", BeamConfig),
)
DATAFLOW = [
    "beam.runner=DataflowRunner",
    "beam.project=my-project",
    "beam.region=europe-west4",
    "beam.temp_location=gs://bucket/tmp",
    "beam.sdk_container_image=repo/img@sha256:" + "a" * 64,
]
# A user model run (resolution only: a gs:// feature spec is read by the prepare stage).
USER_MODEL = [
    "model.model_fn=digits_cnn.model:model_fn",
    "prepare.feature_spec=gs://bucket/feature_spec.json",
    "prepare.data=gs://bucket/train.tfrecord",
    "prepare.label=label",
    "blessing.comparison_metric=accuracy",
]

# Fields whose valid values a type alone cannot give: [--set texts], and the value the spec then holds.
VALID: dict[str, tuple[list[str], Any]] = {
    "tpu.use_tpu": (["tpu.use_tpu=true", "tpu.tpu_name=local"], True),
    "tpu.tpu_name": (["tpu.tpu_name=my-tpu"], "my-tpu"),
    "tpu.zone": (["tpu.zone=us-central1-a"], "us-central1-a"),
    "tpu.project": (["tpu.project=my-project"], "my-project"),
    "tpu.iterations_per_loop": (["tpu.iterations_per_loop=50"], 50),  # checkpoints every 100 steps: a multiple
    "tpu.per_host_input": (["tpu.per_host_input=PER_HOST_V1"], "PER_HOST_V1"),
    "training.warm_start_from": (["training.warm_start_from=/models/v1"], "/models/v1"),
    "training.optimizer.name": (["training.optimizer.name=sgd"], "sgd"),
    "training.optimizer.schedule": (["training.optimizer.schedule=constant"], "constant"),
    "model.family": (["model.family=linear"], "linear"),
    "model.features": (["model.features=bill_length_mm,island"], ("bill_length_mm", "island")),
    "model.hidden_units": (["model.hidden_units=16,8"], (16, 8)),
    "model.hparams": (['model.hparams={"depth": 3}'], {"depth": 3}),
    "model.model_fn": (USER_MODEL, "digits_cnn.model:model_fn"),
    "model.code": ([*USER_MODEL, "model.code=/code"], "/code"),
    "model.input_fn": ([*USER_MODEL, "model.input_fn=digits_cnn.data:input_fn"], "digits_cnn.data:input_fn"),
    "tpu.strict_accept": (["tpu.strict_accept=cross-shard:*"], ("cross-shard:*",)),
    "prepare.feature_spec": (USER_MODEL, "gs://bucket/feature_spec.json"),
    "prepare.eval_data": ([*USER_MODEL, "prepare.eval_data=gs://bucket/eval.tfrecord"], ("gs://bucket/eval.tfrecord",)),
    "blessing.directions": ([*USER_MODEL, 'blessing.directions={"nll": "lower"}'], {"nll": "lower"}),
    "prepare.data": (["prepare.data=/rows/penguins.csv"], ("/rows/penguins.csv",)),
    "prepare.label": (["prepare.label=island"], "island"),
    "prepare.task": (["prepare.task=regression"], "regression"),
    "prepare.key_column": (["prepare.key_column=row_id"], "row_id"),
    "prepare.input_format": (["prepare.input_format=csv"], "csv"),
    "prepare.schema_uri": (["prepare.schema_uri=/schemas/schema.json"], "/schemas/schema.json"),
    "prepare.bad_rows": (["prepare.bad_rows=quarantine"], "quarantine"),
    "prepare.missing_values": (["prepare.missing_values=NA,?"], ("NA", "?")),
    "prepare.unknown_columns": (["prepare.unknown_columns=ignore"], "ignore"),
    "blessing.thresholds": (['blessing.thresholds={"accuracy": 0.9}'], {"accuracy": 0.9}),
    "blessing.confidence": (["blessing.confidence=0.9"], 0.9),
    "blessing.comparison_metric": (["blessing.comparison_metric=log_loss"], "log_loss"),
    "blessing.reference_metric": (["blessing.reference_metric=auc"], "auc"),
    "blessing.allow_leakage": (["blessing.allow_leakage=island,sex"], ("island", "sex")),
    "blessing.importance_rows": (["blessing.importance_rows=null"], None),  # feature importance off
    "blessing.slices": (['blessing.slices=["island", "island,sex"]'], ("island", "island,sex")),
    "blessing.slice_thresholds": (
        ["blessing.slices=island", 'blessing.slice_thresholds={"accuracy": 0.8}'],
        {"accuracy": 0.8},
    ),
    "blessing.slice_max_gap": (
        ["blessing.slices=island", 'blessing.slice_max_gap={"accuracy": 0.1}'],
        {"accuracy": 0.1},
    ),
    "blessing.baseline_test": (["blessing.baseline_test=plain"], "plain"),
    "validation.on_breach": (["validation.on_breach=warn"], "warn"),
    "validation.schema_changes": (["validation.schema_changes=warn"], "warn"),
    "beam.runner": (DATAFLOW, "DataflowRunner"),
    "beam.dask_num_workers": (["beam.runner=DaskRunner", "beam.dask_num_workers=3"], 3),
    "beam.project": (["beam.project=my-project"], "my-project"),
    "beam.region": (["beam.region=europe-west4"], "europe-west4"),
    "beam.temp_location": (["beam.temp_location=/tmp/beam"], "/tmp/beam"),
    "beam.machine_type": (["beam.machine_type=n2-standard-4"], "n2-standard-4"),
    "beam.sdk_container_image": (["beam.sdk_container_image=repo/img:1"], "repo/img:1"),
    "beam.service_account": (["beam.service_account=sa@p.iam"], "sa@p.iam"),
}
# Texts any value of which is valid (names, locations): no invalid value to try.
FREE_TEXT = {
    "tpu.tpu_name",
    "tpu.zone",
    "tpu.project",
    "training.warm_start_from",
    "prepare.schema_uri",
    "prepare.missing_values",
    "beam.project",
    "beam.region",
    "beam.temp_location",
    "beam.machine_type",
    "beam.sdk_container_image",
    "beam.service_account",
}
# Invalid values a type alone cannot give (choices, texts that must not be empty, collections).
INVALID: dict[str, str] = {
    "tpu.per_host_input": "PER_HOST_V9",
    "training.optimizer.name": "lion",
    "training.optimizer.schedule": "stepwise",
    "model.family": "boosted_trees",
    "model.features": "",
    "model.hidden_units": "64,0",
    "model.hparams": "[1, 2]",
    "model.model_fn": "digits_cnn.model",
    "model.code": "",
    "model.input_fn": "digits_cnn.data",
    "tpu.strict_accept": "cross-shard",
    "prepare.feature_spec": "spec.json",  # without a model_fn
    "prepare.eval_data": "eval.tfrecord",  # without a feature spec
    "blessing.directions": '{"nll": "up"}',
    "prepare.data": "",
    "prepare.label": "",
    "prepare.task": "ranking",
    "prepare.key_column": "species",  # the label
    "prepare.input_format": "parquet",
    "prepare.bad_rows": "drop",
    "prepare.unknown_columns": "keep",
    "blessing.thresholds": '{"f1": 0.9}',
    "blessing.comparison_metric": "f1",
    "blessing.reference_metric": "f1",
    "blessing.allow_leakage": "island,",  # an empty name
    "blessing.importance_rows": "5",  # too few rows to rank features
    "blessing.importance_repeats": "21",
    "blessing.slices": '["island,"]',  # an empty name in a cross
    "blessing.slice_thresholds": '{"accuracy": 0.8}',  # without a slice
    "blessing.slice_max_gap": '{"accuracy": -0.1}',
    "blessing.baseline_test": "bayesian",
    "validation.on_breach": "ignore",
    "validation.schema_changes": "ignore",
    "beam.runner": "SparkRunner",
}


def leaves(cls: Any, prefix: str) -> list[tuple[str, Any]]:
    """(dotted key, declared type) of every field of config type `cls`, nested configs walked into."""
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        hint = hints[f.name]
        if isinstance(hint, type) and issubclass(hint, JsonConfig):
            out += leaves(hint, f"{prefix}{f.name}.")
        else:
            out.append((f"{prefix}{f.name}", hint))
    return out


FIELDS = dict(leaf for prefix, cls in SECTIONS for leaf in leaves(cls, prefix))


def resolve(*overrides: str):
    args = cli.build_parser().parse_args(["run-local", *[a for o in overrides for a in ("--set", o)]])
    return cli.resolve_settings(args, "/published", local.local_job_defaults())


def lookup(config: Any, dotted: str) -> Any:
    for part in dotted.split("."):
        config = getattr(config, part)
    return config


def carried(specs: StageSpecs, key: str) -> Any:
    """The value of `key` in the spec of the stage that consumes it."""
    head, _, rest = key.partition(".")
    if head == "prepare":
        return lookup(specs.prepare.prepare, rest)
    if head == "validation":
        return lookup(specs.prepare.validation, rest)
    if head == "blessing":
        return lookup(specs.evaluate.blessing, rest)
    if head == "beam":
        assert specs.batch_predict.beam == specs.prepare.beam  # both stages the engine runs
        return lookup(specs.prepare.beam, rest)
    return lookup(specs.train.job, key)  # evaluate, batch predict and export read it from the trained model


DEFAULT_SPECS = resolve().stage_specs()


def inner(hint: Any) -> Any:
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    return args[0] if typing.get_origin(hint) is typing.Union else hint


def valid(key: str) -> tuple[list[str], Any]:
    """--set texts giving `key` a valid value other than the default run's, and that value."""
    if key in VALID:
        return VALID[key]
    hint, default = inner(FIELDS[key]), carried(DEFAULT_SPECS, key)
    if hint is bool:
        return [f"{key}={str(not default).lower()}"], not default
    if hint is int:
        value = default * 2 if default else 200
        return [f"{key}={value}"], value
    if hint is float:
        value = default / 2 if default else 0.05
        return [f"{key}={value!r}"], value
    raise AssertionError(f"{key}: a {hint} field; give a valid value in VALID")


def invalid(key: str) -> str:
    """A --set text giving `key` an invalid value."""
    if key in INVALID:
        return f"{key}={INVALID[key]}"
    hint = inner(FIELDS[key])
    text = {bool: "maybe", int: "-1", float: "nan"}.get(hint)
    assert text is not None, f"{key}: a {hint} field; give an invalid value in INVALID, or list it in FREE_TEXT"
    return f"{key}={text}"


def test_every_field_is_generated():
    assert len(FIELDS) > 60
    for key in FIELDS:
        valid(key)
        if key not in FREE_TEXT:
            invalid(key)
    assert set(VALID) <= set(FIELDS) and set(INVALID) <= set(FIELDS) and FREE_TEXT <= set(FIELDS)


@pytest.mark.parametrize("key", sorted(FIELDS))
def test_a_valid_value_reaches_the_spec_of_the_stage_that_consumes_it(key):
    overrides, expected = valid(key)
    assert carried(DEFAULT_SPECS, key) != expected, "the value must differ from the default run's"
    specs = resolve(*overrides).stage_specs()
    value = carried(specs, key)
    assert value == expected and type(value) is type(expected), (value, expected)
    # What a stage receives is the spec's JSON, decoded by the spec's types: the same values, ints as ints.
    for spec, cls in (
        (specs.prepare, PrepareSpec),
        (specs.train, TrainSpec),
        (specs.evaluate, EvaluateSpec),
        (specs.batch_predict, PredictSpec),
    ):
        decoded = cls.from_json(spec.to_json())
        assert decoded == spec
    assert carried(StageSpecs(**{f.name: getattr(specs, f.name) for f in dataclasses.fields(specs)}), key) == value


@pytest.fixture
def no_stage_starts(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("a stage started")

    monkeypatch.setattr(local, "run_local", refuse)


@pytest.mark.parametrize("key", sorted(set(FIELDS) - FREE_TEXT))
def test_an_invalid_value_exits_2_naming_the_key_before_anything_starts(key, tmp_path, capsys, no_stage_starts):
    output = tmp_path / "out"
    assert cli.main(["run-local", "--output", str(output), "--set", invalid(key)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("tpu-pipeline run-local: error: ") and key in err, err
    assert not output.exists()


@pytest.mark.parametrize(
    "text, message",
    [
        (
            "model.hidden_units=64,x",
            "--set model.hidden_units=64,x: '64,x' is not a list of integers (e.g. 64,32)",
        ),
        ("training.train_steps=3.5", "--set training.train_steps=3.5: '3.5' is not an integer"),
        ("tpu.strict=maybe", "--set tpu.strict=maybe: 'maybe' is not true or false"),
        ("prepare.eval_fraction=1.5", "prepare.eval_fraction=1.5 must be in (0, 1), e.g. 0.2"),
        ("training.train_steps=0", "training.train_steps=0 must be a positive integer"),
        (
            "training.train_step=3",
            "--set training.train_step: unknown field 'train_step'; known here: ['deterministic', 'early_stopping', "
            "'eval_batch_size', 'keep_checkpoint_max', 'max_epochs', 'optimizer', 'predict_batch_size', "
            "'save_checkpoints_steps', 'seed', 'shuffle_buffer_size', 'train_batch_size', 'train_steps', "
            "'warm_start_from']; did you mean 'train_steps'?",
        ),
        (
            "trainig.seed=3",
            "--set trainig.seed: unknown section 'trainig'; sections: ['beam', 'blessing', 'model', 'predict', "
            "'prepare', 'tpu', 'training', 'validation']; did you mean 'training'?",
        ),
        ("prepare.evalfraction=0.3", "did you mean 'eval_fraction'?"),
    ],
)
def test_the_messages_name_the_key_the_value_and_what_is_allowed(text, message, tmp_path, capsys, no_stage_starts):
    assert cli.main(["run-local", "--output", str(tmp_path / "out"), "--set", text]) == 2
    assert message in capsys.readouterr().err


def test_numbers_and_lists_are_parsed_by_the_fields_type():
    job = resolve("model.hidden_units=64", "training.train_steps=300", "training.optimizer.learning_rate=1").job
    assert job.model.hidden_units == (64,) and job.training.train_steps == 300
    assert type(job.training.optimizer.learning_rate) is float and job.training.optimizer.learning_rate == 1.0
    assert resolve("model.hidden_units=[64, 32]").job.model.hidden_units == (64, 32)
    assert resolve("training.train_steps=null").job.training.train_steps is None
    assert resolve("training.early_stopping.patience=null").job.training.early_stopping.patience is None
    assert math.isclose(resolve("prepare.valid_fraction=0").prepare_config().valid_fraction, 0.0)


def test_run_local_takes_tpu_strict_from_its_defaults_and_set_turns_it_off():
    assert LOCAL_JOB_DEFAULTS == {"tpu.use_tpu": False, "tpu.strict": True}
    assert resolve().job.tpu.strict is True
    assert resolve("tpu.strict=false").job.tpu.strict is False
    args = cli.build_parser().parse_args(["submit", "--pipeline-root", "gs://b/r", "--cpu"])
    assert cli.resolve_settings(args, "gs://b/r/published").job.tpu.strict is False  # TPUSettings' own default


def test_beam_settings_go_over_the_engine_flags_and_a_disagreement_is_refused(capsys, tmp_path, no_stage_starts):
    args = cli.build_parser().parse_args(["run-local", "--engine", "beam", "--set", "beam.max_workers=3"])
    settings = cli.resolve_settings(args, "/p", beam=resolve_beam(args))
    assert settings.beam == BeamConfig(max_workers=3) and settings.engine == "beam"
    argv = ["run-local", "--output", str(tmp_path), "--engine", "beam", "--direct-num-workers", "2"]
    assert cli.main([*argv, "--set", "beam.direct_num_workers=3"]) == 2
    assert (
        "--set beam.direct_num_workers=3 disagrees with the engine flags' beam.direct_num_workers=2; give one of them"
        in capsys.readouterr().err
    )


def test_a_prepare_setting_is_never_overridden_by_the_runs(tmp_path, capsys, no_stage_starts):
    settings = resolve("prepare.eval_fraction=0.4")
    assert settings.eval_fraction == 0.4 and settings.prepare_config().eval_fraction == 0.4
    assert settings.stage_specs().prepare.prepare.eval_fraction == 0.4
    args = cli.build_parser().parse_args(["run-local", "--eval-fraction", "0.4", "--set", "prepare.eval_fraction=0.4"])
    assert cli.resolve_settings(args, "/p").eval_fraction == 0.4  # the same value twice: no conflict
    argv = ["run-local", "--output", str(tmp_path), "--eval-fraction", "0.3", "--set", "prepare.eval_fraction=0.4"]
    assert cli.main(argv) == 2
    assert (
        "--eval-fraction 0.3 and --set prepare.eval_fraction=0.4 disagree; give one of them" in capsys.readouterr().err
    )


def test_run_local_makes_a_data_path_given_by_set_absolute(tmp_path, monkeypatch):
    rows = tmp_path / "rows.csv"
    rows.write_text("x,label\n1,a\n", encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    given = {}

    def run_local(settings, output, verbose=False, resume=None, alerts=None, limits=None):
        given["settings"] = settings
        raise RuntimeError("stop here")

    monkeypatch.setattr(local, "run_local", run_local)
    argv = ["run-local", "--output", "out", "--set", "prepare.data=rows.csv", "--set", "prepare.label=label"]
    assert cli.main(argv) == 1
    assert given["settings"].data == str(rows) and given["settings"].label == "label"
