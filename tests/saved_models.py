"""Damaged copies of a SavedModel, for the export verification's messages."""

from __future__ import annotations

import os
import shutil
from typing import Callable

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
