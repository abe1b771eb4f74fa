"""The runner's side of a local run (`python -m pipelines.runner`, then `runner_main`): runs the pipeline with the
KFP local runner in this process and hands how it ended to the supervisor."""

from __future__ import annotations

import contextlib
import json
import os
import sys
import threading
import time
import traceback
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import IO, Any

from kfp import local as kfp_local

from estimator_lib.cloud.alerts import first_line
from estimator_lib.config.stages import StageLimits
from pipelines import runs
from pipelines.image import LOCAL_IMAGE
from pipelines.local.console import ConsoleFilter, LogFile, Progress, keep_beating
from pipelines.local.failures import ATTEMPT_MARKER, REFUSED, failure_message, killed_message, refusal_text
from pipelines.local.kfp_patches import fast_stage_exit, fixed_run_directory, task_directory
from pipelines.local.summary import copy_report, summarize
from pipelines.local.supervisor import ENDING_FD_FLAG, EXIT_FAILED, EXIT_OK, LIMITS_KEY, stop_orphans
from pipelines.pipeline import build_pipeline


def _keep_stopping_orphans(interval: float = 1.0) -> None:
    while True:
        stop_orphans(os.getpgrp())
        time.sleep(interval)


def run_pipeline(
    arguments: Mapping[str, Any],
    folder: runs.RunFolder,
    progress: Progress,
    verbose: bool,
    log: IO[str],
    limits: StageLimits,
) -> dict:
    """Runs the pipeline with the KFP local runner in this process, its output into `log` (the run's log), each
    stage within `limits`; returns its outputs {name: artifact}.

    Raises:
      RuntimeError: a stage failed (the local runner's error; the stage's own is in the log), or was not started
        (`progress.refusal`).
    """
    with (
        contextlib.redirect_stdout(ConsoleFilter(log, sys.stdout, verbose, progress)) as stream,
        contextlib.redirect_stderr(stream),
    ):
        attempt = progress.summary.run.attempts
        started = f"{ATTEMPT_MARKER}{folder.run_id}, attempt {attempt}, started {runs.utc_now()} ===="
        print(started, file=log, flush=True)
        kfp_local.init(
            runner=kfp_local.SubprocessRunner(use_venv=False),
            pipeline_root=folder.pipeline_root,
            raise_on_error=True,
        )
        with (
            warnings.catch_warnings(),
            fixed_run_directory(folder.run_id),
            fast_stage_exit(progress.exited, progress.refusal, limits),
        ):
            # The subprocess runner warns that our image name lacks "python": it never uses the image.
            warnings.filterwarnings("ignore", message=".*non-Python base image.*", category=RuntimeWarning)
            task = build_pipeline(LOCAL_IMAGE)(**arguments)
    return dict(task.outputs)


def runner_main(argv: Sequence[str]) -> int:
    """`python -m pipelines.runner RUN_FOLDER --ending-fd FD [--verbose]` (which calls this once the run's stage
    server is starting): runs the pipeline of the run whose summary (with its arguments and stage limits) the
    supervisor wrote, each stage within its limits, and hands how it ended to the supervisor through the pipe FD
    (its summary, and the log's lines the disk refused), which writes it (`supervisor._finish`)."""
    threading.Thread(target=_keep_stopping_orphans, name="stop-orphans", daemon=True).start()
    path = os.path.abspath(argv[0])
    folder = runs.RunFolder(os.path.dirname(os.path.dirname(path)), os.path.basename(path))
    ending_fd = int(argv[list(argv).index(ENDING_FD_FLAG) + 1])
    summary = folder.read_summary()
    progress = Progress(folder, summary, sys.stdout)
    verbose = "--verbose" in argv
    limits = StageLimits.from_dict(summary.config[LIMITS_KEY])
    if not verbose:  # a verbose console streams every stage's log already
        threading.Thread(target=keep_beating, args=(progress,), name="heartbeat", daemon=True).start()
    with LogFile(folder.log, lambda why: progress.unrecordable(progress.stage, why)) as log:
        try:
            outputs = run_pipeline(summary.arguments, folder, progress, verbose, log, limits)
            results = summarize(outputs, summary)
            summary = replace(results, report=copy_report(outputs, folder), status=runs.OK, stage=None, error=None)
        except Exception as e:  # noqa: BLE001 - whatever failed is recorded
            stage, error = _failure(e, progress, log)
            summary = replace(summary, status=runs.FAILED, stage=stage, error=error)
        if progress.unrecorded and summary.status == runs.OK:  # every stage ran, but the log is cut
            stage, error = progress.unrecorded
            summary = replace(summary, status=runs.FAILED, stage=stage, error=error)
        # this attempt's stages reused, and each stage's seconds (the failed one's up to its failure)
        summary = replace(summary, run=replace(summary.run, reused=progress.reused, seconds=progress.seconds))
        _send(ending_fd, {"summary": summary.to_dict(), "log": log.ending()})
    return EXIT_OK if summary.status == runs.OK else EXIT_FAILED


def _failure(e: Exception, progress: Progress, log: LogFile) -> tuple[str, str]:
    """(stage, error) of a run that raised `e`: a stage's own failure first, else a record the disk refused."""
    stage = progress.failed or progress.stage or "runner"
    ran = isinstance(e, RuntimeError) and progress.failed and not progress.refused
    if ran and progress.timed_out:
        return stage, progress.timed_out
    if ran and progress.killed_by is not None:  # a crash
        return stage, killed_message(progress.killed_by, progress.tail.excerpt())
    if ran:  # a stage failed: its traceback is in the log (or, for the lines the disk refused, in `log`)
        return stage, failure_message(log.path, stage, log.unwritten(), task_directory(progress.folder, stage))
    if progress.unrecorded:
        return progress.unrecorded
    traceback.print_exc(file=log)
    if isinstance(e, OSError) and e.errno in REFUSED:  # copying the report into the run folder
        return stage, refusal_text(e.strerror, e.filename2 or e.filename)
    return stage, first_line(f"{type(e).__name__}: {e}")


def _send(fd: int, ending: Mapping[str, Any]) -> None:
    """Writes the runner's ending into the supervisor's pipe; nothing if the supervisor has gone."""
    with contextlib.suppress(BrokenPipeError), open(fd, "wb") as pipe:
        pipe.write(json.dumps(ending).encode("utf-8"))
