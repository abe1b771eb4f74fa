"""Keys packed into int32 for the trip through the model: exact round trip, long keys flagged, bad input refused."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from estimator_lib.data import example_keys

KEYS = [b"", b"a", b"row-17", "ključ €".encode(), b"x" * 64, b"nul\0", b"\0", b"\0a\0\0", b"q" * 63 + b"\0", b'"\\\n']


def test_every_key_up_to_64_bytes_round_trips_exactly():
    packed = example_keys.encode(tf.constant(KEYS)).numpy()

    assert packed.shape == (len(KEYS), example_keys.WIDTH) and packed.dtype == np.int32
    keys, complete = example_keys.decode(packed)
    assert complete and list(keys) == KEYS
    assert packed[:, 0].tolist() == [len(k) for k in KEYS]


def test_a_longer_key_is_flagged_not_returned_truncated():
    packed = example_keys.encode(tf.constant([b"short", b"y" * 65])).numpy()

    keys, complete = example_keys.decode(packed)
    assert not complete and len(keys) == 0


def test_encode_keeps_the_static_batch_shape_tpus_need():
    @tf.function(input_signature=[tf.TensorSpec([8], tf.string)])
    def encode(keys):
        return example_keys.encode(keys)

    assert encode.get_concrete_function().output_shapes == tf.TensorShape([8, example_keys.WIDTH])


@pytest.mark.parametrize("bad", [np.zeros((2, 3), np.int32), np.zeros((2, example_keys.WIDTH), np.int64)])
def test_decode_refuses_arrays_that_are_not_packed_keys(bad):
    with pytest.raises(ValueError, match=r"packed keys must be int32 \[n, 17\]"):
        example_keys.decode(bad)
