"""`metric_fn`s for `TPUEstimatorSpec(eval_metrics=(metric_fn, tensors))`.

A metric_fn runs on the host CPU, not on the TPU: TPUEstimator ships the tensors out of the TPU computation
(concatenated across replicas along the batch dimension) and calls it there. So it receives everything as
arguments (it must not close over tensors of the model graph) and every argument is batch-major, rank >= 1.

Every metric is weighted by `weights` = 1 - is_padding: padded rows count for nothing, so metrics equal those
of the real rows alone. The mean loss of the real rows is Estimator's own `loss`, which the model_fn makes exact
under padding (`model_fn._eval_loss`), so no metric_fn repeats it.

AUCs use `tf.compat.v1.metrics.auc` with `AUC_NUM_THRESHOLDS` evenly spaced thresholds: ROC with the
trapezoidal rule, PR with careful interpolation. That is an approximation, not the exact area the evaluate stage
reports (`evaluation.metrics`, over every distinct score), so these carry names of their own: `streaming_auc_roc`,
`streaming_auc_pr` (and `streaming_macro_auc_roc`, ...). The other values here (accuracy, precision, recall,
mse, mae, rmse) have the exact definitions of the names they carry, accumulated in float32.
"""

from __future__ import annotations

from typing import Callable, Dict, Tuple

import tensorflow as tf

from estimator_lib.schema import LabelSpec

AUC_NUM_THRESHOLDS = 1000
# What a metric computed by thresholding (not exactly) is called: a name of its own, apart from the exact one.
STREAMING_PREFIX = "streaming_"
MetricOps = Dict[str, Tuple[tf.Tensor, tf.Tensor]]
MetricFn = Callable[..., MetricOps]

_m = tf.compat.v1.metrics


def _binary_ops(labels: tf.Tensor, probability: tf.Tensor, weights: tf.Tensor, suffix: str = "") -> MetricOps:
    """Precision, recall and streaming AUCs of one positive class: labels bool [B], probability float32 [B]."""
    predicted = probability > 0.5
    return {
        f"precision{suffix}": _m.precision(labels, predicted, weights=weights),
        f"recall{suffix}": _m.recall(labels, predicted, weights=weights),
        f"{STREAMING_PREFIX}auc_roc{suffix}": _m.auc(
            labels,
            probability,
            weights=weights,
            num_thresholds=AUC_NUM_THRESHOLDS,
            curve="ROC",
            summation_method="trapezoidal",
        ),
        f"{STREAMING_PREFIX}auc_pr{suffix}": _m.auc(
            labels,
            probability,
            weights=weights,
            num_thresholds=AUC_NUM_THRESHOLDS,
            curve="PR",
            summation_method="careful_interpolation",
        ),
    }


def binary_metric_fn(labels, logits, per_example_loss, weights) -> MetricOps:
    """Binary classification. labels int32 [B] in {0, 1}; logits float32 [B, 1]; loss, weights float32 [B]."""
    probability = tf.sigmoid(logits[:, 0])
    ops = _binary_ops(tf.equal(labels, 1), probability, weights)
    ops["accuracy"] = _m.accuracy(labels, tf.cast(probability > 0.5, tf.int32), weights=weights)
    return ops


def multiclass_metric_fn_builder(num_classes: int) -> MetricFn:
    """K-class classification: accuracy, and per class (one-vs-rest) precision, recall, streaming AUCs."""

    def metric_fn(labels, logits, per_example_loss, weights) -> MetricOps:
        """labels int32 [B]; logits float32 [B, K]; per_example_loss, weights float32 [B]."""
        probabilities = tf.nn.softmax(logits)
        predicted = tf.argmax(logits, axis=1, output_type=tf.int32)
        ops = {"accuracy": _m.accuracy(labels, predicted, weights=weights)}
        for k in range(num_classes):
            is_k = tf.equal(labels, k)
            class_ops = _binary_ops(is_k, probabilities[:, k], weights, suffix=f"/class_{k}")
            # Precision/recall of class k use the argmax decision, not probability > 0.5.
            class_ops[f"precision/class_{k}"] = _m.precision(is_k, tf.equal(predicted, k), weights=weights)
            class_ops[f"recall/class_{k}"] = _m.recall(is_k, tf.equal(predicted, k), weights=weights)
            ops.update(class_ops)
        return ops

    return metric_fn


def regression_metric_fn_builder(label_mean: float, label_std: float) -> MetricFn:
    """Regression: MSE, MAE, RMSE in the label's original units (the loss, standardised, is Estimator's)."""

    def metric_fn(labels, logits, per_example_loss, weights) -> MetricOps:
        """labels float32 [B] (original units); logits float32 [B, 1] (standardised); loss, weights [B]."""
        predictions = logits[:, 0] * label_std + label_mean
        return {
            "mse": _m.mean_squared_error(labels, predictions, weights=weights),
            "mae": _m.mean_absolute_error(labels, predictions, weights=weights),
            "rmse": _m.root_mean_squared_error(labels, predictions, weights=weights),
        }

    return metric_fn


def loss_metric_fn(labels, logits, per_example_loss, weights) -> MetricOps:
    """No metric beside Estimator's exact `loss` (what early stopping compares between rounds): a small eval graph,
    rebuilt each round."""
    del labels, logits, per_example_loss, weights  # the same arguments as every metric_fn, passed alike
    return {}


def metric_fn_for(label: LabelSpec) -> MetricFn:
    """The metric_fn for a label's head ("binary", "multiclass" or "regression")."""
    if label.head == "binary":
        return binary_metric_fn
    if label.head == "multiclass":
        return multiclass_metric_fn_builder(label.num_classes)
    return regression_metric_fn_builder(label.mean, label.std)


def readable_names(results: Dict[str, float], label: LabelSpec) -> Dict[str, float]:
    """Renames per-class keys "x/class_3" to "x/<class name>" and adds macro averages for multiclass
    (`macro_precision`, `macro_recall`, `streaming_macro_auc_roc`, `streaming_macro_auc_pr`)."""
    if label.head != "multiclass":
        return dict(results)
    out: Dict[str, float] = {}
    for name, value in results.items():
        base, sep, cls = name.partition("/class_")
        out[f"{base}/{label.classes[int(cls)]}" if sep else name] = value
    for base in ("precision", "recall", f"{STREAMING_PREFIX}auc_roc", f"{STREAMING_PREFIX}auc_pr"):
        per_class = [results[f"{base}/class_{k}"] for k in range(label.num_classes) if f"{base}/class_{k}" in results]
        if per_class:
            out[_macro_name(base)] = sum(per_class) / len(per_class)
    return out


def _macro_name(base: str) -> str:
    """The macro average's name: macro_precision; streaming_macro_auc_roc (the streaming prefix stays first)."""
    streaming = base.startswith(STREAMING_PREFIX)
    return (STREAMING_PREFIX if streaming else "") + "macro_" + base[len(STREAMING_PREFIX) if streaming else 0 :]
