"""A user's own TPUEstimator model: their `model_fn` (called as TPUEstimator calls it), their hyperparameters
as `params`, and their TFRecords described by a `FeatureSpec` (`estimator_lib.config.feature_spec`).

`run` trains, evaluates, predicts and exports it with the stages' guarantees (and evaluates the published
model with the current model_fn, `evaluate_published`); `model_fn` wraps the user's function (padding masked
out of metrics, row markers added to predictions); `inputs` builds the TPU input_fns from the spec; `records`
parses records and names the one that does not match the spec; `compat` checks that a published model fits
this run's model_fn and spec (features, variables) before a warm start or a comparison.
"""

from estimator_lib.model.user.compat import (
    IncompatibleModelError,
    check_spec,
    check_variables,
    check_warm_start,
    published_metadata,
)
from estimator_lib.model.user.model_fn import UserCodeError, load_function, wrap_model_fn
from estimator_lib.model.user.records import RecordMismatchError
from estimator_lib.model.user.run import UserModel, evaluate, evaluate_published, export, predict, train

__all__ = [
    "IncompatibleModelError",
    "RecordMismatchError",
    "UserCodeError",
    "UserModel",
    "check_spec",
    "check_variables",
    "check_warm_start",
    "evaluate",
    "evaluate_published",
    "export",
    "load_function",
    "predict",
    "published_metadata",
    "train",
    "wrap_model_fn",
]
