"""`python -m pipelines.stage`: one local stage, run by a child of the run's warm stage server or, without one,
by KFP's executor in a process of its own, then an immediate exit; and the local runner's switch to it. The
whole pipeline through it runs in tests/e2e/."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import signal
import subprocess
import sys
import time

import pytest
from kfp.local import subprocess_task_handler
from repo import ROOT

from components import build_stages
from pipelines import runner, stage
from pipelines.image import LOCAL_IMAGE
from pipelines.local.kfp_patches import fast_stage_exit

COMPONENT = """
import os
import time

def hello(name: str) -> str:
    print(f"pid {os.getpid()} parent {os.getppid()} cwd {os.getcwd()} env {os.environ.get('STAGE_TEST')}", flush=True)
    if name == "fail":
        raise ValueError("asked to fail")
    if name == "sleep":
        time.sleep(120)
    return "hello " + name
"""


def stage_command(tmp_path, name: str) -> list[str]:
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
    return command + ["--executor_input", json.dumps(executor_input), "--function_to_execute", "hello"]


def run_stage(tmp_path, name: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "STAGE_TEST": name}
    return subprocess.run(stage_command(tmp_path, name), capture_output=True, text=True, cwd=ROOT, env=env, timeout=300)


def reported(done: subprocess.CompletedProcess) -> dict[str, str]:
    """What the component printed about its process: pid, parent, cwd, env."""
    line = next(line for line in done.stdout.splitlines() if line.startswith("pid "))
    words = line.split()
    return dict(zip(words[::2], words[1::2]))


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """A warm stage server, as the local runner starts one; its address is in this process's environment (the
    stages started here inherit it)."""
    log_path = tmp_path_factory.mktemp("server") / "pipeline.log"
    with open(log_path, "a", encoding="utf-8") as log, runner.stage_server("test", log) as process:
        yield process
    assert process.poll() is not None


def alive(pid: int) -> bool:
    with open(f"/proc/{pid}/stat", encoding="utf-8") as f:
        return f.read().rsplit(")", 1)[1].split()[0] != "Z"


def wait_gone(pid: int, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(FileNotFoundError, ProcessLookupError):  # gone, or reaped while /proc was read
            if alive(pid):
                time.sleep(0.05)
                continue
        return
    raise AssertionError(f"process {pid} still runs after {timeout} s")


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
    with fast_stage_exit():
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


def test_through_the_server_a_stage_runs_in_its_child_with_the_same_outputs_and_exit_codes(tmp_path, server):
    done = run_stage(tmp_path, "world")
    assert done.returncode == 0, done.stderr
    assert reported(done) == {"pid": reported(done)["pid"], "parent": str(server.pid), "cwd": ROOT, "env": "world"}
    assert "[KFP Executor " in done.stdout  # KFP's log format, on the stage's stdout as in a fresh process
    assert json.loads((tmp_path / "executor_output.json").read_text())["parameterValues"]["Output"] == "hello world"
    os.remove(tmp_path / "executor_output.json")
    failed = run_stage(tmp_path, "fail")
    assert failed.returncode == 1 and reported(failed)["parent"] == str(server.pid)
    assert "Traceback (most recent call last):" in failed.stderr
    assert failed.stderr.rstrip().endswith("ValueError: asked to fail")
    assert not os.path.exists(tmp_path / "executor_output.json")


def test_without_a_server_the_stage_runs_in_its_own_process(tmp_path, monkeypatch):
    monkeypatch.setenv(stage.STAGE_SERVER_ENV, "tpu-pipeline-nobody-listens")
    done = run_stage(tmp_path, "world")
    assert done.returncode == 0, done.stderr
    assert reported(done)["parent"] == str(os.getpid())
    assert json.loads((tmp_path / "executor_output.json").read_text())["parameterValues"]["Output"] == "hello world"


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_to_the_stage_process_stops_the_servers_child_and_ends_the_stage_by_it(tmp_path, server, signum):
    with subprocess.Popen(stage_command(tmp_path, "sleep"), stdout=subprocess.PIPE, text=True, cwd=ROOT) as proc:
        line = next(line for line in proc.stdout if line.startswith("pid "))
        child = int(line.split()[1])
        assert child != proc.pid and alive(child)
        proc.send_signal(signum)
        assert proc.wait(timeout=60) == -signum
    wait_gone(child)


def test_a_killed_stage_process_takes_the_servers_child_with_it(tmp_path, server):
    with subprocess.Popen(stage_command(tmp_path, "sleep"), stdout=subprocess.PIPE, text=True, cwd=ROOT) as proc:
        child = int(next(line for line in proc.stdout if line.startswith("pid ")).split()[1])
        proc.kill()
    wait_gone(child)
    assert server.poll() is None  # and the server serves the next stage
    assert run_stage(tmp_path, "world").returncode == 0


def test_the_server_dies_with_the_runner_that_started_it(tmp_path):
    runner = (
        "import sys\nfrom pipelines import runner\n"
        f"with open({str(tmp_path / 'log')!r}, 'a') as log, runner.stage_server('test', log) as server:\n"
        "    print(server.pid, flush=True)\n    sys.stdin.read()\n"
    )
    with subprocess.Popen(
        [sys.executable, "-c", runner], stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=ROOT
    ) as proc:
        server = int(proc.stdout.readline())
        assert alive(server)
        proc.kill()
    wait_gone(server)


def test_the_server_refuses_to_fork_once_tensorflow_s_runtime_has_started():
    script = (
        "import tensorflow as tf\nfrom pipelines import stage_server\n"
        "stage_server.check_fork_safe()\ntf.constant(1)\nstage_server.check_fork_safe()\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert done.returncode == 1
    assert done.stderr.rstrip().endswith(
        "RuntimeError: pipelines.stage_server: TensorFlow's runtime was started while the stage modules were "
        "imported (a module runs TensorFlow at import time), so forking is unsafe; the stages run in processes of "
        "their own until that module does its TensorFlow work when called"
    )


def test_the_server_is_gone_after_a_run_that_failed(tmp_path, monkeypatch):
    monkeypatch.delenv(stage.STAGE_SERVER_ENV, raising=False)  # the module's server, if it runs
    with pytest.raises(RuntimeError, match="a stage failed"):
        with open(tmp_path / "pipeline.log", "a", encoding="utf-8") as log, runner.stage_server("test", log) as server:
            assert server.poll() is None and os.environ[stage.STAGE_SERVER_ENV]
            raise RuntimeError("a stage failed")
    wait_gone(server.pid)
    assert stage.STAGE_SERVER_ENV not in os.environ


def test_the_runner_starts_the_stage_server_before_its_own_imports(tmp_path):
    folder = tmp_path / "runs" / "20261122T000000Z-abcdef"
    folder.mkdir(parents=True)
    script = (
        "import sys\nfrom pipelines import runner\n"
        "def started(run_id, log):\n"
        "    heavy = ('kfp', 'tensorflow', 'components', 'pipelines.local')\n"
        "    print(run_id, sorted(m for m in heavy if m in sys.modules), log.name, flush=True)\n"
        "    raise SystemExit(3)\n"
        "runner.start_stage_server = started\n"
        f"runner.main([{str(folder)!r}])\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 3, done.stderr
    assert done.stdout.split() == [folder.name, "[]", str(folder / "pipeline.log")]
