"""Bootstrap confidence intervals of the headline metrics, and the paired comparison with the baseline.

The eval rows are resampled with replacement, as many rows as there are, `blessing.bootstrap_replicates` times,
from `numpy.random.default_rng(blessing.bootstrap_seed)`: replicate b is the row indices int [N] drawn b-th. Each
headline metric (`config.TASK_METRICS`) of a replicate is that metric of the resampled rows by its one
definition in `evaluation.metrics`: the mean of the rows' hits or log losses (`metrics.row_hits`,
`metrics.row_log_losses`), `metrics.regression_metrics` of the resampled labels and errors, `metrics.headline_auc`
with the replicate's row counts as weights. The interval is the percentile interval at `blessing.confidence`
(two-sided: 0.95 gives the 2.5th and 97.5th percentiles of the replicates); a replicate where a metric is
undefined (a resample without one class: AUC; labels that do not vary: r2) is left out of that metric's interval.

The paired comparison scores the candidate and the baseline on the same replicates: the difference of their
comparison metric, signed so that positive is better in the metric's direction, per replicate. Pairing cancels
what both models share (the hard rows), so two models that differ only by their training seed get an interval
around zero: "no different", not an improvement.

Cost: a row gather per metric and model per replicate (regression's r2 two), in chunks of `CHUNK` replicates.
1000 replicates of 100,000 rows with a baseline took 0.9 s of CPU for two classes, 1.4 s for three and 1.6 s
for regression (one core of a shared 2-core machine). AUC needs the replicate's row counts and a pass per class
scored (one for two classes): it uses the first min(replicates, max(`AUC_MIN_REPLICATES`, `AUC_ROW_DRAWS` //
(rows x classes scored))) replicates, all 1000 up to 10,000 binary rows, 100 at 100,000; the record says how
many (`auc_replicates`).

Every step is a single-threaded NumPy operation in a fixed order (no BLAS, whose threads and kernels may sum in
another order), on per-row values that are the same on every machine (log losses from the C library's log,
`metrics.row_log_losses`): the same rows, scores and settings give the same bytes, also with NumPy's optional
vector kernels turned off (tests/lib/evaluation/test_intervals.py).

Runs on the host CPU after evaluation.
"""

from __future__ import annotations

from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from estimator_lib.config import TASK_METRICS, BlessingConfig
from estimator_lib.evaluation.metrics import (
    Scores,
    Truth,
    headline_auc,
    regression_metrics,
    row_hits,
    row_log_losses,
)
from estimator_lib.schema import REGRESSION

CHUNK = 8  # replicates resampled at once: 8 x 100,000 row indices, 6.4 MB
AUC_ROW_DRAWS = 10_000_000
AUC_MIN_REPLICATES = 100
BETTER, NO_DIFFERENT, WORSE = "better", "no different", "worse"


def bootstrap_intervals(
    config: BlessingConfig,
    truth: Truth,
    candidate: Scores,
    values: Mapping[str, float],
    baseline: Optional[Scores] = None,
    baseline_values: Optional[Mapping[str, float]] = None,
) -> Dict[str, Any]:
    """The intervals of the candidate's headline metrics and, with a baseline, of the paired difference.

    Args:
      config: `confidence`, `bootstrap_replicates`, `bootstrap_seed`, and the comparison metric.
      truth: the eval rows' labels.
      candidate, baseline: both models' scores for those rows, in `truth`'s order (baseline None: no comparison).
      values, baseline_values: their headline metrics on all the rows (`metrics.compute_metrics`).

    Returns:
      {"confidence", "replicates", "seed", "metrics": {name: {"value", "low", "high"}}, "baseline": None |
      {"metric", "difference", "low", "high", "verdict": "better" | "no different" | "worse"}}, plus
      "auc_replicates" for classification.
    """
    names, metric = TASK_METRICS[truth.task], config.comparison_for(truth.task)
    models = [(candidate, names)] + ([(baseline, (metric,))] if baseline is not None else [])
    auc_replicates = _auc_replicates(truth, config.bootstrap_replicates)
    replicates = _replicate_metrics(truth, models, config.bootstrap_replicates, config.bootstrap_seed, auc_replicates)
    confidence = config.confidence
    out: Dict[str, Any] = {
        "confidence": confidence,
        "replicates": config.bootstrap_replicates,
        "seed": config.bootstrap_seed,
        "metrics": {name: _entry(values[name], replicates[0][name], confidence) for name in names},
        "baseline": None,
    }
    if truth.task != REGRESSION:
        out["auc_replicates"] = auc_replicates
    if baseline is not None:
        sign = 1.0 if config.higher_is_better(metric) else -1.0
        difference = sign * (values[metric] - baseline_values[metric])
        entry = _entry(difference, sign * (replicates[0][metric] - replicates[1][metric]), confidence)
        out["baseline"] = {"metric": metric, "difference": entry["value"], "low": entry["low"], "high": entry["high"]}
        out["baseline"]["verdict"] = verdict(entry["low"], entry["high"])
    return out


def verdict(low: float, high: float) -> str:
    """ "better" when the whole interval of the difference (positive = better) is above zero, "worse" when below,
    else "no different"."""
    if low > 0:
        return BETTER
    if high < 0:
        return WORSE
    return NO_DIFFERENT


def _auc_replicates(truth: Truth, replicates: int) -> int:
    """How many of the first replicates AUC uses: its pass per class over the row counts is the costly one."""
    if truth.task == REGRESSION:
        return 0
    scored = len(truth.keys) * (1 if len(truth.classes) == 2 else len(truth.classes))
    return min(replicates, max(AUC_MIN_REPLICATES, AUC_ROW_DRAWS // max(scored, 1)))


def _resamples(rows: int, replicates: int, seed: int) -> Iterator[np.ndarray]:
    """int [<= CHUNK, rows] row indices per replicate, in order; the same stream of draws whatever the chunk."""
    rng = np.random.default_rng(seed)
    for start in range(0, replicates, CHUNK):
        yield rng.integers(0, rows, size=(min(CHUNK, replicates - start), rows))


def _replicate_metrics(
    truth: Truth,
    models: Sequence[Tuple[Scores, Sequence[str]]],
    replicates: int,
    seed: int,
    auc_replicates: int,
) -> List[Dict[str, np.ndarray]]:
    """Per model, {metric: float [replicates]} (AUC: [auc_replicates]), every model on the same resamples."""
    rows = len(truth.keys)
    per_row = [_row_values(truth, scores) for scores, _ in models]
    out: List[Dict[str, List[np.ndarray]]] = [{name: [] for name in names} for _, names in models]
    done = 0
    for resampled in _resamples(rows, replicates, seed):
        counted = resampled[: max(0, auc_replicates - done)]
        counts = np.stack([np.bincount(r, minlength=rows) for r in counted]) if len(counted) else None
        for (scores, names), values, collected in zip(models, per_row, out):
            for name, value in _chunk_metrics(truth, scores, names, values, resampled, counts).items():
                collected[name].append(value)
        done += len(resampled)
    return [{name: np.concatenate(parts) for name, parts in collected.items()} for collected in out]


def _row_values(truth: Truth, scores: Scores) -> Dict[str, np.ndarray]:
    """The per-row values the resamples gather: [N] each."""
    if truth.task == REGRESSION:
        return {"labels": truth.labels, "error": scores.predicted - truth.labels}
    # Hits as uint8: a quarter of the bytes to gather; their mean is the same exact sum over the same count.
    return {"hits": row_hits(truth, scores).astype(np.uint8), "losses": row_log_losses(truth, scores)}


def _chunk_metrics(
    truth: Truth,
    scores: Scores,
    names: Sequence[str],
    values: Mapping[str, np.ndarray],
    resampled: np.ndarray,
    counts: Optional[np.ndarray],
) -> Dict[str, np.ndarray]:
    """{name: float [replicates in the chunk]} (AUC: [len(counts)]): the metrics `names` of each resample."""
    if truth.task == REGRESSION:
        labels = values["labels"][resampled] if "r2" in names else None  # the only one that reads them
        return regression_metrics(labels, values["error"][resampled], names)
    out = {}
    if "accuracy" in names:
        out["accuracy"] = np.mean(values["hits"][resampled], axis=-1)
    if "log_loss" in names:
        out["log_loss"] = np.mean(values["losses"][resampled], axis=-1)
    if "auc" in names:
        out["auc"] = headline_auc(truth, scores, counts) if counts is not None else np.empty(0)
    return out


def _entry(value: float, replicates: np.ndarray, confidence: float) -> Dict[str, float]:
    """{"value", "low", "high"}: the percentile interval of the defined replicates (NaN bounds when none is)."""
    defined = replicates[~np.isnan(replicates)]
    if not len(defined):
        return {"value": float(value), "low": float("nan"), "high": float("nan")}
    low, high = np.quantile(defined, [(1.0 - confidence) / 2.0, (1.0 + confidence) / 2.0])
    return {"value": float(value), "low": float(low), "high": float(high)}
