"""The TPU train step compiled with XLA on the CPU at a chosen per-core batch, and the variables it trains.

The model_fn is built as TPUEstimator builds it for the TPU (`strict.graph.build_mode_graph`), and the step strict
mode compiles (`strict.xla`: forward, loss, gradients, host_call tensors) is lowered to optimized HLO. Unlike strict
mode's check, nothing is allocated: the graph's variables become inputs of the compiled function, given as
`tf.TensorSpec`s, so a model larger than this machine's memory compiles. Variables created while an optimizer
(`tf.compat.v1.train.Optimizer`) applies gradients are its slots (Adam's m and v, its beta powers).
"""

from __future__ import annotations

import contextlib
import dataclasses
from typing import Callable, Dict, Iterator, List, Tuple

import tensorflow as tf
from tensorflow.python.training import optimizer as v1_optimizer

from estimator_lib.preflight.padding import padded_bytes, unpadded_bytes
from estimator_lib.strict.graph import build_mode_graph
from estimator_lib.strict.inputs import InputInfo, TPUTarget
from estimator_lib.strict.xla import as_the_tpu_compiler, step_outputs

TRAIN = tf.estimator.ModeKeys.TRAIN


@dataclasses.dataclass(frozen=True)
class Variable:
    """A variable of the model_fn's train graph: name, element type, shape, trainable, and whether an optimizer
    created it (`slot`)."""

    name: str
    dtype: str
    dims: Tuple[int, ...]
    trainable: bool
    slot: bool

    @property
    def bytes(self) -> int:
        return unpadded_bytes(self.dims, self.dtype)

    @property
    def padded_bytes(self) -> int:
        return padded_bytes(self.dims, self.dtype)


@dataclasses.dataclass(frozen=True)
class CompiledStep:
    """One compiled train step: its per-core batch, optimized HLO text, the graph's variables, and the HLO entry
    parameter numbers that hold variables (the others are the batch's features and labels)."""

    batch: int
    hlo: str
    variables: Tuple[Variable, ...]
    variable_parameters: Tuple[int, ...]


def _classes(cls: type) -> List[type]:
    return [cls] + [sub for child in cls.__subclasses__() for sub in _classes(child)]


@contextlib.contextmanager
def _optimizer_variables(created: List[tf.Variable]) -> Iterator[None]:
    """Collects the variables created inside `apply_gradients` of `tf.compat.v1.train.Optimizer` and of each of its
    subclasses that defines its own (BERT's AdamWeightDecayOptimizer); restored on exit. A wrapping optimizer
    (CrossShardOptimizer) calling its inner one is counted once."""
    depth = [0]

    def wrap(original):
        def apply_gradients(self, *args, **kwargs):
            before = {id(v) for v in tf.compat.v1.global_variables()}
            depth[0] += 1
            try:
                return original(self, *args, **kwargs)
            finally:
                depth[0] -= 1
                if not depth[0]:
                    created.extend(v for v in tf.compat.v1.global_variables() if id(v) not in before)

        return apply_gradients

    classes = _classes(v1_optimizer.Optimizer)
    patched = {cls: cls.__dict__["apply_gradients"] for cls in classes if "apply_gradients" in cls.__dict__}
    for cls, original in patched.items():
        cls.apply_gradients = wrap(original)
    try:
        yield
    finally:
        for cls, original in patched.items():
            cls.apply_gradients = original


def _any_batch(info: InputInfo) -> InputInfo:
    """`info` with every first dimension unknown, so the graph is built at the batch asked for."""

    def free(spec):
        if not isinstance(spec, tf.TensorSpec) or not spec.shape.rank:
            return spec
        return tf.TensorSpec([None] + spec.shape.as_list()[1:], spec.dtype, spec.name)

    return dataclasses.replace(
        info, features=tf.nest.map_structure(free, info.features), labels=tf.nest.map_structure(free, info.labels)
    )


def _as_inputs(graph_def, handles: Dict[str, tf.Variable]) -> None:
    """Rewrites `graph_def` in place: each variable a placeholder of its value, the ops on its handle their value
    forms, control inputs and colocations dropped (only the step's data flow is compiled)."""
    for node in list(graph_def.node):
        node.input[:] = [name for name in node.input if not name.startswith("^")]
        node.attr.pop("_class", None)  # colocation with a variable, which is no longer a node
        if node.name in handles:
            variable = handles[node.name]
            node.op = "Placeholder"
            node.ClearField("attr")
            node.attr["dtype"].type = variable.dtype.base_dtype.as_datatype_enum
            node.attr["shape"].shape.CopyFrom(variable.shape.as_proto())
        elif node.op == "ReadVariableOp":
            node.op = "Identity"
            node.attr["T"].CopyFrom(node.attr.pop("dtype"))
        elif node.op == "ResourceGather":
            node.op = "GatherV2"
            node.attr["Tparams"].CopyFrom(node.attr.pop("dtype"))
            node.attr.pop("validate_indices", None)
            node.attr["Taxis"].type = tf.int32.as_datatype_enum
            axis = graph_def.node.add(name=node.name + "/preflight_axis", op="Const")
            axis.attr["dtype"].type = tf.int32.as_datatype_enum
            axis.attr["value"].tensor.CopyFrom(tf.make_tensor_proto(0, tf.int32))
            node.input.append(axis.name)
        elif node.op == "ResourceGatherNd":
            node.op = "GatherNd"
            node.attr["Tparams"].CopyFrom(node.attr.pop("dtype"))
        elif node.op == "VariableShape":
            node.op = "Shape"
            node.attr["T"].type = tf.resource.as_datatype_enum
        producer = handles.get(node.input[0].split(":")[0]) if node.input else None
        if producer is not None and "T" in node.attr and node.attr["T"].type == tf.resource.as_datatype_enum:
            node.attr["T"].type = producer.dtype.base_dtype.as_datatype_enum  # an Identity or Shape of the handle


def _check_no_handles(graph_def, handles: Dict[str, tf.Variable]) -> None:
    """Raises when an op of the step still takes a variable's handle (one preflight does not rewrite)."""
    for node in graph_def.node:
        used = [name.split(":")[0] for name in node.input if name.split(":")[0] in handles]
        if used and ("Resource" in node.op or "Variable" in node.op):
            raise ValueError(
                f"preflight cannot compile the train step: op {node.name!r} ({node.op}) uses variable "
                f"{used[0]!r} by its handle, which preflight does not turn into a value; read the variable "
                "(tf.gather, a read) in the model_fn's forward pass"
            )


def compile_train_step(
    model_fn: Callable, info: InputInfo, target: TPUTarget, batch: int, model_dir: str
) -> CompiledStep:
    """Builds the model_fn for TRAIN at per-core `batch` and compiles its step to optimized HLO on the CPU.

    Raises:
      ModelBuildError, Exception: as `strict.graph.build_mode_graph` raises them.
      ValueError: the step uses a variable in a way preflight cannot compile without allocating it.
    """
    return compile_step(model_fn, TRAIN, info, target, batch, model_dir)


def compile_step(
    model_fn: Callable, mode: str, info: InputInfo, target: TPUTarget, batch: int, model_dir: str
) -> CompiledStep:
    """Builds the model_fn for `mode` (TRAIN, or PREDICT: its forward pass to the predictions) at per-core `batch`
    and compiles its step to optimized HLO on the CPU; `info`: the train input's specs (PREDICT's graph leaves the
    labels out).

    Raises:
      as `compile_train_step`.
    """
    target = dataclasses.replace(target, batch_sizes={**target.batch_sizes, mode: batch})
    created: List[tf.Variable] = []
    with _optimizer_variables(created):
        built = build_mode_graph(model_fn, mode, _any_batch(info), target, model_dir)
    with built.graph.as_default():
        outputs = step_outputs(mode, built.spec)
        every = tf.compat.v1.global_variables() + tf.compat.v1.local_variables()
    slots = {id(v) for v in created}
    handles = {v.op.name: v for v in every}
    graph_def = built.graph.as_graph_def()
    _as_inputs(graph_def, handles)
    graph_def = tf.compat.v1.graph_util.extract_sub_graph(graph_def, [t.op.name for t in outputs])
    _check_no_handles(graph_def, handles)
    present = {node.name for node in graph_def.node}
    feeds = [t for t in built.inputs if t.op.name in present]
    used = [v for v in every if v.op.name in present]
    names = [t.name for t in feeds] + [v.op.name + ":0" for v in used]
    specs = [tf.TensorSpec(t.shape, t.dtype) for t in feeds]
    specs += [tf.TensorSpec(v.shape, v.dtype.base_dtype) for v in used]

    # The inputs' own nodes go: XLA compiles no Placeholder; their uses read the function's arguments instead.
    kept = [node for node in graph_def.node if node.name + ":0" not in names]
    del graph_def.node[:]
    graph_def.node.extend(kept)

    def step(*args):
        mapping = dict(zip(names, args))
        return tf.graph_util.import_graph_def(graph_def, mapping, [t.name for t in outputs], name="")

    with as_the_tpu_compiler():
        hlo = tf.function(step, jit_compile=True, autograph=False).experimental_get_compiler_ir(*specs)(
            stage="optimized_hlo"
        )
    variables = tuple(
        Variable(v.op.name, v.dtype.base_dtype.name, tuple(v.shape.as_list()), v.trainable, id(v) in slots)
        for v in every
    )
    return CompiledStep(batch, hlo, variables, tuple(range(len(feeds), len(names))))
