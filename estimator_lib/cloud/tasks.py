"""A Vertex AI pipeline run's task details, as the run-cost record and the failure alert read them."""

from __future__ import annotations

from typing import Any


def read_task_details(pipeline_job: str) -> list[dict[str, Any]]:
    """The task details of the Vertex AI PipelineJob `pipeline_job` ("projects/P/locations/L/pipelineJobs/ID") in
    the REST JSON form: {"taskName", "state", "startTime", "endTime", "error"} (times ISO 8601, "" when unset), read
    with the environment's credentials (the pipeline's service account)."""
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
        }
        for task in job.task_details
    ]
