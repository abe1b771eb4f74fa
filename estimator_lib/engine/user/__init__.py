"""A user's own model_fn through the stages: `run` trains, evaluates, predicts and exports it with the stages'
guarantees (and evaluates the published model with the current model_fn, `evaluate_published`); `compat` checks
that a published model fits this run's model_fn and spec (features, variables) before a warm start or a
comparison; `importance` scores its features; `stages` makes each stage's call on prepared records.
"""

from estimator_lib.engine.user.compat import (
    IncompatibleModelError,
    check_spec,
    check_variables,
    check_warm_start,
    published_metadata,
)
from estimator_lib.engine.user.run import UserModel, evaluate, evaluate_published, export, predict, train

__all__ = [
    "IncompatibleModelError",
    "UserModel",
    "check_spec",
    "check_variables",
    "check_warm_start",
    "evaluate",
    "evaluate_published",
    "export",
    "predict",
    "published_metadata",
    "train",
]
