"""Resolve stage, first and never cached: what the data and the published models are at the start of this run.

A thin adapter over `estimator_lib.release.resolve_sources`. Its outputs are the cache keys of the stages after it:
prepare is keyed by the data's content token and the reference model, train by the resolved warm-start source,
so a cached stage is reused exactly when what it would read is unchanged (a rewritten `gs://.../data.csv` gets a
new generation, a new publish a new version directory).
"""

from typing import NamedTuple


def resolve_inputs(prepare_spec: str, warm_start: str, baseline: str, publish_root: str) -> NamedTuple(
    "Resolved", data_version=str, warm_start=str, reference=str
):
    """Resolves the run's data and models.

    Args:
      prepare_spec: the prepare stage's spec (a `PrepareSpec` as JSON text): its data (a path, gs:// URI or
        glob, or "embedded:penguins") is resolved.
      warm_start: "none", "latest", a publish root or a SavedModel directory.
      baseline: the same choices, for the model the run compares with.
      publish_root: where blessed models are published ("latest" looks there).

    Returns:
      data_version: a token that changes whenever a data file's content does; warm_start: the SavedModel
      directory to initialise from, or "none"; reference: the published model whose schema and data the run
      continues and checks against (the warm-start source, else the baseline), or "none".
    """

    from components import adapter
    from estimator_lib import release
    from estimator_lib.config.stages import PrepareSpec

    config = adapter.prepare_config(adapter.decode_spec(PrepareSpec, prepare_spec))
    # what preparation reads: the data, and a user model's eval records and feature spec
    resolved = release.resolve_sources(config.reads(), warm_start, baseline, publish_root)
    print(
        f"data version {resolved.data_version[:12]}; warm start: {resolved.warm_start}; reference: {resolved.reference}"
    )
    outputs = NamedTuple("Resolved", data_version=str, warm_start=str, reference=str)  # as KFP ships the body alone
    return outputs(resolved.data_version, resolved.warm_start, resolved.reference)
