"""Prepare stage: raw rows (CSV or JSON Lines, local or gs://) -> TFRecord splits, schema and manifest.

A thin adapter over `estimator_lib.data.prepare.prepare`. Run again on the same files (same versions) and
settings, it reuses its finished output (`components.records`).
"""

from kfp.dsl import Dataset, Output


def prepare_data(
    data: str,
    label: str,
    task: str,
    key_column: str,
    eval_fraction: float,
    options: dict,
    dataset: Output[Dataset],
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
      dataset: output; the prepared directory (train/, eval/, schema.json, manifest.json).
    """
    from components import adapter, artifacts, records
    from estimator_lib.data import prepare

    config = adapter.prepare_config(data, label, task, key_column, eval_fraction, options)
    inputs = {"config": config.to_dict(), "files": records.file_versions(config.data)}
    record = records.StageRecord("prepare", {"dataset": dataset}, inputs)
    if record.restore():
        return
    record.begin()
    result = prepare.prepare(config, dataset.uri)
    artifacts.describe_dataset(dataset, result)
    record.finish(sources={"files": artifacts.data_source(config.data, result)})
