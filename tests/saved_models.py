"""Damaged copies of a SavedModel: for the export verification's messages, and a tampered variable for the serving
check."""

from __future__ import annotations

import os
import shutil
from typing import Callable

import tensorflow as tf
from tensorflow.core.protobuf import saved_model_pb2


def damaged_copy(export_dir: str, directory: str, edit: Callable[[saved_model_pb2.SavedModel], None]) -> str:
    """Copies `export_dir` to `directory/copy`, with `edit` applied to its saved_model.pb; returns the copy."""
    copy = os.path.join(directory, "copy")
    shutil.copytree(export_dir, copy)
    proto = saved_model_pb2.SavedModel()
    with open(os.path.join(copy, "saved_model.pb"), "rb") as f:
        proto.ParseFromString(f.read())
    edit(proto)
    with open(os.path.join(copy, "saved_model.pb"), "wb") as f:
        f.write(proto.SerializeToString())
    return copy


def tampered(export_dir: str, directory: str, variable: str, delta: float) -> str:
    """A copy of the export with `delta` added to the first element of `variable`, the other variables kept."""
    copy = os.path.join(directory, "tampered")
    shutil.copytree(export_dir, copy)
    prefix = os.path.join(copy, "variables", "variables")
    values = {name: tf.train.load_variable(prefix, name) for name, _ in tf.train.list_variables(prefix)}
    values[variable] = values[variable].copy()
    values[variable].reshape(-1)[0] += delta
    with tf.Graph().as_default(), tf.compat.v1.Session() as session:
        saved = {name: tf.compat.v1.Variable(value, name=f"v{i}") for i, (name, value) in enumerate(values.items())}
        session.run(tf.compat.v1.global_variables_initializer())
        tf.compat.v1.train.Saver(var_list=saved).save(session, prefix, write_meta_graph=False, write_state=False)
    return copy
