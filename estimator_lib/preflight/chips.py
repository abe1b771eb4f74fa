"""The TPU chips preflight plans for: HBM, peak FLOP/s and HBM bandwidth per core, and the host's vCPUs.

Figures are Google's published ones per chip, divided by the chip's TensorCores (a core is one TPUEstimator
replica): Cloud TPU system architecture pages https://cloud.google.com/tpu/docs/v2, /v3 and /v5e, and the
TPU VM types' vCPUs (v2-8 and v3-8 hosts: 96 vCPUs; v5e's 8-chip host ct5lp-hightpu-8t: 224 vCPUs).
"""

from __future__ import annotations

import dataclasses
from typing import Dict, Tuple

GIB = 1 << 30


@dataclasses.dataclass(frozen=True)
class Chip:
    """One TPU generation, per core (TensorCore).

    Attributes:
      accelerator: Vertex AI's accelerator type, e.g. "TPU_V3".
      cores_per_chip: TensorCores per chip (2 on v2 and v3, 1 on v5e).
      hbm_bytes_per_core: HBM one core addresses.
      peak_flops_per_core: bf16 matrix-unit peak, FLOP/s (an f32 matmul runs at it with XLA's default precision).
      hbm_bytes_per_second_per_core: HBM bandwidth, bytes/s.
      host_cores: vCPUs of the host that feeds 8 cores (one v2-8/v3-8 host, or v5e's 8-chip host).
      source: where the figures come from.
    """

    accelerator: str
    cores_per_chip: int
    hbm_bytes_per_core: int
    peak_flops_per_core: float
    hbm_bytes_per_second_per_core: float
    host_cores: int
    source: str

    @property
    def name(self) -> str:
        """The short name: "v2", "v3", "v5e"."""
        return {"TPU_V2": "v2", "TPU_V3": "v3", "TPU_V5_LITEPOD": "v5e"}[self.accelerator]


_DOCS = "https://cloud.google.com/tpu/docs/"
CHIPS: Dict[str, Chip] = {
    "TPU_V2": Chip("TPU_V2", 2, 8 * GIB, 45e12 / 2, 600e9 / 2, 96, _DOCS + "v2: 45 TFLOP/s, 16 GiB, 600 GB/s per chip"),
    "TPU_V3": Chip(
        "TPU_V3", 2, 16 * GIB, 123e12 / 2, 900e9 / 2, 96, _DOCS + "v3: 123 TFLOP/s, 32 GiB, 900 GB/s per chip"
    ),
    "TPU_V5_LITEPOD": Chip(
        "TPU_V5_LITEPOD", 1, 16 * 10**9, 197e12, 819e9, 224, _DOCS + "v5e: 197 TFLOP/s, 16 GB, 819 GB/s per chip"
    ),
}
_ALIASES: Dict[str, str] = {"v2": "TPU_V2", "v3": "TPU_V3", "v5e": "TPU_V5_LITEPOD", "v5litepod": "TPU_V5_LITEPOD"}


def chip(accelerator: str) -> Chip:
    """The chip of `accelerator` ("TPU_V3", or a TPU type such as "v3-8", "v5litepod-8")."""
    key = _ALIASES.get(accelerator.split("-")[0].lower(), accelerator.upper())
    if key not in CHIPS:
        raise ValueError(f"accelerator {accelerator!r} is not one preflight knows; use one of {sorted(CHIPS)}")
    return CHIPS[key]


def parse_tpu_type(tpu_type: str) -> Tuple[Chip, int]:
    """(chip, cores) of a TPU type: "v3-8" -> (v3, 8 cores); "v5litepod-8" -> (v5e, 8 cores: one per chip)."""
    name, _, count = tpu_type.partition("-")
    if not count.isdigit() or int(count) < 1:
        raise ValueError(f"TPU type {tpu_type!r} is not VERSION-COUNT, e.g. v2-8, v3-8, v5litepod-8")
    return chip(name), int(count)
