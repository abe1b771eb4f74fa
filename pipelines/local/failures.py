"""Why a stage failed, in one message: its traceback in the run's log (`failure_message`), a write the disk
refused (`refused_message`), or a signal that killed its process (`killed_message`); what to do next
(`next_step`), and the short report of a run that did not end ok (`failure_report`)."""

from __future__ import annotations

import collections
import errno
import html
import os
import re
import signal
from collections.abc import Sequence
from typing import Optional

from pipelines import runs
from pipelines.run_summary import RunSummary
from pipelines.show import in_run_order

ATTEMPT_MARKER = "==== run "  # the log line that starts an attempt of the run


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
    return refusal_text(found["cause"], found.groupdict().get("to") or found["path"], outputs) if found else None


def refusal_text(cause: str, path: Optional[str], outputs: str = "") -> str:
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


def next_step(summary: RunSummary) -> str:
    """What to do about a run that failed or was interrupted, as the console and the failure report say it."""
    resume = "finished stages are reused, training continues from its last checkpoint"
    if summary.status != runs.FAILED:
        return f"run the same command again to resume it ({resume})"
    if "NaN loss during training" in (summary.error or ""):
        return (
            "training's loss became NaN: lower the learning rate (--set training.optimizer.learning_rate=..., or your "
            "model_fn's through --hparams), clip the gradients (--set training.optimizer.clip_gradient_norm=1.0), "
            "or remove the inf or NaN values from the data, then run the command again (with a changed setting or "
            "data, training starts afresh)"
        )
    if summary.stage == "resolve":  # resolve reads only what the command names: there is nothing to resume
        return "change what the error names, then run the command again"
    return f"fix what the error names, then run the same command again: it resumes the run ({resume})"


_STYLE = (
    "body{font-family:system-ui,sans-serif;margin:2rem auto;max-width:70rem;padding:0 1rem;color:#1d1d1f}"
    "table{border-collapse:collapse}td,th{border:1px solid #ddd;padding:.25rem .6rem;text-align:left}"
    "th{background:#f5f5f7}td.n{text-align:right}pre{background:#fce8e6;padding:.6rem;white-space:pre-wrap}"
    ".badge{padding:.2rem .7rem;border-radius:1rem;color:#fff;font-weight:600;background:#b3261e}"
)


def failure_report(summary: RunSummary, evaluation: Optional[str] = None) -> str:
    """The standalone HTML report of a run that did not end ok (written as the run folder's report.html): which
    stage failed and its error, what to do next, the stages that finished with their seconds, and links to the
    run's log and summary (both beside it) and to the `evaluation` report when the evaluate stage wrote one."""
    run, stage, esc = summary.run, summary.stage or "start-up", html.escape
    seconds = dict(run.seconds or {})
    stopped = seconds.pop(stage, None)
    after = f" after {stopped:.1f} s" if stopped is not None else ""
    rows = "".join(f'<tr><td>{esc(s)}</td><td class="n">{t:.1f} s</td></tr>' for s, t in in_run_order(seconds))
    evaluated = (
        f'the model was evaluated: <a href="{esc(evaluation)}">its report</a>'
        if evaluation
        else "no model was evaluated (no evaluation report)"
    )
    title = f"run {run.id}: {summary.status} at {stage}"
    ended = f", ended {run.ended}" if run.ended else ""
    parts = [
        f'<h1>{esc(title)}</h1><p><span class="badge">{esc(summary.status)}</span> the {esc(stage)} stage stopped'
        f"{after}; nothing was published, and {evaluated}.</p>",
        f"<h2>Error</h2><pre>{esc(summary.error or 'no error recorded')}</pre>",
        f"<h2>What to do</h2><p>{esc(next_step(summary)[:1].upper() + next_step(summary)[1:])}.</p>",
        "<h2>Stages that finished</h2>"
        + (f"<table><tr><th>stage</th><th>seconds</th></tr>{rows}</table>" if rows else "<p>none</p>"),
        f"<p>Reused from an earlier attempt: {esc(', '.join(run.reused))}.</p>" if run.reused else "",
        f"<h2>Records</h2><p>Started {esc(run.started)}{esc(ended)}, attempt {run.attempts}.</p><ul>"
        f'<li><a href="{runs.LOG_FILE}">{runs.LOG_FILE}</a>: the full log of every attempt</li>'
        f'<li><a href="{runs.SUMMARY_FILE}">{runs.SUMMARY_FILE}</a>: the run\'s record</li></ul>',
    ]
    head = f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>{esc(title)}</title>'
    return f"{head}<style>{_STYLE}</style></head><body>{''.join(parts)}</body></html>\n"
