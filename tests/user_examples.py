"""The example user models of examples/ trained once for a test module: their records written by their
documented command, their feature spec read, their model_fn trained through `estimator_lib.model.user`."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from typing import Any, Dict

import repo

from estimator_lib.config import JobConfig
from estimator_lib.config.feature_spec import FeatureSpec
from estimator_lib.engine.user import UserModel, train


@dataclasses.dataclass(frozen=True)
class TrainedExample:
    root: str  # the records (train, eval, predict) and feature_spec.json
    job: JobConfig
    user: UserModel
    model_dir: str

    def records(self, name: str) -> str:
        return os.path.join(self.root, name)


def trained_example(example: str, model_fn: str, label: str, hparams: Dict[str, Any], job: JobConfig, root: str):
    """examples/<example>'s records in `root` (`make_records.py ROOT`, as documented), and its model trained."""
    code = os.path.join(repo.ROOT, "examples", example)
    subprocess.run([sys.executable, os.path.join(code, "make_records.py"), root], check=True)
    spec = FeatureSpec.read(os.path.join(root, "feature_spec.json"), label=label)
    user = UserModel(model_fn, spec, hparams, code_dir=code)
    model_dir = os.path.join(root, "model")
    train(job, user, os.path.join(root, "train.tfrecord"), model_dir)
    return TrainedExample(root, job, user, model_dir)
