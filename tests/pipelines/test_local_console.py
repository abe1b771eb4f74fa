"""The local runner's console: one line per stage event on screen, everything in the log, errors surfaced."""

from __future__ import annotations

import io

from pipelines import local

RUNNER_OUTPUT = """00:24:01.571 - INFO - Executing task \x1b[96m'prepare-data'\x1b[0m
    [KFP Executor 2026-11-22 00:22:54,065 WARNING]: From model_fn.py:28: deprecated
    Instructions for updating:
00:24:04.276 - INFO - Task \x1b[96m'prepare-data'\x1b[0m finished with status \x1b[92mSUCCESS\x1b[0m
00:24:04.277 - INFO - Task \x1b[96m'prepare-data'\x1b[0m outputs:
    dataset: Dataset( name='dataset',
00:24:29.330 - INFO - Pipeline \x1b[95m'tpu-estimator-pipeline'\x1b[0m finished with status \x1b[92mSUCCESS\x1b[0m
"""


def test_console_shows_stage_events_and_the_log_keeps_everything():
    log, console = io.StringIO(), io.StringIO()
    stream = local._ConsoleFilter(log, console, verbose=False)
    for chunk in (RUNNER_OUTPUT[:50], RUNNER_OUTPUT[50:]):  # lines split across writes
        stream.write(chunk)
    assert log.getvalue() == RUNNER_OUTPUT
    shown = console.getvalue().splitlines()
    assert len(shown) == 3
    assert "Executing task" in shown[0] and "finished with status" in shown[1] and "Pipeline" in shown[2]


def test_verbose_console_shows_everything():
    console = io.StringIO()
    local._ConsoleFilter(io.StringIO(), console, verbose=True).write(RUNNER_OUTPUT)
    assert console.getvalue() == RUNNER_OUTPUT


def test_failure_excerpt_is_the_last_traceback(tmp_path):
    path = tmp_path / "pipeline.log"
    path.write_text(
        "    Traceback (most recent call last):\n      old\n    ValueError: earlier\n"
        + RUNNER_OUTPUT
        + '    Traceback (most recent call last):\n      File "x.py", line 3, in f\n'
        + "    DataError: data.csv line 7, column 'x': 'abc' is not a number\n"
    )
    assert local.failure_excerpt(str(path)) == (
        'Traceback (most recent call last):\n  File "x.py", line 3, in f\n'
        "DataError: data.csv line 7, column 'x': 'abc' is not a number"
    )
