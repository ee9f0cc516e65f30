"""Convolution forward through cuBLAS (MIOpen runs GEMM-shaped convolutions through
rocBLAS): the GEMM is cuBLAS's (``cudnnlite.runtime.blas``: cuBLAS via CuPy on a GPU,
NumPy's matmul on the emulator); our kernels (``cuda_src/conv/im2col.cu``) only move data
and apply the fused epilogue. Backward data and filter: :mod:`.gemm_cublas_bwd`.

- :class:`Gemm1x1Solver` (``conv_fwd_gemm_cublas_1x1``): 1x1 filter, stride 1, no padding
  (any groups and dilation; 3-D as the 2-D problem of D*H x W pixels it equals). No copy
  of x or w:
  NHWC ``y[NHW, K] = x[NHW, C] @ w[K, C]^T`` (one strided-batched GEMM over the groups,
  whose outputs interleave along y's rows); NCHW ``y[n] = w[K, C] @ x[n][C, HW]`` (one
  strided-batched GEMM over the images per group).
- :class:`Im2colSolver` (``conv_fwd_im2col_gemm_cublas``): any stride, dilation, padding
  and groups, 1-D and 2-D (3-D: not applicable, the kernels' ConvShape is 2-D). A kernel
  writes the im2col matrix of a chunk of images into the workspace (layouts in
  im2col.cu), then the same GEMMs as the 1x1 case run with it in place of x.

Epilogue ``y = act(alpha * conv + alpha2 * z + bias)``:
- none (no bias, no z, identity): one GEMM straight into y, alpha as cuBLAS's alpha;
- fp32: the GEMM writes y, then ``gemm_epilogue`` rewrites y in place through the shared
  epilogue code (conv_common.cuh), the arithmetic of every other solver. When z IS y
  (``out=z``) the GEMM blends it instead (cuBLAS beta = alpha2) and the kernel adds the
  bias and activation;
- fp16/bf16: the GEMM writes its fp32 result into the workspace and ``gemm_epilogue``
  stores y from it (one rounding, as the other solvers).
- fp64: as fp32 (:data:`IN_PLACE`: the GEMM's result type is the storage type), with a
  DGEMM and the kernels' double epilogue.

Config (:class:`ChunkConfig`): images per GEMM chunk. The workspace (the im2col matrix
of a chunk, plus the fp32 result of a chunk for fp16/bf16) grows with it; the default is
the largest chunk whose workspace fits the current workspace limit
(``cudnnlite.set_workspace_limit``), so the limit refuses a problem only when even one
image does not fit. Regions start at 256-byte boundaries; ``workspace_size`` is exact.

Precision: fp32 accumulation (cuBLAS compute type 32F), fp64 for float64 (a DGEMM, compute
type 64F; TF32 never applies to it); fp32 stays fp32 unless ``problem.math == "tf32"``
(cuBLAS ``COMPUTE_32F_FAST_TF32``; the emulator rounds the GEMM inputs to TF32). bf16 on
a GPU needs sm_80+ (cuBLAS bf16 GEMMs). Deterministic: our kernels use no atomics, chunks
and groups run in a fixed order, and cuBLAS documents bitwise-reproducible GEMMs from run
to run on one GPU model (see runtime/blas.py).

The tensors must be contiguous in the problem's layout and of the backend's kind (the
GEMMs read raw device pointers or NumPy views, not the host copies the emulator and the
CUDA backend make for kernels of the other kind).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np

from ... import dtypes
from ...dispatch import settings
from ...errors import BadParamError, NotSupportedError
from ...problems.conv import ConvProblem
from ...runtime import blas
from ...runtime.backend import Backend
from ...runtime.caps import Capabilities
from ...runtime.kernel import ModuleSpec
from ..base import APPLICABLE, Applicability, Config, Runner, Solver, not_applicable
from .bwd_filter import common_reason
from .common import IDENTITY_MODE, ConvTensors, Epilogue, flat_2d, shape_struct
from .direct import address, dtype_of

SOURCE = "conv/im2col.cu"
BLOCK = 256
ALIGN = 256  # workspace regions start here (CuPy's pool aligns the base to 256 bytes)
_GRID_CAP = {"cpu": 4096, "cuda": 1 << 20}
_CHUNKS = (256, 64, 16, 4, 1)  # images per chunk tried below N


def _flag(nhwc: bool) -> str:
    return "true" if nhwc else "false"


# dtypes whose GEMM result is already the storage type (cl::acc_t<T> == T): the epilogue
# runs in place on the output, no accumulation buffer in the workspace.
IN_PLACE = ("fp32", "fp64")


def acc_np(dt: dtypes.DType) -> np.dtype:
    """The GEMM result / accumulation buffer type: float32, or float64 for fp64."""
    return np.dtype(np.float64) if dt.short == "fp64" else np.dtype(np.float32)


def module_spec(dt: dtypes.DType) -> ModuleSpec:
    """Every kernel of im2col.cu for storage type ``dt``."""
    names = [f"{kind}<{dt.ctype}, {_flag(nhwc)}>" for kind in ("im2col", "col2im")
             for nhwc in (False, True)]  # fmt: skip
    names.append(f"gemm_epilogue<{dt.ctype}>")
    return ModuleSpec.make(SOURCE, names)


def module_specs() -> list[ModuleSpec]:
    return [module_spec(dt) for dt in dtypes.FLOAT_TYPES]


def align(nbytes: int) -> int:
    return -(-nbytes // ALIGN) * ALIGN


def layout_tag(problem: ConvProblem) -> str:
    return "nhwc" if problem.channels_last else "nchw"


@dataclass(frozen=True)
class ChunkConfig(Config):
    """Images per GEMM chunk (the workspace holds one chunk's im2col matrix / result)."""

    images: int = 1

    def __post_init__(self) -> None:
        if isinstance(self.images, bool) or not isinstance(self.images, int) or self.images < 1:
            raise BadParamError(f"images must be an int >= 1, got {self.images!r}")

    def label(self) -> str:
        return f"images{self.images}"


def chunk_candidates(n: int) -> list[int]:
    """Chunk sizes worth offering, largest first: all N images, then fewer."""
    return [n] + [c for c in _CHUNKS if c < n]


def cublas_reason(problem: ConvProblem, caps: Capabilities | None, direction: str,
                  max_ndim: int = 2) -> str | None:  # fmt: skip
    """What none of the cuBLAS solvers supports, or None."""
    reason = common_reason(problem, direction, max_ndim)
    if reason:
        return reason
    if caps is not None and not caps.emulator and problem.dtype == "bf16" \
            and not caps.bf16_tensor_cores:  # fmt: skip
        return f"bf16 GEMMs in cuBLAS need sm_80+, device is {caps.arch}"
    return None


def pointwise_reason(problem: ConvProblem) -> str | None:
    if any(f != 1 for f in problem.filter):
        return f"needs a 1x1 filter, got {problem.filter}"
    if any(s != 1 for s in problem.strides):
        return f"needs stride 1, got {problem.strides}"
    if any(p != (0, 0) for p in problem.pads):
        return f"needs no padding, got {problem.pads}"
    return None


class ChunkedSolver(Solver):
    """The cuBLAS solvers' shared machinery: the chunk config, checks and kernels."""

    family = "conv_fwd"
    direction = "fwd"
    config_type = ChunkConfig
    deterministic = True
    pointwise_only = False
    max_ndim = 2  # the im2col kernels are 2-D

    def is_applicable(self, problem: ConvProblem, caps: Capabilities) -> Applicability:
        reason = cublas_reason(problem, caps, self.direction, self.max_ndim)
        if not reason and self.pointwise_only:
            reason = pointwise_reason(problem)
        return not_applicable(reason) if reason else APPLICABLE

    def workspace_for(self, problem: ConvProblem, images: int) -> int:
        """Exact workspace bytes with ``images`` per chunk."""
        return 0

    def configs(self, problem: ConvProblem, caps: Capabilities) -> list[ChunkConfig]:
        if self.workspace_for(problem, 1) == self.workspace_for(problem, problem.n):
            return [ChunkConfig(problem.n)]  # the chunk bounds nothing: one chunk
        return [ChunkConfig(c) for c in chunk_candidates(problem.n)]

    def default_config(self, problem: ConvProblem, caps: Capabilities) -> ChunkConfig:
        """The largest chunk whose workspace fits the current limit (else the smallest)."""
        limit = settings.current().workspace_limit
        candidates = self.configs(problem, caps)
        for cfg in candidates:
            if limit is None or self.workspace_for(problem, cfg.images) <= limit:
                return cfg
        return candidates[-1]

    def workspace_size(self, problem: ConvProblem, config: Config) -> int:
        images = config.images if isinstance(config, ChunkConfig) else problem.n
        return self.workspace_for(problem, min(images, problem.n))

    def module_specs(self) -> list[ModuleSpec]:
        return module_specs()

    def check(self, problem: ConvProblem, config: Config) -> ChunkConfig:
        ok = self.is_applicable(problem, None)  # type: ignore[arg-type]
        if not ok:
            raise NotSupportedError(f"{self.name}: {ok.reason}")
        if not isinstance(config, ChunkConfig) or config.images > problem.n:
            raise NotSupportedError(f"{self.name}: config {config!r} is not valid for {problem}")
        return config


# ------------------------------------------------------------------ runner pieces


def grid(total: int, backend: Backend) -> int:
    return max(1, min(-(-total // BLOCK), _GRID_CAP[backend.name]))


def region(workspace: Any, offset: int, count: int, dtype: Any) -> Any:
    """``count`` elements of ``dtype`` at byte ``offset`` of a uint8 workspace."""
    return workspace[offset : offset + count * np.dtype(dtype).itemsize].view(dtype)


def need_workspace(workspace: Any, nbytes: int) -> None:
    if not nbytes:
        return
    if workspace is None or workspace.nbytes < nbytes:
        got = "none" if workspace is None else f"{workspace.nbytes} bytes"
        raise BadParamError(f"workspace: {nbytes} bytes needed, got {got}")
    if address(workspace) % 16:
        raise BadParamError("workspace: must be 16-byte aligned")


def is_plain(e: Epilogue) -> bool:
    return not e.has_bias and not e.has_z and e.act_mode == IDENTITY_MODE


class Geometry:
    """The GEMM view of a problem: sizes per group, per image, per chunk."""

    def __init__(self, problem: ConvProblem) -> None:
        p = problem
        self.p, self.nhwc, self.groups = p, p.channels_last, p.groups
        self.cg, self.kg = p.c_per_group, p.k_per_group
        self.taps = p.filter_taps
        self.kc = self.cg * self.taps  # reduction length of one group
        self.ctaps = p.c * self.taps  # a col row (NHWC) / col rows of an image (NCHW)
        self.pq = int(np.prod(p.out_spatial))
        self.hw = int(np.prod(p.spatial))
        self.tf32 = p.math == "tf32" and p.dtype != "fp64"  # no TF32 for doubles
        self.dt = dtype_of(p)
        self.tag = f"{layout_tag(p)}_{self.dt.short}"


class EpilogueKernel:
    """Launches gemm_epilogue<T> over one chunk of an output."""

    def __init__(self, backend: Backend, dt: dtypes.DType) -> None:
        self.backend = backend
        self.kernel = backend.kernel(module_spec(dt), f"gemm_epilogue<{dt.ctype}>")
        self.name = f"gemm_epilogue_{dt.short}"
        self.dt = dt

    def __call__(self, acc: Any, out: Any, z: Any, bias: Any, e: Epilogue, base: int,
                 channels: int, inner: int) -> None:  # fmt: skip
        count = int(out.size)
        args = (acc, out, z if z is not None else out, bias if bias is not None else out,
                e.struct(self.dt), np.int64(base), np.int64(count), np.int32(channels),
                np.int64(inner))  # fmt: skip
        self.kernel((grid(count, self.backend),), (BLOCK,), args)


def gemm_name(geo: Geometry, what: str, calls: int) -> str:
    math = "_tf32" if geo.tf32 else ""
    return f"cublas_gemm_{what}_{geo.tag}{math}_x{calls}"


# ------------------------------------------------------------------ forward


class _ForwardRunner(Runner):
    """Chunks of images: [im2col ->] GEMM -> [epilogue]."""

    def __init__(self, backend: Backend, problem: ConvProblem, images: int, im2col: bool,
                 workspace_bytes: int) -> None:  # fmt: skip
        self.backend, self.problem, self.images = backend, problem, images
        self.geo = geo = Geometry(problem)
        self.shape = shape_struct(problem)
        self.workspace_bytes = workspace_bytes
        self.col_elems = images * geo.pq * geo.ctaps if im2col else 0
        self.acc_offset = align(self.col_elems * geo.dt.itemsize)
        self.im2col = None
        if im2col:
            self.im2col = backend.kernel(module_spec(geo.dt),
                                         f"im2col<{geo.dt.ctype}, {_flag(geo.nhwc)}>")  # fmt: skip
        self.epilogue = EpilogueKernel(backend, geo.dt)
        self.last: list[str] = []

    def _gemm(self, src: Any, src_off: int, w: Any, out: Any, cn: int, alpha: float,
              beta: float) -> int:  # fmt: skip
        """out (a chunk of cn images of y, or its fp32 image) = alpha * conv + beta * out;
        src: x or the im2col matrix, its chunk at element src_off. Returns the calls made."""
        g, b = self.geo, self.backend
        rows = g.pq if self.im2col is not None else g.hw  # src columns per image
        if g.nhwc:
            a = blas.Mat(src, cn * rows, g.kc, g.ctaps, src_off, g.kc)
            wm = blas.Mat(w, g.kg, g.kc, g.kc, 0, g.kg * g.kc)
            c = blas.Mat(out, cn * g.pq, g.kg, g.p.k, 0, g.kg)
            blas.gemm(b, a, wm, c, trans_b=True, batch=g.groups, alpha=alpha, beta=beta,
                      tf32=g.tf32)  # fmt: skip
            return 1
        for grp in range(g.groups):
            wm = blas.Mat(w, g.kg, g.kc, g.kc, grp * g.kg * g.kc, 0)
            xm = blas.Mat(src, g.kc, g.pq, g.pq, src_off + grp * g.kc * g.pq, g.ctaps * g.pq)
            c = blas.Mat(out, g.kg, g.pq, g.pq, grp * g.kg * g.pq, g.p.k * g.pq)
            blas.gemm(b, wm, xm, c, batch=cn, alpha=alpha, beta=beta, tf32=g.tf32)
        return g.groups

    def __call__(self, tensors: ConvTensors, epilogue: Epilogue, workspace: Any) -> None:
        need_workspace(workspace, self.workspace_bytes)
        g, e = self.geo, epilogue
        y = tensors.y.reshape(-1)
        x = tensors.x.reshape(-1)
        z = None if tensors.z is None else tensors.z.reshape(-1)
        plain = is_plain(e)
        z_is_y = z is not None and e.has_z and address(z) == address(y)
        per_image = g.p.k * g.pq
        names, calls, epilogues = [], 0, 0
        for n0 in range(0, g.p.n, self.images):
            cn = min(self.images, g.p.n - n0)
            base, count = n0 * per_image, cn * per_image
            if self.im2col is not None:
                col = region(workspace, 0, cn * g.pq * g.ctaps, tensors.x.dtype)
                self.im2col((grid(col.size, self.backend),), (BLOCK,),
                            (tensors.x, col, self.shape, np.int32(n0), np.int32(cn)))  # fmt: skip
                src, src_off = col, 0
            else:
                src, src_off = x, n0 * g.p.c * g.hw
            y_chunk = y[base : base + count]
            z_chunk = None if z is None else z[base : base + count]
            inner = 1 if g.nhwc else g.pq
            if plain:
                calls += self._gemm(src, src_off, tensors.w, y_chunk, cn, e.alpha, 0.0)
            elif g.dt.short not in IN_PLACE:
                acc = region(workspace, self.acc_offset, count, np.float32)
                calls += self._gemm(src, src_off, tensors.w, acc, cn, 1.0, 0.0)
                self.epilogue(acc, y_chunk, z_chunk, tensors.bias, e, base, g.p.k, inner)
                epilogues += 1
            elif z_is_y:  # y holds z: cuBLAS blends it, the kernel adds bias and activation
                calls += self._gemm(src, src_off, tensors.w, y_chunk, cn, e.alpha, e.alpha2)
                rest = dataclasses.replace(e, alpha=1.0, alpha2=0.0, has_z=False)
                if not is_plain(rest):
                    self.epilogue(y_chunk, y_chunk, None, tensors.bias, rest, base, g.p.k, inner)
                    epilogues += 1
            else:
                calls += self._gemm(src, src_off, tensors.w, y_chunk, cn, 1.0, 0.0)
                self.epilogue(y_chunk, y_chunk, z_chunk, tensors.bias, e, base, g.p.k, inner)
                epilogues += 1
        if self.im2col is not None:
            names.append(f"im2col_{g.tag}")
        names.append(gemm_name(g, "fwd", calls))
        if epilogues:
            names.append(self.epilogue.name)
        self.last = names

    @property
    def kernel_names(self) -> list[str]:
        return list(self.last)


class Gemm1x1Solver(ChunkedSolver):
    """1x1, stride 1, unpadded: one cuBLAS GEMM on x and w as they are (no copy)."""

    name = "conv_fwd_gemm_cublas_1x1"
    pointwise_only = True
    max_ndim = 3  # a pointwise 3-D problem runs as the 2-D one it equals (flat_2d)

    def workspace_for(self, problem: ConvProblem, images: int) -> int:
        if problem.dtype in IN_PLACE:
            return 0
        return 4 * images * int(np.prod(problem.out_spatial)) * problem.k  # fp32 result

    def prepare(self, backend: Backend, problem: ConvProblem, config: Config) -> Runner:
        cfg = self.check(problem, config)
        return _ForwardRunner(backend, flat_2d(problem), cfg.images, False,
                              self.workspace_size(problem, cfg))  # fmt: skip


class Im2colSolver(ChunkedSolver):
    """im2col into the workspace, then the 1x1 solver's GEMMs; any problem."""

    name = "conv_fwd_im2col_gemm_cublas"

    def workspace_for(self, problem: ConvProblem, images: int) -> int:
        pq = int(np.prod(problem.out_spatial))
        col = images * pq * problem.c * problem.filter_taps * dtype_of(problem).itemsize
        if problem.dtype in IN_PLACE:
            return col
        return align(col) + 4 * images * pq * problem.k

    def prepare(self, backend: Backend, problem: ConvProblem, config: Config) -> Runner:
        cfg = self.check(problem, config)
        return _ForwardRunner(backend, problem, cfg.images, True,
                              self.workspace_size(problem, cfg))  # fmt: skip
