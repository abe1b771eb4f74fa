"""TPU-strict mode: catch on the CPU what a TPU would refuse, before a TPU is paid for.

Locally TPUEstimator runs with `use_tpu=False`, and CPU mode accepts much that a TPU rejects. Strict mode
builds the graphs the TPU target would run (`job.tpu.num_cores` replicas, whatever `use_tpu` says for the
local run) and reports each finding with its class (`fails` blocks, `differs` and `note` do not), naming the
tensor, op or function and the fix:

  config        batch sizes not divisible by the replicas; checkpoints not at TPU loop boundaries
  input         an input_fn that fails with the TPU params or returns no Dataset
  static-shape  a dynamic shape in the input or inside the model (train, eval, predict)
  dtype         string/float64 inputs and string tensors inside the TPU computation; int64 inputs (a note)
  finite-input  eval/predict input that is infinite, of unknown length, or shorter than the fixed steps
  spec          a plain EstimatorSpec in EVAL or PREDICT, which TPUEstimator's TPU loops refuse
  outfeed       scalar, dynamic or (eval_metrics) not batch-major host_call/eval_metrics tensors
  host-fn       a metric_fn/host_call function that closes over model-graph tensors
  cross-shard   training without CrossShardOptimizer (fails); gradients it sums unscaled (differs)
  xla           an op XLA cannot compile in one forward + backward step (compiled on CPU)
  model         TensorFlow refuses to build the model_fn's graph for the TPU target
  export        a `serve,tpu` graph without TPUPartitionedCall (`check_export`)

An exception the user's own code raises while the model_fn is built is a `ModelBuildError`, not a finding.
Everything here runs on the host CPU; nothing is trained. See docs/strict_mode.md for what strict mode
cannot check without a TPU.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from typing import Callable, List, Optional, Sequence, Tuple

import tensorflow as tf

from estimator_lib import storage
from estimator_lib.config import ConfigError, JobConfig
from estimator_lib.model import inputs
from estimator_lib.schema import Schema
from estimator_lib.strict.export import export_findings
from estimator_lib.strict.findings import DIFFERS, FAILS, NOTE, Finding
from estimator_lib.strict.graph import (
    build_mode_graph,
    check_cross_shard,
    check_graph_shapes,
    check_graph_strings,
    check_host_fn,
    check_outfeed,
    check_predictions,
    check_spec,
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
from estimator_lib.strict.user_code import ModelBuildError, located, raised_by_tensorflow, traceback_frames, user_frame
from estimator_lib.strict.xla import check_xla

log = logging.getLogger(__name__)
STRICT_FILE = "strict.json"  # beside the checkpoints: what the train stage's strict check found (`record_report`)
ModeKeys = tf.estimator.ModeKeys
ALL_MODES = (ModeKeys.TRAIN, ModeKeys.EVAL, ModeKeys.PREDICT)
_HINT = (
    "  A finding that is wrong for this model can be accepted by its name, tpu.strict_accept=['RULE:WHERE'] "
    "(shell wildcards, e.g. --set tpu.strict_accept=cross-shard:*); switch strict mode off (tpu.strict=false) "
    "only if you will never run this on a TPU"
)


class TPUStrictError(ValueError):
    """What a TPU would refuse: the message lists every blocking finding grouped by rule and counted, then the
    accepted ones, the differences and the notes."""

    def __init__(self, report: "StrictReport"):
        self.report = report
        blocking = report.blocking
        lines = [f"TPU-strict mode found {len(blocking)} problem(s) a TPU would fail on:"]
        lines += _grouped(blocking)
        lines += report.non_blocking_lines()
        super().__init__("\n".join(lines + [_HINT]))


def _grouped(findings: Sequence[Finding], accept: Sequence[str] = (), first: int = 1) -> List[str]:
    """Lines listing `findings` grouped by rule, each group headed by its count, the items numbered from `first`
    and named ("name: RULE:WHERE", or the pattern that accepted it)."""
    lines, number = [], first
    for rule in dict.fromkeys(f.rule for f in findings):
        members = [f for f in findings if f.rule == rule]
        lines.append(f"  [{rule}] {len(members)}:")
        for f in members:
            pattern = f.accepted_by(accept)
            named = f"accepted by {pattern!r}" if pattern else f"name: {f.name}"
            lines.append(f"    {number}. {f.message} ({named})")
            number += 1
    return lines


@dataclasses.dataclass(frozen=True)
class StrictReport:
    """What strict mode checked and what it found.

    Attributes:
      checks: the checks that ran, e.g. "train: xla"; a check skipped because an earlier one failed is absent.
      findings: every finding, in the order found.
      accept: the "RULE:WHERE" patterns (shell wildcards) whose findings do not block (`tpu.strict_accept`).
    """

    checks: Tuple[str, ...]
    findings: Tuple[Finding, ...] = ()
    accept: Tuple[str, ...] = ()

    @classmethod
    def of(cls, checks: Sequence[str], findings: Sequence[Finding], accept: Sequence[str] = ()) -> "StrictReport":
        return cls(tuple(checks), tuple(findings), tuple(accept))

    def _open(self, severity: str) -> Tuple[Finding, ...]:
        return tuple(f for f in self.findings if f.severity == severity and not f.accepted_by(self.accept))

    @property
    def blocking(self) -> Tuple[Finding, ...]:
        """The `fails` findings no pattern accepts: these stop the run."""
        return self._open(FAILS)

    @property
    def accepted(self) -> Tuple[Finding, ...]:
        """The findings (of any class) an accept pattern matches."""
        return tuple(f for f in self.findings if f.accepted_by(self.accept))

    @property
    def differs(self) -> Tuple[Finding, ...]:
        """Runs on a TPU, but computes something else than on the CPU (not accepted)."""
        return self._open(DIFFERS)

    @property
    def notes(self) -> Tuple[Finding, ...]:
        return self._open(NOTE)

    @property
    def passed(self) -> bool:
        """No blocking finding."""
        return not self.blocking

    @property
    def violations(self) -> Tuple[str, ...]:
        """The blocking findings as "[rule] where: what is wrong. Fix: how"."""
        return tuple(str(f) for f in self.blocking)

    def non_blocking_lines(self) -> List[str]:
        """The accepted findings, the differences and the notes, each section grouped by rule and counted."""
        lines, number = [], len(self.blocking) + 1
        sections = (
            ("accepted by tpu.strict_accept (not blocking)", self.accepted),
            ("differs: runs on a TPU but computes something else than on the CPU (not blocking)", self.differs),
            ("notes", self.notes),
        )
        for title, members in sections:
            if members:
                lines.append(f"  {title}, {len(members)}:")
                lines += ["  " + line for line in _grouped(members, self.accept, number)]
                number += len(members)
        return lines

    def describe(self) -> str:
        """Every finding grouped by class and rule, counted: the text a stage logs."""
        counts = ", ".join(f"{len(group)} {name}" for name, group in self._counts())
        head = f"TPU-strict mode: {len(self.checks)} check(s), {len(self.findings)} finding(s) ({counts})"
        blocking = [f"  fails (blocking), {len(self.blocking)}:"] + ["  " + x for x in _grouped(self.blocking)]
        return "\n".join([head] + (blocking if self.blocking else []) + self.non_blocking_lines())

    def _counts(self):
        return (
            (FAILS, self.blocking),
            ("accepted", self.accepted),
            (DIFFERS, self.differs),
            ("notes", self.notes),
        )

    def to_dict(self) -> dict:
        """The report as the train stage records it (`record_report`): the checks run, each class's count, and
        every finding with its name, class, the accept pattern that matched it (or None) and its message."""
        counts = {name: len(group) for name, group in self._counts()}
        findings = [
            {"name": f.name, "severity": f.severity, "accepted_by": f.accepted_by(self.accept), "message": f.message}
            for f in self.findings
        ]
        return {"checks": len(self.checks), "counts": counts, "accept": list(self.accept), "findings": findings}

    def raise_if_failed(self) -> "StrictReport":
        if not self.passed:
            raise TPUStrictError(self)
        return self


def config_findings(job: JobConfig) -> List[Finding]:
    """JobConfig's own batch and checkpoint rules, applied to the TPU target (use_tpu=True, num_cores).

    Each rule is probed alone (the other one neutralised) so both are reported when both are broken. A finding's
    `where` is the setting named by the error ("training.train_batch_size").
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
            out.append(Finding("config", str(e).split("=", 1)[0].strip(), FAILS, str(e)))
    return out


def _needed_batches(mode: str, input_fn: Callable, eval_steps: Optional[int], job: JobConfig, target: TPUTarget):
    """Batches one host's input must yield: fixed steps x replicas per host (None when unknown)."""
    global_batch = job.training.eval_batch_size if mode == ModeKeys.EVAL else job.training.predict_batch_size
    num_examples = getattr(input_fn, "num_examples", None)
    steps = eval_steps if mode == ModeKeys.EVAL else None
    if steps is None and num_examples is not None:
        steps = inputs.eval_steps(num_examples, global_batch)
    return None if steps is None else steps * target.replicas_per_host


def _input_checks(mode, input_fn, job, target, eval_steps) -> Tuple[Optional[InputInfo], List[str], List[Finding]]:
    """(input specs or None, checks run, findings) for one mode's input_fn."""
    info, findings = call_input_fn(input_fn, target, mode)
    checks = [f"{mode}: input_fn builds with the TPU params"]
    if info is None:
        return None, checks, findings
    findings = check_static_shapes(info, mode, target.batch_sizes[mode], target.num_replicas)
    findings += check_dtypes(info, mode)
    checks += [f"{mode}: static-shape (input)", f"{mode}: dtype (input)"]
    if mode != ModeKeys.TRAIN:
        needed = _needed_batches(mode, input_fn, eval_steps, job, target)
        findings += check_finite(info, mode, needed, target, callable_name(input_fn))
        checks.append(f"{mode}: finite-input")
    return info, checks, findings


def _build_failure(error: Exception, mode: str, name: str, target: TPUTarget) -> Finding:
    """The `[model]` finding for an error TensorFlow raised while the model_fn built its graph."""
    origin = user_frame(traceback_frames(error.__traceback__))
    at = f" at {located(origin)}" if origin else ""
    first = str(error).strip().splitlines()[0] if str(error).strip() else ""
    return Finding(
        "model",
        mode,
        FAILS,
        f"{mode} model_fn {name} fails to build for the TPU target: TensorFlow raised {type(error).__name__}: "
        f"{first}{at}. Fix: make it build as TPUEstimator calls it on a TPU (params['use_tpu']=True, "
        f"params['batch_size']={target.batch_sizes[mode]} rows per replica, the global step already created)",
    )


def _model_checks(model_fn, mode, info, target, model_dir) -> Tuple[List[str], List[Finding]]:
    """(checks run, findings) for the graph model_fn builds in `mode` and its XLA compilation.

    Raises:
      ModelBuildError: the model_fn's own code raised while it was built.
    """
    name = f"{getattr(model_fn, '__module__', '?')}.{callable_name(model_fn)}"
    try:
        g = build_mode_graph(model_fn, mode, info, target, model_dir)
    except ModelBuildError:
        raise
    except Exception as e:
        if not raised_by_tensorflow(e):  # this library's own contract errors (UserCodeError) stay as they are
            raise
        return [f"{mode}: model_fn builds"], [_build_failure(e, mode, name, target)]
    checks = [f"{mode}: static-shape (model graph)", f"{mode}: dtype (model graph)"]
    findings = check_spec(g, name) + check_graph_shapes(g, name) + check_graph_strings(g, name)
    if mode != ModeKeys.TRAIN:
        checks.append(f"{mode}: spec")
    if mode == ModeKeys.PREDICT:
        findings += check_predictions(g, name, target.batch_sizes[mode])
    calls = [("host_call", getattr(g.spec, "host_call", None), None)]
    if mode == ModeKeys.EVAL:
        calls.append(("eval_metrics", getattr(g.spec, "eval_metrics", None), target.batch_sizes[mode]))
    for call_name, call, batch in calls:
        if call:
            findings += check_outfeed(g, call_name, call, batch)
            findings += check_host_fn(g, call_name, call, target.num_replicas)
            checks += [f"{mode}: outfeed ({call_name})", f"{mode}: host-fn ({call_name})"]
    if mode == ModeKeys.TRAIN:
        findings += check_cross_shard(g, name, target.num_replicas)
        checks.append(f"{mode}: cross-shard")
    findings += check_xla(model_fn, mode, info, target, model_dir, name)
    checks.append(f"{mode}: xla")
    return checks, findings


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
    accept: Sequence[str] = (),
) -> StrictReport:
    """Checks a model_fn and its input_fns against the TPU target of `job`; raises on a blocking finding.

    Each mode's input_fn is called with the params a TPU would pass (per-replica batch = global batch /
    `job.tpu.num_cores`, and a TPU `context`); a mode without an input_fn gets the features our input pipelines
    produce for `schema`. The model_fn is then built for each mode as TPUEstimator builds it (the global step
    first, `use_tpu=True`) and its step compiled with XLA on the CPU. The report's `describe()` is logged
    (a warning when there is any finding).

    Args:
      job: the job config; `job.tpu.num_cores` is the TPU target even when `job.tpu.use_tpu` is False.
      schema: the feature schema (for modes without an input_fn).
      model_fn: a TPUEstimator model_fn, e.g. `estimator_lib.model.model_fn.build_model_fn(schema, job)`.
      train_input_fn, eval_input_fn, predict_input_fn: input_fn(params) -> Dataset, or None.
      eval_steps: the fixed evaluation steps; by default `inputs.eval_steps(eval_input_fn.num_examples, ...)`
        when the input_fn carries `num_examples`.
      modes: the modes to check (all three by default).
      accept: "RULE:WHERE" patterns with shell wildcards (`job.tpu.strict_accept`): a `fails` finding they match
        does not block; it stays in the report as accepted.

    Returns:
      The `StrictReport` (no blocking finding; differences, notes and accepted findings kept).

    Raises:
      TPUStrictError: listing every finding, the blocking ones first.
      ModelBuildError: the model_fn's own code raised while it was built (its exception, file, line and mode).
    """
    checks, findings = ["config"], config_findings(job)
    if findings:  # per-replica batch sizes are undefined until the config is fixed
        return _reported(StrictReport.of(checks, findings, accept))
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
                info, mode_checks, mode_findings = _input_checks(mode, input_fns[mode], job, target, eval_steps)
                checks += mode_checks
                findings += mode_findings
                if info is None or any(f.severity == FAILS for f in mode_findings):
                    continue  # the model checks would only repeat the input's problems
            mode_checks, mode_findings = _model_checks(model_fn, mode, info, target, model_dir)
            checks += mode_checks
            findings += mode_findings
    return _reported(StrictReport.of(checks, findings, accept))


def _reported(report: StrictReport) -> StrictReport:
    """Logs the report (a warning when it has findings) and raises TPUStrictError on a blocking finding."""
    (log.warning if report.findings else log.info)("%s", report.describe())
    return report.raise_if_failed()


def record_report(report: StrictReport, directory: str) -> str:
    """Writes `report.to_dict()` as `STRICT_FILE` in `directory` (the model directory: the run's record of what
    strict mode found and which findings were accepted); returns its URI."""
    uri = storage.join(directory, STRICT_FILE)
    storage.write_text(uri, json.dumps(report.to_dict(), indent=2, sort_keys=True))
    return uri


def check_export(export_dir: str, accept: Sequence[str] = ()) -> StrictReport:
    """Checks a SavedModel's `serve,tpu` meta graph contains TPUPartitionedCall; raises TPUStrictError if not."""
    checks, findings = export_findings(export_dir)
    return _reported(StrictReport.of(checks, findings, accept))
