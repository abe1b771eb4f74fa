"""Prepare stage: raw rows (CSV or JSON Lines, local or gs://) -> TFRecord splits, schema and manifest.

A thin adapter over `estimator_lib.data.prepare.prepare` (in-process or on Apache Beam). The body is shipped to the worker as source, so its imports
live inside it; the project image (or, locally, the calling environment) provides the packages.
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
      dataset: output; the prepared directory (train/, eval/, schema.json, manifest.json).
      engine: "inprocess" (this machine's cores) or "beam" (Apache Beam: Dataflow on Vertex AI); the output is
        the same.
      beam_options: with engine="beam", a `BeamConfig` ({"runner": "DataflowRunner", "region": ...}).
    """
    from components import _io
    from estimator_lib.config.beam import BEAM, BeamConfig, check_engine
    from estimator_lib.data import prepare

    check_engine(engine)
    config = _io.prepare_config(data, label, task, key_column, eval_fraction, options)
    if engine == BEAM:
        from estimator_lib.data import beam

        result = beam.prepare_on_beam(config, dataset.uri, BeamConfig.from_dict(_io.typed(BeamConfig, beam_options)))
    else:
        result = prepare.prepare(config, dataset.uri)
    _io.describe_dataset(dataset, result)
