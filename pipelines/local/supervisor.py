"""The supervisor: runs the pipeline locally (`run_local`) into a run folder of its own, in the CLI's process.

It takes the lock on OUTPUT, picks the run folder (`choose_run`), starts the runner (`pipelines.runner`) in a session
of its own, stops its process group on SIGINT, SIGTERM or SIGHUP, and writes the final summary the runner hands it
through a pipe (`_finish`), then the failure alert of a run given a webhook (`alert_webhook`)."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import replace
from typing import Any, Callable, Optional

from components import records
from estimator_lib import storage
from estimator_lib.cloud import alerts as alerting
from estimator_lib.cloud.alerts import first_line
from estimator_lib.config import RunConfig
from estimator_lib.config.alerts import AlertConfig, redact_url
from estimator_lib.config.run import LOCAL_JOB_DEFAULTS
from estimator_lib.config.stages import StageLimits
from pipelines import runs, stage
from pipelines.local.console import append_unwritten, is_terminal
from pipelines.local.failures import cannot_write, failure_report
from pipelines.local.kfp_patches import DEFAULT_LIMITS, task_directory
from pipelines.pipeline import PIPELINE_NAME
from pipelines.run_summary import RunInfo, RunSummary, SummaryError

PUBLISH_DIR = "published"
EXIT_OK, EXIT_FAILED = 0, 1
GRACE_SECONDS = 2.0  # after SIGTERM, what the stages get before SIGKILL


NO_ALERTS = AlertConfig()


ENDING_FD_FLAG = "--ending-fd"
LIMITS_KEY = "stage_limits"  # in a local run's summary config: its stages' `StageLimits`, which the runner reads


def local_job_defaults() -> dict[str, Any]:
    """What a local run defaults in the job config: CPU, with the TPU-strict checks on (they catch on CPU what a
    TPU would reject later). Defaults only: a config file or `--set tpu.strict=false` overrides them (the stages
    run on CPU whatever `tpu.use_tpu` says: the pipeline places them there)."""
    return dict(LOCAL_JOB_DEFAULTS)


class ResumeError(ValueError):
    """--resume names no run that can be resumed with these arguments."""


class RecordError(RuntimeError):
    """The disk refused a run's record (full, read-only, not writable): the run could not start, or it ended and
    its summary could not be written. The message names the path and the cause, and where the last good record
    is; the CLI prints it and exits 1."""


@dataclasses.dataclass(frozen=True)
class Outcome:
    """How a run ended: its folder, its summary (as written to summary.json) and the exit code."""

    folder: runs.RunFolder
    summary: RunSummary
    exit_code: int


def run_local(
    settings: RunConfig,
    output: str,
    verbose: bool = False,
    resume: Optional[bool] = None,
    alerts: AlertConfig = NO_ALERTS,
    limits: StageLimits = DEFAULT_LIMITS,
) -> Outcome:
    """Runs the pipeline locally into OUTPUT/runs/<run id>/ and writes its summary (and OUTPUT/summary.json).

    Args:
      settings: the run's parameters.
      output: the output directory (OUTPUT).
      verbose: stream every stage's full log to the console (it always goes to the run's pipeline.log).
      resume: True resumes the last run (it must have failed or been interrupted, with these arguments); False
        starts a new run; None resumes the last run if it failed or was interrupted with these arguments.
      alerts: its webhook gets one message when the run fails or is interrupted (`alert_webhook`); the KFP local
        runner runs no exit handler, so the supervisor sends it once the summary is written.
      limits: how long each stage may go without output, and run at all (recorded in the summary's config, not
        compared on resume: a failed run may be resumed with other limits).

    Raises:
      runs.OutputInUseError: another run holds OUTPUT.
      ResumeError: resume=True and there is no such run.
      RecordError: the disk refused the run's start, or its summary at the end.
    """
    output = os.path.abspath(output)
    if resume and not os.path.isdir(output):  # refused before anything is written
        raise ResumeError(f"--resume: {output} holds no failed or interrupted run to resume")
    try:
        os.makedirs(output, exist_ok=True)
        lock = runs.lock_output(output)
    except OSError as e:
        raise RecordError(f"cannot start a run in {output}: {cannot_write(e)}") from None
    try:
        folder, summary = choose_run(output, settings.view(), resume)
        config = {**summary.config, LIMITS_KEY: limits.to_dict()}
        summary = replace(summary, config=config, arguments=settings.arguments())  # the pipeline's: the specs
        _start(folder, summary, lock)
        outcome = _supervise(folder, summary, verbose, lock)
    finally:
        os.close(lock)
    if alerts.webhook:
        alert_webhook(alerts.webhook, outcome)
    return outcome


def run_alert(outcome: Outcome) -> Optional[alerting.Alert]:
    """The alert of a run that failed or was interrupted, or that succeeded with its skew check's warning, as a
    Vertex AI run's exit handler words it (`estimator_lib.cloud.alerts`); None for a run that succeeded without."""
    summary = outcome.summary
    if summary.status == runs.OK:
        skew = summary.results.predictions.skew if summary.results else None
        if not (skew and skew.warning):
            return None
        run, log = outcome.folder.run_id, summary.run.log
        return alerting.Alert(PIPELINE_NAME, run, alerting.SUCCEEDED, "batch_predict", "", "local", log, skew.warning)
    state = alerting.CANCELLED if summary.status == runs.INTERRUPTED else alerting.FAILED
    error = first_line(summary.error or "")
    return alerting.Alert(
        PIPELINE_NAME, outcome.folder.run_id, state, summary.stage or "", error, "local", summary.run.log
    )


def alert_webhook(url: str, outcome: Outcome) -> Optional[str]:
    """Posts the run's alert to `url` (`alerts.webhook_url`; nothing for a run that succeeded without a warning)
    and says on the console whether it was delivered, naming the webhook's host only. The run's outcome stands
    either way; returns why it was not delivered, or None."""
    alert = run_alert(outcome)
    if alert is None:
        return None
    failed = alerting.deliver(url, alert)
    said = f"not delivered ({failed})" if failed else "delivered"
    print(f"{alert.kind} to {redact_url(url)}: {said}", flush=True)
    return failed


def _canonical(value: Any) -> Any:
    return json.loads(json.dumps(value, sort_keys=True))


def choose_run(output: str, arguments: Mapping[str, Any], resume: Optional[bool]) -> tuple[runs.RunFolder, RunSummary]:
    """The folder and starting summary of this run: the last run's (another attempt) or a new one."""
    previous = runs.last_run(output)
    try:
        record = previous.read_summary() if previous else None
    except SummaryError as e:  # not a summary this version reads (another version's, or damaged): not resumable
        if resume:
            raise ResumeError(f"--resume: the last run's summary cannot be read: {e}") from None
        record = None
    # "running" in a folder whose lock is free (we hold it) means its processes were killed outright.
    resumable = record is not None and record.status in (runs.FAILED, runs.INTERRUPTED, runs.RUNNING)
    # A run's summary keeps its settings ("config", `RunConfig.view()`) until it ends ok, when job_config becomes the
    # one training ran (the warm-start source resolved).
    differing = sorted(k for k, v in _canonical(arguments).items() if record and record.config.get(k) != v)
    if resume and not resumable:
        status = f"; the last run, {previous.run_id}, ended {record.status}" if previous and record else ""
        raise ResumeError(f"--resume: {output} holds no failed or interrupted run to resume{status}")
    if resume and differing:
        raise ResumeError(
            f"--resume: run {previous.run_id} was started with other values of {', '.join(differing)}; give the "
            "same arguments to resume it, or leave out --resume to start a new run"
        )
    now = runs.utc_now()
    if resume is False or not resumable or differing:
        folder = runs.RunFolder.new(output)
        run = RunInfo(id=folder.run_id, dir=folder.path, log=folder.log, started=now, attempts=1)
    else:
        folder = previous
        run = replace(record.run, attempts=record.run.attempts + 1, resumed=now)
    return folder, RunSummary(status=runs.RUNNING, stage=None, error=None, run=run, config=dict(arguments))


def _start(folder: runs.RunFolder, summary: RunSummary, lock: int) -> None:
    """Clears what earlier runs left and records this run before it runs: the lock's holder, its folder, the
    reserve for its last records, its summary (status running).

    Raises:
      RecordError: the disk refused one of them; nothing ran, and a new run's folder is deleted again.
    """
    new = not os.path.exists(folder.path)
    try:
        runs.remove_leftovers(folder.output)
        with _naming(os.path.join(folder.output, runs.LOCK_FILE)):  # a write into an open file names none
            runs.record_holder(lock, folder.run_id)
        folder.create()
        folder.reserve_space()
        runs.publish_summary(folder, summary)
    except OSError as e:
        if new:
            shutil.rmtree(folder.path, ignore_errors=True)
        else:
            _clean_up(folder)
        raise RecordError(f"cannot start run {folder.run_id}: {cannot_write(e)}; nothing was run") from None


@contextlib.contextmanager
def _naming(path: str) -> Iterator[None]:
    """An OSError that names no file names `path`."""
    try:
        yield
    except OSError as e:
        if e.filename is not None:
            raise
        raise OSError(e.errno, e.strerror, path) from None


def _supervise(folder: runs.RunFolder, summary: RunSummary, verbose: bool, lock: int) -> Outcome:
    """Starts the runner in a session of its own, stops its process group on a signal, records how it ended.

    The runner hands over its final summary through a pipe (`--ending-fd`), not the disk: the supervisor writes
    it, and says so when the disk refuses (`_finish`)."""
    attempt = summary.run.attempts
    resumed = f", attempt {attempt}: finished stages are reused" if attempt > 1 else ""
    print(f"run {folder.run_id}{resumed}\nfull log: {folder.log}", flush=True)
    ending_fd, runner_fd = os.pipe()
    ending = _read_in_background(ending_fd)
    command = [sys.executable, "-m", "pipelines.runner", folder.path, ENDING_FD_FLAG, str(runner_fd)]
    command += ["--verbose"] if verbose else []
    # The stages' output reaches the console through pipes: they learn from the environment that it is a terminal.
    env = {**os.environ, "TMPDIR": folder.tmp, records.CONSOLE_TTY_ENV: "1" if is_terminal(sys.stdout) else "0"}
    stopped: list[int] = []
    try:
        runner = subprocess.Popen(command, start_new_session=True, env=env, pass_fds=(lock, runner_fd))
    finally:
        os.close(runner_fd)  # the runner's copy is the only one: its end is the pipe's end
    with runner:

        def stop(signum: int, frame: Any) -> None:
            stopped.append(signum)
            _signal_group(runner.pid, signal.SIGTERM)

        previous = {s: signal.signal(s, stop) for s in stage.STOP_SIGNALS}
        try:
            code = _wait(runner, stopped)
        finally:
            for s, handler in previous.items():
                signal.signal(s, handler)
        if stopped or code < 0:  # stages of a runner that was killed are orphans in its group: stop them too
            _signal_group(runner.pid, signal.SIGKILL)
            _wait_group_gone(runner.pid)
    return _finish(folder, code, stopped[0] if stopped else None, _decode_ending(ending()))


def _read_in_background(fd: int) -> Callable[[], bytes]:
    """Reads the pipe `fd` to its end on a thread of its own (a writer never blocks on a full pipe); the
    function returned waits for the end (at most `GRACE_SECONDS` once the writer is gone) and gives the bytes."""
    chunks: list[bytes] = []

    def read() -> None:
        with open(fd, "rb") as pipe:
            chunks.append(pipe.read())

    thread = threading.Thread(target=read, name="runner-ending", daemon=True)
    thread.start()

    def result() -> bytes:
        thread.join(GRACE_SECONDS)
        return b"".join(chunks)

    return result


def _decode_ending(data: bytes) -> dict[str, Any]:
    """The runner's ending ({"summary": ..., "log": ...}); {} when it sent none (it was killed, or crashed)."""
    try:
        return json.loads(data) if data else {}
    except ValueError:
        return {}


def _wait(runner: subprocess.Popen, stopped: Sequence[int]) -> int:
    stop_time = None
    while True:
        try:
            return runner.wait(timeout=0.2)
        except subprocess.TimeoutExpired:
            if stopped and stop_time is None:
                stop_time = time.monotonic()
            if stop_time is not None and time.monotonic() - stop_time > GRACE_SECONDS:
                _signal_group(runner.pid, signal.SIGKILL)


def _signal_group(pgid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signum)


def _process_table() -> dict[int, tuple[int, int]]:
    """{pid: (parent pid, process group)} of every live (not zombie) process, from /proc."""
    table = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="utf-8") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z":
            table[int(entry)] = (int(fields[1]), int(fields[2]))
    return table


def group_members(pgid: int) -> list[int]:
    """Live (not zombie) processes of process group `pgid`."""
    return sorted(pid for pid, (_, group) in _process_table().items() if group == pgid)


def stop_orphans(pgid: int) -> list[int]:
    """Kills the processes of group `pgid` whose parent is outside it (except the group's leader, the runner)
    and returns them: worker processes of a stage that was killed (out of memory, SIGKILL). Reparented to init,
    they would keep the stage's output pipe open, and the KFP local runner would wait for it forever. Every
    other process of the group has its parent inside it (the runner, a stage)."""
    table = _process_table()
    orphans = [
        pid
        for pid, (parent, group) in table.items()
        if group == pgid and pid != pgid and table.get(parent, (0, -1))[1] != pgid
    ]
    for pid in orphans:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    return orphans


def _wait_group_gone(pgid: int, timeout: float = 3.0) -> None:
    deadline = time.monotonic() + timeout
    while group_members(pgid) and time.monotonic() < deadline:
        time.sleep(0.05)


def _finish(folder: runs.RunFolder, code: int, signum: Optional[int], ending: Mapping[str, Any]) -> Outcome:
    """Records how the run ended: the runner's summary (as it last wrote it, if it sent none), with the short
    report of a run that did not end ok, then the log's lines the disk refused while the run ran; deletes tmp/
    and the reserve.

    Raises:
      RecordError: the summary could not be written; the message says where the last good record is.
    """
    sent = ending.get("summary")
    summary = RunSummary.from_dict(sent, "the runner's ending") if sent else folder.read_summary()
    if signum is not None:
        summary = replace(summary, status=runs.INTERRUPTED, error=f"interrupted by {signal.Signals(signum).name}")
        exit_code = 128 + signum
    elif summary.status == runs.RUNNING:  # the runner ended without recording how
        error = f"the local runner stopped unexpectedly (exit status {code})"
        summary = replace(summary, status=runs.FAILED, error=error)
        exit_code = EXIT_FAILED
    else:
        exit_code = EXIT_OK if summary.status == runs.OK else EXIT_FAILED
    summary = replace(summary, run=replace(summary.run, ended=runs.utc_now()))
    if summary.status != runs.OK:
        summary = _write_failure_report(folder, summary)
    try:
        runs.publish_summary(folder, summary)
    except OSError as e:
        raise RecordError(unrecorded_message(folder, summary, e)) from None
    finally:
        with contextlib.suppress(OSError):
            append_unwritten(folder.log, ending.get("log"))
        _clean_up(folder)
    return Outcome(folder, summary, exit_code)


def _write_failure_report(folder: runs.RunFolder, summary: RunSummary) -> RunSummary:
    """Writes the report of a run that did not end ok into its folder (`failures.failure_report`, linking the
    evaluate stage's report when it wrote one); the summary names it. A disk that refuses it leaves the summary
    without a report: the summary, which says how the run ended, is written next."""
    evaluated = os.path.join(task_directory(folder, "evaluate"), "report")
    link = os.path.relpath(evaluated, folder.path) if os.path.isfile(evaluated) else None
    try:
        storage.write_text(folder.report, failure_report(summary, link))
    except OSError:
        return replace(summary, report=None)
    return replace(summary, report=folder.report)


def _clean_up(folder: runs.RunFolder) -> None:
    """Deletes the run's tmp/ and its reserve, as far as the disk lets (the next run's start deletes the rest)."""
    folder.remove_tmp()
    with contextlib.suppress(OSError):
        folder.release_space()


def unrecorded_message(folder: runs.RunFolder, summary: RunSummary, error: OSError) -> str:
    """A run whose summary the disk refused: how it ended, why its summary is missing and where its last good
    record is (the summary as last written: status running at the stage that was running), and the log."""
    if summary.status == runs.OK:
        ended = f"run {folder.run_id} finished ok"
    elif summary.status == runs.INTERRUPTED:
        ended = f"{summary.error} during {summary.stage or 'start-up'}"
    else:
        ended = f"{summary.stage}: {summary.error}"
    try:
        record = folder.read_summary()
        last = f"its last good record is {folder.summary_path} (status {record.status}, stage {record.stage})"
    except (OSError, ValueError):
        last = f"no record of run {folder.run_id} was written"
    return "\n".join(
        [
            ended,
            f"the run's summary could not be written ({cannot_write(error)}); {last}",
            f"full log: {folder.log}",
            "free space on that disk (or make it writable) and run the same command again: it resumes the run",
        ]
    )
