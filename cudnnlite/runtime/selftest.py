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
        "trap_if",
    ],
)


@register("selftest")
def selftest_specs() -> list[ModuleSpec]:
    return [EMULATOR_SELFTEST]
