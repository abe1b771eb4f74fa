"""Strict-mode checks of input_fns: call them as a TPU would and inspect what they return.

Runs on the host CPU, builds no model. Each input_fn is called in a fresh graph with the params a TPU run
would pass under PER_HOST_V2 (the per-replica batch size and a `context` describing the slice), so a local
run with `use_tpu=False` sees the same shapes, dtypes and cardinality the TPU job will.

Every check returns a list of `Finding`s (empty when the input is fine); `estimator_lib.strict` gathers them
into one report.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable, Dict, List, Optional, Tuple

import tensorflow as tf

from estimator_lib.config import JobConfig
from estimator_lib.data.example_keys import KEY_BYTES_FEATURE
from estimator_lib.data.example_keys import WIDTH as KEY_WIDTH
from estimator_lib.schema import CLASSIFICATION, INDEX_FEATURE, NUMERIC, PADDING_FEATURE, Schema
from estimator_lib.strict.findings import FAILS, NOTE, Finding

ModeKeys = tf.estimator.ModeKeys
# Cores fed by one TPU host (v2/v3/v4 slices); a slice with more cores has several hosts, each calling input_fn.
CORES_PER_HOST = 8
# Dtypes a TPU infeed takes. int64 runs, but slowly or not at all in some ops (a note); float64 has no TPU
# support at all and strings never enter a TPU computation (both fail).
TPU_INPUT_DTYPES = (tf.float32, tf.bfloat16, tf.float16, tf.int32, tf.uint8, tf.bool)
_DTYPE_FIX = {
    tf.string: "convert it on the host in the input pipeline (a vocabulary lookup or hash to int32 ids, as "
    "estimator_lib.model.transform.categorical_ids does) so only numbers reach the TPU",
    tf.int64: "cast it to int32 in the input pipeline (tf.cast(x, tf.int32), as estimator_lib.model.transform does); "
    'for your own records, give the feature "dtype": "int32" in the feature spec (read from the same int64 list)',
    tf.float64: "cast it to float32 in the input pipeline",
}


@dataclasses.dataclass(frozen=True)
class TPUTarget:
    """The TPU a job will run on: replicas, hosts and the batch each input_fn call and replica gets.

    Attributes:
      num_replicas: TPU cores of the slice (`job.tpu.num_cores`), whatever `use_tpu` says for the local run.
      num_hosts: TPU hosts; each calls input_fn once and feeds `replicas_per_host` replicas.
      batch_sizes: per-replica batch size by mode (global batch / num_replicas).
      seed: the graph seed TPUEstimator sets from RunConfig.tf_random_seed (random ops need one under op
        determinism).
    """

    num_replicas: int
    num_hosts: int
    batch_sizes: Dict[str, int]
    seed: int

    @classmethod
    def for_job(cls, job: JobConfig) -> "TPUTarget":
        cores, t = job.tpu.num_cores, job.training
        per_replica = {
            ModeKeys.TRAIN: t.train_batch_size // cores,
            ModeKeys.EVAL: t.eval_batch_size // cores,
            ModeKeys.PREDICT: t.predict_batch_size // cores,
        }
        return cls(cores, max(1, math.ceil(cores / CORES_PER_HOST)), per_replica, t.seed)

    @property
    def replicas_per_host(self) -> int:
        return self.num_replicas // self.num_hosts


class SimulatedTPUContext:
    """Stands in for `params['context']` (a `tf.compat.v1.estimator.tpu.TPUContext`) of host 0's input_fn call.

    Only the attributes input_fns read are provided; they have the same meaning as on a real TPU.
    """

    def __init__(self, target: TPUTarget, host_id: int = 0):
        self.num_replicas = target.num_replicas
        self.num_hosts = target.num_hosts
        self.num_of_replicas_per_host = target.replicas_per_host
        self.current_host = host_id

    def current_input_fn_deployment(self) -> Tuple[str, int, int, int]:
        """(host device, invocation index, invocation count, replicas fed), as PER_HOST_V2 gives them."""
        device = f"/job:tpu_worker/task:{self.current_host}/device:CPU:0"
        return device, self.current_host, self.num_hosts, self.num_of_replicas_per_host


@dataclasses.dataclass
class InputInfo:
    """What one input_fn call produced: the element specs split into features (a dict, or one spec when the
    input_fn yields a tensor as the features) and labels, and cardinality."""

    features: Any
    labels: Any
    cardinality: Optional[int]


def input_params(target: TPUTarget, mode: str) -> Dict[str, Any]:
    """The params TPUEstimator passes to an input_fn on the TPU target (PER_HOST_V2, host 0)."""
    return {"batch_size": target.batch_sizes[mode], "context": SimulatedTPUContext(target)}


def schema_input(schema: Schema, mode: str, batch: int) -> InputInfo:
    """The specs our own input pipelines produce for `schema`, used when no input_fn is given for a mode."""
    spec = tf.TensorSpec
    features: Dict[str, Any] = {
        f.key: spec([batch], tf.float32 if f.kind == NUMERIC else tf.int32, name=f.key) for f in schema.features
    }
    if mode != ModeKeys.TRAIN:
        features[PADDING_FEATURE] = spec([batch], tf.float32, name=PADDING_FEATURE)
    if mode == ModeKeys.PREDICT:
        features[INDEX_FEATURE] = spec([batch], tf.int32, name=INDEX_FEATURE)
        features[KEY_BYTES_FEATURE] = spec([batch, KEY_WIDTH], tf.int32, name=KEY_BYTES_FEATURE)
        return InputInfo(features, None, None)
    label_dtype = tf.int32 if schema.label.task == CLASSIFICATION else tf.float32
    return InputInfo(features, spec([batch], label_dtype, name="label"), None)


def call_input_fn(input_fn: Callable, target: TPUTarget, mode: str) -> Tuple[Optional[InputInfo], List[Finding]]:
    """Calls `input_fn` in a fresh graph as the TPU target would; returns its specs and cardinality."""
    name = callable_name(input_fn)
    where = f"{mode} input_fn {name}"
    graph = tf.Graph()
    with graph.as_default():
        try:
            dataset = input_fn(input_params(target, mode))
        except Exception as e:  # noqa: BLE001 - any failure here is a finding to report, not to hide
            return None, [
                Finding(
                    "input",
                    name,
                    FAILS,
                    f"{where} raised {type(e).__name__}: {e}. Fix: it must build with the TPU params "
                    f"{{'batch_size': {target.batch_sizes[mode]}, 'context': TPUContext}}",
                )
            ]
        if not isinstance(dataset, tf.data.Dataset):
            return None, [
                Finding(
                    "input",
                    name,
                    FAILS,
                    f"{where} returned {type(dataset).__name__}, not a tf.data.Dataset: PER_HOST_V2 input on a TPU "
                    "needs a Dataset. Fix: return the Dataset itself",
                )
            ]
        cardinality = tf.data.experimental.cardinality(dataset)
        with tf.compat.v1.Session(graph=graph) as session:
            count = int(session.run(cardinality))
    element = dataset.element_spec
    if isinstance(element, tuple) and len(element) == 2:
        features, labels = element
    else:
        features, labels = element, None
    return InputInfo(dict(features) if isinstance(features, dict) else features, labels, count), []


def callable_name(fn: Callable) -> str:
    """The name a message gives a user function: its qualified name, or its class name for a callable object."""
    return getattr(fn, "__qualname__", None) or type(fn).__name__


def _specs(info: InputInfo) -> List[Tuple[str, str, Any]]:
    """(how a message names it, its short name, spec) for every feature and label."""
    if isinstance(info.features, dict):
        named = [(f"feature {key!r}", key, spec) for key, spec in sorted(info.features.items())]
    else:  # the input_fn yields one tensor as the features, as TPUEstimator allows
        named = [("the features", "features", info.features)]
    if info.labels is not None:
        labels = info.labels if isinstance(info.labels, dict) else {"": info.labels}
        named += [
            (f"label {key!r}" if key else "the label", f"label/{key}" if key else "label", spec)
            for key, spec in sorted(labels.items())
        ]
    return named


def check_static_shapes(info: InputInfo, mode: str, batch: int, replicas: int) -> List[Finding]:
    """Every feature and label is a dense tensor of static shape whose first dimension is the replica batch."""
    out, global_batch = [], batch * replicas
    for what, name, spec in _specs(info):
        where = f"{mode} input: {what}"
        if not isinstance(spec, tf.TensorSpec):
            message = (
                f"{where} is a {type(spec).__name__}: a TPU infeed takes dense tensors only. Fix: "
                "densify it in the input pipeline (tf.sparse.to_dense / ragged.to_tensor with a fixed shape)"
            )
        elif not spec.shape.is_fully_defined() or spec.shape.rank == 0 or spec.shape[0] != batch:
            message = (
                f"{where} has shape {spec.shape}, expected static [{batch}, ...]: the TPU compiles one fixed "
                f"shape and each replica gets {batch} rows (batch {global_batch} / {replicas} replicas). Fix: "
                "batch with drop_remainder=True using params['batch_size'], and give every other dimension a "
                "fixed size (pad or truncate)"
            )
        else:
            continue
        out.append(Finding("static-shape", name, FAILS, message))
    return out


def check_dtypes(info: InputInfo, mode: str) -> List[Finding]:
    """No string or float64 tensor enters the TPU computation (fails); an int64 one gets a note with the cast."""
    out = []
    for what, name, spec in _specs(info):
        dtype = getattr(spec, "dtype", None)
        if dtype is None or dtype in TPU_INPUT_DTYPES:
            continue
        fix = _DTYPE_FIX.get(dtype, "convert it to float32 or int32 in the input pipeline")
        if dtype == tf.int64:
            message = (
                f"{mode} input: {what} is int64: a TPU emulates 64-bit integers (slowly) and a few ops refuse "
                f"them. Advice: {fix}"
            )
            out.append(Finding("dtype", name, NOTE, message))
        else:
            message = f"{mode} input: {what} is {dtype.name}, which cannot enter a TPU computation. Fix: {fix}"
            out.append(Finding("dtype", name, FAILS, message))
    return out


def check_finite(info: InputInfo, mode: str, needed: Optional[int], target: TPUTarget, fn_name: str) -> List[Finding]:
    """An eval/predict input holds a known, finite number of batches, at least the `needed` ones per host."""
    message = _finite_problem(info.cardinality, f"{mode} input_fn {fn_name}", mode, needed, target.replicas_per_host)
    return [Finding("finite-input", fn_name, FAILS, message)] if message else []


def _finite_problem(count: Optional[int], where: str, mode: str, needed: Optional[int], per_host: int) -> str:
    how = (
        "pad to whole batches and declare the count with tf.data.experimental.assert_cardinality, as "
        "estimator_lib.model.inputs.eval_input_fn_builder does"
    )
    if count == tf.data.INFINITE_CARDINALITY:
        return (
            f"{where} repeats forever: {mode} must read every row exactly once in a fixed number of steps. "
            f"Fix: do not .repeat() it; {how}"
        )
    if count == tf.data.UNKNOWN_CARDINALITY or count is None:
        return (
            f"{where} has unknown cardinality, so nothing proves it lasts the fixed {mode} steps; on a TPU "
            f"running out of input mid-{mode} hangs or fails the job. Fix: {how}"
        )
    if needed is not None and count < needed:
        return (
            f"{where} yields {count} batch(es) per host but {mode} needs {needed} ({needed // per_host} "
            f"step(s) x {per_host} replicas per host): it runs out before the fixed step count. Fix: {how}, "
            "and compute steps with estimator_lib.model.inputs.eval_steps(num_examples, global batch size)"
        )
    if count % per_host:
        return (
            f"{where} yields {count} batch(es), not a multiple of the {per_host} replicas per host: the last "
            f"step would be short. Fix: {how}"
        )
    return ""
