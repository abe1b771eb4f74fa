"""Encoding rows as `tf.train.Example` records and back, as the schema module describes.

A row is a mapping from original column names to typed values: float (or None) for numerics, str/int (or None)
for categoricals, the class name (classification) or a float (regression) for the label. None means missing:
the feature is left out of the Example and parsing imputes it.
"""

from __future__ import annotations

import contextlib
import struct
from typing import Any, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence

import tensorflow as tf

from estimator_lib.data import numbers, tfrecord, wire
from estimator_lib.data.common import DataError
from estimator_lib.schema import CLASSIFICATION, KEY_FEATURE, LABEL_KEY, NUMERIC, Schema, SchemaError


def canonical_category(value: Any) -> str:
    """The text a categorical value is stored and looked up as (3 -> "3", 3.0 -> "3", "a" -> "a")."""
    if isinstance(value, float):
        return numbers.whole_text(value) or str(value)
    return str(value)


def serialize_example(row: Mapping[str, Any], schema: Schema, key: str, with_label: bool = True) -> bytes:
    """The serialized Example of one typed row (`wire`'s bytes). Raises SchemaError naming the column for a
    value the schema cannot hold."""
    entries: Dict[str, bytes] = {KEY_FEATURE: wire.key_entry(key)}
    for spec in schema.features:
        value = row.get(spec.name)
        if value is None:
            continue
        if spec.kind == NUMERIC:
            entries[spec.key] = wire.float_entry(spec.key, _number(value, f"column {spec.name!r}"))
        else:
            entries[spec.key] = wire.text_entry(spec.key, canonical_category(value))
    if with_label:
        entries[LABEL_KEY] = _label_entry(row.get(schema.label.name), schema)
    return wire.example(entries[k] for k in sorted(entries))


def encode_example(row: Mapping[str, Any], schema: Schema, key: str, with_label: bool = True) -> tf.train.Example:
    """`serialize_example` as a `tf.train.Example` message."""
    return tf.train.Example.FromString(serialize_example(row, schema, key, with_label))


def _number(value: Any, where: str) -> float:
    """A typed value that must be a valid number (`numbers.finite`)."""
    if not isinstance(value, (int, float)):
        raise SchemaError(f"{where}: {value!r} is not a finite number")
    try:
        return numbers.finite(float(value), repr(value))
    except numbers.InvalidNumber as e:
        raise SchemaError(f"{where}: {e.problem}") from None


def _label_entry(value: Any, schema: Schema) -> bytes:
    label = schema.label
    if value is None:
        raise SchemaError(f"label column {label.name!r} is missing a value")
    if label.task == CLASSIFICATION:
        text = canonical_category(value)
        if text not in label.classes:
            raise SchemaError(f"label column {label.name!r}: {text!r} is not one of the classes {list(label.classes)}")
        return wire.class_entry(label.classes.index(text))
    return wire.float_entry(LABEL_KEY, _number(value, f"label column {label.name!r}"))


def decode_example(serialized: bytes, schema: Schema) -> Dict[str, Any]:
    """Decodes an Example back to {original name: typed value or None, "__key__": key} (for checks and tests)."""
    example = tf.train.Example.FromString(serialized)
    fmap = example.features.feature
    row: Dict[str, Any] = {"__key__": fmap[KEY_FEATURE].bytes_list.value[0].decode("utf-8")}
    for spec in schema.features:
        if spec.key not in fmap:
            row[spec.name] = None
        elif spec.kind == NUMERIC:
            row[spec.name] = fmap[spec.key].float_list.value[0]
        else:
            row[spec.name] = fmap[spec.key].bytes_list.value[0].decode("utf-8")
    if LABEL_KEY in fmap:
        label = fmap[LABEL_KEY]
        if schema.label.task == CLASSIFICATION:
            row[schema.label.name] = schema.label.classes[label.int64_list.value[0]]
        else:
            row[schema.label.name] = label.float_list.value[0]
    return row


def write_tfrecord(path: str, examples: Iterable[tf.train.Example]) -> int:
    """Writes examples to one TFRecord file (local or gs:// through TensorFlow's file system); returns count."""
    count = 0
    with tf.io.TFRecordWriter(path) as writer:
        for example in examples:
            writer.write(example.SerializeToString())
            count += 1
    return count


def read_tfrecords(paths: Iterable[str]) -> Iterator[bytes]:
    """Yields serialized records of TFRecord files in order (eager; for checks and tests)."""
    for record in tf.data.TFRecordDataset(list(paths)):
        yield record.numpy()


# -- checks of records made elsewhere ---------------------------------------------------------------------------------
def check_features(files: Sequence[str], schema: Schema, sample: int = 1000) -> None:
    """Refuses TFRecords that were not prepared with `schema`, naming the features that differ.

    Reads up to `sample` records (the first of every file, then in order). A feature the schema lists that no
    sampled record holds, or a feature no schema lists, means the records were prepared from other data or
    another schema; scoring them would impute the missing features without a word.
    """
    seen, read = set(), 0
    for path in files:
        for serialized in tf.data.TFRecordDataset(path).take(max(1, sample - read)):
            seen.update(tf.train.Example.FromString(serialized.numpy()).features.feature)
            read += 1
    expected = {f.key for f in schema.features}
    missing = sorted(f.name for f in schema.features if f.key not in seen)
    extra = sorted(seen - expected - {KEY_FEATURE, LABEL_KEY})
    if read and (missing or extra):
        names = ", ".join(files[:3]) + (f" and {len(files) - 3} more" if len(files) > 3 else "")
        raise DataError(
            f"{names}: these records were not prepared with this model's schema: "
            + "; ".join(
                part
                for part in (
                    f"feature(s) {missing} are absent from all {read} records read" if missing else "",
                    f"feature key(s) {extra} are not in the schema" if extra else "",
                )
                if part
            )
            + ". Prepare them with the model's schema (PrepareConfig.schema_uri) or score the raw rows instead"
        )


def find_corrupt_file(files: Iterable[str]) -> Optional[str]:
    """'FILE: what is wrong' for the first file whose records fail their length or CRC check, else None."""
    for path in files:
        try:
            for _ in tf.data.TFRecordDataset(path):
                pass
        except tf.errors.DataLossError as e:
            return f"{path}: corrupt or truncated TFRecord ({e.message.strip()})"
    return None


@contextlib.contextmanager
def named_data_loss(files: Sequence[str]) -> Iterator[None]:
    """Turns TensorFlow's DataLossError, which names no file, into a DataError naming the file and offset."""
    try:
        yield
    except tf.errors.DataLossError as e:
        where = find_corrupt_file(files) or f"one of {list(files)}: corrupt TFRecord ({e.message.strip()})"
        raise DataError(f"{where}; re-create the file (run prepare again) or leave it out") from None


# A TFRecord is a little-endian uint64 length, its 4-byte masked CRC, the data, and the data's 4-byte CRC.
_LENGTH = struct.Struct("<Q")
_HEADER_BYTES = _LENGTH.size + 4
_FRAMING_BYTES = _HEADER_BYTES + 4
_READ_BYTES = 4 << 20


def _open(path: str):
    """A local file through Python's own reader (TensorFlow's GFile reads one about 5x slower), anything else
    (gs://, ...) through GFile."""
    return tf.io.gfile.GFile(path, "rb") if "://" in path else open(path, "rb")  # noqa: SIM115


def file_records(path: str) -> int:
    """The records in an uncompressed TFRecord file (local or gs://), from the record lengths alone.

    The file is read once, a few MB at a time, and only each record's length is parsed: well under a
    microsecond per record, where a `tf.data` count costs microseconds and a tenth of a second to start. The
    count is `tf.data`'s (bytes after the last record too few for a header end the file there too); no CRC is
    checked (a read of the records checks them).

    Raises:
      DataError: a record running past the file's end: a truncated or corrupt file (named, with TensorFlow's
        description of the first bad record).
    """
    count, start = 0, 0  # start: the last record's offset in the file
    data, offset, position = b"", 0, 0  # unparsed bytes, their offset in the file, the next record's start in them
    with _open(path) as f:
        while chunk := f.read(_READ_BYTES):
            kept = min(position, len(data))  # a record's data may run past the chunk: skip into the next
            data, offset, position = data[kept:] + chunk, offset + kept, position - kept
            while position + _HEADER_BYTES <= len(data):
                start = offset + position
                position += _LENGTH.unpack_from(data, position)[0] + _FRAMING_BYTES
                count += 1
    # A tail too short for a header is left, as TensorFlow's reader leaves it; a record past the end is not.
    if position > len(data):
        raise _cut_short(path, start, offset + len(data))
    return count


def first_records(path: str, count: int) -> Optional[List[bytes]]:
    """The first `count` records of an uncompressed TFRecord file (all of them when it holds fewer), read from
    their framing with both CRCs checked: the records `tf.data` reads, without its start-up (about 0.03 s a
    file, the first time more). None when the framing or a CRC does not hold there: the caller then reads the
    file with TensorFlow, whose error describes the fault."""
    found: List[bytes] = []
    with _open(path) as f:
        while len(found) < count:
            head = f.read(_HEADER_BYTES)
            if len(head) < _HEADER_BYTES:  # as TensorFlow's reader: too few bytes for a header end the file
                return found
            if tfrecord.masked_crc(head[: _LENGTH.size]) != head[_LENGTH.size :]:
                return None
            length = _LENGTH.unpack_from(head)[0]
            data = f.read(length + 4)
            if len(data) != length + 4 or tfrecord.masked_crc(data[:length]) != data[length:]:
                return None
            found.append(data[:length])
    return found


def _cut_short(path: str, record_start: int, end: int) -> DataError:
    """The error for a file whose record lengths run past its end: TensorFlow's description of the first bad
    record (truncated or corrupt, and where), as every other read of records gives it."""
    found = find_corrupt_file([path])
    where = found or f"{path}: the record at byte {record_start} runs past the file's end at byte {end}"
    return DataError(f"{where}; re-create the file (run prepare again) or leave it out")
