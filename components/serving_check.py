"""Serving check stage, after export and batch prediction and before release: the export, served as a server
would serve it, must give the batch predictions.

A thin adapter over `estimator_lib.predict.serving_check.check_serving`: the exported SavedModel's CPU `serve`
graph loaded in a fresh process without the project's code, its serving signatures called on the first
predicted rows, compared with those rows. A disagreement fails the stage, so the release stage, which runs after
it, publishes nothing and LATEST does not move. Runs on the host CPU everywhere.
"""

from kfp.dsl import Artifact, Dataset, Input, Model, Output


def check_serving(
    exported: Input[Model],
    predictions: Input[Dataset],
    checked: Output[Artifact],
):
    """Serves the first predicted rows with the export and compares the outputs with the predictions.

    Args:
      exported: the export stage's verified SavedModel.
      predictions: the batch predictions of the same model (their manifest names the records they came from).
      checked: output; serving_check.json: the rows checked, the signatures called, the largest difference per
        output and the tolerance.
    """
    from components import artifacts, records
    from estimator_lib.predict import serving_check

    inputs = {"exported": records.fingerprint_of(exported), "predictions": records.fingerprint_of(predictions)}
    sources = {"exported": exported, "predictions": predictions}
    record = records.StageRecord("serving_check", {"checked": checked}, inputs, sources)
    if record.restore():
        return
    record.begin()
    result = serving_check.check_serving(exported.metadata["export_dir"], predictions.uri)
    serving_check.write_record(checked.uri, result)
    artifacts.describe_serving_check(checked, result)
    record.finish()
