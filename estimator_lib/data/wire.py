"""The `tf.train.Example` wire format: the one place in the library that writes it.

Everything that serializes an Example calls this module: `records.serialize_example` / `encode_example` (a
typed row through a schema), pass 2's per-row path and its column-at-a-time path (`encode`). Writing the
protobuf bytes directly is faster than building protobuf objects; `test_wire.py` checks them against
`tf.train.Example(...).SerializeToString()`. Pure Python and numpy: worker processes need no TensorFlow.

Wire layout (every field length-delimited, tag = field number << 3 | 2, except the packed values):
  Example{1: Features{1: repeated MapEntry{1: key, 2: Feature}}}
  Feature{1: BytesList{1: repeated bytes}, 2: FloatList{1: packed float32}, 3: Int64List{1: packed varint}}
A Feature holding an empty list is the empty list message (b"\\x12\\x00" for floats). Map entries are written
in key order, so the bytes depend only on the content (protobuf's own map order is not part of its contract,
and its "deterministic" order puts "f_a_b_2" before "f_a_b"; the parsed messages are equal either way).

Two kinds of function: per value (`entry`, `*_feature`, `example`) and per column (`numeric_block`,
`text_entries`, `key_entries`, `examples`), which build the same bytes for every row of a chunk at once. A
numeric map entry is a constant prefix (its key) and 4 float32 bytes, so a run of numeric features adjacent
in key order is a fixed-layout block that numpy fills for all rows at once; a bytes entry depends only on its
text, so it is built once per distinct value.
"""

from __future__ import annotations

import functools
import struct
from typing import Dict, Iterable, List, Mapping, Optional, Sequence

import numpy as np

from estimator_lib.schema import KEY_FEATURE, LABEL_KEY

_FLOAT = struct.Struct("<f")
FLOAT_BYTES = 4
_UINT64 = (1 << 64) - 1
_BYTES_LIST, _FLOAT_LIST, _INT64_LIST = b"\x0a", b"\x12", b"\x1a"  # Feature's fields 1, 2, 3
_FIELD_1, _FIELD_2 = b"\x0a", b"\x12"  # length-delimited fields 1 and 2 (Example, Features, MapEntry, lists)

_ONE_BYTE = [bytes((n,)) for n in range(128)]  # the varints of 0 .. 127 (every short length)
# Distinct texts whose map entries are kept per process (a bound for free-text columns; hits are the point).
_TEXT_ENTRIES = 10_000

# float32 bytes of one float: raises OverflowError when float32 rounding is infinite (see `numbers`).
pack_float32 = _FLOAT.pack


def varint(n: int) -> bytes:
    """Base-128 varint of an int64 (a negative one as its two's complement: 10 bytes)."""
    if 0 <= n < 128:
        return _ONE_BYTE[n]
    n &= _UINT64
    out = bytearray()
    while True:
        low, n = n & 0x7F, n >> 7
        if not n:
            out.append(low)
            return bytes(out)
        out.append(low | 0x80)


def _delimited(tag: bytes, payload: bytes) -> bytes:
    return tag + varint(len(payload)) + payload


# -- per value ----------------------------------------------------------------------------------------------------
def bytes_feature(values: Sequence[bytes]) -> bytes:
    """A Feature holding a BytesList."""
    return _delimited(_BYTES_LIST, b"".join(_delimited(_FIELD_1, v) for v in values))


def float_feature(values: Sequence[float]) -> bytes:
    """A Feature holding a FloatList; raises OverflowError for a value whose float32 is infinite."""
    packed = b"".join(map(pack_float32, values))
    return _delimited(_FLOAT_LIST, _delimited(_FIELD_1, packed) if packed else b"")


def int64_feature(values: Sequence[int]) -> bytes:
    """A Feature holding an Int64List."""
    packed = b"".join(map(varint, values))
    return _delimited(_INT64_LIST, _delimited(_FIELD_1, packed) if packed else b"")


def entry(key: str, feature: bytes) -> bytes:
    """One map entry of Features.feature: `key` -> the Feature bytes."""
    return _delimited(_FIELD_1, _delimited(_FIELD_1, key.encode("utf-8")) + _delimited(_FIELD_2, feature))


def example(entries: Iterable[bytes]) -> bytes:
    """The Example of map entries already in key order ("example_key" < "f_..." < "label")."""
    body = b"".join(entries)
    return example_head(len(body)) + body


def example_of(features: Mapping[str, bytes]) -> bytes:
    """The Example of {key: Feature bytes}, entries in key order."""
    return example(entry(key, features[key]) for key in sorted(features))


@functools.lru_cache(maxsize=4096)  # one per Example length
def example_head(length: int) -> bytes:
    """What `example` puts before entries of `length` bytes in all."""
    return _FIELD_1 + varint(length)


@functools.lru_cache(maxsize=None)  # one per feature key
def float_entry_prefix(key: str) -> bytes:
    """Everything of a one-float map entry before its 4 value bytes (constant per feature key)."""
    return entry(key, float_feature([0.0]))[:-FLOAT_BYTES]


def float_entry(key: str, value: float) -> bytes:
    """The map entry of `key` holding one float (OverflowError when its float32 is infinite)."""
    return float_entry_prefix(key) + pack_float32(value)


def _text_entry(key: str, text: str) -> bytes:
    return entry(key, bytes_feature([text.encode("utf-8")]))


# The map entry of `key` holding one UTF-8 text (kept for the most recent distinct texts).
text_entry = functools.lru_cache(maxsize=_TEXT_ENTRIES)(_text_entry)


@functools.lru_cache(maxsize=None)  # one per class
def class_entry(index: int) -> bytes:
    """The label's map entry of a class index (one int64)."""
    return entry(LABEL_KEY, int64_feature([index]))


def key_entry(key: str) -> bytes:
    """The example key's map entry."""
    encoded = key.encode("utf-8")
    return key_entry_prefix(len(encoded)) + encoded


@functools.lru_cache(maxsize=None)  # one per key length
def key_entry_prefix(length: int) -> bytes:
    """Everything of `key_entry(key)` before the key's bytes, for any key of `length` UTF-8 bytes."""
    whole = entry(KEY_FEATURE, bytes_feature([b"\x00" * length]))
    return whole[: len(whole) - length]


# -- per column: every row of a chunk at once ----------------------------------------------------------------------
def numeric_block(
    prefixes: Sequence[bytes], values: Sequence[np.ndarray], present: Sequence[np.ndarray]
) -> List[bytes]:
    """Per row, the map entries `prefix + float32 bytes` of adjacent numeric features, those present only.

    Args:
      prefixes: each feature's `float_entry_prefix`, in key order.
      values: each feature's '<f4' values, [rows].
      present: each feature's bool [rows]: False leaves the entry out.
    """
    rows = len(values[0])
    template = np.frombuffer(b"".join(p + b"\x00" * FLOAT_BYTES for p in prefixes), np.uint8)
    width = len(template)
    block = np.empty((rows, width), np.uint8)
    block[:] = template
    spans, start = [], 0
    for prefix, column in zip(prefixes, values):
        end = start + len(prefix) + FLOAT_BYTES
        block[:, end - FLOAT_BYTES : end] = column.view(np.uint8).reshape(rows, FLOAT_BYTES)
        spans.append((start, end))
        start = end
    raw = block.tobytes()
    pieces = [raw[i : i + width] for i in range(0, rows * width, width)]
    gaps = ~np.logical_and.reduce(present)
    for i in np.flatnonzero(gaps).tolist():
        pieces[i] = b"".join(pieces[i][s:e] for (s, e), p in zip(spans, present) if p[i])
    return pieces


def text_entries(key: str, texts: Sequence[Optional[str]]) -> List[bytes]:
    """Per row, `text_entry(key, text)` (b"" where the text is None); built once per distinct text."""
    entries: Dict[Optional[str], bytes] = {t: _text_entry(key, t) for t in set(texts) if t is not None}
    entries[None] = b""
    return list(map(entries.__getitem__, texts))


def key_entries(keys: Sequence[str]) -> List[bytes]:
    """Per row, `key_entry(key)`."""
    encoded = [k.encode("utf-8") for k in keys]
    return list(map(bytes.__add__, map(key_entry_prefix, map(len, encoded)), encoded))


def examples(pieces: Sequence[Sequence[bytes]]) -> List[bytes]:
    """Per row, `example` of the row's entries; `pieces` holds one list per group of entries, each with one
    item per row, in key order."""
    bodies = list(map(b"".join, zip(*pieces)))
    return list(map(bytes.__add__, map(example_head, map(len, bodies)), bodies))
