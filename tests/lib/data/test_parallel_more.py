"""The ordered parallel map keeps submission order with any number of workers; a worker's plan is set once."""

from __future__ import annotations

import pytest

from estimator_lib.data import parallel

_PLAN: parallel.WorkerPlan[int] = parallel.WorkerPlan("_scaled")


def _init(plan: int) -> None:
    _PLAN.set(plan)


def _scaled(task: int) -> int:
    return task * _PLAN.get()


@pytest.mark.parametrize("workers", [1, 2])
def test_results_come_back_in_submission_order(workers):
    tasks, plan = list(range(23)), 10 + workers  # a plan this process never had: the workers' initializer set it
    assert list(parallel.ordered_map(_scaled, iter(tasks), workers, _init, plan)) == [(t, plan * t) for t in tasks]


def test_a_plan_read_before_it_is_set_is_refused():
    with pytest.raises(RuntimeError) as e:
        parallel.WorkerPlan("profile_chunk").get()
    assert str(e.value) == "profile_chunk ran in a process where init_worker(plan) was not called; call it first"
