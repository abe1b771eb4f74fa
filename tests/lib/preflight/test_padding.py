"""preflight/padding.py: the TPU tile padding of hand-made shapes, and the chips' figures."""

from __future__ import annotations

import pytest

from estimator_lib.preflight.chips import GIB, chip, parse_tpu_type
from estimator_lib.preflight.padding import padded_bytes, padded_shape


@pytest.mark.parametrize(
    "dims, dtype, shape, size",
    [
        ([3], "f32", (256,), 1024),  # a vector: one tile of 256 elements
        ([], "f32", (256,), 1024),  # a scalar: a one-element vector
        ([5, 7], "f32", (8, 128), 4096),
        ([1000, 1], "f32", (1000, 128), 1000 * 128 * 4),  # a column: 128 times its size (1000 rows: 125 x 8)
        ([8, 128], "f32", (8, 128), 4096),  # already whole tiles: no padding
        ([5, 7], "bf16", (16, 128), 4096),  # 16-bit: 16 sublanes
        ([1000, 1], "bf16", (1008, 128), 1008 * 128 * 2),  # 1000 rows -> 63 x 16
        ([5, 7], "s8", (32, 128), 4096),  # 8-bit: 32 sublanes
        ([2, 3, 5, 7], "float32", (2, 3, 8, 128), 6 * 4096),  # leading dimensions kept
        ([0, 7], "f32", (0, 128), 0),
    ],
)
def test_padded_shapes_and_bytes(dims, dtype, shape, size):
    assert padded_shape(dims, dtype) == shape
    assert padded_bytes(dims, dtype) == size


def test_an_unknown_element_type_is_named():
    with pytest.raises(ValueError, match="unknown element type 'f7'"):
        padded_bytes([1, 2], "f7")


def test_chips_per_core():
    v2, v3 = chip("TPU_V2"), chip("v3")
    assert (v2.hbm_bytes_per_core, v3.hbm_bytes_per_core) == (8 * GIB, 16 * GIB)
    assert (v2.peak_flops_per_core, v3.peak_flops_per_core) == (22.5e12, 61.5e12)
    assert parse_tpu_type("v5litepod-8") == (chip("TPU_V5_LITEPOD"), 8)
    with pytest.raises(ValueError, match="'v9' is not one preflight knows"):
        chip("v9")
    with pytest.raises(ValueError, match="'v3' is not VERSION-COUNT"):
        parse_tpu_type("v3")
