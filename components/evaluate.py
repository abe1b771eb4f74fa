"""Evaluate stage: metrics on the eval split and the blessing verdict (thresholds, baseline comparison).

A thin adapter over `estimator_lib.evaluation.evaluate_and_bless`. The verdict is data (the Blessing artifact),
not a `dsl.If`: the release stage reads it and publishes only a blessed model, so the same DAG runs in the
KFP local runner (which has no conditions) and on Vertex AI. The Blessing also records which version LATEST
named when the model was evaluated (`based_on`): the release stage publishes only if it still does. A model that
holds the weights of its baseline, the published version V, is "identical to version V; nothing to publish"; one
evaluated without a baseline while a version is published says which version it would replace and sets their
recorded metrics side by side (`Blessing.replacing`).
"""

from kfp.dsl import HTML, ClassificationMetrics, Dataset, Input, Markdown, Metrics, Model, Output

from components.artifact_types import ModelBlessing


def evaluate_model(
    dataset: Input[Dataset],
    model: Input[Model],
    spec: str,
    baseline: str,
    publish_root: str,
    tpu: str,
    metrics: Output[Metrics],
    classification_metrics: Output[ClassificationMetrics],
    blessing: Output[ModelBlessing],
    report: Output[HTML],
    verdict: Output[Markdown],
    slice_metrics: Output[Metrics],
) -> str:
    """Evaluates the trained model and decides whether it may be published.

    Args:
      dataset: the prepared dataset (its eval split is scored).
      model: the trained model.
      spec: an `EvaluateSpec` as JSON text (`RunConfig.stage_specs()`): the `BlessingConfig` (thresholds,
        beat_trivial, comparison_metric, min_improvement, ...).
      baseline: "none", "latest" (the last model published under `publish_root`), a publish root or a
        SavedModel directory to compare with.
      publish_root: where blessed models are published.
      tpu: where this stage runs, as JSON text (see train_model).
      metrics: output; eval-split metrics (Vertex AI shows them as scalars).
      classification_metrics: output; confusion matrix and ROC curve (empty for regression).
      blessing: output; blessing.json with the verdict, every check, both models' metrics; predictions of both
        models on the eval rows under candidate/ and baseline/; metadata `based_on`: the LATEST version under
        `publish_root` at evaluation ("none": nothing published), `blessed`, the reasons and the summary line.
      report: output; the standalone HTML report (plots embedded, nothing fetched): the verdict and every check,
        the run's header (run, start, duration so far, data, code, model), metrics beside the baseline's (with
        the change) and the reference's, slices, importance, the loss curves, the worst-predicted eval rows with
        their input lines, the task's plots, the data, the run's config.
      verdict: output; the verdict and headline metrics as Markdown (Vertex AI renders it on the run page).
      slice_metrics: output; each slice's metrics and rows ("island=Dream/accuracy", "island=Dream/rows"), empty
        when `blessing.slices` names none; the full table is slices.json inside `blessing`.

    Returns:
      What the model predicted for the eval rows, which batch prediction's skew check compares its predictions
      with (`adapter.eval_predictions_parameter`: counts, without class names; "" for a user's model_fn).
    """
    import dataclasses

    from components import adapter, artifacts, records, report_header
    from estimator_lib import engine, release, storage, summaries
    from estimator_lib.config.stages import EvaluateSpec
    from estimator_lib.evaluation import report as report_lib
    from estimator_lib.evaluation.curves import read_curves
    from estimator_lib.evaluation.slices import finite

    started = report_header.now()
    job = adapter.stage_job(model.uri, tpu)
    source = engine.open_dataset(dataset.uri)
    config = adapter.decode_spec(EvaluateSpec, spec).blessing
    based_on = release.latest_version(publish_root)  # read first: a publish after this makes the release fail
    baseline_dir = release.resolve_model(baseline, publish_root)
    inputs = {
        "dataset": records.fingerprint_of(dataset),
        "model": records.fingerprint_of(model),
        "job": job.to_dict(),
        "blessing_config": config.to_dict(),
        "baseline": baseline_dir,
        "based_on": based_on,
    }
    inputs.update(engine.code_record(job))  # the model_fn's code runs here too
    outputs = {
        "metrics": metrics,
        "classification_metrics": classification_metrics,
        "blessing": blessing,
        "report": report,
        "verdict": verdict,
        "slice_metrics": slice_metrics,
    }
    record = records.StageRecord("evaluate", outputs, inputs, {"dataset": dataset, "model": model})
    if record.restore():
        return adapter.eval_predictions_parameter(blessing.uri)
    record.begin()
    evaluation = source.evaluate(job, model.uri, config, baseline_dir, blessing.uri)
    evaluation = release.checked_identity(evaluation, baseline_dir)  # the published version's own weights
    # a NaN or infinite metric is named by the check it failed; no record (KFP's metadata) can hold it
    evaluation = dataclasses.replace(evaluation, metrics=finite(evaluation.metrics))
    if baseline_dir is None and based_on != "none" and not based_on.startswith("damaged-"):
        published, facts = release.latest(publish_root), source.facts()  # what a blessed model would replace
        other = release.other_lineage(published.uri, facts["label"], facts["task"])
        why = f"a new lineage: it {other}" if other else "--baseline none"
        replacing = evaluation.blessing.replacing(published.version, published.metadata.get("blessing", {}), why)
        evaluation = dataclasses.replace(evaluation, blessing=replacing)
    adapter.write_blessing(blessing.uri, evaluation.blessing)
    run = {**inputs, "checkpoint": evaluation.checkpoint}
    shown = source.report_inputs(evaluation, run, artifacts.read_drift(dataset))  # drift: the prepare stage's
    header = report_header.run_header(
        report.uri, [("prepare", dataset.uri), ("train", model.uri)], job, source.manifest, started
    )
    shown = dataclasses.replace(
        shown,
        header=header,
        curves=read_curves(model.uri),
        leakage_threshold=config.leakage_threshold,
        no_baseline=report_header.no_baseline(baseline, based_on),
        preflight=artifacts.read_preflight_lines(model),  # strict mode's, recorded by the train stage
    )
    written = report_lib.write_report(shown, report.uri, verdict.uri)
    adapter.copy_summaries_to_tensorboard(storage.join(model.uri, summaries.EVAL_DIR), "eval")
    artifacts.describe_slices(evaluation, slice_metrics, blessing)
    artifacts.describe_evaluation(evaluation, metrics, classification_metrics, blessing, based_on)
    artifacts.describe_report(report, verdict, written)
    record.finish()
    return adapter.eval_predictions_parameter(blessing.uri)
