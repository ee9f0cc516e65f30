"""The floating-point types the primitives take: float32, float16, bfloat16 and float64.

float32, float16 and bfloat16 compute in float32 (``FP32_COMPUTE_TYPES``: loads widen to
float, one rounding at the store); float64 computes in double (accumulation included).
Tensor-core solvers and Winograd take only some of these; each solver says which.

NumPy has no bfloat16; cudnnlite uses ``ml_dtypes.bfloat16`` (the type JAX uses).
``cudnnlite.bfloat16`` re-exports it. ml_dtypes is a dependency; where it is missing
anyway (a bare GPU machine running the device check), bfloat16 is unavailable and
everything else works.

ml_dtypes is imported on first need, not with cudnnlite: its import registers a few
thousand NumPy loops and casts (about 1 s on this project's 2-core test machine, 6 times
NumPy's own import) for a type most calls never see. A bfloat16 array can only exist once
ml_dtypes (or a library that imports it) has been imported, so :func:`lookup` of such an
array's dtype, ``BFLOAT16.numpy``, ``cudnnlite.bfloat16`` and ``dtypes.bfloat16`` import it
then; the names, C types and keys of bfloat16 (``BFLOAT16.short`` and ``.ctype``, in
``FLOAT_TYPES``) never need it.
"""

from __future__ import annotations

import importlib.util
from typing import Any

import numpy as np

# Whether ml_dtypes can be imported, found without importing it.
HAVE_BFLOAT16 = importlib.util.find_spec("ml_dtypes") is not None


class DType:
    """A storage type with its names in each world: ``numpy`` (its NumPy dtype), ``short``
    (in problem keys and kernel names: fp32, fp16, bf16, fp64), ``ctype`` (the CUDA C type
    in name expressions) and ``acc_ctype`` (the CUDA C type arithmetic runs in:
    ``cl::acc_t<T>``). bfloat16's NumPy dtype is made on first use (the module's
    docstring)."""

    __slots__ = ("_numpy", "short", "ctype", "acc_ctype")

    def __init__(self, numpy: Any, short: str, ctype: str, acc_ctype: str = "float") -> None:
        self._numpy = numpy  # a dtype, or a function returning it (called once)
        self.short, self.ctype, self.acc_ctype = short, ctype, acc_ctype

    @property
    def numpy(self) -> np.dtype:
        dt = self._numpy
        if not isinstance(dt, np.dtype):
            dt = self._numpy = dt()
            _BY_NUMPY[dt] = self
        return dt

    @property
    def itemsize(self) -> int:
        return self.numpy.itemsize

    def __repr__(self) -> str:
        return f"DType({self.short})"


def _bfloat16() -> np.dtype:
    import ml_dtypes

    return np.dtype(ml_dtypes.bfloat16)


FLOAT32 = DType(np.dtype(np.float32), "fp32", "float")
FLOAT16 = DType(np.dtype(np.float16), "fp16", "__half")
BFLOAT16 = DType(_bfloat16, "bf16", "__nv_bfloat16") if HAVE_BFLOAT16 else None
FLOAT64 = DType(np.dtype(np.float64), "fp64", "double", "double")
# The storage types whose arithmetic is float32 (what every solver ran before float64).
FP32_COMPUTE_TYPES = tuple(d for d in (FLOAT32, FLOAT16, BFLOAT16) if d is not None)
# Every storage type a primitive may take.
FLOAT_TYPES = (*FP32_COMPUTE_TYPES, FLOAT64)
# By NumPy dtype; bfloat16 joins when its dtype is made (lookup() of a dtype missing here).
_BY_NUMPY = {d._numpy: d for d in FLOAT_TYPES if isinstance(d._numpy, np.dtype)}
TENSOR_DTYPES = _BY_NUMPY  # (the same dict: `dtype in TENSOR_DTYPES` for hot paths)


def __getattr__(name: str) -> Any:
    # dtypes.bfloat16: ml_dtypes.bfloat16's dtype, imported now (None without ml_dtypes)
    if name == "bfloat16":
        return BFLOAT16.numpy if BFLOAT16 is not None else None
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def lookup(dtype: Any) -> DType | None:
    """The DType for a NumPy/CuPy dtype (or anything ``numpy.dtype`` takes, and the name
    ``"bfloat16"``), or None if it is not one we compute in."""
    if dtype is None:  # (numpy.dtype(None) is float64: no dtype is not a dtype here)
        return None
    try:
        dt = np.dtype(dtype)
    except TypeError:
        # the name "bfloat16" before ml_dtypes is imported (NumPy knows it only after)
        if BFLOAT16 is not None and isinstance(dtype, str) and dtype == "bfloat16":
            BFLOAT16.numpy  # noqa: B018 (imports ml_dtypes, registers the dtype)
            return BFLOAT16
        return None
    found = _BY_NUMPY.get(dt)
    if found is None and BFLOAT16 is not None and dt.name == "bfloat16" and (
        dt == BFLOAT16.numpy
    ):
        return BFLOAT16  # (its first sight: the array's ml_dtypes is imported already)
    return found


def by_short(short: str) -> DType:
    """The DType named ``short`` in keys (fp32, fp16, bf16, fp64)."""
    for d in FLOAT_TYPES:
        if d.short == short:
            return d
    raise KeyError(short)


def names(types: tuple[DType, ...] = FLOAT_TYPES) -> str:
    """``float32, float16, bfloat16 or float64``: the types as an error message lists them."""
    parts = [d.numpy.name for d in types]
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " or " + parts[-1]


def finfo(dtype: Any) -> Any:
    """``numpy.finfo`` that also knows bfloat16."""
    if BFLOAT16 is not None and np.dtype(dtype).name == "bfloat16":
        import ml_dtypes

        return ml_dtypes.finfo(dtype)
    return np.finfo(dtype)
