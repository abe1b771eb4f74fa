"""Warm start: initialise a fresh model's trainable variables from a checkpoint or a SavedModel.

Used through `TPUEstimatorSpec(scaffold_fn=...)`: on a TPU, `init_from_checkpoint` must run inside the
scaffold function (it is called on the host when the session's Scaffold is built); on CPU it may run directly.
Once the model directory has a checkpoint of its own, the estimator restores that instead (a resumed run
keeps its progress), because restore runs after these initialisers.
"""

from __future__ import annotations

from typing import Callable, Dict, List

import tensorflow as tf

from estimator_lib.model import checkpoints


def resolve_checkpoint(path: str) -> str:
    """Returns the checkpoint prefix for a checkpoint prefix, a model directory (its best checkpoint, else its
    newest) or a SavedModel directory."""
    if tf.io.gfile.exists(f"{path}/saved_model.pb"):
        return f"{path}/variables/variables"
    if tf.io.gfile.isdir(path):
        latest = checkpoints.selected_checkpoint(path)
        if latest is None:
            raise FileNotFoundError(
                f"training.warm_start_from={path!r} is a directory with neither a SavedModel nor a checkpoint"
            )
        return latest
    if tf.io.gfile.exists(f"{path}.index"):
        return path
    raise FileNotFoundError(
        f"training.warm_start_from={path!r} does not exist; give a checkpoint prefix, a model directory "
        "or a SavedModel directory"
    )


def _assignment_map(checkpoint: str, variables: List[tf.Variable]) -> Dict[str, tf.Variable]:
    available = dict(tf.train.list_variables(checkpoint))
    problems, assignment = [], {}
    for var in variables:
        name = var.name.split(":")[0]
        if name not in available:
            problems.append(f"{name} is not in the checkpoint")
        elif list(available[name]) != var.shape.as_list():
            problems.append(f"{name} has shape {var.shape.as_list()} here but {list(available[name])} there")
        else:
            assignment[name] = var
    if problems:
        raise ValueError(
            f"cannot warm start from {checkpoint!r}: "
            + "; ".join(problems)
            + ". The model family, its hyperparameters or the schema (features, vocabularies) changed; "
            "warm start needs the same architecture"
        )
    return assignment


def warm_start_scaffold_fn(path: str) -> Callable[[], tf.compat.v1.train.Scaffold]:
    """A `scaffold_fn` that initialises every trainable variable from `path` (call it inside model_fn,
    after the model's variables exist)."""
    checkpoint = resolve_checkpoint(path)
    assignment = _assignment_map(checkpoint, tf.compat.v1.trainable_variables())

    def scaffold_fn() -> tf.compat.v1.train.Scaffold:
        tf.compat.v1.train.init_from_checkpoint(checkpoint, assignment)
        return tf.compat.v1.train.Scaffold()

    return scaffold_fn
