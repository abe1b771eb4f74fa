"""A crash in a stage's own code (a segfault, an abort: real signals) ends that stage alone, by its signal, with
the Python stack faulthandler printed after every line the stage printed: through the stage server, whose next
stage runs, and without it."""

import json
import os
import re
import signal
import subprocess
import sys

import pytest
from repo import ROOT

from pipelines import runner, stage

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
