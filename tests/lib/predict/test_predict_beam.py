"""Batch prediction on Apache Beam (DirectRunner): byte-identical to `predict_from_saved_model`, manifest
included, for several shard counts, passthrough columns, keys and a batch that spans two files."""

from __future__ import annotations

import os

import pytest
import synthetic
from file_trees import tree

pytest.importorskip("apache_beam")

from estimator_lib import estimator, storage  # noqa: E402
from estimator_lib.config import JobConfig, ModelConfig, TPUSettings, TrainingConfig  # noqa: E402
from estimator_lib.export import export_model  # noqa: E402
from estimator_lib.predict import PredictionError, predict_from_saved_model, verify_output  # noqa: E402
from estimator_lib.predict import beam as beam_predict  # noqa: E402

B = 8


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("beam-predict"))
    schema = synthetic.make_schema("multiclass")
    train_pattern, _ = synthetic.write_dataset(
        os.path.join(root, "train"), synthetic.make_rows(64, seed=3, task="multiclass"), schema
    )
    job = JobConfig(
        tpu=TPUSettings(iterations_per_loop=10),
        training=TrainingConfig(train_batch_size=16, predict_batch_size=B, train_steps=20, save_checkpoints_steps=20),
        model=ModelConfig(family="linear"),
    )
    estimator.train(job, schema, train_pattern, os.path.join(root, "model"))
    export = export_model(job, schema, os.path.join(root, "model"), os.path.join(root, "export"))
    rows = synthetic.make_rows(7 * B + 3, seed=11, task="multiclass")  # two files: a batch spans their end
    pattern, _ = synthetic.write_dataset(os.path.join(root, "rows"), rows, schema, shards=2)
    return export.export_dir, schema, pattern, root


@pytest.mark.parametrize("num_shards, passthrough, count", [(1, (), None), (3, ("colour", "x-2"), 59)])
def test_beam_output_is_byte_identical_to_in_process(exported, tmp_path, num_shards, passthrough, count):
    export_dir, schema, pattern, _ = exported
    kwargs = dict(batch_size=B, num_shards=num_shards, passthrough=passthrough, num_examples=count)
    here = predict_from_saved_model(export_dir, schema, pattern, str(tmp_path / "inprocess"), **kwargs)
    there = beam_predict.predict_from_saved_model(export_dir, schema, pattern, str(tmp_path / "beam"), **kwargs)

    assert tree(str(tmp_path / "beam")) == tree(str(tmp_path / "inprocess"))  # manifest.json included
    assert there.manifest == here.manifest and there.count == here.count == 59
    verify_output(str(tmp_path / "beam"))


def test_more_shards_than_rows_gives_the_same_empty_shards(exported, tmp_path):
    export_dir, schema, _, root = exported
    pattern, _ = synthetic.write_dataset(
        os.path.join(root, "few"), synthetic.make_rows(2, seed=5, task="multiclass"), schema
    )
    predict_from_saved_model(export_dir, schema, pattern, str(tmp_path / "a"), batch_size=B, num_shards=4)
    beam_predict.predict_from_saved_model(export_dir, schema, pattern, str(tmp_path / "b"), batch_size=B, num_shards=4)
    assert tree(str(tmp_path / "b")) == tree(str(tmp_path / "a"))


def test_a_wrong_num_examples_publishes_nothing(exported, tmp_path):
    export_dir, schema, pattern, _ = exported
    out = str(tmp_path / "out")
    with pytest.raises(PredictionError, match="num_examples=60 but the inputs hold 59 records"):
        beam_predict.predict_from_saved_model(export_dir, schema, pattern, out, batch_size=B, num_examples=60)
    assert not storage.is_committed(out)
