"""Helpers for testing kernels against the float64 references, on every backend.

Public, so users can check their own kernels the way the library checks its own.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from . import dtypes


def available_backends() -> list[str]:
    """``["cpu"]`` plus ``"cuda"`` when CuPy sees a GPU (``CUDNNLITE_TEST_BACKENDS``
    overrides, e.g. ``cuda`` alone in the device check)."""
    forced = os.environ.get("CUDNNLITE_TEST_BACKENDS")
    if forced:
        return [b.strip() for b in forced.split(",") if b.strip()]
    from .runtime.cuda import CudaBackend

    return ["cpu", "cuda"] if CudaBackend.available() else ["cpu"]


def has_wgmma_arch(backend: str) -> bool:
    """Whether ``backend`` has Hopper's wgmma to test: the emulator, or an sm_90 GPU, even
    one whose own wgmma check failed (a test there shows the failure instead of skipping)."""
    from .runtime.caps import capabilities
    from .runtime.select import backend_by_name

    caps = capabilities(backend_by_name(backend))
    return caps.emulator or caps.sm == 90


def to_backend(a: np.ndarray, backend: str) -> Any:
    """A copy of NumPy array ``a`` on ``backend`` (``cpu`` keeps NumPy)."""
    if backend == "cpu":
        return np.array(a, copy=True)
    import cupy

    from .ops._arrays import cupy_has_bfloat16

    if dtypes.bfloat16 is not None and a.dtype == dtypes.bfloat16 and not cupy_has_bfloat16(cupy):
        from .errors import NotSupportedError

        raise NotSupportedError(
            f"bfloat16 arrays on the GPU need CuPy >= 14 with ml_dtypes (CuPy {cupy.__version__})"
        )
    return cupy.asarray(a)


def to_numpy(a: Any) -> np.ndarray:
    if isinstance(a, np.ndarray):
        return a
    if hasattr(a, "get"):
        return a.get()
    return np.asarray(a)


# Relative tolerance of an elementwise result against the float64 reference, per
# storage dtype. The kernel computes in float32 and rounds the result once to the
# storage type, so the error is one rounding of the storage type (half an ulp:
# 2^-11 for fp16, 2^-8 for bf16) plus a few float32 ulps from the math library
# (CUDA's expf/tanhf/erff are within 2-4 ulp; 2^-23 each). fp32 gets 16 ulps of
# headroom for transcendental compositions (gelu, softplus, silu's derivative).
ELEMENTWISE_RTOL = {
    "fp32": 16 * 2.0**-23,  # ~1.9e-6
    "fp16": 2.0**-11 + 8 * 2.0**-23,  # one half-precision rounding
    "bf16": 2.0**-8 + 8 * 2.0**-23,  # one bfloat16 rounding
    # float64 computes in double: libm / CUDA double functions are within 1-2 ulp
    # (2^-52 each); 16 ulps of headroom for compositions, as for fp32.
    "fp64": 16 * 2.0**-52,  # ~3.6e-15
}

# Absolute floor where the result is ~0 and relative error is meaningless, per
# dtype: the smallest normal of the storage type times a few (fp16 subnormals
# flush precision away), and for fp32 a few ulps of 1.
ELEMENTWISE_ATOL = {"fp32": 1e-6, "fp16": 1e-4, "bf16": 1e-3, "fp64": 1e-15}

# Relative error of a sum of K products against the float64 reference, per unit of K
# and of the summed magnitude (sum |a_i b_i|): one rounding of the accumulation type per
# addition. float64: the reference itself rounds in double too (numpy's pairwise or
# BLAS order differs), so both sides contribute; 2 * 2^-53 per term bounds it.
ACCUMULATION_EPS = {"fp32": 2.0**-24, "fp16": 2.0**-24, "bf16": 2.0**-24, "fp64": 2 * 2.0**-53}


def assert_close(
    actual: Any,
    expected64: np.ndarray,
    dtype: Any,
    *,
    rtol: float | None = None,
    atol: float | None = None,
    what: str = "",
) -> None:
    """Compares a kernel's result with the float64 reference at the dtype's tolerance."""
    dt = dtypes.lookup(dtype)
    assert dt is not None, f"not a float dtype: {dtype}"
    rtol = ELEMENTWISE_RTOL[dt.short] if rtol is None else rtol
    atol = ELEMENTWISE_ATOL[dt.short] if atol is None else atol
    got = to_numpy(actual).astype(np.float64)
    np.testing.assert_allclose(
        got, expected64, rtol=rtol, atol=atol, equal_nan=True, err_msg=f"{what} ({dt.short})"
    )
