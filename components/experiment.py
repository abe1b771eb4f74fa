"""Experiment stage (Vertex AI only): the pipeline run joins a Vertex AI Experiment.

A thin adapter over `estimator_lib.cloud.experiments.join_experiment`. It runs inside the pipeline so that the runs a
schedule starts join the experiment too (a schedule's API has no experiment field).
"""


def join_experiment(experiment: str, project: str, location: str, pipeline_job: str) -> str:
    """Makes this pipeline run a run of the Vertex AI Experiment `experiment` (created the first time).

    Args:
      experiment: the experiment's name.
      project, location: the pipeline's project and region (Vertex AI fills them in at run time).
      pipeline_job: this run's resource name (Vertex AI fills it in at run time).

    Returns:
      The experiment's resource name.
    """
    from estimator_lib.cloud import experiments

    return experiments.join_experiment(experiment, pipeline_job, project, location)
