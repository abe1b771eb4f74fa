"""Warm start: initialise a fresh model's trainable variables from a checkpoint or a SavedModel.

Used through `TPUEstimatorSpec(scaffold_fn=...)`: on a TPU, `init_from_checkpoint` must run inside the
scaffold function (it is called on the host when the session's Scaffold is built); on CPU it may run directly.
Once the model directory has a checkpoint of its own, the estimator restores that instead (a resumed run
keeps its progress), because restore runs after these initialisers.

Embedding tables are mapped by value, not by position, when the source is an export of this pipeline (its
metadata holds the schema it was trained with): a category the source knew keeps its trained row wherever its
id is now, a category it did not know gets a fresh row (the table's initialiser), and the out-of-vocabulary
rows keep theirs. So a vocabulary that grew, or was ordered differently, never loads one category's embedding
into another's row; the mapping is logged. Every other variable must have the same name and shape.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from typing import Callable, Dict, List, Optional, Tuple

import numpy as np
import tensorflow as tf

from estimator_lib import storage
from estimator_lib.data.retrain import EXPORT_METADATA
from estimator_lib.model import checkpoints
from estimator_lib.schema import FeatureSpec, Schema

log = logging.getLogger(__name__)


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


def source_schema(path: str) -> Optional[Schema]:
    """The schema an export of this pipeline was trained with (its metadata); None for other sources."""
    metadata = storage.join(path, EXPORT_METADATA)
    if not storage.exists(metadata):
        return None
    return Schema.from_dict(json.loads(storage.read_text(metadata))["schema"])


def row_map(old: FeatureSpec, new: FeatureSpec) -> List[int]:
    """For each id of `new` (vocabulary, then out-of-vocabulary buckets), the row of `old` holding the same
    value, or -1 for a value `old` does not know."""
    index = {value: i for i, value in enumerate(old.vocabulary)}
    rows = [index.get(value, -1) for value in new.vocabulary]
    rows += [len(old.vocabulary) + j if j < old.num_oov_buckets else -1 for j in range(new.num_oov_buckets)]
    return rows


def row_maps(old: Optional[Schema], new: Optional[Schema]) -> Dict[str, Tuple[List[int], int]]:
    """{feature key: (row map, rows in the source)} for the categorical features both schemas share whose ids
    differ; logs what each keeps and adds."""
    if old is None or new is None:
        return {}
    old_features = {f.key: f for f in old.categorical}
    maps = {}
    for f in new.categorical:
        source = old_features.get(f.key)
        if source is None or (source.vocabulary, source.num_oov_buckets) == (f.vocabulary, f.num_oov_buckets):
            continue
        rows = row_map(source, f)
        known = rows[: len(f.vocabulary)]
        fresh = [f.vocabulary[i] for i, r in enumerate(known) if r < 0]
        moved = sum(1 for i, r in enumerate(known) if r >= 0 and r != i)
        log.info(
            "warm start, %s: %d of %d values keep their trained rows (%d at a new id), fresh rows for %s",
            f.name,
            sum(r >= 0 for r in known),
            len(f.vocabulary),
            moved,
            fresh or "none",
        )
        maps[f.key] = (rows, source.num_buckets)
    return maps


@dataclasses.dataclass(frozen=True)
class _Remap:
    variable: tf.Variable
    rows: np.ndarray  # int [new rows]: the source row of each row, -1 for a fresh one
    source: np.ndarray  # the source table [source rows, ...]


def _plan(
    checkpoint: str, variables: List[tf.Variable], maps: Dict[str, Tuple[List[int], int]]
) -> Tuple[Dict[str, tf.Variable], List[_Remap]]:
    """(variables loaded as they are, embedding tables mapped by value); refuses what fits neither."""
    available = dict(tf.train.list_variables(checkpoint))
    problems, assignment, remaps = [], {}, []
    for var in variables:
        name = var.name.split(":")[0]
        shape, there = var.shape.as_list(), list(available.get(name, []))
        mapped = maps.get(name.rsplit("/", 1)[-1])
        if name not in available:
            problems.append(f"{name} is not in the checkpoint")
        elif mapped and shape[0] == len(mapped[0]) and there[0] == mapped[1] and shape[1:] == there[1:]:
            remaps.append(_Remap(var, np.asarray(mapped[0]), tf.train.load_variable(checkpoint, name)))
        elif there != shape:
            problems.append(f"{name} has shape {shape} here but {there} there")
        else:
            assignment[name] = var
    if problems:
        raise ValueError(
            f"cannot warm start from {checkpoint!r}: "
            + "; ".join(problems)
            + ". The model family, its hyperparameters or the schema (features, vocabularies) changed; "
            "warm start needs the same architecture"
        )
    return assignment, remaps


def _remap_init_fn(remaps: List[_Remap]) -> Optional[Callable]:
    """A Scaffold `init_fn` writing the source rows over the freshly initialised tables (it runs only when the
    session starts without a checkpoint of the model's own, like the other initialisers). Its ops are built
    here, before the graph is finalised."""
    if not remaps:
        return None
    ops = []
    for remap in remaps:
        placeholder = tf.compat.v1.placeholder(remap.variable.dtype.base_dtype, remap.variable.shape)
        ops.append((remap, tf.identity(remap.variable), placeholder, remap.variable.assign(placeholder)))

    def init_fn(scaffold: tf.compat.v1.train.Scaffold, session: tf.compat.v1.Session) -> None:
        for remap, read, placeholder, assign in ops:
            value = session.run(read)
            known = remap.rows >= 0
            value[known] = remap.source[remap.rows[known]]
            session.run(assign, {placeholder: value})

    return init_fn


def warm_start_scaffold_fn(path: str, schema: Optional[Schema] = None) -> Callable[[], tf.compat.v1.train.Scaffold]:
    """A `scaffold_fn` that initialises every trainable variable from `path` (call it inside model_fn, after the
    model's variables exist); `schema` is the model's, whose embedding tables are mapped by value from the
    source's (see the module docstring)."""
    checkpoint = resolve_checkpoint(path)
    maps = row_maps(source_schema(path), schema)
    assignment, remaps = _plan(checkpoint, tf.compat.v1.trainable_variables(), maps)

    def scaffold_fn() -> tf.compat.v1.train.Scaffold:
        if assignment:
            tf.compat.v1.train.init_from_checkpoint(checkpoint, assignment)
        return tf.compat.v1.train.Scaffold(init_fn=_remap_init_fn(remaps))

    return scaffold_fn
