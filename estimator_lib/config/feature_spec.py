"""The feature spec of a user's TFRecords: what each `tf.train.Example` feature holds (TensorFlow-free).

A user who brings a `model_fn` of their own brings records of their own, described by a JSON file:

    {"image":  {"dtype": "float32", "shape": [28, 28, 1]},
     "tokens": {"dtype": "int64", "shape": [128], "var_len": true, "default": 0},
     "jpeg":   {"dtype": "bytes", "shape": [32, 32, 3], "decode": "image"},
     "pixels": {"dtype": "bytes", "shape": [784], "decode": "raw", "raw_dtype": "uint8"},
     "label":  {"dtype": "int64", "shape": []}}

- `dtype`: float32, int64 or int32 (stored as an int64 list; cast to int32 for the TPU), or bytes.
- `shape`: the static shape of one record's value ([] a scalar). The record holds exactly prod(shape) values.
- `var_len`: the record holds 0 to shape[0] values of a rank-1 feature; it is padded with `default` to
  shape[0]. A longer list is an error, never cut.
- `decode: "image"`: a bytes feature holding one encoded image (PNG, JPEG, GIF, BMP), decoded in the input
  pipeline (on the host) to float32 of `shape` [height, width, channels] (values 0-255, unscaled).
- `decode: "raw"`: a bytes feature holding prod(shape) values of `raw_dtype` as raw little-endian bytes
  (`tf.io.decode_raw`), given to the model as `raw_dtype` of `shape`.

`label` names the feature that is the label (it is given to the model_fn as `labels`, not in `features`);
`key`, optionally, a bytes or int64 scalar feature that names each record in the predictions (by default a
prediction row carries the record's index in the input); it is not given to the model_fn.

How the model_fn gets its input is said by the spec file's other form, {"features": {...}, OPTIONS}:
- `"single_input": NAME`: `features` is that feature's tensor itself, not a dict (it must be the only feature
  besides the label and the key);
- `"label_in_features": true`: the label stays in `features` (under its name) and `labels` is None.

Loaded and checked here, before any stage starts: a wrong spec names the feature and what was expected.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Mapping
from typing import Any, Optional

from estimator_lib.schema import INDEX_FEATURE, PADDING_FEATURE

# dtype -> the tf.train.Feature list that holds it on the wire.
WIRE_LISTS = {"float32": "float_list", "int64": "int64_list", "int32": "int64_list", "bytes": "bytes_list"}
IMAGE, RAW = "image", "raw"
DECODERS = (IMAGE, RAW)
# raw_dtype -> bytes per value (`tf.io.decode_raw`'s numeric types, little-endian).
RAW_DTYPES = {"uint8": 1, "int8": 1, "int16": 2, "float16": 2, "int32": 4, "float32": 4, "int64": 8, "float64": 8}
_KEYS = {"dtype", "shape", "var_len", "default", "decode", "raw_dtype"}
# The spec file's object form: {"features": {...}, "single_input": NAME, "label_in_features": true}.
FEATURES_KEY = "features"
_SPEC_KEYS = {FEATURES_KEY, "single_input", "label_in_features"}
# The row markers the eval and predict inputs add to the features: not feature names.
SLICE_FEATURE = "slice_ids"  # a sliced evaluation's row marker (`model.user.model_fn`)
RESERVED_NAMES = (PADDING_FEATURE, INDEX_FEATURE, SLICE_FEATURE)


class FeatureSpecError(ValueError):
    """A feature spec that cannot describe records: the message names the spec, the feature and the fix."""


@dataclasses.dataclass(frozen=True)
class Feature:
    """One feature of the records.

    Attributes:
      name: the feature's key in the `tf.train.Example`.
      dtype: "float32", "int64", "int32" or "bytes".
      shape: the static shape of one record's value; () for a scalar.
      var_len: rank 1, 0 to shape[0] values per record, padded with `default`.
      default: the padding value of a var_len feature.
      decode: "image" for an encoded image held as bytes (decoded to float32 `shape`), "raw" for raw bytes
        (decoded to `raw_dtype` of `shape`); None otherwise.
      raw_dtype: the values' dtype in raw bytes (`decode` "raw" only).
    """

    name: str
    dtype: str
    shape: tuple[int, ...] = ()
    var_len: bool = False
    default: float = 0
    decode: Optional[str] = None
    raw_dtype: Optional[str] = None

    @property
    def size(self) -> int:
        """Values one record holds on the wire (at most, when var_len; 1 bytes value when decoded)."""
        return 1 if self.decode else math.prod(self.shape)

    @property
    def raw_bytes(self) -> int:
        """The length of a raw feature's bytes: prod(shape) values of raw_dtype."""
        return math.prod(self.shape) * RAW_DTYPES[self.raw_dtype or ""]

    @property
    def wire_list(self) -> str:
        return WIRE_LISTS[self.dtype]

    @property
    def tensor_dtype(self) -> str:
        """The dtype the model sees: decoded images are float32, raw bytes their raw_dtype."""
        if self.decode == RAW:
            return str(self.raw_dtype)
        return "float32" if self.decode else self.dtype

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"dtype": self.dtype, "shape": list(self.shape)}
        if self.var_len:
            out.update(var_len=True, default=self.default)
        if self.decode:
            out["decode"] = self.decode
        if self.raw_dtype:
            out["raw_dtype"] = self.raw_dtype
        return out


def _feature(source: str, name: str, entry: Any) -> Feature:
    where = f"{source}: feature {name!r}"
    if not isinstance(entry, Mapping):
        raise FeatureSpecError(
            f'{where}: expected an object like {{"dtype": "float32", "shape": [784]}}, got {entry!r}'
        )
    unknown = sorted(set(entry) - _KEYS)
    if unknown:
        raise FeatureSpecError(f"{where}: unknown key(s) {unknown}; allowed: {sorted(_KEYS)}")
    dtype = entry.get("dtype")
    if dtype not in WIRE_LISTS:
        raise FeatureSpecError(f"{where}: dtype {dtype!r} is not one of {sorted(WIRE_LISTS)}")
    shape = entry.get("shape", [])
    if not isinstance(shape, list) or not all(isinstance(d, int) and not isinstance(d, bool) and d > 0 for d in shape):
        raise FeatureSpecError(f"{where}: shape {shape!r} must be a list of positive integers ([] for a scalar)")
    var_len, decode = entry.get("var_len", False), entry.get("decode")
    if var_len is not False and (var_len is not True or len(shape) != 1):
        raise FeatureSpecError(f"{where}: var_len is for rank-1 features with their padded length as shape: [N]")
    _check_decode(where, dtype, shape, decode, entry.get("raw_dtype"), var_len)
    if dtype == "bytes" and not decode and (shape or var_len):
        raise FeatureSpecError(
            f"{where}: a bytes feature is a scalar ([]) unless it is decoded (decode: image, or decode: raw)"
        )
    default = entry.get("default", 0)
    if not isinstance(default, (int, float)) or isinstance(default, bool):
        raise FeatureSpecError(f"{where}: default {default!r} must be a number")
    return Feature(name, dtype, tuple(shape), bool(var_len), default, decode, entry.get("raw_dtype"))


def _check_decode(where: str, dtype: str, shape: list, decode: Any, raw_dtype: Any, var_len: Any) -> None:
    if decode is not None and (decode not in DECODERS or dtype != "bytes" or var_len):
        raise FeatureSpecError(
            f'{where}: decode must be "image" or "raw", on a bytes feature of fixed length (no var_len)'
        )
    if decode == IMAGE and len(shape) != 3:
        raise FeatureSpecError(f'{where}: decode "image" needs the shape [height, width, channels], got {shape}')
    if decode == RAW and raw_dtype not in RAW_DTYPES:
        raise FeatureSpecError(
            f'{where}: decode "raw" needs raw_dtype, the values\' dtype in the bytes: one of {sorted(RAW_DTYPES)}'
            f", got {raw_dtype!r}"
        )
    if decode != RAW and raw_dtype is not None:
        raise FeatureSpecError(f'{where}: raw_dtype is for raw bytes: add "decode": "raw", or remove raw_dtype')


@dataclasses.dataclass(frozen=True)
class FeatureSpec:
    """The records' features, the label among them (or None: records without labels), the key (or None), and how
    the model_fn gets them.

    Attributes:
      features: every feature of the records.
      label: the feature that is the label; given to the model_fn as `labels` (or in `features`, below).
      key: a scalar feature naming each record in the predictions; never given to the model_fn.
      source: where the spec was read (messages name it).
      single_input: a feature the model_fn gets as `features` itself (a tensor, not a dict): the only feature
        besides the label and the key.
      label_in_features: the label stays in `features` under its name and the model_fn's `labels` is None (as
        TPUEstimator passes them when an input_fn yields one dict).
    """

    features: tuple[Feature, ...]
    label: Optional[str] = None
    key: Optional[str] = None
    source: str = "feature spec"
    single_input: Optional[str] = None
    label_in_features: bool = False

    def __post_init__(self):
        names = [f.name for f in self.features]
        if not names:
            raise FeatureSpecError(f"{self.source}: no feature; give at least one")
        reserved = sorted(set(names) & set(RESERVED_NAMES))
        if reserved:
            raise FeatureSpecError(
                f"{self.source}: feature name(s) {reserved} are the pipeline's row markers; rename them in the spec "
                "(the spec's names are the records' feature keys)"
            )
        for role, name in (("label", self.label), ("key", self.key)):
            if name is not None and name not in names:
                raise FeatureSpecError(f"{self.source}: the {role} {name!r} is not a feature; the features are {names}")
        if self.key is not None and self.feature(self.key).shape:
            raise FeatureSpecError(f"{self.source}: the key {self.key!r} must be a scalar (shape [])")
        self._check_model_input()

    def _check_model_input(self) -> None:
        inputs = [f.name for f in self.inputs]
        if self.single_input is not None and [self.single_input] != inputs:
            raise FeatureSpecError(
                f"{self.source}: single_input {self.single_input!r} must be the only feature the model_fn gets "
                f"besides the label and the key; it gets {inputs}: drop single_input (features stay a dict), or "
                "describe only that feature"
            )
        if self.label_in_features and self.label is None:
            raise FeatureSpecError(f"{self.source}: label_in_features is true, but no label is named: give --label")
        if self.label_in_features and self.single_input is not None:
            raise FeatureSpecError(
                f"{self.source}: single_input and label_in_features exclude each other: a single tensor cannot carry "
                "the label; keep one of them"
            )

    @classmethod
    def from_json(
        cls, data: Any, label: Optional[str] = None, key: Optional[str] = None, source: str = "feature spec"
    ) -> FeatureSpec:
        """The spec of a JSON object: {name: {"dtype": ..., "shape": [...], ...}}, or {"features": {that},
        "single_input": NAME, "label_in_features": BOOL} (both options optional); raises FeatureSpecError."""
        if not isinstance(data, Mapping):
            raise FeatureSpecError(
                f"{source}: expected a JSON object {{feature: {{dtype, shape}}}}, got {type(data).__name__}"
            )
        options: Mapping[str, Any] = {}
        if _is_object_form(data):
            data, options = data[FEATURES_KEY], data
            unknown = sorted(set(options) - _SPEC_KEYS)
            if unknown:
                raise FeatureSpecError(
                    f"{source}: unknown key(s) {unknown}; allowed beside features: "
                    f"{sorted(_SPEC_KEYS - {FEATURES_KEY})}"
                )
        single_input, in_features = options.get("single_input"), options.get("label_in_features", False)
        if single_input is not None and not isinstance(single_input, str):
            raise FeatureSpecError(f"{source}: single_input {single_input!r} must be a feature's name")
        if not isinstance(in_features, bool):
            raise FeatureSpecError(f"{source}: label_in_features {in_features!r} must be true or false")
        features = tuple(_feature(source, str(name), entry) for name, entry in data.items())
        return cls(features, label or None, key or None, source, single_input, in_features)

    @classmethod
    def read(cls, path: str, label: Optional[str] = None, key: Optional[str] = None) -> FeatureSpec:
        """The spec in the JSON file at `path` (local; the CLI reads it before anything starts)."""
        try:
            with open(path, encoding="utf-8") as f:
                data = json.load(f)
        except OSError as e:
            raise FeatureSpecError(f"--feature-spec {path}: cannot be read ({e.strerror})") from None
        except json.JSONDecodeError as e:
            raise FeatureSpecError(f"--feature-spec {path}: not valid JSON ({e})") from None
        return cls.from_json(data, label, key, source=path)

    def to_json(self) -> dict[str, Any]:
        """What `from_json` reads back: the features as {name: {...}}, in the object form when an option is set."""
        features = {f.name: f.to_json() for f in self.features}
        options = self.options
        return {FEATURES_KEY: features, **options} if options else features

    @property
    def options(self) -> dict[str, Any]:
        """How the model_fn gets its input, as the spec file gives it: {} when features are a dict without the
        label."""
        out: dict[str, Any] = {}
        if self.single_input is not None:
            out["single_input"] = self.single_input
        if self.label_in_features:
            out["label_in_features"] = True
        return out

    def feature(self, name: str) -> Feature:
        return next(f for f in self.features if f.name == name)

    @property
    def scalars(self) -> tuple[str, ...]:
        """The names of the features holding one plain value per record (shape [], not decoded): what an
        evaluation may be sliced by (`blessing.slices`)."""
        return tuple(f.name for f in self.features if f.shape == () and not f.var_len and not f.decode)

    @property
    def inputs(self) -> tuple[Feature, ...]:
        """The model's input features: all but the label and the key (what serving requires)."""
        return tuple(f for f in self.features if f.name not in (self.label, self.key))

    @property
    def model_features(self) -> tuple[Feature, ...]:
        """The features the model_fn gets in `features`: the inputs, and the label when `label_in_features`."""
        return self.inputs + ((self.feature(str(self.label)),) if self.label_in_features else ())


def _is_object_form(data: Mapping[str, Any]) -> bool:
    """Whether `data` is {"features": {name: {...}}, ...} rather than the flat {name: {...}} (where a feature
    named "features" has a "dtype" text)."""
    features = data.get(FEATURES_KEY)
    return isinstance(features, Mapping) and not isinstance(features.get("dtype"), str)
