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
            r"feature 'x': decode must be \"image\" or \"raw\", on a bytes feature of fixed length",
        ),
        (
            {"dtype": "bytes", "shape": [64], "decode": "image"},
            r"feature 'x': decode \"image\" needs the shape \[height, width, channels\], got \[64\]",
        ),
        (
            {"dtype": "bytes", "shape": [64], "decode": "raw"},
            r"feature 'x': decode \"raw\" needs raw_dtype, the values' dtype in the bytes: one of \['float16', "
            r"'float32', 'float64', 'int16', 'int32', 'int64', 'int8', 'uint8'\], got None",
        ),
        (
            {"dtype": "bytes", "shape": [64], "decode": "raw", "raw_dtype": "bfloat16"},
            r"feature 'x': decode \"raw\" needs raw_dtype.*got 'bfloat16'",
        ),
        (
            {"dtype": "bytes", "shape": [4], "var_len": True, "decode": "raw", "raw_dtype": "uint8"},
            r"feature 'x': decode must be \"image\" or \"raw\", on a bytes feature of fixed length \(no var_len\)",
        ),
        (
            {"dtype": "bytes", "shape": [8, 8, 3], "decode": "image", "raw_dtype": "uint8"},
            r"feature 'x': raw_dtype is for raw bytes: add \"decode\": \"raw\", or remove raw_dtype",
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


RAW = {"image_raw": {"dtype": "bytes", "shape": [8, 8], "decode": "raw", "raw_dtype": "uint8"}}
LABEL = {"label": {"dtype": "int64", "shape": []}}


@pytest.mark.parametrize("raw_dtype, length", [("uint8", 64), ("int32", 256), ("float32", 256), ("float64", 512)])
def test_raw_bytes_hold_prod_shape_values_of_their_dtype_which_the_model_sees(raw_dtype, length):
    spec = FeatureSpec.from_json({"x": {**RAW["image_raw"], "raw_dtype": raw_dtype}, **LABEL}, label="label")
    x = spec.feature("x")
    assert (x.size, x.raw_bytes, x.tensor_dtype, x.wire_list) == (1, length, raw_dtype, "bytes_list")
    assert x.to_json() == {"dtype": "bytes", "shape": [8, 8], "decode": "raw", "raw_dtype": raw_dtype}
    assert FeatureSpec.from_json(spec.to_json(), "label") == spec
    assert spec.scalars == ("label",)  # a decoded feature is not a slice


def test_the_object_form_gives_a_single_input_or_keeps_the_label_in_the_features_and_round_trips():
    single = FeatureSpec.from_json({"features": {**RAW, **LABEL}, "single_input": "image_raw"}, "label", source="s")
    assert (single.single_input, single.label_in_features) == ("image_raw", False)
    assert single.to_json() == {"features": {**RAW, **LABEL}, "single_input": "image_raw"}
    assert FeatureSpec.from_json(single.to_json(), "label", source="s") == single
    kept = FeatureSpec.from_json({"features": SPEC, "label_in_features": True}, "label", "id")
    assert [f.name for f in kept.inputs] == ["image", "tokens", "jpeg"]
    assert [f.name for f in kept.model_features] == ["image", "tokens", "jpeg", "label"]
    assert kept.to_json() == {"features": SPEC, "label_in_features": True}
    assert FeatureSpec.from_json(kept.to_json(), "label", "id") == kept
    plain = FeatureSpec.from_json({"features": SPEC}, "label")  # the object form without options
    assert plain.to_json() == SPEC and plain == FeatureSpec.from_json(SPEC, "label")
    named = FeatureSpec.from_json({"features": {"dtype": "float32", "shape": [2]}, **LABEL}, "label")
    assert [f.name for f in named.inputs] == ["features"]  # the flat form may name a feature "features"


@pytest.mark.parametrize(
    "data, message",
    [
        (
            {"features": {**RAW, **LABEL, "extra": {"dtype": "float32"}}, "single_input": "image_raw"},
            r"single_input 'image_raw' must be the only feature the model_fn gets besides the label and the key; it "
            r"gets \['image_raw', 'extra'\]",
        ),
        (
            {"features": {**RAW, **LABEL}, "single_input": "label"},
            r"single_input 'label' must be the only feature the model_fn gets .* it gets \['image_raw'\]",
        ),
        ({"features": {**RAW, **LABEL}, "single_input": 3}, r"single_input 3 must be a feature's name"),
        ({"features": {**RAW, **LABEL}, "label_in_features": "yes"}, r"label_in_features 'yes' must be true or false"),
        (
            {"features": {**RAW, **LABEL}, "single_input": "image_raw", "label_in_features": True},
            r"single_input and label_in_features exclude each other: a single tensor cannot carry the label",
        ),
        (
            {"features": {**RAW, **LABEL}, "label": "label"},
            r"unknown key\(s\) \['label'\]; allowed beside features: \['label_in_features', 'single_input'\]",
        ),
    ],
)
def test_a_wrong_model_input_option_is_named(data, message):
    with pytest.raises(FeatureSpecError, match="^s.json: " + message):
        FeatureSpec.from_json(data, "label", source="s.json")


def test_label_in_features_needs_a_label():
    with pytest.raises(FeatureSpecError, match=r"^s: label_in_features is true, but no label is named: give --label"):
        FeatureSpec.from_json({"features": SPEC, "label_in_features": True}, source="s")
