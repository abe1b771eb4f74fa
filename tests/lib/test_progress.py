"""Row progress: plain lines at a cadence off a terminal, a redrawn bar on one; rate, percentage, ETA."""

from __future__ import annotations

import io

from fakes import Clock, Terminal

from estimator_lib.progress import RowProgress, duration


def test_duration():
    assert [duration(s) for s in (4.2, 65, 3725)] == ["4s", "1m05s", "1h02m05s"]


def test_plain_lines_come_at_the_cadence_with_rate_and_eta():
    clock, lines = Clock(), []
    progress = RowProgress(
        "batch predict", total=1000, every_seconds=10, stream=io.StringIO(), emit=lines.append, clock=clock
    )
    for _ in range(10):
        clock.now += 4
        progress.update(50)
    progress.finish()
    assert lines == [
        "batch predict: 150/1,000 rows (15%), 12 rows/s, ETA 1m08s",
        "batch predict: 300/1,000 rows (30%), 12 rows/s, ETA 56s",
        "batch predict: 450/1,000 rows (45%), 12 rows/s, ETA 44s",
        "batch predict: 500/1,000 rows (50%), 12 rows/s, ETA 40s",
    ]


def test_a_terminal_gets_one_redrawn_line_and_no_log_lines():
    clock, lines, terminal = Clock(), [], Terminal()
    progress = RowProgress("prepare", stream=terminal, emit=lines.append, clock=clock)
    for _ in range(3):
        clock.now += 1
        progress.update(100)
    progress.finish()
    assert lines == []
    assert terminal.getvalue().split("\r")[1:] == [
        "prepare: 100 rows, 100 rows/s",
        "prepare: 200 rows, 100 rows/s",
        "prepare: 300 rows, 100 rows/s",
        "prepare: 300 rows, 100 rows/s\n",
    ]
