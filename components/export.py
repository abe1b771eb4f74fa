"""Export stage: SavedModel export and verification. It never publishes: the release stage does, last.

A thin adapter over `estimator_lib.release.export_verified`. Export runs on the host CPU everywhere: one
SavedModel holds the CPU (`serve`) and the TPU (`serve,tpu`) meta graphs without needing a TPU.
"""

from kfp.dsl import Dataset, Input, Model, Output


def export_model(
    dataset: Input[Dataset],
    model: Input[Model],
    tpu: str,
    exported: Output[Model],
):
    """Exports the trained model and verifies the export.

    Args:
      dataset: the prepared dataset (its schema; its eval rows verify the export).
      model: the trained model.
      tpu: where this stage runs, as JSON text ({"use_tpu": false}: export needs no TPU).
      exported: output; the verified SavedModel (tag sets, signatures).
    """
    from components import adapter, artifacts, records
    from estimator_lib import engine

    job = adapter.stage_job(model.uri, tpu)
    inputs = {"dataset": records.fingerprint_of(dataset), "model": records.fingerprint_of(model), "job": job.to_dict()}
    inputs.update(engine.code_record(job))  # the model_fn's code builds the exported graph
    record = records.StageRecord("export", {"exported": exported}, inputs, {"dataset": dataset, "model": model})
    if record.restore():
        return
    record.begin()
    export = engine.open_dataset(dataset.uri).export(job, model.uri, exported.uri)
    artifacts.describe_export(exported, export)
    record.finish()
