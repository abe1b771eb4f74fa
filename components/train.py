"""Train stage: a thin adapter over `estimator_lib.estimator.train_prepared` (TPUEstimator; Cloud TPU on Vertex AI).

The model directory TPUEstimator writes checkpoints to is the Model artifact's `uri` (gs:// on Vertex AI:
a TPU reads and writes Cloud Storage directly, never the /gcs/ FUSE view). A rerun resumes from the newest
checkpoint there: a local run resumed into its run folder, or a task Vertex AI retries after a Spot TPU was
preempted (`pipelines.retry`), trains on from the interrupted attempt's checkpoint (`components.records`), on the
same batches an uninterrupted run would have seen (`estimator_lib.model.inputs.train_input_fn_builder`). A retry
given a fresh model directory first copies in the checkpoints of the run's interrupted attempt on the same inputs
(`StageRecord.adopt_interrupted`). A blessing metric the data's task does not have (the task inferred by prepare)
is refused before anything trains.
"""

from kfp.dsl import Dataset, Input, Model, Output


def train_model(
    dataset: Input[Dataset],
    spec: str,
    tpu: str,
    warm_start: str,
    publish_root: str,
    blessing_metrics: str,
    model: Output[Model],
):
    """Trains a model on the prepared train split.

    Args:
      dataset: the prepared dataset.
      spec: a `TrainSpec` as JSON text (`RunConfig.stage_specs()`): the job config.
      tpu: where this stage runs, as JSON text: {"use_tpu": true, "tpu_name": "local", "num_cores": 8} on a
        Cloud TPU VM, {"use_tpu": false} on CPU.
      warm_start: "none", "latest" (the last model published under `publish_root`; none yet means a cold
        start), a publish root or a SavedModel directory to initialise the weights from.
      publish_root: where blessed models are published.
      blessing_metrics: the metrics the run's blessing names, a JSON list (the resolve stage's): a built-in
        family's must be metrics of the data's task.
      model: output; the checkpoint directory, with job_config.json beside the checkpoints.
    """
    import json

    from components import adapter, artifacts, records
    from estimator_lib import engine, release, storage
    from estimator_lib.config.stages import TrainSpec
    from estimator_lib.estimator import PREFLIGHT_FILE

    warm_from = release.resolve_model(warm_start, publish_root)
    job = adapter.training_job(adapter.decode_spec(TrainSpec, spec), tpu, warm_start_from=warm_from)
    source = engine.open_dataset(dataset.uri)  # the built-in families' rows or a user model_fn's records
    source.check_blessing_metrics(json.loads(blessing_metrics))  # before any work
    job = source.for_data(job)  # resolved once: job_config.json records what training used, later stages read it
    record = records.StageRecord(
        "train",
        {"model": model},
        {"dataset": records.fingerprint_of(dataset), "job": job.to_dict(), **engine.code_record(job)},
        {"dataset": dataset},
    )
    if record.restore():
        return
    record.adopt_interrupted()  # a retry in fresh directories continues this run's attempt on the same inputs
    record.begin()  # keeps the checkpoints of an interrupted attempt on the same inputs: training continues
    adapter.write_job_config(model.uri, job)
    result = source.train(job, model.uri, adapter.progress_seconds())
    adapter.copy_summaries_to_tensorboard(model.uri, "train")
    artifacts.describe_model(model, result, job, warm_from)
    preflight = storage.join(model.uri, PREFLIGHT_FILE)
    if model.metadata["strict"] and storage.exists(preflight):  # strict mode's preflight, beside its report
        found = json.loads(storage.read_text(preflight))
        model.metadata["strict"]["preflight"] = {
            **{k: found[k] for k in ("tpu_type", "verdict", "line")},
            "uri": preflight,
        }
    record.finish()
