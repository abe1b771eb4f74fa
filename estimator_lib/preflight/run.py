"""Preflight a model for a TPU type: memory per core from XLA's compiled train step, the largest per-core batch
that fits (found by compiling), the step's roofline bound, and whether the train input keeps up."""

from __future__ import annotations

import dataclasses
import os
import time
from typing import Callable, Dict, List, Optional, Tuple

import tensorflow as tf

from estimator_lib.cloud.cost import PriceTable
from estimator_lib.config import JobConfig
from estimator_lib.preflight import hlo
from estimator_lib.preflight.chips import Chip, chip
from estimator_lib.preflight.inputs import measure_rate
from estimator_lib.preflight.report import InputRate, Memory, PredictBound, Preflight, TopBuffer
from estimator_lib.preflight.step import CompiledStep, compile_step, compile_train_step
from estimator_lib.schema import Schema
from estimator_lib.strict.graph import temporary_model_dir
from estimator_lib.strict.inputs import InputInfo, TPUTarget, call_input_fn, schema_input

TRAIN, PREDICT = tf.estimator.ModeKeys.TRAIN, tf.estimator.ModeKeys.PREDICT
MAX_COMPILES = 10
# The batch search stops here: XLA's compile time grows with the batch (it folds batch-sized constants), and a
# per-core batch past it is no practical limit.
MAX_BATCH = 1 << 16
TOP = 5
# An assumption, not a measurement (no TPU here): the least time a TPUEstimator step takes whatever the model (the
# on-device loop, 8 infeed transfers per host, the gradients' all-reduce). Used only for the rate the input must
# keep up with: a tiny model's roofline bound (a microsecond) would ask any host for more than it can ever give.
ASSUMED_MIN_STEP_SECONDS = 1e-3
PRICED_MACHINE = "cloud-tpu"  # the machine type Vertex AI prices a TPU slice under (prices.json)


def measure(step: CompiledStep) -> Tuple[Memory, List[TopBuffer]]:
    """Memory per core of one compiled step, and its buffers largest first."""
    params = [v for v in step.variables if not v.slot]
    slots = [v for v in step.variables if v.slot]
    trained = [v for v in params if v.trainable]
    buffers = hlo.live_buffers(hlo.parse_module(step.hlo), step.variable_parameters)
    activations = [b for b in buffers if b.kind != "output"]
    memory = Memory(
        step.batch,
        sum(v.padded_bytes for v in params),
        sum(v.padded_bytes for v in slots),
        sum(v.padded_bytes for v in trained),
        hlo.peak(activations)[0],
        sum(v.bytes for v in params),
        sum(v.bytes for v in slots),
        sum(v.bytes for v in trained),
    )
    shape = lambda v: f"{v.dtype}[{','.join(map(str, v.dims))}]"  # noqa: E731
    top = [
        TopBuffer(v.name, "", "slot" if v.slot else "parameter", shape(v), v.bytes, v.padded_bytes)
        for v in params + slots
    ]
    top += [TopBuffer(f"{v.name} (gradient)", "", "gradient", shape(v), v.bytes, v.padded_bytes) for v in trained]
    top += [
        TopBuffer(b.instruction, b.op, b.kind, str(b.array), b.array.bytes, b.array.padded_bytes) for b in activations
    ]
    return memory, sorted(top, key=lambda b: -b.padded_bytes)


def _train_info(schema: Optional[Schema], train_input_fn: Optional[Callable], target: TPUTarget) -> InputInfo:
    """The train batch's specs: what `train_input_fn` yields with the TPU params, else the schema's features."""
    batch = target.batch_sizes[TRAIN]
    if train_input_fn is None:
        if schema is None:
            raise ValueError("preflight needs the train input_fn (a user model_fn) or the schema (a built-in family)")
        return schema_input(schema, TRAIN, batch)
    info, findings = call_input_fn(train_input_fn, target, TRAIN)
    if info is None:
        raise ValueError(findings[0].message)
    return info


class _Compiler:
    """Compiles the train step at per-core batches and keeps each batch's memory (for the batch search)."""

    def __init__(self, model_fn: Callable, info: InputInfo, target: TPUTarget, model_dir: str):
        self.model_fn, self.info, self.target, self.model_dir = model_fn, info, target, model_dir
        self.totals: Dict[int, int] = {}
        self.fixed = 0

    def step(self, batch: int) -> CompiledStep:
        compiled = compile_train_step(self.model_fn, self.info, self.target, batch, self.model_dir)
        memory, _ = measure(compiled)
        self.totals[batch], self.fixed = memory.total, memory.total - memory.activations
        return compiled

    def total(self, batch: int) -> int:
        if batch not in self.totals:
            self.step(batch)
        return self.totals[batch]


def _predicted(totals: Dict[int, int], fixed: int, hbm: int) -> Optional[int]:
    """The batch where the total would reach `hbm`, on a line through the two compiled batches nearest to it (or
    through one and the batch-independent bytes): only where to compile next, never the answer."""
    if len(totals) == 1:
        ((b, t),) = totals.items()
        return int(b * (hbm - fixed) / (t - fixed)) if t > fixed else None
    (b1, t1), (b2, t2) = sorted(totals.items(), key=lambda kv: abs(kv[1] - hbm))[:2]
    return int(b1 + (hbm - t1) * (b2 - b1) / (t2 - t1)) if t2 != t1 else None


def _search(compiler: _Compiler, hbm: int, start: int, max_compiles: int) -> Tuple[int, Optional[int]]:
    """(largest per-core batch that fits, smallest that does not or None), compiling at most `max_compiles` batches
    (those compiled already included): from `start`, up by the prediction (at least doubling) until a batch does
    not fit, then inside the bracket until it is 1/32 of the batch wide; up to `MAX_BATCH`."""
    fit, fail, batch = 0, None, start
    while True:
        if compiler.total(batch) <= hbm:
            fit = max(fit, batch)
        else:
            fail = batch if fail is None else min(fail, batch)
        tolerance = max(1, fit // 32)
        if (fail is not None and fail - fit <= tolerance) or len(compiler.totals) >= max_compiles:
            return fit, fail
        guess = _predicted(compiler.totals, compiler.fixed, hbm)
        if fail is None:
            if fit >= MAX_BATCH:
                return fit, fail
            batch = min(max(guess or 0, 2 * fit), MAX_BATCH)
        else:
            low, high = fit + tolerance, fail - tolerance
            batch = (fit + fail) // 2 if guess is None or low > high else min(max(guess, low), high)
        if batch in compiler.totals:
            batch = (fit + (fail or 2 * fit)) // 2
        if batch in compiler.totals or batch < 1:
            return fit, fail


def largest_batch(
    job: JobConfig,
    schema: Optional[Schema],
    model_fn: Callable,
    *,
    train_input_fn: Optional[Callable] = None,
    hbm_bytes: int,
    max_compiles: int = MAX_COMPILES,
) -> int:
    """The largest per-core train batch whose compiled step fits `hbm_bytes` (0 when batch 1 does not fit).

    Found by compiling the train step (at most `max_compiles` times), starting at the job's per-core batch; when
    no compiled batch fails within the compiles, the largest that fit.
    """
    target = TPUTarget.for_job(job)
    info = _train_info(schema, train_input_fn, target)
    with temporary_model_dir() as model_dir:
        return _search(
            _Compiler(model_fn, info, target, model_dir), hbm_bytes, target.batch_sizes[TRAIN], max_compiles
        )[0]


def _price(
    prices: Optional[PriceTable], region: str, spot: bool, accelerator: str, cores: int
) -> Tuple[Optional[float], str]:
    if prices is None:
        return None, "no price table given"
    named = f"{accelerator} x{cores}"
    price = prices.price(region, PRICED_MACHINE, named, spot)
    return (
        price,
        "" if price is not None else f"no price for {PRICED_MACHINE} + {named} in region {region} ({prices.path})",
    )


def _update_bytes(memory: Memory) -> int:
    """HBM bytes of the optimizer's update, which the compiled step leaves out: each trainable variable and its
    slots read and written, its gradient read."""
    return 2 * memory.gradients + memory.gradients + 2 * memory.slots


def _input_rate(input_fn, target: TPUTarget, seconds: float, tpu: Chip, pace: float) -> InputRate:
    """The input's rate against what one host's cores consume at a step of `pace` seconds."""
    rate, examples = measure_rate(input_fn, target, seconds)
    needed = target.batch_sizes[TRAIN] * target.replicas_per_host / pace
    return InputRate(rate, examples, seconds, os.cpu_count() or 1, tpu.host_cores, needed, pace)


def run_preflight(
    job: JobConfig,
    schema: Optional[Schema],
    model_fn: Callable,
    *,
    train_input_fn: Optional[Callable] = None,
    accelerator: str,
    cores: int,
    prices: Optional[PriceTable] = None,
    train_steps: Optional[int] = None,
    input_seconds: float = 5.0,
    region: str = "us-central1",
    spot: bool = False,
    max_compiles: int = MAX_COMPILES,
    min_step_seconds: float = ASSUMED_MIN_STEP_SECONDS,
    predict_rows: Optional[int] = None,
) -> Preflight:
    """Preflight `model_fn` for `cores` cores of `accelerator` ("TPU_V2", "TPU_V3", "TPU_V5_LITEPOD").

    The job's per-core train batch is `training.train_batch_size / cores` (as strict mode computes it, with
    `tpu.num_cores` set to `cores`). Runs on the CPU; nothing is trained and no variable is allocated.

    Args:
      job: the job config (batch sizes, seed, `training.train_steps`).
      schema: the feature schema of a built-in family (its input when `train_input_fn` is None), or None.
      model_fn: a TPUEstimator model_fn (`model.model_fn.build_model_fn(schema, job)`, or a user's).
      train_input_fn: input_fn(params) -> Dataset (None: the schema's features); its rate is measured for
        `input_seconds` (not when 0).
      accelerator, cores: the TPU.
      prices: a price table (`cloud.cost.read_prices`) for the run's cost, priced in `region` (`spot`).
      train_steps: the step budget (default `job.training.train_steps`).
      max_compiles: the train-step compilations allowed for the batch search.
      min_step_seconds: the least time a step takes, for the input's check only (an assumption).
      predict_rows: the rows batch prediction will score: its bound is found from the compiled predict step at
        the job's per-core predict batch (None: not compiled).

    Raises:
      ValueError: no input to build the model on, or an input_fn that fails with the TPU params.
      ModelBuildError: the model_fn's own code raised while it was built.
    """
    started, tpu = time.perf_counter(), chip(accelerator)
    job = dataclasses.replace(job, tpu=dataclasses.replace(job.tpu, num_cores=cores))
    target = TPUTarget.for_job(job)
    batch = target.batch_sizes[TRAIN]
    info = _train_info(schema, train_input_fn, target)
    with temporary_model_dir() as model_dir:
        compiler = _Compiler(model_fn, info, target, model_dir)
        compiled = compiler.step(batch)
        memory, top = measure(compiled)
        largest, failing = _search(compiler, tpu.hbm_bytes_per_core, batch, max_compiles)
        predict = None if predict_rows is None else _predict_bound(model_fn, info, target, model_dir, tpu, predict_rows)
    flops, moved = hlo.cost(hlo.parse_module(compiled.hlo))
    moved += _update_bytes(memory)
    compute, traffic = flops / tpu.peak_flops_per_core, moved / tpu.hbm_bytes_per_second_per_core
    step_seconds = max(compute, traffic)
    steps = job.training.train_steps if train_steps is None else train_steps
    run_seconds = None if steps is None else steps * step_seconds
    price, note = _price(prices, region, spot, tpu.accelerator, cores)
    measured = train_input_fn is not None and input_seconds > 0
    rate = (
        None
        if not measured
        else _input_rate(train_input_fn, target, input_seconds, tpu, max(step_seconds, min_step_seconds))
    )
    return Preflight(
        tpu_type=f"{tpu.name}-{cores}",
        accelerator=tpu.accelerator,
        cores=cores,
        hbm_bytes=tpu.hbm_bytes_per_core,
        memory=memory,
        top_buffers=tuple(top[:TOP]),
        largest_batch=largest,
        smallest_failing_batch=failing,
        compiles=len(compiler.totals),
        flops=flops,
        bytes_accessed=moved,
        step_seconds=step_seconds,
        bound="compute" if compute >= traffic else "memory",
        examples_per_second=batch * cores / step_seconds if step_seconds else 0.0,
        train_steps=steps,
        run_seconds=run_seconds,
        price_per_hour=price,
        run_cost=None if price is None or run_seconds is None else run_seconds / 3600 * price,
        price_note=note,
        input=rate,
        seconds=time.perf_counter() - started,
        predict=predict,
    )


def _predict_bound(
    model_fn: Callable, info: InputInfo, target: TPUTarget, model_dir: str, tpu: Chip, rows: int
) -> PredictBound:
    """Batch prediction of `rows` rows at the roofline: the predict step compiled at the per-core predict batch,
    its FLOPs and bytes against the chip's peaks, times the steps the rows take on every core (the last padded)."""
    batch = target.batch_sizes[PREDICT]
    compiled = compile_step(model_fn, PREDICT, info, target, batch, model_dir)
    flops, moved = hlo.cost(hlo.parse_module(compiled.hlo))
    step = max(flops / tpu.peak_flops_per_core, moved / tpu.hbm_bytes_per_second_per_core)
    steps = -(-rows // (batch * target.num_replicas))
    return PredictBound(rows, batch, steps, flops, moved, step, steps * step)
