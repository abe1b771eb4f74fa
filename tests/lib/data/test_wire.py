"""The one writer of `tf.train.Example` bytes equals protobuf's own serializer, value by value and per column."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from estimator_lib.data import wire
from estimator_lib.schema import KEY_FEATURE, LABEL_KEY

INT64S = [[], [0], [1], [127], [128], [300], [-1], [-128], [2**63 - 1], [-(2**63)], [5, -7, 2**40, 0, 2**35 + 1]]
FLOATS = [[], [0.0], [-0.0], [1.5], [-2.25], [3.4028234e38], [-3.4028234e38], [1e-45], [0.1, -7.0, 12345.678]]
BYTES = [[], [b""], [b"a"], ["é Émile".encode()], [b"x" * 200], [b"y" * 20_000], [b"a", b"", b"bc"]]


def _proto(kind: str, values) -> tf.train.Feature:
    return {
        "int64": lambda: tf.train.Feature(int64_list=tf.train.Int64List(value=values)),
        "float": lambda: tf.train.Feature(float_list=tf.train.FloatList(value=values)),
        "bytes": lambda: tf.train.Feature(bytes_list=tf.train.BytesList(value=values)),
    }[kind]()


def _ours(kind: str, values) -> bytes:
    return {"int64": wire.int64_feature, "float": wire.float_feature, "bytes": wire.bytes_feature}[kind](values)


CASES = [("int64", v) for v in INT64S] + [("float", v) for v in FLOATS] + [("bytes", v) for v in BYTES]


@pytest.mark.parametrize("kind, values", CASES, ids=[f"{k}-{i}" for i, (k, _) in enumerate(CASES)])
def test_a_feature_is_protobufs_bytes(kind, values):
    assert _ours(kind, values) == _proto(kind, values).SerializeToString()


@pytest.mark.parametrize("kind, values", CASES, ids=[f"{k}-{i}" for i, (k, _) in enumerate(CASES)])
def test_an_example_of_one_feature_is_protobufs_bytes(kind, values):
    expected = tf.train.Example(features=tf.train.Features(feature={"f_x": _proto(kind, values)}))
    assert wire.example_of({"f_x": _ours(kind, values)}) == expected.SerializeToString()


def test_an_example_of_many_features_is_protobufs_deterministic_bytes():
    features = {
        KEY_FEATURE: ("bytes", [b"row-17"]),
        "f_bill": ("float", [39.1]),
        "f_island": ("bytes", [b"Biscoe"]),
        "f_mass": ("float", []),
        "f_counts": ("int64", [3, -1, 2**62]),
        LABEL_KEY: ("int64", [2]),
    }
    proto = {k: _proto(*v) for k, v in features.items()}
    ours = wire.example_of({k: _ours(*v) for k, v in features.items()})
    expected = tf.train.Example(features=tf.train.Features(feature=proto))
    assert ours == expected.SerializeToString(deterministic=True)
    assert len(ours) == 142 and ours[:3] == b"\n\x8b\x01"  # a body of 139 bytes: a two-byte length


def test_keys_that_prefix_others_are_written_in_key_order_and_parse_alike():
    # protobuf's deterministic order puts "f_a_b_2" before "f_a_b"; ours is plain key order. Same message.
    features = {"f_a_b": [1.0], "f_a_b_2": [2.0]}
    ours = wire.example_of({k: wire.float_feature(v) for k, v in features.items()})
    proto = tf.train.Example(features=tf.train.Features(feature={k: _proto("float", v) for k, v in features.items()}))
    assert ours.index(b"f_a_b\x12") < ours.index(b"f_a_b_2")
    assert tf.train.Example.FromString(ours) == proto


def test_an_empty_example_and_varints():
    assert wire.example([]) == tf.train.Example(features=tf.train.Features()).SerializeToString() == b"\n\x00"
    assert wire.varint(0) == b"\x00" and wire.varint(127) == b"\x7f" and wire.varint(128) == b"\x80\x01"
    assert wire.varint(300) == b"\xac\x02"
    assert wire.varint(-1) == b"\xff" * 9 + b"\x01"  # int64 two's complement: always 10 bytes
    assert wire.varint(2**63 - 1) == b"\xff" * 8 + b"\x7f"


def test_a_float_beyond_float32_is_refused():
    with pytest.raises(OverflowError):
        wire.float_feature([1e39])
    with pytest.raises(OverflowError):
        wire.float_entry("f_x", -3.5e38)


def test_entry_pieces_equal_whole_entries():
    for key in ("f_x", "f_" + "k" * 150):
        for value in (0.0, -1.25, 3.0e38):
            assert wire.float_entry(key, value) == wire.entry(key, wire.float_feature([value]))
    for key in ("", "k", "ключ", "z" * 300):
        assert wire.key_entry(key) == wire.entry(KEY_FEATURE, wire.bytes_feature([key.encode()]))
    assert wire.text_entry("f_c", "Dream") == wire.entry("f_c", wire.bytes_feature([b"Dream"]))
    assert wire.class_entry(2) == wire.entry(LABEL_KEY, wire.int64_feature([2]))
    assert wire.example_head(300) == b"\n\xac\x02"


def test_column_pieces_equal_per_value_pieces():
    xs = np.array([1.5, -2.0, 0.0, 7.25], "<f4")
    ys = np.array([3.0, 4.0, 5.0, 6.0], "<f4")
    present_x, present_y = np.array([True, False, True, True]), np.array([True, True, False, True])
    keys = ["a", "row-2", "", "ключ"]
    texts = ["Biscoe", None, "Dream", "Biscoe"]
    block = wire.numeric_block(
        [wire.float_entry_prefix("f_x"), wire.float_entry_prefix("f_y")], [xs, ys], [present_x, present_y]
    )
    rows = wire.examples([wire.key_entries(keys), block, wire.text_entries("f_z", texts)])
    for i in range(4):
        features = {KEY_FEATURE: wire.bytes_feature([keys[i].encode()])}
        if present_x[i]:
            features["f_x"] = wire.float_feature([float(xs[i])])
        if present_y[i]:
            features["f_y"] = wire.float_feature([float(ys[i])])
        if texts[i] is not None:
            features["f_z"] = wire.bytes_feature([texts[i].encode()])
        assert rows[i] == wire.example_of(features), i
    assert tf.train.Example.FromString(rows[1]).features.feature["f_y"].float_list.value == [4.0]
    assert sorted(tf.train.Example.FromString(rows[1]).features.feature) == [KEY_FEATURE, "f_y"]
