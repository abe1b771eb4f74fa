"""Runs the pipeline whole on this machine's CPU with the KFP local runner, one folder per run (`runs`).

Two processes take part:
  * the supervisor (`run_local`, in the CLI's process) takes the lock on OUTPUT, picks the run folder (a new one,
    or the last run's when it failed or was interrupted and is run again with the same arguments), starts the
    runner, stops it on SIGINT, SIGTERM or SIGHUP, and writes the run's final summary, which the runner hands it
    through a pipe;
  * the runner (`python -m pipelines.runner RUN_FOLDER --ending-fd FD`) runs the KFP local runner,
    `kfp.local.SubprocessRunner(use_venv=False)`, which starts every stage as a subprocess of its own. The runner
    leads a session of its own, so it and its stages form one process group the supervisor stops as a whole: no
    stage outlives the command. The runner also stops the worker processes a killed stage leaves behind
    (`stop_orphans`). Its TMPDIR is the run's tmp/ folder (KFP writes each stage's `ephemeral_component.py` under
    it), deleted when the run ends. It starts the run's stage server (`pipelines.runner`) first, in the same
    group: each stage process hands its stage to it, and a child forked from that warm interpreter runs the stage
    without importing TensorFlow again. Neither the runner nor the server runs a stage's code (nor a user's,
    which a stage imports): a stage whose process a signal kills (a crash in native code, SIGSEGV or SIGABRT;
    SIGKILL when memory runs out) fails the run with that stage, the signal's name and the stage's last log lines
    (`killed_message`).

A run resumed into its folder runs in the same artifact directories (`_fixed_run_directory`): each stage finds
its stage record there and reuses finished outputs, and training continues from its checkpoint
(`components.records`). The local runner cannot run `dsl.If`, so gating lives in the components: evaluate writes
the verdict, and the release stage, last, publishes only a blessed model (under OUTPUT/published by default).

A disk that refuses a write (full, read-only) at any point ends the run as failed, exit 1:
  * in a stage, the stage fails, and its error is one line: "train: cannot write <path>: No space left on device"
    (`refused_message`, from Python's or TensorFlow's wording);
  * in the runner's log or summary, no further stage starts (`_Progress.refusal`), and the log's refused lines
    are kept in memory (`_LogFile`); the supervisor appends them once the summary is written;
  * the supervisor writes the final summary; on a full disk it frees the run's reserve for it
    (`runs.RunFolder.reserve_space`), and when even that is refused the error says so, and where the last good
    record is (`RecordError`). A run that cannot start says so before anything runs.
The next run's start deletes what the failed one left: tmp/, the reserve, staging directories and temporary files
(`runs.remove_leftovers`).

A run given a webhook (`--notify-webhook`) that fails or is interrupted posts its failure alert from the supervisor,
once its summary is written (`alert_webhook`): the KFP local runner runs no exit handler, which is where a Vertex AI
run sends the same message (`pipelines.pipeline`).
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import errno
import functools
import io
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import traceback
import warnings
from collections.abc import Iterator, Mapping, Sequence
from typing import IO, Any, Callable, Optional

from kfp import local as kfp_local
from kfp.local import executor_input_utils, subprocess_task_handler

from components import build_stages, records
from components.records import REUSED_MARKER
from estimator_lib import alerts as alerting
from estimator_lib import storage
from estimator_lib.alerts import first_line
from estimator_lib.config import JobConfig, RunConfig
from estimator_lib.config.alerts import AlertConfig, redact_url
from estimator_lib.config.run import LOCAL_JOB_DEFAULTS
from estimator_lib.progress import count_down, duration
from pipelines import runs, stage
from pipelines.image import LOCAL_IMAGE
from pipelines.pipeline import PIPELINE_NAME, build_pipeline, task_stages

PUBLISH_DIR = "published"
EXIT_OK, EXIT_FAILED = 0, 1
GRACE_SECONDS = 2.0  # after SIGTERM, what the stages get before SIGKILL
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
ATTEMPT_MARKER = "==== run "  # the log line that starts an attempt of the run
NO_ALERTS = AlertConfig()
HEARTBEAT_SECONDS = 60.0  # off a terminal, at most one heartbeat line a minute per running stage
# A stage's progress lines (estimator_lib.progress, through the KFP executor's log format): training's
# "step 300/1000 (30%), ETA 40s, loss ...", and "<work>: 1,000/2,000 rows (50%), ... rows/s, ETA ..." of
# preparation and batch prediction.
_STAGE_PROGRESS = re.compile(r"\]: (?P<text>step \d+/\d+ \(\d+%\), ETA .*|.+: [\d,]+(?:/[\d,]+)? rows.* rows/s.*)$")
# Lines of a stage the console shows as they come (`estimator_lib.progress.early_stop_line`).
_STAGE_NEWS = re.compile(r"\]: (?P<text>early stopping at step \d+: .*)$")
# The local runner's own status lines ("00:22:55.606 - INFO - Executing task 'train-model'"); the stages' logs are
# indented under them and go to the log file only.
_TASK_EVENT = re.compile(
    r"^\d\d:\d\d:\d\d\.\d{3} - \w+ - (?:Executing task '(?P<started>[\w-]+)'|"
    r"Task '(?P<ended>[\w-]+)' finished with status (?P<status>SUCCESS|FAILURE))"
)


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
    summary: dict[str, Any]
    exit_code: int


# -- the supervisor ------------------------------------------------------------------------------------------
def run_local(
    settings: RunConfig,
    output: str,
    verbose: bool = False,
    resume: Optional[bool] = None,
    alerts: AlertConfig = NO_ALERTS,
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
        summary["arguments"] = settings.arguments()  # what the pipeline is called with: each stage's spec
        _start(folder, summary, lock)
        outcome = _supervise(folder, summary, verbose, lock)
    finally:
        os.close(lock)
    if alerts.webhook:
        alert_webhook(alerts.webhook, outcome)
    return outcome


def run_alert(outcome: Outcome) -> Optional[alerting.Alert]:
    """The alert of a run that failed or was interrupted, as a Vertex AI run's exit handler words it
    (`estimator_lib.alerts`); None for a run that succeeded."""
    summary = outcome.summary
    if summary["status"] == runs.OK:
        return None
    state = alerting.CANCELLED if summary["status"] == runs.INTERRUPTED else alerting.FAILED
    stage = summary["stage"] or ""
    error = first_line(summary["error"] or "")
    return alerting.Alert(PIPELINE_NAME, outcome.folder.run_id, state, stage, error, "local", summary["run"]["log"])


def alert_webhook(url: str, outcome: Outcome) -> Optional[str]:
    """Posts the run's alert to `url` (`alerts.webhook_url`; nothing for a run that succeeded) and says on the
    console whether it was delivered, naming the webhook's host only. The run's outcome stands either way;
    returns why it was not delivered, or None."""
    alert = run_alert(outcome)
    if alert is None:
        return None
    failed = alerting.deliver(url, alert)
    said = f"not delivered ({failed})" if failed else "delivered"
    print(f"failure alert to {redact_url(url)}: {said}", flush=True)
    return failed


def _canonical(value: Any) -> Any:
    return json.loads(json.dumps(value, sort_keys=True))


def choose_run(output: str, arguments: Mapping[str, Any], resume: Optional[bool]) -> tuple[runs.RunFolder, dict]:
    """The folder and starting summary of this run: the last run's (another attempt) or a new one."""
    previous = runs.last_run(output)
    record = previous.read_summary() if previous else None
    # "running" in a folder whose lock is free (we hold it) means its processes were killed outright.
    resumable = record is not None and record.get("status") in (runs.FAILED, runs.INTERRUPTED, runs.RUNNING)
    # A run's summary keeps its settings ("config", `RunConfig.view()`) until it ends ok, when job_config becomes the
    # one training ran (the warm-start source resolved).
    differing = sorted(k for k, v in _canonical(arguments).items() if record and record["config"].get(k) != v)
    if resume and not resumable:
        status = f"; the last run, {previous.run_id}, ended {record.get('status')}" if previous and record else ""
        raise ResumeError(f"--resume: {output} holds no failed or interrupted run to resume{status}")
    if resume and differing:
        raise ResumeError(
            f"--resume: run {previous.run_id} was started with other values of {', '.join(differing)}; give the "
            "same arguments to resume it, or leave out --resume to start a new run"
        )
    now = runs.utc_now()
    if resume is False or not resumable or differing:
        folder = runs.RunFolder.new(output)
        run = {"id": folder.run_id, "dir": folder.path, "log": folder.log, "started": now, "attempts": 1}
    else:
        folder = previous
        run = {**record["run"], "attempts": int(record["run"].get("attempts", 1)) + 1, "resumed": now}
    return folder, {"status": runs.RUNNING, "stage": None, "error": None, "run": run, "config": dict(arguments)}


def _start(folder: runs.RunFolder, summary: dict[str, Any], lock: int) -> None:
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


def _supervise(folder: runs.RunFolder, summary: dict[str, Any], verbose: bool, lock: int) -> Outcome:
    """Starts the runner in a session of its own, stops its process group on a signal, records how it ended.

    The runner hands over its final summary through a pipe (`--ending-fd`), not the disk: the supervisor writes
    it, and says so when the disk refuses (`_finish`)."""
    attempt = summary["run"]["attempts"]
    resumed = f", attempt {attempt}: finished stages are reused" if attempt > 1 else ""
    print(f"run {folder.run_id}{resumed}\nfull log: {folder.log}", flush=True)
    ending_fd, runner_fd = os.pipe()
    ending = _read_in_background(ending_fd)
    command = [sys.executable, "-m", "pipelines.runner", folder.path, ENDING_FD_FLAG, str(runner_fd)]
    command += ["--verbose"] if verbose else []
    # The stages' output reaches the console through pipes: they learn from the environment that it is a terminal.
    env = {**os.environ, "TMPDIR": folder.tmp, records.CONSOLE_TTY_ENV: "1" if _is_terminal(sys.stdout) else "0"}
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


def _is_terminal(stream: IO[str]) -> bool:
    return bool(getattr(stream, "isatty", lambda: False)())


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


def _keep_stopping_orphans(interval: float = 1.0) -> None:
    while True:
        stop_orphans(os.getpgrp())
        time.sleep(interval)


def _wait_group_gone(pgid: int, timeout: float = 3.0) -> None:
    deadline = time.monotonic() + timeout
    while group_members(pgid) and time.monotonic() < deadline:
        time.sleep(0.05)


def _finish(folder: runs.RunFolder, code: int, signum: Optional[int], ending: Mapping[str, Any]) -> Outcome:
    """Records how the run ended: the runner's summary (as it last wrote it, if it sent none), then the log's
    lines the disk refused while the run ran; deletes tmp/ and the reserve.

    Raises:
      RecordError: the summary could not be written; the message says where the last good record is.
    """
    summary = ending.get("summary") or folder.read_summary()
    if signum is not None:
        summary.update(status=runs.INTERRUPTED, error=f"interrupted by {signal.Signals(signum).name}")
        exit_code = 128 + signum
    elif summary["status"] == runs.RUNNING:  # the runner ended without recording how
        summary.update(status=runs.FAILED, error=f"the local runner stopped unexpectedly (exit status {code})")
        exit_code = EXIT_FAILED
    else:
        exit_code = EXIT_OK if summary["status"] == runs.OK else EXIT_FAILED
    summary["run"]["ended"] = runs.utc_now()
    try:
        runs.publish_summary(folder, summary)
    except OSError as e:
        raise RecordError(unrecorded_message(folder, summary, e)) from None
    finally:
        with contextlib.suppress(OSError):
            append_unwritten(folder.log, ending.get("log"))
        _clean_up(folder)
    return Outcome(folder, summary, exit_code)


def _clean_up(folder: runs.RunFolder) -> None:
    """Deletes the run's tmp/ and its reserve, as far as the disk lets (the next run's start deletes the rest)."""
    folder.remove_tmp()
    with contextlib.suppress(OSError):
        folder.release_space()


def unrecorded_message(folder: runs.RunFolder, summary: Mapping[str, Any], error: OSError) -> str:
    """A run whose summary the disk refused: how it ended, why its summary is missing and where its last good
    record is (the summary as last written: status running at the stage that was running), and the log."""
    if summary["status"] == runs.OK:
        ended = f"run {folder.run_id} finished ok"
    elif summary["status"] == runs.INTERRUPTED:
        ended = f"{summary['error']} during {summary['stage'] or 'start-up'}"
    else:
        ended = f"{summary['stage']}: {summary['error']}"
    try:
        record = folder.read_summary()
        last = f"its last good record is {folder.summary_path} (status {record['status']}, stage {record['stage']})"
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


# -- the runner ----------------------------------------------------------------------------------------------
@functools.lru_cache(maxsize=None)
def _task_stages() -> dict[str, str]:
    """KFP task name -> the `Stages` field it runs: "train-model" -> "train"."""
    return task_stages(build_stages(LOCAL_IMAGE))


def stage_of(task: str) -> str:
    return _task_stages().get(task, task)


def task_directory(folder: runs.RunFolder, stage: str) -> str:
    """Where `stage` writes its outputs in the run (`_fixed_run_directory`): <pipeline root>/<pipeline>-<run>/<task>."""
    task = next((t for t, s in _task_stages().items() if s == stage), stage)
    return os.path.join(folder.pipeline_root, f"{PIPELINE_NAME}-{folder.run_id}", task)


class _Progress:
    """Follows the runner's task events: records the running stage in the run's summary and prints one console
    line per stage (started, done, reused), and a heartbeat while a stage runs (`heartbeat`).

    The heartbeat says how long the stage has run and repeats its latest progress line (training's step, ETA,
    loss and steps/s; rows done and rate of preparation and batch prediction), its ETA counted down since the
    line came: on a terminal it is one line redrawn in place every second, elsewhere (a log, a pipe) a line
    every `every` seconds of a stage that runs that long, so a short run prints nothing more and a long one a
    line a minute.
    """

    def __init__(
        self,
        folder: runs.RunFolder,
        summary: dict[str, Any],
        console: IO[str],
        every: float = HEARTBEAT_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.folder, self.summary, self.console = folder, summary, console
        self.stage: Optional[str] = None
        self.failed: Optional[str] = None
        self.reused: list[str] = []
        self.seconds: dict[str, float] = {}  # each stage that ended: its wall seconds (`summary["run"]["seconds"]`)
        self.latest = ""  # the running stage's last progress line
        self._latest_at = 0.0  # when it came: the heartbeat counts its ETA down from then
        self.tail = StageTail()  # the running (or failed) stage's last log lines
        self.killed_by: Optional[signal.Signals] = None  # the signal that ended the last stage's process
        self.unrecorded: Optional[tuple[str, str]] = None  # (stage, why) a record of the run was refused
        self.refused = False  # a stage was not started: a record of the run had been refused
        self._running = False
        self._started = self._beat = 0.0
        self._every, self._clock = every, clock
        self._terminal = _is_terminal(console)
        self._redrawn = False  # a heartbeat is on the terminal's last line
        self._lock = threading.Lock()  # lines arrive on the runner's thread, heartbeats on their own

    def line(self, line: str) -> None:
        with self._lock:
            self._line(line)

    def _line(self, line: str) -> None:
        if REUSED_MARKER in line and self.stage:
            self.reused.append(self.stage)
        reported = _STAGE_PROGRESS.search(line)
        if reported and self._running:
            self.latest, self._latest_at = reported["text"], self._clock()
        news = _STAGE_NEWS.search(line)
        if news and self._running:
            self._print(f"{self.stage}: {news['text']}")
        event = _TASK_EVENT.match(line)
        if not event:
            if self._running:
                self.tail.add(line)
            return
        if event["started"]:
            self.stage, self._started, self._beat = stage_of(event["started"]), self._clock(), self._clock()
            self._running, self.latest, self.tail, self.killed_by = True, "", StageTail(), None
            self.summary["stage"] = self.stage
            try:
                self.folder.write_summary(self.summary)
            except OSError as e:
                self.unrecordable(self.stage, cannot_write(e))
            self._print(f"{self.stage}: running")
        elif event["status"] == "SUCCESS":
            self._running = False
            stage = stage_of(event["ended"])
            done = "reused (inputs unchanged)" if stage in self.reused else "done"
            self._print(f"{stage}: {done} ({self._ended(stage):.1f} s)")
        else:
            self._running = False
            self.failed = stage_of(event["ended"])
            self._ended(self.failed)
            if self._redrawn:  # the CLI reports the failure next, on a line of its own
                self.console.write("\r\x1b[K")
                self._redrawn = False

    def _ended(self, stage: str) -> float:
        """Records and returns the wall seconds `stage` ran."""
        self.seconds[stage] = round(self._clock() - self._started, 1)
        return self.seconds[stage]

    def unrecordable(self, stage: Optional[str], why: str) -> None:
        """Notes that the disk refused a record of the run (its log, its summary) while `stage` ran: the first
        refusal is kept, and no stage starts after it (`refusal`)."""
        if self.unrecorded is None:
            self.unrecorded = (stage or "runner", why)

    def refusal(self) -> Optional[str]:
        """Why the next stage must not start (a record of the run was refused), or None; a refusal is noted
        (`refused`)."""
        if self.unrecorded is None:
            return None
        self.refused = True
        return self.unrecorded[1]

    def exited(self, code: int) -> None:
        """Records how the running stage's process ended (its exit status, as the local runner got it)."""
        with self._lock:
            self.killed_by = signal_of(code)

    def heartbeat(self) -> None:
        """Shows that the running stage is alive (call it every second or so)."""
        with self._lock:
            now = self._clock()
            if not self._running or (not self._terminal and now - self._beat < self._every):
                return
            self._beat = now
            text = f"{self.stage}: still running ({duration(now - self._started)})"
            text += f": {count_down(self.latest, now - self._latest_at)}" if self.latest else ""
            if self._terminal:
                width = shutil.get_terminal_size().columns - 1
                self.console.write(f"\r\x1b[K[{time.strftime('%H:%M:%S')}] {text}"[: width + 4])
                self.console.flush()
                self._redrawn = True
            else:
                self._print(text)

    def _print(self, text: str) -> None:
        prefix = "\r\x1b[K" if self._redrawn else ""  # the line replaces a redrawn heartbeat
        self._redrawn = False
        self.console.write(f"{prefix}[{time.strftime('%H:%M:%S')}] {text}\n")
        self.console.flush()


def _beat(progress: _Progress, interval: float = 1.0) -> None:
    while True:
        time.sleep(interval)
        progress.heartbeat()


class _ConsoleFilter(io.TextIOBase):
    """A stdout stand-in: everything, without ANSI colour codes, goes to the log; the console gets one line per
    stage event (or everything, when verbose)."""

    def __init__(self, log: IO[str], console: IO[str], verbose: bool, progress: Optional[_Progress] = None):
        self._log, self._console, self._verbose, self._progress, self._pending = log, console, verbose, progress, ""

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        plain = _ANSI.sub("", text)
        self._log.write(plain)
        self._pending += plain
        *lines, self._pending = self._pending.split("\n")
        for line in lines:
            if self._verbose:
                self._console.write(line + "\n")
            if self._progress is not None:
                self._progress.line(line)
        return len(text)

    def flush(self) -> None:
        self._log.flush()
        self._console.flush()


class _LogFile(io.TextIOBase):
    """The run's log as the runner appends to it, unbuffered. When the disk refuses a write (full, read-only),
    the runner goes on without its log: the first refusal is reported to `on_refusal` (which ends the run after
    the running stage), and what is written from then on is kept here (its last `keep` lines), for the failed
    stage's error (`failure_message`) and for the supervisor to append once the summary is written
    (`append_unwritten`)."""

    def __init__(self, path: str, on_refusal: Callable[[str], None], keep: int = 2000):
        self.path, self._on_refusal = path, on_refusal
        self.error: Optional[str] = None
        self._kept: collections.deque[str] = collections.deque(maxlen=keep)  # refused whole lines
        self._partial, self._refused_lines = "", 0  # the refused text after the last newline; lines refused
        self._fd: Optional[int] = None
        try:
            self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        except OSError as e:
            self._refused(e)

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        data = text.encode("utf-8", "replace")
        while data and self.error is None:
            try:
                data = data[os.write(self._fd, data) :]
            except OSError as e:
                self._refused(e)
        if data:  # the rest of a write the disk cut short continues the log's last line
            *lines, self._partial = (self._partial + data.decode("utf-8", "replace")).split("\n")
            self._kept.extend(lines)
            self._refused_lines += len(lines)
        return len(text)

    def _refused(self, error: OSError) -> None:
        self.error = cannot_write(OSError(error.errno, error.strerror, self.path))
        self._on_refusal(self.error)

    def unwritten(self) -> str:
        """The text the disk refused, as it continues the log (its last `keep` lines; a line break stands for
        those left out)."""
        dropped = self._refused_lines > len(self._kept)
        return ("\n" if dropped else "") + "".join(f"{line}\n" for line in self._kept) + self._partial

    def ending(self) -> Optional[dict[str, Any]]:
        """What the supervisor appends to the log (`append_unwritten`): None when every line was written."""
        if self.error is None:
            return None
        lines = self._refused_lines + bool(self._partial)
        lost = self._refused_lines - len(self._kept)
        return {"error": self.error, "text": self.unwritten(), "lines": lines, "lost": lost}

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        super().close()


def append_unwritten(log_path: str, cut: Optional[Mapping[str, Any]]) -> None:
    """Appends to the log the text the disk refused while the run ran (`_LogFile.ending`), after a line that
    says so; nothing when none was refused."""
    if not cut:
        return
    with open(log_path, "a+b") as log:
        ends_a_line = _ends_a_line(log)
        rest = f"the first {cut['lost']} are lost, the others follow" if cut["lost"] else "they follow"
        note = f"==== the disk refused {cut['lines']} lines of this log when they were logged ({cut['error']}); {rest}"
        text = ("" if ends_a_line else "\n") + f"{note} ====\n{cut['text']}"
        log.write((text if text.endswith("\n") else text + "\n").encode("utf-8"))


def _ends_a_line(log: IO[bytes]) -> bool:
    size = log.seek(0, os.SEEK_END)
    if size == 0:
        return True
    log.seek(size - 1)
    return log.read(1) == b"\n"


@contextlib.contextmanager
def _fixed_run_directory(run_id: str):
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
def _fast_stage_exit(
    exited: Callable[[int], None] = _ignore_exit, refusal: Callable[[], Optional[str]] = _never_refuse
):
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
            code = EXIT_FAILED
        else:
            code = original([part.replace(stage.KFP_EXECUTOR_MODULE, stage.__name__) for part in full_command])
        exited(code)
        return code

    subprocess_task_handler.run_local_subprocess = run
    try:
        yield
    finally:
        subprocess_task_handler.run_local_subprocess = original


def run_pipeline(
    arguments: Mapping[str, Any], folder: runs.RunFolder, progress: _Progress, verbose: bool, log: IO[str]
) -> dict:
    """Runs the pipeline with the KFP local runner in this process, its output into `log` (the run's log);
    returns its outputs {name: artifact}.

    Raises:
      RuntimeError: a stage failed (the local runner's error; the stage's own is in the log), or was not started
        (`progress.refusal`).
    """
    with (
        contextlib.redirect_stdout(_ConsoleFilter(log, sys.stdout, verbose, progress)) as stream,
        contextlib.redirect_stderr(stream),
    ):
        attempt = progress.summary["run"]["attempts"]
        started = f"{ATTEMPT_MARKER}{folder.run_id}, attempt {attempt}, started {runs.utc_now()} ===="
        print(started, file=log, flush=True)
        kfp_local.init(
            runner=kfp_local.SubprocessRunner(use_venv=False),
            pipeline_root=folder.pipeline_root,
            raise_on_error=True,
        )
        with (
            warnings.catch_warnings(),
            _fixed_run_directory(folder.run_id),
            _fast_stage_exit(progress.exited, progress.refusal),
        ):
            # The subprocess runner warns that our image name lacks "python": it never uses the image.
            warnings.filterwarnings("ignore", message=".*non-Python base image.*", category=RuntimeWarning)
            task = build_pipeline(LOCAL_IMAGE)(**arguments)
    return dict(task.outputs)


ENDING_FD_FLAG = "--ending-fd"


def runner_main(argv: Sequence[str]) -> int:
    """`python -m pipelines.runner RUN_FOLDER --ending-fd FD [--verbose]` (which calls this once the run's stage
    server is starting): runs the pipeline of the run whose summary (with its arguments) the supervisor wrote,
    and hands how it ended to the supervisor through the pipe FD (its summary, and the log's lines the disk
    refused), which writes it (`_finish`)."""
    threading.Thread(target=_keep_stopping_orphans, name="stop-orphans", daemon=True).start()
    path = os.path.abspath(argv[0])
    folder = runs.RunFolder(os.path.dirname(os.path.dirname(path)), os.path.basename(path))
    ending_fd = int(argv[list(argv).index(ENDING_FD_FLAG) + 1])
    summary = folder.read_summary()
    progress = _Progress(folder, summary, sys.stdout)
    verbose = "--verbose" in argv
    if not verbose:  # a verbose console streams every stage's log already
        threading.Thread(target=_beat, args=(progress,), name="heartbeat", daemon=True).start()
    with _LogFile(folder.log, lambda why: progress.unrecordable(progress.stage, why)) as log:
        try:
            outputs = run_pipeline(summary["arguments"], folder, progress, verbose, log)
            results = summarize(outputs, summary["config"])
            summary.update(results, report=copy_report(outputs, folder), status=runs.OK, stage=None, error=None)
        except Exception as e:  # noqa: BLE001 - whatever failed is recorded
            stage, error = _failure(e, progress, log)
            summary.update(status=runs.FAILED, stage=stage, error=error)
        if progress.unrecorded and summary["status"] == runs.OK:  # every stage ran, but the log is cut
            stage, error = progress.unrecorded
            summary.update(status=runs.FAILED, stage=stage, error=error)
        summary["run"]["reused"] = progress.reused
        summary["run"]["seconds"] = progress.seconds  # this attempt's stages, the failed one's up to its failure
        _send(ending_fd, {"summary": summary, "log": log.ending()})
    return EXIT_OK if summary["status"] == runs.OK else EXIT_FAILED


def _failure(e: Exception, progress: _Progress, log: _LogFile) -> tuple[str, str]:
    """(stage, error) of a run that raised `e`: a stage's own failure first, else a record the disk refused."""
    stage = progress.failed or progress.stage or "runner"
    ran = isinstance(e, RuntimeError) and progress.failed and not progress.refused
    if ran and progress.killed_by is not None:  # a crash
        return stage, killed_message(progress.killed_by, progress.tail.excerpt())
    if ran:  # a stage failed: its traceback is in the log (or, for the lines the disk refused, in `log`)
        return stage, failure_message(log.path, stage, log.unwritten(), task_directory(progress.folder, stage))
    if progress.unrecorded:
        return progress.unrecorded
    traceback.print_exc(file=log)
    if isinstance(e, OSError) and e.errno in REFUSED:  # copying the report into the run folder
        return stage, _refusal(e.strerror, e.filename2 or e.filename)
    return stage, first_line(f"{type(e).__name__}: {e}")


def _send(fd: int, ending: Mapping[str, Any]) -> None:
    """Writes the runner's ending into the supervisor's pipe; nothing if the supervisor has gone."""
    with contextlib.suppress(BrokenPipeError), open(fd, "wb") as pipe:
        pipe.write(json.dumps(ending).encode("utf-8"))


# -- failures ------------------------------------------------------------------------------------------------
def _this_attempt(log_path: str, unwritten: str = "") -> list[str]:
    """The log's lines since the last attempt of the run started (all of them if it has no attempt marker); the
    `unwritten` text (what the disk refused) continues the log."""
    try:
        with open(log_path, encoding="utf-8", errors="replace") as f:
            text = f.read()
    except FileNotFoundError:
        text = ""
    lines = (text + unwritten).splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith(ATTEMPT_MARKER)]
    return lines[starts[-1] :] if starts else lines


def _last_traceback(log_path: str, unwritten: str = "") -> list[str]:
    """The last Python traceback of this attempt in the log (and its `unwritten` lines), dedented by the runner's
    indent: [] when there is none (an earlier attempt's traceback is not this attempt's error)."""
    lines = _this_attempt(log_path, unwritten)
    starts = [i for i, line in enumerate(lines) if line.strip() == "Traceback (most recent call last):"]
    if not starts:
        return []
    indent = len(lines[starts[-1]]) - len(lines[starts[-1]].lstrip())
    block = []
    for line in lines[starts[-1] :]:
        if line.strip() and len(line) - len(line.lstrip()) < indent:
            break  # the runner's own lines follow the stage's output
        block.append(line[indent:])
    return [line for line in block if line.strip()]


def failure_excerpt(log_path: str) -> str:
    """The failed stage's traceback, as it is in the log."""
    return "\n".join(_last_traceback(log_path))


def failure_message(log_path: str, stage: str, unwritten: str = "", outputs: str = "", listed: int = 40) -> str:
    """The failed stage's error ("DataError: data.csv line 7, column 'x': ..."), the module path of the
    exception's class left out, with the lines that continue its message as a list (indented or numbered, as
    TPUStrictError lists its findings; at most `listed` of them, then how many more the log holds); a write the
    disk refused as `refused_message` words it (naming the stage's `outputs` directory when the error names no
    file). The `unwritten` text (what the disk refused) continues the log."""
    block = _last_traceback(log_path, unwritten)
    # After the frames (indented lines) comes the exception: "package.module.Error: message".
    at = next((i for i, line in enumerate(block) if i and not line.startswith(" ")), None)
    if at is None:
        return f"the {stage} stage stopped without an error message (killed by the system, e.g. out of memory?)"
    name, sep, message = block[at].partition(": ")
    # TensorFlow gives the file error on a later line of its message ("Graph execution error:" first).
    refused = (refused_message(line.strip(), outputs) for line in [message, *block[at + 1 :]])
    refusal = next((r for r in refused if r), None)
    if refusal:
        return refusal
    items = []
    for line in block[at + 1 :]:
        if not re.match(r"\s+\S|\d+[.)] ", line):
            break
        items.append(line)
    if len(items) > listed:
        items = items[:listed] + [f"  ... {len(items) - listed} more line(s) in {log_path}"]
    return "\n".join([f"{name.rsplit('.', 1)[-1]}{sep}{message}".strip(), *items])


# What a disk answers when it refuses a write: full, over quota, read-only; not ours; failing.
REFUSED = (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM, errno.EIO)
_WRITE_ONLY = (errno.ENOSPC, errno.EDQUOT, errno.EROFS)  # causes no read has
_CAUSES = "|".join(re.escape(os.strerror(code)) for code in REFUSED)
# Python's OSError: "[Errno 28] No space left on device: '/out/x'" (a rename: "... '/out/x.tmp' -> '/out/x'"; a
# write into an open file names none).
_PYTHON_REFUSAL = re.compile(rf"^\[Errno \d+\] (?P<cause>{_CAUSES})(?:: '(?P<path>.+?)'(?: -> '(?P<to>.+)')?)?$")
# TensorFlow's file errors (ResourceExhaustedError, FailedPreconditionError, ...): "<path>; No space left on device".
_TENSORFLOW_REFUSAL = re.compile(rf"^(?P<path>\S+); (?P<cause>{_CAUSES})$")


def cannot_write(error: OSError) -> str:
    """An error the disk gave a write, as "cannot write <path>: <cause>" (of a rename, the new name)."""
    path = error.filename2 or error.filename
    return f"cannot write {path}: {error.strerror}" if path else f"cannot write: {error.strerror or error}"


def refused_message(message: str, outputs: str = "") -> Optional[str]:
    """An exception's message that is a disk's refusal (Python's or TensorFlow's wording) in ours: "cannot write
    <path>: No space left on device" for a full or read-only disk, "<path>: Permission denied" for a refusal a
    read can meet too; an error that names no file names where the stage writes, `outputs`. None for any other
    message."""
    found = _PYTHON_REFUSAL.match(message) or _TENSORFLOW_REFUSAL.match(message)
    return _refusal(found["cause"], found.groupdict().get("to") or found["path"], outputs) if found else None


def _refusal(cause: str, path: Optional[str], outputs: str = "") -> str:
    verb = "cannot write " if cause in (os.strerror(code) for code in _WRITE_ONLY) else ""
    if path:
        return f"{verb}{path}: {cause}"
    where = f"; the stage writes under {outputs}" if outputs else ""
    return f"{verb or 'cannot access '}a file: {cause} (the error names none{where})"


# Signals a process gets when it crashes in native code (its own C/C++, a Python extension's, TensorFlow's).
CRASH_SIGNALS = (signal.SIGSEGV, signal.SIGBUS, signal.SIGABRT, signal.SIGILL, signal.SIGFPE)
SHELL_SIGNAL_BASE = 128  # a shell reports a child killed by signal N as exit status 128 + N
FAULT_MARKER = "Fatal Python error: "  # the first line of the stack faulthandler prints on a crash


def signal_of(code: int) -> Optional[signal.Signals]:
    """The signal that killed a stage's process, from the exit status the local runner got: -N for a process
    killed by signal N, 128 + N when the shell of KFP's command (`sh -ec '... python3 -m ...'`) reports it so;
    None for an ordinary exit."""
    number = -code if code < 0 else code - SHELL_SIGNAL_BASE
    try:
        return signal.Signals(number) if number > 0 else None
    except ValueError:
        return None


class StageTail:
    """The last lines a stage logged (dedented by the local runner's indent), and, when its process crashed,
    the start of the Python stack faulthandler printed: the crashed thread's innermost `frames` frames."""

    def __init__(self, keep: int = 8, frames: int = 6):
        self.before: collections.deque[str] = collections.deque(maxlen=keep)
        self.crash: list[str] = []
        self._frames, self._reading = frames, False

    def add(self, line: str) -> None:
        text = (line[4:] if line.startswith("    ") else line).rstrip()
        if self.crash:
            self._add_frame(text)
        elif text.startswith(FAULT_MARKER):
            self.crash, self._reading = [text], True
        elif text:
            self.before.append(text)

    def _add_frame(self, text: str) -> None:
        """faulthandler prints the marker, a blank line, the crashed thread's header and its frames (innermost
        first), a blank line, then the other threads: only the crashed thread's header and frames are kept."""
        if self._reading and text and len(self.crash) < self._frames + 2:
            self.crash.append(text)
        elif self._reading and not text and len(self.crash) > 1:
            self._reading = False

    def excerpt(self) -> list[str]:
        return [*self.before, *self.crash]


def killed_message(signum: signal.Signals, tail: Sequence[str]) -> str:
    """A stage whose process a signal killed: the signal by name, what it usually means, and the stage's last
    log lines (with faulthandler's stack of the crash, when it printed one)."""
    if signum in CRASH_SIGNALS:
        cause = "it crashed in native code (the model's code or a library it calls: TensorFlow, NumPy, an extension)"
    elif signum == signal.SIGKILL:
        cause = "it was killed from outside, often by the system when memory runs out"
    else:
        cause = "it was stopped from outside"
    first = f"the stage's process was killed by {signum.name} ({signal.strsignal(signum)}): {cause}"
    if not tail:
        return f"{first}; it logged nothing"
    return "\n".join([f"{first}; the last lines of its log:", *(f"    {line}" for line in tail)])


# -- the summary ---------------------------------------------------------------------------------------------
def copy_report(outputs: Mapping[str, Any], folder: runs.RunFolder) -> str:
    """Copies the evaluate stage's HTML report into the run folder (OUTPUT/runs/<id>/report.html); its path."""
    storage.write_bytes(folder.report, storage.read_bytes(outputs["report"].uri))
    return folder.report


def _number(value: Any) -> Any:
    """Metadata ints come back from the local runner as floats; give whole numbers back as ints."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


def strict_record(strict: Optional[Mapping[str, Any]]) -> Optional[dict[str, Any]]:
    """The train stage's TPU-strict record (its counts as ints: metadata numbers come through KFP as floats);
    None when strict mode was off."""
    if not strict:
        return None
    counts = {name: _number(count) for name, count in strict["counts"].items()}
    return {**strict, "checks": _number(strict["checks"]), "counts": counts}


def validation_summary(dataset: Any) -> dict[str, Any]:
    """The prepare stage's data validation; its row counts read back as ints (KFP metadata numbers are floats)."""
    checked = dict(dataset.metadata.get("validation", {}))
    if "rows" in checked:
        checked["rows"] = {side: int(count) for side, count in checked["rows"].items()}
    return checked


def data_summary(dataset: Any) -> dict[str, Any]:
    """What preparation did with the rows, from the prepared manifest: counts per split, quarantined rows (and
    where they are), columns with no value in a split, and the manifest's notes."""
    manifest = json.loads(storage.read_text(dataset.metadata["manifest_uri"]))
    counts = {k: _number(v) for k, v in manifest["counts"].items()}
    missing = manifest.get("missing", {})
    all_missing = {
        split: sorted(c for c, n in columns.items() if n == counts.get(split) and n > 0)
        for split, columns in missing.items()
    }
    quarantined = int(manifest["rows"]["quarantined"])
    return {
        "counts": counts,
        "rows": manifest["rows"]["total"],
        "quarantined": quarantined,
        "quarantine_uri": storage.join(dataset.uri, "quarantine.jsonl") if quarantined else "",
        "columns_all_missing": {split: cols for split, cols in all_missing.items() if cols},
        "notes": list(manifest.get("notes", [])),
    }


def trained_job(model_uri: str) -> JobConfig:
    """The job config the train stage ran, as it recorded it beside the checkpoints (exact JSON; the artifact's
    metadata went through KFP, whose numbers are floats)."""
    return JobConfig.from_json(storage.read_text(storage.join(model_uri, records.JOB_CONFIG_FILE)))


def serving_summary(checked: Any) -> dict[str, Any]:
    """The serving check: rows checked, signatures called (and left out, why), the largest difference per output,
    the tolerance, what was compared and where its record is."""
    keys = ("signatures", "skipped", "max_abs_diff", "rtol", "atol", "compared", "record_uri")
    return {"rows_checked": _number(checked.metadata["rows_checked"]), **{k: checked.metadata[k] for k in keys}}


# Each stage's output artifact: its manifest is in that artifact's task directory (`components.records`).
STAGE_OUTPUTS = {
    "prepare": "dataset",
    "train": "model",
    "evaluate": "blessing",
    "batch_predict": "predictions",
    "export": "exported",
    "serving_check": "serving_check",
    "release": "publication",
}


def importance_summary(blessing: Any) -> dict[str, Any] | None:
    """The evaluation's most important features, as the Blessing's metadata keeps them (the full ranking is in
    its importance.json, `uri`); None when feature importance was off."""
    importance = dict(blessing.metadata.get("importance") or {})
    if not importance:
        return None
    counts = {k: int(_number(importance[k])) for k in ("rows", "repeats", "features")}
    return {**importance, **counts}


def intervals_summary(blessing: Any) -> dict[str, Any] | None:
    """The bootstrap intervals of the headline metrics (and the paired difference with the baseline), with the
    counts and the seed as ints (KFP metadata numbers are floats); None for a user model."""
    intervals = dict(blessing.metadata.get("intervals") or {})
    if not intervals:
        return None
    counts = {k: int(_number(intervals[k])) for k in ("replicates", "seed", "auc_replicates") if k in intervals}
    return {**intervals, **counts}


def slices_summary(blessing: Any) -> dict[str, Any] | None:
    """The worst slices, the counts and where the full table is (slices.json in the evaluate artifact), with row
    counts as ints (KFP metadata numbers are floats); None when the run named no slice."""
    shown = dict(blessing.metadata.get("slices") or {})
    if not shown:
        return None
    worst = [{**entry, "rows": _number(entry["rows"])} for entry in shown["worst"]]
    counts = {name: _number(shown[name]) for name in ("count", "judged", "min_rows")}
    return {**shown, **counts, "worst": worst}


def summarize(outputs: Mapping[str, Any], arguments: Mapping[str, Any]) -> dict[str, Any]:
    """The run's results: eval metrics, verdict, artifact URIs, data, predictions, export and publication,
    fingerprints, config, and where each stage's manifest is."""
    dataset, model, exported = outputs["dataset"], outputs["model"], outputs["exported"]
    blessing, predictions, publication = outputs["blessing"], outputs["predictions"], outputs["publication"]
    metrics = {k: float(v) for k, v in outputs["metrics"].metadata.items() if k != "blessed"}
    counts = {k: _number(v) for k, v in dataset.metadata["counts"].items()}
    return {
        "metrics": metrics,
        "blessed": bool(blessing.metadata["blessed"]),
        # bootstrap intervals of the headline metrics and of the difference with the baseline (None: a user model)
        "intervals": intervals_summary(blessing),
        "blessing": {
            "summary": blessing.metadata["summary"],
            "reasons": list(blessing.metadata["reasons"]),
            "candidate_metrics": dict(blessing.metadata["candidate_metrics"]),
            "baseline_metrics": dict(blessing.metadata["baseline_metrics"]),
            "baseline_uri": blessing.metadata["baseline_uri"],
            "based_on": blessing.metadata["based_on"],
        },
        "importance": importance_summary(blessing),
        "slices": slices_summary(blessing),
        "artifacts": {
            "prepare": dataset.uri,
            "train": model.uri,
            # blessing.json and both models' eval predictions; metrics live in metadata
            "evaluate": blessing.uri,
            "report": outputs["report"].uri,  # the HTML report (a copy is in the run folder)
            "verdict": outputs["verdict"].uri,  # the verdict and headline metrics in Markdown
            "batch_predict": predictions.uri,
            "export": exported.uri,
            "serving_check": outputs["serving_check"].uri,  # serving_check.json
            "release": publication.uri,
        },
        "dataset": {
            "counts": counts,
            "schema_uri": dataset.metadata["schema_uri"],
            "task": dataset.metadata["task"],
        },
        "data": data_summary(dataset),
        # TensorBoard reads the training summaries here and the evaluations' in its eval*/ subdirectories.
        "tensorboard_logdir": model.uri,
        "validation": validation_summary(dataset),
        "strict": strict_record(model.metadata.get("strict")),
        "model": {
            "uri": model.uri,
            "global_step": _number(model.metadata["global_step"]),
            "trained_steps": _number(model.metadata.get("trained_steps", model.metadata["global_step"])),
            "budget": _number(model.metadata.get("budget", model.metadata["global_step"])),
            "stopped": model.metadata.get("stopped", ""),
        },
        "predictions": {
            "uri": predictions.uri,
            "count": _number(predictions.metadata["count"]),
            "data": arguments["predict_data"],
            "shards": list(predictions.metadata["shards"]),
        },
        "export": {
            "uri": exported.metadata["export_dir"],
            "tag_sets": [list(t) for t in exported.metadata["tag_sets"]],
            "signatures": {k: sorted(v) for k, v in exported.metadata["signatures"].items()},
            "published": bool(publication.metadata["published"]),
            "published_uri": publication.metadata["published_uri"],
            "published_version": publication.metadata["published_version"],
            "reason": publication.metadata["publish_reason"],
        },
        "serving": serving_summary(outputs["serving_check"]),
        "fingerprints": {
            name: outputs[name].metadata["fingerprint"]
            for name in ("dataset", "model", "blessing", "predictions", "exported", "publication")
        },
        # Read back through its type: metadata numbers come through KFP as floats, the config's ints stay ints.
        "config": {**arguments, "job_config": trained_job(model.uri).settings_read()},
        "manifests": {stage: records.manifest_uri(outputs[name].uri) for stage, name in STAGE_OUTPUTS.items()},
    }
