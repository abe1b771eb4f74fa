"""model/outputs.py: the prediction row's keys per task and the host-side padding filter on edge cases
(all padding, one row, multi-column outputs, nothing at all). The basic order checks live in
tests/lib/predict/test_batch.py."""

from __future__ import annotations

import numpy as np
import pytest
import synthetic

from estimator_lib.model.outputs import PredictionError, output_keys, real_rows
from estimator_lib.schema import INDEX_FEATURE, PADDING_FEATURE


def batch(index, padding, k=3):
    index = np.array(index, np.int32)
    return {
        INDEX_FEATURE: index,
        PADDING_FEATURE: np.array(padding, np.float32),
        "class_ids": index * 10,
        "probabilities": np.stack([index + j / 10 for j in range(k)], axis=1).astype(np.float32),
    }


def test_output_keys_per_task():
    assert output_keys(synthetic.make_schema("binary")) == ("class_ids", "probabilities")
    assert output_keys(synthetic.make_schema("multiclass")) == ("class_ids", "probabilities")
    assert output_keys(synthetic.make_schema("regression")) == ("predictions",)


def test_rows_of_every_rank_are_filtered_together():
    (got,) = list(real_rows(iter([batch([0, 1, 2, 3], [0, 0, 1, 1])]), count=2))
    assert set(got) == {"class_ids", "probabilities"}
    assert got["class_ids"].tolist() == [0, 10]
    np.testing.assert_array_equal(got["probabilities"], np.float32([[0, 0.1, 0.2], [1, 1.1, 1.2]]))


def test_a_whole_real_batch_is_passed_through_unsliced():
    whole = batch([0, 1], [0, 0])
    (got,) = list(real_rows(iter([whole]), count=2))
    assert got["probabilities"] is whole["probabilities"] and got["class_ids"] is whole["class_ids"]


def test_an_all_padding_batch_yields_nothing():
    got = list(real_rows(iter([batch([0], [0]), batch([1, 2], [1, 1])]), count=1))
    assert [g["class_ids"].tolist() for g in got] == [[0]]


def test_no_rows_and_no_batches():
    assert list(real_rows(iter([]), count=0)) == []
    assert list(real_rows(iter([batch([0, 1], [1, 1])]), count=0)) == []
    with pytest.raises(PredictionError, match="the model returned 0 real rows for 1 input rows"):
        list(real_rows(iter([]), count=1))


def test_a_real_row_past_the_count_is_refused():
    with pytest.raises(PredictionError) as e:
        list(real_rows(iter([batch([0, 1], [0, 0])]), count=1))
    assert str(e.value) == (
        "prediction batch out of order: expected real rows 0..1 then padding (index >= 1), got "
        "example_index=[0, 1] is_padding=[0.0, 0.0]"
    )


def test_a_skipped_row_in_a_later_batch_is_refused():
    rows = real_rows(iter([batch([0, 1], [0, 0]), batch([3, 4], [0, 0])]), count=5)
    assert next(rows)["class_ids"].tolist() == [0, 10]
    with pytest.raises(PredictionError, match=r"expected real rows 2\.\.3 then padding \(index >= 5\)"):
        next(rows)
