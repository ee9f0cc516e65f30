"""What every convolution solver shares: the kernel-side structs (mirrors of
cuda_src/conv/conv_common.cuh), the tensors of a call, and the epilogue."""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from typing import Any

import numpy as np

from ... import dtypes
from ...ops.activation import ACT_PARAMS_DTYPE, ACT_PARAMS_DTYPE64, negative_zeros
from ...problems.conv import ConvProblem

_INT_FIELDS = (
    "n c h w k r s p q pad_h pad_w stride_h stride_w dil_h dil_w groups c_per_group k_per_group"
    " d t o pad_d stride_d dil_d"
).split()
SHAPE_DTYPE = np.dtype([(f, "<i4") for f in _INT_FIELDS], align=True)

def _epilogue_dtype(act: np.dtype) -> np.dtype:
    real = act["coef"].str
    return np.dtype(
        [
            ("alpha", real),
            ("alpha2", real),
            ("act", act),
            ("act_mode", "<i4"),
            ("has_bias", "<i4"),
            ("has_z", "<i4"),
            ("reserved", "<i4"),
        ],
        align=True,
    )


# ConvEpilogueT<A> (conv_common.cuh) in the accumulation type: float for the storage
# types computed in float, double for float64 (epilogue_dtype).
EPILOGUE_DTYPE = _epilogue_dtype(ACT_PARAMS_DTYPE)
EPILOGUE_DTYPE64 = _epilogue_dtype(ACT_PARAMS_DTYPE64)


def epilogue_dtype(dt: dtypes.DType) -> np.dtype:
    """The ConvEpilogueT layout kernels on storage type ``dt`` take."""
    return EPILOGUE_DTYPE64 if dt.acc_ctype == "double" else EPILOGUE_DTYPE

IDENTITY_MODE = 10  # act::kIdentity


def shape_struct(problem: ConvProblem) -> np.void:
    """The ConvShape of a problem: 1-D as H = R = 1, 1-D and 2-D with depth 1 (d = t = o
    = 1, pad_d = 0, stride_d = dil_d = 1)."""
    depth = (1, 1, 1, 0, 1, 1)
    if problem.ndim == 1:
        (h, w), (r, s) = (1, problem.spatial[0]), (1, problem.filter[0])
        (p, q), (ph, pw) = (1, problem.out_spatial[0]), (0, problem.pads[0][0])
        (uh, uw), (dh, dw) = (1, problem.strides[0]), (1, problem.dilations[0])
    elif problem.ndim == 2:
        (h, w), (r, s), (p, q) = problem.spatial, problem.filter, problem.out_spatial
        ph, pw = problem.pads[0][0], problem.pads[1][0]
        (uh, uw), (dh, dw) = problem.strides, problem.dilations
    else:
        (dd, h, w), (t, r, s), (o, p, q) = problem.spatial, problem.filter, problem.out_spatial
        pd, ph, pw = (before for before, _ in problem.pads)
        (ud, uh, uw), (ddil, dh, dw) = problem.strides, problem.dilations
        depth = (dd, t, o, pd, ud, ddil)
    values = (
        problem.n, problem.c, h, w, problem.k, r, s, p, q, ph, pw, uh, uw, dh, dw,
        problem.groups, problem.c_per_group, problem.k_per_group, *depth,
    )  # fmt: skip
    return np.array(values, dtype=np.int32).view(SHAPE_DTYPE)[0]


def flat_2d(problem: ConvProblem) -> ConvProblem:
    """A pointwise 3-D problem as the 2-D one it equals (D*H x W pixels): GEMM solvers of
    pointwise convolutions see only pixels, so their 2-D kernels run it unchanged. Other
    problems are returned as they are."""
    if problem.ndim != 3 or not problem.pointwise:
        return problem
    d, h, w = problem.spatial
    return dataclasses.replace(
        problem, spatial=(d * h, w), filter=(1, 1), pads=((0, 0),) * 2, strides=(1, 1),
        dilations=(1, 1), layout="NHWC" if problem.channels_last else "NCHW",
    )  # fmt: skip


@dataclass(frozen=True)
class Epilogue:
    """y = act(alpha * conv + alpha2 * z + bias): the scalars of a call."""

    alpha: float = 1.0
    alpha2: float = 0.0
    act_mode: int = IDENTITY_MODE
    coef: float = 0.0
    threshold: float = 0.0
    has_bias: bool = False
    has_z: bool = False

    def struct(self, dt: dtypes.DType | None = None) -> np.void:
        """The EpilogueFor<T> kernels on storage type ``dt`` take, by value: the float
        ConvEpilogue (``dt`` None or computed in float), or float64's, whose scalars are
        packed from the Python floats (alpha, alpha2 and the coefficients exact)."""
        layout = epilogue_dtype(dt) if dt is not None else EPILOGUE_DTYPE
        scalars = (self.alpha, self.alpha2, self.coef, self.threshold)
        return _epilogue_struct(self, layout, negative_zeros(scalars) if 0.0 in scalars else ())


@functools.lru_cache(maxsize=256)
def _epilogue_struct(epi: Epilogue, layout: np.dtype, negative_zeros: tuple) -> np.void:
    """Cached per call shape (off the per-call path), safe because nobody mutates it: a
    launch copies it. ``negative_zeros`` (which scalars are -0.0) is only part of the key:
    an Epilogue with alpha -0.0 equals one with 0.0."""
    e = np.zeros((), layout)
    e["alpha"], e["alpha2"] = epi.alpha, epi.alpha2
    e["act"]["coef"], e["act"]["threshold"] = epi.coef, epi.threshold
    e["act"]["alpha"] = 1.0
    e["act_mode"] = epi.act_mode
    e["has_bias"], e["has_z"] = int(epi.has_bias), int(epi.has_z)
    return e[()]


@dataclass
class ConvTensors:
    """The arrays of one call, contiguous in the problem's layout, on the backend.

    x: (n, c, *spatial) or channels-last; w: KCRS or KRSC; y: the output (written);
    bias: (k,) or None; z: like y or None. When a tensor is None the kernels receive
    another valid pointer of the same dtype (x) so no backend sees a null argument.
    """

    x: Any
    w: Any
    y: Any
    bias: Any = None
    z: Any = None

    def kernel_pointers(self) -> tuple[Any, Any, Any, Any, Any]:
        """(x, w, y, z-or-y, bias-or-x), the order every conv kernel takes them."""
        z = self.z if self.z is not None else self.y
        bias = self.bias if self.bias is not None else self.x
        return self.x, self.w, self.y, z, bias
