"""Checks TFRecords of `tf.train.Example` against what their reader expects, and names the first record that does
not match: the file, the record's index, the feature, what was expected and what was found. Host-side Python.

One checker (`first_mismatch`), fed by a `Contract` from one of two builders: `schema_contract` (a built-in
model's prepared records against its `Schema`) and `spec_contract` (a user's records against its `FeatureSpec`).
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import math
from typing import Callable, Dict, FrozenSet, Iterator, Optional, Sequence, Tuple

import tensorflow as tf

from estimator_lib.config.feature_spec import IMAGE, RAW, Feature
from estimator_lib.data import records
from estimator_lib.schema import CLASSIFICATION, KEY_FEATURE, LABEL_KEY, NUMERIC, Schema

GZIP_MAGIC = b"\x1f\x8b"
NO_SUCH_FEATURE = "no such feature in the record"
_VALUE_TYPES = {"float_list": "float", "bytes_list": "string", "int64_list": "int64"}
ANOTHER_SCHEMA = (
    "; these are probably TFRecords prepared with another schema: use the schema they were prepared with, or "
    "prepare the rows again with this one (PrepareConfig.schema_uri)"
)


@dataclasses.dataclass(frozen=True)
class Expectation:
    """What a record must hold under `key`: `what` names it in a message, `check` returns what the record's
    value holds when that is not `expected` (None when it matches). A record without the key does not match
    when `required`; otherwise it may be a missing value (`first_mismatch`'s `lacked`)."""

    key: str
    what: str
    expected: str
    check: Callable[[tf.train.Feature], Optional[str]]
    required: bool = True


@dataclasses.dataclass(frozen=True)
class Contract:
    """Every record's expectations; `known` (when given): the keys a record may hold, so that one holding others
    lacks no feature without an error; `hint`: how to fix a mismatch, appended to its message."""

    expectations: Tuple[Expectation, ...]
    known: Optional[FrozenSet[str]] = None
    hint: str = ""


@dataclasses.dataclass(frozen=True)
class Mismatch:
    path: str
    index: int
    feature: str
    expected: str
    found: str
    what: str = ""
    hint: str = ""

    def message(self) -> str:
        what = f"{self.what}: " if self.what else ""
        return f"{self.path}: record {self.index}: {what}expected {self.expected}, found {self.found}{self.hint}"


def read_records(path: str, limit: Optional[int] = None) -> Iterator[bytes]:
    """The records of `path` in order (its first `limit` when given: read from their framing when the file is
    not compressed, `data.records.first_records`); a corrupt file raises DataError naming it."""
    with tf.io.gfile.GFile(path, "rb") as raw:
        compression = "GZIP" if raw.read(2) == GZIP_MAGIC else ""
    first = records.first_records(path, limit) if limit is not None and not compression else None
    if first is not None:
        yield from first
        return
    with records.named_data_loss([path]):
        for batch in tf.data.TFRecordDataset([path], compression_type=compression).batch(1024).as_numpy_iterator():
            yield from batch


def first_mismatch(
    files: Sequence[str], contract: Contract, per_file: Optional[int] = None, lacked: Optional[Dict[str, str]] = None
) -> Optional[Mismatch]:
    """The first record of `files` (in order; the first `per_file` of each file when given) that does not match
    `contract`, or None. `lacked` collects {key: the first file} of the keys a record lacked that are not
    `required`."""
    for path in files:
        for index, record in enumerate(itertools.islice(read_records(path, per_file), per_file)):
            try:
                held = tf.train.Example.FromString(record).features.feature
            except Exception:  # noqa: BLE001 - protobuf's DecodeError is not exported by a stable name
                return Mismatch(path, index, "(record)", "a serialized tf.train.Example", "bytes that do not parse")
            unknown = sorted(set(held) - contract.known) if contract.known is not None else []
            for expectation in contract.expectations:
                if expectation.key in held:
                    found = expectation.check(held[expectation.key])
                elif expectation.required or unknown:
                    keys = f" (the record holds key(s) {unknown}, which the schema does not know)" if unknown else ""
                    found = NO_SUCH_FEATURE + keys
                else:
                    found = None
                    if lacked is not None:
                        lacked.setdefault(expectation.key, path)
                if found is not None:
                    e = expectation
                    return Mismatch(path, index, e.key, e.expected, found, e.what, contract.hint)
    return None


# -- a built-in model's prepared records, against its schema -------------------------------------------------
def _held(value: tf.train.Feature) -> str:
    kind = value.WhichOneof("kind")
    if kind is None:
        return "an empty feature (no list set)"
    return f"{len(getattr(value, kind).value)} {_VALUE_TYPES[kind]} value(s) in {kind}"


def _one_value(kind: str, value: tf.train.Feature) -> Optional[str]:
    return None if value.WhichOneof("kind") == kind and len(getattr(value, kind).value) == 1 else _held(value)


def _prepared(key: str, what: str, kind: str, required: bool) -> Expectation:
    return Expectation(
        key, what, f"1 {_VALUE_TYPES[kind]} value in {kind}", functools.partial(_one_value, kind), required
    )


def schema_contract(schema: Schema) -> Contract:
    """One value of the schema's type per feature (a record may lack one: a missing value) and the label (always
    there), in records that hold no key the schema does not know."""
    features = [
        _prepared(
            f.key, f"feature {f.name!r} (key {f.key!r})", "float_list" if f.kind == NUMERIC else "bytes_list", False
        )
        for f in schema.features
    ]
    label_list = "int64_list" if schema.label.task == CLASSIFICATION else "float_list"
    label = _prepared(LABEL_KEY, f"label {schema.label.name!r} (key {LABEL_KEY!r})", label_list, True)
    known = frozenset(e.key for e in features) | {KEY_FEATURE, LABEL_KEY}
    return Contract((*features, label), known, ANOTHER_SCHEMA)


# -- a user's records, against its feature spec ----------------------------------------------------------------
def _expected(feature: Feature) -> str:
    if feature.decode == IMAGE:
        return "1 value in bytes_list (an encoded image)"
    if feature.decode == RAW:
        return (
            f"1 value in bytes_list of {feature.raw_bytes} bytes ({math.prod(feature.shape)} {feature.raw_dtype} "
            f"value(s), shape {list(feature.shape)}, decode raw)"
        )
    count = f"up to {feature.size}" if feature.var_len else str(feature.size)
    return f"{count} value(s) in {feature.wire_list} ({feature.dtype}, shape {list(feature.shape)})"


def _check(feature: Feature, value: tf.train.Feature) -> Optional[str]:
    """What `value` holds for `feature` when that does not match the spec; None when it matches."""
    kind = value.WhichOneof("kind")
    if kind is None:
        return "an empty feature (no list set)"
    count = len(getattr(value, kind).value)
    fits = count <= feature.size if feature.var_len else count == feature.size
    if kind != feature.wire_list or not fits:
        return f"{count} value(s) in {kind}"
    if feature.decode == RAW and len(value.bytes_list.value[0]) != feature.raw_bytes:
        return f"1 value in bytes_list of {len(value.bytes_list.value[0])} bytes"
    if feature.decode == IMAGE:
        try:
            image = tf.io.decode_image(value.bytes_list.value[0], channels=feature.shape[2], expand_animations=False)
        except (tf.errors.InvalidArgumentError, ValueError):
            return "bytes that are not an encoded image (PNG, JPEG, GIF or BMP)"
        if list(image.shape) != list(feature.shape):
            return f"an image of shape {list(image.shape)}, not {list(feature.shape)}"
    return None


def spec_contract(features: Sequence[Feature]) -> Contract:
    """Every one of `features` (of a `FeatureSpec`) in every record, with its list type and length, raw bytes or
    image."""
    return Contract(
        tuple(Expectation(f.name, f"feature {f.name!r}", _expected(f), functools.partial(_check, f)) for f in features)
    )
