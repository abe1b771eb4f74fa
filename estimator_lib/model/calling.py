"""How TPUEstimator calls a model_fn, in one place: the user-model wrapper and strict mode both call a user's
model_fn exactly this way (tensorflow_estimator's `_ModelFnWrapper._call_model_fn`)."""

from __future__ import annotations

from typing import Any, Callable, Dict

from tensorflow.python.util import function_utils


def call_as_tpu_estimator(model_fn: Callable, features, labels, mode, params, config):
    """Calls `model_fn` with the arguments its signature takes: `labels` only if it takes them (a ValueError when
    labels are given to a model_fn without a `labels` argument), `mode` and `config` only if it names them,
    `params` always."""
    args = function_utils.fn_args(model_fn)
    kwargs: Dict[str, Any] = {}
    if "labels" in args:
        kwargs["labels"] = labels
    elif labels is not None:
        raise ValueError("model_fn does not take labels, but input_fn returns labels.")
    if "mode" in args:
        kwargs["mode"] = mode
    if "config" in args:
        kwargs["config"] = config
    kwargs["params"] = params
    return model_fn(features=features, **kwargs)
