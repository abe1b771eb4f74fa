"""Unordered reads and writes of one variable within a training step, and the order that makes them repeatable.

In a TF1 graph nothing orders a read of a variable against a write of it unless a data or control path joins
them: a learning rate that reads `global_step` while the step's own increment writes it may see either value,
run to run (google-research/bert's `tf.group(train_op, [global_step.assign(global_step + 1)])` does this).
`find_races` names every such pair among the ancestors of a `train_op`; `order_races` adds a control edge from
each read to its write, so the read always sees the value the step started with (see docs/determinism.md).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import sysconfig
from collections import deque
from typing import Callable, Dict, Iterator, List, Optional, Sequence, Set, Tuple

import tensorflow as tf

from estimator_lib.model.calling import call_as_tpu_estimator

log = logging.getLogger(__name__)
ModeKeys = tf.estimator.ModeKeys

# Ops that hand a variable's handle (or reference) on unchanged.
_PASS_THROUGH = {"Identity", "RefIdentity", "Enter", "RefEnter", "Switch", "RefSwitch", "TPUReplicatedInput"}
_SOURCES = {"VarHandleOp", "VariableV2", "Variable", "Placeholder"}
_RESOURCE_READS = {"ReadVariableOp", "ResourceGather", "ResourceGatherNd"}
# Ops that look at a variable without reading its value.
_NOT_VALUE_READS = {"VarIsInitializedOp", "IsVariableInitialized", "VariableShape", "DestroyResourceOp"}
# Ops that write the variable of each of their resource or reference inputs (besides "*Apply*": optimizers).
_WRITE_PREFIXES = ("Assign", "ResourceScatter", "Scatter", "ResourceStridedSliceAssign", "StridedSliceAssign")
# Frames of the libraries between a user's line and the op; the site named is the innermost frame outside them.
_LIBRARY_DIRS = tuple(
    os.sep + name + os.sep for name in ("tensorflow", "tensorflow_estimator", "keras", "tf_keras", "estimator_lib")
)
_STDLIB = sysconfig.get_paths()["stdlib"]
CONSEQUENCE = "training is not bitwise reproducible"


@dataclasses.dataclass(frozen=True)
class Race:
    """A read and a write of one variable, both in a training step, that no data or control path orders.

    Attributes:
      variable: the variable's name (its handle's or reference's op).
      read: the read op's name; read_site: where the user's code created it ("file:line"), "" if unknown.
      write: the write op's name; write_site: as read_site.
    """

    variable: str
    read: str
    read_site: str
    write: str
    write_site: str

    def message(self) -> str:
        """What the race does and how a model_fn avoids it."""
        return (
            f"{self.variable}: {self.read} (created at {self.read_site or 'unknown'}) and {self.write} (at "
            f"{self.write_site or 'unknown'}) are not ordered, so the step may read {self.variable} before or after "
            f"it is written: {CONSEQUENCE}; make the write depend on the read (tf.control_dependencies) or on the "
            "update that uses it"
        )

    def to_json(self) -> Dict[str, str]:
        return dataclasses.asdict(self)


def user_site(op: tf.Operation) -> str:
    """ "file:line" of the innermost frame of `op`'s creation outside TensorFlow, Keras, the estimator and this
    library (and the Python standard library); "" when there is none."""
    for frame in reversed(list(op.traceback)):
        name = frame.filename
        if not any(d in name for d in _LIBRARY_DIRS) and not name.startswith(_STDLIB):
            return f"{name}:{frame.lineno}"
    return ""


def _source(tensor: tf.Tensor) -> Optional[tf.Operation]:
    """The variable op behind a handle or reference, through the ops that pass it on; None if there is none."""
    op = tensor.op
    while op.type in _PASS_THROUGH and op.inputs:
        if op.type == "Identity" and op.inputs[0].dtype != tf.resource:
            return None  # an Identity of a reference variable is a read, not a hand-over
        op = op.inputs[0].op
    outer = _captured(op) if op.type == "Placeholder" else None
    if outer is not None:
        return _source(outer) or op
    return op if op.type in _SOURCES else None


def _captured(placeholder: tf.Operation) -> Optional[tf.Tensor]:
    """The outer tensor a function graph's placeholder stands for (a while loop's body, as a TPU training loop
    runs the model_fn in), or None."""
    return next((outer for outer, inner in getattr(placeholder.graph, "captures", ()) if inner.op is placeholder), None)


def _is_write(op: tf.Operation) -> bool:
    kind = op.type
    return kind.startswith(_WRITE_PREFIXES) or "Apply" in kind


def _accesses(op: tf.Operation, inputs: Sequence[tf.Tensor]) -> Iterator[Tuple[str, str]]:
    """(variable, "read" or "write") for each variable `op` (whose data inputs are `inputs`) reads or writes by
    value."""
    kind = op.type
    if kind in _NOT_VALUE_READS or kind in _PASS_THROUGH and kind != "Identity":
        return
    for tensor in inputs:
        dtype = tensor.dtype
        resource = dtype == tf.resource
        if not (resource or dtype._is_ref_dtype) or resource and kind == "Identity":
            continue  # not a variable, or a handle handed on
        source = _source(tensor)
        if source is None:
            continue
        if _is_write(op):
            yield source.name, "write"
        elif kind in _RESOURCE_READS or not resource:
            yield source.name, "read"


def _ancestors(target: tf.Operation) -> Dict[tf.Operation, List[tf.Operation]]:
    """`target` and every op it depends on through data or control inputs, each with its parents' list."""
    parents = {target: _parents(target)}
    stack = [target]
    while stack:
        for parent in parents[stack.pop()]:
            if parent not in parents:
                parents[parent] = _parents(parent)
                stack.append(parent)
    return parents


def _parents(op: tf.Operation) -> List[tf.Operation]:
    if op.type in ("NextIteration", "RefNextIteration"):
        return list(op.control_inputs)  # a while loop's back edge: the next iteration's value is not this step's
    return [t.op for t in op.inputs] + list(op.control_inputs)


def _topological(parents: Dict[tf.Operation, List[tf.Operation]]) -> List[tf.Operation]:
    """The ops of `parents`, parents first (Kahn's algorithm; while loops' back edges are not parents)."""
    children: Dict[tf.Operation, List[tf.Operation]] = {op: [] for op in parents}
    pending = {}
    for op, ups in parents.items():
        unique = set(ups)
        pending[op] = len(unique)
        for parent in unique:
            children[parent].append(op)
    ready = deque(op for op, n in pending.items() if n == 0)
    order = []
    while ready:
        op = ready.popleft()
        order.append(op)
        for child in children[op]:
            pending[child] -= 1
            if pending[child] == 0:
                ready.append(child)
    return order


def _ancestor_bits(
    order: Sequence[tf.Operation], parents: Dict[tf.Operation, List[tf.Operation]], bit: Dict[tf.Operation, int]
) -> Dict[tf.Operation, int]:
    """For each op, the set (bits of `bit`) of the tracked ops among its strict ancestors: one pass in
    topological order, with Python integers as bitsets over the tracked ops only."""
    below: Dict[tf.Operation, int] = {}
    for op in order:
        bits = 0
        for parent in parents[op]:
            bits |= below.get(parent, 0) | bit.get(parent, 0)  # absent: on a cycle not a while loop's
        below[op] = bits
    return below


def find_races(graph: tf.Graph, train_op) -> List[Race]:
    """Every pair of a read and a write of the same variable, both ancestors (data or control) of `train_op` (an
    op or a tensor of `graph`), neither an ancestor of the other: the read may see the value before or after the
    write. A read that feeds its write (`v.assign(v + 1)`) is ordered and not reported. Sorted by variable, read
    and write names."""
    target = train_op if isinstance(train_op, tf.Operation) else train_op.op
    if target.graph is not graph:
        raise ValueError(f"train_op {target.name!r} is not an op of the graph given; pass the graph it was built in")
    parents = _ancestors(target)
    reads: Dict[str, Set[tf.Operation]] = {}
    writes: Dict[str, Set[tf.Operation]] = {}
    for op in parents:
        for variable, kind in _accesses(op, op.inputs):
            (writes if kind == "write" else reads).setdefault(variable, set()).add(op)
    shared = sorted(set(reads) & set(writes))
    tracked = sorted({op for v in shared for op in reads[v] | writes[v]}, key=lambda o: o._id)
    bit = {op: 1 << i for i, op in enumerate(tracked)}
    below = _ancestor_bits(_topological(parents), parents, bit)
    races = []
    for variable in shared:
        for read in reads[variable] - writes[variable]:
            for write in writes[variable]:
                if not (below.get(write, 0) & bit[read] or below.get(read, 0) & bit[write]):
                    races.append(Race(variable, read.name, user_site(read), write.name, user_site(write)))
    return sorted(races, key=lambda r: (r.variable, r.read, r.write))


def order_races(graph: tf.Graph, races: Sequence[Race]) -> List[Race]:
    """Adds a control edge from each race's read to its write, so every step reads the value it started with
    (what the model computes when its write waits for the update, as an optimizer's own step increment does).
    Returns the races it could not order: a read and a write in different control-flow contexts (a while loop's
    body and the graph outside it), or a write that an edge added before has made an ancestor of the read."""
    unordered = []
    for race in races:
        read, write = graph.get_operation_by_name(race.read), graph.get_operation_by_name(race.write)
        if read._control_flow_context is not write._control_flow_context or write in _ancestors(read):
            unordered.append(race)
        else:
            write._add_control_input(read)
    return unordered


def ordered_model_fn(model_fn: Callable, on_races: Optional[Callable[[List[Race], List[Race]], None]] = None):
    """`model_fn` (called as TPUEstimator calls a 5-argument one) with the races of its TRAIN graph ordered
    (`order_races`), each logged as a warning. `on_races(found, unordered)` receives them, for the run's record:
    `unordered` are the races left, which make training not bitwise reproducible."""

    def wrapped(features, labels, mode, params, config):
        spec = call_as_tpu_estimator(model_fn, features, labels, mode, params, config)
        train_op = getattr(spec, "train_op", None)
        if mode != ModeKeys.TRAIN or train_op is None:
            return spec
        graph = train_op.graph  # an op's or a tensor's: the step's graph, a while loop's body on a TPU
        found = find_races(graph, train_op)
        unordered = order_races(graph, found)
        for race in found:
            state = "left unordered" if race in unordered else "ordered read first"
            log.warning("train: unordered read and write (%s): %s", state, race.message())
        if on_races is not None:
            on_races(found, unordered)
        return spec

    return wrapped
