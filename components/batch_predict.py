"""Batch prediction stage: a thin adapter over `estimator_lib.predict.score` (TPU on Vertex AI), or over
`estimator_lib.predict.beam.score` with engine="beam" (Dataflow).

Run again on the same inputs (dataset, model, the same versions of the files it scores, the engine) it reuses
its finished predictions (`components.records`).
"""

from kfp.dsl import Dataset, Input, Model, Output


def batch_predict(
    dataset: Input[Dataset],
    model: Input[Model],
    spec: str,
    tpu: str,
    eval_predictions: str,
    predictions: Output[Dataset],
):
    """Scores a dataset with the trained model: its checkpoint in-process, or its exported CPU SavedModel on
    Apache Beam.

    Args:
      dataset: the prepared dataset (its schema, and its splits when `data` names one).
      model: the trained model.
      spec: a `PredictSpec` as JSON text (`RunConfig.stage_specs()`): the rows to score, "eval", "train" or
        "test" (a prepared split), a URI or glob of CSV / JSON Lines rows (.csv, .jsonl, .json, .ndjson; the
        label is optional), scored through the prepared schema, or prepared TFRecords (.tfrecord, .tfrecords, or
        a directory of them); and the engine, "inprocess" (`predict.score`, the checkpoint) or "beam"
        (`predict.beam.score`: the CPU SavedModel exported beside the predictions, scored by RunInference;
        Dataflow on Vertex AI) with its `BeamConfig`; and the skew check of the rows against the training data
        (`predict.skew`, on either engine: "block" fails here before any prediction is published), its
        predictions' part against the eval rows' predictions.
      tpu: where this stage runs, as JSON text (see train_model).
      eval_predictions: what the model predicted for the eval rows, as the evaluate stage returns it (JSON text,
        `PredictionProfile.to_parameter`; "": none recorded, the predictions are not compared): a parameter, so
        the stage stays cached while it is the same.
      predictions: output; JSON Lines shards and a manifest. Each row names its input: "file" and "line" for
        CSV / JSON Lines rows and prepared splits, "file" and "record" for TFRecords (docs/predict_export.md);
        skew.json beside them (its verdict and worst features in the metadata's "skew").
    """
    from components import adapter, artifacts, records
    from estimator_lib import engine, storage
    from estimator_lib.config.run import SPLIT, prediction_kind
    from estimator_lib.config.skew import OFF, SkewConfig
    from estimator_lib.config.stages import PredictSpec
    from estimator_lib.predict.predicted import PredictionProfile

    given = adapter.decode_spec(PredictSpec, spec)
    data = given.data
    source = engine.open_dataset(dataset.uri)
    profile = PredictionProfile.from_parameter(eval_predictions, source.facts()["classes"])
    predicted = profile.to_dict() if profile is not None else None
    job = adapter.stage_job(model.uri, tpu)
    inputs = {
        "dataset": records.fingerprint_of(dataset),
        "model": records.fingerprint_of(model),
        "job": job.to_dict(),
        # a prepared split is in the dataset's fingerprint; files (or a directory's files) by their versions
        "data": data if prediction_kind(data) == SPLIT else records.file_versions([data, storage.join(data, "*")]),
        # a built-in family's engines agree to 1e-5 (beam scores the exported SavedModel); a user model's byte for byte
        "engine": given.engine,
    }
    inputs.update(engine.code_record(job))  # the model_fn's code runs here too
    if given.skew != SkewConfig():  # another check reruns the stage; the default leaves earlier records as they were
        inputs["skew"] = given.skew.to_dict()
    if predicted is not None and given.skew.skew != OFF:
        inputs["eval_predictions"] = dict(predicted)
    sources = {"dataset": dataset, "model": model}
    if prediction_kind(data) != SPLIT:
        sources["data"] = records.files_source([data, storage.join(data, "*")])
    record = records.StageRecord("batch_predict", {"predictions": predictions}, inputs, sources)
    if record.restore():
        return
    record.begin()
    result = source.predict(job, model.uri, data, predictions.uri, given.engine, given.beam, given.skew, predicted)
    artifacts.describe_predictions(predictions, result)
    artifacts.describe_skew(predictions)
    record.finish()
