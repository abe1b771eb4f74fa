"""A user's own TPUEstimator model, the parts below the stages: their `model_fn` wrapped as TPUEstimator calls
it (`model_fn`: padding masked out of metrics, row markers added to predictions), the TPU input_fns built from
their `FeatureSpec` (`inputs`), their records parsed and checked against it (`records`), their TFRecords
prepared (`prepare`) and their code packaged (`package`). The stages run it through `estimator_lib.engine`.
"""

from estimator_lib.model.user.model_fn import UserCodeError, load_function, wrap_model_fn
from estimator_lib.model.user.records import RecordMismatchError

__all__ = ["RecordMismatchError", "UserCodeError", "load_function", "wrap_model_fn"]
