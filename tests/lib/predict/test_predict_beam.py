"""Batch prediction on Apache Beam (DirectRunner): byte-identical to `predict_from_saved_model`, manifest
included, for several shard counts, passthrough columns, keys and a batch that spans two files."""

from __future__ import annotations

import os

import numpy as np
import pytest
import synthetic
from file_trees import tree

pytest.importorskip("apache_beam")

from test_batch import B, trained, write_rows  # noqa: E402, F401  (the `trained` fixture)

from estimator_lib import storage  # noqa: E402
from estimator_lib.data import places  # noqa: E402
from estimator_lib.data.common import hash64  # noqa: E402
from estimator_lib.export import export_model  # noqa: E402
from estimator_lib.model import inputs  # noqa: E402
from estimator_lib.predict import (  # noqa: E402
    PredictionError,
    predict_from_saved_model,
    read_predictions,
    verify_output,
)
from estimator_lib.predict import beam as beam_predict  # noqa: E402
from estimator_lib.predict.origins import KeyedOrigins  # noqa: E402


@pytest.fixture(scope="module")
def exported(trained):  # noqa: F811 - the fixture imported from test_batch
    """test_batch's tiny linear model, exported; 59 rows in two files, so a batch spans their end."""
    export = export_model(trained.job, trained.schema, trained.model_dir, os.path.join(trained.root, "export"))
    pattern, _ = write_rows(trained, "beam-rows", 7 * B + 3)
    return export.export_dir, trained.schema, pattern, trained.root


@pytest.mark.determinism
@pytest.mark.parametrize("num_shards, passthrough, count", [(1, (), None), (3, ("colour", "x-2"), 59)])
def test_beam_output_is_byte_identical_to_in_process(exported, tmp_path, num_shards, passthrough, count):
    export_dir, schema, pattern, _ = exported
    kwargs = dict(batch_size=B, num_shards=num_shards, passthrough=passthrough, num_examples=count)
    here = predict_from_saved_model(export_dir, schema, pattern, str(tmp_path / "inprocess"), **kwargs)
    there = beam_predict.predict_from_saved_model(export_dir, schema, pattern, str(tmp_path / "beam"), **kwargs)

    assert tree(str(tmp_path / "beam")) == tree(str(tmp_path / "inprocess"))  # manifest.json included
    assert there.manifest == here.manifest and there.count == here.count == 59
    verify_output(str(tmp_path / "beam"))


@pytest.mark.determinism
def test_rows_placed_by_record_or_by_key_are_the_same_bytes_on_both_engines(exported, tmp_path):
    """TFRecord rows carry their file and record index; prepared rows their input file and line, by key (here
    a places table made by hand: "row-i" on line i + 2 of "in.csv", "row-5" without an entry)."""
    export_dir, schema, pattern, _ = exported
    in_process = predict_from_saved_model(export_dir, schema, pattern, str(tmp_path / "a"), batch_size=B)
    rows = read_predictions(in_process.output_dir)
    files = inputs.resolve_files(pattern)
    assert [(r["file"], r["record"]) for r in rows] == [(files[0], i) for i in range(30)] + [
        (files[1], i) for i in range(29)
    ]
    numbers = [int(r["key"][4:]) for r in rows]
    hashes = np.array([hash64(f"row-{i}") for i in numbers if i != 5], np.uint64)
    lines = np.uint32([i + 2 for i in numbers if i != 5])
    origins = KeyedOrigins(places.input_places(hashes, np.ones(len(hashes), bool), lines, [0]), ["in.csv"], True)
    kwargs = dict(batch_size=B, num_shards=2, origins=origins)
    predict_from_saved_model(export_dir, schema, pattern, str(tmp_path / "keyed"), **kwargs)
    beam_predict.predict_from_saved_model(export_dir, schema, pattern, str(tmp_path / "keyed-beam"), **kwargs)

    assert tree(str(tmp_path / "keyed-beam")) == tree(str(tmp_path / "keyed"))
    keyed = read_predictions(str(tmp_path / "keyed"))
    assert [(r["file"], r["line"]) for r in keyed] == [(None, None) if i == 5 else ("in.csv", i + 2) for i in numbers]


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
