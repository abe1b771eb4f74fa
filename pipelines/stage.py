"""`python -m pipelines.stage ARGS`: the process the KFP local runner starts for one stage of a local run.

It imports nothing beyond the standard library. When the run has a warm stage server (`pipelines.stage_server`, its
address in the environment variable `STAGE_SERVER_ENV`), it hands the server its arguments, working directory,
environment and standard input, output and error; the server forks a child that already has TensorFlow, KFP and the
components imported and runs the stage there, writing to this process's pipe as the stage would. This process
forwards SIGINT, SIGTERM and SIGHUP to that child and ends the way the child ended (its exit code, or killed by the
same signal), so the local runner sees the stage exactly as it would see a process of its own. Without a reachable
server (none started, it failed, or it went away before the child started) the stage runs in a process of its own
(`pipelines.executor`), as it does without this module. Either way a crash of the stage's code prints its Python
stack (faulthandler) after every line the stage printed (unbuffered), and ends the stage by the crash's signal.

`pipelines.local` launches the local runner's stages through this module (`kfp_patches.fast_stage_exit`); the compiled
pipeline spec, and what runs on Vertex AI, are unchanged.
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import signal
import socket
import sys
from collections.abc import Sequence
from typing import Optional

KFP_EXECUTOR_MODULE = "kfp.dsl.executor_main"
EXECUTOR_MODULE = "pipelines.executor"
SERVER_MODULE = "pipelines.stage_server"
STAGE_SERVER_ENV = "TPU_PIPELINE_STAGE_SERVER"
# A local run's stop signals: the supervisor and the runner stop on them, and a stage process forwards them.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
MAX_REQUEST_BYTES = 1 << 20
STD_FDS = (0, 1, 2)


def request(argv: Sequence[str]) -> bytes:
    """What the server needs to run the stage as this process would: arguments, working directory, environment."""
    return json.dumps({"argv": list(argv), "cwd": os.getcwd(), "env": dict(os.environ)}).encode()


def connect(address: str) -> Optional[socket.socket]:
    """A connection to the stage server at `address` (a Linux abstract socket name), or None if none answers."""
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        conn.connect("\0" + address)
        return conn
    except OSError:
        conn.close()
        return None


def _receive(conn: socket.socket) -> Optional[dict]:
    """The server's next message, or None when the connection ended."""
    try:
        message = conn.recv(4096)
    except OSError:
        return None
    return json.loads(message) if message else None


def _forward_signals(child: int) -> None:
    def forward(signum: int, frame: object) -> None:
        with contextlib.suppress(ProcessLookupError):  # it has just ended: its end is on its way
            os.kill(child, signum)

    for signum in STOP_SIGNALS:
        signal.signal(signum, forward)


def end_like(status: dict) -> int:
    """The exit code of a child that ended with `status` ({"code": N} or {"signal": N}); a child killed by a
    signal ends this process by the same signal."""
    if "signal" in status:
        # The child dumped core, if the system keeps cores; this process's core would only add a useless one.
        resource.setrlimit(resource.RLIMIT_CORE, (0, resource.getrlimit(resource.RLIMIT_CORE)[1]))
        signal.signal(status["signal"], signal.SIG_DFL)
        os.kill(os.getpid(), status["signal"])
    return int(status.get("code", 1))


def through_server(address: str, argv: Sequence[str]) -> Optional[int]:
    """Runs the stage in a child of the server at `address`; its exit code, or None if the server did not
    start one (the caller then runs the stage itself)."""
    conn = connect(address)
    if conn is None:
        return None
    with conn:
        try:
            socket.send_fds(conn, [request(argv)], list(STD_FDS))
        except OSError:
            return None
        started = _receive(conn)
        if started is None:
            return None
        _forward_signals(started["pid"])
        ended = _receive(conn)
    if ended is None:
        print(f"the stage server ended while running this stage (child {started['pid']})", file=sys.stderr)
        return 1
    return end_like(ended)


def main() -> None:
    address = os.environ.get(STAGE_SERVER_ENV)
    code = through_server(address, sys.argv[1:]) if address else None
    if code is None:  # faulthandler and unbuffered output, as in a server's child (`stage_server.show_crashes`)
        os.execv(sys.executable, [sys.executable, "-X", "faulthandler", "-u", "-m", EXECUTOR_MODULE, *sys.argv[1:]])
    os._exit(code)


if __name__ == "__main__":
    main()
