"""preflight/hlo.py on hand-written HLO: live ranges and their peak, FLOPs and bytes, each computed by hand."""

from __future__ import annotations

from estimator_lib.preflight import hlo

MODULE = """HloModule tiny, is_scheduled=true

%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(f32[] %a, f32[] %b)
}

%fused_relu (p0: f32[4,16]) -> f32[4,16] {
  %p0 = f32[4,16]{1,0} parameter(0)
  %c = f32[] constant(0)
  %z = f32[4,16]{1,0} broadcast(f32[] %c), dimensions={}
  ROOT %m = f32[4,16]{1,0} maximum(f32[4,16]{1,0} %p0, f32[4,16]{1,0} %z)
}

ENTRY %main (x: f32[4,5], w: f32[5,16]) -> (f32[], f32[5,16]) {
  %x = f32[4,5]{1,0} parameter(0), metadata={op_name="XLA_Args"}
  %w = f32[5,16]{1,0} parameter(1), metadata={op_name="XLA_Args"}
  %dot = f32[4,16]{1,0} dot(f32[4,5]{1,0} %x, f32[5,16]{1,0} %w), lhs_contracting_dims={1}, rhs_contracting_dims={0}, metadata={op_type="MatMul" op_name="dense/MatMul;StatefulPartitionedCall/dense/MatMul"}
  %relu = f32[4,16]{1,0} fusion(f32[4,16]{1,0} %dot), kind=kLoop, calls=%fused_relu, metadata={op_name="StatefulPartitionedCall/dense/Relu"}
  %grad = f32[5,16]{1,0} dot(f32[4,5]{1,0} %x, f32[4,16]{1,0} %relu), lhs_contracting_dims={0}, rhs_contracting_dims={0}
  %zero = f32[] constant(0)
  %sum = f32[] reduce(f32[4,16]{1,0} %relu, f32[] %zero), dimensions={0,1}, to_apply=%add
  ROOT %out = (f32[], f32[5,16]{1,0}) tuple(f32[] %sum, f32[5,16]{1,0} %grad)
}
"""  # noqa: E501 - HLO lines as XLA prints them
TILE, VECTOR = 8 * 128 * 4, 256 * 4  # an f32 array within one (8, 128) tile; a scalar


def test_parse_names_shapes_and_ops():
    module = hlo.parse_module(MODULE)
    entry = {i.name: i for i in module.entry_instructions}
    assert module.entry == "main" and list(entry) == ["x", "w", "dot", "relu", "grad", "zero", "sum", "out"]
    assert entry["dot"].operands == ("x", "w") and str(entry["dot"].outputs[0]) == "f32[4,16]"
    assert entry["out"].outputs == (hlo.Array("f32", ()), hlo.Array("f32", (5, 16))) and entry["out"].root
    assert entry["w"].parameter_number == 1 and entry["relu"].calls == ("fused_relu",)
    assert [hlo.tf_op(entry[n]) for n in ("x", "dot", "relu", "grad")] == ["", "dense/MatMul", "dense/Relu", ""]


def test_live_ranges_and_peak():
    module = hlo.parse_module(MODULE)
    buffers = {b.instruction: b for b in hlo.live_buffers(module, skip_parameters=[1])}  # w: a variable
    ranges = {name: (b.start, b.end, b.kind) for name, b in buffers.items()}
    assert ranges == {
        "x": (0, 7, "input"),  # a parameter lives through the step
        "dot": (2, 3, "temporary"),  # to its last use, the fusion
        "relu": (3, 6, "temporary"),
        "grad": (4, 7, "output"),  # through the tuple to the end
        "zero": (5, 6, "temporary"),
        "sum": (6, 7, "output"),
    }
    # At `sum`: x, relu, grad (tiles), zero and sum (scalars); without the outputs, at `relu`: x, dot, relu.
    assert hlo.peak(list(buffers.values())) == (3 * TILE + 2 * VECTOR, 6)
    assert hlo.peak([b for b in buffers.values() if b.kind != "output"]) == (3 * TILE, 3)


def test_flops_and_bytes_as_cost_analysis_counts_them():
    flops, moved = hlo.cost(hlo.parse_module(MODULE))
    # dot 2*4*16*5, the fused relu one per element (4*16), the gradient dot 2*5*16*4, the reduce one per input.
    assert flops == 640 + 64 + 640 + 64
    # operands + output of dot, fusion, dot, reduce (padded); parameters, constants and the tuple access nothing.
    assert moved == 3 * TILE + 2 * TILE + 3 * TILE + (TILE + 2 * VECTOR)


def test_convolution_flops():
    line = (
        "  %conv = f32[8,8,8,4]{3,2,1,0} convolution(f32[8,8,8,1]{3,2,1,0} %x, f32[3,3,1,4]{3,2,1,0} %k), "
        "window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f"
    )
    conv = hlo.parse_instruction(line)
    module = hlo.Module({"main": (conv,)}, "main")
    assert hlo.instruction_flops(conv, module) == 2 * (8 * 8 * 8 * 4) * (3 * 3 * 1)  # 2 per multiply-add
