"""cudnnlite on Dask arrays: many blocks, many workers, the same answer as one call.

- :func:`sequential` runs a list of layers (cudnnlite functions with their weights bound by
  ``functools.partial``, or any callable on an array) over a Dask array chunked along the
  batch axis: one task per batch chunk, the layers' weights sent once per worker.
- :func:`conv2d` and :func:`conv3d` convolve one large image or volume chunked along its
  spatial axes: each block is extended by a halo of its neighbours' rows (zeros at the
  image border, where the single call pads with zeros), convolved without padding, and
  cropped to the outputs it owns. The result equals the single call exactly: every block
  runs the solver and config chosen for the whole input, and Winograd's output tiles stay
  on the whole output's tile grid.

The blocks may be NumPy (emulator) or CuPy (GPU) arrays; the functions build the graph and
run nothing except, for :func:`sequential`, a batch-of-one dry run that finds the output
shape. Kernels compile once per worker process into the shared disk cache
(``CUDNNLITE_CACHE_DIR``); tuning results from every worker merge into the one user DB
(``CUDNNLITE_TUNING_DIR``, written under a file lock).

Needs the ``dask`` extra (``pip install "cudnnlite[dask]"``); ``import cudnnlite`` never
imports this module.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

try:
    import dask
    import dask.array as da
except ImportError as exc:  # pragma: no cover - exercised by a subprocess test
    raise ImportError(
        "cudnnlite.dask needs Dask: pip install 'cudnnlite[dask]' "
        '(or pip install "dask[array]" distributed)'
    ) from exc

from .dispatch.plans import Plan
from .dispatch.select import Choice, select, usable
from .errors import BadParamError, NotSupportedError
from .ops._arrays import array_module
from .ops.conv_args import make_problem
from .ops.conv_plan import ConvPlan
from .problems.conv import ConvProblem
from .runtime.caps import capabilities
from .runtime.select import backend_for

# Winograd solvers compute outputs in m x m tiles (m = 2 or 4) on a grid anchored at output
# 0, and each output's rounding depends on its place in the tile and on the whole tile's
# input. A block therefore computes from and to multiples of 4 in whole-output coordinates
# (a few rows more than it keeps) wherever a Winograd solver may run.
_WINOGRAD_ALIGN = 4


def _check_dask_array(name: str, x: Any) -> None:
    if not isinstance(x, da.Array):
        raise BadParamError(
            f"{name}: expected a dask.array.Array, got {type(x).__name__} "
            "(call cudnnlite directly on NumPy/CuPy arrays)"
        )


def _check_block_array(name: str, a: Any) -> None:
    if isinstance(a, da.Array):
        raise BadParamError(
            f"{name}: expected a NumPy or CuPy array (it is sent whole to every block), got a "
            f"Dask array; pass {name}.compute()"
        )


# ------------------------------------------------------------------ batch-sharded layers


def _run_layers(block: Any, layers: Sequence[Callable[[Any], Any]]) -> Any:
    y = block
    for i, layer in enumerate(layers):
        y = layer(y)
        if getattr(y, "ndim", 0) < 1 or y.shape[0] != block.shape[0]:
            raise BadParamError(
                f"layers: layer {i} ({_layer_name(layer)}) changed the batch axis from "
                f"{block.shape[0]} to {getattr(y, 'shape', None)}; sequential() shards the "
                "batch, so every layer must keep it"
            )
    return y


def _layer_name(layer: Any) -> str:
    func = getattr(layer, "func", layer)  # functools.partial
    return getattr(func, "__name__", type(layer).__name__)


def sequential(
    x: Any,
    layers: Sequence[Callable[[Any], Any]],
    *,
    out_shape: Sequence[int] | None = None,
    dtype: Any = None,
) -> Any:
    """Runs ``layers`` in order over ``x``, one task per batch chunk (inference).

    Args:
        x: a Dask array, chunked along axis 0 (the batch) only; its blocks are NumPy
            arrays (the emulator) or CuPy arrays (the GPU).
        layers: callables taking and returning an array, e.g.
            ``functools.partial(cudnnlite.conv2d, w=w, padding=1)``,
            ``functools.partial(cudnnlite.batch_norm_forward_inference, running_mean=m,
            running_var=v, weight=g, bias=b)``, ``cudnnlite.relu``,
            ``functools.partial(cudnnlite.max_pool2d, kernel_size=2)``. Each keeps the batch
            axis. They are sent once to each worker (one graph key), not once per task.
        out_shape, dtype: the shape of one output sample (without the batch axis) and its
            dtype; when both are given, the batch-of-one dry run that finds them is skipped.

    Returns:
        a Dask array with x's batch chunks and the layers' output shape and dtype.
    """
    _check_dask_array("x", x)
    if x.ndim < 1:
        raise BadParamError("x: expected an array with a batch axis, got a 0-d array")
    chunked = [ax for ax in range(1, x.ndim) if len(x.chunks[ax]) > 1]
    if chunked:
        raise BadParamError(
            f"x: chunked along axis {chunked[0]}; sequential() shards the batch axis only "
            f"(x.rechunk({{{', '.join(f'{ax}: -1' for ax in chunked)}}}))"
        )
    if isinstance(layers, (str, bytes)) or not isinstance(layers, Sequence) or not layers:
        raise BadParamError(f"layers: expected a non-empty list of callables, got {layers!r}")
    for i, layer in enumerate(layers):
        if not callable(layer):
            raise BadParamError(f"layers: item {i} is not callable: {layer!r}")
    layers = tuple(layers)
    if (out_shape is None) != (dtype is None):
        raise BadParamError("out_shape, dtype: give both (to skip the dry run) or neither")
    if out_shape is None:
        # One sample of zeros through the layers: the output shape and dtype, and any
        # argument error raised here rather than later on a worker.
        probe = array_module(x._meta).zeros((1, *x.shape[1:]), dtype=x.dtype)
        y = _run_layers(probe, layers)
        out_shape, dtype = tuple(y.shape[1:]), y.dtype
    out_shape = tuple(int(d) for d in out_shape)
    meta = array_module(x._meta).empty((0,) * (1 + len(out_shape)), dtype=dtype)
    shared = dask.delayed(layers, pure=True, traverse=False)
    return da.map_blocks(
        _run_layers,
        x,
        shared,
        chunks=(x.chunks[0], *((d,) for d in out_shape)),
        meta=meta,
        dtype=meta.dtype,
        token="cudnnlite_sequential",  # a prefix; the key adds a hash of the inputs
    )


# ------------------------------------------------------------------ halo'd convolution


@dataclass(frozen=True)
class AxisHalo:
    """How the blocks along one spatial axis map to the output.

    ``depth``: halo rows added on both sides of every block (zeros at the image border).
    Per block: ``owned`` output rows [lo, hi), ``computed`` output rows [c0, c1) (a
    superset, aligned for Winograd) and ``start``, the first row of the haloed block
    the computation reads.
    """

    depth: int
    owned: tuple[tuple[int, int], ...]
    computed: tuple[tuple[int, int], ...]
    starts: tuple[int, ...]

    @property
    def out_chunks(self) -> tuple[int, ...]:
        return tuple(hi - lo for lo, hi in self.owned)


def axis_halo(
    chunks: Sequence[int],
    filt: int,
    stride: int,
    dilation: int,
    pads: tuple[int, int],
    align: int = 1,
    *,
    axis: int = 0,
) -> AxisHalo:
    """The halo plan of one axis of size ``sum(chunks)``; BadParamError when a block would
    own no output or a chunk is smaller than the halo."""
    size = sum(chunks)
    extent = dilation * (filt - 1) + 1
    before, after = pads
    n_out = (size + before + after - extent) // stride + 1
    centre = (extent - 1) // 2
    # Output i belongs to the block holding input row i*stride - before + centre (its
    # window's centre); outputs whose centre lies in the padding go to the end blocks.
    edges = [0]
    a = 0
    for c in chunks[:-1]:
        a += c
        edges.append(min(n_out, max(0, -(-(a + before - centre) // stride))))
    edges.append(n_out)
    owned = tuple(zip(edges[:-1], edges[1:], strict=True))
    for k, (lo, hi) in enumerate(owned):
        if hi <= lo:
            raise BadParamError(
                f"x: block {k} along axis {axis} (chunks {tuple(chunks)}) would own no output "
                f"(stride {stride}, filter {filt}, padding {pads}); use larger chunks"
            )
    computed = []
    need_before = need_after = 0
    a = 0
    for (lo, hi), c in zip(owned, chunks, strict=True):
        c0 = lo // align * align
        c1 = min(n_out, -(-hi // align) * align)
        first = c0 * stride - before  # first input row read (whole-input coordinates)
        last = (c1 - 1) * stride - before + extent  # one past the last
        need_before = max(need_before, a - first)
        need_after = max(need_after, last - (a + c))
        computed.append((c0, c1))
        a += c
    depth = max(need_before, need_after, 0)
    if len(chunks) > 1 and min(chunks) < depth:
        raise BadParamError(
            f"x: chunks along axis {axis} must be at least the halo of {depth} rows "
            f"(filter {filt}, dilation {dilation}, padding {pads}, stride {stride}); the "
            f"smallest is {min(chunks)}: rechunk with larger chunks"
        )
    starts = []
    a = 0
    for (c0, _), c in zip(computed, chunks, strict=True):
        starts.append(c0 * stride - before - (a - depth))
        a += c
    return AxisHalo(depth, owned, tuple(computed), tuple(starts))


@dataclass(frozen=True)
class _ConvJob:
    """Everything a block needs besides its data, the filter and the bias."""

    whole: ConvProblem  # the single call's problem: its solver and config run every block
    nd: int
    axes: tuple[int, ...]  # the spatial axes of x
    halos: tuple[AxisHalo, ...]
    layout: str
    stride: tuple[int, ...]
    dilation: tuple[int, ...]
    groups: int
    math: str
    algo: str
    epilogue: tuple[tuple[str, Any], ...]


def _block_choice(job: _ConvJob, part: ConvProblem, backend: Any) -> Choice:
    """The whole problem's (solver, config), checked against this block's problem."""
    whole = select(job.whole, backend, job.algo)
    caps = capabilities(backend)
    solver, config = whole.solver, whole.config
    if not solver.is_valid(config, part, caps):
        config = solver.default_config(part, caps)
    app = usable(solver, part, caps, config)
    if not app:
        raise NotSupportedError(
            f"{solver.name}, chosen for the whole input ({job.whole.key()}), cannot run the "
            f"block {part.key()}: {app.reason}; pass algo= a solver that can, or larger chunks"
        )
    return Choice(solver, config, f"{whole.source}, for {job.whole.key()}")


def _extent(problem: ConvProblem, i: int) -> int:
    return problem.dilations[i] * (problem.filter[i] - 1) + 1


def _conv_block(block: Any, w: Any, bias: Any, job: _ConvJob, block_id: tuple[int, ...]) -> Any:
    reads = [slice(None)] * block.ndim
    keeps = [slice(None)] * block.ndim
    for i, (ax, halo) in enumerate(zip(job.axes, job.halos, strict=True)):
        k = block_id[ax]
        (lo, hi), (c0, c1) = halo.owned[k], halo.computed[k]
        start = halo.starts[k]
        reads[ax] = slice(start, start + (c1 - c0 - 1) * job.stride[i] + _extent(job.whole, i))
        keeps[ax] = slice(lo - c0, hi - c0)
    part_x = block[tuple(reads)]
    backend = backend_for(part_x, w, bias, names=("x", "w", "bias"))
    part = make_problem(
        part_x.shape, w.shape, part_x.dtype, stride=job.stride, padding=0,
        dilation=job.dilation, groups=job.groups, layout=job.layout, math_mode=job.math,
        nd=job.nd,
    )  # fmt: skip
    plan = ConvPlan(Plan(backend, part, _block_choice(job, part, backend)))
    y = plan(part_x, w, bias, **dict(job.epilogue))
    return y[tuple(keeps)]


def _conv(
    nd: int,
    x: Any,
    w: Any,
    bias: Any,
    stride: Any,
    padding: Any,
    dilation: Any,
    groups: int,
    layout: str,
    epilogue: dict[str, Any],
    math: str,
    algo: str,
) -> Any:
    _check_dask_array("x", x)
    _check_block_array("w", w)
    if bias is not None:
        _check_block_array("bias", bias)
    if not isinstance(algo, str):
        raise BadParamError(f"algo: expected 'auto' or a solver name, got {algo!r}")
    backend_for(x._meta, w, bias, names=("x", "w", "bias"))
    if x.ndim != nd + 2:
        raise BadParamError(
            f"x: expected a batched {nd + 2}-D dask array (the batch is what its chunks split; "
            f"an unbatched one: x[None]), got shape {tuple(x.shape)}"
        )
    whole = make_problem(
        x.shape, w.shape, x.dtype, stride=stride, padding=padding, dilation=dilation,
        groups=groups, layout=layout, math_mode=math, nd=nd,
    )  # fmt: skip
    if w.dtype != x.dtype:
        raise BadParamError(f"w: expected dtype {x.dtype} like x, got {w.dtype}")
    if bias is not None and (tuple(bias.shape) != (whole.k,) or bias.dtype != x.dtype):
        raise BadParamError(
            f"bias: expected shape ({whole.k},) and dtype {x.dtype}, got "
            f"{tuple(bias.shape)} {bias.dtype}"
        )
    channel_axis = x.ndim - 1 if whole.channels_last else 1
    if len(x.chunks[channel_axis]) > 1:
        raise BadParamError(
            f"x: chunked along the channel axis ({channel_axis}); every block needs all the "
            f"channels (x.rechunk({{{channel_axis}: -1}}))"
        )
    axes = tuple(range(1, 1 + nd)) if whole.channels_last else tuple(range(2, 2 + nd))
    winograd_grid = (
        nd == 2
        and whole.filter == (3, 3)
        and whole.strides == (1, 1)
        and (whole.dilations == (1, 1) and whole.groups == 1)
    )
    align = _WINOGRAD_ALIGN if winograd_grid else 1
    halos = tuple(
        axis_halo(
            x.chunks[ax],
            whole.filter[i],
            whole.strides[i],
            whole.dilations[i],
            whole.pads[i],
            align,
            axis=ax,
        )  # fmt: skip
        for i, ax in enumerate(axes)
    )
    job = _ConvJob(
        whole=whole,
        nd=nd,
        axes=axes,
        halos=halos,
        layout=layout,
        stride=whole.strides,
        dilation=whole.dilations,
        groups=groups,
        math=math,
        algo=algo,
        epilogue=tuple(sorted(epilogue.items())),
    )
    chunks = list(x.chunks)
    chunks[channel_axis] = (whole.k,)
    for ax, halo in zip(axes, halos, strict=True):
        chunks[ax] = halo.out_chunks
    meta = array_module(x._meta).empty((0,) * x.ndim, dtype=x.dtype)
    return da.map_overlap(
        _conv_block,
        x,
        depth={ax: halo.depth for ax, halo in zip(axes, halos, strict=True)},
        boundary={ax: 0 for ax in axes},
        trim=False,
        allow_rechunk=False,
        chunks=tuple(chunks),
        meta=meta,
        dtype=x.dtype,
        token="cudnnlite_conv",
        w=dask.delayed(w, pure=True),
        bias=None if bias is None else dask.delayed(bias, pure=True),
        job=job,
    )


def conv2d(
    x: Any,
    w: Any,
    bias: Any = None,
    stride: Any = 1,
    padding: Any = 0,
    dilation: Any = 1,
    groups: int = 1,
    *,
    layout: str = "NCHW",
    activation: str | None = None,
    activation_coef: float | None = None,
    alpha: float = 1.0,
    math: str = "default",
    algo: str = "auto",
) -> Any:
    """:func:`cudnnlite.conv2d` of a Dask array chunked along its spatial axes (and the
    batch), block by block with halos; equal to the single call.

    Args:
        x: a Dask array (N, C, H, W) for "NCHW" or (N, H, W, C) for "NHWC", one chunk along
            C; H and W chunks at least the halo (about half the dilated filter, plus 3 rows
            for a 3x3 stride-1 filter, which Winograd solvers may run).
        w, bias: NumPy or CuPy arrays (as the blocks), sent once to each worker.
        stride, padding, dilation, groups, activation, activation_coef, alpha, math, algo:
            as :func:`cudnnlite.conv2d`. Any stride works with any chunks, as long as each
            block owns an output.

    Returns:
        a Dask array chunked like x along N, H, W (the output rows each block owns).
    """
    epilogue = {"activation": activation, "activation_coef": activation_coef, "alpha": alpha}
    return _conv(2, x, w, bias, stride, padding, dilation, groups, layout, epilogue, math, algo)


def conv3d(
    x: Any,
    w: Any,
    bias: Any = None,
    stride: Any = 1,
    padding: Any = 0,
    dilation: Any = 1,
    groups: int = 1,
    *,
    layout: str = "NCDHW",
    activation: str | None = None,
    activation_coef: float | None = None,
    alpha: float = 1.0,
    math: str = "default",
    algo: str = "auto",
) -> Any:
    """:func:`cudnnlite.conv3d` of a Dask array (N, C, D, H, W) for "NCDHW" or
    (N, D, H, W, C) for "NDHWC", chunked along D, H, W (and N); as :func:`conv2d`."""
    epilogue = {"activation": activation, "activation_coef": activation_coef, "alpha": alpha}
    return _conv(3, x, w, bias, stride, padding, dilation, groups, layout, epilogue, math, algo)


__all__ = ["AxisHalo", "axis_halo", "conv2d", "conv3d", "sequential"]
