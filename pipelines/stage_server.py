"""`python -m pipelines.stage_server FD PARENT`: a warm interpreter that runs a local run's stages.

The local runner (`pipelines.local`) opens a listening socket, starts this server with it (file descriptor FD)
and tells every stage process (`pipelines.stage`) its address. The server imports TensorFlow, KFP, the
components and the library modules their bodies import once, at start, and then, for every stage process that
connects, forks a child that adopts that process's standard input, output and error, working directory,
environment and arguments and runs KFP's executor (`pipelines.executor.execute`). A stage thus skips the
2-3 s of imports a fresh interpreter pays, and everything else is as in a process of its own: the same
arguments, output, logs and exit code. The stage's code (and a user's, which it imports) runs only in that
child: a crash in it (a segfault, an abort) kills the child, whose end the stage process takes on; the server
serves the next stage. The child prints the Python stack of such a crash (faulthandler) and flushes its
stdout line by line, so the stage's log shows where it crashed.

Forking is safe because the server runs nothing before it forks: no TensorFlow session or eager context
(whose thread pools a child would not inherit), no storage client. The threads an import leaves (OpenBLAS'
and jemalloc's) are made fork-safe by their libraries. The logging setup the imports made is undone, so each
stage sets up its logging as a fresh interpreter does (KFP's format on its stdout; TensorFlow's logger through
it).

The server dies with the runner (PR_SET_PDEATHSIG) and a child with the server; a child whose stage process went
away (killed) is killed. Stages run one at a time, as the KFP local runner runs them.
"""

from __future__ import annotations

import contextlib
import ctypes
import faulthandler
import json
import logging
import os
import random
import select
import signal
import socket
import struct
import sys
import tempfile
import traceback
from collections.abc import Sequence

# Imported here so that every stage's child has them already: KFP's executor, the components and what their
# bodies import (the components import inside their bodies, for KFP). Apache Beam is left out: only the beam
# engine's stages import it, and it would add about 1 s of CPU to every run's start.
import tensorflow  # noqa: F401
from kfp.dsl import executor  # noqa: F401
from tensorflow.python.eager import context  # no public way to ask whether the runtime has started

import components  # noqa: F401
from components import adapter, artifacts, records  # noqa: F401
from estimator_lib import estimator, predict, release, storage, summaries  # noqa: F401
from estimator_lib.config import beam as beam_config  # noqa: F401
from estimator_lib.data import prepare, retrain  # noqa: F401
from estimator_lib.evaluation import evaluate_and_bless, report  # noqa: F401
from estimator_lib.predict import serving_check
from pipelines import executor as stage_executor
from pipelines import stage

PR_SET_PDEATHSIG = 1


def _die_with_parent(parent: int) -> None:
    """SIGKILL when the parent (the runner, or for a child the server) dies; exits now if it already has."""
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:
        os._exit(1)


def fresh_logging() -> None:
    """Undoes the logging setup the imports above made, so KFP's executor configures logging as in a fresh
    interpreter: the root logger without handlers (apache_beam's import warning installed one) and TensorFlow's
    logger without the handler it adds when the root logger has none."""
    for logger in (logging.getLogger(), logging.getLogger("tensorflow")):
        for handler in list(logger.handlers):
            logger.removeHandler(handler)
    logging.getLogger().setLevel(logging.WARNING)


def check_fork_safe() -> None:
    """Raises if TensorFlow's runtime has started in this process (its eager context, with its thread pools): a
    forked child would inherit the runtime's state without its threads."""
    if context.context_safe() is not None:
        raise RuntimeError(
            "pipelines.stage_server: TensorFlow's runtime was started while the stage modules were imported (a "
            "module runs TensorFlow at import time), so forking is unsafe; the stages run in processes of their "
            "own until that module does its TensorFlow work when called"
        )


def _peer_uid(conn: socket.socket) -> int:
    _, uid, _ = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i")))
    return uid


def show_crashes() -> None:
    """Makes a crash of the stage's own code visible in its log: faulthandler prints the Python stack to its
    stderr when a signal (SIGSEGV, SIGABRT, SIGBUS, SIGILL, SIGFPE) kills it, and its stdout is line-buffered,
    so no line it printed before the crash is lost (a fresh interpreter's `-X faulthandler -u`; see
    `pipelines.stage`)."""
    faulthandler.enable(file=sys.stderr)
    sys.stdout.reconfigure(line_buffering=True)


def _adopt(fds: Sequence[int], request: dict) -> None:
    """Makes this (forked) process the stage process that sent `request` with its standard `fds`."""
    for target, fd in zip(stage.STD_FDS, fds):
        os.dup2(fd, target)
        os.close(fd)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    tempfile.tempdir = None  # found again from the stage's TMPDIR
    random.seed()  # as a fresh interpreter seeds it
    sys.argv = [stage.__file__, *request["argv"]]
    show_crashes()
    signal.signal(signal.SIGINT, signal.default_int_handler)
    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, signal.SIG_DFL)


def _run_child(fds: Sequence[int], request: dict) -> None:
    """The forked child: runs the stage and exits as `python -m pipelines.executor` would."""
    code = 1
    try:
        _adopt(fds, request)
        stage_executor.execute()
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else int(e.code is not None)
    except KeyboardInterrupt:
        traceback.print_exc()
        code = -signal.SIGINT
    except BaseException:  # noqa: BLE001 - printed as the interpreter prints an uncaught exception
        traceback.print_exc()
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        if code < 0:  # as Python ends on an uncaught KeyboardInterrupt: killed by SIGINT
            signal.signal(-code, signal.SIG_DFL)
            os.kill(os.getpid(), -code)
        os._exit(code)


def _status(wait_status: int) -> dict:
    if os.WIFSIGNALED(wait_status):
        return {"signal": os.WTERMSIG(wait_status)}
    return {"code": os.WEXITSTATUS(wait_status)}


def _wait(child: int, conn: socket.socket) -> dict:
    """Waits for the child to end; kills it if its stage process goes away first (the connection closes)."""
    pidfd = os.pidfd_open(child)
    try:
        ready, _, _ = select.select([pidfd, conn], [], [])
        if conn in ready and pidfd not in ready:
            os.kill(child, signal.SIGKILL)
        return _status(os.waitpid(child, 0)[1])
    finally:
        os.close(pidfd)


def serve_one(listener: socket.socket, conn: socket.socket) -> None:
    """Runs the stage of one connected stage process in a forked child and sends back its pid and its end."""
    message, fds, _, _ = socket.recv_fds(conn, stage.MAX_REQUEST_BYTES, len(stage.STD_FDS))
    if _peer_uid(conn) != os.getuid() or len(fds) != len(stage.STD_FDS) or not message:
        for fd in fds:
            os.close(fd)
        return  # the connection closes unanswered: the stage process runs the stage itself
    request = json.loads(message)
    sys.stdout.flush()
    sys.stderr.flush()
    parent = os.getpid()
    child = os.fork()
    if child == 0:
        listener.close()
        conn.close()
        _die_with_parent(parent)
        _run_child(fds, request)
    for fd in fds:
        os.close(fd)
    try:
        conn.send(json.dumps({"pid": child}).encode())
    except OSError:  # the stage process has gone already
        os.kill(child, signal.SIGKILL)
    ended = _wait(child, conn)
    with contextlib.suppress(OSError):
        conn.send(json.dumps(ended).encode())


def serve(listener: socket.socket) -> None:
    """Serves stage processes, one at a time, until killed."""
    while True:
        conn, _ = listener.accept()
        with conn:
            serve_one(listener, conn)


def main(argv: Sequence[str]) -> None:
    listener = socket.socket(fileno=int(argv[0]))
    _die_with_parent(int(argv[1]))
    check_fork_safe()
    fresh_logging()
    serving_check.prestart()  # the run's serving check then finds its fresh interpreter with TensorFlow imported
    serve(listener)


if __name__ == "__main__":
    main(sys.argv[1:])
