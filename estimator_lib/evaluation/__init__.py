"""Evaluation: metrics in NumPy on the host, each name with one exact definition (`metrics`), the linear
reference fitted in every run (`reference`), the publish decision (`blessing`), and the evaluate stage that runs
them against the last published model (`evaluate`: one prediction pass of the candidate over the eval split)."""

from estimator_lib.evaluation.blessing import Blessing, Check, decide
from estimator_lib.evaluation.evaluate import Evaluation, evaluate_and_bless, read_eval_rows, read_truth
from estimator_lib.evaluation.metrics import (
    Scores,
    Truth,
    blessing_metrics,
    compute_metrics,
    confusion_matrix,
    paired_standard_errors,
    reported_metrics,
    roc_curve,
    scores_from_rows,
    trivial_metrics,
)
from estimator_lib.evaluation.reference import LinearReference, fit_reference

__all__ = [
    "Blessing",
    "Check",
    "Evaluation",
    "LinearReference",
    "Scores",
    "Truth",
    "blessing_metrics",
    "compute_metrics",
    "confusion_matrix",
    "decide",
    "evaluate_and_bless",
    "paired_standard_errors",
    "fit_reference",
    "read_eval_rows",
    "read_truth",
    "reported_metrics",
    "roc_curve",
    "scores_from_rows",
    "trivial_metrics",
]
