"""A user's own model submitted to Vertex AI: where its code and feature spec come from, and its hyperparameters'
types in the request.

Vertex AI's API is the only fake (`FakeVertexAPI`); Cloud Storage is the real emulator server on 127.0.0.1, and the
staged wheel is imported from there by a fresh process, as a component on Vertex AI does.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import repo
from google.auth.credentials import AnonymousCredentials
from vertex_api import FakeVertexAPI

from estimator_lib import storage
from estimator_lib.config.stages import PrepareSpec, TrainSpec
from estimator_lib.model.user import package
from pipelines import cli

IMAGE = "us-central1-docker.pkg.dev/proj/repo/tpu-pipeline@sha256:" + "cd" * 32
CODE = os.path.join(repo.ROOT, "examples", "image_cnn")
SPEC = {"image": {"dtype": "float32", "shape": [8, 8, 1]}, "label": {"dtype": "int32", "shape": []}}


def argv(root: str, spec_path: str, *extra: str) -> list:
    return [
        "submit",
        "--project",
        "p",
        "--pipeline-root",
        root,
        "--image",
        IMAGE,
        "--cpu",
        "--model-fn",
        "digits_cnn.model:model_fn",
        "--code",
        CODE,
        "--feature-spec",
        spec_path,
        "--data",
        f"{root}/records/train.tfrecord",
        "--label",
        "label",
        "--hparams",
        "units=64",
        "--hparams",
        "sizes=[32, 16]",
        "--set",
        "blessing.comparison_metric=accuracy",
        *extra,
    ]


def spec_file(tmp_path) -> str:
    path = tmp_path / "feature_spec.json"
    path.write_text(json.dumps(SPEC))
    return str(path)


def test_dry_run_shows_where_the_code_comes_from_and_hparams_stay_ints(monkeypatch, capsys, tmp_path):
    api = FakeVertexAPI(monkeypatch)
    root = "gs://bucket/pipeline-root"
    assert cli.main(argv(root, spec_file(tmp_path), "--dry-run"), credentials=AnonymousCredentials()) == 0
    printed = json.loads(capsys.readouterr().out)

    staged = package.stage_code(CODE, str(tmp_path / "wheel"))
    wheel_uri = f"{root}/code/{os.path.basename(staged.wheel)}"
    files = printed["compiled"]["user_files"]
    assert files["uploaded"] is False
    assert files["code"]["source"] == CODE and files["code"]["package"] == wheel_uri
    assert files["code"]["fingerprint"] == staged.fingerprint and files["code"]["version"] == staged.version
    assert files["feature_spec"]["staged"].startswith(f"{root}/staged/feature_spec-")

    values = printed["runtimeConfig"]["parameterValues"]
    sent = json.loads(values["train_spec"])["job"]["model"]  # the text the pipeline parameter carries
    assert sent["hparams"] == {"units": 64, "sizes": [32, 16]} and type(sent["hparams"]["units"]) is int
    decoded = TrainSpec.from_json(values["train_spec"]).job.model  # what the train component decodes
    assert decoded.hparams["units"] == 64 and type(decoded.hparams["units"]) is int
    assert decoded.model_fn == "digits_cnn.model:model_fn" and decoded.code == wheel_uri
    assert PrepareSpec.from_json(values["prepare_spec"]).prepare.feature_spec == files["feature_spec"]["staged"]
    assert api.pipeline_jobs == []


def test_submit_uploads_the_wheel_that_a_stage_imports_the_model_fn_from(monkeypatch, capsys, tmp_path, gcs_prefix):
    api = FakeVertexAPI(monkeypatch)
    assert cli.main(argv(gcs_prefix, spec_file(tmp_path)), credentials=AnonymousCredentials()) == 0
    assert len(api.pipeline_jobs) == 1
    values = api.pipeline_jobs[0]["pipeline_job"].runtime_config.parameter_values
    train_spec = TrainSpec.from_json(values["train_spec"])
    wheel_uri = train_spec.job.model.code
    staged = package.stage_code(CODE, str(tmp_path / "wheel"))
    assert storage.read_bytes(wheel_uri) == open(staged.wheel, "rb").read()  # deterministic bytes
    prepare_spec = PrepareSpec.from_json(values["prepare_spec"])
    assert json.loads(storage.read_text(prepare_spec.prepare.feature_spec)) == SPEC

    # A stage on Vertex AI: a fresh process, with nothing of the user's code but the staged wheel.
    script = (
        "import sys; from estimator_lib.engine.user.stages import locate_code; "
        "from estimator_lib.model.user.model_fn import load_function; "
        f"f = load_function('digits_cnn.model:model_fn', '--model-fn', locate_code({wheel_uri!r})); "
        "print(sys.modules[f.__module__].__file__)"
    )
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=repo.ROOT)
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, cwd=str(tmp_path), check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert os.path.basename(staged.wheel) in done.stdout and "digits_cnn/model.py" in done.stdout
