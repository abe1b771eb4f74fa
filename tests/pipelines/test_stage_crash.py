"""A crash in a stage's own code (a segfault, an abort: real signals) fails that stage alone: the stage server and
the runner go on, and the run's error names the stage, the signal and the stage's last log lines, with the
Python stack faulthandler printed. Through the stage server, without it, through the real KFP local runner's
command, and once through `tpu-pipeline run-local` with a model family that aborts.

(No `from __future__ import annotations`: KFP reads the component's annotations as types.)"""

import contextlib
import io
import json
import os
import re
import signal
import subprocess
import sys

import pytest
from kfp import dsl
from kfp import local as kfp_local
from repo import ROOT

from pipelines import runner, runs, stage
from pipelines.local.console import ConsoleFilter, Progress
from pipelines.local.failures import failure_excerpt, failure_message, killed_message, signal_of
from pipelines.local.kfp_patches import fast_stage_exit
from pipelines.run_summary import RunInfo, RunSummary

COMPONENT = """import ctypes
import os


def crash(how: str) -> str:
    print(f"pid {os.getpid()} parent {os.getppid()}: about to crash by {how}")  # not flushed: still logged
    if how == "segfault":
        ctypes.string_at(0)  # reads address 0
    if how == "abort":
        os.abort()
    return "survived " + how
"""
CRASH_LINES = {"segfault": 8, "abort": 10}  # where COMPONENT crashes
HOWS = {"segfault": signal.SIGSEGV, "abort": signal.SIGABRT}


def stage_command(tmp_path, how: str) -> list[str]:
    module = tmp_path / "ephemeral_component.py"
    module.write_text(COMPONENT)
    executor_input = {
        "inputs": {"parameterValues": {"how": how}},
        "outputs": {
            "parameters": {"Output": {"outputFile": str(tmp_path / "Output")}},
            "outputFile": str(tmp_path / "executor_output.json"),
        },
    }
    command = [sys.executable, "-m", stage.__name__, "--component_module_path", str(module)]
    return command + ["--executor_input", json.dumps(executor_input), "--function_to_execute", "crash"]


def run_stage(tmp_path, how: str) -> subprocess.CompletedProcess:
    return subprocess.run(stage_command(tmp_path, how), capture_output=True, text=True, cwd=ROOT, timeout=300)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """A warm stage server, as the local runner starts one; the stages started here inherit its address."""
    log_path = tmp_path_factory.mktemp("server") / "pipeline.log"
    with open(log_path, "a", encoding="utf-8") as log, runner.stage_server("crash", log) as process:
        yield process


def assert_crashed_visibly(done: subprocess.CompletedProcess, tmp_path, how: str, parent: int) -> None:
    """The stage ended by the crash's signal, after every line it printed, with the Python stack of the crash."""
    assert done.returncode == -HOWS[how], done.stderr[-2000:]
    assert re.fullmatch(rf"pid \d+ parent {parent}: about to crash by {how}", done.stdout.splitlines()[-1])
    stack = done.stderr.split(f"Fatal Python error: {signal.strsignal(HOWS[how])}\n\n", 1)[1].splitlines()
    assert re.fullmatch(r"Current thread 0x[0-9a-f]+ \(most recent call first\):", stack[0])
    crashed_in = f'  File "{tmp_path / "ephemeral_component.py"}", line {CRASH_LINES[how]} in crash'
    assert crashed_in in stack[1:3]  # the segfault's innermost frame is ctypes' string_at
    assert not os.path.exists(tmp_path / "executor_output.json")


@pytest.mark.parametrize("how", sorted(HOWS))
def test_a_crash_through_the_server_ends_the_stage_by_its_signal_and_the_server_serves_the_next(tmp_path, server, how):
    assert_crashed_visibly(run_stage(tmp_path, how), tmp_path, how, parent=server.pid)
    assert server.poll() is None
    survived = run_stage(tmp_path, "nothing")
    assert survived.returncode == 0, survived.stderr[-2000:]
    output = json.loads((tmp_path / "executor_output.json").read_text())
    assert output["parameterValues"]["Output"] == "survived nothing"


@pytest.mark.parametrize("how", sorted(HOWS))
def test_a_crash_without_a_server_ends_the_stage_by_its_signal_with_its_stack(tmp_path, monkeypatch, how):
    monkeypatch.setenv(stage.STAGE_SERVER_ENV, "tpu-pipeline-nobody-listens")
    assert_crashed_visibly(run_stage(tmp_path, how), tmp_path, how, parent=os.getpid())


@dsl.component(base_image="python:3.11")
def crashing_step(how: str) -> str:
    import ctypes

    print(f"crashing_step: about to crash by {how}")
    if how == "segfault":
        ctypes.string_at(0)
    return "survived " + how


def test_the_runner_names_the_signal_and_the_stages_last_lines_when_kfp_s_command_crashes(tmp_path, server):
    """KFP's command runs the stage under `sh -ec`, which reports a child killed by SIGSEGV as exit status 139."""
    folder = runs.RunFolder.new(str(tmp_path))
    folder.create()
    run = RunInfo(folder.run_id, folder.path, folder.log, "2026-01-01T00:00:00+00:00", attempts=1)
    progress = Progress(folder, RunSummary(status="running", stage=None, error=None, run=run, config={}), io.StringIO())
    stream = ConsoleFilter(io.StringIO(), io.StringIO(), verbose=False, progress=progress)
    root = str(tmp_path / "root")
    kfp_local.init(runner=kfp_local.SubprocessRunner(use_venv=False), pipeline_root=root, raise_on_error=True)
    with contextlib.redirect_stdout(stream), contextlib.redirect_stderr(stream):
        with fast_stage_exit(progress.exited), pytest.raises(RuntimeError, match="FAILURE"):
            crashing_step(how="segfault")
    assert progress.killed_by == signal.SIGSEGV
    lines = killed_message(progress.killed_by, progress.tail.excerpt()).splitlines()
    assert lines[0] == (
        "the stage's process was killed by SIGSEGV (Segmentation fault): it crashed in native code (the model's "
        "code or a library it calls: TensorFlow, NumPy, an extension); the last lines of its log:"
    )
    crashed = lines.index("    crashing_step: about to crash by segfault")
    assert lines[crashed + 1] == "    Fatal Python error: Segmentation fault"
    assert re.fullmatch(r" {4}Current thread 0x[0-9a-f]+ \(most recent call first\):", lines[crashed + 2])
    assert lines[crashed + 3].endswith("in string_at")
    assert re.fullmatch(r' {6}File "\S+/ephemeral_component\.py", line \d+ in crashing_step', lines[crashed + 4])
    assert len(lines) == crashed + 3 + 6  # the crashed thread's six innermost frames
    assert server.poll() is None


def test_exit_statuses_name_the_signal_that_killed_the_stage():
    """-N from a process killed by signal N; 128 + N from the shell that ran it; otherwise an ordinary exit."""
    statuses = [-11, 139, -6, 134, -9, 137, 0, 1, 2, 128, 255]
    assert [signal_of(code) for code in statuses] == [
        *[signal.SIGSEGV] * 2,
        *[signal.SIGABRT] * 2,
        *[signal.SIGKILL] * 2,
        *[None] * 5,
    ]


def test_a_stage_killed_from_outside_or_without_a_log_is_named_by_its_signal():
    assert killed_message(signal.SIGKILL, ["step 300/1000 (30%)"]) == (
        "the stage's process was killed by SIGKILL (Killed): it was killed from outside, often by the system when "
        "memory runs out; the last lines of its log:\n    step 300/1000 (30%)"
    )
    assert killed_message(signal.SIGABRT, []) == (
        "the stage's process was killed by SIGABRT (Aborted): it crashed in native code (the model's code or a "
        "library it calls: TensorFlow, NumPy, an extension); it logged nothing"
    )


def test_an_earlier_attempts_traceback_is_not_this_attempts_error(tmp_path):
    path = tmp_path / "pipeline.log"
    path.write_text(
        "==== run r, attempt 1, started 2026-11-25T00:00:00+00:00 ====\n"
        "    Traceback (most recent call last):\n      old\n    ValueError: attempt 1's error\n"
        "==== run r, attempt 2, started 2026-11-25T00:01:00+00:00 ====\n"
        "00:01:09.330 - ERROR - Task 'train-model' finished with status FAILURE\n"
    )
    assert failure_message(str(path), "train") == (
        "the train stage stopped without an error message (killed by the system, e.g. out of memory?)"
    )
    assert failure_excerpt(str(path)) == ""


ABORTING_FAMILY = """import os


def logits_fn(features, ctx):
    print("aborting_model: building the logits")
    os.abort()
"""


def test_run_local_with_a_model_family_that_aborts_fails_the_train_stage_naming_sigabrt(tmp_path):
    code = tmp_path / "code" / "aborting_model"
    code.mkdir(parents=True)
    (code / "__init__.py").write_text(ABORTING_FAMILY)
    output = str(tmp_path / "out")
    command = [sys.executable, "-m", "pipelines", "run-local", "--output", output, "--baseline", "none"]
    for setting in ("prepare.num_workers=1", "training.train_steps=5", "model.family=aborting_model:logits_fn"):
        command += ["--set", setting]
    path = os.pathsep.join([str(code.parent), ROOT, os.environ.get("PYTHONPATH", "")])
    env = dict(os.environ, PYTHONPATH=path, TF_CPP_MIN_LOG_LEVEL="2")
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, env=env, timeout=600)
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    lines = done.stderr.splitlines()
    assert lines[0] == (
        "tpu-pipeline run-local: error: train: the stage's process was killed by SIGABRT (Aborted): it crashed in "
        "native code (the model's code or a library it calls: TensorFlow, NumPy, an extension); the last lines "
        "of its log:"
    )
    crashed = lines.index("    aborting_model: building the logits")
    assert lines[crashed + 1] == "    Fatal Python error: Aborted"
    assert lines[crashed + 3] == f'      File "{code / "__init__.py"}", line 6 in logits_fn'
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["status"] == "failed" and summary["stage"] == "train"  # recorded by the runner, which went on
    error = summary["error"].splitlines()
    assert lines[: len(error)] == ["tpu-pipeline run-local: error: train: " + error[0], *error[1:]]
    assert len(error) == crashed + 9 and lines[len(error)] == f"full log: {summary['run']['log']}"
