"""`distribution.profile_split`: exact statistics of a small split, bounded memory (an evenly spaced sample of
the numeric values) for a large one, exact counts in both; `distribution.profile_values` gives the same profile
from the values written, without reading them back."""

from __future__ import annotations

import collections

import numpy as np
import pytest
import tensorflow as tf

from estimator_lib.data import distribution, records
from estimator_lib.schema import CATEGORICAL, NUMERIC, FeatureSpec, LabelSpec, Schema

SCHEMA = Schema(
    (
        FeatureSpec("size", "f_size", NUMERIC, mean=0.0, std=1.0, min=0.0, max=1.0),
        FeatureSpec("colour", "f_colour", CATEGORICAL, value_type="string", vocabulary=("blue", "red")),
    ),
    LabelSpec("label", "classification", classes=("no", "yes")),
)


def _rows(n: int):
    """Row i: size i (missing when i % 7 == 3), colour red for even i, blue for odd, missing when i % 11 == 5."""
    for i in range(n):
        yield {
            "size": None if i % 7 == 3 else float(i),
            "colour": None if i % 11 == 5 else ("red" if i % 2 == 0 else "blue"),
            "label": "yes",
        }


def _write(tmp_path, n: int, shards: int = 2):
    """Round-robin shards as prepare writes them; returns the file names in shard order and the rows in that
    order (shard 0's rows first)."""
    rows = list(_rows(n))
    files = [str(tmp_path / f"train-{k}.tfrecord") for k in range(shards)]
    for k, name in enumerate(files):
        with tf.io.TFRecordWriter(name) as writer:
            for i in range(k, n, shards):
                writer.write(records.encode_example(rows[i], SCHEMA, key=str(i)).SerializeToString())
    in_file_order = [rows[i] for k in range(shards) for i in range(k, n, shards)]
    return files, in_file_order


def test_a_split_under_the_sample_size_is_profiled_from_every_value(tmp_path):
    files, rows = _write(tmp_path, 500)
    profile = distribution.profile_split(files, SCHEMA, 500)
    sizes = np.array([r["size"] for r in rows if r["size"] is not None], np.float64)
    size = profile["features"]["size"]
    assert "sample_every" not in size
    assert (size["missing"], size["present"]) == (500 - len(sizes), len(sizes))
    assert size["mean"] == float(sizes.mean()) and size["std"] == float(sizes.std())
    assert size["percentiles"] == [float(v) for v in np.percentile(sizes, np.arange(101))]
    colour = profile["features"]["colour"]
    colours = [r["colour"] for r in rows]
    assert colour["counts"] == {"red": colours.count("red"), "blue": colours.count("blue")}
    assert colour["missing"] == colours.count(None)


def test_a_split_over_the_sample_size_keeps_every_kth_present_value_and_exact_counts(tmp_path, monkeypatch):
    monkeypatch.setattr(distribution, "SAMPLE_ROWS", 40)
    monkeypatch.setattr(distribution, "_BATCH", 16)  # samples that straddle batches
    files, rows = _write(tmp_path, 500)
    profile = distribution.profile_split(files, SCHEMA, 500)
    present = np.array([r["size"] for r in rows if r["size"] is not None], np.float64)
    sample = present[::13]  # ceil(500 / 40) = 13
    size = profile["features"]["size"]
    assert size["sample_every"] == 13
    assert (size["missing"], size["present"]) == (500 - len(present), len(present))  # every record counted
    assert size["mean"] == float(sample.mean())
    assert size["percentiles"] == [float(v) for v in np.percentile(sample, np.arange(101))]
    colours = [r["colour"] for r in rows]
    assert profile["features"]["colour"]["counts"] == {"red": colours.count("red"), "blue": colours.count("blue")}
    assert profile["rows"] == 500


def test_a_row_count_that_disagrees_with_the_shards_is_an_error(tmp_path):
    files, _ = _write(tmp_path, 30)
    with pytest.raises(AssertionError, match="hold 30 records, not the 31 written"):
        distribution.profile_split(files, SCHEMA, 31)


@pytest.mark.parametrize("shards", [1, 3])
def test_the_profile_of_the_values_written_equals_the_profile_read_back(tmp_path, shards):
    n = 500
    files, _ = _write(tmp_path, n, shards)
    rows = list(_rows(n))  # input order; the shards hold them in another order
    sizes = np.array([np.nan if r["size"] is None else r["size"] for r in rows], np.float32)
    colours = collections.Counter(r["colour"] for r in rows if r["colour"] is not None)
    missing = [int(np.isnan(sizes).sum()), n - sum(colours.values())]
    found = distribution.profile_values(SCHEMA, {0: sizes}, {1: colours}, missing, n)
    assert found == distribution.profile_split(files, SCHEMA, n)


def test_the_profile_of_the_values_written_defers_to_the_read_back_when_they_do_not_suffice():
    sizes, colours = np.zeros(4, np.float32), collections.Counter({"red": 3})
    assert distribution.profile_values(SCHEMA, {0: sizes}, {1: colours}, [0, 1], 4) is not None
    assert distribution.profile_values(SCHEMA, None, {1: colours}, [0, 1], 4) is None  # not gathered
    assert distribution.profile_values(SCHEMA, {0: sizes}, {1: colours}, [0, 0], 4) is None  # counts cut short
    big = distribution.SAMPLE_ROWS + 1  # no sample: the values written give every percentile exactly
    found = distribution.profile_values(SCHEMA, {0: np.zeros(big, np.float32)}, {1: colours}, [0, big - 3], big)
    assert "sample_every" not in found["features"]["size"] and found["features"]["size"]["present"] == big
