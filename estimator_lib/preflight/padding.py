"""The TPU's tile padding: the shape an array occupies in HBM, and its bytes.

XLA lays a TPU array out in tiles over its last two dimensions: the last (lanes) is padded to a multiple of 128,
the second-to-last (sublanes) to a multiple of 8 for 32-bit types, 16 for 16-bit types and 32 for 8-bit types
(`f32[..]{1,0:T(8,128)}`, `bf16[..]{1,0:T(8,128)(2,1)}` in TPU HLO). An array of rank 1 is tiled along its only
dimension: padded here to a multiple of 256 elements (XLA's `{0:T(256)}`; it may pick `T(1024)` for a long
vector, a difference under 4 KiB). A scalar is stored as a one-element vector of that tile. 64-bit types are
tiled as 32-bit ones (a TPU emulates them with pairs of 32-bit words).
"""

from __future__ import annotations

import math
from typing import Sequence, Tuple

LANES = 128
VECTOR_TILE = 256
# Bytes per element of each XLA/TensorFlow element type (HLO names and TensorFlow dtype names).
DTYPE_BYTES = {
    **dict.fromkeys(("pred", "bool", "s8", "u8", "int8", "uint8"), 1),
    **dict.fromkeys(("s16", "u16", "f16", "bf16", "int16", "uint16", "float16", "bfloat16"), 2),
    **dict.fromkeys(("s32", "u32", "f32", "int32", "uint32", "float32"), 4),
    **dict.fromkeys(("s64", "u64", "f64", "c64", "int64", "uint64", "float64", "complex64"), 8),
    **dict.fromkeys(("c128", "complex128"), 16),
}


def dtype_bytes(dtype: str) -> int:
    """Bytes per element of `dtype` ("f32", "bf16", "float32", ...); raises ValueError for an unknown one."""
    if dtype not in DTYPE_BYTES:
        raise ValueError(f"unknown element type {dtype!r}; known: {sorted(DTYPE_BYTES)}")
    return DTYPE_BYTES[dtype]


def sublanes(dtype: str) -> int:
    """The second-to-last dimension's tile: 8 rows of 32-bit values, 16 of 16-bit, 32 of 8-bit."""
    return {1: 32, 2: 16}.get(dtype_bytes(dtype), 8)


def _up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


def padded_shape(dims: Sequence[int], dtype: str) -> Tuple[int, ...]:
    """The dimensions `dims` of a `dtype` array occupy on a TPU: [5, 7] f32 -> (8, 128); [3] -> (256,)."""
    dims = tuple(int(d) for d in dims)
    if len(dims) <= 1:
        return (_up(max(dims[0] if dims else 1, 1), VECTOR_TILE),)
    return dims[:-2] + (_up(dims[-2], sublanes(dtype)), _up(dims[-1], LANES))


def padded_bytes(dims: Sequence[int], dtype: str) -> int:
    """Bytes of a `dtype` array of `dims` in TPU HBM, tile padding included (0 for an array with a 0 dimension)."""
    if any(int(d) == 0 for d in dims):
        return 0
    return math.prod(padded_shape(dims, dtype)) * dtype_bytes(dtype)


def unpadded_bytes(dims: Sequence[int], dtype: str) -> int:
    """Bytes of the array's elements alone."""
    return math.prod(int(d) for d in dims) * dtype_bytes(dtype)
