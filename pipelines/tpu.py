"""Cloud TPU presets for Vertex AI custom jobs, which of them TensorFlow 2.15's TPUEstimator runs on, and where the
TPU machines come from (on-demand, Spot, a reservation).

What runs where (sources in docs/vertex.md, "TPU types"):
  * Vertex AI custom training offers TPU v2, v3 and v5e VMs; TensorFlow training is not offered from v6e on.
    v2/v3 use machine type "cloud-tpu" with 8 accelerators (4 chips of 2 TensorCores: v2-8, v3-8, one host);
    v5e uses "ct5lp-hightpu-Nt" machines with N TPU_V5_LITEPOD chips (one TensorCore per chip); a v5e slice
    of several hosts is asked for with `machine_spec.tpu_topology`.
  * TensorFlow 2.15 on v2/v3 runs the stream-executor TPU runtime, which TPUEstimator (TF1 `tf.compat.v1.tpu`
    sessions) was built on. On v5e TensorFlow needs the PJRT runtime (Vertex AI's instructions set
    NEXT_PLUGGABLE_DEVICE_USE_C_API and TF_PLUGGABLE_DEVICE_LIBRARY_PATH), and `tf.estimator` on TPU v5 under
    PJRT fails with "No TPU platform registered" (tensorflow/tensorflow#90807, open for TF 2.15).
So v2-8 and v3-8 are supported; the v5e presets are refused unless the caller opts in to an experiment
(`experimental=True`, the CLI's --experimental-tpu), and then get the PJRT environment variables.

On a single-host TPU VM the TPU is attached locally, so TPUEstimator resolves it with
`TPUClusterResolver(tpu="local")`. `num_cores` is the number of TPU replicas (TensorCores) TPUEstimator splits
each global batch over, so the job's batch sizes must be multiples of it (`JobConfig` checks that).
"""

from __future__ import annotations

import dataclasses
import math
import re
from typing import Any, Dict, Mapping, Optional, Tuple

# Vertex AI's documented PJRT switch for TensorFlow on TPU v5e; /lib/libtpu.so is where the image puts libtpu.
PJRT_ENV: Dict[str, str] = {
    "NEXT_PLUGGABLE_DEVICE_USE_C_API": "true",
    "TF_PLUGGABLE_DEVICE_LIBRARY_PATH": "/lib/libtpu.so",
}
# Cloud TPU v5e slice shapes (chips per dimension); each chip count has exactly one.
V5E_TOPOLOGIES = ("1x1", "2x2", "2x4", "4x4", "4x8", "8x8", "8x16", "16x16")
_TOPOLOGY = re.compile(r"^[1-9][0-9]*(x[1-9][0-9]*){1,2}$")
_RESERVATION = re.compile(r"^projects/[^/]+/zones/[^/]+/reservations/[^/]+$")
_TENSORBOARD = re.compile(r"^projects/[^/]+/locations/([^/]+)/tensorboards/[^/]+$")
RESERVATION_KEY = "compute.googleapis.com/reservation-name"
SPOT, STANDARD = "SPOT", "STANDARD"

_V5E_WHY = (
    "TensorFlow on TPU v5e needs the PJRT runtime, and TPUEstimator under PJRT fails on TPU v5 "
    "(tensorflow/tensorflow#90807)"
)
# TPU generations users ask for that no preset offers, and why.
_NOT_OFFERED = {
    "v4": "Vertex AI custom training offers TPU v2, v3 and v5e, not v4",
    "v5p": "Vertex AI custom training offers TPU v2, v3 and v5e, not v5p",
    "v6e": "Vertex AI offers no TensorFlow training on TPU v6e",
}


@dataclasses.dataclass(frozen=True)
class TPUPreset:
    """One Vertex AI TPU machine shape.

    Attributes:
      name: the TPU type users pass (`--tpu v3-8`), as Cloud TPU names accelerator types.
      machine_type: Vertex AI `MachineSpec.machine_type` (of each host).
      accelerator_type: Vertex AI `MachineSpec.accelerator_type` enum name.
      accelerator_count: Vertex AI `MachineSpec.accelerator_count` (per host).
      num_cores: TensorCores (TPUEstimator replicas) in the whole slice.
      hosts: TPU VMs in the slice.
      topology: `MachineSpec.tpu_topology` (chips per dimension); None where Vertex AI takes none (cloud-tpu).
      env: environment variables the TPU runtime needs in the container.
      supported: whether TensorFlow 2.15's TPUEstimator is known to run on it (see the module docstring).
    """

    name: str
    machine_type: str
    accelerator_type: str
    accelerator_count: int
    num_cores: int
    hosts: int = 1
    topology: Optional[str] = None
    env: Mapping[str, str] = dataclasses.field(default_factory=dict)
    supported: bool = True

    def tpu_settings(self) -> Dict[str, Any]:
        """The `JobConfig.tpu` fields a stage running on this machine uses."""
        return {"use_tpu": True, "tpu_name": "local", "num_cores": self.num_cores}

    @property
    def multi_host(self) -> bool:
        return self.hosts > 1


def _v5e(chips: int, machine_chips: int, topology: str) -> TPUPreset:
    return TPUPreset(
        name=f"v5litepod-{chips}",
        machine_type=f"ct5lp-hightpu-{machine_chips}t",
        accelerator_type="TPU_V5_LITEPOD",
        accelerator_count=machine_chips,
        num_cores=chips,
        hosts=chips // machine_chips,
        topology=topology if chips > machine_chips else None,
        env=PJRT_ENV,
        supported=False,
    )


PRESETS: Dict[str, TPUPreset] = {
    p.name: p
    for p in (
        TPUPreset("v2-8", "cloud-tpu", "TPU_V2", 8, 8),
        TPUPreset("v3-8", "cloud-tpu", "TPU_V3", 8, 8),
        _v5e(1, 1, "1x1"),
        _v5e(4, 4, "2x2"),
        _v5e(8, 8, "2x4"),
        _v5e(16, 4, "4x4"),
        _v5e(32, 4, "4x8"),
    )
}
DEFAULT_TPU = "v3-8"
SUPPORTED = tuple(name for name, p in PRESETS.items() if p.supported)

# Stages that run on the host CPU everywhere: export writes both the CPU and the TPU meta graph without a TPU.
CPU_SETTINGS: Dict[str, Any] = {"use_tpu": False}


def preset(name: str, experimental: bool = False) -> TPUPreset:
    """The preset for a TPU type TPUEstimator runs on; `experimental` also allows the v5e presets.

    Raises:
      ValueError: naming the supported types and why `name` is not one of them.
    """
    if name not in PRESETS:
        generation = name.split("-")[0]
        why = _NOT_OFFERED.get(generation, "it is not a known TPU type")
        raise ValueError(
            f"--tpu {name!r}: {why}; use one of {list(SUPPORTED)} (TensorFlow 2.15's TPUEstimator on Vertex AI), "
            "or --cpu"
        )
    found = PRESETS[name]
    if not (found.supported or experimental):
        raise ValueError(
            f"--tpu {name!r} is not supported: {_V5E_WHY}; use one of {list(SUPPORTED)}, or pass "
            "--experimental-tpu to try it anyway (docs/vertex.md, TPU types)"
        )
    return found


def check_topology(found: TPUPreset, topology: Optional[str]) -> Optional[str]:
    """The `tpu_topology` the TPU jobs ask for: the preset's, or `topology` if it describes the same slice."""
    if topology is None:
        return found.topology
    if not _TOPOLOGY.match(topology):
        raise ValueError(f"--tpu-topology {topology!r} must look like 4x4 (chips per dimension)")
    if found.accelerator_type != "TPU_V5_LITEPOD":
        raise ValueError(
            f"--tpu-topology {topology}: --tpu {found.name} runs on Vertex AI's 'cloud-tpu' machine, whose shape "
            "is fixed; drop --tpu-topology (it applies to v5e slices)"
        )
    chips = math.prod(int(n) for n in topology.split("x"))
    if topology not in V5E_TOPOLOGIES or chips != found.num_cores:
        expected = next(t for t in V5E_TOPOLOGIES if math.prod(int(n) for n in t.split("x")) == found.num_cores)
        raise ValueError(
            f"--tpu-topology {topology} does not describe --tpu {found.name} ({found.num_cores} chips): use "
            f"{expected}, or the preset of {chips} chips"
        )
    return topology


@dataclasses.dataclass(frozen=True)
class TPUTarget:
    """How train, evaluate and batch predict run as Vertex AI TPU custom jobs.

    Attributes:
      preset: the TPU machine shape.
      spot: run on Spot VMs (`Scheduling.strategy = SPOT`): cheaper, preemptible at any time.
      reservation: consume this Compute Engine reservation
        ("projects/PROJECT/zones/ZONE/reservations/NAME"; `MachineSpec.reservation_affinity`).
      topology: `MachineSpec.tpu_topology`; None takes the preset's (`check_topology`).
      tensorboard: a Vertex AI TensorBoard ("projects/P/locations/L/tensorboards/ID") the jobs upload their
        logs to; needs `log_root`.
      log_root: gs:// prefix for the jobs' base output directories (TensorBoard reads `<base>/logs`).
    """

    preset: TPUPreset
    spot: bool = False
    reservation: Optional[str] = None
    topology: Optional[str] = None
    tensorboard: Optional[str] = None
    log_root: Optional[str] = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "topology", check_topology(self.preset, self.topology))
        if self.reservation is not None and not _RESERVATION.match(self.reservation):
            raise ValueError(
                f"--reservation {self.reservation!r} must be the reservation's full name: "
                "projects/PROJECT/zones/ZONE/reservations/NAME (a zone of --region)"
            )
        if self.spot and self.reservation:
            raise ValueError(
                "--spot and --reservation ask for different capacity (spare preemptible VMs, or capacity you "
                "reserved); give one of them"
            )
        if self.spot and self.preset.multi_host:
            raise ValueError(
                f"--spot: Vertex AI does not run Spot VMs for TPU slices of several hosts (--tpu {self.preset.name} "
                f"has {self.preset.hosts}); use a single-host type or drop --spot"
            )
        if self.tensorboard is not None:
            tensorboard_location(self.tensorboard)
            if not (self.log_root or "").startswith("gs://"):
                raise ValueError(
                    "--tensorboard needs a gs:// location for the jobs' logs: pass --pipeline-root gs://BUCKET/runs"
                )

    def machine_spec(self) -> Dict[str, Any]:
        """The worker pool's `machine_spec` (Vertex AI `MachineSpec` fields)."""
        spec: Dict[str, Any] = {
            "machine_type": self.preset.machine_type,
            "accelerator_type": self.preset.accelerator_type,
            "accelerator_count": self.preset.accelerator_count,
        }
        if self.topology:
            spec["tpu_topology"] = self.topology
        if self.reservation:
            spec["reservation_affinity"] = {
                "reservation_affinity_type": "SPECIFIC_RESERVATION",
                "key": RESERVATION_KEY,
                "values": [self.reservation],
            }
        return spec

    def base_output_directory(self, stage: str, job_id: str) -> str:
        """Where the job `stage` of the pipeline run `job_id` keeps its outputs ('' without TensorBoard)."""
        if not self.tensorboard:
            return ""
        return f"{str(self.log_root).rstrip('/')}/tensorboard/{job_id}/{stage}"


def as_target(tpu: "TPUPreset | TPUTarget | None") -> Optional[TPUTarget]:
    """A `TPUTarget` for a preset (on-demand capacity, no TensorBoard); a target as it is; None for CPU."""
    if tpu is None or isinstance(tpu, TPUTarget):
        return tpu
    return TPUTarget(tpu)


def tensorboard_location(resource: str) -> str:
    """The region of a Vertex AI TensorBoard resource name; raises ValueError if it is not one."""
    match = _TENSORBOARD.match(resource)
    if not match:
        raise ValueError(
            f"--tensorboard {resource!r} must be a TensorBoard resource name: "
            "projects/PROJECT/locations/REGION/tensorboards/ID (`gcloud ai tensorboards list`)"
        )
    return match.group(1)


def preset_table() -> Tuple[Tuple[str, str, str, int, int, str], ...]:
    """(name, machine type, accelerator type, accelerator count, cores, status) rows, for `--help` and docs."""
    return tuple(
        (
            p.name,
            p.machine_type,
            p.accelerator_type,
            p.accelerator_count,
            p.num_cores,
            ("supported" if p.supported else "experimental (PJRT)")
            + (f", {p.hosts} hosts, topology {p.topology}" if p.multi_host else ""),
        )
        for p in PRESETS.values()
    )
