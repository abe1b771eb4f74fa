"""A Vertex AI pipeline run's task details, as the run-cost record and the failure alert read them."""

from __future__ import annotations

from typing import Any

WARNING_KEY = "warning"  # a stage's output artifact whose metadata holds a non-empty "warning" warns the run


def read_task_details(pipeline_job: str) -> list[dict[str, Any]]:
    """The task details of the Vertex AI PipelineJob `pipeline_job` ("projects/P/locations/L/pipelineJobs/ID") in
    the REST JSON form: {"taskName", "state", "startTime", "endTime", "error"} (times ISO 8601, "" when unset), read
    with the environment's credentials (the pipeline's service account), and "warnings": the non-empty "warning"
    of the task's output artifacts' metadata (`WARNING_KEY`, e.g. a skew check that warned)."""
    # Lazy: only the run-cost and exit tasks on Vertex AI read a PipelineJob; the CLI and local runs never import it.
    from google.cloud import aiplatform

    job = aiplatform.PipelineJob.get(pipeline_job, location=pipeline_job.split("/")[3])
    return [
        {
            "taskName": task.task_name,
            "state": task.state.name,
            "startTime": task.start_time.isoformat() if task.start_time else "",
            "endTime": task.end_time.isoformat() if task.end_time else "",
            "error": task.error.message,
            "warnings": _warnings(task),
        }
        for task in job.task_details
    ]


def _warnings(task: Any) -> list[str]:
    """The "warning" entries of a task's output artifacts' metadata (proto-plus gives each Struct as a mapping)."""
    found = []
    for listed in task.outputs.values():
        for artifact in listed.artifacts:
            warning = (artifact.metadata or {}).get(WARNING_KEY)
            if isinstance(warning, str) and warning:
                found.append(warning)
    return found
