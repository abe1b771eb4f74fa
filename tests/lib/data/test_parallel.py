"""data/parallel.py: the ordered, bounded parallel map: input order whatever the workers, the initializer in
every worker, at most 2 * num_workers tasks read ahead, worker errors raised in the caller."""

from __future__ import annotations

import os
import time

import pytest

from estimator_lib.data.parallel import ordered_map

_STATE = {}


def remember(plan) -> None:
    _STATE["plan"] = plan


def work(task: int):
    """Later tasks finish first, so a map that yields by completion would come back out of order."""
    time.sleep(0.002 * (8 - task % 8))
    return task * task, _STATE["plan"], os.getpid()


def fail_on_three(task: int) -> int:
    if task == 3:
        raise ValueError(f"task {task} is bad")
    return task


def test_one_worker_runs_in_this_process():
    _STATE.clear()
    out = list(ordered_map(work, range(4), 1, remember, "plan-a"))
    assert [(t, r[0], r[1]) for t, r in out] == [(0, 0, "plan-a"), (1, 1, "plan-a"), (2, 4, "plan-a"), (3, 9, "plan-a")]
    assert {r[2] for _, r in out} == {os.getpid()}


def test_two_workers_keep_input_order_and_initialise_each_worker():
    _STATE.clear()
    out = list(ordered_map(work, range(12), 2, remember, "plan-b"))
    assert [t for t, _ in out] == list(range(12))
    assert [r[0] for _, r in out] == [t * t for t in range(12)]
    assert {r[1] for _, r in out} == {"plan-b"}  # every worker ran the initializer with the plan
    assert os.getpid() not in {r[2] for _, r in out}
    assert "plan" not in _STATE  # the initializer ran in the workers only


def test_reads_at_most_twice_the_workers_ahead():
    consumed = []

    def tasks():
        for i in range(20):
            consumed.append(i)
            yield i

    results = ordered_map(abs, tasks(), 2, remember, None)
    first = next(results)
    assert first == (0, 0) and len(consumed) == 4  # 2 * num_workers submitted before the first result
    results.close()  # abandoning the map shuts the pool down without reading the rest
    assert len(consumed) == 4


def test_empty_input_yields_nothing():
    assert list(ordered_map(abs, [], 2, remember, None)) == []
    assert list(ordered_map(abs, [], 1, remember, None)) == []


@pytest.mark.parametrize("workers", [1, 2])
def test_a_worker_error_reaches_the_caller_after_the_earlier_results(workers):
    seen = []
    with pytest.raises(ValueError, match="task 3 is bad"):
        for _task, result in ordered_map(fail_on_three, range(6), workers, remember, None):
            seen.append(result)
    assert seen == [0, 1, 2]
