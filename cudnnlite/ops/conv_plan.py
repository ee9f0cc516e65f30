"""Convolution plans: :func:`conv2d_plan` and :func:`conv3d_plan` choose the solver and
compile its kernels once for arrays of given shapes; the ConvPlan they return checks a
call's arrays and launches (the fused epilogue as in :func:`cudnnlite.conv2d`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from .. import dtypes
from ..dispatch.plans import Plan, get_plan
from ..errors import BadParamError
from ..runtime.graph import graph_safe
from ..runtime.select import backend_for, forced_backend
from ..runtime.streams import with_stream
from ..solvers.conv.common import Epilogue
from ._fastpath import enabled as fastpath_enabled
from ._fastpath import plan_backend, plan_shape, scalars_key
from .conv import _check_operand, _launch_new, _run
from .conv_args import _epilogue, make_problem

_PLAN_EPILOGUES = 16


class ConvPlan:
    """A convolution prepared once: problem, solver, config, compiled kernels and
    workspace. Calling it on arrays of the planned shapes only launches.

    Made by :func:`conv2d_plan` or :func:`conv3d_plan`; ``plan(x, w, bias, z=..., out=...,
    activation=...)``.

    A call without ``out`` whose arrays are all of the plan's array type (NumPy for the
    emulator, CuPy for the GPU), shapes and dtype checks only that and launches; any
    other call (``out=``, other arrays, a forced backend) takes the full checks, which
    raise the same errors as :func:`conv2d` for bad arguments.
    """

    _templated_by_identity = True  # its calls' launch templates key it by identity

    def __init__(self, plan: Plan) -> None:
        self._plan = plan
        self.problem = plan.problem
        self.solver = plan.solver.name
        self.config = plan.config
        self.source = plan.source
        self.workspace_bytes = plan.workspace_bytes
        p = plan.problem
        # NumPy's or CuPy's ndarray: the only array type the quick call accepts.
        self._array_type = getattr(getattr(plan.backend, "xp", None), "ndarray", None)
        self._dtype = dtypes.by_short(p.dtype).numpy
        self._shapes = (p.x_shape(), p.w_shape(), (p.k,), p.y_shape())
        # Epilogues by their arguments as given (a plan meets few): checked once each.
        self._epilogues: dict[tuple, Epilogue] = {}
        # The GPU the plan's kernels were loaded on (None on the emulator): a call runs on
        # its arrays' device (with_stream), where those kernels do not exist.
        self._device = plan.backend.device_key() if plan.backend.name == "cuda" else None

    def _check_device(self) -> None:
        here = self._plan.backend.device_key()
        if here != self._device:
            raise BadParamError(
                f"x: the arrays are on {here}, this plan was made on {self._device}; "
                "make one plan per device"
            )

    def _quick(self, x: Any, w: Any, bias: Any, z: Any, epilogue_args: tuple) -> Any:
        """The launch of a call that needs no other check (see the class docstring), or
        None when the call needs the full checks."""
        t, dt = self._array_type, self._dtype
        x_shape, w_shape, b_shape, y_shape = self._shapes
        if (
            t is None
            or type(x) is not t
            or type(w) is not t
            or x.shape != x_shape
            or w.shape != w_shape
            or x.dtype != dt
            or w.dtype != dt
            or (bias is not None and (type(bias) is not t or bias.shape != b_shape
                                      or bias.dtype != dt))
            or (z is not None and (type(z) is not t or z.shape != y_shape or z.dtype != dt))
            or forced_backend()
            or not fastpath_enabled()
        ):  # fmt: skip
            return None
        key = (scalars_key(*epilogue_args), bias is not None, z is not None)
        epilogue = None if key[0] is None else self._epilogues.get(key)
        if epilogue is None:
            epilogue = _epilogue(*epilogue_args, bias is not None, z is not None, dt)
            if key[0] is not None and len(self._epilogues) < _PLAN_EPILOGUES:
                self._epilogues[key] = epilogue
        return _launch_new(self._plan, y_shape, epilogue, x, w, bias, z)

    @property
    def kernel_names(self) -> list[str]:
        return self._plan.kernel_names

    @with_stream
    def __call__(
        self,
        x: Any,
        w: Any,
        bias: Any = None,
        *,
        z: Any = None,
        out: Any = None,
        activation: str | None = None,
        activation_coef: float | None = None,
        activation_threshold: float | None = None,
        alpha: float = 1.0,
        alpha2: float | None = None,
    ) -> Any:
        if self._device is not None:
            self._check_device()
        if out is None:
            args = (activation, activation_coef, activation_threshold, alpha, alpha2)
            y = self._quick(x, w, bias, z, args)
            if y is not None:
                return y
        p = self.problem
        backend = backend_for(x, w, bias, z, out, names=("x", "w", "bias", "z", "out"))
        if backend is not self._plan.backend:
            raise BadParamError(
                f"x: this plan runs on {self._plan.backend.name}, the arrays are for {backend.name}"
            )
        _check_operand("x", x, p.x_shape(), x.dtype)
        if dtypes.lookup(x.dtype) is None or dtypes.lookup(x.dtype).short != p.dtype:
            raise BadParamError(f"x: this plan is for {p.dtype}, got {x.dtype}")
        epilogue = _epilogue(activation, activation_coef, activation_threshold, alpha, alpha2,
                             bias is not None, z is not None, x.dtype)  # fmt: skip
        return _run(self._plan, x, w, bias, z, out, epilogue)

    def __repr__(self) -> str:
        return f"<ConvPlan {self._plan.describe()}>"


def conv2d_plan(
    x_shape: Sequence[int],
    w_shape: Sequence[int],
    stride: Any = 1,
    padding: Any = 0,
    dilation: Any = 1,
    groups: int = 1,
    *,
    dtype: Any = np.float32,
    layout: str = "NCHW",
    math: str = "default",
    algo: str = "auto",
    backend: str = "auto",
) -> ConvPlan:
    """Plans a 2-D convolution for arrays of these shapes: the solver is chosen and its
    kernels compiled now. ``backend``: "cpu" (emulator), "cuda", or "auto" (the GPU when
    CuPy sees one)."""
    return _plan(2, x_shape, w_shape, stride, padding, dilation, groups, dtype, layout, math,
                 algo, backend)  # fmt: skip


def conv3d_plan(
    x_shape: Sequence[int],
    w_shape: Sequence[int],
    stride: Any = 1,
    padding: Any = 0,
    dilation: Any = 1,
    groups: int = 1,
    *,
    dtype: Any = np.float32,
    layout: str = "NCDHW",
    math: str = "default",
    algo: str = "auto",
    backend: str = "auto",
) -> ConvPlan:
    """Plans a 3-D convolution (shapes as :func:`conv3d`); otherwise as :func:`conv2d_plan`."""
    return _plan(3, x_shape, w_shape, stride, padding, dilation, groups, dtype, layout, math,
                 algo, backend)  # fmt: skip


def _plan(nd: int, x_shape: Sequence[int], w_shape: Sequence[int], stride: Any, padding: Any,
          dilation: Any, groups: int, dtype: Any, layout: str, math: str, algo: str,
          backend: str) -> ConvPlan:  # fmt: skip
    problem = make_problem(
        plan_shape(x_shape, "x_shape"), plan_shape(w_shape, "w_shape"), dtype, stride=stride,
        padding=padding, dilation=dilation, groups=groups, layout=layout, math_mode=math, nd=nd,
    )  # fmt: skip
    return ConvPlan(get_plan(plan_backend(backend), problem, algo))


# Kernel launches only, host copies reported: an emulator graph may replay these.
graph_safe(ConvPlan.__call__)
