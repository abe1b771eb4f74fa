"""Example keys carried through the model as int32, so predictions come back with their own keys.

A key is a string, and strings cannot enter a TPU computation. The prediction input pipeline (host CPU)
therefore packs each key into `example_key_bytes`, int32 [B, WIDTH]: column 0 holds the key's length in
bytes, the other columns its first MAX_KEY_BYTES bytes, zero-padded. The model passes the tensor through to
its predictions unchanged (the TPU only copies it), and the host unpacks it with `decode`, a few vectorised
NumPy operations per batch. This replaces a second read of the input for the keys.

A key longer than MAX_KEY_BYTES arrives truncated; `decode` flags it, and batch prediction then reads the
remaining keys from the records themselves (`estimator_lib.predict`).
"""

from __future__ import annotations

from typing import Tuple

import numpy as np
import tensorflow as tf

KEY_BYTES_FEATURE = "example_key_bytes"
MAX_KEY_BYTES = 64
WIDTH = 1 + MAX_KEY_BYTES // 4


def encode(keys: tf.Tensor) -> tf.Tensor:
    """string [B] -> int32 [B, WIDTH]: each key's byte length, then its first MAX_KEY_BYTES bytes, zero-padded."""
    length = tf.strings.length(keys, unit="BYTE")
    raw = tf.io.decode_raw(keys, tf.uint8, fixed_length=MAX_KEY_BYTES)
    words = tf.bitcast(tf.reshape(raw, [-1, MAX_KEY_BYTES // 4, 4]), tf.int32)
    packed = tf.concat([length[:, None], words], axis=1)
    return tf.ensure_shape(packed, [keys.shape[0], WIDTH])


def decode(packed: np.ndarray) -> Tuple[np.ndarray, bool]:
    """int32 [n, WIDTH] from `encode` -> (keys as a bytes array [n], whether every key fitted).

    When a key was longer than MAX_KEY_BYTES the second value is False and the keys must be read elsewhere.
    """
    if packed.ndim != 2 or packed.shape[1] != WIDTH or packed.dtype != np.int32:
        raise ValueError(f"packed keys must be int32 [n, {WIDTH}], got {packed.dtype} {list(packed.shape)}")
    lengths = packed[:, 0]
    if (lengths > MAX_KEY_BYTES).any():
        return np.empty(0, dtype=object), False
    # A fixed-width bytes view drops the zero padding: one array operation for the whole batch.
    data = np.ascontiguousarray(packed[:, 1:])
    keys = data.view(f"S{MAX_KEY_BYTES}")[:, 0]
    # ... and with it any NUL bytes a key ends with: find those keys (last byte zero) and restore them.
    last = data.view(np.uint8)[np.arange(len(lengths)), np.maximum(lengths - 1, 0)]
    ends_with_nul = (lengths > 0) & (last == 0)
    if ends_with_nul.any():
        keys = keys.astype(object)
        for i in np.flatnonzero(ends_with_nul):
            keys[i] = keys[i] + b"\0" * (int(lengths[i]) - len(keys[i]))
    return keys, True
