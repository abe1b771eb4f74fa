"""Release stage, last in the pipeline: publishes the verified export of a blessed model.

A thin adapter over `estimator_lib.release.release`. It runs after every other stage (batch prediction
included), so a run that fails anywhere publishes nothing and LATEST stays where it was. It publishes only if
LATEST still names the version the evaluate stage compared against (compare-and-swap): a run that published in
between makes this one fail instead of being overwritten. A model identical to the one LATEST names is not
published again (publication.json says "not published: identical to version V; nothing to publish"); a rerun
whose earlier attempt published this model before it was stopped reports that version as its own.
"""

from kfp.dsl import Artifact, Input, Model, Output

from components.artifact_types import ModelBlessing


def release_model(
    exported: Input[Model],
    blessing: Input[ModelBlessing],
    publish_root: str,
    publication: Output[Artifact],
):
    """Publishes the export as a new version under `publish_root` if the evaluation blessed it.

    Args:
      exported: the export stage's verified SavedModel.
      blessing: the evaluation's verdict; its metadata `based_on` names the LATEST version it was decided
        against.
      publish_root: where a blessed model is published as a new version, with LATEST pointing at it.
      publication: output; publication.json: whether and where the model was published, and why.
    """
    from components import adapter, artifacts, records
    from estimator_lib import release

    verdict = adapter.read_blessing(blessing.uri)
    based_on = str(blessing.metadata["based_on"])
    inputs = {
        "exported": records.fingerprint_of(exported),
        "blessing": records.fingerprint_of(blessing),
        "based_on": based_on,
        "publish_root": publish_root,
    }
    sources = {"exported": exported, "blessing": blessing}
    record = records.StageRecord("release", {"publication": publication}, inputs, sources)
    if record.restore():
        return
    record.begin()
    export_dir = exported.metadata["export_dir"]
    global_step = int(exported.metadata["global_step"])
    # Metadata numbers come through KFP as floats: the step is an int again before it is recorded.
    source = {**{key: exported.metadata[key] for key in ("export_dir", "checkpoint")}, "global_step": global_step}
    outcome = release.release(export_dir, verdict, publish_root, {"source": source}, based_on=based_on)
    adapter.write_publication(publication.uri, outcome, based_on)
    artifacts.describe_release(publication, outcome, based_on, records.fingerprint_of(exported))
    record.finish()
