"""Read XLA's optimized HLO text of one compiled step: its buffers' live ranges and their peak, and its FLOPs and
bytes as XLA's HloCostAnalysis counts them.

The entry computation of an optimized (scheduled) module lists its instructions in execution order; a fusion is
one instruction whose output is one buffer. A buffer lives from the instruction that defines it to its last use
(a use through `get-tuple-element`, `bitcast` or `tuple`, which define no buffer of their own, counts as a use of
the buffer behind it); the step's outputs live to its end and its parameters through all of it, as XLA's buffer
assignment treats them. Computations called by `while`, `conditional` or `call` are counted once, through their
instruction's output; their own temporaries are not.
"""

from __future__ import annotations

import dataclasses
import math
import re
from typing import Dict, List, Optional, Sequence, Tuple

from estimator_lib.preflight.padding import padded_bytes, unpadded_bytes

_ARRAY = re.compile(r"\b(pred|[subfc]\d+|bf16|token)\[([\d,]*)\]")
_HEAD = re.compile(r"^\s*(ROOT\s+)?%?([\w.\-]+)\s*=\s*")
_OPCODE = re.compile(r"\s*([\w\-]+)\(")
_OPERAND = re.compile(r"%([\w.\-]+)")
_COMPUTATION = re.compile(r"^\s*(ENTRY\s+)?%?([\w.\-]+)\s.*\{\s*$")
_CALLS = re.compile(r"\b(?:calls|to_apply|body|condition|branch_computations)=\{?([^,}]+(?:,\s*%[\w.\-]+)*)\}?")
_OP_NAME = re.compile(r'op_name="([^"]*)"')
_PARAMETER = re.compile(r"\((\d+)\)")
# Instructions that define no buffer of their own: they name (part of) their operands' buffers.
ALIASES = ("get-tuple-element", "bitcast", "tuple")
# Instructions XLA's cost analysis gives no FLOPs: data movement, layout, control.
_NO_FLOPS = {
    "parameter", "constant", "tuple", "get-tuple-element", "bitcast", "broadcast", "reshape", "transpose", "copy",
    "slice", "dynamic-slice", "dynamic-update-slice", "concatenate", "pad", "gather", "iota", "reverse", "call",
    "while", "conditional", "custom-call", "after-all", "infeed", "outfeed", "copy-start", "copy-done",
    "bitcast-convert", "get-dimension-size", "partition-id", "replica-id", "rng-get-and-update-state",
}  # fmt: skip


@dataclasses.dataclass(frozen=True)
class Array:
    """One array shape: element type (HLO name, e.g. "f32") and dimensions."""

    dtype: str
    dims: Tuple[int, ...]

    @property
    def bytes(self) -> int:
        return 0 if self.dtype == "token" else unpadded_bytes(self.dims, self.dtype)

    @property
    def padded_bytes(self) -> int:
        return 0 if self.dtype == "token" else padded_bytes(self.dims, self.dtype)

    @property
    def elements(self) -> int:
        return math.prod(self.dims)

    def __str__(self) -> str:
        return f"{self.dtype}[{','.join(map(str, self.dims))}]"


@dataclasses.dataclass(frozen=True)
class Instruction:
    """One HLO instruction: name, opcode, output arrays (several for a tuple), operand names and shapes, the
    computations it calls, the TensorFlow op it comes from (metadata op_name, '' when absent), its attributes."""

    name: str
    opcode: str
    outputs: Tuple[Array, ...]
    operands: Tuple[str, ...]
    operand_shapes: Tuple[Tuple[Array, ...], ...]
    calls: Tuple[str, ...]
    op_name: str
    attributes: str
    root: bool

    @property
    def parameter_number(self) -> Optional[int]:
        found = _PARAMETER.match(self.attributes) if self.opcode == "parameter" else None
        return int(found.group(1)) if found else None


@dataclasses.dataclass(frozen=True)
class Module:
    """A parsed HLO module: its computations (name -> instructions in order) and the entry's name."""

    computations: Dict[str, Tuple[Instruction, ...]]
    entry: str

    @property
    def entry_instructions(self) -> Tuple[Instruction, ...]:
        return self.computations[self.entry]


def _arrays(text: str) -> Tuple[Array, ...]:
    return tuple(Array(dtype, tuple(int(d) for d in dims.split(",") if d)) for dtype, dims in _ARRAY.findall(text))


def _balanced(text: str, start: int) -> int:
    """The index just past the bracket group opening at `start` ('(' or '{')."""
    depth = 0
    for i in range(start, len(text)):
        if text[i] in "({[":
            depth += 1
        elif text[i] in ")}]":
            depth -= 1
            if depth == 0:
                return i + 1
    return len(text)


def _split_top(text: str) -> List[str]:
    """`text` split at its top-level commas."""
    parts, depth, current = [], 0, []
    for ch in text:
        depth += ch in "({[" and 1 or (-1 if ch in ")}]" else 0)
        if ch == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
    return parts + (["".join(current)] if "".join(current).strip() else [])


def parse_instruction(line: str) -> Optional[Instruction]:
    """One instruction line, or None for a line that is not one."""
    head = _HEAD.match(line)
    if not head:
        return None
    rest = line[head.end() :]
    end = _balanced(rest, 0) if rest.startswith("(") else rest.find(" ")
    shape_text, rest = rest[:end], rest[end:]
    opcode = _OPCODE.match(rest)
    if not opcode:
        return None
    open_at = opcode.end() - 1
    close_at = _balanced(rest, open_at)
    operand_texts = _split_top(rest[open_at + 1 : close_at - 1])
    attributes = rest[close_at:]
    names = [(_OPERAND.findall(t) or [""])[-1] for t in operand_texts]
    op_name = _OP_NAME.search(attributes)
    calls = [c.strip().lstrip("%") for m in _CALLS.findall(attributes) for c in m.split(",")]
    return Instruction(
        name=head.group(2),
        opcode=opcode.group(1),
        outputs=_arrays(shape_text),
        operands=tuple(names),
        operand_shapes=tuple(_arrays(t.split("%")[0]) for t in operand_texts),
        calls=tuple(c for c in calls if c),
        op_name=op_name.group(1) if op_name else "",
        attributes=attributes if opcode.group(1) != "parameter" else rest[open_at:],
        root=bool(head.group(1)),
    )


def parse_module(text: str) -> Module:
    """Parses an HLO module's text (`experimental_get_compiler_ir(...)(stage="optimized_hlo")`)."""
    computations: Dict[str, List[Instruction]] = {}
    entry, current = "", None
    for line in text.splitlines():
        if current is None:
            header = _COMPUTATION.match(line)
            if header and not line.lstrip().startswith("HloModule"):
                current = header.group(2)
                computations[current] = []
                entry = current if header.group(1) else entry
            continue
        if line.strip() == "}":
            current = None
            continue
        instruction = parse_instruction(line)
        if instruction is not None:
            computations[current].append(instruction)
    if not entry:
        raise ValueError("the HLO text has no ENTRY computation")
    return Module({name: tuple(found) for name, found in computations.items()}, entry)


def tf_op(instruction: Instruction) -> str:
    """The TensorFlow op an instruction comes from: its metadata's first op_name, without the function-call
    prefix TensorFlow adds ("StatefulPartitionedCall/"); '' when absent."""
    name = instruction.op_name.split(";")[0]
    while name.startswith("StatefulPartitionedCall/"):
        name = name[len("StatefulPartitionedCall/") :]
    return "" if name in ("XLA_Args", "XLA_Retvals") else name


def op_of(instruction: Instruction, module: Module) -> str:
    """`tf_op` of the instruction, or of the root of a computation it calls when it has none (a `call`)."""
    name = tf_op(instruction)
    for called in instruction.calls if not name else ():
        name = next((tf_op(i) for i in module.computations.get(called, ()) if i.root), "") or name
    return name


@dataclasses.dataclass(frozen=True)
class Buffer:
    """One buffer of the step: the instruction defining it, the TF op, its shape, when it is live (positions in the
    entry's schedule, inclusive) and its kind: "input" (an entry parameter), "output" or "temporary"."""

    instruction: str
    op: str
    array: Array
    start: int
    end: int
    kind: str


def live_buffers(module: Module, skip_parameters: Sequence[int] = ()) -> List[Buffer]:
    """The entry's buffers with their live ranges.

    Args:
      module: the parsed module.
      skip_parameters: entry parameter numbers left out (buffers counted elsewhere, e.g. the model's variables).
    """
    instructions = module.entry_instructions
    last = len(instructions) - 1
    behind: Dict[str, List[str]] = {}  # instruction -> the buffer-defining instructions it names
    start: Dict[str, int] = {}
    end: Dict[str, int] = {}
    outputs: set = set()
    for position, instruction in enumerate(instructions):
        for operand in instruction.operands:
            for owner in behind.get(operand, ()):
                end[owner] = max(end[owner], position)
        if instruction.opcode in ALIASES:
            behind[instruction.name] = [o for operand in instruction.operands for o in behind.get(operand, ())]
        else:
            behind[instruction.name] = [instruction.name]
            start[instruction.name] = end[instruction.name] = position
            if instruction.opcode == "parameter":
                start[instruction.name], end[instruction.name] = 0, last
        if instruction.root:
            outputs.update(behind[instruction.name])
    skipped = {i.name for i in instructions if i.opcode == "parameter" and i.parameter_number in set(skip_parameters)}
    found = []
    for instruction in instructions:
        name = instruction.name
        if name not in start or name in skipped:
            continue
        stop = last if name in outputs else end[name]
        kind = "input" if instruction.opcode == "parameter" else "output" if name in outputs else "temporary"
        for array in instruction.outputs:
            found.append(Buffer(name, op_of(instruction, module), array, start[name], stop, kind))
    return found


def peak(buffers: Sequence[Buffer]) -> Tuple[int, int]:
    """(peak padded bytes live at once, the schedule position where it is reached)."""
    if not buffers:
        return 0, 0
    steps = max(b.end for b in buffers) + 2
    delta = [0] * steps
    for b in buffers:
        delta[b.start] += b.array.padded_bytes
        delta[b.end + 1] -= b.array.padded_bytes
    best, where, running = 0, 0, 0
    for position, change in enumerate(delta):
        running += change
        if running > best:
            best, where = running, position
    return best, where


def _dims_of(attributes: str, key: str) -> Tuple[int, ...]:
    found = re.search(key + r"=\{([\d,]*)\}", attributes)
    return tuple(int(d) for d in found.group(1).split(",") if d) if found else ()


def instruction_flops(instruction: Instruction, module: Module) -> int:
    """FLOPs of one instruction as HloCostAnalysis counts them: 2*M*N*K for a dot, 2 per multiply-add of a
    convolution, one per output element of an elementwise op, one per input element of a reduce; a fusion's are
    its computation's."""
    opcode = instruction.opcode
    out = sum(a.elements for a in instruction.outputs)
    if opcode == "fusion":
        return sum(instruction_flops(i, module) for c in instruction.calls for i in module.computations.get(c, ()))
    if opcode == "dot":
        lhs = instruction.operand_shapes[0][0].dims if instruction.operand_shapes[0] else ()
        contracted = math.prod(lhs[d] for d in _dims_of(instruction.attributes, "lhs_contracting_dims"))
        return 2 * out * contracted
    if opcode == "convolution":
        rhs = instruction.operand_shapes[1][0].dims
        labels = re.search(r"dim_labels=\w+_(\w+)->", instruction.attributes)
        per_output = math.prod(rhs) // rhs[labels.group(1).index("o")] if labels else math.prod(rhs)
        return 2 * out * per_output
    if opcode in ("reduce", "reduce-window"):
        inputs = instruction.operand_shapes[: max(1, len(instruction.operand_shapes) // 2)]
        return sum(a.elements for shapes in inputs for a in shapes)
    return 0 if opcode in _NO_FLOPS else out


def cost(module: Module) -> Tuple[int, int]:
    """(FLOPs, bytes accessed) of one run of the entry: each top-level instruction's FLOPs, and the padded bytes
    of its operands and outputs (parameters, constants and aliasing instructions access nothing themselves)."""
    flops = moved = 0
    for instruction in module.entry_instructions:
        flops += instruction_flops(instruction, module)
        if instruction.opcode in ALIASES or instruction.opcode in ("parameter", "constant"):
            continue
        arrays = list(instruction.outputs) + [a for shapes in instruction.operand_shapes for a in shapes]
        moved += sum(a.padded_bytes for a in arrays)
    return flops, moved
