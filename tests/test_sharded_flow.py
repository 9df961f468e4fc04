"""Where sharded arguments spread through a module, and the reshards the walk counts
(`features/sharded_flow.py`), on small StableHLO modules written out here."""

from __future__ import annotations

import pytest

from costmodel.features.sharded_flow import ShardedFlow, split_dims
from costmodel.features.stablehlo.parse import entry_function, functions, parse_module


def flow(text: str) -> dict[str, float]:
    module = parse_module(text)
    funcs = functions(module)
    with module.context:
        return ShardedFlow(funcs, entry_function(funcs)).run()


def module(args: str, body: str, result: str, extra: str = "") -> str:
    return (f'module @m attributes {{mhlo.num_partitions = 4 : i32}} {{\n'
            f'  sdy.mesh @mesh = <["data"=4]>\n'
            f'  func.func public @main({args}) -> {result} {{\n{body}\n  }}\n{extra}}}\n')


def arg(name: str, shape: str, dims: str) -> str:
    return f"%{name}: tensor<{shape}xf32> {{sdy.sharding = #sdy.sharding<@mesh, [{dims}]>}}"


# arg0's dim 1 is split; arg1 meets it only in the add, after a reduction over its dim 1
SPREAD_BACK = module(
    ", ".join([arg("arg0", "8x4", '{}, {"data"}'), arg("arg1", "8x4", "{}, {}"),
               arg("arg2", "4x16", "{}, {}")]),
    """    %cst = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %0 = stablehlo.reduce(%arg1 init: %cst) applies stablehlo.add across dimensions = [1]
        : (tensor<8x4xf32>, tensor<f32>) -> tensor<8xf32>
    %1 = stablehlo.add %arg0, %arg1 : tensor<8x4xf32>
    %2 = stablehlo.dot_general %1, %arg2, contracting_dims = [1] x [0]
        : (tensor<8x4xf32>, tensor<4x16xf32>) -> tensor<8x16xf32>
    %3 = call @f(%2) : (tensor<8x16xf32>) -> tensor<8x16xf32>
    %4 = call @f(%3) : (tensor<8x16xf32>) -> tensor<8x16xf32>
    return %4 : tensor<8x16xf32>""",
    "tensor<8x16xf32>",
    """  func.func private @f(%x: tensor<8x16xf32>) -> tensor<8x16xf32> {
    %0 = stablehlo.multiply %x, %x : tensor<8x16xf32>
    return %0 : tensor<8x16xf32>
  }
""")


def test_a_split_spreads_back_to_values_computed_before_they_meet_it():
    counts = flow(SPREAD_BACK)
    # constant, reduce, add, dot, two calls, and the callee's multiply once per call
    assert counts["ops"] == 8
    # the reduce (over arg1's dim 1, split through the add), the add and the dot; the
    # dot's result is not split (its dims come from arg0's dim 0 and arg2's dim 1)
    assert counts["split_ops"] == 3
    assert counts["reshards"] == 2  # the reduction over, and the dot contracting, dim 1
    assert counts["contracted_splits"] == 1
    assert counts["split_elements"] == 8 + 32 + 128
    assert counts["elements"] == 1 + 8 + 32 + 128 + 2 * 128 + 2 * 128


# data parallel: the batch dim is split; the weight is replicated
BATCH_SPLIT = module(
    ", ".join([arg("x", "8x4", '{"data"}, {}'), arg("w", "4x16", "{}, {}")]),
    """    %0 = stablehlo.dot_general %x, %w, contracting_dims = [1] x [0]
        : (tensor<8x4xf32>, tensor<4x16xf32>) -> tensor<8x16xf32>
    %1 = stablehlo.transpose %0, dims = [1, 0] : (tensor<8x16xf32>) -> tensor<16x8xf32>
    %2 = stablehlo.reshape %1 : (tensor<16x8xf32>) -> tensor<128xf32>
    %3 = stablehlo.reshape %0 : (tensor<8x16xf32>) -> tensor<2x4x16xf32>
    return %2, %3 : tensor<128xf32>, tensor<2x4x16xf32>""",
    "(tensor<128xf32>, tensor<2x4x16xf32>)")


def test_a_split_batch_passes_a_dot_and_a_transpose_and_a_merge_below_reshards():
    counts = flow(BATCH_SPLIT)
    assert counts["ops"] == 4
    assert counts["split_ops"] == 4
    # the dot keeps the batch split; the transposed batch dim merged below dim 16 must
    # move; splitting the leading dim 8 into 2x4 keeps it on the major part
    assert counts["contracted_splits"] == 0
    assert counts["reshards"] == 1


def test_a_replicated_program_has_nothing_split():
    counts = flow(BATCH_SPLIT.replace('[{"data"}, {}]', "[{}, {}]"))
    assert counts["ops"] == 4
    assert counts["split_ops"] == counts["reshards"] == counts["split_elements"] == 0


LOOP = module(
    ", ".join([arg("x", "8x4", '{"data"}, {}'), arg("s", "8x4", "{}, {}")]),
    """    %c = stablehlo.constant dense<0> : tensor<i32>
    %0:2 = stablehlo.while(%i = %c, %acc = %s) : tensor<i32>, tensor<8x4xf32>
     cond {
      %k = stablehlo.constant dense<3> : tensor<i32>
      %lt = stablehlo.compare LT, %i, %k : (tensor<i32>, tensor<i32>) -> tensor<i1>
      stablehlo.return %lt : tensor<i1>
    } do {
      %one = stablehlo.constant dense<1> : tensor<i32>
      %n = stablehlo.add %i, %one : tensor<i32>
      %a = stablehlo.add %acc, %x : tensor<8x4xf32>
      stablehlo.return %n, %a : tensor<i32>, tensor<8x4xf32>
    }
    %cst = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %1 = stablehlo.reduce(%s init: %cst) applies stablehlo.add across dimensions = [0]
        : (tensor<8x4xf32>, tensor<f32>) -> tensor<4xf32>
    return %1 : tensor<4xf32>""",
    "tensor<4xf32>")


def test_a_loop_carries_a_split_into_its_initial_value():
    counts = flow(LOOP)
    # the carried accumulator meets x in the body, so its initial value s is split too,
    # and the reduction of s over the batch dim is an all-reduce
    assert counts["reshards"] == 1
    # the body counts once: constant, while, cond's constant and compare, body's
    # constant and two adds, the outer constant and reduce
    assert counts["ops"] == 9
    assert counts["split_ops"] == 3  # the while, the body's add of arrays, the reduce


@pytest.mark.parametrize("annotation, rank, dims", [
    ('#sdy.sharding<@mesh, [{}, {"model"}]>', 2, (1,)),
    ('#sdy.sharding<@mesh, [{"data"}, {}, {"model", "x"}]>', 3, (0, 2)),
    ("#sdy.sharding<@mesh, [{}, {}]>", 2, ()),
    ("{devices=[1,4]<=[4]}", 2, (1,)),
    ("{devices=[2,1,2]<=[4] last_tile_dim_replicate}", 2, (0,)),
    ("{replicated}", 2, ()),
])
def test_split_dims_read_sdy_and_mhlo_annotations(annotation, rank, dims):
    assert split_dims(annotation, rank) == dims
