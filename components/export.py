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
    from components import adapter, artifacts, records, user_model
    from estimator_lib import release
    from estimator_lib.data import prepare
    from estimator_lib.model.user import stages as user_stages

    job = adapter.stage_job(model.uri, tpu)
    inputs = {"dataset": records.fingerprint_of(dataset), "model": records.fingerprint_of(model), "job": job.to_dict()}
    inputs.update(user_model.code_record(job))  # the model_fn's code builds the exported graph
    record = records.StageRecord("export", {"exported": exported}, inputs, {"dataset": dataset, "model": model})
    if record.restore():
        return
    record.begin()
    if job.model.model_fn:  # a user's own model_fn
        export = user_stages.export(job, user_model.load(dataset.uri), model.uri, exported.uri)
        artifacts.describe_export(exported, export)
        record.finish()
        return
    prepared = prepare.load_prepared(dataset.uri)
    export = release.export_verified(
        job,
        prepared.schema,
        model.uri,
        exported.uri,
        verify_files=prepared.files("eval"),
        data_profile=prepared.profile(),
    )
    artifacts.describe_export(exported, export)
    record.finish()
