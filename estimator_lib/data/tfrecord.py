"""TFRecord framing, done where the Examples are encoded (worker processes) so that writing a shard is one
file write of ready bytes.

A TFRecord file is a sequence of records, each: length (uint64, little-endian), the masked CRC32C of those 8
bytes (uint32), the data, the masked CRC32C of the data. These are the bytes `tf.io.TFRecordWriter` writes
without compression; `test_tfrecord.py` compares the two.
"""

from __future__ import annotations

from typing import List, Sequence

import google_crc32c
import numpy as np


def frame(records: Sequence[bytes]) -> List[bytes]:
    """Each record as it appears in a TFRecord file."""
    count = len(records)
    lengths = np.fromiter(map(len, records), np.uint64, count).astype("<u8").tobytes()
    heads = [lengths[i : i + 8] for i in range(0, 8 * count, 8)]
    head_crcs = _masked_crcs(heads).tobytes()
    data_crcs = _masked_crcs(records).tobytes()
    head_ends = [head_crcs[i : i + 4] for i in range(0, 4 * count, 4)]
    tails = [data_crcs[i : i + 4] for i in range(0, 4 * count, 4)]
    return list(map(b"".join, zip(heads, head_ends, records, tails)))


def masked_crc(item: bytes) -> bytes:
    """TFRecord's masked CRC32C of `item`, as the 4 bytes a record holds."""
    return _masked_crcs([item]).tobytes()


def _masked_crcs(items: Sequence[bytes]) -> np.ndarray:
    """'<u4' [items]: TFRecord's masked CRC32C of each item (rotate right by 15 bits, add a constant)."""
    crc = np.fromiter(map(google_crc32c.value, items), np.uint64, len(items))
    masked = (((crc >> np.uint64(15)) | (crc << np.uint64(17))) + np.uint64(0xA282EAD8)) & np.uint64(0xFFFFFFFF)
    return masked.astype("<u4")
