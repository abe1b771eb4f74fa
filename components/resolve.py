"""Resolve stage, first and never cached: what the data and the published models are at the start of this run.

A thin adapter over `estimator_lib.release.resolve_sources`. Its outputs are the cache keys of the stages after it:
prepare is keyed by the data's content token and the reference model, train by the resolved warm-start source,
so a cached stage is reused exactly when what it would read is unchanged (a rewritten `gs://.../data.csv` gets a
new generation, a new publish a new version directory). A published model of another label or task is not
continued: "auto" leaves it out, saying so in one log line; named explicitly, it is refused before any work.
With no model to continue, the reference says why ("none (why)"): the prepare stage's skipped validation gives it.
"""

from typing import NamedTuple


def resolve_inputs(
    prepare_spec: str, warm_start: str, baseline: str, publish_root: str, evaluate_spec: str
) -> NamedTuple("Resolved", data_version=str, warm_start=str, reference=str, baseline=str, blessing_metrics=str):
    """Resolves the run's data and models.

    Args:
      prepare_spec: the prepare stage's spec (a `PrepareSpec` as JSON text): its data (a path, gs:// URI or
        glob, or "embedded:penguins") is resolved.
      warm_start: "none", "latest", a publish root or a SavedModel directory; "auto": "latest" if that model
        predicts this run's label (and task), else none.
      baseline: the same choices, for the model the run compares with.
      publish_root: where blessed models are published ("latest" looks there).
      evaluate_spec: the evaluate stage's spec (an `EvaluateSpec` as JSON text): the metrics its blessing names.

    Returns:
      data_version: a token that changes whenever a data file's content does; warm_start: the SavedModel
      directory to initialise from, or "none"; reference: the published model whose schema and data the run
      continues and checks against (the warm-start source, else the baseline), or "none (why)"
      (`retrain.unreferenced`); baseline: what the evaluate stage compares with: the baseline as given, or "none"
      when "auto" found another lineage; blessing_metrics: the metrics the blessing names (a JSON list), which
      the train stage checks against the data's task before it trains (a threshold's value is not in it:
      changing one reuses a cached training).

    Raises:
      ValueError: `warm_start` or `baseline` names a published model of another label or task.
    """

    import json
    import logging

    from components import adapter
    from estimator_lib import release
    from estimator_lib.config.run import NO_MODEL
    from estimator_lib.config.stages import EvaluateSpec, PrepareSpec
    from estimator_lib.data import retrain

    config = adapter.prepare_config(adapter.decode_spec(PrepareSpec, prepare_spec))
    # its data version covers what preparation reads (`config.reads()`): the data, a user model's records and spec
    resolved = release.resolve_sources(config, warm_start, baseline, publish_root)
    reference = resolved.reference
    if reference == NO_MODEL:
        reference = retrain.unreferenced(resolved.lineage)
    print(f"data version {resolved.data_version[:12]}; warm start: {resolved.warm_start}; reference: {reference}")
    for note in resolved.notes:
        logging.getLogger("components").info(note)
    named = adapter.decode_spec(EvaluateSpec, evaluate_spec).blessing.named_metrics()
    # as KFP ships the body alone
    outputs = NamedTuple(
        "Resolved", data_version=str, warm_start=str, reference=str, baseline=str, blessing_metrics=str
    )
    return outputs(resolved.data_version, resolved.warm_start, reference, resolved.baseline, json.dumps(named))
