"""The `tpu-pipeline` CLI: help on every command, compiled YAML for TPU and CPU, image pinning, settings."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest
from compiled import compiled_spec
from repo import ROOT

from estimator_lib.config import ConfigError
from estimator_lib.config.stages import PrepareSpec, TrainSpec
from pipelines import cli, image, local, tpu
from pipelines.cli.settings import REPO_DIR, slice_overrides

DIGEST_IMAGE = "us-central1-docker.pkg.dev/proj/repo/tpu-pipeline@sha256:" + "ab" * 32
COMMIT_IMAGE = "us-central1-docker.pkg.dev/proj/repo/tpu-pipeline:" + "0123456789abcdef0123456789abcdef01234567"
TPU_STAGES = {
    "train-model": "train_model",
    "evaluate-model": "evaluate_model",
    "batch-predict": "batch_predict",
}
CPU_STAGES = {
    "resolve-inputs": "resolve_inputs",
    "prepare-data": "prepare_data",
    "export-model": "export_model",
    "check-serving": "check_serving",
    "release-model": "release_model",
}
GCPC_LAUNCHER = "gcr.io/ml-pipeline/google-cloud-pipeline-components:"


# -- help ----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "command", [[], ["run-local"], ["show"], ["compile"], ["submit"], ["schedule"], ["reproduce"], ["diff"]]
)
def test_every_command_has_help(command, capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main([*command, "--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: tpu-pipeline")
    if command == ["compile"]:
        assert "v5litepod-4  ct5lp-hightpu-4t   TPU_V5_LITEPOD  x4   4 cores" in out


def test_console_script_and_module_entry_points():
    script = os.path.join(os.path.dirname(sys.executable), "tpu-pipeline")
    for argv in ([script, "--help"], [sys.executable, "-m", "pipelines", "schedule", "--help"]):
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
        assert proc.returncode == 0, proc.stderr
        assert "usage: tpu-pipeline" in proc.stdout
    assert "--cron" in proc.stdout


def test_the_cli_and_a_cpu_compile_never_import_the_vertex_extra(tmp_path):
    """google-cloud-aiplatform and google-cloud-pipeline-components are the optional `vertex` extra (the image has
    neither): `pipelines.vertex.build_job` and `pipelines.pipeline._on_tpu` import them only when a Vertex AI
    request or a TPU compile needs them."""
    output = str(tmp_path / "p.yaml")
    loaded = (
        "print(any(m.startswith(('google.cloud.aiplatform', 'google_cloud_pipeline_components')) for m in sys.modules))"
    )
    code = "\n".join(
        [
            "import sys",
            "import pipelines.cli as cli",
            f"assert cli.main(['compile', '--cpu', '--image', {COMMIT_IMAGE!r}, '--output', {output!r}]) == 0",
            loaded,
            f"assert cli.main(['compile', '--tpu', 'v3-8', '--image', {COMMIT_IMAGE!r}, '--output', {output!r}]) == 0",
            loaded,  # the TPU compile does load it: the check sees the modules
        ]
    )
    env = {**os.environ, "PYTHONPATH": ROOT}
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert proc.returncode == 0, proc.stderr
    assert [line for line in proc.stdout.splitlines() if line in ("True", "False")] == ["False", "True"]


# -- compile -------------------------------------------------------------------------------------------------
def compile_yaml(tmp_path, *args: str) -> dict:
    return compiled_spec(str(tmp_path / "pipeline.yaml"), *args)


def task_tpu(spec: dict, task: str) -> dict:
    """A task's placement: JSON text in a string parameter (KFP's dict parameters turn ints into floats)."""
    return json.loads(spec["root"]["dag"]["tasks"][task]["inputs"]["parameters"]["tpu"]["runtimeValue"]["constant"])


@pytest.mark.parametrize(
    "tpu_type, machine, accelerator, count, flags",
    [
        ("v2-8", "cloud-tpu", "TPU_V2", 8, ()),
        ("v3-8", "cloud-tpu", "TPU_V3", 8, ()),
        ("v5litepod-4", "ct5lp-hightpu-4t", "TPU_V5_LITEPOD", 4, ("--experimental-tpu",)),
    ],
)
def test_compile_for_tpu_runs_three_stages_as_tpu_custom_jobs(tmp_path, tpu_type, machine, accelerator, count, flags):
    spec = compile_yaml(tmp_path, "--tpu", tpu_type, "--image", DIGEST_IMAGE, *flags)
    executors = spec["deploymentSpec"]["executors"]
    for task, function in TPU_STAGES.items():
        assert executors[f"exec-{task}"]["container"]["image"].startswith(GCPC_LAUNCHER)
        inputs = spec["components"][f"comp-{task}"]["inputDefinitions"]["parameters"]
        [pool] = inputs["worker_pool_specs"]["defaultValue"]
        assert pool["machine_spec"] == {
            "machine_type": machine,
            "accelerator_type": accelerator,
            "accelerator_count": count,
        }
        assert pool["replica_count"] == 1
        assert pool["container_spec"]["image_uri"] == DIGEST_IMAGE
        assert pool["container_spec"]["args"][-1] == function
        assert inputs["service_account"]["defaultValue"] == "{{$.pipeline_service_account}}"
        assert inputs["location"]["defaultValue"] == "{{$.pipeline_google_cloud_location}}"
        assert task_tpu(spec, task) == {"use_tpu": True, "tpu_name": "local", "num_cores": count}
    for task in CPU_STAGES:
        container = executors[f"exec-{task}"]["container"]
        assert container["image"] == DIGEST_IMAGE
        assert "worker_pool_specs" not in spec["components"][f"comp-{task}"]["inputDefinitions"].get("parameters", {})
    assert task_tpu(spec, "export-model") == {"use_tpu": False}


def test_compile_for_cpu_has_no_tpu_anywhere(tmp_path):
    spec = compile_yaml(tmp_path, "--cpu", "--image", COMMIT_IMAGE)
    text = json.dumps(spec)
    assert "worker_pool_specs" not in text and "TPU_V" not in text and GCPC_LAUNCHER not in text
    images = {e["container"]["image"] for e in spec["deploymentSpec"]["executors"].values()}
    assert images == {COMMIT_IMAGE}
    for task in TPU_STAGES:
        assert task_tpu(spec, task) == {"use_tpu": False}
    for executor in spec["deploymentSpec"]["executors"].values():
        assert "pip install" not in json.dumps(executor)  # lightweight, on the project image: nothing installed


@pytest.mark.parametrize("target", [("--cpu",), ("--tpu", "v3-8")])
def test_the_evaluate_stage_outputs_an_html_report_a_markdown_verdict_and_the_blessing(tmp_path, target):
    """Vertex AI shows an HTML and a Markdown artifact on the run page; the blessing is a system.Artifact the
    components annotate as `ModelBlessing` (KFP ships its import with their source)."""
    spec = compile_yaml(tmp_path, *target, "--image", DIGEST_IMAGE)
    outputs = spec["components"]["comp-evaluate-model"]["outputDefinitions"]["artifacts"]
    types = {name: output["artifactType"]["schemaTitle"] for name, output in outputs.items()}
    assert types == {
        "metrics": "system.Metrics",
        "classification_metrics": "system.ClassificationMetrics",
        "blessing": "system.Artifact",
        "report": "system.HTML",
        "verdict": "system.Markdown",
        "slice_metrics": "system.Metrics",
    }
    pipeline_outputs = spec["root"]["dag"]["outputs"]["artifacts"]
    for name in ("report", "verdict", "blessing"):
        assert pipeline_outputs[name]["artifactSelectors"] == [
            {"outputArtifactKey": name, "producerSubtask": "evaluate-model"}
        ]
    release = spec["root"]["dag"]["tasks"]["release-model"]["inputs"]["artifacts"]["blessing"]
    assert release == {"taskOutputArtifact": {"outputArtifactKey": "blessing", "producerTask": "evaluate-model"}}
    shipped = json.dumps(spec)  # a TPU job's source is in its worker pool spec, a CPU task's in its executor
    for function in ("evaluate_model", "release_model"):
        assert re.search(r"from components.artifact_types import ModelBlessing(\\+n)+def " + function, shipped)


def test_compiled_pipeline_parameters(tmp_path):
    spec = compile_yaml(tmp_path, "--cpu", "--image", COMMIT_IMAGE)
    parameters = spec["root"]["inputDefinitions"]["parameters"]
    assert "defaultValue" not in parameters["publish_root"]  # required: where blessed models go
    defaults = {name: p.get("defaultValue") for name, p in parameters.items()}
    assert set(parameters) == {
        "publish_root",
        "baseline",
        "warm_start",
        "prepare_spec",
        "train_spec",
        "evaluate_spec",
        "predict_spec",
    }
    assert defaults["baseline"] == "auto" and defaults["warm_start"] == "none"
    assert {p["parameterType"] for name, p in parameters.items()} == {"STRING"}  # each spec is JSON text
    prepare = PrepareSpec.from_json(defaults["prepare_spec"]).prepare
    assert prepare.data == ("embedded:penguins",) and prepare.label == "species"
    job = TrainSpec.from_json(defaults["train_spec"]).job
    assert job.model.family == "dnn" and job.model.hidden_units == (64, 32)
    assert sorted(spec["root"]["dag"]["tasks"]) == sorted([*TPU_STAGES, *CPU_STAGES, "record-run-cost"])
    tasks = spec["root"]["dag"]["tasks"]
    assert tasks["export-model"]["dependentTasks"] == ["prepare-data", "train-model"]  # export never publishes
    # The serving check compares the served export with the batch predictions.
    assert tasks["check-serving"]["dependentTasks"] == ["batch-predict", "export-model"]
    # Publishing is last: the release waits for batch prediction and the serving check too, so a failed run
    # publishes nothing.
    assert tasks["release-model"]["dependentTasks"] == [
        "batch-predict",
        "check-serving",
        "evaluate-model",
        "export-model",
    ]
    assert tasks["release-model"]["inputs"]["parameters"]["publish_root"] == {"componentInputParameter": "publish_root"}


def test_compile_refuses_a_mutable_image_and_both_targets(tmp_path, capsys):
    output = str(tmp_path / "p.yaml")
    assert cli.main(["compile", "--output", output, "--image", "gcr.io/p/img:latest"]) == 2
    assert "not an immutable reference" in capsys.readouterr().err
    assert not os.path.exists(output)
    with pytest.raises(SystemExit):
        cli.main(["compile", "--tpu", "v3-8", "--cpu"])


def test_default_image_is_tagged_with_the_commit(tmp_path):
    spec = compile_yaml(tmp_path, "--cpu", "--image-repo", "us-docker.pkg.dev/p/r/tpu-pipeline")
    [used] = {e["container"]["image"] for e in spec["deploymentSpec"]["executors"].values()}
    assert used == f"us-docker.pkg.dev/p/r/tpu-pipeline:{image.git_commit(REPO_DIR)}"


def test_image_references():
    assert image.check_image(DIGEST_IMAGE) == DIGEST_IMAGE
    assert image.check_image(COMMIT_IMAGE) == COMMIT_IMAGE
    assert image.check_image("localhost:5000/tpu-pipeline:0a1b2c3") == "localhost:5000/tpu-pipeline:0a1b2c3"
    for mutable in ("tpu-pipeline", "gcr.io/p/img:latest", "gcr.io/p/img:v1.2", "gcr.io/p/img@sha256:abc"):
        with pytest.raises(ValueError, match="use a digest .* or a commit tag"):
            image.check_image(mutable)
    with pytest.raises(ValueError, match="not a git checkout"):
        image.default_image("repo", "/")


def test_tpu_presets():
    assert tpu.preset("v3-8").tpu_settings() == {"use_tpu": True, "tpu_name": "local", "num_cores": 8}
    assert tpu.preset("v5litepod-8", experimental=True).machine_type == "ct5lp-hightpu-8t"
    with pytest.raises(ValueError, match=r"--tpu 'v9-8': it is not a known TPU type; use one of \['v2-8', 'v3-8'\]"):
        tpu.preset("v9-8")


# -- settings ------------------------------------------------------------------------------------------------
def parse(*argv: str):
    return cli.build_parser().parse_args(["run-local", *argv])


def test_settings_route_overrides_to_their_sections(tmp_path):
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"model": {"family": "linear"}, "blessing": {"thresholds": {"accuracy": 0.8}}}))
    args = parse(
        "--data",
        "x.csv",
        "--label",
        "y",
        "--config",
        str(config),
        "--set",
        "training.train_steps=7",
        "--set",
        'blessing.thresholds={"auc": 0.9}',
        "--set",
        "blessing.min_improvement=0.01",
        "--set",
        "prepare.num_shards=3",
        "--baseline",
        "none",
    )
    settings = cli.resolve_settings(args, "/published", job_defaults={"tpu.strict": True})
    assert settings.job.model.family == "linear" and settings.job.training.train_steps == 7
    assert settings.job.tpu.strict is True
    assert settings.blessing.thresholds == {"auc": 0.9} and settings.blessing.min_improvement == 0.01
    assert settings.prepare_options == {"num_shards": 3}
    assert (settings.data, settings.label, settings.baseline, settings.publish_root) == (
        "x.csv",
        "y",
        "none",
        "/published",
    )
    arguments = settings.arguments()
    assert TrainSpec.from_json(arguments["train_spec"]).job == settings.job
    assert PrepareSpec.from_json(arguments["prepare_spec"]).prepare.num_shards == 3
    assert arguments["baseline"] == "none" and arguments["publish_root"] == "/published"
    assert settings.view()["blessing_config"] == {
        "thresholds": {"auc": 0.9},
        "beat_trivial": True,
        "min_improvement": 0.01,
        "confidence": 0.95,
        "reference_margin": 0.02,
        "directions": {},
        "leakage_threshold": 0.99,
        "allow_leakage": [],
        "importance_rows": 1000,
        "importance_repeats": 2,
        "slices": [],
        "slice_buckets": 4,
        "min_slice_rows": 20,
        "slice_thresholds": {},
        "slice_max_gap": {},
        "bootstrap_replicates": 1000,
        "bootstrap_seed": 0,
        "baseline_test": "paired",
    }


def test_slice_flags_are_one_json_list_of_blessing_slices_and_a_cross_keeps_its_comma():
    args = parse("--slice", "island", "--slice", "island,sex", "--set", 'blessing.slice_thresholds={"accuracy": 0.85}')
    assert slice_overrides(args) == ['blessing.slices=["island", "island,sex"]']
    blessing = cli.resolve_settings(args, "/p").blessing
    assert blessing.slices == ("island", "island,sex") and blessing.slice_thresholds == {"accuracy": 0.85}
    with pytest.raises(ConfigError, match=r"blessing.slices: 'island,' must be a feature's name or a comma-joined"):
        cli.resolve_settings(parse("--slice", "island,"), "/p")


def test_settings_errors_name_the_fix(capsys):
    assert cli.main(["run-local", "--data", "x.csv"]) == 2
    assert "--label is required with --data" in capsys.readouterr().err
    with pytest.raises(ConfigError, match="unknown field 'train_step'"):
        cli.resolve_settings(parse("--set", "training.train_step=3"), "/p")
    with pytest.raises(ConfigError, match="eval_fraction=1.5 must be in"):
        cli.resolve_settings(parse("--eval-fraction", "1.5"), "/p")


def test_a_slice_of_a_column_the_local_csv_lacks_exits_2_before_anything_starts(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(local, "run_local", lambda *a, **k: pytest.fail("a stage started"))
    output = tmp_path / "out"
    assert cli.main(["run-local", "--output", str(output), "--slice", "island,sexx"]) == 2
    err = capsys.readouterr().err
    assert "blessing.slices ['island,sexx'] names ['sexx'], which are not columns of " in err
    assert "'island', 'bill_length_mm', 'bill_depth_mm', 'flipper_length_mm', 'body_mass_g', 'sex', 'year']" in err
    assert not output.exists()
