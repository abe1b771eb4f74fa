"""Model families behind one interface: build logits from TPU-ready features.

A family is a function `logits_fn(features, ctx) -> logits`:
  features: {feature key: float32 [B] (numeric, raw units) or int32 [B] (categorical id)}, plus `is_padding`
    float32 [B] in eval/predict (ignore it: metrics and prediction handle padding).
  ctx: a `ModelContext` (schema, model config, mode, width of the logits).
  logits: float32 [B, ctx.num_logits].

It runs inside the TPU computation, so it must use static shapes and TPU-supported ops only. Built-in
families: "linear" and "dnn". A user's own family is named as "package.module:function" in
`ModelConfig.family` and loaded by `load_logits_fn`; `estimator_lib.model.families.layers` has the helpers the
built-in families use (normalised numerics, embeddings, dense layers).
"""

from __future__ import annotations

import importlib
from typing import Callable, Dict

import tensorflow as tf

from estimator_lib.config import ModelConfig
from estimator_lib.model.families.dnn import dnn_logits
from estimator_lib.model.families.layers import ModelContext
from estimator_lib.model.families.linear import linear_logits

LogitsFn = Callable[[Dict[str, tf.Tensor], ModelContext], tf.Tensor]

BUILTIN: Dict[str, LogitsFn] = {"linear": linear_logits, "dnn": dnn_logits}

__all__ = ["BUILTIN", "LogitsFn", "ModelContext", "load_logits_fn"]


def load_logits_fn(model: ModelConfig) -> LogitsFn:
    """Returns the logits function for `model.family`: a built-in name or "package.module:function"."""
    if model.family in BUILTIN:
        return BUILTIN[model.family]
    module_name, _, attr = model.family.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise ValueError(
            f"model.family={model.family!r}: cannot import module {module_name!r} ({e}); make it importable "
            "(install it, or put it on PYTHONPATH) or use 'linear'/'dnn'"
        ) from e
    fn = getattr(module, attr, None)
    if not callable(fn):
        raise ValueError(
            f"model.family={model.family!r}: module {module_name!r} has no function {attr!r}; it must define "
            f"def {attr}(features, ctx) -> logits [batch, ctx.num_logits]"
        )
    return fn
