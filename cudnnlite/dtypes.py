"""The floating-point types the primitives take: float32, float16, bfloat16 and float64.

float32, float16 and bfloat16 compute in float32 (``FP32_COMPUTE_TYPES``: loads widen to
float, one rounding at the store); float64 computes in double (accumulation included).
Tensor-core solvers and Winograd take only some of these; each solver says which.

NumPy has no bfloat16; cudnnlite uses ``ml_dtypes.bfloat16`` (the type JAX uses).
``cudnnlite.bfloat16`` re-exports it. ml_dtypes is a dependency; where it is missing
anyway (a bare GPU machine running the device check), bfloat16 is unavailable and
everything else works.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

try:
    import ml_dtypes
except ImportError:  # pragma: no cover - exercised on machines without it
    ml_dtypes = None

bfloat16 = np.dtype(ml_dtypes.bfloat16) if ml_dtypes is not None else None


@dataclass(frozen=True)
class DType:
    """A storage type with its names in each world."""

    numpy: np.dtype
    short: str  # in problem keys and kernel names: fp32, fp16, bf16, fp64
    ctype: str  # the CUDA C type in name expressions
    acc_ctype: str = "float"  # the CUDA C type arithmetic runs in (cl::acc_t<T>)

    @property
    def itemsize(self) -> int:
        return self.numpy.itemsize


FLOAT32 = DType(np.dtype(np.float32), "fp32", "float")
FLOAT16 = DType(np.dtype(np.float16), "fp16", "__half")
BFLOAT16 = DType(bfloat16, "bf16", "__nv_bfloat16") if bfloat16 is not None else None
FLOAT64 = DType(np.dtype(np.float64), "fp64", "double", "double")
# The storage types whose arithmetic is float32 (what every solver ran before float64).
FP32_COMPUTE_TYPES = tuple(d for d in (FLOAT32, FLOAT16, BFLOAT16) if d is not None)
# Every storage type a primitive may take.
FLOAT_TYPES = (*FP32_COMPUTE_TYPES, FLOAT64)
_BY_NUMPY = {d.numpy: d for d in FLOAT_TYPES}


def lookup(dtype: Any) -> DType | None:
    """The DType for a NumPy/CuPy dtype, or None if it is not one we compute in."""
    try:
        return _BY_NUMPY.get(np.dtype(dtype))
    except TypeError:
        return None


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
    if ml_dtypes is not None:
        return ml_dtypes.finfo(dtype)
    return np.finfo(dtype)
