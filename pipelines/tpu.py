"""Cloud TPU presets for Vertex AI custom jobs: a TPU type name -> machine, accelerator and TPU settings.

Vertex AI runs a custom job on a single-host Cloud TPU VM when its worker pool asks for a TPU machine:
v2/v3 use machine type "cloud-tpu" with 8 accelerators (TPU_V2 / TPU_V3, 4 chips of 2 TensorCores each);
v5e uses the "ct5lp-hightpu-Nt" machine types with N TPU_V5_LITEPOD chips (one TensorCore per chip).
On such a VM the TPU is attached locally, so TPUEstimator resolves it with `TPUClusterResolver(tpu="local")`.

`num_cores` is the number of TPU replicas (TensorCores) TPUEstimator splits each global batch over, so
the job's batch sizes must be multiples of it (`JobConfig` checks that).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Dict, Tuple


@dataclasses.dataclass(frozen=True)
class TPUPreset:
    """One Vertex AI TPU machine shape.

    Attributes:
      name: the TPU type users pass (`--tpu v3-8`).
      machine_type: Vertex AI `MachineSpec.machine_type`.
      accelerator_type: Vertex AI `MachineSpec.accelerator_type` enum name.
      accelerator_count: Vertex AI `MachineSpec.accelerator_count`.
      num_cores: TensorCores (TPUEstimator replicas) on the VM.
    """

    name: str
    machine_type: str
    accelerator_type: str
    accelerator_count: int
    num_cores: int

    def tpu_settings(self) -> Dict[str, Any]:
        """The `JobConfig.tpu` fields a stage running on this machine uses."""
        return {"use_tpu": True, "tpu_name": "local", "num_cores": self.num_cores}


PRESETS: Dict[str, TPUPreset] = {
    p.name: p
    for p in (
        TPUPreset("v2-8", "cloud-tpu", "TPU_V2", 8, 8),
        TPUPreset("v3-8", "cloud-tpu", "TPU_V3", 8, 8),
        TPUPreset("v5litepod-1", "ct5lp-hightpu-1t", "TPU_V5_LITEPOD", 1, 1),
        TPUPreset("v5litepod-4", "ct5lp-hightpu-4t", "TPU_V5_LITEPOD", 4, 4),
        TPUPreset("v5litepod-8", "ct5lp-hightpu-8t", "TPU_V5_LITEPOD", 8, 8),
    )
}
DEFAULT_TPU = "v3-8"

# Stages that run on the host CPU everywhere: export writes both the CPU and the TPU meta graph without a TPU.
CPU_SETTINGS: Dict[str, Any] = {"use_tpu": False}


def preset(name: str) -> TPUPreset:
    """The preset for a TPU type; the error lists the known ones."""
    if name not in PRESETS:
        raise ValueError(f"--tpu {name!r} is not a known TPU type; use one of {sorted(PRESETS)} (or --cpu)")
    return PRESETS[name]


def preset_table() -> Tuple[Tuple[str, str, str, int, int], ...]:
    """(name, machine type, accelerator type, accelerator count, cores) rows, for `--help` and docs."""
    return tuple(
        (p.name, p.machine_type, p.accelerator_type, p.accelerator_count, p.num_cores) for p in PRESETS.values()
    )
