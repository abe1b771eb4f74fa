"""The feature spec of a user's TFRecords: what each `tf.train.Example` feature holds (TensorFlow-free).

A user who brings a `model_fn` of their own brings records of their own, described by a JSON file:

    {"image":  {"dtype": "float32", "shape": [28, 28, 1]},
     "tokens": {"dtype": "int64", "shape": [128], "var_len": true, "default": 0},
     "jpeg":   {"dtype": "bytes", "shape": [32, 32, 3], "decode": "image"},
     "label":  {"dtype": "int64", "shape": []}}

- `dtype`: float32, int64 or int32 (stored as an int64 list; cast to int32 for the TPU), or bytes.
- `shape`: the static shape of one record's value ([] a scalar). The record holds exactly prod(shape) values.
- `var_len`: the record holds 0 to shape[0] values of a rank-1 feature; it is padded with `default` to
  shape[0]. A longer list is an error, never cut.
- `decode: "image"`: a bytes feature holding one encoded image (PNG, JPEG, GIF, BMP), decoded in the input
  pipeline (on the host) to float32 of `shape` [height, width, channels] (values 0-255, unscaled).

`label` names the feature that is the label (it is given to the model_fn as `labels`, not in `features`);
`key`, optionally, a bytes or int64 scalar feature that names each record in the predictions (by default a
prediction row carries the record's index in the input); it is not given to the model_fn.

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
DECODERS = ("image",)
_KEYS = {"dtype", "shape", "var_len", "default", "decode"}
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
      decode: "image" for an encoded image held as bytes (decoded to float32 `shape`); None otherwise.
    """

    name: str
    dtype: str
    shape: tuple[int, ...] = ()
    var_len: bool = False
    default: float = 0
    decode: Optional[str] = None

    @property
    def size(self) -> int:
        """Values one record holds on the wire (at most, when var_len; 1 encoded image when decoded)."""
        return 1 if self.decode else math.prod(self.shape)

    @property
    def wire_list(self) -> str:
        return WIRE_LISTS[self.dtype]

    @property
    def tensor_dtype(self) -> str:
        """The dtype the model sees: decoded images are float32."""
        return "float32" if self.decode else self.dtype

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"dtype": self.dtype, "shape": list(self.shape)}
        if self.var_len:
            out.update(var_len=True, default=self.default)
        if self.decode:
            out["decode"] = self.decode
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
    if decode is not None and (decode not in DECODERS or dtype != "bytes" or len(shape) != 3):
        raise FeatureSpecError(
            f'{where}: decode must be "image", on a bytes feature of shape [height, width, channels]'
        )
    if dtype == "bytes" and not decode and (shape or var_len):
        raise FeatureSpecError(f"{where}: a bytes feature is a scalar ([]) unless it is decoded (decode: image)")
    default = entry.get("default", 0)
    if not isinstance(default, (int, float)) or isinstance(default, bool):
        raise FeatureSpecError(f"{where}: default {default!r} must be a number")
    return Feature(name, dtype, tuple(shape), bool(var_len), default, decode)


@dataclasses.dataclass(frozen=True)
class FeatureSpec:
    """The records' features, the label among them (or None: records without labels), and the key (or None)."""

    features: tuple[Feature, ...]
    label: Optional[str] = None
    key: Optional[str] = None
    source: str = "feature spec"

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

    @classmethod
    def from_json(
        cls, data: Any, label: Optional[str] = None, key: Optional[str] = None, source: str = "feature spec"
    ) -> FeatureSpec:
        """The spec of a JSON object {name: {"dtype": ..., "shape": [...], ...}}; raises FeatureSpecError."""
        if not isinstance(data, Mapping):
            raise FeatureSpecError(
                f"{source}: expected a JSON object {{feature: {{dtype, shape}}}}, got {type(data).__name__}"
            )
        features = tuple(_feature(source, str(name), entry) for name, entry in data.items())
        return cls(features, label or None, key or None, source)

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
        return {f.name: f.to_json() for f in self.features}

    def feature(self, name: str) -> Feature:
        return next(f for f in self.features if f.name == name)

    @property
    def scalars(self) -> tuple[str, ...]:
        """The names of the features holding one plain value per record (shape [], not decoded): what an
        evaluation may be sliced by (`blessing.slices`)."""
        return tuple(f.name for f in self.features if f.shape == () and not f.var_len and not f.decode)

    @property
    def inputs(self) -> tuple[Feature, ...]:
        """The features the model_fn gets in `features`: all but the label and the key."""
        return tuple(f for f in self.features if f.name not in (self.label, self.key))
