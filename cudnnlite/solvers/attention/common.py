"""What every attention solver shares: the kernel parameter struct (mirror of
``cuda_src/attention/attention_common.cuh:SdpaParamsT``: float scalars for the float32-math
kernels, double ones for float64), the tensors of a call and the per-call scalars (scale,
dropout), and the mask-kind template argument.

float64 problems compute in double: lse, the additive mask's gradient and the solvers'
workspaces are float64 (``acc_numpy``); the softmax and dropout scales reach the kernels
unrounded (the dropout scale is ``1 / (1 - p)`` in double, not its float32 rounding)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from ... import dtypes
from ...errors import NotSupportedError
from ...problems.attention import AttentionProblem
from ...reference.dropout import drop_threshold, dropout_scale

SOURCE_COMMON = "attention/attention_common.cuh"



def _params_dtype(real: str) -> np.dtype:
    """SdpaParamsT<A> with A = float ("<f4") or double ("<f8")."""
    return np.dtype(
        [(f, "<i4") for f in ("b", "hq", "hkv", "sq", "skv", "d", "dv", "group")]
        + [(f"{t}_s{a}", "<i8") for t in "qkvo" for a in ("b", "h", "s")]
        + [(f"m_s{a}", "<i8") for a in ("b", "h", "i", "j")]
        + [("scale", real), ("scale_log2", real), ("left", "<i4"), ("right", "<i4")]
        + [("align_br", "<i4"), ("has_lengths", "<i4")]
        + [("seed", "<u8"), ("offset", "<u8"), ("drop_threshold", "<u4"), ("drop_scale", real)]
        + [("counter", "<u8")],  # const double*: a PhiloxState's counter, or 0
        align=True,
    )


PARAMS_DTYPE = _params_dtype("<f4")  # SdpaParams: fp32, fp16, bf16
PARAMS_DTYPE64 = _params_dtype("<f8")  # SdpaParamsT<double>: fp64

MASK_KIND = {"none": 0, "bool": 1, "additive": 2}  # sdpa::kMask*


def dtype_of(problem: AttentionProblem) -> dtypes.DType:
    return next(d for d in dtypes.FLOAT_TYPES if d.short == problem.dtype)


def acc_numpy(problem: AttentionProblem) -> np.dtype:
    """The type the kernels compute in, and of lse, dmask and the workspaces: float32, or
    float64 for fp64 problems."""
    return np.dtype(np.float64 if problem.dtype == "fp64" else np.float32)


def acc_bytes(problem: AttentionProblem) -> int:
    return acc_numpy(problem).itemsize


def mask_ctype(problem: AttentionProblem) -> str:
    """The C type the kernels read the explicit mask as (a bool mask is bytes)."""
    return "unsigned char" if problem.mask == "bool" else dtype_of(problem).ctype


@dataclass(frozen=True)
class Scalars:
    """The per-call values that are not part of the problem."""

    scale: float
    dropout_p: float = 0.0
    seed: int = 0
    offset: int = 0
    counter: Any = None  # a PhiloxState's counter array (its value adds to offset), or None


@dataclass
class AttentionTensors:
    """The arrays of one forward call, on the backend.

    q, k, v, o: 4-D in the problem's layout, the head dim contiguous (strides are read
    from the arrays); lse: float32 (float64 for fp64: ``acc_numpy``) (b, hq, sq) contiguous
    (written); mask: None or an
    array broadcastable to (b, hq, sq, skv) (bool as uint8 or the q dtype) already
    broadcast to 4-D (strides 0 where broadcast); lengths_q/lengths_kv: None or int32
    (b,)."""

    q: Any
    k: Any
    v: Any
    o: Any
    lse: Any
    mask: Any = None
    lengths_q: Any = None
    lengths_kv: Any = None

    def pointers(self) -> tuple[Any, ...]:
        """q, k, v, o, lse, mask-or-q, lengths_q-or-lse, lengths_kv-or-lse."""
        return (self.q, self.k, self.v, self.o, self.lse, *_optional(self))


@dataclass
class AttentionBwdTensors:
    """The arrays of one backward call: the forward's, dout (like o), and the written
    gradients dq, dk, dv (like q, k, v) and dmask (None, or float32 (float64 for fp64)
    (b, hq, sq, skv) contiguous: the additive mask's gradient before any broadcast is
    summed)."""

    q: Any
    k: Any
    v: Any
    o: Any
    dout: Any
    lse: Any
    dq: Any
    dk: Any
    dv: Any
    dmask: Any = None
    mask: Any = None
    lengths_q: Any = None
    lengths_kv: Any = None

    def pointers(self) -> tuple[Any, ...]:
        """q, k, v, o, dout, lse, dq, dk, dv, dmask-or-lse, mask-or-q, lengths..."""
        dmask = self.dmask if self.dmask is not None else self.lse
        return (self.q, self.k, self.v, self.o, self.dout, self.lse, self.dq, self.dk, self.dv,
                dmask, *_optional(self))  # fmt: skip


def _optional(t: Any) -> tuple[Any, Any, Any]:
    mask = t.mask if t.mask is not None else t.q
    lq = t.lengths_q if t.lengths_q is not None else t.lse
    lkv = t.lengths_kv if t.lengths_kv is not None else t.lse
    return mask, lq, lkv


def data_ptr(a: Any) -> int:
    """The address of a NumPy or CuPy array's first element."""
    iface = getattr(a, "__cuda_array_interface__", None) or a.__array_interface__
    return int(iface["data"][0])


def same_strides(a: Any, b: Any) -> bool:
    """Whether ``a`` and ``b`` (of one shape) address their elements alike: equal strides
    on every dim of more than one element (a dim of one is never stepped along, and NumPy
    counts an array contiguous whatever its stride there: a head sliced out of a tensor)."""
    return a.shape == b.shape and all(
        x == y for x, y, n in zip(a.strides, b.strides, a.shape, strict=True) if n > 1
    )


def misaligned_rows(a: Any) -> bool:
    """Whether a 4-D operand's row strides (dims of more than one element) are not
    multiples of 8 elements, which the tensor-core kernels' 16-byte copies of 16-bit
    rows need."""
    return any((s // a.itemsize) % 8 for s, n in zip(a.strides[:3], a.shape[:3], strict=True)
               if n > 1)  # fmt: skip


def _strides(a: Any) -> tuple[int, int, int, int]:
    """Element strides of a 4-D array."""
    return tuple(s // a.itemsize for s in a.strides)  # type: ignore[return-value]


def params(problem: AttentionProblem, tensors: Any, scalars: Scalars) -> np.void:
    """The SdpaParamsT of a call (strides from the arrays, so views work): float scalars,
    or double ones for fp64."""
    fp64 = problem.dtype == "fp64"
    p = np.zeros((), PARAMS_DTYPE64 if fp64 else PARAMS_DTYPE)
    for f in ("b", "hq", "hkv", "sq", "skv", "d", "dv", "group"):
        p[f] = getattr(problem, f)
    bhsd = problem.layout == "BHSD"
    for name in "qkvo":
        sb, s1, s2, sd = _strides(getattr(tensors, name))
        assert sd == 1, f"{name}: the head dim must be contiguous"
        p[f"{name}_sb"], p[f"{name}_sh"], p[f"{name}_ss"] = (sb, s1, s2) if bhsd else (sb, s2, s1)
    for grad, like in (("dq", "q"), ("dk", "k"), ("dv", "v"), ("dout", "o")):
        g = getattr(tensors, grad, None)
        if g is not None and not same_strides(g, getattr(tensors, like)):
            raise NotSupportedError(
                f"{grad} must have the strides of {like} (the kernels share them)"
            )
    if tensors.mask is not None:
        for axis, st in zip("bhij", _strides(tensors.mask), strict=True):
            p[f"m_s{axis}"] = st
    p["scale"] = scalars.scale
    p["scale_log2"] = scalars.scale * math.log2(math.e)
    p["left"], p["right"] = problem.bounds
    p["align_br"] = int(problem.align == "bottom_right")
    p["has_lengths"] = int(tensors.lengths_q is not None)
    p["seed"], p["offset"] = scalars.seed, scalars.offset
    # the kernels read the counter through this pointer at each draw (the PhiloxState's
    # array: a template replay reads it in place, as the call itself would)
    p["counter"] = 0 if scalars.counter is None else data_ptr(scalars.counter)
    p["drop_scale"] = 1.0  # drop_threshold 0 keeps everything, unscaled
    if problem.dropout and scalars.dropout_p > 0:
        p["drop_threshold"] = min(drop_threshold(scalars.dropout_p), 2**32 - 1)
        p["drop_scale"] = drop_scale(scalars.dropout_p, fp64)
    return p[()]


def drop_scale(p: float, fp64: bool) -> float:
    """The factor of kept probabilities: float32(1 / (1 - p)) (``reference/dropout.py``),
    or 1 / (1 - p) in double for float64."""
    return 1.0 / (1.0 - p) if fp64 else dropout_scale(p)


def head_dim_align(problem: AttentionProblem) -> int:
    """Elements per vector copy that the head dims allow: 8 (16 bytes of 16-bit types),
    4, 2 or 1 (fp32: 4 = 16 bytes)."""
    g = math.gcd(problem.d, problem.dv)
    for a in (8, 4, 2):
        if g % a == 0:
            return a
    return 1
