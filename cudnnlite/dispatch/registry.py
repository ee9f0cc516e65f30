"""The explicit, append-only registry of solvers.

A solver's name never changes once a tuning DB may hold it; new solvers are appended.
Entries name the class by module path so importing the registry compiles nothing.
"""

from __future__ import annotations

import functools
import importlib

from ..errors import BadParamError
from ..solvers.base import Solver

_ENTRIES: tuple[tuple[str, str], ...] = (
    # convolution forward
    ("conv_fwd_direct", "cudnnlite.solvers.conv.direct:DirectSolver"),
    ("conv_fwd_direct_depthwise", "cudnnlite.solvers.conv.direct:DepthwiseSolver"),
    ("conv_fwd_implicit_gemm", "cudnnlite.solvers.conv.implicit_gemm:ImplicitGemmSolver"),
    (
        "conv_fwd_implicit_precomp_gemm",
        "cudnnlite.solvers.conv.implicit_gemm:ImplicitPrecompGemmSolver",
    ),
    ("conv_fwd_gemm_1x1", "cudnnlite.solvers.conv.gemm_1x1:Gemm1x1Solver"),
    ("conv_fwd_winograd_f2x2_3x3", "cudnnlite.solvers.conv.winograd:WinogradF2x2Solver"),
    ("conv_fwd_winograd_f4x4_3x3", "cudnnlite.solvers.conv.winograd:WinogradF4x4Solver"),
    ("conv_fwd_winograd_fused_f2x2_3x3", "cudnnlite.solvers.conv.winograd:WinogradFusedSolver"),
    ("conv_fwd_wmma_implicit_gemm", "cudnnlite.solvers.conv.wmma:WmmaImplicitGemmSolver"),
    # convolution backward data
    ("conv_bwd_data_direct", "cudnnlite.solvers.conv.bwd_data:DirectSolver"),
    ("conv_bwd_data_winograd_f2x2_3x3", "cudnnlite.solvers.conv.bwd_data:WinogradF2x2Solver"),
    ("conv_bwd_data_winograd_f4x4_3x3", "cudnnlite.solvers.conv.bwd_data:WinogradF4x4Solver"),
    ("conv_bwd_data_wmma_implicit_gemm", "cudnnlite.solvers.conv.bwd_data:WmmaImplicitGemmSolver"),
    (
        "conv_bwd_data_implicit_gemm_rotated",
        "cudnnlite.solvers.conv.bwd_data:ImplicitGemmRotatedSolver",
    ),
    # convolution backward filter
    ("conv_bwd_filter_direct", "cudnnlite.solvers.conv.bwd_filter:DirectSolver"),
    (
        "conv_bwd_filter_implicit_gemm",
        "cudnnlite.solvers.conv.bwd_filter:ImplicitGemmSplitKSolver",
    ),
    (
        "conv_bwd_filter_implicit_gemm_atomic",
        "cudnnlite.solvers.conv.bwd_filter:ImplicitGemmAtomicSolver",
    ),
    ("conv_bwd_data_implicit_gemm", "cudnnlite.solvers.conv.bwd_data_igemm:ImplicitGemmSolver"),
    (
        "conv_bwd_filter_wmma_implicit_gemm",
        "cudnnlite.solvers.conv.bwd_filter_wmma:WmmaSplitKSolver",
    ),
    # multistage tensor-core implicit GEMM (common/mma.cuh)
    ("conv_fwd_tc_implicit_gemm", "cudnnlite.solvers.conv.tc_igemm:TcImplicitGemmSolver"),
    ("conv_fwd_tc_wgmma", "cudnnlite.solvers.conv.tc_wgmma:TcWgmmaSolver"),  # sm_90
    ("conv_bwd_data_tc_implicit_gemm", "cudnnlite.solvers.conv.bwd_data:TcImplicitGemmSolver"),
    ("conv_bwd_data_tc_wgmma", "cudnnlite.solvers.conv.bwd_data:TcWgmmaSolver"),  # sm_90
    (
        "conv_bwd_filter_tc_implicit_gemm",
        "cudnnlite.solvers.conv.tc_bwd_filter:TcBwdFilterSolver",
    ),
    (
        "conv_bwd_data_tc_implicit_gemm_phased",
        "cudnnlite.solvers.conv.tc_bwd_data:TcBwdDataPhasedSolver",
    ),
    # cuBLAS GEMMs (cuda) / NumPy matmul (emulator): 1x1 without a copy, im2col/col2im
    ("conv_fwd_gemm_cublas_1x1", "cudnnlite.solvers.conv.gemm_cublas:Gemm1x1Solver"),
    ("conv_fwd_im2col_gemm_cublas", "cudnnlite.solvers.conv.gemm_cublas:Im2colSolver"),
    ("conv_bwd_data_gemm_cublas_1x1", "cudnnlite.solvers.conv.gemm_cublas_bwd:BwdData1x1Solver"),
    (
        "conv_bwd_data_col2im_gemm_cublas",
        "cudnnlite.solvers.conv.gemm_cublas_bwd:BwdDataCol2imSolver",
    ),
    (
        "conv_bwd_filter_gemm_cublas_1x1",
        "cudnnlite.solvers.conv.gemm_cublas_bwd:BwdFilter1x1Solver",
    ),
    (
        "conv_bwd_filter_im2col_gemm_cublas",
        "cudnnlite.solvers.conv.gemm_cublas_bwd:BwdFilterIm2colSolver",
    ),
    # scaled dot-product attention
    ("sdpa_fwd_unfused", "cudnnlite.solvers.attention.unfused:UnfusedFwdSolver"),
    ("sdpa_bwd_unfused", "cudnnlite.solvers.attention.unfused:UnfusedBwdSolver"),
    ("sdpa_fwd_flash_tc", "cudnnlite.solvers.attention.flash_fwd:FlashTcFwdSolver"),
    ("sdpa_bwd_flash_tc", "cudnnlite.solvers.attention.flash_bwd:FlashTcBwdSolver"),
    ("sdpa_fwd_flash_fp32", "cudnnlite.solvers.attention.flash_fp32:FlashFp32FwdSolver"),
    ("sdpa_fwd_flash_dmma", "cudnnlite.solvers.attention.flash_dmma:FlashDmmaFwdSolver"),
    ("sdpa_bwd_flash_dmma", "cudnnlite.solvers.attention.flash_dmma:FlashDmmaBwdSolver"),
    ("sdpa_bwd_flash_fp32", "cudnnlite.solvers.attention.flash_fp32:FlashFp32BwdSolver"),
    ("sdpa_fwd_flash_decode", "cudnnlite.solvers.attention.flash_decode:FlashDecodeSolver"),
    ("sdpa_bwd_flash_tc_split", "cudnnlite.solvers.attention.flash_bwd:FlashTcBwdSplitSolver"),
    # recurrent networks
    ("rnn_fwd_standard", "cudnnlite.solvers.rnn.standard:StandardFwdSolver"),
    ("rnn_bwd_standard", "cudnnlite.solvers.rnn.standard:StandardBwdSolver"),
    ("rnn_fwd_persistent", "cudnnlite.solvers.rnn.persistent:PersistentFwdSolver"),
    # float64 on the fp64 tensor cores (mma.sync m8n8k4 .f64)
    ("conv_fwd_dmma_implicit_gemm", "cudnnlite.solvers.conv.dmma_igemm:DmmaImplicitGemmSolver"),
    ("conv_bwd_data_dmma_implicit_gemm", "cudnnlite.solvers.conv.bwd_data:DmmaImplicitGemmSolver"),
    (
        "conv_bwd_data_dmma_implicit_gemm_phased",
        "cudnnlite.solvers.conv.dmma_bwd_data:DmmaBwdDataPhasedSolver",
    ),
    (
        "conv_bwd_filter_dmma_implicit_gemm",
        "cudnnlite.solvers.conv.dmma_bwd_filter:DmmaBwdFilterSolver",
    ),
)

NAMES = tuple(name for name, _ in _ENTRIES)


@functools.cache
def _load(name: str) -> Solver | None:
    path = dict(_ENTRIES)[name]
    module_name, _, cls_name = path.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name != module_name:  # a solver module that fails to import is a bug
            raise
        return None  # not built yet in this checkout
    solver = getattr(module, cls_name)()
    if solver.name != name:
        raise RuntimeError(f"registry entry {name!r} points at a solver named {solver.name!r}")
    return solver


def solvers(family: str) -> list[Solver]:
    """Every available solver of a family (e.g. "conv_fwd"), in registry order."""
    out = []
    for name in NAMES:
        solver = _load(name)
        if solver is not None and solver.family == family:
            out.append(solver)
    return out


def get(name: str) -> Solver:
    """The solver called ``name``; BadParamError if there is none."""
    if name not in NAMES:
        raise BadParamError(f"algo: unknown solver {name!r}; known: {', '.join(NAMES)}")
    solver = _load(name)
    if solver is None:
        raise BadParamError(f"algo: solver {name!r} is not available in this build")
    return solver
