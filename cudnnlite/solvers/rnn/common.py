"""What every RNN solver shares: the tensors of a call (weights stacked per layer over
directions), the reserve a training forward leaves for the backward, the cell kernels
(``cuda_src/rnn/rnn_cell.cu``) and the GEMMs around them.

Internal layouts (time-major, contiguous): x (T, B, I), y (T, B, D*Ho), hx/hy (L*D, B, Ho),
cx/cy (L*D, B, H); per layer the weights stacked over the D directions: w_ih (D, G*H, I_l),
w_hh (D, G*H, Ho), b_ih/b_hh (D, G*H), w_hr (D, P, H). Ho = P with projections, else H.

The cells' arithmetic, their saved gates and states and the GEMMs around them run in the
accumulation type (:func:`acc_dtype`): float32 for float32/float16/bfloat16, float64 for
float64.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ... import dtypes
from ...problems.rnn import MODE_ID, MODES, RnnProblem
from ...runtime.backend import Backend
from ...runtime.blas import Mat, prepare_gemm
from ...runtime.kernel import ModuleSpec

SOURCE = "rnn/rnn_cell.cu"
THREADS = 256

CELL_PARAMS_DTYPE = np.dtype(
    [(f, "<i4") for f in ("b", "h", "hout", "gh", "steps", "step", "has_len", "training")]
    + [("y_ld", "<i8")],
    align=True,
)


def dtype_of(problem: RnnProblem) -> dtypes.DType:
    return dtypes.by_short(problem.dtype)


def acc_dtype(problem: RnnProblem) -> np.dtype:
    """The cells' arithmetic type (cl::acc_t<T>) and that of every internal buffer and GEMM:
    float64 for float64, else float32."""
    return np.dtype(np.float64 if dtype_of(problem).acc_ctype == "double" else np.float32)


def _names(dt: dtypes.DType) -> list[str]:
    names = []
    for mode in MODES:
        m = MODE_ID[mode]
        names += [f"rnn_cell_fwd<{dt.ctype}, {m}>", f"rnn_cell_bwd<{dt.ctype}, {m}>"]
    return [*names, f"rnn_proj_commit<{dt.ctype}>", f"rnn_proj_dh<{dt.acc_ctype}>"]


def module_spec(dt: dtypes.DType) -> ModuleSpec:
    """One module per dtype with every mode's cell kernels (small pointwise kernels)."""
    return ModuleSpec.make(SOURCE, _names(dt))


def module_specs() -> list[ModuleSpec]:
    return [module_spec(dt) for dt in dtypes.FLOAT_TYPES]


@dataclass
class LayerWeights:
    """One layer's weights, stacked over directions (module docstring)."""

    w_ih: Any
    w_hh: Any
    b_ih: Any
    b_hh: Any
    w_hr: Any = None

    def arrays(self) -> list[Any]:
        out = [self.w_ih, self.w_hh, self.b_ih, self.b_hh]
        return out + ([self.w_hr] if self.w_hr is not None else [])


@dataclass
class LayerSaves:
    """What a training forward keeps of one layer for the backward."""

    x: Any  # the layer's input (T, B, I_l), after dropout
    gates: Any  # (D, T, B, G*H) accumulation type, after the nonlinearities
    c: Any  # (D, T, B, H) accumulation type: c before each step (LSTM)
    h: Any  # (D, T, B, Ho): h before each step
    ghn: Any  # (D, T, B, H) accumulation type: h W_hn^T + b_hn (GRU)


@dataclass
class RnnReserve:
    """Everything the backward of one training forward needs (``rnn(..., training=True)``)."""

    problem: RnnProblem
    backend: Backend
    weights: list[LayerWeights]
    hx: Any
    cx: Any
    lengths: Any
    dropout: float
    seed: Any  # an integer, or an ops.dropout.PhiloxState
    layers: list[LayerSaves] = field(default_factory=list)
    # How the user's arrays were shaped, for the gradients' shapes (set by the op).
    meta: dict = field(default_factory=dict)


@dataclass
class RnnTensors:
    """The arrays of one forward call, on the backend. hx/cx None mean zeros; cy None
    unless LSTM; reserve None unless training."""

    x: Any
    hx: Any
    cx: Any
    weights: list[LayerWeights]
    lengths: Any
    y: Any
    hy: Any
    cy: Any
    reserve: RnnReserve | None = None


@dataclass
class RnnBwdTensors:
    """The arrays of one backward call: dy (T, B, D*Ho), dhy/dcy (None: zero), the reserve,
    and the written gradients dx (T, B, I), dhx, dcx (None unless LSTM) and dweights (per
    layer, like the weights)."""

    dy: Any
    dhy: Any
    dcy: Any
    reserve: RnnReserve
    dx: Any
    dhx: Any
    dcx: Any
    dweights: list[LayerWeights]


@dataclass(frozen=True)
class RnnScalars:
    dropout: float = 0.0
    seed: Any = 0  # an integer, or an ops.dropout.PhiloxState (layer k at its counter + k)


class CellKernels:
    """The cell kernels of one problem's dtype and mode, and the GEMM helper."""

    def __init__(self, backend: Backend, problem: RnnProblem) -> None:
        dt = dtype_of(problem)
        spec = module_spec(dt)
        m = MODE_ID[problem.mode]
        self.fwd = backend.kernel(spec, f"rnn_cell_fwd<{dt.ctype}, {m}>")
        self.bwd = backend.kernel(spec, f"rnn_cell_bwd<{dt.ctype}, {m}>")
        self.commit = backend.kernel(spec, f"rnn_proj_commit<{dt.ctype}>")
        self.proj_dh = backend.kernel(spec, f"rnn_proj_dh<{dt.acc_ctype}>")
        self.backend = backend
        self.problem = problem
        self.names = [f"rnn_cell_fwd_{problem.mode}_{dt.short}"]
        self._params: dict[tuple[int, bool, bool], np.void] = {}

    def params(self, step: int, training: bool, has_len: bool) -> np.void:
        """The step's RnnCellParams, built once per (step, training, lengths) and reused by
        later calls of the plan (a launch copies it; nobody mutates it)."""
        key = (step, training, has_len)
        prm = self._params.get(key)
        if prm is None:
            prm = self._params[key] = self._build_params(step, training, has_len)
        return prm

    def _build_params(self, step: int, training: bool, has_len: bool) -> np.void:
        p = self.problem
        prm = np.zeros((), CELL_PARAMS_DTYPE)
        prm["b"], prm["h"], prm["hout"], prm["gh"] = p.b, p.h, p.hout, p.gates * p.h
        prm["steps"], prm["step"] = p.t, step
        prm["has_len"], prm["training"] = int(has_len), int(training)
        prm["y_ld"] = p.dirs * p.hout
        return prm[()]

    def grid(self, width: int) -> tuple[int, int]:
        return (max(1, -(-self.problem.b * width // THREADS)), self.problem.dirs)


def stacked_gemm(backend: Backend, a: Any, b: Any, c: Any, *, trans_a: bool = False,
                 trans_b: bool = False, beta: float = 0.0) -> None:  # fmt: skip
    """``c[d] = op(a[d]) @ op(b[d]) + beta * c[d]`` for each leading index d of 3-D
    contiguous arrays (a 2-D ``a`` or ``b`` is shared by every d)."""
    prepare_stacked_gemm(backend, a, b, c, trans_a=trans_a, trans_b=trans_b, beta=beta)()


def prepare_stacked_gemm(backend: Backend, a: Any, b: Any, c: Any, *, trans_a: bool = False,
                         trans_b: bool = False,
                         beta: float = 0.0) -> Callable[[], None]:  # fmt: skip
    """:func:`stacked_gemm` checked and prepared once (``blas.prepare_gemm``): a function
    that runs it on the arrays' contents at each call (a time loop's recurrent GEMM)."""

    def mat(arr: Any, batch: int) -> Mat:
        rows, cols = arr.shape[-2:]
        stride = rows * cols if arr.ndim == 3 else 0
        return Mat(arr, rows, cols, cols, 0, stride)

    batch = c.shape[0]
    return prepare_gemm(backend, mat(a, batch), mat(b, batch), mat(c, batch),
                        trans_a=trans_a, trans_b=trans_b, batch=batch, beta=beta)  # fmt: skip
