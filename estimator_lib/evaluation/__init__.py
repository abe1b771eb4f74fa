"""Evaluation: metrics in NumPy on the host (`metrics`), the publish decision (`blessing`), and the evaluate
stage that runs both against the last published model (`evaluate`)."""

from estimator_lib.evaluation.blessing import Blessing, Check, decide
from estimator_lib.evaluation.evaluate import Evaluation, evaluate_and_bless, read_truth
from estimator_lib.evaluation.metrics import (
    Scores,
    Truth,
    compute_metrics,
    confusion_matrix,
    roc_curve,
    scores_from_rows,
    trivial_metrics,
)

__all__ = [
    "Blessing",
    "Check",
    "Evaluation",
    "Scores",
    "Truth",
    "compute_metrics",
    "confusion_matrix",
    "decide",
    "evaluate_and_bless",
    "read_truth",
    "roc_curve",
    "scores_from_rows",
    "trivial_metrics",
]
