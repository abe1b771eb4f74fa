"""Webhook alert (Vertex AI only): the exit handler's task posts one JSON message when a run did not succeed, or
succeeded with a stage's warning (a skew check that warned).

A thin adapter over `estimator_lib.cloud.alerts.alert_vertex_run`. The pipeline wraps its whole DAG in a
`dsl.ExitHandler` with this task (`pipelines.pipeline`), so it runs however the run ends, and Vertex AI hands it
the run's final status. It sends nothing for a run that succeeded without a warning, and it never fails: an
alert that cannot be delivered is logged (the webhook's host only: its URL may hold a token).
"""

from kfp.dsl import PipelineTaskFinalStatus


def notify_webhook(webhook: str, pipeline: str, stages: dict, status: PipelineTaskFinalStatus):
    """Posts the alert of this run to `webhook` (`alerts.alert_vertex_run`).

    Args:
      webhook: the http(s) URL (`AlertConfig.webhook`), fixed when the pipeline was compiled.
      pipeline: the pipeline's name.
      stages: KFP task name -> stage ("train-model" -> "train"), to name the stage that failed.
      status: the run's final status (Vertex AI fills it in).
    """
    from estimator_lib.cloud import alerts

    final = {
        "state": status.state,
        "pipeline_job_resource_name": status.pipeline_job_resource_name,
        "error_message": status.error_message or "",
    }
    alerts.alert_vertex_run(webhook, pipeline, stages, final)
