"""SavedModel prediction (`predict.saved_model`): argument checks before any work, the manifest's record, and
`predicted_batches` pairing each batch's host columns with the signature's outputs. The byte-for-byte
comparison with the checkpoint and Beam paths lives in tests/lib/export/test_export.py and
test_predict_beam.py (both with a real export)."""

from __future__ import annotations

import numpy as np
import pytest
import synthetic
import tensorflow as tf

from estimator_lib.data import records
from estimator_lib.predict import predict_from_saved_model
from estimator_lib.predict.columns import Column
from estimator_lib.predict.saved_model import (
    check_saved_model_arguments,
    predicted_batches,
    saved_model_provenance,
)
from estimator_lib.schema import KEY_FEATURE


def test_saved_model_path_rejects_a_bad_num_examples_before_loading(tmp_path):
    with pytest.raises(ValueError, match=r"num_examples=-1 must be a non-negative integer \(prepare's row count\)"):
        predict_from_saved_model(
            str(tmp_path / "no-export"),
            synthetic.make_schema("multiclass"),
            "x",
            str(tmp_path / "o"),
            num_examples=-1,
        )


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(batch_size=0), r"batch_size=0 must be a positive integer, e.g. 256"),
        (dict(passthrough=("weight",)), r"passthrough column 'weight' is not in the schema"),
        (dict(num_shards=True), r"num_shards=True must be a positive integer, e.g. 1"),
        (dict(num_examples=2.0), r"num_examples=2.0 must be a non-negative integer"),
    ],
)
def test_arguments_are_checked_naming_the_setting(kwargs, message):
    args = dict(batch_size=256, passthrough=(), num_shards=1, num_examples=None)
    with pytest.raises(ValueError, match=message):
        check_saved_model_arguments(synthetic.make_schema("multiclass"), **{**args, **kwargs})


def test_arguments_give_the_passthrough_columns_and_provenance_names_them():
    columns = check_saved_model_arguments(synthetic.make_schema("multiclass"), 4, ["colour"], 2, 0)
    assert columns == (Column("colour", "f_colour", "string"),)
    assert saved_model_provenance("gs://b/export/1", ["a.tfrecord"], columns, 4) == {
        "source": {"kind": "saved_model", "export_dir": "gs://b/export/1"},
        "inputs": ["a.tfrecord"],
        "passthrough": ["colour"],
        "predict_batch_size": 4,
    }


class DoublingSignature:
    """Stands in for a loaded export: a `predict` signature over serialized Examples, predictions = 2 * "x 1".
    Only the signature's contract matters here; real exports are predicted in test_export.py."""

    def __init__(self):
        spec = {"f_x_1": tf.io.FixedLenFeature([], tf.float32)}
        self.signature = lambda examples: {
            "predictions": 2.0 * tf.io.parse_example(examples, spec)["f_x_1"][:, None],
            "logits": tf.zeros([tf.shape(examples)[0], 1]),  # not an output row's: left out
        }


def test_predicted_batches_pair_each_batch_of_host_columns_with_its_outputs(tmp_path):
    schema = synthetic.make_schema("regression")
    rows = [{"x 1": float(i), "x-2": None, "colour": "red", "target": 1.0} for i in range(5)]
    path = str(tmp_path / "rows.tfrecord")
    records.write_tfrecord(path, [records.encode_example(r, schema, key=f"k{i}") for i, r in enumerate(rows)])
    columns = (Column("x-2", "f_x_2", "float"),)

    batches = tf.data.TFRecordDataset([path]).batch(2)
    got = list(predicted_batches(batches, DoublingSignature(), columns, schema).as_numpy_iterator())

    assert [host[KEY_FEATURE].tolist() for host, _ in got] == [[b"k0", b"k1"], [b"k2", b"k3"], [b"k4"]]
    assert [outputs["predictions"][:, 0].tolist() for _, outputs in got] == [[0.0, 2.0], [4.0, 6.0], [8.0]]
    assert all(set(outputs) == {"predictions"} for _, outputs in got)
    assert [host["x-2"][1].tolist() for host, _ in got] == [[False, False], [False, False], [False]]
    np.testing.assert_array_equal(got[0][0]["x-2"][0], np.float32([0.0, 0.0]))
