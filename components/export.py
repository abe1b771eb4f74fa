"""Export stage: SavedModel export, then publishing of a blessed model (never of an unblessed one).

A thin adapter over `estimator_lib.release.export_and_release`. Export runs on the host CPU everywhere: one
SavedModel holds the CPU (`serve`) and the TPU (`serve,tpu`) meta graphs without needing a TPU.
"""

from kfp.dsl import Artifact, Dataset, Input, Model, Output


def export_model(
    dataset: Input[Dataset],
    model: Input[Model],
    blessing: Input[Artifact],
    publish_root: str,
    tpu: dict,
    exported: Output[Model],
):
    """Exports the trained model and publishes it if it was blessed.

    Args:
      dataset: the prepared dataset (its schema; its eval rows verify the export).
      model: the trained model.
      blessing: the evaluation's verdict.
      publish_root: where a blessed model is published as a new version, with LATEST pointing at it.
      tpu: where this stage runs ({"use_tpu": False}: export needs no TPU).
      exported: output; the SavedModel (tag sets, signatures) and whether/where it was published.
    """
    from components import adapter, artifacts
    from estimator_lib import release
    from estimator_lib.data import prepare

    prepared = prepare.load_prepared(dataset.uri)
    job = adapter.stage_job(model.uri, tpu)
    verdict = adapter.read_blessing(blessing.uri)
    outcome = release.export_and_release(
        job,
        prepared.schema,
        model.uri,
        exported.uri,
        verdict,
        publish_root,
        verify_files=prepared.files("eval"),
    )
    artifacts.describe_export(exported, outcome)
