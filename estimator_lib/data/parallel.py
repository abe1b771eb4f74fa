"""An ordered, bounded parallel map over chunks: both cores work, output order and bytes stay fixed.

Results come back in submission order whatever the number of workers, and at most `2 * num_workers` chunks
are in flight, so memory does not grow with the input (unlike `Pool.imap`, which reads its whole input
iterator ahead). Workers are forked: they inherit the loaded modules and only run Python and protobuf code.
"""

from __future__ import annotations

import collections
import gc
import multiprocessing
from concurrent.futures import ProcessPoolExecutor
from typing import Any, Callable, Generic, Iterable, Iterator, Optional, Tuple, TypeVar

T = TypeVar("T")
R = TypeVar("R")
P = TypeVar("P")


class WorkerPlan(Generic[P]):
    """What every task of a pass reads in a worker process: set once there by the pass's `init_worker`
    (`ordered_map`'s initializer, or a Beam DoFn's setup), so the plan is not sent with each task."""

    def __init__(self, task: str) -> None:
        self._task = task
        self._plan: Optional[P] = None

    def set(self, plan: P) -> None:
        self._plan = plan

    def get(self) -> P:
        if self._plan is None:
            raise RuntimeError(f"{self._task} ran in a process where init_worker(plan) was not called; call it first")
        return self._plan


def ordered_map(
    fn: Callable[[T], R], tasks: Iterable[T], num_workers: int, initializer: Callable[[Any], None], plan: Any
) -> Iterator[Tuple[T, R]]:
    """Yields (task, fn(task)) for every task in order; `initializer(plan)` runs once in each worker first.

    With num_workers == 1 everything runs in this process (no pickling, easiest to debug).
    """
    if num_workers <= 1:
        initializer(plan)
        for task in tasks:
            yield task, fn(task)
        return
    pool = ProcessPoolExecutor(
        num_workers, mp_context=multiprocessing.get_context("fork"), initializer=_start, initargs=(initializer, plan)
    )
    try:
        pending: collections.deque = collections.deque()
        for task in tasks:
            pending.append((task, pool.submit(fn, task)))
            if len(pending) >= 2 * num_workers:
                done, future = pending.popleft()
                yield done, future.result()
        while pending:
            done, future = pending.popleft()
            yield done, future.result()
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def _start(initializer: Callable[[Any], None], plan: Any) -> None:
    """A worker's start: the objects it inherits (TensorFlow's among them) are frozen out of the cyclic garbage
    collector, whose full collections would otherwise walk them all again and again as chunks allocate."""
    gc.freeze()
    initializer(plan)
