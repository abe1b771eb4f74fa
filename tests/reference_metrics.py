"""NumPy reference implementations of the metrics in estimator_lib.model.metrics, over real rows only.

The streaming AUCs follow tf.compat.v1.metrics.auc exactly (same thresholds, epsilon and summation rules), so a
test can demand agreement to 1e-5; a leak of padded rows changes them by far more.
"""

from __future__ import annotations

from typing import Dict

import numpy as np

from estimator_lib.model.metrics import AUC_NUM_THRESHOLDS


def _confusion(labels: np.ndarray, scores: np.ndarray, n: int = AUC_NUM_THRESHOLDS):
    kepsilon = 1e-7
    thresholds = [(i + 1) * 1.0 / (n - 1) for i in range(n - 2)]
    thresholds = np.array([0.0 - kepsilon] + thresholds + [1.0 + kepsilon], dtype=np.float64)
    above = scores[None, :].astype(np.float32) > thresholds[:, None].astype(np.float32)
    pos, neg = labels.astype(bool), ~labels.astype(bool)
    tp = (above & pos).sum(1).astype(np.float64)
    fp = (above & neg).sum(1).astype(np.float64)
    fn = pos.sum() - tp
    tn = neg.sum() - fp
    return tp, fp, fn, tn


def auc_roc(labels: np.ndarray, scores: np.ndarray) -> float:
    tp, fp, fn, tn = _confusion(labels, scores)
    eps = 1e-6
    rec = (tp + eps) / (tp + fn + eps)
    fpr = fp / (fp + tn + eps)
    return float(np.sum((fpr[:-1] - fpr[1:]) * (rec[:-1] + rec[1:]) / 2.0))


def auc_pr(labels: np.ndarray, scores: np.ndarray) -> float:
    tp, fp, fn, _ = _confusion(labels, scores)
    dtp = tp[:-1] - tp[1:]
    p = tp + fp
    dp = np.maximum(p[:-1] - p[1:], 0)
    slope = np.divide(dtp, dp, out=np.zeros_like(dtp), where=dp != 0)
    intercept = tp[1:] - slope * p[1:]
    ok = (p[:-1] > 0) & (p[1:] > 0)
    ratio = np.where(ok, np.divide(p[:-1], np.maximum(p[1:], 0), out=np.ones_like(p[:-1]), where=ok), 1.0)
    denom = np.maximum(tp[1:] + fn[1:], 0)
    num = slope * (dtp + intercept * np.log(ratio))
    return float(np.sum(np.divide(num, denom, out=np.zeros_like(num), where=denom != 0)))


def _precision_recall(truth: np.ndarray, predicted: np.ndarray):
    tp = float(np.sum(truth & predicted))
    precision = tp / max(float(np.sum(predicted)), 1e-12) if predicted.any() else 0.0
    recall = tp / max(float(np.sum(truth)), 1e-12) if truth.any() else 0.0
    return precision, recall


def binary(labels: np.ndarray, logits: np.ndarray) -> Dict[str, float]:
    p = 1.0 / (1.0 + np.exp(-logits[:, 0].astype(np.float64)))
    y = labels.astype(np.float64)
    loss = np.maximum(logits[:, 0], 0) - logits[:, 0] * y + np.log1p(np.exp(-np.abs(logits[:, 0])))
    precision, recall = _precision_recall(labels == 1, p > 0.5)
    return {
        "accuracy": float(np.mean((p > 0.5) == (labels == 1))),
        "precision": precision,
        "recall": recall,
        "streaming_auc_roc": auc_roc(labels == 1, p),
        "streaming_auc_pr": auc_pr(labels == 1, p),
        "loss": float(np.mean(loss)),
    }


def multiclass(labels: np.ndarray, logits: np.ndarray, classes) -> Dict[str, float]:
    z = logits.astype(np.float64) - logits.max(axis=1, keepdims=True)
    probs = np.exp(z) / np.exp(z).sum(axis=1, keepdims=True)
    predicted = np.argmax(logits, axis=1)
    loss = -np.log(probs[np.arange(len(labels)), labels])
    out = {"accuracy": float(np.mean(predicted == labels)), "loss": float(np.mean(loss))}
    for k, name in enumerate(classes):
        precision, recall = _precision_recall(labels == k, predicted == k)
        out[f"precision/{name}"] = precision
        out[f"recall/{name}"] = recall
        out[f"streaming_auc_roc/{name}"] = auc_roc(labels == k, probs[:, k])
        out[f"streaming_auc_pr/{name}"] = auc_pr(labels == k, probs[:, k])
    for base in ("precision", "recall"):
        out[f"macro_{base}"] = float(np.mean([out[f"{base}/{c}"] for c in classes]))
    for base in ("auc_roc", "auc_pr"):
        out[f"streaming_macro_{base}"] = float(np.mean([out[f"streaming_{base}/{c}"] for c in classes]))
    return out


def regression(labels: np.ndarray, logits: np.ndarray, mean: float, std: float) -> Dict[str, float]:
    pred = logits[:, 0].astype(np.float64) * std + mean
    err = pred - labels
    return {
        "mse": float(np.mean(err**2)),
        "mae": float(np.mean(np.abs(err))),
        "rmse": float(np.sqrt(np.mean(err**2))),
        "loss": float(np.mean((logits[:, 0] - (labels - mean) / std) ** 2)),
    }
