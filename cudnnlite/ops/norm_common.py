"""Shared parts of the normalization family: the kernel module of ``cuda_src/norm/norm.cu``
(one per dtype), the mirrors of its structs, the kernel table, the per-channel reduction
and the argument checks that batch norm, the row norms, group norm and LRN share.

Data may be float32, float16, bfloat16 or float64. Statistics (mean, invstd / rstd) and
batch-norm parameters (weight, bias, running statistics, dweight / dbias) have the type
the kernels compute in: float32 for float32 / float16 / bfloat16 data (cuDNN's rule),
float64 for float64 data (which computes and accumulates in double; eps, momentum,
activation coefficients and LRN's scalars reach it unrounded). Row-norm weight and bias
share x's dtype (PyTorch's). Inputs of any strides are copied to C-contiguous arrays first
where they are not already; ``out=`` may have any strides (the result is copied into it).
Semantics: :mod:`cudnnlite.reference.norm`.

:func:`last_kernel_name` names the last normalization kernel the calling thread launched,
e.g. ``red_planar_stats_fp16`` (batch-norm statistics, NCHW), ``bn_fwd_apply_fp32`` or
``rownorm_fwd_rms_bf16``.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from .. import dtypes
from ..errors import BadParamError
from ..reference.activation import DEFAULT_COEF
from ..runtime.backend import Backend
from ..runtime.graph import note_host_work
from ..runtime.kernel import ModuleSpec
from ..runtime.variants import register
from ._arrays import array_module, as_array, check_out, contiguous
from ._kernels import KernelTable, LastLaunch, kernel_table
from .activation import ACTIVATION_MODES, FUSED_ALIASES, _params, act_params_dtype, fused_mode

SOURCE = "norm/norm.cu"
LAYOUTS = ("NCHW", "NHWC")
_BLOCK = 256
_CHLAST_ROWS = 8
_KIND = {"stats": 0, "bwd": 1, "params": 2}

# Mirrors of the kernels' structs. Those with scalars are templated on the accumulation
# type A (BnParamsT<A> ...): one layout per A, "<f4" (float) and "<f8" (double), picked
# by _real(dt).
_REALS = ("<f4", "<f8")


def _mirrors(fields: list[tuple[str, str]]) -> dict[str, np.dtype]:
    """The struct's numpy layouts by real type; fields typed "A" take it."""
    return {r: np.dtype([(n, r if t == "A" else t) for n, t in fields], align=True) for r in _REALS}


def _real(dt: dtypes.DType) -> str:
    return "<f8" if dt.acc_ctype == "double" else "<f4"


def _acc(dt: dtypes.DType) -> np.dtype:
    """dtype of statistics, workspaces and batch-norm parameters for data of type ``dt``."""
    return np.dtype(np.float64) if dt.acc_ctype == "double" else np.dtype(np.float32)


_RED_DTYPE = np.dtype(
    [
        ("rows", "<i8"),
        ("channels", "<i8"),
        ("inner", "<i8"),
        ("count", "<i8"),
        ("groups", "<i8"),
        ("spatial", "<i8"),
        ("act_mode", "<i4"),
        ("has_z", "<i4"),
    ],
    align=True,
)
_BN_DTYPE = _mirrors(  # BnParamsT<A>
    [("eps", "A"), ("momentum", "A"), ("update_running", "<i4"), ("chunks", "<i4")]
)
_BN_APPLY_DTYPE = _mirrors(  # BnApplyT<A>
    [
        ("n", "<i8"),
        ("channels", "<i8"),
        ("inner", "<i8"),
        ("eps", "A"),
        ("inv_count", "A"),
        ("stats_are_var", "<i4"),
        ("act_mode", "<i4"),
    ]
)
_ROW_DTYPE = _mirrors(  # RowShapeT<A>
    [
        ("rows", "<i8"),
        ("cols", "<i8"),
        ("groups", "<i8"),
        ("inner", "<i8"),
        ("eps", "A"),
        ("has_weight", "<i4"),
        ("has_bias", "<i4"),
        ("group_log2", "<i4"),
    ]
)
_GN_NHWC_DTYPE = _mirrors(  # GnNhwcShapeT<A>
    [
        ("spatial", "<i8"),
        ("channels", "<i8"),
        ("groups", "<i8"),
        ("cpg", "<i8"),
        ("tiles", "<i8"),
        ("gpb", "<i4"),
        ("eps", "A"),
        ("has_weight", "<i4"),
        ("has_bias", "<i4"),
    ]
)
_GN_ROWS = 16  # blockDim.y of gn_nhwc_* (nrm::kGnRows)
_LRN_DTYPE = _mirrors(  # LrnShapeT<A>
    [
        ("n", "<i8"),
        ("channels", "<i8"),
        ("cstride", "<i8"),
        ("size", "<i4"),
        ("alpha_over_n", "A"),
        ("beta", "A"),
        ("k", "A"),
    ]
)

# ------------------------------------------------------------------ kernels


# Activation modes the norm kernels' switch leaves out (cuda_src/norm/norm.cu: nrm::act_fwd).
_UNFUSED_ACTIVATIONS = ("mish",)
# The modes of batch norm's vector kernels, one kernel each (the mode a template argument):
# -1 none, then every fused activation but identity (-1 stands for it).
VEC_ACT_MODES = (-1, *(i for i, m in enumerate(ACTIVATION_MODES)
                       if m not in ("identity", *_UNFUSED_ACTIVATIONS)))  # fmt: skip


# Batch norm's vector kernels index in 32 bits: up to this many elements (above, the
# scalar kernels, which have a 64-bit path).
VEC_MAX_ELEMENTS = 2**31 - 1


def vec_act_suffix(mode: int) -> str:
    """The readable-name suffix of a vector kernel's activation mode (-1: none, "")."""
    return "" if mode < 0 else f"_{ACTIVATION_MODES[mode]}"


def _names(dt: dtypes.DType) -> dict[str, str]:
    """Readable name -> C++ name expression, for every kernel of the dtype's module."""
    t = dt.ctype
    names = {}
    for kind, k in _KIND.items():
        names[f"red_planar_{kind}"] = f"red_planar<{t}, {k}>"
        names[f"red_chlast_{kind}"] = f"red_chlast<{t}, {k}>"
    names["red_chlast_params_nhwc"] = f"red_chlast<{t}, 3>"
    names["gn_nhwc_fwd"] = f"gn_nhwc_fwd<{t}>"
    names["gn_nhwc_bwd"] = f"gn_nhwc_bwd<{t}>"
    for k in ("gn_nhwc_stats", "gn_nhwc_finalize", "gn_nhwc_apply", "gn_nhwc_bwd_partial",
              "gn_nhwc_bwd_apply"):  # fmt: skip
        names[k] = f"{k}<{t}>"
    names["bn_stats_finalize"] = f"bn_stats_finalize<{t}>"
    names[f"sum2_finalize_{dt.short}"] = f"sum2_finalize<{t}>"  # row-norm dweight / dbias
    names[_sum2_params(dt)] = f"sum2_finalize<{dt.acc_ctype}>"  # batch-norm dgamma / dbeta
    names["bn_fwd_apply"] = f"bn_fwd_apply<{t}>"
    names["bn_bwd_apply"] = f"bn_bwd_apply<{t}>"
    for chlast, tag in ((False, "planar"), (True, "chlast")):
        b = "true" if chlast else "false"
        for mode in VEC_ACT_MODES:
            act = vec_act_suffix(mode)
            names[f"bn_fwd_apply_vec_{tag}{act}"] = f"bn_fwd_apply_vec<{t}, {b}, {mode}>"
            names[f"bn_bwd_apply_vec_{tag}{act}"] = f"bn_bwd_apply_vec<{t}, {b}, {mode}>"
    names["rownorm_apply"] = f"rownorm_apply<{t}>"
    for rms, tag in ((False, "mean"), (True, "rms")):
        b = "true" if rms else "false"
        vec = 16 // dt.numpy.itemsize  # (a 16-byte pack)
        names[f"rownorm_fwd_{tag}"] = f"rownorm_fwd<{t}, {b}, 1>"
        names[f"rownorm_bwd_{tag}"] = f"rownorm_bwd<{t}, {b}, 1>"
        names[f"rownorm_bwd_partial_{tag}"] = f"rownorm_bwd_partial<{t}, {b}>"
        names[f"rownorm_bwd_apply_{tag}"] = f"rownorm_bwd_apply<{t}, {b}>"
        names[f"rownorm_fwd_{tag}_rows"] = f"rownorm_fwd_rows<{t}, {b}>"
        names[f"rownorm_bwd_{tag}_rows"] = f"rownorm_bwd_rows<{t}, {b}>"
        names[f"rownorm_fwd_{tag}_vec"] = f"rownorm_fwd<{t}, {b}, {vec}>"
        names[f"rownorm_bwd_{tag}_vec"] = f"rownorm_bwd<{t}, {b}, {vec}>"
    for k in ("lrn_fwd", "lrn_scale", "lrn_bwd"):
        names[k] = f"{k}<{t}>"
    return names


def _sum2_params(dt: dtypes.DType) -> str:
    """Key of the finalize writing batch-norm parameter gradients (type _acc(dt))."""
    return "sum2_finalize_fp64" if dt.acc_ctype == "double" else "sum2_finalize_fp32"


def module_spec(dt: dtypes.DType) -> ModuleSpec:
    """The module holding every normalization kernel for storage type ``dt``."""
    return ModuleSpec.make(SOURCE, _names(dt).values())


@register("norm")
def module_specs() -> list[ModuleSpec]:
    return [module_spec(dt) for dt in dtypes.FLOAT_TYPES]


_LAST = LastLaunch()


class _Table(KernelTable):
    def __init__(self, backend: Backend, dt: dtypes.DType) -> None:
        super().__init__(backend, dt, module_spec(dt), _names(dt), _LAST)
        if self.sm_count:
            self.target_blocks = self.sm_count * 8  # resident blocks of 256 threads, a few waves
            self.max_grid = self.sm_count * 32
        else:
            self.target_blocks = 16
            self.max_grid = 64

    def too_few(self, blocks: int) -> bool:
        """Whether ``blocks`` one-per-unit blocks (a row, a (sample, tile)) leave SMs idle:
        fewer than two an SM (16 on the emulator). Such launches split each unit across
        blocks instead (:meth:`splits`)."""
        return blocks < (self.sm_count or 8) * 2

    def splits(self, units: int, items: int, per_block: int) -> int:
        """Blocks per unit when ``units`` units of ``items`` items each are split: enough
        for a few waves over the GPU (target_blocks in all), each block at least
        ``per_block`` items, at most 65535 (a grid dimension)."""
        return max(1, min(-(-self.target_blocks // units), -(-items // per_block), 65535))

    def grid_each(self, n: int) -> int:
        """Blocks for one thread per item, uncapped: the finalize kernels (a thread per
        channel, no grid-stride loop, which cost them registers and a spill)."""
        return max(1, -(-n // _BLOCK))


def _table(backend: Backend, dt: dtypes.DType) -> _Table:
    return kernel_table(_Table, backend, dt)


def last_kernel_name() -> str | None:
    """Readable name of the last normalization kernel this thread launched."""
    return _LAST.get()


# ------------------------------------------------------------------ argument helpers


_dense = functools.partial(contiguous, family="norm")


def _layout(layout: Any) -> str:
    if layout not in LAYOUTS:
        raise BadParamError(f"layout: expected 'NCHW' or 'NHWC', got {layout!r}")
    return layout


def _eps(eps: Any) -> float:
    if isinstance(eps, bool) or not isinstance(eps, (int, float, np.integer, np.floating)):
        raise BadParamError(f"eps: expected a number >= 0, got {eps!r}")
    if not (math.isfinite(float(eps)) and eps >= 0):
        raise BadParamError(f"eps: expected a finite number >= 0, got {eps!r}")
    return float(eps)


def _param(
    name: str, a: Any, shape: tuple[int, ...], dtype: Any, backend_arrays: Any = None
) -> Any:
    if a is None:
        return None
    a = as_array(name, a)
    if tuple(a.shape) != tuple(shape) and not (a.size == math.prod(shape) and a.ndim == 1):
        raise BadParamError(f"{name}: expected shape {tuple(shape)}, got {tuple(a.shape)}")
    if a.dtype != np.dtype(dtype):
        raise BadParamError(f"{name}: expected dtype {np.dtype(dtype)}, got {a.dtype}")
    return a


def _required(name: str, a: Any) -> Any:
    if a is None:
        raise BadParamError(f"{name}: the forward's saved statistic is needed, got None")
    return a


def _act(activation: Any, coef: Any, dt: dtypes.DType) -> tuple[int, np.void]:
    """Activation mode id (-1 none) and its ActParamsT for data of type ``dt``."""
    activation, coef, threshold = fused_mode(activation, coef, None, ("coef", "threshold"))
    if activation is None:
        if coef is not None:
            raise BadParamError("coef: given without an activation")
        activation = "identity"
    elif not isinstance(activation, str) or activation not in ACTIVATION_MODES:
        raise BadParamError(
            f"activation: expected None or one of {', '.join((*ACTIVATION_MODES, *FUSED_ALIASES))}"
            f", got {activation!r}"
        )
    if activation in _UNFUSED_ACTIVATIONS:
        raise BadParamError(
            f"activation: {activation} is not fused into the norm kernels (its math inlined "
            f"there costs registers for every mode); apply cudnnlite.{activation} to the result"
        )
    params = _params(activation, coef, threshold, 1.0, 0.0, False)[0]  # checks coef
    mode = -1 if activation == "identity" else ACTIVATION_MODES.index(activation)
    layout = act_params_dtype(dt)
    if layout != params.dtype:
        # double kernels: the same fields, the coefficient as given (not its float32)
        wide = np.zeros((), layout)
        for name in layout.names:
            wide[name] = params[name]
        if activation in DEFAULT_COEF:
            wide["coef"] = float(DEFAULT_COEF[activation] if coef is None else coef)
        params = wide[()]
    return mode, params


def _deliver(result: Any, out: Any) -> Any:
    if out is None:
        return result
    note_host_work("norm: a copy into out=")
    out[...] = result
    return out


def _check_out(out: Any, x: Any, backend: Backend, inputs: dict[str, Any]) -> None:
    if out is not None:
        check_out(out, x.shape, x.dtype, backend, inputs)


def _struct(dtype: np.dtype | dict[str, np.dtype], dt: Any = None, **fields: Any) -> np.void:
    """The struct's value; ``dtype`` a dict of _mirrors is picked by ``dt``'s real type."""
    if isinstance(dtype, dict):
        dtype = dtype[_real(dt)]
    s = np.zeros((), dtype=dtype)
    for k, v in fields.items():
        s[k] = v
    return s[()]


# ------------------------------------------------------------------ per-channel reduction


def _reduce(
    table: _Table,
    kind: str,
    rows: int,
    channels: int,
    inner: int,
    ptrs: Sequence[Any],
    groups: int = 1,
    spatial: int = 1,
    act_mode: int = -1,
    has_z: bool = False,
    params: np.void | None = None,
) -> tuple[Any, int]:
    """Launches the per-channel reduction; returns (partial workspace, chunks)."""
    xp = array_module(ptrs[0])
    count = rows * inner
    if inner > 1:
        per_block = _BLOCK * 4  # at least 4 elements per thread
        col_blocks = channels
        variant = "planar"
    else:
        per_block = _CHLAST_ROWS * 4
        col_blocks = -(-channels // 32)
        variant = "chlast"
    chunks = table.splits(col_blocks, count, per_block)
    nacc = 3 if kind == "stats" else 2
    partial = xp.empty((nacc * channels * chunks,), _acc(table.dt))
    shape = _struct(
        _RED_DTYPE,
        rows=rows,
        channels=channels,
        inner=inner,
        count=count,
        groups=groups,
        spatial=spatial,
        act_mode=act_mode,
        has_z=int(has_z),
    )
    if params is None:
        params = _act(None, None, table.dt)[1]
    block = (_BLOCK,) if variant == "planar" else (32, _CHLAST_ROWS)
    table.launch(
        f"red_{variant}_{kind}", (col_blocks, chunks), block, (*ptrs, partial, shape, params)
    )
    return partial, chunks


__all__ = ["last_kernel_name", "module_specs"]
