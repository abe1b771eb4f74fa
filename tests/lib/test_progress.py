"""Row progress: plain lines at a cadence off a terminal, a redrawn bar on one; rate, percentage, ETA. Training
progress: the stage's rate and ETA over rounds and validations, early stopping's soonest stop, its line."""

from __future__ import annotations

import io

from fakes import Clock, Terminal

from estimator_lib.progress import RowProgress, TrainingProgress, count_down, duration, early_stop_line


def test_duration():
    assert [duration(s) for s in (4.2, 65, 3725)] == ["4s", "1m05s", "1h02m05s"]


def test_a_line_shown_again_later_has_its_eta_counted_down():
    line = "step 300/1000 (30%), ETA 1h02m05s, loss 0.31, 8.0 steps/s (512 examples/s)"
    assert count_down(line, 66) == "step 300/1000 (30%), ETA 1h00m59s, loss 0.31, 8.0 steps/s (512 examples/s)"
    assert count_down("batch predict: 81/162 rows (50%), 900 rows/s, ETA 5s", 9) == (
        "batch predict: 81/162 rows (50%), 900 rows/s, ETA 0s"
    )
    assert count_down("prepare: 300 rows, 100 rows/s", 9) == "prepare: 300 rows, 100 rows/s"


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


def test_validations_left_count_the_round_ends_and_the_budget():
    progress = TrainingProgress(budget=1000, batch_size=8, start_step=0, started=0.0, round_steps=300)
    # rounds end at 300, 600, 900, then the budget: a step at a round's end still has its validation due
    assert [progress.validations_left(step, 1000) for step in (0, 100, 300, 301, 900, 950, 1000)] == [
        4,
        4,
        4,
        3,
        2,
        1,
        1,
    ]
    assert progress.validations_left(600, 600) == 1
    no_rounds = TrainingProgress(budget=1000, batch_size=8, start_step=0, started=0.0)
    assert no_rounds.validations_left(100, 1000) == 0


def test_eta_is_the_steps_left_at_the_training_wall_rate_plus_the_validations_left_at_their_cost():
    """20 s in: 400 steps trained in 16 s of training wall time (checkpoints, set-up included: 25 steps/s), and
    two validations of 2 s each. 600 steps left: 24 s, and validations at 600, 900 and 1000: 6 s."""
    progress = TrainingProgress(budget=1000, batch_size=8, start_step=0, started=100.0, round_steps=300)
    assert progress.eta(300, 100.0) is None  # nothing measured yet
    progress.validated(2.0, improved=True)
    progress.validated(2.0, improved=False)
    assert progress.eta(400, 120.0) == 24.0 + 6.0
    assert progress.steps_per_second(400, 120.0) == 20.0  # the stage's rate: validation included
    assert progress.eta(400, 120.0, until=600) == 8.0 + 2.0
    resumed = TrainingProgress(budget=1000, batch_size=8, start_step=200, started=100.0)
    assert resumed.eta(400, 120.0) == 60.0  # a resumed stage's rate counts its own steps only


def test_the_eta_counts_from_the_first_measured_step_not_the_stages_one_time_start():
    """The first round took 10 s to its first 100 steps (the process's first graph, session and execution); the
    next 200 steps took 2 s, plus a 1 s validation. 700 steps left at 100 steps/s: 7 s, and the 8 validations at
    300..1000 at their mean cost (1 s): 8 s; extrapolating from the stage's start would say 28 + 8 s."""
    progress = TrainingProgress(budget=1000, batch_size=8, start_step=0, started=0.0, round_steps=100)
    progress.measured(100, 10.0)
    assert progress.eta(100, 10.0) == 900 * 10.0 / 100 + 10 * 0.0  # one step measured: the stage's rate
    progress.validated(1.0, improved=True)
    progress.measured(300, 13.0)  # a later step does not move the anchor
    assert progress.eta(300, 13.0) == 7.0 + 8 * 1.0
    resumed = TrainingProgress(budget=1000, batch_size=8, start_step=200, started=0.0)
    resumed.measured(200, 1.0)  # no step trained yet in this stage: not an anchor
    resumed.measured(300, 5.0)
    assert resumed.eta(500, 7.0) == 500 * 2.0 / 200


def test_early_stopping_gives_the_soonest_stop_and_its_eta():
    progress = TrainingProgress(
        budget=1000, batch_size=10, start_step=0, started=0.0, round_steps=100, patience=3, every_seconds=5
    )
    progress.validated(1.0, improved=True)  # step 100, the best so far
    progress.validated(1.0, improved=False)  # step 200
    # at step 250, one round without improvement: stops at 400 the soonest (300, 400 without improvement)
    assert progress.soonest_stop(250) == 400 and progress.soonest_stop(300) == 400
    assert progress.due(0.0)
    assert progress.line(250, 0.25, 12.0) == (
        "step 250/1000 (25%), ETA 38s, loss 0.25, 20.8 steps/s (208 examples/s); "
        "early stopping can end it at step 400, in 8s"
    )
    assert not progress.due(16.9) and progress.due(17.0)
    progress.validated(1.0, improved=False)
    progress.validated(1.0, improved=False)
    assert progress.soonest_stop(400) == 400  # its validation, still due, can stop it
    progress.validated(1.0, improved=True)
    assert progress.soonest_stop(550) == 800
    assert progress.soonest_stop(900) is None  # the budget comes first
    assert TrainingProgress(budget=1000, batch_size=10, start_step=0, started=0.0).soonest_stop(250) is None


def test_the_early_stop_line():
    assert early_stop_line(700, 5, 200, 0.0313420071) == (
        "early stopping at step 700: no improvement of the validation loss for 5 rounds; "
        "the model is step 200's checkpoint, validation loss 0.031342"
    )
    assert "for 1 round;" in early_stop_line(200, 1, 100, 0.5)
