"""The two tasks around a Vertex AI hyperparameter tuning job over the train stage (`pipelines.tuning_job`).

`trial_pool` gives the job its worker pool with the prepared dataset's URI (known only when the pipeline runs);
`best_train_spec` reads the finished job's trials and returns the train spec with the best trial's values, which
the train stage then trains, so the winner goes on through evaluate, blessing and release.
"""

from kfp.dsl import Artifact, Dataset, Input, Output


def trial_pool(dataset: Input[Dataset], spec: str, tpu: str, space: str, pool: str) -> list:
    """The tuning job's worker pool specs: `pool` (one worker pool spec as JSON text, running
    `python -m pipelines.tune_trial`) with the trial's flags: the dataset's URI, the train spec, where it runs and
    the space. Vertex AI appends each trial's values to these flags."""
    import json

    worker = json.loads(pool)
    worker["container_spec"]["args"] = ["--dataset", dataset.uri, "--spec", spec, "--tpu", tpu, "--space", space]
    return [worker]


def best_train_spec(gcp_resources: str, spec: str, space: str, trials: Output[Artifact]) -> str:
    """The train spec with the best trial's values (`estimator_lib.config.tuning.best_trial`).

    Args:
      gcp_resources: the tuning job task's output, naming the HyperparameterTuningJob.
      spec: the pipeline's train spec (a `TrainSpec` as JSON text).
      space: the search space as JSON text.
      trials: output; trials.json, every trial of the job as Vertex AI reports it, and the winner's id.
    """
    import json

    from google.cloud import aiplatform
    from google.protobuf import json_format

    from estimator_lib import storage
    from estimator_lib.config.stages import TrainSpec
    from estimator_lib.config.tuning import best_trial, load_space, trial_values

    resource = json.loads(gcp_resources)["resources"][0]["resourceUri"]
    job = aiplatform.HyperparameterTuningJob.get(resource.split("/v1/", 1)[-1])
    found = [json_format.MessageToDict(t._pb, preserving_proto_field_name=True) for t in job.trials]
    searched = load_space("the tuning job's space", space)
    winner = best_trial(found, searched)
    tuned = TrainSpec(searched.trial_job(TrainSpec.from_json(spec).job, trial_values(winner)))
    record = {"job": job.resource_name, "metric": searched.metric, "direction": searched.direction}
    record.update(winner=winner.get("id"), trials=found)
    storage.write_text(storage.join(trials.uri, "trials.json"), json.dumps(record, indent=2, sort_keys=True))
    trials.metadata.update({"job": job.resource_name, "winner": winner.get("id"), "values": trial_values(winner)})
    return tuned.to_json(indent=None)
