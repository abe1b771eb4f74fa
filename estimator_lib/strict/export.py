"""Strict-mode check of an exported SavedModel: its `serve,tpu` meta graph must run the model on the TPU.

Self-contained (reads `saved_model.pb` as a protocol buffer, loads no graph), so export code can call it
right after `export_saved_model`. A `serve,tpu` graph without `TPUPartitionedCall` would run the whole model
on the TPU host's CPU.
"""

from __future__ import annotations

import os
from typing import List, Tuple

import tensorflow as tf
from tensorflow.core.protobuf import saved_model_pb2

from estimator_lib.strict.findings import FAILS, Finding

TPU_TAGS = frozenset({"serve", "tpu"})
TPU_CALL_OP = "TPUPartitionedCall"
EXPORT_CHECKS = (
    "export: a meta graph tagged 'serve,tpu' exists",
    f"export: the 'serve,tpu' graph runs the model through {TPU_CALL_OP}",
)


def read_saved_model(export_dir: str) -> saved_model_pb2.SavedModel:
    """Parses `export_dir`/saved_model.pb (local or gs://)."""
    path = os.path.join(export_dir, "saved_model.pb")
    if not tf.io.gfile.exists(path):
        raise FileNotFoundError(f"{export_dir!r} holds no saved_model.pb; give the timestamped export directory")
    proto = saved_model_pb2.SavedModel()
    with tf.io.gfile.GFile(path, "rb") as f:
        proto.ParseFromString(f.read())
    return proto


def graph_op_types(meta_graph) -> set:
    """Op types in a meta graph's graph and in every function of its function library."""
    graph = meta_graph.graph_def
    types = {node.op for node in graph.node}
    for function in graph.library.function:
        types.update(node.op for node in function.node_def)
    return types


def export_findings(export_dir: str) -> Tuple[Tuple[str, ...], List[Finding]]:
    """(checks run, findings) for the SavedModel in `export_dir`."""
    proto = read_saved_model(export_dir)
    tag_sets = [frozenset(m.meta_info_def.tags) for m in proto.meta_graphs]
    tpu_graphs = [m for m, tags in zip(proto.meta_graphs, tag_sets) if tags == TPU_TAGS]
    if not tpu_graphs:
        found = sorted(",".join(sorted(tags)) for tags in tag_sets)
        message = (
            f"SavedModel {export_dir!r} has no meta graph tagged 'serve,tpu' (found {found}): TPU serving finds no "
            "TPU graph. Fix: export with TPUEstimator(export_to_tpu=True), as estimator_lib.estimator.build_estimator "
            "does"
        )
        return EXPORT_CHECKS[:1], [Finding("export", "serve,tpu", FAILS, message)]
    if TPU_CALL_OP not in graph_op_types(tpu_graphs[0]):
        message = (
            f"the 'serve,tpu' meta graph of {export_dir!r} has no {TPU_CALL_OP} op (neither in its graph nor in its "
            "function library): the model would run on the TPU host's CPU. Fix: export with "
            "export_saved_model_api_version=1, where TPUEstimator wraps the model in TPUPartitionedCall; with "
            "version 2 the model_fn must call tf.compat.v1.tpu.inference_on_tpu (or tpu.rewrite inside "
            "TPUPartitionedCall) in PREDICT mode when params['use_tpu'] is true"
        )
        return EXPORT_CHECKS, [Finding("export", TPU_CALL_OP, FAILS, message)]
    return EXPORT_CHECKS, []
