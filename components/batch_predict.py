"""Batch prediction stage: a thin adapter over `estimator_lib.predict.batch_predict` for prepared TFRecords, or
`predict_raw` for raw CSV / JSON Lines rows (TPU on Vertex AI)."""

from kfp.dsl import Dataset, Input, Model, Output


def batch_predict(
    dataset: Input[Dataset],
    model: Input[Model],
    data: str,
    tpu: dict,
    predictions: Output[Dataset],
):
    """Scores a dataset with the trained model's checkpoint.

    Args:
      dataset: the prepared dataset (its schema, and its splits when `data` names one).
      model: the trained model.
      data: "eval", "train" or "test" (a prepared split); a URI or glob of CSV / JSON Lines rows (.csv,
        .jsonl, .json, .ndjson; the label is optional), scored through the prepared schema; or prepared
        TFRecords (.tfrecord, .tfrecords, or a directory of them).
      tpu: where this stage runs (see train_model).
      predictions: output; JSON Lines shards and a manifest.
    """
    from components import _io
    from estimator_lib import predict, prepare

    prepared = prepare.load_prepared(dataset.uri)
    job = _io.stage_job(model.uri, tpu)
    source = _io.prediction_source(data, prepared)
    if source.raw:
        rows_uri = _io.encoded_rows_uri(predictions.uri)
        options = _io.scoring_options(prepared)
        result = predict.predict_raw(
            job, prepared.schema, model.uri, source.uri, predictions.uri, staging_dir=rows_uri, **options
        )
    else:
        result = predict.batch_predict(
            job, prepared.schema, model.uri, source.uri, predictions.uri, num_examples=source.count
        )
    _io.describe_predictions(predictions, result)
