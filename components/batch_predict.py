"""Batch prediction stage: a thin adapter over `estimator_lib.predict.score` (TPU on Vertex AI), or over
`estimator_lib.predict.beam.score` with engine="beam" (Dataflow)."""

from kfp.dsl import Dataset, Input, Model, Output


def batch_predict(
    dataset: Input[Dataset],
    model: Input[Model],
    data: str,
    tpu: dict,
    predictions: Output[Dataset],
    engine: str = "inprocess",
    beam_options: dict = {},  # noqa: B006 - KFP reads the default; never mutated
):
    """Scores a dataset with the trained model: its checkpoint in-process, or its exported CPU SavedModel on
    Apache Beam.

    Args:
      dataset: the prepared dataset (its schema, and its splits when `data` names one).
      model: the trained model.
      data: "eval", "train" or "test" (a prepared split); a URI or glob of CSV / JSON Lines rows (.csv,
        .jsonl, .json, .ndjson; the label is optional), scored through the prepared schema; or prepared
        TFRecords (.tfrecord, .tfrecords, or a directory of them).
      tpu: where this stage runs (see train_model).
      predictions: output; JSON Lines shards and a manifest.
      engine: "inprocess" (`predict.score`, the checkpoint) or "beam" (`predict.beam.score`: the CPU SavedModel
        exported beside the predictions, scored by RunInference; Dataflow on Vertex AI).
      beam_options: with engine="beam", a `BeamConfig` ({"runner": "DataflowRunner", "region": ...}).
    """
    from components import _io
    from estimator_lib import predict
    from estimator_lib.config.beam import BEAM, BeamConfig, check_engine
    from estimator_lib.data import prepare

    check_engine(engine)
    prepared = prepare.load_prepared(dataset.uri)
    job = _io.stage_job(model.uri, tpu)
    if engine == BEAM:
        from estimator_lib.predict import beam

        config = BeamConfig.from_dict(_io.typed(BeamConfig, beam_options))
        result = beam.score(job, prepared, model.uri, data, predictions.uri, config)
    else:
        result = predict.score(job, prepared, model.uri, data, predictions.uri)
    _io.describe_predictions(predictions, result)
