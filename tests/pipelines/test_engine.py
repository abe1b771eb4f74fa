"""`--engine beam` through the CLI: the compiled YAML names the Dataflow settings, batch predict leaves the TPU,
refusals name the missing flag, and submit sends the same settings as parameter values."""

from __future__ import annotations

import json

import pytest
from google.auth.credentials import AnonymousCredentials
from test_cli import DIGEST_IMAGE, compile_yaml
from test_vertex import ROOT
from vertex_api import FakeVertexAPI

from estimator_lib.config.beam import BeamConfig
from estimator_lib.config.stages import PredictSpec, PrepareSpec
from pipelines import cli
from pipelines.cli.settings import resolve_beam

DATAFLOW = [
    "--engine",
    "beam",
    "--dataflow-project",
    "my-project",
    "--dataflow-region",
    "europe-west4",
    "--dataflow-temp-location",
    "gs://bucket/dataflow-tmp",
    "--dataflow-max-workers",
    "40",
    "--dataflow-machine-type",
    "n2-standard-4",
]


def root_defaults(spec: dict) -> dict:
    return {name: p.get("defaultValue") for name, p in spec["root"]["inputDefinitions"]["parameters"].items()}


def engines(values: dict) -> list[tuple[str, BeamConfig]]:
    """(engine, beam) of the prepare and the predict spec among a pipeline's parameter values."""
    specs = PrepareSpec.from_json(values["prepare_spec"]), PredictSpec.from_json(values["predict_spec"])
    return [(spec.engine, spec.beam) for spec in specs]


def test_compiled_yaml_for_engine_beam_names_the_dataflow_settings(tmp_path):
    spec = compile_yaml(tmp_path, "--tpu", "v3-8", "--image", DIGEST_IMAGE, *DATAFLOW)
    dataflow = BeamConfig(
        runner="DataflowRunner",
        project="my-project",
        region="europe-west4",
        temp_location="gs://bucket/dataflow-tmp",
        max_workers=40,
        machine_type="n2-standard-4",
        sdk_container_image=DIGEST_IMAGE,  # the component image is the Dataflow workers' container
    )
    assert engines(root_defaults(spec)) == [("beam", dataflow)] * 2
    tasks = spec["root"]["dag"]["tasks"]
    assert tasks["prepare-data"]["inputs"]["parameters"]["spec"]["componentInputParameter"] == "prepare_spec"
    assert tasks["batch-predict"]["inputs"]["parameters"]["spec"]["componentInputParameter"] == "predict_spec"
    # batch predict launches Dataflow and scores the CPU SavedModel: a plain CPU task, not a TPU custom job
    assert spec["deploymentSpec"]["executors"]["exec-batch-predict"]["container"]["image"] == DIGEST_IMAGE
    assert json.loads(tasks["batch-predict"]["inputs"]["parameters"]["tpu"]["runtimeValue"]["constant"]) == {
        "use_tpu": False
    }
    assert "worker_pool_specs" in spec["components"]["comp-train-model"]["inputDefinitions"]["parameters"]


def test_compiled_yaml_defaults_to_the_in_process_engine(tmp_path):
    defaults = root_defaults(compile_yaml(tmp_path, "--cpu", "--image", DIGEST_IMAGE))
    assert engines(defaults) == [("inprocess", BeamConfig())] * 2


def test_engine_beam_without_a_temp_location_is_refused_naming_the_flag(tmp_path, capsys):
    argv = ["compile", "--output", str(tmp_path / "p.yaml"), "--cpu", "--image", DIGEST_IMAGE, "--engine", "beam"]
    assert cli.main([*argv, "--dataflow-project", "p", "--dataflow-region", "us-central1"]) == 2
    err = capsys.readouterr().err
    assert "--engine beam: beam.temp_location is not set; the DataflowRunner needs it" in err
    assert "--dataflow-temp-location" in err


def test_submit_with_engine_beam_defaults_dataflow_to_the_vertex_settings(monkeypatch, capsys):
    FakeVertexAPI(monkeypatch)
    argv = ["submit", "--project", "p", "--region", "us-east1", "--pipeline-root", ROOT, "--image", DIGEST_IMAGE]
    assert cli.main([*argv, "--cpu", "--dry-run", "--engine", "beam"], credentials=AnonymousCredentials()) == 0
    values = json.loads(capsys.readouterr().out)["runtimeConfig"]["parameterValues"]
    dataflow = BeamConfig(
        runner="DataflowRunner",
        project="p",
        region="us-east1",
        temp_location=ROOT.rstrip("/") + "/dataflow-tmp",
        sdk_container_image=DIGEST_IMAGE,
    )
    assert engines(values) == [("beam", dataflow)] * 2


def test_run_local_settings_use_the_direct_runner():
    args = cli.build_parser().parse_args(["run-local", "--engine", "beam", "--direct-num-workers", "2"])
    settings = cli.resolve_settings(args, "/published", beam=resolve_beam(args))
    assert engines(settings.arguments()) == [("beam", BeamConfig(runner="DirectRunner", direct_num_workers=2))] * 2


@pytest.mark.parametrize("flag", ["--engine=spark"])
def test_an_unknown_engine_is_refused_by_the_parser(flag, capsys):
    with pytest.raises(SystemExit):
        cli.main(["run-local", flag])
    assert "invalid choice: 'spark'" in capsys.readouterr().err
