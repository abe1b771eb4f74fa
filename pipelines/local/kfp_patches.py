"""What the local runner needs of KFP 2.13 that it offers no setting for: fixed run directories
(`fixed_run_directory`), stages started through `pipelines.stage` (`fast_stage_exit`), and task names as stages."""

from __future__ import annotations

import contextlib
import functools
import os
from typing import Callable, Optional

from kfp.local import executor_input_utils, subprocess_task_handler

from components import build_stages
from pipelines import runs, stage
from pipelines.image import LOCAL_IMAGE
from pipelines.pipeline import PIPELINE_NAME, task_stages

NOT_STARTED = 1  # the exit status of a stage that is not started: the local runner sees it fail


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


@contextlib.contextmanager
def fast_stage_exit(exited: Callable[[int], None] = _ignore_exit, refusal: Callable[[], Optional[str]] = _never_refuse):
    """Makes the KFP local runner start each stage as `python -m pipelines.stage` (KFP's executor, then an
    immediate exit once the stage's outputs are written) instead of `python -m kfp.dsl.executor_main`, and
    calls `exited` with each stage process's exit status (KFP keeps only success or failure). A stage is not
    started, and fails, when `refusal` gives a reason.

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
            code = original([part.replace(stage.KFP_EXECUTOR_MODULE, stage.__name__) for part in full_command])
        exited(code)
        return code

    subprocess_task_handler.run_local_subprocess = run
    try:
        yield
    finally:
        subprocess_task_handler.run_local_subprocess = original
