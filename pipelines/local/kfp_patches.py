"""What the local runner needs of KFP 2.13 that it offers no setting for: fixed run directories
(`fixed_run_directory`), stages started through `pipelines.stage` and run until their process ends, within their
limits (`fast_stage_exit`, `run_stage`), and task names as stages."""

from __future__ import annotations

import contextlib
import functools
import os
import select
import signal
import subprocess
import time
from typing import Callable, Optional

from kfp.local import executor_input_utils, subprocess_task_handler

from components import build_stages
from estimator_lib.config.stages import STAGE_TIMEOUT_FLAG, StageLimits
from pipelines import runs, stage
from pipelines.image import LOCAL_IMAGE
from pipelines.pipeline import PIPELINE_NAME, task_stages

NOT_STARTED = 1  # the exit status of a stage that is not started: the local runner sees it fail
# Lines `run_stage` adds to a stage's output: it printed nothing for a while; it ran past its timeout and is stopped.
QUIET_MARKER, TIMEOUT_MARKER = "[stage quiet]", "[stage timeout]"
DEFAULT_LIMITS = StageLimits()
STOP_GRACE_SECONDS = 10.0  # after SIGTERM, what a stage past its timeout gets before SIGKILL


@functools.lru_cache(maxsize=None)
def _task_stages() -> dict[str, str]:
    """KFP task name -> the `Stages` field it runs: "train-model" -> "train"."""
    return task_stages(build_stages(LOCAL_IMAGE))


def stage_of(task: str) -> str:
    return _task_stages().get(task, task)


def task_directory(folder: runs.RunFolder, stage: str) -> str:
    """Where `stage` writes its outputs in the run (`fixed_run_directory`): <pipeline root>/<pipeline>-<run>/<task>."""
    task = next((t for t, s in _task_stages().items() if s == stage), stage)
    return os.path.join(folder.pipeline_root, f"{PIPELINE_NAME}-{folder.run_id}", task)


@contextlib.contextmanager
def fixed_run_directory(run_id: str):
    """Makes the KFP local runner put the run's artifacts in <pipeline root>/<pipeline>-<run id>/ instead of a
    directory named after the current time, so every attempt of a run works in the same task directories.

    KFP 2.13 names that directory with `executor_input_utils.get_local_pipeline_resource_name` and offers no
    setting for it; tests/pipelines/test_local.py checks the name this gives.
    """
    original = executor_input_utils.get_local_pipeline_resource_name
    executor_input_utils.get_local_pipeline_resource_name = lambda name: f"{name}-{run_id}"
    try:
        yield
    finally:
        executor_input_utils.get_local_pipeline_resource_name = original


def _ignore_exit(code: int) -> None:
    pass


def _never_refuse() -> Optional[str]:
    return None


def _signal_tree(pid: int, signum: int) -> None:
    """Sends `signum` to a process and its descendants (KFP's shell, the stage process, which passes it on to the
    stage server's child that runs the stage)."""
    with contextlib.suppress(OSError):
        with open(f"/proc/{pid}/task/{pid}/children", encoding="ascii") as f:
            for child in f.read().split():
                _signal_tree(int(child), signum)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signum)


def _relay(fd: int, pending: bytes) -> tuple[Optional[bytes], bool]:
    """Prints the whole lines the pipe `fd` holds now; returns the partial line left (None once the pipe is
    closed) and whether anything came."""
    came = False
    while True:
        try:
            chunk = os.read(fd, 1 << 16)
        except BlockingIOError:
            return pending, came
        if not chunk:
            print(pending.decode("utf-8", "replace"), end="")
            return None, came
        *lines, pending = (pending + chunk).split(b"\n")
        came = True
        for line in lines:
            print(line.decode("utf-8", "replace"))


def run_stage(command: list[str], limits: StageLimits = DEFAULT_LIMITS) -> int:
    """Runs one stage's process as KFP's `run_local_subprocess` does (its stdout and stderr printed line by line),
    but until the process ends rather than until its output pipe closes: a process its code started and left
    running (a tracking agent, a pool) may hold the pipe, not the stage. A line says so when the stage printed
    nothing for `limits.quiet_minutes`; past `limits.timeout_minutes` it is stopped (SIGTERM, then SIGKILL).

    Returns:
      The process's exit status.
    """
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT) as process:
        out, pidfd = process.stdout.fileno(), os.pidfd_open(process.pid)
        os.set_blocking(out, False)
        pending: Optional[bytes] = b""
        started = heard = time.monotonic()
        stopped, warned = None, False
        try:
            while True:
                ended = pidfd in select.select([pidfd] + ([out] if pending is not None else []), [], [], 1.0)[0]
                if pending is not None:
                    pending, came = _relay(out, pending)
                    heard, warned = (time.monotonic(), False) if came else (heard, warned)
                if ended:
                    break
                now = time.monotonic()
                if not warned and now - heard >= limits.quiet_minutes * 60:
                    print(
                        f"{QUIET_MARKER} no output for {limits.quiet_minutes:g} min: is its code waiting on something?"
                    )
                    warned = True
                if stopped is None and limits.timeout_minutes and now - started >= limits.timeout_minutes * 60:
                    print(
                        f"{TIMEOUT_MARKER} stopped after {limits.timeout_minutes:g} min, its timeout "
                        f"({STAGE_TIMEOUT_FLAG}); raise it, or leave it out, if the stage needs longer"
                    )
                    _signal_tree(process.pid, signal.SIGTERM)
                    stopped = now
                elif stopped is not None and now - stopped >= STOP_GRACE_SECONDS:
                    _signal_tree(process.pid, signal.SIGKILL)
        finally:
            os.close(pidfd)
        print(pending.decode("utf-8", "replace") if pending else "", end="")
        print("\n")  # as KFP ends a stage's output
        return process.wait()


@contextlib.contextmanager
def fast_stage_exit(
    exited: Callable[[int], None] = _ignore_exit,
    refusal: Callable[[], Optional[str]] = _never_refuse,
    limits: StageLimits = DEFAULT_LIMITS,
):
    """Makes the KFP local runner start each stage as `python -m pipelines.stage` (KFP's executor, then an
    immediate exit once the stage's outputs are written) instead of `python -m kfp.dsl.executor_main`, run it
    until its process ends within `limits` (`run_stage`), and call `exited` with each stage process's exit status
    (KFP keeps only success or failure). A stage is not started, and fails, when `refusal` gives a reason.

    KFP 2.13 builds the command from the compiled spec and offers no setting for it; the substitution happens
    where the runner starts the process (`subprocess_task_handler.run_local_subprocess`), after KFP's checks.
    """
    original = subprocess_task_handler.run_local_subprocess

    def run(full_command: list[str]) -> int:
        reason = refusal()
        if reason is not None:
            print(f"not started: {reason}", flush=True)
            code = NOT_STARTED
        else:
            code = run_stage([part.replace(stage.KFP_EXECUTOR_MODULE, stage.__name__) for part in full_command], limits)
        exited(code)
        return code

    subprocess_task_handler.run_local_subprocess = run
    try:
        yield
    finally:
        subprocess_task_handler.run_local_subprocess = original
