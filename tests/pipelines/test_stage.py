"""`python -m pipelines.stage`: KFP's executor for one local stage, then an immediate exit; and the local
runner's switch to it. The whole pipeline through it runs in tests/e2e/."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys

from kfp.local import subprocess_task_handler

from components import build_stages
from pipelines import local, stage
from pipelines.image import LOCAL_IMAGE
from repo import ROOT

COMPONENT = """
def hello(name: str) -> str:
    if name == "fail":
        raise ValueError("asked to fail")
    return "hello " + name
"""


def run_stage(tmp_path, name: str) -> subprocess.CompletedProcess:
    module = tmp_path / "ephemeral_component.py"
    module.write_text(COMPONENT)
    executor_input = {
        "inputs": {"parameterValues": {"name": name}},
        "outputs": {
            "parameters": {"Output": {"outputFile": str(tmp_path / "Output")}},
            "outputFile": str(tmp_path / "executor_output.json"),
        },
    }
    command = [sys.executable, "-m", stage.__name__, "--component_module_path", str(module)]
    command += ["--executor_input", json.dumps(executor_input), "--function_to_execute", "hello"]
    return subprocess.run(command, capture_output=True, text=True, cwd=ROOT, timeout=120)


def test_a_stage_that_succeeds_writes_kfp_s_output_and_exits_0(tmp_path):
    done = run_stage(tmp_path, "world")
    assert done.returncode == 0, done.stderr
    output = json.loads((tmp_path / "executor_output.json").read_text())
    assert output["parameterValues"]["Output"] == "hello world"


def test_a_stage_that_fails_exits_non_zero_with_its_traceback(tmp_path):
    done = run_stage(tmp_path, "fail")
    assert done.returncode != 0
    assert "ValueError: asked to fail" in done.stderr
    assert not os.path.exists(tmp_path / "executor_output.json")


def test_the_local_runner_starts_stages_through_pipelines_stage(capfd):
    command = [sys.executable, "-c", f"print({stage.KFP_EXECUTOR_MODULE!r})"]
    with local._fast_stage_exit():
        assert subprocess_task_handler.run_local_subprocess(command) == 0
    assert "pipelines.stage" in capfd.readouterr().out
    assert subprocess_task_handler.run_local_subprocess(command) == 0
    assert "kfp.dsl.executor_main" in capfd.readouterr().out


def test_kfp_starts_every_stage_through_the_module_the_runner_rewrites():
    """The rewrite above keys on KFP's executor module: were KFP to start components another way, the local
    runner would silently lose the fast exit."""
    stages = build_stages(LOCAL_IMAGE)
    for field in dataclasses.fields(stages):
        container = getattr(stages, field.name).component_spec.implementation.container
        assert stage.KFP_EXECUTOR_MODULE in " ".join([*container.command, *container.args]), field.name
