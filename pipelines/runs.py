"""Run folders of local runs: one folder per run under OUTPUT, the lock on OUTPUT, each run's summary, and how a
command finds a run's summary (`find_summary`: a run id, a run folder, a summary.json, an output directory).

    OUTPUT/
      .lock                   held (flock) by the run writing into OUTPUT; it names that run and its process
      runs/<run id>/          one folder per run, <UTC time>-<6 hex digits>:
        pipeline-root/        the run's KFP artifacts (every attempt of a resumed run works in the same ones)
        pipeline.log          the full log of every attempt, appended
        summary.json          status (running, ok, failed, interrupted), the stage, the error (its first line and
                              the list it continues with; a crash adds the signal and the stage's last log
                              lines), times, attempts; with status ok also the results (metrics, predictions,
                              export, ...)
        report.html           when the run ends ok, the evaluation report (standalone HTML), copied here with the
                              skew check's section (`local.summary.copy_report`); when it
                              fails or is interrupted, a short report of where and why (`failures.failure_report`)
        tmp/                  TMPDIR of the run's processes while it runs; deleted when it ends
        space.reserve         1 MiB held while the run runs, so that a full disk still takes the summary that
                              says so: freed when that summary meets a full disk (`publish_summary`), else deleted
                              at the end
      latest -> runs/<run id> the last run (a symbolic link, replaced in one step)
      summary.json            a copy of the last run's summary (replaced in one step)
      published/              the default publish root, shared by every run into OUTPUT

Summaries are written atomically (`storage.write_text`). A run's start deletes what earlier runs could not
(`remove_leftovers`). Nothing here starts or stops processes.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import errno
import fcntl
import json
import os
import shutil
import uuid
from typing import Any, Optional

from estimator_lib import storage
from pipelines.run_summary import RunSummary

RUNS_DIR = "runs"
LATEST_LINK = "latest"
LOCK_FILE = ".lock"
SUMMARY_FILE = "summary.json"
LOG_FILE = "pipeline.log"
REPORT_FILE = "report.html"
PIPELINE_ROOT_DIR = "pipeline-root"
TMP_DIR = "tmp"
RESERVE_FILE = "space.reserve"
RESERVE_BYTES = 1 << 20  # a summary and the log's last lines take a few pages: a margin of 100 times
_FULL = (errno.ENOSPC, errno.EDQUOT)
RUNNING, OK, FAILED, INTERRUPTED = "running", "ok", "failed", "interrupted"


SHOWN_RUNS = 5  # how many run ids an error lists


class OutputInUseError(ValueError):
    """Another run holds the lock on the output directory."""


class RunNotFoundError(FileNotFoundError):
    """No record of the run asked for; the message names the paths looked at and the runs there are."""


def utc_now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


@dataclasses.dataclass(frozen=True)
class RunFolder:
    """The folder of one run: `output/runs/<run_id>`."""

    output: str
    run_id: str

    @property
    def path(self) -> str:
        return os.path.join(self.output, RUNS_DIR, self.run_id)

    @property
    def pipeline_root(self) -> str:
        return os.path.join(self.path, PIPELINE_ROOT_DIR)

    @property
    def log(self) -> str:
        return os.path.join(self.path, LOG_FILE)

    @property
    def summary_path(self) -> str:
        return os.path.join(self.path, SUMMARY_FILE)

    @property
    def report(self) -> str:
        return os.path.join(self.path, REPORT_FILE)

    @property
    def tmp(self) -> str:
        return os.path.join(self.path, TMP_DIR)

    @property
    def reserve(self) -> str:
        return os.path.join(self.path, RESERVE_FILE)

    @classmethod
    def new(cls, output: str) -> "RunFolder":
        now = datetime.datetime.now(datetime.timezone.utc)
        return cls(output, f"{now:%Y%m%dT%H%M%SZ}-{uuid.uuid4().hex[:6]}")

    def create(self) -> None:
        os.makedirs(self.pipeline_root, exist_ok=True)
        os.makedirs(self.tmp, exist_ok=True)

    def read_summary(self) -> RunSummary:
        """The run's summary.

        Raises:
          FileNotFoundError: it has none.
          SummaryError: its summary.json is not one (the message names the file and the key).
        """
        return RunSummary.read(self.summary_path)

    def write_summary(self, summary: RunSummary) -> None:
        """Writes the run's summary in one step.

        Raises:
          OSError: it could not be written (it names the file); the previous summary is still there, whole.
        """
        storage.write_text(self.summary_path, summary.to_json() + "\n")

    def reserve_space(self) -> None:
        """Takes `RESERVE_BYTES` of the disk for the run's last records (see the module docstring).

        Raises:
          OSError: the disk has not that much free (or takes no writes).
        """
        try:
            fd = os.open(self.reserve, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                _allocate(fd, RESERVE_BYTES)
            finally:
                os.close(fd)
        except OSError as e:
            with contextlib.suppress(OSError):
                os.remove(self.reserve)
            raise OSError(e.errno, e.strerror, self.reserve) from None

    def release_space(self) -> bool:
        """Deletes the run's reserve; True if there was one."""
        try:
            os.remove(self.reserve)
        except FileNotFoundError:
            return False
        return True

    def remove_tmp(self) -> None:
        shutil.rmtree(self.tmp, ignore_errors=True)


def _allocate(fd: int, size: int) -> None:
    """Gives the open file `size` bytes of its disk: fallocate, or zeros where the file system has no fallocate."""
    try:
        os.posix_fallocate(fd, 0, size)
    except OSError as e:
        if e.errno not in (errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS):
            raise
        zeros = memoryview(bytes(size))
        while zeros:
            zeros = zeros[os.write(fd, zeros) :]


# -- the lock ------------------------------------------------------------------------------------------------
def lock_output(output: str) -> int:
    """Takes the lock on `output` (created if needed) for this process and returns its file descriptor; it is
    held until the descriptor is closed by every process that inherited it (or they are gone).

    Raises:
      OutputInUseError: another run holds it; the message names that run and its process.
    """
    fd = os.open(os.path.join(output, LOCK_FILE), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as e:
        holder = _read_holder(fd)
        os.close(fd)
        if e.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
            raise
        raise OutputInUseError(
            f"--output {output} is in use by run {holder.get('run', '?')} (pid {holder.get('pid', '?')}, started "
            f"{holder.get('started', '?')}); wait for it to end, or give another --output"
        ) from None
    return fd


def record_holder(fd: int, run_id: str) -> None:
    """Writes who holds the lock into the lock file, for the message another run gets."""
    data = json.dumps({"pid": os.getpid(), "run": run_id, "started": utc_now()}).encode()
    os.ftruncate(fd, 0)
    os.pwrite(fd, data, 0)


def _read_holder(fd: int) -> dict[str, Any]:
    try:
        return json.loads(os.pread(fd, 4096, 0) or b"{}")
    except ValueError:
        return {}


# -- runs ----------------------------------------------------------------------------------------------------
def last_run(output: str) -> Optional[RunFolder]:
    """The run OUTPUT/latest names, or None (no run yet, or its folder is gone)."""
    link = os.path.join(output, LATEST_LINK)
    if not os.path.islink(link):
        return None
    folder = RunFolder(output, os.path.basename(os.readlink(link)))
    return folder if os.path.exists(folder.summary_path) else None


def find_summary(output: Optional[str], run: Optional[str]) -> str:
    """The path of the summary.json of `run`: a summary.json, a run folder, an output directory (its last run's
    copy) or a run id under `output` (None: not looked for); `run` None: `output`'s latest run.

    Raises:
      RunNotFoundError: there is no such run; the message names the paths looked at and the runs there are.
    """
    if run is None:
        latest = None if output is None else last_run(output)
        if latest is None:
            raise RunNotFoundError(
                f"no run under {output}: {os.path.join(str(output), LATEST_LINK)} names no run folder with a "
                f"{SUMMARY_FILE}{_known(output)}; give the --output a run-local used, or a RUN"
            )
        return latest.summary_path
    if run.endswith(".json"):
        looked = {run: "a summary.json"}
    else:
        looked = {storage.join(run, SUMMARY_FILE): "a run folder or an output directory"}
        if output is not None:
            looked[RunFolder(output, run).summary_path] = f"a run id under --output {output}"
    for path in looked:
        if storage.exists(path):
            return path
    where = " and ".join(f"{path} ({what})" for path, what in looked.items())
    raise RunNotFoundError(f"no run {run!r}: looked for {where}{_known(output)}")


def _known(output: Optional[str]) -> str:
    """'; runs there: <the newest ids>' under `output`, or that it holds none."""
    if output is None:
        return ""
    directory = os.path.join(output, RUNS_DIR)
    ids = sorted(os.listdir(directory)) if os.path.isdir(directory) else []
    if not ids:
        return f"; {directory} holds no run"
    more = f" and {len(ids) - SHOWN_RUNS} older" if len(ids) > SHOWN_RUNS else ""
    return f"; runs there: {', '.join(reversed(ids[-SHOWN_RUNS:]))}{more}"


def publish_summary(folder: RunFolder, summary: RunSummary) -> None:
    """Writes the run's summary, then OUTPUT/summary.json and points OUTPUT/latest at the run, each in one step.
    On a full disk it frees the run's reserve (`RunFolder.reserve_space`) and tries again.

    Raises:
      OSError: the disk refused (the error names the file); what was written before is whole.
    """
    try:
        _publish(folder, summary)
    except OSError as e:
        if e.errno not in _FULL or not folder.release_space():
            raise
        _publish(folder, summary)


def _publish(folder: RunFolder, summary: RunSummary) -> None:
    folder.write_summary(summary)
    storage.write_text(os.path.join(folder.output, SUMMARY_FILE), summary.to_json() + "\n")
    link = os.path.join(folder.output, LATEST_LINK)
    temporary = storage.temporary_path(link)
    os.symlink(os.path.join(RUNS_DIR, folder.run_id), temporary)
    try:
        os.replace(temporary, link)
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(temporary)
        raise


def remove_leftovers(output: str) -> None:
    """What earlier runs left in OUTPUT when they were killed outright (no cleanup ran) or their disk refused
    the cleanup (full, read-only): their tmp/ folders and reserves, staging directories and temporary files.
    Call it holding the lock: no other run is writing there.

    Raises:
      OSError: something could not be deleted (the disk is still read-only).
    """
    runs = os.path.join(output, RUNS_DIR)
    with contextlib.suppress(FileNotFoundError):
        for run_id in os.listdir(runs):
            folder = RunFolder(output, run_id)
            folder.remove_tmp()
            folder.release_space()
    storage.remove_abandoned_staging_under(output)
    storage.remove_temporaries_under(output)
