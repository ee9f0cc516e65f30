"""Convolution backward data and backward filter through cuBLAS: the GEMM shapes of
:mod:`.gemm_cublas` (read its docstring first: runtime, precision, chunk config,
workspace rules), the data movement in ``cuda_src/conv/im2col.cu``.

Backward data (``BwdDataTensors``: dy, w -> dx, optional conv_transpose bias):
- :class:`BwdData1x1Solver` (``conv_bwd_data_gemm_cublas_1x1``): ``dx = dy @ w`` with no
  copy (NHWC ``dx[NHW, C/g] = dy[NHW, K/g] @ w[K/g, C/g]`` batched over groups; NCHW
  ``dx[n] = w^T @ dy[n]`` batched over images, per group). The epilogue (bias) as the
  forward's: in place for fp32, from an fp32 result in the workspace for fp16/bf16.
- :class:`BwdDataCol2imSolver` (``conv_bwd_data_col2im_gemm_cublas``): any stride,
  dilation, padding, groups: per chunk of images the GEMM ``col = dy @ w`` writes an fp32
  column matrix into the workspace, then ``col2im`` gathers it into dx (each dx element
  summed by one thread over its taps in a fixed order: deterministic, no atomics) and
  stores it through the epilogue.

Backward filter (``BwdFilterTensors``: x, dy -> dw; no epilogue):
- :class:`BwdFilter1x1Solver` (``conv_bwd_filter_gemm_cublas_1x1``): NHWC
  ``dw[K/g, C/g] = dy[NHW, K/g]^T @ x[NHW, C/g]``: one GEMM over every pixel, no copy, no
  workspace. NCHW: the reduction over (n, hw) is not one strided matrix, so one GEMM per
  image adds ``dy[n] @ x[n]^T`` (cuBLAS beta = 1) in image order.
- :class:`BwdFilterIm2colSolver` (``conv_bwd_filter_im2col_gemm_cublas``): per chunk,
  im2col of x, then ``dw += dy^T @ col`` (NHWC: one GEMM per chunk; NCHW: one per image).
When a sum takes more than one GEMM, fp16/bf16 accumulate in an fp32 buffer in the
workspace (4 bytes per dw element) converted once at the end; fp32 accumulates in dw.
float64 works as fp32 with fp64 everywhere: DGEMMs, an fp64 column matrix for col2im
(8 bytes per element) and accumulation in dw itself.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...problems.conv import ConvProblem
from ...runtime import blas
from ...runtime.backend import Backend
from ..base import Config, Runner
from .bwd_data import BwdDataTensors
from .bwd_filter import BwdFilterTensors
from .common import Epilogue, shape_struct
from .gemm_cublas import (
    BLOCK,
    IN_PLACE,
    ChunkedSolver,
    EpilogueKernel,
    Geometry,
    acc_np,
    align,
    gemm_name,
    grid,
    is_plain,
    module_spec,
    need_workspace,
    region,
)
from .gemm_cublas import _flag as flag


def _col_elems(problem: ConvProblem, images: int) -> int:
    return images * int(np.prod(problem.out_spatial)) * problem.c * problem.filter_taps


# ------------------------------------------------------------------ backward data


class _DataRunner(Runner):
    def __init__(self, backend: Backend, problem: ConvProblem, images: int, col2im: bool,
                 workspace_bytes: int) -> None:  # fmt: skip
        self.backend, self.images = backend, images
        self.geo = geo = Geometry(problem)
        self.shape = shape_struct(problem)
        self.workspace_bytes = workspace_bytes
        self.col2im = None
        if col2im:
            self.col2im = backend.kernel(module_spec(geo.dt),
                                         f"col2im<{geo.dt.ctype}, {flag(geo.nhwc)}>")  # fmt: skip
        self.epilogue = EpilogueKernel(backend, geo.dt)
        self.last: list[str] = []

    def _gemm(self, dy: Any, w: Any, out: Any, n0: int, cn: int, alpha: float) -> int:
        """out = alpha * (dy @ w) for images [n0, n0 + cn): the column matrix (col2im) or
        a chunk of dx (1x1), both laid out like im2col's column matrix."""
        g, b, k = self.geo, self.backend, self.geo.p.k
        if g.nhwc:
            dym = blas.Mat(dy, cn * g.pq, g.kg, k, n0 * g.pq * k, g.kg)
            wm = blas.Mat(w, g.kg, g.kc, g.kc, 0, g.kg * g.kc)
            c = blas.Mat(out, cn * g.pq, g.kc, g.ctaps, 0, g.kc)
            blas.gemm(b, dym, wm, c, batch=g.groups, alpha=alpha, tf32=g.tf32)
            return 1
        for grp in range(g.groups):
            wm = blas.Mat(w, g.kg, g.kc, g.kc, grp * g.kg * g.kc, 0)
            dym = blas.Mat(dy, g.kg, g.pq, g.pq, (n0 * k + grp * g.kg) * g.pq, k * g.pq)
            c = blas.Mat(out, g.kc, g.pq, g.pq, grp * g.kc * g.pq, g.ctaps * g.pq)
            blas.gemm(b, wm, dym, c, trans_a=True, batch=cn, alpha=alpha, tf32=g.tf32)
        return g.groups

    def __call__(self, tensors: BwdDataTensors, epilogue: Epilogue, workspace: Any) -> None:
        need_workspace(workspace, self.workspace_bytes)
        g, e = self.geo, epilogue
        dy, w, dx = tensors.dy.reshape(-1), tensors.w.reshape(-1), tensors.dx.reshape(-1)
        per_image = g.p.c * g.hw
        inner = 1 if g.nhwc else g.hw
        calls, epilogues = 0, 0
        for n0 in range(0, g.p.n, self.images):
            cn = min(self.images, g.p.n - n0)
            base, count = n0 * per_image, cn * per_image
            dx_chunk = dx[base : base + count]
            if self.col2im is not None:
                col = region(workspace, 0, cn * g.pq * g.ctaps, acc_np(g.dt))
                calls += self._gemm(dy, w, col, n0, cn, 1.0)
                bias = tensors.bias if tensors.bias is not None else dx
                self.col2im((grid(count, self.backend),), (BLOCK,),
                            (col, dx, bias, self.shape, e.struct(g.dt),
                             np.int32(n0),
                             np.int32(cn)))  # fmt: skip
            elif is_plain(e):
                calls += self._gemm(dy, w, dx_chunk, n0, cn, e.alpha)
            elif g.dt.short not in IN_PLACE:
                acc = region(workspace, 0, count, np.float32)
                calls += self._gemm(dy, w, acc, n0, cn, 1.0)
                self.epilogue(acc, dx_chunk, None, tensors.bias, e, base, g.p.c, inner)
                epilogues += 1
            else:
                calls += self._gemm(dy, w, dx_chunk, n0, cn, 1.0)
                self.epilogue(dx_chunk, dx_chunk, None, tensors.bias, e, base, g.p.c, inner)
                epilogues += 1
        names = [gemm_name(g, "bwd_data", calls)]
        if self.col2im is not None:
            names.append(f"col2im_{g.tag}")
        elif epilogues:
            names.append(self.epilogue.name)
        self.last = names

    @property
    def kernel_names(self) -> list[str]:
        return list(self.last)


class BwdData1x1Solver(ChunkedSolver):
    """Backward data of a 1x1, stride-1, unpadded convolution: dx = dy @ w, no copy."""

    name = "conv_bwd_data_gemm_cublas_1x1"
    family = "conv_bwd_data"
    direction = "bwd_data"
    pointwise_only = True

    def workspace_for(self, problem: ConvProblem, images: int) -> int:
        if problem.dtype in IN_PLACE:
            return 0
        return 4 * images * int(np.prod(problem.spatial)) * problem.c  # fp32 result (bias)

    def prepare(self, backend: Backend, problem: ConvProblem, config: Config) -> Runner:
        cfg = self.check(problem, config)
        return _DataRunner(backend, problem, cfg.images, False,
                           self.workspace_size(problem, cfg))  # fmt: skip


class BwdDataCol2imSolver(ChunkedSolver):
    """GEMM into an fp32 (fp64) column matrix, then a deterministic col2im gather; any
    problem."""

    name = "conv_bwd_data_col2im_gemm_cublas"
    family = "conv_bwd_data"
    direction = "bwd_data"

    def workspace_for(self, problem: ConvProblem, images: int) -> int:
        return acc_np(Geometry(problem).dt).itemsize * _col_elems(problem, images)

    def prepare(self, backend: Backend, problem: ConvProblem, config: Config) -> Runner:
        cfg = self.check(problem, config)
        return _DataRunner(backend, problem, cfg.images, True,
                           self.workspace_size(problem, cfg))  # fmt: skip


# ------------------------------------------------------------------ backward filter


def _passes(problem: ConvProblem, images: int) -> int:
    """GEMMs that add into dw one after the other (NCHW: one per image)."""
    return problem.n if not problem.channels_last else -(-problem.n // images)


def _acc_bytes(problem: ConvProblem, images: int) -> int:
    """An fp32 accumulator for fp16/bf16 sums of more than one GEMM."""
    if problem.dtype in IN_PLACE or _passes(problem, images) == 1:
        return 0
    return 4 * int(np.prod(problem.w_shape()))


class _FilterRunner(Runner):
    def __init__(self, backend: Backend, problem: ConvProblem, images: int, im2col: bool,
                 workspace_bytes: int) -> None:  # fmt: skip
        self.backend, self.images = backend, images
        self.geo = geo = Geometry(problem)
        self.shape = shape_struct(problem)
        self.workspace_bytes = workspace_bytes
        self.im2col = None
        col_bytes = 0
        if im2col:
            self.im2col = backend.kernel(module_spec(geo.dt),
                                         f"im2col<{geo.dt.ctype}, {flag(geo.nhwc)}>")  # fmt: skip
            col_bytes = align(_col_elems(problem, images) * geo.dt.itemsize)
        self.acc_offset = col_bytes if _acc_bytes(problem, images) else None
        self.epilogue = EpilogueKernel(backend, geo.dt)
        self.last: list[str] = []

    def _gemm(self, dy: Any, src: Any, src_off: int, out: Any, n0: int, cn: int,
              beta: float) -> int:  # fmt: skip
        """out (dw or its fp32 image) = dy^T-products over images [n0, n0 + cn) + beta *
        out; src: x or the chunk's column matrix, its first image at element src_off."""
        g, b, k = self.geo, self.backend, self.geo.p.k
        wm = blas.Mat(out, g.kg, g.kc, g.kc, 0, g.kg * g.kc)
        if g.nhwc:
            dym = blas.Mat(dy, cn * g.pq, g.kg, k, n0 * g.pq * k, g.kg)
            sm = blas.Mat(src, cn * g.pq, g.kc, g.ctaps, src_off, g.kc)
            blas.gemm(b, dym, sm, wm, trans_a=True, batch=g.groups, beta=beta, tf32=g.tf32)
            return 1
        for i in range(cn):
            dym = blas.Mat(dy, g.kg, g.pq, g.pq, (n0 + i) * k * g.pq, g.kg * g.pq)
            sm = blas.Mat(src, g.kc, g.pq, g.pq, src_off + i * g.ctaps * g.pq, g.kc * g.pq)
            blas.gemm(b, dym, sm, wm, trans_b=True, batch=g.groups, beta=beta if i == 0 else 1.0,
                      tf32=g.tf32)  # fmt: skip
        return cn

    def __call__(self, tensors: BwdFilterTensors, epilogue: Any, workspace: Any) -> None:
        need_workspace(workspace, self.workspace_bytes)
        g = self.geo
        x, dy, dw = tensors.x.reshape(-1), tensors.dy.reshape(-1), tensors.dw.reshape(-1)
        out = dw
        if self.acc_offset is not None:
            out = region(workspace, self.acc_offset, dw.size, np.float32)
        calls = 0
        for n0 in range(0, g.p.n, self.images):
            cn = min(self.images, g.p.n - n0)
            if self.im2col is not None:
                col = region(workspace, 0, cn * g.pq * g.ctaps, tensors.x.dtype)
                self.im2col((grid(col.size, self.backend),), (BLOCK,),
                            (tensors.x, col, self.shape, np.int32(n0), np.int32(cn)))  # fmt: skip
                src, src_off = col, 0
            else:
                src, src_off = x, n0 * g.p.c * g.hw
            calls += self._gemm(dy, src, src_off, out, n0, cn, 0.0 if n0 == 0 else 1.0)
        names = [f"im2col_{g.tag}"] if self.im2col is not None else []
        names.append(gemm_name(g, "bwd_filter", calls))
        if out is not dw:
            self.epilogue(out, dw, None, None, Epilogue(), 0, 1, 1)
            names.append(self.epilogue.name)
        self.last = names

    @property
    def kernel_names(self) -> list[str]:
        return list(self.last)


class BwdFilter1x1Solver(ChunkedSolver):
    """Backward filter of a 1x1, stride-1, unpadded convolution: dw = dy^T @ x, no copy."""

    name = "conv_bwd_filter_gemm_cublas_1x1"
    family = "conv_bwd_filter"
    direction = "bwd_filter"
    pointwise_only = True

    def workspace_for(self, problem: ConvProblem, images: int) -> int:
        return _acc_bytes(problem, problem.n)  # one pass over all images (NHWC), or N (NCHW)

    def prepare(self, backend: Backend, problem: ConvProblem, config: Config) -> Runner:
        cfg = self.check(problem, config)
        return _FilterRunner(backend, problem, problem.n, False,
                             self.workspace_size(problem, cfg))  # fmt: skip


class BwdFilterIm2colSolver(ChunkedSolver):
    """im2col of x per chunk, then dw += dy^T @ col; any problem."""

    name = "conv_bwd_filter_im2col_gemm_cublas"
    family = "conv_bwd_filter"
    direction = "bwd_filter"

    def workspace_for(self, problem: ConvProblem, images: int) -> int:
        col = _col_elems(problem, images) * Geometry(problem).dt.itemsize
        acc = _acc_bytes(problem, images)
        return align(col) + acc if acc else col

    def prepare(self, backend: Backend, problem: ConvProblem, config: Config) -> Runner:
        cfg = self.check(problem, config)
        return _FilterRunner(backend, problem, cfg.images, True,
                             self.workspace_size(problem, cfg))  # fmt: skip
