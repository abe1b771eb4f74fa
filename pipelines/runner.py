"""`python -m pipelines.runner RUN_FOLDER --ending-fd FD [--verbose]`: the process of a local
run's runner (`pipelines.local`).

It starts the run's stage server (`pipelines.stage_server`) before it imports KFP, TensorFlow or the library,
then runs `pipelines.local.runner_main`. The server's imports (TensorFlow, KFP, the components: what a run's
first stage waits for) thus overlap the runner's own (KFP and the pipeline) on a second core.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import secrets
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator, Sequence
from typing import IO, Any

from pipelines import runs, stage


def start_stage_server(run_id: str, log: IO[str]) -> subprocess.Popen:
    """Starts a warm stage server for this run's stages and puts its address in this process's environment
    (`stage.STAGE_SERVER_ENV`), which the stages inherit.

    The listening socket is open before the server has finished importing, so the first stage waits for it
    rather than importing on its own; it has a Linux abstract name (no file to clean up, no path length limit)
    and the server serves only this user. Should the server fail, the stages find no one listening and run in
    processes of their own (`pipelines.stage`). Its own output (import warnings) goes to `log`. It dies with
    this process (PR_SET_PDEATHSIG) and is in its process group.
    """
    address = f"tpu-pipeline-{run_id}-{secrets.token_hex(8)}"
    log.flush()
    with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as listener:
        listener.bind("\0" + address)
        listener.listen(8)
        fd = str(listener.fileno())
        command = [sys.executable, "-m", stage.SERVER_MODULE, fd, str(os.getpid())]
        server = subprocess.Popen(command, pass_fds=(listener.fileno(),), stdout=log, stderr=log)
    os.environ[stage.STAGE_SERVER_ENV] = address
    return server


def stop_stage_server(server: subprocess.Popen) -> None:
    os.environ.pop(stage.STAGE_SERVER_ENV, None)
    server.kill()
    server.wait()


@contextlib.contextmanager
def stage_server(run_id: str, log: IO[str]) -> Iterator[subprocess.Popen]:
    """A warm stage server for this run's stages while the block runs (`start_stage_server`)."""
    server = start_stage_server(run_id, log)
    try:
        yield server
    finally:
        stop_stage_server(server)


def _die_with_parent() -> None:
    """Asks Linux to send this process SIGTERM when the supervisor dies (even by SIGKILL), so the stages are
    stopped with it (see `_stop_own_group`)."""
    with contextlib.suppress(OSError, AttributeError):
        pr_set_pdeathsig = 1
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM)


def _stop_own_group(signum: int, frame: Any) -> None:
    """The runner leads its process group: a stop signal goes on to every stage, then ends the runner."""
    signal.signal(signum, signal.SIG_DFL)
    os.killpg(0, signum)


def main(argv: Sequence[str]) -> int:
    _die_with_parent()
    for s in stage.STOP_SIGNALS:
        signal.signal(s, _stop_own_group)
    path = os.path.abspath(argv[0])
    folder = runs.RunFolder(os.path.dirname(os.path.dirname(path)), os.path.basename(path))
    try:
        log = open(folder.log, "a", encoding="utf-8")
    except OSError:  # the disk refuses the log: the server's warnings are lost, and the runner reports why
        log = open(os.devnull, "w", encoding="utf-8")
    with log:
        server = start_stage_server(folder.run_id, log)
    try:
        from pipelines import local  # once the server is starting: see the module docstring

        return local.runner_main(argv)
    finally:
        stop_stage_server(server)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
