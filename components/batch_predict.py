"""Batch prediction stage: a thin adapter over `estimator_lib.predict.score` (TPU on Vertex AI)."""

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
    from components import adapter, artifacts
    from estimator_lib import predict
    from estimator_lib.data import prepare

    prepared = prepare.load_prepared(dataset.uri)
    result = predict.score(adapter.stage_job(model.uri, tpu), prepared, model.uri, data, predictions.uri)
    artifacts.describe_predictions(predictions, result)
