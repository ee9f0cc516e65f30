"""The emulator's CUDA types header (emu_types.h) as a header: the harness's compile-time
checks and plain usage, and the header compiled on its own (warning-free, CUDA's
opt-out macros honoured)."""

from __future__ import annotations

import shutil
import subprocess

import pytest
from emu_types_support import FLAGS, INCLUDE

# The inputs deliberately include NaNs (signalling ones among the bf16 patterns), infinities and
# overflowing values; NumPy's RuntimeWarnings about them are expected noise here.
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


# ------------------------------------------------------------------------------------------------
# Compile-time properties and plain usage
# ------------------------------------------------------------------------------------------------
def test_compile_checks_and_usage(lib):
    # The static_asserts (vector sizes/alignments, trivial 16-bit types, min/max overloads)
    # already passed when the fixture compiled the harness.
    assert lib.compile_checks() == 1
    assert lib.ldst_ok() == 1
    assert lib.rounding_mode_restored() == 1


@pytest.mark.parametrize(
    "defines",
    [
        [],
        ["-D__CUDA_NO_HALF_CONVERSIONS__", "-D__CUDA_NO_BFLOAT16_CONVERSIONS__"],
        [
            "-D__CUDA_NO_HALF_OPERATORS__",
            "-D__CUDA_NO_HALF2_OPERATORS__",
            "-D__CUDA_NO_BFLOAT16_OPERATORS__",
            "-D__CUDA_NO_BFLOAT162_OPERATORS__",
        ],
    ],
)
def test_header_standalone_and_opt_outs(tmp_path, defines):
    """The header compiles on its own, after core-style macro definitions, warning-free with
    -Wextra, and honours CUDA's opt-out macros for the 16-bit conversions/operators."""
    if shutil.which("g++") is None:
        pytest.skip("g++ is not available")
    src = tmp_path / "standalone.cpp"
    src.write_text(
        "#define __device__\n#define __host__\n"
        "#define __forceinline__ inline __attribute__((always_inline))\n"
        '#include "emu_types.h"\n#include "emu_types.h"\n'
        "__device__ __half f(__half a, __half b) { return __hfma(a, b, __hadd(a, b)); }\n"
        "__device__ float g(float x) { return __saturatef(x) + erfinvf(x) + __expf(x); }\n"
    )
    res = subprocess.run(
        ["g++", *FLAGS, "-Wextra", *defines, "-fsyntax-only", "-I", str(INCLUDE), str(src)],
        capture_output=True,
        text=True,
    )
    assert res.returncode == 0, res.stderr
    assert "warning" not in res.stderr, res.stderr
