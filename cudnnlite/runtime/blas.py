"""A strided-batched GEMM on either backend: cuBLAS through CuPy on ``cuda``, NumPy's
matmul on the emulator. Used by the cuBLAS convolution solvers.

Semantics (row-major, like the arrays): for i < batch,
``C_i = alpha * op(A_i) @ op(B_i) + beta * C_i``, where each operand is a matrix view
(:class:`Mat`) of a contiguous array read as flat: ``rows x cols`` at element ``offset``,
row stride ``ld``, batch stride ``stride`` (0: the same matrix for every i). ``op`` is the
transpose when ``trans_a`` / ``trans_b``. A and B share a dtype (float32, float16,
bfloat16 or float64); C is that dtype or float32 (an fp32 result of fp16/bf16 inputs). For
float64 inputs C must be float64: a float64 operand mixed with any other dtype is an error.

Precision: products are accumulated in fp32 and ``alpha``/``beta`` applied in fp32, then
the result is rounded once to C's dtype. float64 inputs are the exception: products are
accumulated, and ``alpha``/``beta`` applied, in float64 (``tf32`` has no effect on them:
there is no TF32 path for doubles).

- cuda: ``cublasGemmStridedBatchedEx`` called directly (``cupy_backends.cuda.libs.cublas``
  on CuPy's per-device cuBLAS handle, which that wrapper binds to CuPy's current stream at
  each call) with an explicit compute type per call: ``CUBLAS_COMPUTE_32F``, or
  ``CUBLAS_COMPUTE_32F_FAST_TF32`` when ``tf32``. Why not ``cupy.matmul``: CuPy takes the
  compute type from a process-wide table (``cupy._core._routines_linalg.get_compute_type``,
  set by ``set_compute_type`` or seeded at first use from the ``CUPY_TF32`` environment
  variable). In the CuPy source read for this module (``tensordot_core_v11``) float16 and
  bfloat16 matmuls get ``CUBLAS_COMPUTE_32F`` (fp32 accumulation, the type we want) unless
  the table says ``COMPUTE_TYPE_PEDANTIC``, and float32 gets ``..._FAST_TF32`` only when
  the table says TF32 (``CUPY_TF32=1`` before the first matmul, or ``set_compute_type``).
  A per-call TF32 choice (``problem.math``) cannot go through that global without racing
  other threads and other CuPy users, and ``matmul`` has no beta, no fp32 output of fp16
  inputs and no interleaved (strided) output, all of which the solvers use.
  Reproducibility: cuBLAS documents bitwise-identical results from run to run on the same
  architecture and SM count (one stream per handle; CuPy keeps a handle per device).
  Unmeasured here (no GPU): the device check should compare this path with the emulator.
- cuda, float64: the same call with ``CUDA_R_64F`` operands and ``CUBLAS_COMPUTE_64F``
  (a DGEMM; double scalars on the host).
- cpu (emulator), float64: ``numpy.matmul`` in float64 (a DGEMM), alpha/beta in float64.
- cpu (emulator): A and B widened to float32 (exact), multiplied by ``numpy.matmul`` in
  float32 (an sgemm: fp32 accumulation), alpha/beta in float32, rounded to C's dtype
  (round to nearest even, as ``__float2half_rn`` / ``__float2bfloat16_rn``). With ``tf32``
  the inputs are first rounded to TF32 as the tensor-core emulator does
  (``__float_to_tf32``: 10-bit mantissa, ties away from zero).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import BadParamError, NotSupportedError
from .backend import Backend
from .graph import note_foreign_work, note_host_work

_INT_MAX = 2**31 - 1

# library_types.h / cublas_api.h values, used when CuPy does not export a name.
_CUDA_R_32F, _CUDA_R_64F, _CUDA_R_16F, _CUDA_R_16BF = 0, 1, 2, 14
_COMPUTE_32F, _COMPUTE_64F, _COMPUTE_32F_FAST_TF32 = 68, 70, 77
_OP_N, _OP_T = 0, 1
_GEMM_DEFAULT = -1


@dataclass(frozen=True)
class Mat:
    """A (batch of) row-major matrix view(s) of ``array`` read as flat."""

    array: Any
    rows: int
    cols: int
    ld: int
    offset: int = 0
    stride: int = 0

    def extent(self, batch: int) -> int:
        """One past the last element any matrix of the batch touches."""
        return self.offset + (batch - 1) * self.stride + (self.rows - 1) * self.ld + self.cols


def _check(name: str, m: Mat, batch: int) -> None:
    if min(m.rows, m.cols) < 1 or m.ld < m.cols or m.offset < 0 or m.stride < 0:
        raise BadParamError(f"gemm {name}: bad view {m.rows}x{m.cols} ld {m.ld} "
                            f"offset {m.offset} stride {m.stride}")  # fmt: skip
    size = int(m.array.size)
    if m.extent(batch) > size:
        raise BadParamError(f"gemm {name}: the view reaches element {m.extent(batch)} of an "
                            f"array of {size}")  # fmt: skip
    if max(m.rows, m.cols, m.ld) > _INT_MAX:
        raise NotSupportedError(f"gemm {name}: dimensions above 2^31 - 1 ({m})")


def gemm(
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
    tf32: bool = False,
) -> None:
    """``C_i = alpha * op(A_i) @ op(B_i) + beta * C_i`` for i < batch (see the module)."""
    prepare_gemm(backend, a, b, c, trans_a=trans_a, trans_b=trans_b, batch=batch,
                 alpha=alpha, beta=beta, tf32=tf32)()  # fmt: skip


def prepare_gemm(
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
    tf32: bool = False,
) -> Callable[[], None]:
    """:func:`gemm`'s checks and argument preparation, once: the returned function runs
    that GEMM on the views' contents at each call (the same arrays and pointers). A loop
    that multiplies the same buffers again and again (an RNN's time steps, which rewrite
    h between them) pays the checks, the views and the cuBLAS argument list once."""
    m, k = (a.cols, a.rows) if trans_a else (a.rows, a.cols)
    kb, n = (b.cols, b.rows) if trans_b else (b.rows, b.cols)
    if k != kb or (c.rows, c.cols) != (m, n):
        raise BadParamError(f"gemm: op(A) is {m}x{k}, op(B) {kb}x{n}, C {c.rows}x{c.cols}")
    if not 1 <= batch <= _INT_MAX:
        raise BadParamError(f"gemm: batch must be 1 to 2^31 - 1, got {batch}")
    for name, mat in (("A", a), ("B", b), ("C", c)):
        _check(name, mat, batch)
    if batch > 1 and c.stride == 0:
        raise BadParamError("gemm: C needs a batch stride when batch > 1")
    if a.array.dtype != b.array.dtype:
        raise BadParamError(f"gemm: A is {a.array.dtype}, B is {b.array.dtype}")
    if a.array.dtype == np.float64 or c.array.dtype == np.float64:
        if (a.array.dtype, c.array.dtype) != (np.dtype(np.float64),) * 2:
            raise BadParamError(f"gemm: A and B are {a.array.dtype} and C {c.array.dtype}: "
                                "float64 cannot be mixed with another dtype")  # fmt: skip
    elif c.array.dtype not in (a.array.dtype, np.dtype(np.float32)):
        raise BadParamError(f"gemm: C must be {a.array.dtype} or float32, got {c.array.dtype}")
    if backend.name == "cuda":
        run = _cublas_call(a, b, c, trans_a, trans_b, batch, m, n, k, alpha, beta, tf32)

        def launch() -> None:
            note_foreign_work("blas.gemm (cuBLAS)")
            run()

    else:
        run = _numpy_call(a, b, c, trans_a, trans_b, batch, alpha, beta, tf32)

        def launch() -> None:
            # NumPy work in Python: an emulator graph cannot replay it.
            note_host_work("blas.gemm (a NumPy GEMM on the emulator)")
            run()

    return launch


# ------------------------------------------------------------------ emulator


def round_tf32(v: np.ndarray) -> np.ndarray:
    """float32 values rounded to TF32 (10-bit mantissa, ties away from zero; Inf/NaN kept)."""
    u = np.ascontiguousarray(v, dtype=np.float32).view(np.uint32)
    finite = (u & np.uint32(0x7F800000)) != np.uint32(0x7F800000)
    rounded = (u + np.uint32(0x1000)) & np.uint32(0xFFFFE000)
    return np.where(finite, rounded, u).view(np.float32)


def _view(m: Mat, batch: int) -> np.ndarray:
    if not isinstance(m.array, np.ndarray):
        raise NotSupportedError(
            f"gemm: the emulator's GEMM takes NumPy arrays, got {type(m.array).__name__}"
        )
    flat = m.array.reshape(-1)  # contiguous: a view
    item = flat.itemsize
    count = batch if m.stride else 1  # a shared matrix broadcasts in matmul
    return np.lib.stride_tricks.as_strided(
        flat[m.offset :], shape=(count, m.rows, m.cols),
        strides=(m.stride * item, m.ld * item, item),
    )  # fmt: skip


def _numpy_call(a: Mat, b: Mat, c: Mat, trans_a: bool, trans_b: bool, batch: int,
                alpha: float, beta: float, tf32: bool) -> Callable[[], None]:  # fmt: skip
    """The emulator's GEMM on these views, as a function of their contents."""
    # float64: a DGEMM with float64 scalars; every other dtype: an SGEMM (see the module).
    work = np.dtype(np.float64) if a.array.dtype == np.float64 else np.dtype(np.float32)
    a_view, b_view, cv = _view(a, batch), _view(b, batch), _view(c, batch)
    rounded = tf32 and work == np.float32
    scale, blend = work.type(alpha), work.type(beta)

    def run() -> None:
        av, bv = a_view.astype(work), b_view.astype(work)  # (copies of the inputs as they are now)
        if rounded:
            av, bv = round_tf32(av), round_tf32(bv)
        if trans_a:
            av = av.swapaxes(1, 2)
        if trans_b:
            bv = bv.swapaxes(1, 2)
        # IEEE arithmetic as on the GPU, where overflow (to inf) and invalid operations (inf
        # * 0, inf - inf: NaN) raise nothing: no NumPy RuntimeWarning reaches the user
        with np.errstate(all="ignore"):
            out = np.matmul(av, bv)  # sgemm (fp32 accumulation) or dgemm (fp64)
            if out.shape[0] != batch:  # A and B both shared: the same product for every C
                out = np.repeat(out, batch, axis=0)
            if alpha != 1.0:
                out *= scale
            if beta != 0.0:
                out += blend * cv.astype(work)
            cv[...] = out.astype(c.array.dtype)

    return run


# ------------------------------------------------------------------ CUDA


def _cuda_type(dtype: np.dtype) -> int:
    from .cuda import import_cupy

    runtime = import_cupy().cuda.runtime
    if dtype == np.float32:
        return int(getattr(runtime, "CUDA_R_32F", _CUDA_R_32F))
    if dtype == np.float64:
        return int(getattr(runtime, "CUDA_R_64F", _CUDA_R_64F))
    if dtype == np.float16:
        return int(getattr(runtime, "CUDA_R_16F", _CUDA_R_16F))
    if dtype.name == "bfloat16":
        return int(getattr(runtime, "CUDA_R_16BF", _CUDA_R_16BF))
    raise NotSupportedError(f"gemm: no cuBLAS type for {dtype}")


def _cublas() -> Any:
    try:
        from cupy_backends.cuda.libs import cublas
    except ImportError:  # pragma: no cover - older layouts
        from cupy.cuda import cublas
    return cublas


def _pointer(m: Mat) -> int:
    arr = m.array
    if not hasattr(arr, "data") or not hasattr(arr.data, "ptr"):
        raise NotSupportedError(
            f"gemm: cuBLAS needs device (CuPy) arrays, got {type(arr).__name__}"
        )
    return int(arr.data.ptr) + m.offset * arr.dtype.itemsize


def _cublas_call(a: Mat, b: Mat, c: Mat, trans_a: bool, trans_b: bool, batch: int, m: int,
                 n: int, k: int, alpha: float, beta: float,
                 tf32: bool) -> Callable[[], None]:  # fmt: skip
    """The cuBLAS call on these views, its argument list made once; each call takes CuPy's
    handle of the current device (bound to the current stream) as it is then."""
    from .cuda import import_cupy

    cupy = import_cupy()
    cublas = _cublas()
    double = a.array.dtype == np.float64
    if double:  # a DGEMM: fp64 accumulation and double scalars; TF32 does not apply
        compute = getattr(cublas, "CUBLAS_COMPUTE_64F", _COMPUTE_64F)
    elif tf32:
        compute = getattr(cublas, "CUBLAS_COMPUTE_32F_FAST_TF32", _COMPUTE_32F_FAST_TF32)
    else:
        compute = getattr(cublas, "CUBLAS_COMPUTE_32F", _COMPUTE_32F)
    op_n, op_t = getattr(cublas, "CUBLAS_OP_N", _OP_N), getattr(cublas, "CUBLAS_OP_T", _OP_T)
    # Column-major cuBLAS sees each row-major matrix transposed: C^T = op(B)^T op(A)^T,
    # so B goes first, and a row-major "no transpose" is cuBLAS's OP_N on the same ld.
    # Host scalars in the compute type: float for COMPUTE_32F*, double for COMPUTE_64F.
    scalars = np.array([alpha, beta], dtype=np.float64 if double else np.float32)
    host = getattr(cublas, "CUBLAS_POINTER_MODE_HOST", 0)
    # (the scalars stay alive with the closure, run's default argument: their host
    # addresses are in the list)
    args = (
        op_t if trans_b else op_n, op_t if trans_a else op_n, n, m, k,
        scalars.ctypes.data,
        _pointer(b), _cuda_type(b.array.dtype), b.ld, b.stride,
        _pointer(a), _cuda_type(a.array.dtype), a.ld, a.stride,
        scalars.ctypes.data + scalars.itemsize,
        _pointer(c), _cuda_type(c.array.dtype), c.ld, c.stride,
        batch, compute, getattr(cublas, "CUBLAS_GEMM_DEFAULT", _GEMM_DEFAULT),
    )  # fmt: skip
    get_handle, call = cupy.cuda.device.get_cublas_handle, cublas.gemmStridedBatchedEx

    def run(_scalars: np.ndarray = scalars) -> None:
        handle = get_handle()
        mode = cublas.getPointerMode(handle)
        if mode != host:  # CuPy's own wrappers restore it; be safe anyway
            cublas.setPointerMode(handle, host)
        try:
            call(handle, *args)
        finally:
            if mode != host:
                cublas.setPointerMode(handle, mode)

    return run
