"""Batch prediction stage: a thin adapter over `estimator_lib.predict.batch_predict` (TPU on Vertex AI)."""

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
      data: "eval", "train" or "test" (a prepared split), or a URI of rows to score.
      tpu: where this stage runs (see train_model).
      predictions: output; JSON Lines shards and a manifest.
    """
    from components import _io
    from estimator_lib import predict, prepare

    prepared = prepare.load_prepared(dataset.uri)
    job = _io.stage_job(model.uri, tpu)
    files, count = _io.prediction_source(data, prepared)
    result = predict.batch_predict(job, prepared.schema, model.uri, files, predictions.uri, num_examples=count)
    _io.describe_predictions(predictions, result)
