"""Evaluate stage: metrics on the eval split and the blessing verdict (thresholds, baseline comparison).

A thin adapter over `estimator_lib.evaluation.evaluate_and_bless`. The verdict is data (the Blessing artifact),
not a `dsl.If`: the export stage reads it and publishes only a blessed model, so the same DAG runs in the
KFP local runner (which has no conditions) and on Vertex AI.
"""

from kfp.dsl import Artifact, ClassificationMetrics, Dataset, Input, Metrics, Model, Output


def evaluate_model(
    dataset: Input[Dataset],
    model: Input[Model],
    blessing_config: dict,
    baseline: str,
    publish_root: str,
    tpu: dict,
    metrics: Output[Metrics],
    classification_metrics: Output[ClassificationMetrics],
    blessing: Output[Artifact],
):
    """Evaluates the trained model and decides whether it may be published.

    Args:
      dataset: the prepared dataset (its eval split is scored).
      model: the trained model.
      blessing_config: a `BlessingConfig` as JSON: thresholds, beat_trivial, comparison_metric,
        min_improvement.
      baseline: "none", "latest" (the last model published under `publish_root`), a publish root or a
        SavedModel directory to compare with.
      publish_root: where blessed models are published.
      tpu: where this stage runs (see train_model).
      metrics: output; eval-split metrics (Vertex AI shows them as scalars).
      classification_metrics: output; confusion matrix and ROC curve (empty for regression).
      blessing: output; blessing.json with the verdict, every check, both models' metrics; predictions of both
        models on the eval rows under candidate/ and baseline/.
    """
    from components import adapter, artifacts
    from estimator_lib import release, storage, summaries
    from estimator_lib.data import prepare
    from estimator_lib.evaluation import evaluate_and_bless

    prepared = prepare.load_prepared(dataset.uri)
    job = adapter.stage_job(model.uri, tpu)
    config = adapter.blessing_config(blessing_config)
    baseline_dir = release.resolve_model(baseline, publish_root)
    evaluation = evaluate_and_bless(job, prepared, model.uri, config, baseline_dir, blessing.uri)
    adapter.write_blessing(blessing.uri, evaluation.blessing)
    adapter.copy_summaries_to_tensorboard(storage.join(model.uri, summaries.EVAL_DIR), "eval")
    artifacts.describe_evaluation(evaluation, metrics, classification_metrics, blessing)
