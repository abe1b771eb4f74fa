"""Feature schema: original and safe names, types, vocabularies, statistics, parse specs.

The schema is the contract between preparation (which writes `tf.train.Example` TFRecords), the input
pipelines, the model and the serving receivers. It is written by `prepare` as JSON next to the data.

How a row is stored in a `tf.train.Example`:
  * numeric feature `key`: a float_list with one value; the feature is absent when the value is missing, and
    parsing fills in the training mean (missing is imputed, not malformed).
  * categorical feature `key`: a bytes_list with the value's canonical text ("3" for the integer 3); absent when
    missing, which maps to the out-of-vocabulary id.
  * `label`: int64 class index into `LabelSpec.classes` (classification) or float (regression).
  * `example_key`: bytes, the row's key (the user's key column, or one derived by preparation).

Feature names from users' data can hold spaces, punctuation or non-ASCII text; each feature keeps its original
`name` for people and gets a `key` made of [a-z0-9_] for TensorFlow (op names, signature inputs).
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
import unicodedata
from typing import Any, Dict, Iterable, Mapping, Optional, Sequence, Tuple

from estimator_lib import storage

# Reserved keys. Safe feature keys always start with "f_", so they can never collide with these.
KEY_FEATURE = "example_key"
LABEL_KEY = "label"
PADDING_FEATURE = "is_padding"
INDEX_FEATURE = "example_index"
CODES_FEATURE = (
    "skew_codes"  # the skew check's row columns (`predict.tally`), from the predict input to the predictions
)

NUMERIC = "numeric"
CATEGORICAL = "categorical"
CLASSIFICATION = "classification"
REGRESSION = "regression"


# Letters that NFKD does not decompose into ASCII.
_TRANSLITERATE = str.maketrans({"ß": "ss", "æ": "ae", "Æ": "AE", "ø": "o", "Ø": "O", "œ": "oe", "ł": "l", "đ": "d"})


class SchemaError(ValueError):
    """The schema, or data checked against it, is invalid; the message names the feature."""


def safe_key(name: str, taken: Iterable[str] = ()) -> str:
    """Returns a TensorFlow-safe key for a user's column name, unique among `taken`.

    >>> safe_key("Body Mass (g)")
    'f_body_mass_g'
    """
    folded = name.translate(_TRANSLITERATE)
    ascii_name = unicodedata.normalize("NFKD", folded).encode("ascii", "ignore").decode("ascii")
    base = "f_" + (re.sub(r"[^a-z0-9]+", "_", ascii_name.lower()).strip("_") or "feature")
    taken = set(taken)
    key, n = base, 2
    while key in taken:
        key, n = f"{base}_{n}", n + 1
    return key


@dataclasses.dataclass(frozen=True)
class FeatureSpec:
    """One input feature.

    Attributes:
      name: the column name in the user's data.
      key: the safe key used in TFRecords, tensors and signatures.
      kind: "numeric" or "categorical".
      value_type: the user's value type: "float" for numerics; "string" or "int" for categoricals.
      mean, std, min, max: statistics of the non-missing training values (numeric).
      vocabulary: known values in their canonical text form, most frequent first (categorical).
      num_oov_buckets: ids after the vocabulary for unknown and missing values (categorical).
      missing_count: rows of the statistics' split where the value was missing.
    """

    name: str
    key: str
    kind: str
    value_type: str = "float"
    mean: float = 0.0
    std: float = 1.0
    min: float = 0.0
    max: float = 0.0
    vocabulary: Tuple[str, ...] = ()
    num_oov_buckets: int = 1
    missing_count: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "vocabulary", tuple(self.vocabulary))
        if self.kind not in (NUMERIC, CATEGORICAL):
            raise SchemaError(f"feature {self.name!r}: kind={self.kind!r} must be 'numeric' or 'categorical'")
        if not re.fullmatch(r"f_[a-z0-9_]+", self.key):
            raise SchemaError(f"feature {self.name!r}: key={self.key!r} must match f_[a-z0-9_]+ (use safe_key())")
        if self.kind == NUMERIC:
            if self.value_type != "float":
                raise SchemaError(f"numeric feature {self.name!r}: value_type must be 'float'")
            if not (math.isfinite(self.mean) and math.isfinite(self.std) and self.std > 0):
                raise SchemaError(
                    f"numeric feature {self.name!r}: mean={self.mean} and std={self.std} must be finite with "
                    "std > 0 (a constant column has std 0: drop it or set std to 1)"
                )
        else:
            if self.value_type not in ("string", "int"):
                raise SchemaError(f"categorical feature {self.name!r}: value_type must be 'string' or 'int'")
            if self.num_oov_buckets < 1:
                raise SchemaError(f"categorical feature {self.name!r}: num_oov_buckets must be >= 1")
            if len(set(self.vocabulary)) != len(self.vocabulary):
                raise SchemaError(f"categorical feature {self.name!r}: vocabulary has duplicate values")

    @property
    def num_buckets(self) -> int:
        """Size of the id space: vocabulary plus out-of-vocabulary buckets (categorical)."""
        return len(self.vocabulary) + self.num_oov_buckets


@dataclasses.dataclass(frozen=True)
class LabelSpec:
    """The label column.

    Attributes:
      name: the column name in the user's data.
      task: "classification" or "regression".
      classes: class names in index order (classification); 2 classes make a binary task.
      mean, std, min, max: statistics of the training labels (regression); the model learns a standardised
        target and reports values in the original units.
    """

    name: str
    task: str
    classes: Tuple[str, ...] = ()
    mean: float = 0.0
    std: float = 1.0
    min: float = 0.0
    max: float = 0.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "classes", tuple(self.classes))
        if self.task == CLASSIFICATION:
            if len(self.classes) < 2:
                raise SchemaError(
                    f"label {self.name!r} has {len(self.classes)} class(es) {list(self.classes)}; classification "
                    "needs at least 2 (check the label column, or use task='regression')"
                )
            if len(set(self.classes)) != len(self.classes):
                raise SchemaError(f"label {self.name!r}: classes have duplicates")
        elif self.task == REGRESSION:
            if not (math.isfinite(self.mean) and math.isfinite(self.std) and self.std > 0):
                raise SchemaError(f"label {self.name!r}: regression mean/std must be finite with std > 0")
        else:
            raise SchemaError(f"label {self.name!r}: task={self.task!r} must be 'classification' or 'regression'")

    @property
    def num_classes(self) -> int:
        return len(self.classes)

    @property
    def head(self) -> str:
        """ "binary", "multiclass" or "regression": what the model's output layer and metrics are."""
        if self.task == REGRESSION:
            return "regression"
        return "binary" if self.num_classes == 2 else "multiclass"

    @property
    def num_logits(self) -> int:
        """Width of the logits: 1 for binary and regression, K for K-class classification."""
        return self.num_classes if self.head == "multiclass" else 1


@dataclasses.dataclass(frozen=True)
class Schema:
    """Features, label and key column of a prepared dataset."""

    features: Tuple[FeatureSpec, ...]
    label: LabelSpec
    key_column: Optional[str] = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "features", tuple(self.features))
        if not self.features:
            raise SchemaError("the schema has no feature: the data needs at least one column besides the label")
        for attr in ("key", "name"):
            values = [getattr(f, attr) for f in self.features]
            dupes = sorted({v for v in values if values.count(v) > 1})
            if dupes:
                raise SchemaError(f"feature {attr}s {dupes} appear more than once in the schema")
        if self.label.name in {f.name for f in self.features}:
            raise SchemaError(f"label {self.label.name!r} is also listed as a feature")

    # -- lookups ------------------------------------------------------------------------------------------
    def feature(self, name_or_key: str) -> FeatureSpec:
        """Finds a feature by original name or safe key; the error lists the known names."""
        for f in self.features:
            if name_or_key in (f.name, f.key):
                return f
        raise SchemaError(f"unknown feature {name_or_key!r}; the schema has: {[f.name for f in self.features]}")

    def select(self, names: Optional[Sequence[str]]) -> "Schema":
        """A schema restricted to `names` (original names or keys), in schema order; None keeps all."""
        if names is None:
            return self
        wanted = {self.feature(n).key for n in names}
        return dataclasses.replace(self, features=tuple(f for f in self.features if f.key in wanted))

    @property
    def numeric(self) -> Tuple[FeatureSpec, ...]:
        return tuple(f for f in self.features if f.kind == NUMERIC)

    @property
    def categorical(self) -> Tuple[FeatureSpec, ...]:
        return tuple(f for f in self.features if f.kind == CATEGORICAL)

    # -- JSON ---------------------------------------------------------------------------------------------
    def to_dict(self) -> Dict[str, Any]:
        return {
            "features": [_as_json(dataclasses.asdict(f)) for f in self.features],
            "label": _as_json(dataclasses.asdict(self.label)),
            "key_column": self.key_column,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Schema":
        try:
            return cls(
                features=tuple(FeatureSpec(**f) for f in data["features"]),
                label=LabelSpec(**data["label"]),
                key_column=data.get("key_column"),
            )
        except (KeyError, TypeError) as e:
            raise SchemaError(f"schema JSON is malformed: {e}") from e

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True, ensure_ascii=False)

    @classmethod
    def from_json(cls, text: str) -> "Schema":
        return cls.from_dict(json.loads(text))


def _as_json(d: Dict[str, Any]) -> Dict[str, Any]:
    return {k: list(v) if isinstance(v, tuple) else v for k, v in d.items()}


def read_schema(path: str) -> Schema:
    """Reads a schema JSON file from a local path or gs:// URI."""
    return Schema.from_json(storage.read_text(path))
