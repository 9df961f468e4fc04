"""bench/archive/fusion_growth.py: growth exponents and LLVM instruction counts."""

import math

import pytest
from conftest import bench_module

growth_bench = bench_module("fusion_growth")


def test_growth_is_the_exponent_of_each_doubling():
    exponents = growth_bench.growth({256: 0.25, 512: 0.79, 1024: 6.32})
    assert list(exponents) == ["256->512", "512->1024"]
    assert exponents["256->512"] == pytest.approx(math.log2(0.79 / 0.25))
    assert exponents["512->1024"] == pytest.approx(3.0)


def test_llvm_instructions_counts_assignments_stores_branches_and_calls_of_the_jit(tmp_path):
    body = """; ModuleID = 'fusion'
define void @fusion(ptr %0) {
entry:
  %1 = load float, ptr %0, align 4
  %2 = fadd float %1, 1.000000e+00
  store float %2, ptr %0, align 4
  call void @llvm.assume(i1 true)
  br label %exit
exit:
  ret void
}
declare void @llvm.assume(i1)
"""
    (tmp_path / "module_0001.jit_fn.fusion_kernel_module.ir-with-opt.ll").write_text(body)
    # another jit's module and the unoptimized stage are not counted
    (tmp_path / "module_0000.jit__linspace.kernel_module.ir-with-opt.ll").write_text(body)
    (tmp_path / "module_0001.jit_fn.fusion_kernel_module.ir-no-opt.ll").write_text(body * 2)
    assert growth_bench.llvm_instructions(str(tmp_path), "with-opt") == 6
    assert growth_bench.llvm_instructions(str(tmp_path), "no-opt") == 12
