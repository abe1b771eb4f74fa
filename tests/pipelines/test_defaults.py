"""One source of defaults: the compiled pipeline's parameters, the CLI's flags and the components all take theirs
from the config types (`RunConfig` and the `JobConfig`, `BlessingConfig`, `PrepareConfig` it holds)."""

from __future__ import annotations

import pytest
import yaml

from components import adapter
from estimator_lib.config import HYPERPARAMETERS, BlessingConfig, JobConfig, PrepareConfig, RunConfig, ValidationConfig
from estimator_lib.config.beam import BeamConfig
from estimator_lib.config.run import CONFIG_PARAMETERS
from estimator_lib.data.embedded import default_dataset
from pipelines import cli
from pipelines.pipeline import compile_pipeline

IMAGE = "us-central1-docker.pkg.dev/proj/repo/tpu-pipeline@sha256:" + "ef" * 32
WHOLE_CONFIGS = tuple(CONFIG_PARAMETERS.values())  # each whole config is {} by default


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
    assert compiled["hidden_units"] == list(JobConfig().model.hidden_units)


def test_the_train_task_gets_every_hyperparameter_from_the_pipeline_parameter_of_its_name(spec):
    inputs = spec["root"]["dag"]["tasks"]["train-model"]["inputs"]["parameters"]
    for name in HYPERPARAMETERS:
        assert inputs[name] == {"componentInputParameter": name}


def test_the_parameter_defaults_rebuild_the_default_configs():
    """Run through the components' own adapter, the pipeline's defaults give exactly the default configs."""
    defaults = RunConfig.parameter_defaults()
    hyperparameters = {name: defaults[name] for name in HYPERPARAMETERS}
    assert adapter.training_job(defaults["job_config"], hyperparameters, {}) == JobConfig()
    assert adapter.blessing_config(defaults["blessing_config"]) == BlessingConfig()
    assert adapter.validation_config(defaults["validation_config"]) == ValidationConfig()
    assert BeamConfig.from_dict(adapter.typed(BeamConfig, defaults["beam_options"])) == BeamConfig()
    assert defaults["engine"] == "inprocess"
    prepare = adapter.prepare_config(
        defaults["data"],
        defaults["label"],
        defaults["task"],
        defaults["key_column"],
        defaults["eval_fraction"],
        defaults["prepare_options"],
    )
    assert prepare == PrepareConfig(data=(default_dataset().path,), label=default_dataset().label)


def test_a_default_runs_arguments_are_the_parameter_defaults():
    arguments = RunConfig(publish_root="/p").arguments()
    defaults = RunConfig.parameter_defaults()
    assert set(arguments) == {"publish_root", *defaults}
    assert {k: v for k, v in arguments.items() if k not in WHOLE_CONFIGS and k != "publish_root"} == {
        k: v for k, v in defaults.items() if k not in WHOLE_CONFIGS
    }


def test_the_cli_without_flags_resolves_to_the_default_run():
    required = {
        "run-local": [],
        "submit": ["--pipeline-root", "gs://b/root"],
        "schedule": ["--pipeline-root", "gs://b/root", "--cron", "0 3 * * 1"],
    }
    for command, argv in required.items():
        args = cli.build_parser().parse_args([command, *argv])
        assert cli.resolve_settings(args, "/published") == RunConfig(publish_root="/published"), command
