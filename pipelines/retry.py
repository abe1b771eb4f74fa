"""The retry policy every task of the pipeline gets, and the local runner's way of honouring it.

A Spot TPU VM can be preempted at any time, and any task can meet a passing failure (a quota, a network error).
`RetryPolicy` is set on every task when the pipeline is built (`PipelineTask.set_retry`), so the compiled spec
carries it (`retryPolicy` of each task): Vertex AI runs a failed task again, up to `retries` times, after
`backoff_seconds`, then `backoff_factor` times longer each time. A retried stage continues where its failed
attempt stopped: the training stage from its last checkpoint (`components.records`).

KFP 2.13's local runner reads no retry policy from the spec. `honour_retry_policies` makes it do so: it runs a
failed task again as the compiled policy says, with the same command, so a local retry is the one a task gets
on Vertex AI when its output directories are kept.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Iterator, Mapping
from typing import Any, Callable

from google.protobuf import json_format
from kfp.local import status, task_dispatcher

# Vertex AI waits at most an hour between attempts (`RetryPolicy.backoff_max_duration`, capped there by KFP).
MAX_BACKOFF_SECONDS = 3600
# More than this many retries on one task is a failure that retrying does not fix.
MAX_RETRIES = 10
# What a Vertex AI task gets unless --retries says otherwise: two preemptions of a Spot VM in one run.
VERTEX_RETRIES = 2
VERTEX_BACKOFF_SECONDS = 60


@dataclasses.dataclass(frozen=True)
class RetryPolicy:
    """How often, and after how long, a failed task runs again.

    Attributes:
      retries: attempts after the first (0: a failed task fails the run).
      backoff_seconds: the wait before the first retry.
      backoff_factor: each later wait is this many times the one before.
      max_backoff_seconds: no wait is longer (Vertex AI's `backoff_max_duration`).
    """

    retries: int = 0
    backoff_seconds: int = 0
    backoff_factor: float = 2.0
    max_backoff_seconds: int = MAX_BACKOFF_SECONDS

    def __post_init__(self) -> None:
        if not isinstance(self.retries, int) or not 0 <= self.retries <= MAX_RETRIES:
            raise ValueError(
                f"--retries {self.retries!r} must be a whole number from 0 to {MAX_RETRIES}: the times a failed "
                f"task runs again (0: never)"
            )
        if not isinstance(self.backoff_seconds, int) or not 0 <= self.backoff_seconds <= self.max_backoff_seconds:
            raise ValueError(
                f"--retry-backoff {self.backoff_seconds!r} must be whole seconds from 0 to "
                f"{self.max_backoff_seconds} (Vertex AI waits at most an hour between attempts)"
            )
        if self.backoff_factor < 1:
            raise ValueError(f"retry backoff_factor {self.backoff_factor!r} must be at least 1 (1: equal waits)")
        if not 0 <= self.max_backoff_seconds <= MAX_BACKOFF_SECONDS:
            raise ValueError(
                f"retry max_backoff_seconds {self.max_backoff_seconds!r} must be from 0 to {MAX_BACKOFF_SECONDS}"
            )

    def apply(self, task: Any) -> Any:
        """Sets this policy on a `PipelineTask` (none when `retries` is 0: the spec then has no retryPolicy)."""
        if not self.retries:
            return task
        return task.set_retry(
            num_retries=self.retries,
            backoff_duration=f"{self.backoff_seconds}s",
            backoff_factor=self.backoff_factor,
            backoff_max_duration=f"{self.max_backoff_seconds}s",
        )

    def wait(self, retry: int) -> float:
        """Seconds to wait before retry number `retry` (1 for the first)."""
        return float(min(self.backoff_seconds * self.backoff_factor ** (retry - 1), self.max_backoff_seconds))

    @classmethod
    def from_spec(cls, retry_policy: Mapping[str, Any]) -> RetryPolicy:
        """The policy of a compiled task's `retryPolicy` ({"maxRetryCount": 2, "backoffDuration": "60s", ...})."""
        return cls(
            retries=int(retry_policy.get("maxRetryCount", 0)),
            backoff_seconds=_seconds(retry_policy.get("backoffDuration", "0s")),
            backoff_factor=float(retry_policy.get("backoffFactor", 2.0)),
            max_backoff_seconds=_seconds(retry_policy.get("backoffMaxDuration", f"{MAX_BACKOFF_SECONDS}s")),
        )


NO_RETRIES = RetryPolicy()


def vertex_policy(retries: int | None, backoff_seconds: int | None) -> RetryPolicy:
    """The policy of a compiled pipeline: --retries and --retry-backoff, or Vertex AI's defaults here."""
    return RetryPolicy(
        retries=VERTEX_RETRIES if retries is None else retries,
        backoff_seconds=VERTEX_BACKOFF_SECONDS if backoff_seconds is None else backoff_seconds,
    )


def _seconds(duration: str) -> int:
    """Whole seconds of a protobuf duration ("60s", "1.5s")."""
    return int(float(str(duration).rstrip("s")))


def task_policies(pipeline_spec: Any) -> dict[str, RetryPolicy]:
    """{component name: retry policy} of the root DAG's tasks of a compiled `PipelineSpec` (proto)."""
    policies = {}
    for task in pipeline_spec.root.dag.tasks.values():
        spec = json_format.MessageToDict(task.retry_policy) if task.HasField("retry_policy") else {}
        policies[task.component_ref.name] = RetryPolicy.from_spec(spec)
    return policies


@contextlib.contextmanager
def honour_retry_policies(pipeline: Any, sleep: Callable[[float], None] = time.sleep) -> Iterator[None]:
    """Makes the KFP local runner retry the tasks of `pipeline` (a `@dsl.pipeline` function) as its compiled
    spec says: a task that fails runs again, with the same command and output directories, after the policy's
    wait, until it succeeds or its retries are spent.

    KFP 2.13 runs each task with `task_dispatcher.run_single_task_implementation` and offers no setting for
    retries; this wraps that function while the context is open.
    """
    policies = task_policies(pipeline.pipeline_spec)
    original = task_dispatcher.run_single_task_implementation

    def run(*args: Any, **kwargs: Any) -> tuple[dict, status.Status]:
        policy = policies.get(kwargs.get("component_name", ""), NO_RETRIES)
        outputs, outcome = original(*args, **kwargs)
        for retry in range(1, policy.retries + 1):
            if outcome != status.Status.FAILURE:
                break
            print(f"retry {retry}/{policy.retries} of {kwargs.get('component_name')}", flush=True)
            sleep(policy.wait(retry))
            outputs, outcome = original(*args, **kwargs)
        return outputs, outcome

    task_dispatcher.run_single_task_implementation = run
    try:
        yield
    finally:
        task_dispatcher.run_single_task_implementation = original
