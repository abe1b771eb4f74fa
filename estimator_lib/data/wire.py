"""Serialized `tf.train.Example` bytes written directly in the protobuf wire format.

`records.encode_example` builds the same Example through protobuf objects, which is slow enough to dominate
preparation. This module writes the same Example's bytes directly, map entries in key order; the tests and a check on the
first row of every chunk (see `data.encode`) compare the parsed message with `encode_example`'s.

Wire layout: Example{1: Features{1: repeated MapEntry{1: key, 2: Feature}}};
Feature{1: BytesList{1: bytes}, 2: FloatList{1: packed float}, 3: Int64List{1: packed varint}}.
"""

from __future__ import annotations

import struct
from typing import List

from estimator_lib.schema import KEY_FEATURE, LABEL_KEY

_FLOAT = struct.Struct("<f")
_KEY_TAG = b"\x0a"
_VALUE_TAG = b"\x12"


def varint(n: int) -> bytes:
    out = bytearray()
    while True:
        low, n = n & 0x7F, n >> 7
        if not n:
            out.append(low)
            return bytes(out)
        out.append(low | 0x80)


def _delimited(tag: bytes, payload: bytes) -> bytes:
    return tag + varint(len(payload)) + payload


def entry(key: str, feature: bytes) -> bytes:
    """One map entry of Features.feature (field 1 of Features)."""
    return _delimited(b"\x0a", _delimited(_KEY_TAG, key.encode("utf-8")) + _delimited(_VALUE_TAG, feature))


def bytes_feature(value: bytes) -> bytes:
    return _delimited(b"\x0a", _delimited(b"\x0a", value))


def float32(value: float) -> bytes:
    """The 4 float32 bytes of `value`; raises OverflowError beyond the float32 range."""
    return _FLOAT.pack(value)


def float_feature(value: float) -> bytes:
    return b"\x12\x06\x0a\x04" + float32(value)


def int64_feature(value: int) -> bytes:
    return _delimited(b"\x1a", _delimited(b"\x0a", varint(value)))


def float_entry_prefix(key: str) -> bytes:
    """Everything of a one-float map entry before its 4 value bytes (constant per feature key)."""
    return entry(key, b"\x12\x06\x0a\x04\x00\x00\x00\x00")[:-4]


def key_entry(key: str) -> bytes:
    return entry(KEY_FEATURE, bytes_feature(key.encode("utf-8")))


def key_entry_prefix(length: int) -> bytes:
    """Everything of `key_entry(key)` before the key's bytes, for any key of `length` UTF-8 bytes."""
    whole = entry(KEY_FEATURE, bytes_feature(b"\x00" * length))
    return whole[: len(whole) - length]


def label_entry(feature: bytes) -> bytes:
    return entry(LABEL_KEY, feature)


def example(entries: List[bytes]) -> bytes:
    """The Example of map entries already in key order ("example_key" < "f_..." < "label")."""
    return _delimited(b"\x0a", b"".join(entries))


def example_head(length: int) -> bytes:
    """What `example` puts before entries of `length` bytes in all."""
    return b"\x0a" + varint(length)
