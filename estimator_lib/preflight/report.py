"""What preflight found: memory per core, the step's time bound and the input's rate, as one frozen record."""

from __future__ import annotations

import dataclasses
from typing import Any, Dict, List, Optional, Tuple

GIB = 1 << 30
FITS, DOES_NOT_FIT, INPUT_BOUND = "fits", "does not fit", "input-bound"


def size(n: float) -> str:
    """Bytes for a person: 1.2 GiB, 340 MiB, 12 KiB, 7 B."""
    for unit, scale in (("GiB", GIB), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(n) >= scale:
            return f"{n / scale:.3g} {unit}" if n / scale < 1000 else f"{n / scale:,.0f} {unit}"
    return f"{n:.0f} B"


def duration(seconds: float) -> str:
    if seconds >= 3600:
        return f"{seconds / 3600:.3g} h"
    if seconds >= 1:
        return f"{seconds:.3g} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.3g} ms"
    return f"{seconds * 1e6:.3g} us"


@dataclasses.dataclass(frozen=True)
class TopBuffer:
    """One of the largest buffers: a variable (kind "parameter" or "slot"), a gradient, or an HLO buffer of the
    step ("input", "temporary"), named by its variable or HLO instruction and the TensorFlow op that makes it."""

    name: str
    op: str
    kind: str
    shape: str
    bytes: int
    padded_bytes: int

    @property
    def waste(self) -> int:
        """Bytes of tile padding."""
        return self.padded_bytes - self.bytes

    def describe(self) -> str:
        op = f" ({self.op})" if self.op and self.op != self.name else ""
        waste = f", {size(self.waste)} padding" if self.waste else ""
        return f"{self.kind} {self.name}{op}: {self.shape}, {size(self.padded_bytes)}{waste}"


@dataclasses.dataclass(frozen=True)
class Memory:
    """HBM one core needs at one per-core batch, in padded bytes (the unpadded bytes of the variables beside)."""

    batch: int
    parameters: int
    slots: int
    gradients: int
    activations: int
    parameters_unpadded: int
    slots_unpadded: int
    gradients_unpadded: int

    @property
    def total(self) -> int:
        return self.parameters + self.slots + self.gradients + self.activations


@dataclasses.dataclass(frozen=True)
class InputRate:
    """The train input's rate: measured here (`examples` over `seconds` on `cpu_count` CPUs), scaled to the TPU
    host's vCPUs, against what one host's cores consume at a step of `step_seconds` (`needed`)."""

    measured: float
    examples: int
    seconds: float
    cpu_count: int
    host_cores: int
    needed: float
    step_seconds: float

    @property
    def scaled(self) -> float:
        return self.measured * self.host_cores / self.cpu_count

    @property
    def keeps_up(self) -> bool:
        return self.scaled >= self.needed


ADVICE = (
    "read files in parallel (tf.data.Dataset.interleave with num_parallel_calls=tf.data.AUTOTUNE)",
    "parse and transform in parallel (map(..., num_parallel_calls=tf.data.AUTOTUNE)), batch before map",
    "cache the parsed rows (dataset.cache()) when they fit the host's memory",
    "do fewer per-row ops on the host: move the work into the model_fn (it runs on the TPU) or into preparation",
    "raise tpu.iterations_per_loop so the host's round trips are fewer",
)


@dataclasses.dataclass(frozen=True)
class PredictBound:
    """Batch prediction's time on the TPU at the roofline: `rows` rows in steps of the per-core predict `batch` on
    every core, each step's bound (`step_seconds`) from the compiled predict step's FLOPs and bytes."""

    rows: int
    batch: int
    steps: int
    flops: int
    bytes_accessed: int
    step_seconds: float
    seconds: float

    def describe(self) -> str:
        return (
            f"  batch prediction of {self.rows:,} rows: {self.steps:,} step{'' if self.steps == 1 else 's'} of "
            f"{self.batch} per core, "
            f"{self.flops:,} FLOPs and {size(self.bytes_accessed)} accessed each -> >= {duration(self.seconds)}"
        )


@dataclasses.dataclass(frozen=True)
class Preflight:
    """Before a TPU is paid for: will the model fit, how fast can a step be, will the host keep up.

    Attributes:
      tpu_type: e.g. "v3-8"; accelerator: "TPU_V3"; cores: TPU cores (replicas).
      hbm_bytes: HBM per core.
      memory: at the job's per-core batch.
      top_buffers: the five largest buffers at that batch.
      largest_batch: the largest per-core batch found to fit (0: batch 1 does not fit; None: not searched).
      smallest_failing_batch: the smallest per-core batch found not to fit (None: none found within the compiles).
      compiles: train-step compilations made.
      flops, bytes_accessed: per step and core, from the optimized HLO.
      step_seconds: the roofline lower bound of a step; bound: "compute" or "memory".
      examples_per_second: the slice's, at the step bound.
      train_steps, run_seconds: the run's step budget and its time at the bound (None when unknown).
      price_per_hour, run_cost: the TPU's price and the budget's cost (None when not given or unknown);
      price_note: what is missing for a price.
      input: the train input's rate (None when no input_fn was measured).
      seconds: preflight's own wall time.
      predict: batch prediction's bound (None when no row count was given).
    """

    tpu_type: str
    accelerator: str
    cores: int
    hbm_bytes: int
    memory: Memory
    top_buffers: Tuple[TopBuffer, ...]
    largest_batch: Optional[int]
    smallest_failing_batch: Optional[int]
    compiles: int
    flops: int
    bytes_accessed: int
    step_seconds: float
    bound: str
    examples_per_second: float
    train_steps: Optional[int]
    run_seconds: Optional[float]
    price_per_hour: Optional[float]
    run_cost: Optional[float]
    price_note: str
    input: Optional[InputRate]
    seconds: float
    predict: Optional[PredictBound] = None

    @property
    def fits(self) -> bool:
        return self.memory.total <= self.hbm_bytes

    @property
    def verdict(self) -> str:
        if not self.fits:
            return DOES_NOT_FIT
        return INPUT_BOUND if self.input is not None and not self.input.keeps_up else FITS

    def _largest(self) -> str:
        if self.largest_batch is None or self.compiles <= 1 and self.smallest_failing_batch != 1:
            return "largest per-core batch not searched"  # one compile, at the job's batch
        if self.largest_batch == 0:
            return "batch 1 does not fit"
        bound = "" if self.smallest_failing_batch is not None else ">= "
        return f"largest per-core batch {bound}{self.largest_batch}"

    def verdict_line(self) -> str:
        m = self.memory
        line = (
            f"preflight {self.tpu_type}: {self.verdict} (peak {size(m.total)} of {size(self.hbm_bytes)} per core; "
            f"{self._largest()}); step >= {duration(self.step_seconds)}"
        )
        if self.input is not None:
            keeps = "keeps up" if self.input.keeps_up else "cannot keep up"
            line += f"; input {self.input.scaled:,.0f} ex/s needed {self.input.needed:,.0f}: {keeps}"
        return line

    def lines(self) -> List[str]:
        """A short console block: the verdict line, memory, the largest buffers, time, input and what to change."""
        m = self.memory
        lines = [
            self.verdict_line(),
            f"  memory per core at batch {m.batch}: parameters {size(m.parameters)}, optimizer slots {size(m.slots)}, "
            f"gradients {size(m.gradients)}, activations peak {size(m.activations)} (TPU tile padding included)",
            "  largest buffers:",
            *(f"    {b.describe()}" for b in self.top_buffers),
            f"  step: {self.flops:,} FLOPs, {size(self.bytes_accessed)} accessed per core -> >= "
            f"{duration(self.step_seconds)} ({self.bound}-bound), <= {self.examples_per_second:,.0f} examples/s",
        ]
        if self.run_seconds is not None:
            cost = f", {self.run_cost:.2f} USD" if self.run_cost is not None else f" ({self.price_note})"
            lines.append(f"  {self.train_steps:,} steps: >= {duration(self.run_seconds)}{cost}")
        if self.predict is not None:
            lines.append(self.predict.describe())
        if self.input is not None:
            i = self.input
            lines.append(
                f"  input: {i.measured:,.0f} examples/s on {i.cpu_count} CPU(s) here, x{i.host_cores}/{i.cpu_count} "
                f"for the TPU host's vCPUs = {i.scaled:,.0f}; a step of {duration(i.step_seconds)} consumes "
                f"{i.needed:,.0f} per host"
            )
            if not i.keeps_up:
                lines += ["  to feed it:", *(f"    {advice}" for advice in ADVICE)]
        return lines

    def describe(self) -> str:
        return "\n".join(self.lines())

    def to_dict(self) -> Dict[str, Any]:
        """JSON-safe: every field, the verdict, fits, and each buffer's padding waste."""
        out = dataclasses.asdict(self)
        out["memory"]["total"] = self.memory.total
        out["top_buffers"] = [{**dataclasses.asdict(b), "waste": b.waste} for b in self.top_buffers]
        if self.input is not None:
            out["input"].update(scaled=self.input.scaled, keeps_up=self.input.keeps_up)
        return {**out, "fits": self.fits, "verdict": self.verdict}
