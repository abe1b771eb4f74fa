"""Runs the pipeline whole on this machine's CPU with the KFP local runner, one folder per run (`runs`).

Two processes take part:
  * the supervisor (`supervisor.run_local`, in the CLI's process) takes the lock on OUTPUT, picks the run folder (a
    new one, or the last run's when it failed or was interrupted and is run again with the same arguments), starts
    the runner, stops it on SIGINT, SIGTERM or SIGHUP, and writes the run's final summary (`summary`), which the
    runner hands it through a pipe;
  * the runner (`python -m pipelines.runner RUN_FOLDER --ending-fd FD`, then `runner.runner_main`) runs the KFP local
    runner, `kfp.local.SubprocessRunner(use_venv=False)`, which starts every stage as a subprocess of its own. The
    runner leads a session of its own, so it and its stages form one process group the supervisor stops as a whole:
    no stage outlives the command. The runner also stops the worker processes a killed stage leaves behind
    (`supervisor.stop_orphans`). Its TMPDIR is the run's tmp/ folder (KFP writes each stage's
    `ephemeral_component.py` under it), deleted when the run ends. It starts the run's stage server
    (`pipelines.runner`) first, in the same group: each stage process hands its stage to it, and a child forked from
    that warm interpreter runs the stage without importing TensorFlow again. Neither the runner nor the server runs a
    stage's code (nor a user's, which a stage imports): a stage whose process a signal kills (a crash in native code,
    SIGSEGV or SIGABRT; SIGKILL when memory runs out) fails the run with that stage, the signal's name and the
    stage's last log lines (`failures.killed_message`).

A run resumed into its folder runs in the same artifact directories (`kfp_patches.fixed_run_directory`): each stage
finds its stage record there and reuses finished outputs, and training continues from its checkpoint
(`components.records`). The local runner cannot run `dsl.If`, so gating lives in the components: evaluate writes
the verdict, and the release stage, last, publishes only a blessed model (under OUTPUT/published by default).

A disk that refuses a write (full, read-only) at any point ends the run as failed, exit 1:
  * in a stage, the stage fails, and its error is one line: "train: cannot write <path>: No space left on device"
    (`failures.refused_message`, from Python's or TensorFlow's wording);
  * in the runner's log or summary, no further stage starts (`console.Progress.refusal`), and the log's refused
    lines are kept in memory (`console.LogFile`); the supervisor appends them once the summary is written;
  * the supervisor writes the final summary; on a full disk it frees the run's reserve for it
    (`runs.RunFolder.reserve_space`), and when even that is refused the error says so, and where the last good
    record is (`RecordError`). A run that cannot start says so before anything runs.
The next run's start deletes what the failed one left: tmp/, the reserve, staging directories and temporary files
(`runs.remove_leftovers`).

A run given a webhook (`--notify-webhook`) that fails or is interrupted posts its failure alert from the supervisor,
and one that succeeded with a skew warning its warning alert, once its summary is written
(`supervisor.alert_webhook`): the KFP local runner runs no exit handler, which is where a Vertex AI run sends the
same message (`pipelines.pipeline`).
"""

from pipelines.local.failures import failure_excerpt
from pipelines.local.runner import runner_main
from pipelines.local.supervisor import (
    EXIT_FAILED,
    EXIT_OK,
    PUBLISH_DIR,
    Outcome,
    RecordError,
    ResumeError,
    local_job_defaults,
    run_local,
)

__all__ = [
    "EXIT_FAILED",
    "EXIT_OK",
    "PUBLISH_DIR",
    "Outcome",
    "RecordError",
    "ResumeError",
    "failure_excerpt",
    "local_job_defaults",
    "run_local",
    "runner_main",
]
