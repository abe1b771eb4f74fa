"""Prepare stage: raw rows (CSV or JSON Lines, local or gs://) -> TFRecord splits, schema and manifest, prepared
against the published model the run continues and validated against its data before anything trains; or, for
a user's own model_fn, their TFRecords checked against its feature spec and split
(`estimator_lib.model.user.prepare`).

A thin adapter over `estimator_lib.data.retrain.prepare_continuing`, its passes in-process or on Apache Beam
(engine="beam": the same output). Its cache key on Vertex AI is its parameters: the data's content token
(`data_version`) and the reference model, both resolved by the resolve stage, so a changed file is prepared again.
Its stage record (`components.records`) is keyed by the same token: run again on the same data and settings, it
reuses its finished output without reading the data again.
"""

from kfp.dsl import Dataset, Markdown, Output


def prepare_data(
    spec: str,
    data_version: str,
    reference: str,
    dataset: Output[Dataset],
    validation: Output[Markdown],
):
    """Prepares the spec's data for training and evaluation.

    Args:
      spec: a `PrepareSpec` as JSON text (`RunConfig.stage_specs()`): the `PrepareConfig` (data, label, task,
        splits, ...), the `ValidationConfig`, and the engine ("inprocess": this machine's cores; "beam": Apache
        Beam, Dataflow on Vertex AI; the output is the same, so a finished output is reused whichever engine
        made it) with its `BeamConfig`.
      data_version: the data's content token (the resolve stage's `fingerprints.content_token` of what it reads):
        the data's identity in the cache key and in the stage record.
      reference: the published model whose schema is continued and whose data the new data is checked against
        (a SavedModel directory), or "none": the schema is inferred and nothing is checked.
      dataset: output; the prepared directory (train/, eval/, schema.json, profile.json, manifest.json).
      validation: output; the data validation report (Markdown).
    """
    from components import adapter, artifacts, records
    from estimator_lib import engine
    from estimator_lib.config.stages import PrepareSpec

    given = adapter.decode_spec(PrepareSpec, spec)
    config = adapter.prepare_config(given)
    source = adapter.model_or_none(reference)
    # The spec the stage ran, recorded in its manifest; the engine is not: it never changes the output.
    inputs = {
        "prepare": given.prepare.to_dict(),
        "validation": given.validation.to_dict(),
        "files": data_version,  # the manifest's "files" is the source `finish` records: the files and their sha256
        "reference": source,
    }
    record = records.StageRecord("prepare", {"dataset": dataset, "validation": validation}, inputs)
    if record.restore():
        return
    record.begin()
    done = engine.prepare(given, config, dataset.uri, source, validation.uri)
    artifacts.describe_validation(dataset, validation, done.report)  # first: it writes into the Dataset
    artifacts.describe_dataset(dataset, done.source)
    record.finish(sources={"files": artifacts.data_source(done.read, done.source)})
