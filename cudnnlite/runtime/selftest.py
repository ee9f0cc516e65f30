"""The runtime's self-test kernels (``cuda_src/selftest/``), registered so the NVRTC
check compiles them and the test suite runs them on every backend."""

from __future__ import annotations

from .kernel import ModuleSpec
from .variants import register

EMULATOR_SELFTEST = ModuleSpec.make(
    "selftest/emulator_selftest.cu",
    [
        "block_reduce_sum",
        "early_exit_barrier",
        "barrier_predicates",
        "divergent_barrier",
        "warp_op",
        "warp_reduce",
        "atomics",
        "dynamic_reverse",
        "planted_missing_barrier",
        "planted_read_before_write",
        "barrier_loop_bench",
        "tiled_matmul",
        "half_bf16_ops",
        "planted_deadlock",
        "planted_out_of_bounds",
        "planted_misaligned",
        "trap_if",
        "partial_warp_reduce",
        "planted_warp_op_after_exit",
    ],
)

# Tensor-core fragments (nvcuda::wmma); bf16/tf32 kernels trap below sm_80.
WMMA_SELFTEST = ModuleSpec.make(
    "selftest/wmma_selftest.cu",
    [
        "wmma_gemm_fp16",
        "wmma_gemm_bf16",
        "wmma_gemm_tf32",
        "wmma_acc_roundtrip",
        "wmma_staged_fp16",
    ],
)


# The PTX-level tensor-core layer (common/mma.cuh): fragment layouts, cp.async, a pipeline.
MMA_SELFTEST = ModuleSpec.make(
    "selftest/mma_selftest.cu",
    [
        "mma_regs_f16",
        "mma_regs_bf16",
        "mma_regs_tf32",
        "tf32_round",
        "ldmatrix_regs",
        "cp_async_roundtrip",
        "mma_gemm_pipeline",
        "mma_regs_f64",
        "mma_gemm_f64",
    ],
)


def wgmma_selftest_name(ctype: str, n: int, swizzle: int) -> str:
    return f"wgmma_tile<{ctype}, {n}, {swizzle}>"


# Hopper's warpgroup MMA (common/mma.cuh's wgmma): both input types, N 64, 128 and 256,
# both shared-memory layouts.
WGMMA_SELFTEST = ModuleSpec.make(
    "selftest/wgmma_selftest.cu",
    [
        wgmma_selftest_name(t, n, sw)
        for t in ("__half", "__nv_bfloat16")
        for n in (64, 128, 256)
        for sw in (0, 1)
    ],
)

# The grid-wide barrier (common/grid_sync.cuh) under cooperative launches.
GRID_SYNC_SELFTEST = ModuleSpec.make(
    "selftest/grid_sync_selftest.cu", ["grid_exchange", "grid_sync_once"]
)


# Race-check self-tests (CUDNNLITE_EMU_RACECHECK, emulator/racecheck.py): planted races that
# must be reported and race-free kernels that must not; compiled by the NVRTC check too.
RACECHECK_SELFTEST = ModuleSpec.make(
    "selftest/racecheck_selftest.cu",
    [
        "planted_missing_syncthreads",
        "neighbour_with_syncthreads",
        "planted_warp_synchronous",
        "warp_sum_with_syncwarp",
        "planted_global_race",
        "planted_dynamic_shared",
        "warp_shuffle_exchange",
        "atomic_histogram",
        "barrier_reuse",
    ],
)


def acc_selftest_spec(ctype: str) -> ModuleSpec:
    """The accumulation-type self-test (common/cudnnlite.cuh's acc layer) for one storage
    type (a CUDA C type name: float, __half, __nv_bfloat16, double)."""
    names = [f"acc_math<{ctype}>", f"acc_warp_sum<{ctype}>"]
    if ctype == "float":
        names.append("exp2_ftz_probe")
    return ModuleSpec.make("selftest/acc_selftest.cu", names)


ACC_SELFTEST_TYPES = ("float", "__half", "__nv_bfloat16", "double")


@register("selftest")
def selftest_specs() -> list[ModuleSpec]:
    return [
        EMULATOR_SELFTEST,
        WMMA_SELFTEST,
        MMA_SELFTEST,
        WGMMA_SELFTEST,
        GRID_SYNC_SELFTEST,
        RACECHECK_SELFTEST,
        *(acc_selftest_spec(t) for t in ACC_SELFTEST_TYPES),
    ]
