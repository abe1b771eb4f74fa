"""A pipeline run joins a Vertex AI Experiment, so the metrics of many runs (scheduled ones too) compare there.

Vertex AI keeps an Experiment as a metadata context (schema `system.Experiment`); a pipeline run belongs to it
when the run's own context (`system.PipelineRun`) is a child of it. `PipelineJob.submit(experiment=...)` makes
that link when a run is submitted, but a schedule's API (`Schedule.create_pipeline_job_request`) carries no
experiment, so the runs a schedule starts would stay outside. `join_experiment` makes the same link from inside
a run, with the same google-cloud-aiplatform code `submit(experiment=...)` runs (the experiment is created the
first time), so submitted and scheduled runs join the same way.
"""

from __future__ import annotations

from typing import Any

from google.cloud import aiplatform


def join_experiment(experiment: str, pipeline_job: str, project: str, location: str, credentials: Any = None) -> str:
    """Makes the pipeline run `pipeline_job` a run of the Vertex AI Experiment `experiment`.

    Args:
      experiment: the experiment's name (created when it does not exist yet).
      pipeline_job: the run's resource name, "projects/P/locations/L/pipelineJobs/ID".
      project, location: where the experiment lives (the run's project and region).
      credentials: google-auth credentials; None uses the environment's (the pipeline's service account).

    Returns:
      The experiment's resource name.
    """
    job = aiplatform.PipelineJob.get(pipeline_job, project=project, location=location, credentials=credentials)
    # The association `PipelineJob.submit(experiment=...)` makes once the run exists: get or create the
    # experiment's context, then add the run's context to it as a child.
    job._associate_to_experiment(experiment)  # noqa: SLF001 (the SDK offers no public call for a running job)
    return f"projects/{project}/locations/{location}/metadataStores/default/contexts/{experiment}"
