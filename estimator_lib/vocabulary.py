"""The metric vocabulary: each metric's one name, what it means, its units and direction, and how it is printed.

Every screen that shows a metric (the console, `tpu-pipeline show` and `diff`, summary.json, the report,
TensorBoard, the Vertex AI Metrics artifact) uses these names, so one number has one name everywhere. The table
in docs/metrics.md is `markdown_table()`; a test keeps the two equal. Free of TensorFlow (unlike the evaluation
package): the CLI reads it.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Mapping, Sequence, Tuple

CLASSIFICATION, REGRESSION, TRAINING = "classification", "regression", "training"
HIGHER, LOWER = "higher", "lower"
SIGNIFICANT_DIGITS = 4


@dataclasses.dataclass(frozen=True)
class Metric:
    """One metric: `name` is its key everywhere; `display` its label for people; `task` where it is reported."""

    name: str
    display: str
    task: str
    better: str
    description: str


METRICS: Tuple[Metric, ...] = (
    Metric("accuracy", "Accuracy", CLASSIFICATION, HIGHER, "share of eval rows whose predicted class is the label"),
    Metric(
        "log_loss",
        "Log loss",
        CLASSIFICATION,
        LOWER,
        "mean -log p(label) over the eval rows, natural log, p clipped at 1e-15; the training loss (cross "
        "entropy) on the eval rows",
    ),
    Metric(
        "auc",
        "ROC AUC",
        CLASSIFICATION,
        HIGHER,
        "exact area under the ROC curve (ties count half): of the second class for two classes, else the mean "
        "one-vs-rest AUC over the classes present",
    ),
    Metric("precision", "Precision", CLASSIFICATION, HIGHER, "two classes: precision of the second class"),
    Metric("recall", "Recall", CLASSIFICATION, HIGHER, "two classes: recall of the second class"),
    Metric("auc_pr", "PR AUC", CLASSIFICATION, HIGHER, "two classes: average precision of the second class"),
    Metric("precision/<class>", "Precision (class)", CLASSIFICATION, HIGHER, "3+ classes: one class against the rest"),
    Metric("recall/<class>", "Recall (class)", CLASSIFICATION, HIGHER, "3+ classes: one class against the rest"),
    Metric("auc/<class>", "ROC AUC (class)", CLASSIFICATION, HIGHER, "3+ classes: one class against the rest"),
    Metric("auc_pr/<class>", "PR AUC (class)", CLASSIFICATION, HIGHER, "3+ classes: one class against the rest"),
    Metric("macro_precision", "Macro precision", CLASSIFICATION, HIGHER, "3+ classes: mean of precision/<class>"),
    Metric("macro_recall", "Macro recall", CLASSIFICATION, HIGHER, "3+ classes: mean of recall/<class>"),
    Metric("macro_auc_pr", "Macro PR AUC", CLASSIFICATION, HIGHER, "3+ classes: mean of auc_pr/<class>"),
    Metric("rmse", "RMSE", REGRESSION, LOWER, "root mean squared error, in the label's units"),
    Metric("mae", "MAE", REGRESSION, LOWER, "mean absolute error, in the label's units"),
    Metric("mse", "MSE", REGRESSION, LOWER, "mean squared error, in the label's units squared"),
    Metric(
        "r2",
        "R²",
        REGRESSION,
        HIGHER,
        "coefficient of determination: 1 - squared error / the label's variance on the eval rows (1 perfect, 0 the "
        "mean's score, unitless)",
    ),
    Metric(
        "loss",
        "Training loss",
        TRAINING,
        LOWER,
        "the loss training minimises, per row (TensorBoard, training and validation rounds): cross entropy "
        "(log_loss) for classification; for regression the MSE of the standardised label, (y - mean) / std with "
        "the train split's mean and std (mse / std² in the label's units)",
    ),
)
BY_NAME = {m.name: m for m in METRICS}
# Names earlier versions reported for a metric that has another name now.
RETIRED = {"mean_loss": "log_loss", "macro_auc_roc": "auc", "auc_roc": "auc"}
# The metrics of a run's one console line, in order.
HEADLINE = {CLASSIFICATION: ("accuracy", "auc", "log_loss"), REGRESSION: ("rmse", "mae", "r2")}


def describe(name: str) -> Metric:
    """The vocabulary entry of a reported metric name; per-class names ("auc/Adelie") map to "auc/<class>".

    Raises:
      KeyError: the name is not in the vocabulary (a user model_fn's metrics have names of their own).
    """
    if name in BY_NAME:
        return BY_NAME[name]
    base, slash, _ = name.partition("/")
    if slash and f"{base}/<class>" in BY_NAME:
        return BY_NAME[f"{base}/<class>"]
    raise KeyError(f"metric {name!r} is not in the vocabulary (estimator_lib.vocabulary.METRICS)")


def headline(metrics: Mapping[str, float]) -> Tuple[str, ...]:
    """The names of `metrics` a one-line summary shows: the task's headline metrics that are there, else all
    (a user model_fn's metric_fn names its own), sorted."""
    for names in HEADLINE.values():
        shown = tuple(n for n in names if n in metrics)
        if shown:
            return shown
    return tuple(sorted(metrics))


def format_value(value: float) -> str:
    """A metric for people: 4 significant digits, no exponent for values from 1e-4 to 1e9 ("0.9762", "412.3",
    "152345", "1.000"), so float noise (1.0000001) never shows."""
    value = float(value)
    if not math.isfinite(value):
        return str(value)
    if value == 0.0 or 1e-4 <= abs(value) < 1e9:
        whole = len(str(int(abs(value)))) if abs(value) >= 1 else 0
        decimals = max(0, SIGNIFICANT_DIGITS - whole) if whole else SIGNIFICANT_DIGITS
        return f"{value:.{decimals}f}"
    return f"{value:.{SIGNIFICANT_DIGITS - 1}e}"


def format_delta(value: float) -> str:
    """A difference between two metrics, signed and rounded as `format_value` ("+0.0123", "-3.500")."""
    text = format_value(value)
    return text if text.startswith("-") or not math.isfinite(value) else "+" + text


def format_metrics(metrics: Mapping[str, float], names: Sequence[str]) -> str:
    """ "name=value, ..." of `names`, each rounded by `format_value`."""
    return ", ".join(f"{n}={format_value(metrics[n])}" for n in names)


def markdown_table() -> str:
    """The vocabulary as the Markdown table of docs/metrics.md."""
    lines = ["| name | shown as | task | better | what it is |", "| --- | --- | --- | --- | --- |"]
    lines += [f"| `{m.name}` | {m.display} | {m.task} | {m.better} | {m.description} |" for m in METRICS]
    return "\n".join(lines) + "\n"
