"""One source of defaults: the compiled pipeline's parameters, the CLI's flags and the components all take theirs
from the config types (`RunConfig` and the `JobConfig`, `BlessingConfig`, `PrepareConfig` it holds)."""

from __future__ import annotations

import pytest
import yaml

from components import adapter
from estimator_lib.config import BlessingConfig, JobConfig, PrepareConfig, RunConfig, ValidationConfig
from estimator_lib.config.beam import BeamConfig
from estimator_lib.config.run import STAGE_PARAMETERS
from estimator_lib.config.stages import EvaluateSpec, PredictSpec, PrepareSpec, TrainSpec
from estimator_lib.data.embedded import default_dataset
from pipelines import cli
from pipelines.pipeline import compile_pipeline

IMAGE = "us-central1-docker.pkg.dev/proj/repo/tpu-pipeline@sha256:" + "ef" * 32


@pytest.fixture(scope="module")
def spec(tmp_path_factory) -> dict:
    path = compile_pipeline(str(tmp_path_factory.mktemp("compiled") / "p.yaml"), IMAGE, None)
    with open(path, encoding="utf-8") as f:
        return yaml.safe_load(f)


def test_the_compiled_pipelines_defaults_are_the_config_types(spec):
    parameters = dict(spec["root"]["inputDefinitions"]["parameters"])
    assert "defaultValue" not in parameters.pop("publish_root")  # required: where blessed models go
    compiled = {name: p["defaultValue"] for name, p in parameters.items()}
    assert compiled == RunConfig.parameter_defaults()
    assert TrainSpec.from_json(compiled["train_spec"]).job.model.hidden_units == JobConfig().model.hidden_units


def test_each_task_gets_its_stages_spec_from_the_pipeline_parameter_of_its_name(spec):
    tasks = spec["root"]["dag"]["tasks"]
    for task, name in (
        ("prepare-data", "prepare_spec"),
        ("train-model", "train_spec"),
        ("evaluate-model", "evaluate_spec"),
        ("batch-predict", "predict_spec"),
    ):
        assert tasks[task]["inputs"]["parameters"]["spec"] == {"componentInputParameter": name}
    assert tasks["resolve-inputs"]["inputs"]["parameters"]["prepare_spec"] == {
        "componentInputParameter": "prepare_spec"
    }


def test_the_parameter_defaults_decode_to_the_default_configs():
    """Decoded by the components' own adapter, the pipeline's defaults are exactly the default configs."""
    defaults = RunConfig.parameter_defaults()
    assert set(defaults) == {"baseline", "warm_start", *STAGE_PARAMETERS.values()}
    train = adapter.decode_spec(TrainSpec, defaults["train_spec"])
    assert adapter.training_job(train, '{"use_tpu": false}') == JobConfig()
    assert adapter.decode_spec(EvaluateSpec, defaults["evaluate_spec"]).blessing == BlessingConfig()
    prepare = adapter.decode_spec(PrepareSpec, defaults["prepare_spec"])
    assert (prepare.validation, prepare.engine, prepare.beam) == (ValidationConfig(), "inprocess", BeamConfig())
    assert adapter.prepare_config(prepare) == PrepareConfig(
        data=(default_dataset().path,), label=default_dataset().label
    )
    assert adapter.decode_spec(PredictSpec, defaults["predict_spec"]) == PredictSpec(data="eval")


def test_a_default_runs_arguments_are_the_parameter_defaults():
    arguments = RunConfig(publish_root="/p").arguments()
    assert arguments == {"publish_root": "/p", **RunConfig.parameter_defaults()}


def test_the_cli_without_flags_resolves_to_the_default_run():
    required = {
        "run-local": [],
        "submit": ["--pipeline-root", "gs://b/root"],
        "schedule": ["--pipeline-root", "gs://b/root", "--cron", "0 3 * * 1"],
    }
    for command, argv in required.items():
        args = cli.build_parser().parse_args([command, *argv])
        assert cli.resolve_settings(args, "/published") == RunConfig(publish_root="/published"), command
