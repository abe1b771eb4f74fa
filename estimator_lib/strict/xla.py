"""Strict-mode XLA check: compile one step of the model with XLA on the CPU, as the TPU compiler would.

The model_fn is called inside `tf.compat.v1.wrap_function` (its variables, the global step TPUEstimator creates
first among them, become captured resources) and the step is lowered to HLO by
`tf.function(jit_compile=True).experimental_get_compiler_ir`, which compiles without running anything. What is
compiled is what runs on the TPU per step:

  * TRAIN: the forward pass, the loss and its gradients for every trainable variable (the backward pass),
    and the host_call tensors;
  * EVAL: the loss and the eval_metrics tensors;
  * PREDICT: the predictions.

Not compiled: the optimizer's update (its `CrossReplicaSum` has no CPU XLA kernel; the update ops of the
built-in optimizers all have TPU kernels) and the host-side metric_fn/host_call bodies.
"""

from __future__ import annotations

import contextlib
import re
from typing import Any, Callable, Iterator, List, Tuple

import tensorflow as tf
from tensorflow.python.framework import config as tf_config

from estimator_lib.strict.findings import FAILS, NOTE, Finding
from estimator_lib.strict.graph import call_model_fn
from estimator_lib.strict.inputs import InputInfo, TPUTarget
from estimator_lib.strict.user_code import Frame, located, user_frame

ModeKeys = tf.estimator.ModeKeys
_UNSUPPORTED = re.compile(r"on XLA_\w+: (\w+) \(.*?\{\{node ([^}]+)\}\}", re.S)
_NOT_CONSTANT = re.compile(r"node `([^`]+)` with op (\w+) must be a compile-time constant")
_FRAME = re.compile(r'File "([^"]+)", line (\d+), in (\S+)')


def _static_specs(info: InputInfo, batch: int) -> List[tf.TensorSpec]:
    def static(spec):
        dims = spec.shape.as_list() if spec.shape.rank else []
        if dims and dims[0] is None:
            dims[0] = batch
        return tf.TensorSpec(dims, spec.dtype)

    return [static(s) for s in tf.nest.flatten(_structure(info))]


def _structure(info: InputInfo):
    return (info.features,) if info.labels is None else (info.features, info.labels)


def _dense(t: Any) -> tf.Tensor:
    return tf.convert_to_tensor(t) if isinstance(t, tf.IndexedSlices) else t


def step_outputs(mode: str, spec) -> List[tf.Tensor]:
    """The tensors one TPU step computes for `mode`."""
    if mode == ModeKeys.PREDICT:
        return [tf.identity(t) for t in tf.nest.flatten(spec.predictions)]
    outputs = [spec.loss]
    # A plain EstimatorSpec (accepted in TRAIN) has neither host_call nor eval_metrics.
    if mode == ModeKeys.TRAIN:
        variables = tf.compat.v1.trainable_variables()
        outputs += [_dense(g) for g in tf.gradients(spec.loss, variables) if g is not None]
        call = getattr(spec, "host_call", None)
    else:
        call = getattr(spec, "eval_metrics", None)
    calls = [call] if call else []
    for _, tensors in calls:
        outputs += tf.nest.flatten(tensors)
    return [tf.identity(t) for t in outputs]


def _user_frame(frames) -> str:
    """'file:line (in fn)' of the innermost frame in the user's code, or ''."""
    frame = user_frame([Frame(path, int(line), fn) for path, line, fn in frames])
    return located(frame) if frame else ""


def _describe(error: str, graph: tf.Graph) -> Tuple[str, str]:
    """('op X (node Y), created at file:line (in fn)', op type X) from an XLA compile error, else (its first
    line, '')."""
    text = error.replace("Failed getting HLO text: '", "")
    unsupported, constant = _UNSUPPORTED.search(text), _NOT_CONSTANT.search(text)
    if unsupported:
        op_type, node = unsupported.groups()
        what = f"op {op_type} (node {node!r})"
    elif constant:
        node, op_type = constant.groups()
        what = f"op {op_type} (node {node!r}): an input that sets a shape is not a compile-time constant"
    else:
        return _first_line(text), ""
    frames = _FRAME.findall(text)
    for name in (node, node.split("/", 1)[-1]):
        try:
            frames = [(f.filename, f.lineno, f.name) for f in graph.get_operation_by_name(name).traceback]
            break
        except KeyError:
            continue
    origin = _user_frame(frames)
    return (f"{what}, created at {origin}" if origin else what), op_type


def check_xla(
    model_fn: Callable, mode: str, info: InputInfo, target: TPUTarget, model_dir: str, fn_name: str
) -> List[Finding]:
    """Compiles one `mode` step with XLA on CPU; returns the first op XLA refuses, if any (a note when the step
    cannot be built as a function to compile)."""
    batch = target.batch_sizes[mode]
    specs = _static_specs(info, batch)
    structure = _structure(info)

    feeds: List[tf.Tensor] = []

    def step(*flat):
        feeds.extend(flat)
        features, labels = (tf.nest.pack_sequence_as(structure, list(flat)) + (None,))[:2]
        return step_outputs(mode, call_model_fn(model_fn, mode, features, labels, target, model_dir))

    try:
        wrapped = tf.compat.v1.wrap_function(step, specs)
        # Keep only what the step computes: the optimizer update (and its CrossReplicaSum) is left out.
        pruned = wrapped.prune(feeds, wrapped.outputs)
    except Exception as e:  # noqa: BLE001 - the graph built; only this check's function form did not
        message = (
            f"{mode} step of model_fn {fn_name}: not compiled with XLA here, as the step does not build inside "
            f"tf.compat.v1.wrap_function ({type(e).__name__}: {_first_line(str(e))}); the other checks ran on the "
            "graph TPUEstimator builds. The TPU compiler will be the first to compile it"
        )
        return [Finding("xla", mode, NOTE, message)]
    compiled = tf.function(lambda *args: pruned(*args), jit_compile=True)
    try:
        with as_the_tpu_compiler():
            compiled.experimental_get_compiler_ir(*[tf.zeros(s.shape, s.dtype) for s in specs])(stage="hlo")
    except (ValueError, tf.errors.OpError) as e:
        what, op_type = _describe(str(e), wrapped.graph)
        message = (
            f"{mode} step of model_fn {fn_name}: XLA cannot compile {what}; the TPU compiler would refuse it too. "
            "Fix: use only TPU-supported ops inside the model_fn (no tf.py_function/numpy_function, string ops or "
            "sizes computed from data); move host work to the input pipeline or host_call"
        )
        return [Finding("xla", op_type or mode, FAILS, message)]
    return []


@contextlib.contextmanager
def as_the_tpu_compiler() -> Iterator[None]:
    """Compiles without the process's op determinism: XLA on CPU refuses, while it is on, ops it has no deterministic
    kernel for here (MaxPool's gradient), which the TPU compiler compiles; an earlier training run in the same
    process (a tuning trial) turns it on."""
    deterministic = tf_config.is_op_determinism_enabled()
    if deterministic:
        tf_config.disable_op_determinism()
    try:
        yield
    finally:
        if deterministic:
            tf.config.experimental.enable_op_determinism()


def _first_line(text: str) -> str:
    lines = text.strip().splitlines()
    return lines[0].strip() if lines else ""
