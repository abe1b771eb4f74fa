"""Strict-mode checks of the graph a model_fn builds for the TPU, and of its host-side functions.

`build_mode_graph` calls the model_fn in a fresh graph exactly as TPUEstimator would on a TPU (the global
step created first; `params={'batch_size': per-replica batch, 'use_tpu': True, 'context': ...}`, inside a TPU
shard context of `num_replicas` shards) with placeholders of the input's static shapes. The checks then read
that graph and return `Finding`s:

  * EVAL and PREDICT return a TPUEstimatorSpec (TPUEstimator's TPU loops refuse a plain EstimatorSpec);
  * the TPU computation has static shapes (outputs XLA handles itself excepted) and no string tensors;
  * `host_call` and `eval_metrics` tensors keep a batch dimension (the outfeed concatenates along axis 0);
  * `metric_fn` and the `host_call` function take their tensors as arguments (they run on the host CPU);
  * every trainable variable is updated with gradients summed across replicas (`CrossShardOptimizer`); and
    gradients that did not come from `CrossShardOptimizer.compute_gradients` (which scales the loss per
    replica) are one `differs` finding: the update is the replicas' sum, not their mean.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import tempfile
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

import tensorflow as tf
from tensorflow.python.tpu import tpu_function, tpu_optimizer
from tensorflow.python.util import function_utils

from estimator_lib.model.calling import call_as_tpu_estimator
from estimator_lib.strict.findings import DIFFERS, FAILS, Finding
from estimator_lib.strict.inputs import InputInfo, SimulatedTPUContext, TPUTarget, callable_name
from estimator_lib.strict.user_code import model_build_error, raised_by_user_code, stack_frames, user_frame

ModeKeys = tf.estimator.ModeKeys
_SKIP_SHAPE_DTYPES = (tf.resource, tf.variant)
TPUEstimatorSpec = tf.compat.v1.estimator.tpu.TPUEstimatorSpec
# Outputs of unknown static shape that XLA handles itself: the opaque reserve-space buffers of fused batch norm
# (forward outputs 3-5, gradient outputs 3-4), by op type -> first such output index.
_XLA_OPAQUE_OUTPUTS = {
    "FusedBatchNorm": 3,
    "FusedBatchNormV2": 3,
    "FusedBatchNormV3": 3,
    "FusedBatchNormGrad": 3,
    "FusedBatchNormGradV2": 3,
    "FusedBatchNormGradV3": 3,
}
# Ops whose output has their first input's shape (the gradient's zeros for an unused reserve-space output).
_SAME_SHAPE_OPS = ("ZerosLike", "OnesLike", "Identity", "StopGradient")


@dataclasses.dataclass
class CrossShardRecord:
    """Gradients seen by `CrossShardOptimizer` while the model_fn ran, the optimizers it wrapped and the user's
    functions that called its `apply_gradients`."""

    computed: List[Any] = dataclasses.field(default_factory=list)
    applied: List[Tuple[Any, Any]] = dataclasses.field(default_factory=list)
    optimizers: List[str] = dataclasses.field(default_factory=list)
    callers: List[str] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class ModeGraph:
    """A model_fn's TPUEstimatorSpec (or EstimatorSpec) for one mode, the graph holding it and what fed it."""

    mode: str
    graph: tf.Graph
    spec: Any
    inputs: List[tf.Tensor]
    cross_shard: CrossShardRecord


@contextlib.contextmanager
def _watch_cross_shard(record: CrossShardRecord) -> Iterator[None]:
    """Records the gradients `CrossShardOptimizer` computes and applies (restored on exit).

    Intercepting the class is the only way to see them: the model_fn builds its optimizer internally.
    """
    cls = tpu_optimizer.CrossShardOptimizer
    compute, apply = cls.compute_gradients, cls.apply_gradients

    def compute_gradients(self, *args, **kwargs):
        grads_and_vars = compute(self, *args, **kwargs)
        record.computed.extend(g for g, _ in grads_and_vars if g is not None)
        return grads_and_vars

    def apply_gradients(self, grads_and_vars, *args, **kwargs):
        grads_and_vars = list(grads_and_vars)
        record.applied.extend((g, v) for g, v in grads_and_vars if g is not None)
        record.optimizers.append(type(getattr(self, "_opt", self)).__name__)
        caller = user_frame(list(stack_frames())[::-1])
        record.callers.append(caller.function if caller else "apply_gradients")
        return apply(self, grads_and_vars, *args, **kwargs)

    cls.compute_gradients, cls.apply_gradients = compute_gradients, apply_gradients
    try:
        yield
    finally:
        cls.compute_gradients, cls.apply_gradients = compute, apply


def placeholders(info: InputInfo, batch: int) -> Tuple[Any, Any]:
    """Placeholders for (features, labels) with the input's shapes; an unknown first dimension becomes `batch`."""

    def make(spec, name):
        shape = spec.shape
        if shape.rank:
            shape = tf.TensorShape([shape[0] if shape[0] is not None else batch] + shape.as_list()[1:])
        return tf.compat.v1.placeholder(spec.dtype, shape, name=name)

    if isinstance(info.features, dict):
        features = {k: make(s, k) for k, s in info.features.items()}
    else:
        features = make(info.features, "features")
    labels = None
    if isinstance(info.labels, dict):
        labels = {k: make(s, f"label_{k}") for k, s in info.labels.items()}
    elif info.labels is not None:
        labels = make(info.labels, "label")
    return features, labels


def tpu_params(target: TPUTarget, mode: str) -> Dict[str, Any]:
    """The params TPUEstimator gives a model_fn on the TPU target."""
    return {"batch_size": target.batch_sizes[mode], "use_tpu": True, "context": SimulatedTPUContext(target)}


def call_model_fn(model_fn: Callable, mode: str, features, labels, target: TPUTarget, model_dir: str):
    """Calls model_fn as TPUEstimator does on a TPU: in a graph holding the global step (TPUEstimator creates it
    before it calls the model_fn, in every mode), with its params, config and graph seed."""
    config = tf.compat.v1.estimator.tpu.RunConfig(model_dir=model_dir, tf_random_seed=target.seed)
    tf.compat.v1.set_random_seed(target.seed)
    tf.compat.v1.train.get_or_create_global_step()
    with tpu_function.tpu_shard_context(target.num_replicas):
        return call_as_tpu_estimator(model_fn, features, labels, mode, tpu_params(target, mode), config)


def build_mode_graph(model_fn: Callable, mode: str, info: InputInfo, target: TPUTarget, model_dir: str) -> ModeGraph:
    """Builds the model_fn's graph for `mode` in a fresh graph.

    Raises:
      ModelBuildError: the user's own code raised (a KeyError, a NameError, absl's UnparsedFlagAccessError ...),
        naming the exception, the user's file and line, and the mode.
      Exception: what TensorFlow raised while the model_fn built its graph, unchanged.
    """
    graph, record = tf.Graph(), CrossShardRecord()
    with graph.as_default(), _watch_cross_shard(record):
        features, labels = placeholders(info, target.batch_sizes[mode])
        try:
            spec = call_model_fn(model_fn, mode, features, labels, target, model_dir)
        except Exception as e:
            if raised_by_user_code(e):
                params = {k: v for k, v in tpu_params(target, mode).items() if k != "context"}
                raise model_build_error(e, model_fn, mode, f"{params} and a TPU context") from e
            raise
    inputs = tf.nest.flatten(features) + ([] if labels is None else tf.nest.flatten(labels))
    return ModeGraph(mode, graph, spec, inputs, record)


def _model_ops(g: ModeGraph) -> List[tf.Operation]:
    input_ops = {t.op for t in g.inputs}
    return [op for op in g.graph.get_operations() if op not in input_ops]


# Ops that only route a tensor (the cond that guards an Assert: AssertGuard's Switch and Identity).
_ROUTING_OPS = ("Switch", "RefSwitch", "Identity", "Merge")


def _only_asserted(t: tf.Tensor, seen: Optional[set] = None) -> bool:
    """A string tensor that only reaches Assert ops (the messages of `tf.debugging.assert_*`, possibly through
    the cond that guards them), or nothing at all (the unused message constants those asserts also leave):
    XLA compiles Assert to nothing and prunes what no output needs, so these strings never reach the TPU."""
    seen = set() if seen is None else seen
    if t.name in seen:
        return True
    seen.add(t.name)
    return all(_routes_to_assert(op, seen) for op in t.consumers())


def _routes_to_assert(op: tf.Operation, seen: set) -> bool:
    if op.type == "Assert":
        return True
    if op.type not in _ROUTING_OPS:
        return False
    return all(_only_asserted(out, seen) for out in op.outputs if out.dtype == tf.string)


def check_spec(g: ModeGraph, fn_name: str) -> List[Finding]:
    """EVAL and PREDICT: a TPUEstimatorSpec. TPUEstimator accepts a plain EstimatorSpec in TRAIN, on the CPU and
    when it exports, but its TPU evaluation and prediction loops raise RuntimeError for one."""
    if g.mode == ModeKeys.TRAIN or isinstance(g.spec, TPUEstimatorSpec):
        return []
    loop, arguments = {
        ModeKeys.EVAL: ("evaluation", "loss=..., eval_metrics=(metric_fn, tensors)"),
        ModeKeys.PREDICT: ("prediction", "predictions=..., export_outputs=... (the same arguments)"),
    }[g.mode]
    return [
        Finding(
            "spec",
            g.mode,
            FAILS,
            f"{g.mode} model_fn {fn_name} returned {type(g.spec).__name__}, not a TPUEstimatorSpec: TPUEstimator "
            f"accepts it on the CPU and when exporting, but its TPU {loop} loop raises RuntimeError ('estimator_spec "
            f"used by TPU {loop} must have type TPUEstimatorSpec'). Fix: return "
            f"tf.compat.v1.estimator.tpu.TPUEstimatorSpec(mode, {arguments})",
        )
    ]


def check_graph_strings(g: ModeGraph, fn_name: str) -> List[Finding]:
    """No tensor of the model graph is a string: strings cannot exist inside a TPU computation (the messages of
    asserts excepted)."""
    return [
        Finding(
            "dtype",
            op.name,
            FAILS,
            f"{g.mode} model_fn {fn_name}: op {op.name!r} ({op.type}) makes string tensor {t.name!r} inside the TPU "
            "computation. Fix: do string work on the host, in the input pipeline (estimator_lib.model.transform), "
            "and summaries through host_call",
        )
        for op in _model_ops(g)
        for t in op.outputs
        if t.dtype == tf.string and not _only_asserted(t)
    ]


def _xla_handled(t: tf.Tensor) -> bool:
    """An output of unknown static shape that XLA handles itself (fused batch norm's reserve space), or a tensor
    shaped like one (the gradient's zeros for it)."""
    op = t.op
    if op.type in _SAME_SHAPE_OPS and op.inputs:
        return _xla_handled(op.inputs[0])
    first = _XLA_OPAQUE_OUTPUTS.get(op.type)
    return first is not None and t.value_index >= first


def check_graph_shapes(g: ModeGraph, fn_name: str) -> List[Finding]:
    """No tensor of the model graph has a dynamic shape (XLA compiles static shapes only), except the outputs XLA
    sizes itself (`_XLA_OPAQUE_OUTPUTS`)."""
    return [
        Finding(
            "static-shape",
            op.name,
            FAILS,
            f"{g.mode} model_fn {fn_name}: op {op.name!r} ({op.type}) makes tensor {t.name!r} of dynamic shape "
            f"{t.shape}: XLA compiles static shapes only. Fix: keep shapes fixed (use masks and weights instead of "
            "tf.boolean_mask/tf.where/tf.unique, and constant sizes in reshapes)",
        )
        for op in _model_ops(g)
        for t in op.outputs
        if t.dtype not in _SKIP_SHAPE_DTYPES
        and t.dtype != tf.string
        and not t.shape.is_fully_defined()
        and not _xla_handled(t)
    ]


def check_predictions(g: ModeGraph, fn_name: str, batch: int) -> List[Finding]:
    """PREDICT: every prediction keeps a static batch dimension (TPUEstimator's own rule on a TPU)."""
    predictions = g.spec.predictions
    if not isinstance(predictions, dict):
        return [
            Finding(
                "static-shape",
                "predictions",
                FAILS,
                f"predict model_fn {fn_name}: {type(g.spec).__name__}.predictions is {type(predictions).__name__}; a "
                "TPU needs a dict of batch-major tensors. Fix: return {'name': tensor [batch, ...]}",
            )
        ]
    return [
        Finding(
            "static-shape",
            f"predictions/{key}",
            FAILS,
            f"predict model_fn {fn_name}: predictions[{key!r}] {t.name!r} has shape {t.shape}, expected "
            f"static [{batch}, ...]: TPU predictions are outfed per row. Fix: keep the batch dimension",
        )
        for key, t in sorted(predictions.items())
        if t.shape.rank in (None, 0) or t.shape[0] != batch
    ]


def _call_tensors(call) -> List[Tuple[str, tf.Tensor]]:
    fn, tensors = call
    if isinstance(tensors, dict):
        return sorted(tensors.items())
    try:
        names = list(function_utils.fn_args(fn))
    except (TypeError, ValueError):  # names are only for the message
        names = []
    return [(names[i] if i < len(names) else f"#{i}", t) for i, t in enumerate(tensors)]


def check_outfeed(g: ModeGraph, name: str, call, batch: Optional[int]) -> List[Finding]:
    """`host_call`/`eval_metrics` tensors: static, rank >= 1, and (eval_metrics) batch-major."""
    out = []
    for arg, t in _call_tensors(call):
        where = f"{g.mode} {name} argument {arg!r} (tensor {getattr(t, 'name', t)!r}, shape {t.shape})"
        if t.shape.rank == 0:
            message = (
                f"{where} is a scalar: all tensors outfed from a TPU must keep a batch dimension (they are "
                "concatenated across replicas along axis 0). Fix: pass a rank >= 1 tensor, e.g. "
                "tf.reshape(x, [1]) for a host_call value, or the per-example tensor [batch] for a metric"
            )
        elif not t.shape.is_fully_defined():
            message = f"{where} has a dynamic shape: the TPU outfeed needs static shapes. Fix: keep shapes fixed"
        elif batch is not None and t.shape[0] != batch:
            message = (
                f"{where} is not batch-major: its first dimension must be the replica batch {batch}, or it "
                "does not line up with the labels once replicas are concatenated. Fix: pass per-example "
                "tensors [batch, ...] and reduce inside metric_fn"
            )
        else:
            continue
        out.append(Finding("outfeed", f"{name}/{arg}", FAILS, message))
    return out


def _graph_objects(value: Any, depth: int = 0) -> Iterator[Any]:
    """Graph tensors/variables in `value` (looking one container level deep)."""
    if isinstance(value, (tf.Tensor, tf.Variable, tf.Operation)) and not hasattr(value, "numpy"):
        yield value
    elif depth < 2 and isinstance(value, (list, tuple, set)):
        for item in value:
            yield from _graph_objects(item, depth + 1)
    elif depth < 2 and isinstance(value, dict):
        for item in value.values():
            yield from _graph_objects(item, depth + 1)


def captured_graph_objects(fn: Callable) -> List[Tuple[str, Any]]:
    """(python name, object) for graph tensors a function reaches through its closure, globals or partial."""
    found: List[Tuple[str, Any]] = []
    if isinstance(fn, functools.partial):
        for i, a in enumerate(fn.args):
            found += [(f"partial argument #{i}", t) for t in _graph_objects(a)]
        for k, a in (fn.keywords or {}).items():
            found += [(f"partial argument {k!r}", t) for t in _graph_objects(a)]
        return found + captured_graph_objects(fn.func)
    fn = getattr(fn, "__func__", fn)
    code = getattr(fn, "__code__", None)
    if code is None:
        return found
    for name, cell in zip(code.co_freevars, fn.__closure__ or ()):
        try:
            found += [(name, t) for t in _graph_objects(cell.cell_contents)]
        except ValueError:  # an empty cell
            continue
    fn_globals = getattr(fn, "__globals__", {})
    for name in code.co_names:
        if name in fn_globals:
            found += [(name, t) for t in _graph_objects(fn_globals[name])]
    return found


def _host_placeholders(call, num_replicas: int):
    """Fresh placeholders shaped as the host sees them: replica outputs concatenated along axis 0."""
    _, tensors = call

    def make(t):
        dims = t.shape.as_list() if t.shape.rank else []
        if dims and dims[0] is not None:
            dims[0] *= num_replicas
        return tf.compat.v1.placeholder(t.dtype, dims)

    return tf.nest.map_structure(make, tensors)


def check_host_fn(g: ModeGraph, name: str, call, num_replicas: int) -> List[Finding]:
    """The host function takes its tensors as arguments: no model-graph tensor is captured, and it builds
    in a graph of its own from fresh tensors, as it does on the TPU host."""
    fn = call[0]
    fn_name = callable_name(fn)
    captured = captured_graph_objects(fn)
    if captured:
        return [
            Finding(
                "host-fn",
                fn_name,
                FAILS,
                f"{g.mode} {name} function {fn_name} closes over model-graph tensor {getattr(obj, 'name', obj)!r} (as "
                f"{python_name!r}): it runs on the host CPU, outside the TPU computation, and cannot reach TPU "
                f"tensors. Fix: add the tensor to {name}[1] and take it as an argument of {fn_name}",
            )
            for python_name, obj in captured
        ]
    with tf.Graph().as_default() as host_graph:
        args = _host_placeholders(call, num_replicas)
        try:
            results = fn(**args) if isinstance(args, dict) else fn(*args)
        except Exception as e:  # noqa: BLE001 - any failure here is what a TPU host would hit
            message = (
                f"{g.mode} {name} function {fn_name} fails on the host when given fresh tensors "
                f"({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}). Fix: take every tensor it needs "
                f"as an argument listed in {name}[1]; do not use tensors of the model graph"
            )
            return [Finding("host-fn", fn_name, FAILS, message)]
    foreign = [x for x in tf.nest.flatten(results) if getattr(x, "graph", host_graph) is not host_graph]
    if foreign:
        message = (
            f"{g.mode} {name} function {fn_name} fails on the host when given fresh tensors: it builds "
            f"{foreign[0].name!r} in the model graph, so it reaches model-graph tensors it was not given. Fix: "
            f"take every tensor it needs as an argument listed in {name}[1]"
        )
        return [Finding("host-fn", fn_name, FAILS, message)]
    return []


def _descendants(ops: Sequence[tf.Operation]) -> set:
    seen, stack = set(ops), list(ops)
    while stack:
        for t in stack.pop().outputs:
            for consumer in t.consumers():
                if consumer not in seen:
                    seen.add(consumer)
                    stack.append(consumer)
    return seen


def _ancestors(ops: Sequence[tf.Operation], control: bool) -> set:
    seen, stack = set(ops), list(ops)
    while stack:
        op = stack.pop()
        parents = [t.op for t in op.inputs] + (list(op.control_inputs) if control else [])
        for parent in parents:
            if parent not in seen:
                seen.add(parent)
                stack.append(parent)
    return seen


def _variable_updates(g: ModeGraph) -> List[Tuple[tf.Variable, tf.Operation]]:
    """(trainable variable, op writing it) for the writes the train_op runs."""
    with g.graph.as_default():
        variables = tf.compat.v1.trainable_variables()
    by_handle = {}
    for v in variables:
        handle = getattr(v, "handle", None)
        by_handle[(handle if handle is not None else v).op] = v
    updates = []
    train_op = g.spec.train_op
    for op in _ancestors([train_op if isinstance(train_op, tf.Operation) else train_op.op], control=True):
        writes = any(word in op.type for word in ("Apply", "Assign", "Scatter"))
        if writes and op.inputs and op.inputs[0].op in by_handle:
            updates.append((by_handle[op.inputs[0].op], op))
    return sorted(updates, key=lambda update: (update[0].op.name, update[1].name))


def _tensor_ops(t: Any) -> List[tf.Operation]:
    if isinstance(t, tf.IndexedSlices):
        return [t.values.op, t.indices.op]
    return [t.op]


def check_cross_shard(g: ModeGraph, fn_name: str, num_replicas: int) -> List[Finding]:
    """TRAIN: trainable variables are updated with gradients summed across replicas by CrossShardOptimizer
    (`fails` for each variable without, as each replica would train its own copy); gradients it applies that
    its own compute_gradients did not scale are one `differs` finding (the update sums the replicas' gradients)."""
    summed = _descendants([op for op in g.graph.get_operations() if op.type == "CrossReplicaSum"])
    out = [
        Finding(
            "cross-shard",
            variable.op.name,
            FAILS,
            f"train model_fn {fn_name}: variable {variable.op.name!r} is updated by {op.name!r} ({op.type}) with a "
            "gradient not summed across TPU replicas (no CrossReplicaSum): each replica would train its own copy. "
            "Fix: when params['use_tpu'], wrap the optimizer in tf.compat.v1.tpu.CrossShardOptimizer and apply "
            "every gradient through it",
        )
        for variable, op in _variable_updates(g)
        if not any(t.op in summed for t in op.inputs[1:])
    ]
    unscaled = _unscaled_gradients(g.cross_shard)
    if unscaled:
        out.append(_summed_not_averaged(g.cross_shard, unscaled, fn_name, num_replicas))
    return out


def _unscaled_gradients(record: CrossShardRecord) -> List[str]:
    """Variables whose gradient reached CrossShardOptimizer.apply_gradients without its compute_gradients."""
    computed = {op for t in record.computed for op in _tensor_ops(t)}
    return [
        variable.op.name
        for grad, variable in record.applied
        if not computed & _ancestors(_tensor_ops(grad), control=False)
    ]


def _summed_not_averaged(record: CrossShardRecord, unscaled: List[str], fn_name: str, replicas: int) -> Finding:
    """The one `differs` finding for gradients CrossShardOptimizer sums without having scaled the loss."""
    callers = sorted(set(record.callers)) or ["apply_gradients"]
    optimizers = ", ".join(sorted(set(record.optimizers)))
    return Finding(
        "cross-shard",
        callers[0],
        DIFFERS,
        f"train model_fn {fn_name}: {len(unscaled)} of the {len(record.applied)} gradients passed to "
        f"CrossShardOptimizer.apply_gradients (by {', '.join(callers)}; optimizer {optimizers}; e.g. "
        f"{unscaled[0]!r}) were not computed by CrossShardOptimizer.compute_gradients (e.g. tf.gradients), so "
        f"the loss is not scaled by 1/num_replicas as compute_gradients does: on {replicas} replicas the update "
        f"applies the SUM of the shards' gradients, not their mean. Harmless for scale-invariant Adam-type "
        f"optimizers (Adam, AdamW, LAMB); with SGD or momentum each step is {replicas} times too large. Fix: "
        "grads_and_vars = optimizer.compute_gradients(loss) with the CrossShardOptimizer, or divide the loss by "
        "params['context'].num_replicas before taking its gradients",
    )


def temporary_model_dir() -> tempfile.TemporaryDirectory:
    """A throwaway model_dir: host functions built during checks may create summary writers there."""
    return tempfile.TemporaryDirectory(prefix="strict-model-dir-")
