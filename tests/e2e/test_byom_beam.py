"""End to end: the example CNN of examples/ through `tpu-pipeline run-local --engine beam` as docs/byom.md runs
it: batch prediction on Apache Beam's DirectRunner (its workers import the model_fn from `--code`), its output
byte for byte (every shard and the manifest) the in-process engine's on the run's own dataset and model."""

from __future__ import annotations

import os

import pytest
from file_trees import tree
from test_byom_pipeline import make_records, run_local, user_args

from components.records import JOB_CONFIG_FILE
from estimator_lib import engine, storage
from estimator_lib.config import JobConfig
from estimator_lib.config.beam import INPROCESS, BeamConfig

pytestmark = pytest.mark.slow
pytest.importorskip("apache_beam")


def test_a_user_model_batch_predicted_on_beam_gives_the_in_process_bytes(tmp_path):
    root = make_records("image_cnn", str(tmp_path / "records"))
    data = os.path.join(root, "predict.tfrecord.gz")
    args = user_args("image_cnn", "digits_cnn.model:model_fn", root, "label")
    args += ["--hparams", "units=16", "--predict-data", data, "--set", "training.train_steps=100"]
    args += ["--set", "blessing.comparison_metric=accuracy", "--baseline", "none", "--engine", "beam"]
    summary = run_local(str(tmp_path / "out"), *args)
    assert summary["status"] == "ok" and summary["config"]["engine"] == "beam", summary.get("error")
    assert summary["predictions"]["count"] == 297

    artifacts = summary["artifacts"]  # the batch predict stage's own call, in-process
    job = JobConfig.from_json(storage.read_text(storage.join(artifacts["train"], JOB_CONFIG_FILE)))
    in_process = str(tmp_path / "in-process")
    source = engine.open_dataset(artifacts["prepare"])
    source.predict(job, artifacts["train"], data, in_process, engine=INPROCESS, beam=BeamConfig())
    assert tree(artifacts["batch_predict"]) == tree(in_process)
