"""A local stage ends when its process does: a process its code started and left running (a tracking agent, a
pool; in a session of its own, out of reach of the runner's orphan stopper) does not hold it through the output
pipe it inherited. A stage silent too long (run-local's --stage-silence) is flagged; one past its timeout
(--stage-timeout) is stopped, naming the flag; a limit that is not a positive number is refused before any work."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from estimator_lib.config.stages import STAGE_TIMEOUT_FLAG, StageLimits
from pipelines import cli, runs, stage
from pipelines.local import kfp_patches, supervisor
from pipelines.local.console import Progress
from pipelines.local.runner import _failure
from pipelines.run_summary import RunInfo, RunSummary

COMPONENT = """
import subprocess
import time

def hello(name: str) -> str:
    if name.endswith("quiet"):
        time.sleep(120)
    child = subprocess.Popen(["sleep", "600"], start_new_session=True)
    with open(name, "w") as f:
        f.write(str(child.pid))
    print("left a child running", flush=True)
    return "hello"
"""


def stage_command(tmp_path, name: str) -> list[str]:
    """The stage's command as the KFP local runner runs it: a shell that runs KFP's executor."""
    module = tmp_path / "ephemeral_component.py"
    module.write_text(COMPONENT)
    executor_input = {
        "inputs": {"parameterValues": {"name": str(tmp_path / name)}},
        "outputs": {
            "parameters": {"Output": {"outputFile": str(tmp_path / "Output")}},
            "outputFile": str(tmp_path / "out"),
        },
    }
    script = f'{sys.executable} -m {stage.KFP_EXECUTOR_MODULE} "$@"'
    return [
        "sh",
        "-ec",
        script,
        "sh",
        "--component_module_path",
        str(module),
        "--function_to_execute",
        "hello",
        "--executor_input",
        json.dumps(executor_input),
    ]


def test_a_stage_ends_when_its_process_does_not_when_a_child_it_left_closes_the_pipe(tmp_path, monkeypatch):
    """Through the KFP local runner's own call, as the runner patches it (in a process of its own: before the fix,
    it waited for the child)."""
    monkeypatch.delenv(stage.STAGE_SERVER_ENV, raising=False)
    script = (
        "import sys\nfrom kfp.local import subprocess_task_handler\nfrom pipelines.local import kfp_patches\n"
        "with kfp_patches.fast_stage_exit():\n"
        f"    code = subprocess_task_handler.run_local_subprocess({stage_command(tmp_path, 'plain')!r})\n"
        "print('exit', code)\n"
    )
    with open(tmp_path / "log", "w") as log, subprocess.Popen([sys.executable, "-c", script], stdout=log) as runner:
        try:
            runner.wait(timeout=30)
        except subprocess.TimeoutExpired:
            runner.kill()
        finally:
            os.kill(int((tmp_path / "plain").read_text()), signal.SIGKILL)
    out = (tmp_path / "log").read_text()
    assert "left a child running" in out and out.rstrip().endswith("exit 0")


class Started(Exception):
    """Raised in place of starting the runner: the run's record is written by then."""


def test_the_flags_reach_the_stage_a_quiet_one_is_flagged_and_one_past_its_timeout_is_stopped(
    tmp_path, capfd, monkeypatch
):
    """run-local's --stage-timeout and --stage-silence are recorded in the run's summary (its config, which the
    runner reads its stages' limits from) and stop a stage run with them."""
    monkeypatch.setattr(supervisor, "_supervise", lambda folder, *rest: (_ for _ in ()).throw(Started(folder)))
    argv = ["run-local", "--output", str(tmp_path / "out"), "--stage-timeout", "0.12", "--stage-silence", "0.03"]
    with pytest.raises(Started) as started:
        cli.main(argv)
    recorded = started.value.args[0].read_summary().config[supervisor.LIMITS_KEY]
    assert recorded == {"quiet_minutes": 0.03, "timeout_minutes": 0.12}
    capfd.readouterr()
    began = time.monotonic()
    code = kfp_patches.run_stage(stage_command(tmp_path, "quiet"), StageLimits.from_dict(recorded))
    assert time.monotonic() - began < 30 and code != 0
    out = capfd.readouterr().out
    assert f"{kfp_patches.QUIET_MARKER} no output for 0.03 min" in out
    assert f"{kfp_patches.TIMEOUT_MARKER} stopped after 0.12 min, its timeout (--stage-timeout)" in out
    assert not (tmp_path / "quiet").exists()


def test_the_console_shows_both_lines_and_the_timeout_is_the_failed_stages_error(tmp_path):
    folder = runs.RunFolder.new(str(tmp_path))
    folder.create()
    run = RunInfo(folder.run_id, folder.path, folder.log, "2026-11-29T00:00:00+00:00", attempts=1)
    folder.write_summary(RunSummary(status=runs.RUNNING, stage=None, error=None, run=run, config={}))
    console = io.StringIO()
    progress = Progress(folder, folder.read_summary(), console)
    quiet = f"{kfp_patches.QUIET_MARKER} no output for 10 min: is its code waiting on something?"
    stopped = f"{kfp_patches.TIMEOUT_MARKER} stopped after 90 min, its timeout ({STAGE_TIMEOUT_FLAG}); raise it"
    for line in ("00:24:04.300 - INFO - Executing task 'train-model'", quiet, stopped):
        progress.line(line)
    progress.line("00:25:09.330 - ERROR - Task 'train-model' finished with status FAILURE")
    shown = [line[11:] for line in console.getvalue().splitlines()]
    assert shown == [
        "train: running",
        "train: no output for 10 min: is its code waiting on something?",
        f"train: stopped after 90 min, its timeout ({STAGE_TIMEOUT_FLAG}); raise it",
    ]
    assert _failure(RuntimeError("a task failed"), progress, io.StringIO()) == ("train", shown[2][7:])


@pytest.mark.parametrize("flag", ["--stage-timeout", "--stage-silence"])
@pytest.mark.parametrize("text", ["abc", "0", "-5", "nan", "inf"])
def test_a_stage_limit_that_is_not_a_positive_number_is_refused_naming_the_flag(tmp_path, capsys, flag, text):
    output = tmp_path / "out"
    with pytest.raises(SystemExit) as refused:
        cli.main(["run-local", "--output", str(output), flag, text])
    assert refused.value.code == 2 and not output.exists()  # before any work
    assert f"error: argument {flag}: {text!r} is not a positive number of minutes" in capsys.readouterr().err
