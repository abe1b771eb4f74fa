"""`estimator_lib.config.feature_spec`: the JSON feature spec of a user's TFRecords, checked before anything runs."""

from __future__ import annotations

import json

import pytest

from estimator_lib.config.feature_spec import Feature, FeatureSpec, FeatureSpecError

SPEC = {
    "image": {"dtype": "float32", "shape": [28, 28, 1]},
    "tokens": {"dtype": "int32", "shape": [16], "var_len": True, "default": 0},
    "jpeg": {"dtype": "bytes", "shape": [8, 8, 3], "decode": "image"},
    "id": {"dtype": "bytes", "shape": []},
    "label": {"dtype": "int64", "shape": []},
}


def test_a_spec_reads_every_kind_of_feature_and_round_trips():
    spec = FeatureSpec.from_json(SPEC, label="label", key="id")
    assert spec.feature("image") == Feature("image", "float32", (28, 28, 1))
    assert spec.feature("tokens") == Feature("tokens", "int32", (16,), var_len=True, default=0)
    assert (spec.feature("image").size, spec.feature("tokens").size, spec.feature("jpeg").size) == (784, 16, 1)
    assert [f.wire_list for f in spec.features] == [
        "float_list",
        "int64_list",
        "bytes_list",
        "bytes_list",
        "int64_list",
    ]
    assert spec.feature("jpeg").tensor_dtype == "float32"
    assert [f.name for f in spec.inputs] == ["image", "tokens", "jpeg"]  # not the label, not the key
    assert FeatureSpec.from_json(spec.to_json(), "label", "id") == spec


def test_a_spec_file_is_read_and_a_bad_file_is_named(tmp_path):
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(SPEC))
    assert FeatureSpec.read(str(path), label="label").source == str(path)
    path.write_text("{not json")
    with pytest.raises(FeatureSpecError, match=rf"--feature-spec {path}: not valid JSON"):
        FeatureSpec.read(str(path))
    with pytest.raises(FeatureSpecError, match=r"--feature-spec /nowhere.json: cannot be read"):
        FeatureSpec.read("/nowhere.json")


@pytest.mark.parametrize(
    "entry, message",
    [
        (
            {"dtype": "float64", "shape": [3]},
            r"feature 'x': dtype 'float64' is not one of \['bytes', 'float32', 'int32', 'int64'\]",
        ),
        ({"dtype": "float32", "shape": [0]}, r"feature 'x': shape \[0\] must be a list of positive integers"),
        ({"dtype": "float32", "shape": "3"}, r"feature 'x': shape '3' must be a list of positive integers"),
        ({"dtype": "int64", "shape": [2, 2], "var_len": True}, r"feature 'x': var_len is for rank-1 features"),
        (
            {"dtype": "float32", "shape": [8, 8, 3], "decode": "image"},
            r"feature 'x': decode must be \"image\", on a bytes",
        ),
        ({"dtype": "bytes", "shape": [4]}, r"feature 'x': a bytes feature is a scalar"),
        (
            {"dtype": "int64", "shape": [4], "var_len": True, "default": "pad"},
            r"feature 'x': default 'pad' must be a number",
        ),
        ({"dtype": "int64", "size": 3}, r"feature 'x': unknown key\(s\) \['size'\]"),
        ([784], r"feature 'x': expected an object like"),
    ],
)
def test_a_wrong_feature_is_named_with_what_is_allowed(entry, message):
    with pytest.raises(FeatureSpecError, match="^spec.json: " + message):
        FeatureSpec.from_json({"x": entry}, source="spec.json")


def test_label_and_key_must_be_features_and_the_key_a_scalar():
    with pytest.raises(FeatureSpecError, match=r"the label 'target' is not a feature; the features are \['image'"):
        FeatureSpec.from_json(SPEC, label="target")
    with pytest.raises(FeatureSpecError, match=r"the key 'image' must be a scalar"):
        FeatureSpec.from_json(SPEC, key="image")
    with pytest.raises(FeatureSpecError, match=r"no feature; give at least one"):
        FeatureSpec.from_json({})
    with pytest.raises(FeatureSpecError, match=r"feature name\(s\) \['is_padding'\] are the pipeline's row markers"):
        FeatureSpec.from_json({**SPEC, "is_padding": {"dtype": "float32"}})
