"""Prepare stage: raw rows (CSV or JSON Lines, local or gs://) -> TFRecord splits, schema and manifest, prepared
against the published model the run continues and validated against its data before anything trains.

A thin adapter over `estimator_lib.data.retrain.prepare_continuing`, its passes in-process or on Apache Beam
(engine="beam": the same output). Its cache key on Vertex AI is its parameters:
the data's content token (`data_version`) and the reference model, both resolved by the resolve stage, so a
changed file is prepared again. Run again on the same files (same versions) and settings, it reuses its
finished output (`components.records`).
"""

from kfp.dsl import Dataset, Markdown, Output


def prepare_data(
    data: str,
    label: str,
    task: str,
    key_column: str,
    eval_fraction: float,
    options: dict,
    data_version: str,
    reference: str,
    validation_config: dict,
    dataset: Output[Dataset],
    validation: Output[Markdown],
    engine: str = "inprocess",
    beam_options: dict = {},  # noqa: B006 - KFP reads the default; never mutated
):
    """Prepares `data` for training and evaluation.

    Args:
      data: CSV/JSONL file or glob (local or gs://), or "embedded:penguins" for the shipped Palmer Penguins.
      label: the label column.
      task: "classification", "regression" or "auto" (inferred from the label's values).
      key_column: a column holding unique row keys, or "" to derive keys from row contents.
      eval_fraction: share of rows in the eval split (a row's split follows from a hash of its key, so
        it is stable across runs and data growth).
      options: other `PrepareConfig` fields ({"num_shards": 4, "bad_rows": "quarantine"}).
      data_version: the data's content token (the resolve stage's); part of the cache key only.
      reference: the published model whose schema is continued and whose data the new data is checked against
        (a SavedModel directory), or "none": the schema is inferred and nothing is checked.
      validation_config: a `ValidationConfig` as JSON ({} for the defaults).
      dataset: output; the prepared directory (train/, eval/, schema.json, profile.json, manifest.json).
      validation: output; the data validation report (Markdown).
      engine: "inprocess" (this machine's cores) or "beam" (Apache Beam: Dataflow on Vertex AI); the output is
        the same, so a finished output is reused whichever engine made it.
      beam_options: with engine="beam", a `BeamConfig` ({"runner": "DataflowRunner", "region": ...}).
    """
    import contextlib

    from components import adapter, artifacts, records
    from estimator_lib.config.beam import BEAM, BeamConfig, check_engine
    from estimator_lib.data import retrain

    check_engine(engine)

    config = adapter.prepare_config(data, label, task, key_column, eval_fraction, options)
    checks = adapter.validation_config(validation_config)
    source = adapter.model_or_none(reference)
    inputs = {
        "config": config.to_dict(),
        "files": records.file_versions(config.data),
        "reference": source,
        "validation": checks.to_dict(),
    }
    record = records.StageRecord("prepare", {"dataset": dataset, "validation": validation}, inputs)
    if record.restore():
        return
    record.begin()
    if engine == BEAM:
        from estimator_lib.data import beam  # Apache Beam takes about 1 s to import: only this engine does

        passes = beam.beam_passes(BeamConfig.from_dict(adapter.typed(BeamConfig, beam_options)))
    else:
        passes = contextlib.nullcontext()  # None: this host's worker processes
    with passes as chosen:
        continued = retrain.prepare_continuing(config, dataset.uri, source, checks, validation.uri, chosen)
    artifacts.describe_dataset(dataset, continued.prepared)
    artifacts.describe_validation(dataset, validation, continued.report)
    record.finish(sources={"files": artifacts.data_source(config.data, continued.prepared)})
