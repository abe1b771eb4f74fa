"""TPU-strict mode: catch on the CPU what a TPU would refuse, before a TPU is paid for.

Locally TPUEstimator runs with `use_tpu=False`, and CPU mode accepts much that a TPU rejects. Strict mode
builds the graphs the TPU target would run (`job.tpu.num_cores` replicas, whatever `use_tpu` says for the
local run) and rejects, naming the tensor, op or function and the fix:

  config        batch sizes not divisible by the replicas; checkpoints not at TPU loop boundaries
  static-shape  a dynamic shape in the input or inside the model (train, eval, predict)
  dtype         string/int64/float64 inputs, string tensors inside the TPU computation
  finite-input  eval/predict input that is infinite, of unknown length, or shorter than the fixed steps
  outfeed       scalar, dynamic or (eval_metrics) not batch-major host_call/eval_metrics tensors
  host-fn       a metric_fn/host_call function that closes over model-graph tensors
  cross-shard   training without CrossShardOptimizer, or gradients computed outside it
  xla           an op XLA cannot compile in one forward + backward step (compiled on CPU)
  export        a `serve,tpu` graph without TPUPartitionedCall (`check_export`)

Everything here runs on the host CPU; nothing is trained. See docs/strict_mode.md for what strict mode
cannot check without a TPU.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, List, Optional, Sequence, Tuple

import tensorflow as tf

from estimator_lib.config import ConfigError, JobConfig
from estimator_lib.model import inputs
from estimator_lib.schema import Schema
from estimator_lib.strict.export import export_violations
from estimator_lib.strict.graph import (
    build_mode_graph,
    check_cross_shard,
    check_graph_shapes,
    check_graph_strings,
    check_host_fn,
    check_outfeed,
    check_predictions,
    temporary_model_dir,
)
from estimator_lib.strict.inputs import (
    InputInfo,
    TPUTarget,
    call_input_fn,
    callable_name,
    check_dtypes,
    check_finite,
    check_static_shapes,
    schema_input,
)
from estimator_lib.strict.xla import check_xla

ModeKeys = tf.estimator.ModeKeys
ALL_MODES = (ModeKeys.TRAIN, ModeKeys.EVAL, ModeKeys.PREDICT)


class TPUStrictError(ValueError):
    """What a TPU would refuse; the message lists every violation found, each with its fix."""

    def __init__(self, report: "StrictReport"):
        self.report = report
        lines = [f"  {i}. {v}" for i, v in enumerate(report.violations, 1)]
        super().__init__(
            f"TPU-strict mode found {len(lines)} problem(s) a TPU would fail on:\n"
            + "\n".join(lines)
            + "\n(switch strict mode off with tpu.strict=false only if you will never run this on a TPU)"
        )


@dataclasses.dataclass(frozen=True)
class StrictReport:
    """What strict mode checked and what it found.

    Attributes:
      checks: the checks that ran, e.g. "train: xla"; a check skipped because an earlier one failed is absent.
      passed: no violation.
      violations: one message per violation, "[rule] where: what is wrong. Fix: how".
    """

    checks: Tuple[str, ...]
    passed: bool
    violations: Tuple[str, ...]

    @classmethod
    def of(cls, checks: Sequence[str], violations: Sequence[str]) -> "StrictReport":
        return cls(tuple(checks), not violations, tuple(violations))

    def raise_if_failed(self) -> "StrictReport":
        if not self.passed:
            raise TPUStrictError(self)
        return self


def _tagged(rule: str, messages: List[str]) -> List[str]:
    return [f"[{rule}] {m}" for m in messages]


def config_violations(job: JobConfig) -> List[str]:
    """JobConfig's own batch and checkpoint rules, applied to the TPU target (use_tpu=True, num_cores).

    Each rule is probed alone (the other one neutralised) so both are reported when both are broken.
    """
    tpu = dataclasses.replace(job.tpu, use_tpu=True, tpu_name=job.tpu.tpu_name or "local")
    replicas, loop = tpu.num_cores, tpu.iterations_per_loop
    probes = (
        dataclasses.replace(job.training, save_checkpoints_steps=loop),
        dataclasses.replace(
            job.training, train_batch_size=replicas, eval_batch_size=replicas, predict_batch_size=replicas
        ),
    )
    out = []
    for training in probes:
        try:
            JobConfig(tpu=tpu, training=training, model=job.model)
        except ConfigError as e:
            out.append(f"[config] {e}")
    return out


def _needed_batches(mode: str, input_fn: Callable, eval_steps: Optional[int], job: JobConfig, target: TPUTarget):
    """Batches one host's input must yield: fixed steps x replicas per host (None when unknown)."""
    global_batch = job.training.eval_batch_size if mode == ModeKeys.EVAL else job.training.predict_batch_size
    num_examples = getattr(input_fn, "num_examples", None)
    steps = eval_steps if mode == ModeKeys.EVAL else None
    if steps is None and num_examples is not None:
        steps = inputs.eval_steps(num_examples, global_batch)
    return None if steps is None else steps * target.replicas_per_host


def _input_checks(mode, input_fn, job, target, eval_steps) -> Tuple[Optional[InputInfo], List[str], List[str]]:
    """(input specs or None, checks run, violations) for one mode's input_fn."""
    info, violations = call_input_fn(input_fn, target, mode)
    checks = [f"{mode}: input_fn builds with the TPU params"]
    if info is None:
        return None, checks, _tagged("input", violations)
    violations = _tagged("static-shape", check_static_shapes(info, mode, target.batch_sizes[mode], target.num_replicas))
    violations += _tagged("dtype", check_dtypes(info, mode))
    checks += [f"{mode}: static-shape (input)", f"{mode}: dtype (input)"]
    if mode != ModeKeys.TRAIN:
        needed = _needed_batches(mode, input_fn, eval_steps, job, target)
        violations += _tagged("finite-input", check_finite(info, mode, needed, target, callable_name(input_fn)))
        checks.append(f"{mode}: finite-input")
    return info, checks, violations


def _model_checks(model_fn, mode, info, target, model_dir) -> Tuple[List[str], List[str]]:
    """(checks run, violations) for the graph model_fn builds in `mode` and its XLA compilation."""
    name = f"{getattr(model_fn, '__module__', '?')}.{callable_name(model_fn)}"
    try:
        g = build_mode_graph(model_fn, mode, info, target, model_dir)
    except Exception as e:  # noqa: BLE001 - reported, with what the TPU build would have raised
        return [f"{mode}: model_fn builds"], [
            f"[model] {mode} model_fn {name} fails to build for the TPU target ({type(e).__name__}: {e}). Fix: "
            "make it build with params['use_tpu']=True and the per-replica batch size"
        ]
    checks = [f"{mode}: static-shape (model graph)", f"{mode}: dtype (model graph)"]
    violations = _tagged("static-shape", check_graph_shapes(g, name)) + _tagged("dtype", check_graph_strings(g, name))
    if mode == ModeKeys.PREDICT:
        violations += _tagged("static-shape", check_predictions(g, name, target.batch_sizes[mode]))
    calls = [("host_call", g.spec.host_call, None)]
    if mode == ModeKeys.EVAL:
        calls.append(("eval_metrics", g.spec.eval_metrics, target.batch_sizes[mode]))
    for call_name, call, batch in calls:
        if call:
            violations += _tagged("outfeed", check_outfeed(g, call_name, call, batch))
            violations += _tagged("host-fn", check_host_fn(g, call_name, call, target.num_replicas))
            checks += [f"{mode}: outfeed ({call_name})", f"{mode}: host-fn ({call_name})"]
    if mode == ModeKeys.TRAIN:
        violations += _tagged("cross-shard", check_cross_shard(g, name))
        checks.append(f"{mode}: cross-shard")
    violations += _tagged("xla", check_xla(model_fn, mode, info, target, model_dir, name))
    checks.append(f"{mode}: xla")
    return checks, violations


def check_model(
    job: JobConfig,
    schema: Schema,
    model_fn: Callable,
    *,
    train_input_fn: Optional[Callable] = None,
    eval_input_fn: Optional[Callable] = None,
    predict_input_fn: Optional[Callable] = None,
    eval_steps: Optional[int] = None,
    modes: Sequence[str] = ALL_MODES,
) -> StrictReport:
    """Checks a model_fn and its input_fns against the TPU target of `job`; raises on any violation.

    Each mode's input_fn is called with the params a TPU would pass (per-replica batch = global batch /
    `job.tpu.num_cores`, and a TPU `context`); a mode without an input_fn gets the features our input pipelines
    produce for `schema`. The model_fn is then built for each mode with `use_tpu=True` and its step compiled
    with XLA on the CPU.

    Args:
      job: the job config; `job.tpu.num_cores` is the TPU target even when `job.tpu.use_tpu` is False.
      schema: the feature schema (for modes without an input_fn).
      model_fn: a TPUEstimator model_fn, e.g. `estimator_lib.model.model_fn.build_model_fn(schema, job)`.
      train_input_fn, eval_input_fn, predict_input_fn: input_fn(params) -> Dataset, or None.
      eval_steps: the fixed evaluation steps; by default `inputs.eval_steps(eval_input_fn.num_examples, ...)`
        when the input_fn carries `num_examples`.
      modes: the modes to check (all three by default).

    Returns:
      The passing `StrictReport`.

    Raises:
      TPUStrictError: listing every violation found.
    """
    checks, violations = ["config"], config_violations(job)
    if violations:  # per-replica batch sizes are undefined until the config is fixed
        return StrictReport.of(checks, violations).raise_if_failed()
    target = TPUTarget.for_job(job)
    input_fns = {
        ModeKeys.TRAIN: train_input_fn,
        ModeKeys.EVAL: eval_input_fn,
        ModeKeys.PREDICT: predict_input_fn,
    }
    with temporary_model_dir() as model_dir:
        for mode in modes:
            if input_fns[mode] is None:
                info = schema_input(schema, mode, target.batch_sizes[mode])
                checks.append(f"{mode}: input from the schema (no input_fn given)")
            else:
                info, mode_checks, mode_violations = _input_checks(mode, input_fns[mode], job, target, eval_steps)
                checks += mode_checks
                violations += mode_violations
                if mode_violations:  # the model checks would only repeat the input's problems
                    continue
            mode_checks, mode_violations = _model_checks(model_fn, mode, info, target, model_dir)
            checks += mode_checks
            violations += mode_violations
    return StrictReport.of(checks, violations).raise_if_failed()


def check_export(export_dir: str) -> StrictReport:
    """Checks a SavedModel's `serve,tpu` meta graph contains TPUPartitionedCall; raises TPUStrictError if not."""
    checks, violations = export_violations(export_dir)
    return StrictReport.of(checks, violations).raise_if_failed()
