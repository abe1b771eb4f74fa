"""Disk faults for local runs: a small real tmpfs where this machine lets a test mount one, else a fake file layer.

Real (`TmpfsDisk`: root with CAP_SYS_ADMIN): the run's output lives on a small tmpfs of its own. A "full"
fault fills it (a ballast file beside the output takes every free byte: the kernel then refuses writes with
ENOSPC); a "read-only" fault bind-mounts the output read-only over itself (the kernel then refuses with EROFS).
`mount -o remount,ro` of the tmpfs itself is refused (EBUSY) while a file on it is open for writing, and a run's
log is open for the whole run: a read-only bind mount is how the same file system turns read-only mid-run here.
Files opened before stay writable through their descriptors (they were opened on the writable mount).

Fake (`FakeDisk`: machines that may not mount, e.g. an unprivileged CI container; and refusals no real fault can
make here): an audit hook of ours (`sys.addaudithook`) makes opening a file for writing, creating a directory,
renaming, linking or deleting under the output raise OSError(errno, strerror, path) as the kernel would. It sees
what Python does: TensorFlow's C++ writes (checkpoints, SavedModels) pass, so a fault armed for train or export
fires at the stage's next Python write; and it refuses at open what the kernel refuses at the first byte (a full
disk still takes an empty file). A full fake disk takes writes again once a file with data in it is deleted under
it (space was freed), as a real one does. Only the fake can refuse one stage alone (EACCES on a stage's folder:
root ignores permission bits) or one file alone (the log, the summary).

A fault is armed through an environment variable (`FAULT_ENV`) that every process of a run inherits: the CLI the
test starts, the runner, the stage server and each stage. A `sitecustomize` module in a directory of the disk's
own, first on their PYTHONPATH, installs the hook at each interpreter's start (a stage server's forked children
inherit it). The hook fires the fault in the named stage's process (the KFP executor's `--function_to_execute`
argument, which both a stage's own process and a stage server's child carry) after that stage's first `skip`
files written under the output, or once a file matching `after` exists there; a fault armed with no stage is on
from the start. A real fault then fills or freezes the file system for every process; a fake one refuses from
then on in every process of the run (scope "run") or in that stage's process only (scope "stage").

This module is imported by that `sitecustomize` in every process of a run: the standard library only, at the top.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import glob
import json
import os
import re
import subprocess
import sys
import threading
import time
from typing import Any, Optional

FAULT_ENV = "TPU_PIPELINE_TEST_DISK_FAULT"
FAKE_ENV = "TPU_PIPELINE_TEST_FAKE_DISK"  # "1": the fake layer even where a tmpfs can be mounted
FULL, READ_ONLY = "full", "read-only"
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
# Audit events that change a file system (PEP 578's table); each one's first argument is the path.
_CHANGES = {"os.mkdir", "os.rename", "os.link", "os.symlink", "os.truncate", "os.chmod", "os.utime"}
_DELETES = {"os.remove", "os.rmdir"}  # shutil.rmtree's own event is not refused: the kernel refuses each entry


# -- in every process of a run: the hook ------------------------------------------------------------------------
class _Hook:
    """The audit hook: fires the fault in the named stage's process, and (fake) refuses writes under `root`."""

    def __init__(self, spec: dict[str, Any]):
        self.spec = spec
        self.root = os.path.join(os.path.abspath(spec["root"]), "")
        self.fired = False
        self.seen = 0  # files the named stage opened for writing under root before the fault fired
        self._watching = False
        self._inside = threading.local()  # the hook's own file operations pass through it

    def __call__(self, event: str, args: tuple) -> None:
        if event != "open" and event not in _CHANGES and event not in _DELETES:
            return
        if getattr(self._inside, "busy", False):
            return
        self._inside.busy = True
        try:
            self._event(event, args)
        finally:
            self._inside.busy = False

    def _event(self, event: str, args: tuple) -> None:
        path = _path(args[0] if args else None)
        if path is None or not path.startswith(self.root):
            return
        mode = args[1] if event == "open" and isinstance(args[1], str) else ""
        if event == "open" and not ((args[2] or 0) & _WRITE_FLAGS or set(mode) & set("wax+")):
            return
        if not self.fired and event == "open" and self._in_stage():
            self._arrive()
        if self.spec["mode"] == "fake" and self._refusing(event, path):
            raise OSError(self.spec["errno"], os.strerror(self.spec["errno"]), path)

    def _in_stage(self) -> bool:
        return self.spec["stage"] is not None and self.spec["stage"] in sys.argv

    def _arrive(self) -> None:
        """The named stage writes a file: fire now, after `skip` files, or once `after` exists."""
        if self.spec["after"]:
            self._watch()
        elif self.seen >= self.spec["skip"]:
            self._fire()
        self.seen += 1

    def _watch(self) -> None:
        """Fires once a file matching `after` (a glob under root) exists: a point in the stage's work that Python
        does not see (a checkpoint TensorFlow writes)."""
        if self._watching:
            return
        self._watching = True
        pattern = os.path.join(self.root, self.spec["after"])

        def watch() -> None:
            while not glob.glob(pattern, recursive=True):
                time.sleep(0.01)
            self._fire()

        threading.Thread(target=watch, name="disk-fault", daemon=True).start()

    def _fire(self) -> None:
        self.fired = True
        fire(self.spec)

    def _refusing(self, event: str, path: str) -> bool:
        if self.spec["scope"] == "stage" and not (self.fired and self._in_stage()):
            return False
        if not os.path.exists(self.spec["switch"]):
            return False
        if event in _DELETES and self.spec["errno"] == errno.ENOSPC:
            if os.path.isfile(path) and os.path.getsize(path):  # space freed: a full disk takes writes again
                with contextlib.suppress(FileNotFoundError):
                    os.remove(self.spec["switch"])
            return False
        return not self.spec["names"] or os.path.basename(path).startswith(tuple(self.spec["names"]))


def _path(value: Any) -> Optional[str]:
    if value is None or isinstance(value, int):
        return None
    return os.path.abspath(os.fsdecode(value))


def install() -> None:
    """Installs the hook when `FAULT_ENV` arms a fault (the disk's `sitecustomize` calls this)."""
    spec = os.environ.get(FAULT_ENV)
    if spec:
        sys.addaudithook(_Hook(json.loads(spec)))


def fire(spec: dict[str, Any]) -> None:
    """Turns the fault on: fills the tmpfs, freezes the output read-only, or (fake) sets the switch."""
    if spec["mode"] == "fill":
        fill(spec["ballast"])
    elif spec["mode"] == "freeze":
        freeze(spec["root"])
    else:
        with open(spec["switch"], "w", encoding="utf-8"):
            pass


def fill(ballast: str) -> None:
    """Takes every free byte of the file system `ballast` is on."""
    stats = os.statvfs(os.path.dirname(ballast))
    fd = os.open(ballast, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        with contextlib.suppress(OSError):
            os.posix_fallocate(fd, 0, stats.f_bavail * stats.f_frsize)
        with contextlib.suppress(OSError):  # what the allocation's rounding left
            while os.write(fd, bytes(4096)):
                pass
    finally:
        os.close(fd)


def freeze(directory: str) -> None:
    """Makes `directory` read-only for every later open: a read-only bind mount of it over itself."""
    subprocess.run(["mount", "--bind", directory, directory], check=True, capture_output=True)
    subprocess.run(["mount", "-o", "remount,bind,ro", directory], check=True, capture_output=True)


# -- in the test: the disks ----------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Fault:
    """`kind` FULL or READ_ONLY (a fake also takes an errno, e.g. errno.EACCES), fired in `stage`'s process after
    its first `skip` files written under the output, or once a file matching `after` exists there (None: on from
    the start). Fake only: `scope` "stage" refuses in that stage's process alone; `names` refuses only files whose
    names start so."""

    kind: Any
    stage: Optional[str] = None
    skip: int = 0
    after: str = ""
    scope: str = "run"
    names: tuple[str, ...] = ()


class _Disk:
    """A directory for a run's output (`output`), and the fault armed for the processes `env` is given to."""

    layer = ""

    def __init__(self, directory: str):
        self.directory = directory
        self.output = os.path.join(directory, "out")
        self.switch = directory + ".fault-on"
        self.site = directory + ".site"
        self.fault: Optional[Fault] = None
        os.makedirs(self.site, exist_ok=True)
        with open(os.path.join(self.site, "sitecustomize.py"), "w", encoding="utf-8") as f:
            f.write("import disk_faults\n\ndisk_faults.install()\n")

    def arm(self, fault: Fault) -> None:
        """Arms `fault` in place of the one before (for the processes given `env` from now on)."""
        self.clear()
        self.fault = fault
        if fault.stage is None:
            os.makedirs(self.output, exist_ok=True)
            fire(self.spec())

    def spec(self) -> dict[str, Any]:
        fault = self.fault
        return {
            "root": self.output,
            "stage": stage_function(fault.stage) if fault.stage else None,
            "skip": fault.skip,
            "after": fault.after,
            "scope": fault.scope,
            "names": list(fault.names),
            "switch": self.switch,
        }

    def env(self) -> dict[str, str]:
        """The environment of a process of the run: the disk's `sitecustomize` first on PYTHONPATH, the fault."""
        here = os.path.dirname(os.path.abspath(__file__))
        paths = [self.site, here, os.path.dirname(here), *os.environ.get("PYTHONPATH", "").split(os.pathsep)]
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in paths if p), TF_CPP_MIN_LOG_LEVEL="2")
        env.pop(FAULT_ENV, None)
        if self.fault is not None:
            env[FAULT_ENV] = json.dumps(self.spec())
        return env

    def python(self, code: str) -> subprocess.CompletedProcess:
        """Runs `code` in a Python process of its own under the armed fault."""
        command = [sys.executable, "-c", code]
        return subprocess.run(command, env=self.env(), capture_output=True, text=True, timeout=120, check=False)

    def clear(self) -> None:
        """Removes the fault: the disk takes writes again."""
        self.fault = None
        with contextlib.suppress(FileNotFoundError):
            os.remove(self.switch)

    def close(self) -> None:
        self.clear()


class TmpfsDisk(_Disk):
    """A real tmpfs of `size` mounted at `directory`; a fault fills it, or freezes the output read-only."""

    layer = "tmpfs"

    def __init__(self, directory: str, size: str = "128m"):  # about 20 runs of the penguins; memory used as written
        super().__init__(directory)
        self.ballast = os.path.join(directory, ".ballast")
        os.makedirs(directory, exist_ok=True)
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", directory], check=True)

    def arm(self, fault: Fault) -> None:
        if fault.kind not in (FULL, READ_ONLY) or fault.scope != "run" or fault.names:
            raise ValueError(f"a tmpfs fills up or turns read-only as a whole: {fault} is a FakeDisk's")
        super().arm(fault)

    def spec(self) -> dict[str, Any]:
        mode = "fill" if self.fault.kind == FULL else "freeze"
        return {**super().spec(), "mode": mode, "ballast": self.ballast}

    def clear(self) -> None:
        super().clear()
        with contextlib.suppress(FileNotFoundError):
            os.remove(self.ballast)
        while _is_mount(self.output):  # the read-only bind mount over the output
            subprocess.run(["umount", "-l", self.output], check=True)

    def close(self) -> None:
        self.clear()
        subprocess.run(["umount", "-l", self.directory], check=True)


class FakeDisk(_Disk):
    """An ordinary directory; the fault is the fake file layer's (see the module docstring)."""

    layer = "fake"

    def __init__(self, directory: str):
        super().__init__(directory)
        os.makedirs(directory, exist_ok=True)

    def spec(self) -> dict[str, Any]:
        code = {FULL: errno.ENOSPC, READ_ONLY: errno.EROFS}.get(self.fault.kind, self.fault.kind)
        return {**super().spec(), "mode": "fake", "errno": code}


def _is_mount(path: str) -> bool:
    with open("/proc/self/mountinfo", encoding="utf-8") as f:
        return any(line.split()[4] == path for line in f)


def can_mount(directory: str) -> bool:
    """True when this process may mount a tmpfs (root with CAP_SYS_ADMIN, outside a locked-down container)."""
    os.makedirs(directory, exist_ok=True)
    try:
        mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", directory], capture_output=True)
    except FileNotFoundError:  # no mount command
        return False
    if mounted.returncode != 0:
        return False
    subprocess.run(["umount", directory], check=True)
    return True


def make_disk(directory: str, layer: str = "") -> _Disk:
    """A tmpfs where one can be mounted (unless `FAKE_ENV` or `layer` "fake" asks for the fake), else the fake."""
    if layer != "fake" and os.environ.get(FAKE_ENV) != "1" and can_mount(directory + ".probe"):
        return TmpfsDisk(directory)
    return FakeDisk(directory)


def stage_function(stage: str) -> str:
    """The KFP function that runs `stage` ("train" -> "train_model")."""
    from pipelines.local import kfp_patches

    return next(task for task, name in kfp_patches._task_stages().items() if name == stage).replace("-", "_")


# What a writer leaves while it writes, or when it is killed or its disk refuses it: ours (summaries, records,
# the reserve, tmp/, staging directories, the latest link's), TensorFlow's ("graph.pbtxt.tmp<hex>",
# "model.ckpt-20_temp/", "*.tempstate<digits>").
_LEFTOVER = re.compile(r"\.tmp|tempstate|_temp$|^\.staging-|^space\.reserve$")


def leftovers(output: str) -> list[str]:
    """The temporary files and directories under `output` (a run's tmp/ among them)."""
    found = []
    for parent, directories, files in os.walk(output):
        for name in directories + files:
            in_run = os.path.basename(os.path.dirname(parent)) == "runs"
            if _LEFTOVER.search(name) or (in_run and name == "tmp"):
                found.append(os.path.join(parent, name))
    return sorted(found)
