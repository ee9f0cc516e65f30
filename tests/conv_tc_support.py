"""Helpers of the tensor-core convolution tests (tests/test_conv_tc*.py): the solvers,
small tiles, problem makers per direction and layout, and the forward check against the
float64 reference. Tolerance (tests/conv_support.py): fp16/bf16 products are exact in fp32
and the sums are fp32 in some order, so acc_factor 2 bounds the accumulation; then one
rounding to the output type (out_rtol); TF32 adds 2^-11 per operand."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from cudnnlite import dtypes
from cudnnlite.problems.conv import ConvProblem
from cudnnlite.solvers.conv.tc_bwd_data import TcBwdDataPhasedSolver
from cudnnlite.solvers.conv.tc_bwd_filter import TcBwdFilterSolver
from cudnnlite.solvers.conv.tc_igemm import TcConfig, TcImplicitGemmSolver

from conv_support import assert_conv_close, operands, run_solver

SOLVER = TcImplicitGemmSolver()
SHORTS = [d.short for d in dtypes.FP32_COMPUTE_TYPES]  # fp64: not applicable
SMALL = TcConfig(64, 64, 32, 32, 32, 4)
SMALL_TF32 = TcConfig(64, 64, 16, 32, 32, 4)


def conv(n, c, hw, k, f=3, pad=1, stride=1, dil=1, dtype="fp16", layout="NHWC"):
    hw = hw if isinstance(hw, tuple) else (hw, hw)
    math = "tf32" if dtype == "fp32" else "default"
    return ConvProblem(n=n, c=c, spatial=hw, k=k, filter=(f, f), pads=((pad, pad), (pad, pad)),
                       strides=(stride, stride), dilations=(dil, dil), layout=layout,
                       dtype=dtype, math=math)  # fmt: skip


def _acc_factor(problem: ConvProblem) -> float:
    # TF32 rounds each operand to 11 significant bits (relative error <= 2^-11 each), so
    # up to 2 * 2^-11 * mag on top of the fp32 sums: 2 + 2^14 / K in units of K * 2^-24.
    k_terms = problem.c_per_group * problem.filter_taps
    return 2.0 + (2.0**14 / k_terms if problem.dtype == "fp32" else 0.0)


def _check(backend, problem, config=None, seed=0, epilogue=None, activation=None, **extra):
    if problem.dtype not in SHORTS:
        pytest.skip("ml_dtypes missing")
    ops = operands(problem, seed, **extra)
    before = {name: a.copy() for name, a in ops.items()}
    config = config or (SMALL_TF32 if problem.dtype == "fp32" else SMALL)
    got = run_solver(backend, SOLVER, problem, ops, config, epilogue=epilogue)
    assert_conv_close(got, problem, ops, acc_factor=_acc_factor(problem), epilogue=epilogue,
                      activation=activation, what=SOLVER.name)  # fmt: skip
    for name, a in ops.items():
        np.testing.assert_array_equal(a, before[name], err_msg=name)


BWF = TcBwdFilterSolver()


def _bwf(n, c, hw, k, f=3, pad=1, stride=1, dil=1, dtype="fp16"):
    return dataclasses.replace(
        conv(n, c, hw, k, f, pad, stride, dil, dtype), direction="bwd_filter"
    )


PHASED = TcBwdDataPhasedSolver()


def _bwd(n, c, hw, k, f=3, pad=1, stride=1, dil=1, dtype="fp16"):
    return dataclasses.replace(conv(n, c, hw, k, f, pad, stride, dil, dtype), direction="bwd_data")


# Both backward kernels read a tile of reduction rows that ldmatrix.trans cannot move in
# 32-bit elements: scalar fragment loads from padded rows (tc_gemm.cuh). TF32 rounds each
# operand to 11 significant bits: 2 * 2^-11 * mag on top of the fp32 sums, i.e. acc_factor
# 2 + 2^14 / T in units of T * 2^-24 (T: terms per output).
def _tf32_acc(terms: int) -> float:
    return 2.0 + 2.0**14 / terms


# The backward kernels read NHWC / KRSC: NCHW problems convert dy and w (data) or x and dy
# (filter) into the workspace, and write dx in NCHW from the epilogue (data) or dw in KCRS
# from the split reduction (filter).
def _layout(p: ConvProblem, layout: str = "NCHW") -> ConvProblem:
    return dataclasses.replace(p, layout=layout)


def _grouped(direction: str, layout: str, dtype: str = "fp16") -> ConvProblem:
    return ConvProblem(n=2, c=16, spatial=(5, 4), k=24, filter=(3, 3), pads=((1, 1), (1, 1)),
                       strides=(2, 1), dilations=(1, 1), groups=2, layout=layout, dtype=dtype,
                       direction=direction)  # fmt: skip


def _d3(direction: str) -> ConvProblem:
    return ConvProblem(n=1, c=8, spatial=(3, 5, 4), k=16, filter=(2, 3, 3),
                       pads=((0, 1), (1, 1), (1, 1)), strides=(1, 2, 1), dilations=(1, 1, 1),
                       layout="NCDHW", dtype="fp16", direction=direction)  # fmt: skip
