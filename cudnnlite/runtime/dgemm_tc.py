"""A strided-batched DGEMM on the fp64 tensor cores, without cuBLAS:
``cuda_src/blas/dgemm_tc.cu`` (``mma.sync m8n8k4 .f64`` through ``common/mma.cuh``).

Same semantics and views as :func:`cudnnlite.runtime.blas.gemm` (row-major :class:`Mat`
views, ``op`` = transpose, ``C_i = alpha * op(A_i) @ op(B_i) + beta * C_i``), float64
only: A, B and C must all be float64 and alpha/beta stay float64. C is not read when
``beta == 0`` (BLAS semantics). Runs on the emulator (the same kernel through the
emulator's model of the instruction) and on sm_80+ GPUs; :func:`unsupported_reason` says
why not elsewhere.

Precision: each element is a sum of k products accumulated in double by the tensor
core (the emulator: one fma per product, k in order), then ``alpha * acc`` and, when
``beta != 0``, ``fma(beta, C, alpha * acc)``: at most about ``k + 2`` roundings of the
summed magnitude, like a DGEMM.
"""

from __future__ import annotations

import numpy as np

from ..errors import BadParamError, NotSupportedError
from .backend import Backend
from .blas import Mat
from .caps import Capabilities, capabilities
from .kernel import ModuleSpec
from .variants import register

DGEMM_TC = ModuleSpec.make("blas/dgemm_tc.cu", ["dgemm_tc"])

TILE = 32  # C rows and columns per block (dgemm_tc.cu: kTile)
THREADS = 128
_MAX_GRID_Z = 65535

_LL = ("a_row", "a_col", "b_row", "b_col", "ldc", "a_batch", "b_batch", "c_batch",
       "a_off", "b_off", "c_off")  # fmt: skip
# dgemm_tc.cu: DgemmShape (C layout: 8-byte fields, then four ints).
SHAPE_DTYPE = np.dtype(
    [*((f, "<i8") for f in _LL), ("alpha", "<f8"), ("beta", "<f8"),
     *((f, "<i4") for f in ("m", "n", "k", "z0"))],
    align=True,
)  # fmt: skip


@register("blas")
def dgemm_tc_specs() -> list[ModuleSpec]:
    return [DGEMM_TC]


def _check_view(name: str, m: Mat, batch: int) -> None:
    if min(m.rows, m.cols) < 1 or m.ld < m.cols or m.offset < 0 or m.stride < 0:
        raise BadParamError(f"dgemm_tc {name}: bad view {m.rows}x{m.cols} ld {m.ld} "
                            f"offset {m.offset} stride {m.stride}")  # fmt: skip
    if m.extent(batch) > int(m.array.size):
        raise BadParamError(f"dgemm_tc {name}: the view reaches element {m.extent(batch)} of "
                            f"an array of {int(m.array.size)}")  # fmt: skip


def unsupported_reason(caps: Capabilities) -> str | None:
    """Why this device cannot run the fp64 tensor-core GEMM, or None."""
    if not caps.bf16_tensor_cores:
        return f"fp64 tensor cores (mma.sync m8n8k4 .f64) need sm_80+, this is {caps.arch}"
    return None


def dgemm_tc(
    backend: Backend,
    a: Mat,
    b: Mat,
    c: Mat,
    *,
    trans_a: bool = False,
    trans_b: bool = False,
    batch: int = 1,
    alpha: float = 1.0,
    beta: float = 0.0,
) -> None:
    """``C_i = alpha * op(A_i) @ op(B_i) + beta * C_i`` in float64 on the tensor cores."""
    for name, mat in (("A", a), ("B", b), ("C", c)):
        if mat.array.dtype != np.float64:
            raise BadParamError(f"dgemm_tc: {name} must be float64, got {mat.array.dtype}")
    m, k = (a.cols, a.rows) if trans_a else (a.rows, a.cols)
    kb, n = (b.cols, b.rows) if trans_b else (b.rows, b.cols)
    if k != kb or (c.rows, c.cols) != (m, n):
        raise BadParamError(f"dgemm_tc: op(A) is {m}x{k}, op(B) {kb}x{n}, C {c.rows}x{c.cols}")
    if not 1 <= batch < 2**31:
        raise BadParamError(f"dgemm_tc: batch must be 1 to 2^31 - 1, got {batch}")
    for name, mat in (("A", a), ("B", b), ("C", c)):
        _check_view(name, mat, batch)
    if batch > 1 and c.stride == 0:
        raise BadParamError("dgemm_tc: C needs a batch stride when batch > 1")
    if max(m, n, k) >= 2**31 or -(-m // TILE) > _MAX_GRID_Z:
        raise NotSupportedError(f"dgemm_tc: {m}x{n}x{k} exceeds the kernel's int sizes or "
                                f"its grid ({_MAX_GRID_Z} row tiles of {TILE})")  # fmt: skip
    reason = unsupported_reason(capabilities(backend))
    if reason:
        raise NotSupportedError(f"dgemm_tc: {reason}")

    s = np.zeros((), SHAPE_DTYPE)
    s["a_row"], s["a_col"] = (1, a.ld) if trans_a else (a.ld, 1)
    s["b_row"], s["b_col"] = (1, b.ld) if trans_b else (b.ld, 1)
    s["ldc"] = c.ld
    s["a_batch"], s["b_batch"], s["c_batch"] = a.stride, b.stride, c.stride
    s["a_off"], s["b_off"], s["c_off"] = a.offset, b.offset, c.offset
    s["alpha"], s["beta"] = float(alpha), float(beta)  # exact: Python floats are doubles
    s["m"], s["n"], s["k"] = m, n, k
    kernel = backend.kernel(DGEMM_TC, "dgemm_tc")
    grid_xy = (-(-n // TILE), -(-m // TILE))
    for z0 in range(0, batch, _MAX_GRID_Z):
        s["z0"] = z0
        kernel((*grid_xy, min(_MAX_GRID_Z, batch - z0)), THREADS,
               (a.array, b.array, c.array, s[()]))  # fmt: skip
