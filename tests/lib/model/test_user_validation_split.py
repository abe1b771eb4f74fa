"""The validation split tuning carves from a user's prepared train records (`carve_validation`): the same
content-hash rule that splits eval off, the train records cut in two with nothing lost or repeated, the run's own
preparation untouched, and read back when carved already."""

from __future__ import annotations

import hashlib
import json
import os

import pytest
import tensorflow as tf

from estimator_lib.config import ConfigError, PrepareConfig
from estimator_lib.model.user.prepare import carve_validation, prepare_records

SPEC = {"x": {"dtype": "float32", "shape": []}, "label": {"dtype": "int64", "shape": []}}


def example(i: int) -> bytes:
    feature = {
        "x": tf.train.Feature(float_list=tf.train.FloatList(value=[float(i)])),
        "label": tf.train.Feature(int64_list=tf.train.Int64List(value=[i % 2])),
    }
    return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()


def records(paths) -> list:
    return [bytes(r) for r in tf.data.TFRecordDataset(list(paths)).as_numpy_iterator()]


def bucket(record: bytes) -> float:
    return int.from_bytes(hashlib.sha256(record).digest()[:8], "big") / 2.0**64


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("records")
    with tf.io.TFRecordWriter(str(root / "data.tfrecord")) as writer:
        for i in range(400):
            writer.write(example(i))
    (root / "spec.json").write_text(json.dumps(SPEC), encoding="utf-8")
    return root


def test_validation_is_the_next_share_of_the_hash_range_after_eval_and_the_rest_trains(data, tmp_path):
    config = PrepareConfig(data=(str(data / "data.tfrecord"),), label="label", feature_spec=str(data / "spec.json"))
    prepared = prepare_records(config, str(tmp_path / "prepared"))
    manifest = os.path.join(prepared.output_dir, "manifest.json")
    before = open(manifest, "rb").read()
    carved = carve_validation(prepared, str(tmp_path / "carved"))

    train, valid = records(carved.files("train")), records(carved.files("valid"))
    assert sorted(train + valid) == sorted(records(prepared.files("train")))  # nothing lost or repeated
    assert all(0.2 <= bucket(r) < 0.3 for r in valid) and all(bucket(r) >= 0.3 for r in train)  # eval: < 0.2
    assert carved.counts == {"train": len(train), "valid": len(valid)} and 20 < len(valid) < 60
    assert set(prepared.manifest["splits"]) == {"train", "eval"}  # the run's own preparation is unchanged
    assert open(manifest, "rb").read() == before
    assert carve_validation(prepared, str(tmp_path / "carved")) == carved  # read back, not carved again


def test_with_eval_records_of_their_own_validation_takes_the_first_share_of_the_range(data, tmp_path):
    path = str(data / "data.tfrecord")
    config = PrepareConfig(data=(path,), label="label", feature_spec=str(data / "spec.json"), eval_data=(path,))
    carved = carve_validation(prepare_records(config, str(tmp_path / "prepared")), str(tmp_path / "carved"))
    assert sorted(records(carved.files("valid"))) == sorted(r for r in records([path]) if bucket(r) < 0.1)


def test_a_validation_split_without_records_is_refused_naming_the_setting(data, tmp_path):
    config = PrepareConfig(data=(str(data / "data.tfrecord"),), label="label", feature_spec=str(data / "spec.json"))
    prepared = prepare_records(config, str(tmp_path / "prepared"))
    prepared.manifest["config"]["valid_fraction"] = 0.0
    with pytest.raises(ConfigError, match=r"^tuning a model_fn carves prepare.valid_fraction=0.0 of the 3\d\d train"):
        carve_validation(prepared, str(tmp_path / "carved"))
