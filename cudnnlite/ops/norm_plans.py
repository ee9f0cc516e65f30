"""Plans of the normalization family: batch-norm inference (kernel launches only, so a
plan's repeated call is a launch template's replay) prepared for one input shape and
dtype, with its arguments checked once."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from .. import dtypes
from ..errors import BadParamError
from ._fastpath import OpPlan, plan_backend, plan_dtype, plan_shape
from .batch_norm import _bn_mode, batch_norm_forward_inference
from .norm_common import _act, _eps, _layout


def batch_norm_inference_plan(
    shape: Sequence[int],
    *,
    eps: float = 1e-5,
    mode: str = "spatial",
    layout: str = "NCHW",
    activation: str | None = None,
    coef: float | None = None,
    dtype: Any = np.float32,
    backend: str = "auto",
) -> OpPlan:
    """Plans ``batch_norm_forward_inference(x, running_mean, running_var, weight, bias,
    eps=, mode=, layout=, activation=, coef=)`` for ``x`` of ``shape`` and ``dtype``: the
    arguments are checked now; ``plan(x, running_mean, running_var, weight=None,
    bias=None, out=None, stream=None)`` checks x's kind, shape and dtype and launches (the
    statistics and parameters are checked as the functional call checks them, once per
    key). The fused residual ``z`` is not part of a plan. ``backend``: "cpu" (emulator),
    "cuda", or "auto" (the GPU when CuPy sees one)."""
    dims, dt = plan_shape(shape), plan_dtype(dtype)
    if len(dims) < 2:
        raise BadParamError(f"shape: expected at least 2 dims (N, C, ...), got {dims}")
    _eps(eps)
    _layout(layout)
    _bn_mode(mode)
    _act(activation, coef, dtypes.lookup(dt))
    kwargs = {"eps": eps, "mode": mode, "layout": layout, "activation": activation,
              "coef": coef}  # fmt: skip
    return OpPlan("batch_norm_inference", batch_norm_forward_inference,
                  plan_backend(backend), dims, dt, kwargs,
                  operands=("running_mean", "running_var", "weight", "bias"),
                  required=2)  # fmt: skip


__all__ = ["batch_norm_inference_plan"]
