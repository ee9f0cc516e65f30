"""Cases, operands, PyTorch's side and error bounds of the public convolution property tests
(tests/test_conv_public_properties.py, whose docstring derives the bounds)."""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

hypothesis = pytest.importorskip("hypothesis")
torch = pytest.importorskip("torch")
from hypothesis import HealthCheck, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from property_support import assert_within  # noqa: E402

import cudnnlite as cl  # noqa: E402
from cudnnlite.dispatch import registry  # noqa: E402
from cudnnlite.dispatch.select import ALGO_FAMILIES  # noqa: E402
from cudnnlite.errors import NotSupportedError  # noqa: E402
from cudnnlite.testing import (  # noqa: E402
    ACCUMULATION_EPS,
)

F = torch.nn.functional
HYPO = settings(suppress_health_check=[HealthCheck.function_scoped_fixture])

FWD = {1: cl.conv1d, 2: cl.conv2d, 3: cl.conv3d}
BWD_DATA = {1: cl.conv1d_backward_data, 2: cl.conv2d_backward_data, 3: cl.conv3d_backward_data}
BWD_FILTER = {1: cl.conv1d_backward_filter, 2: cl.conv2d_backward_filter,
              3: cl.conv3d_backward_filter}  # fmt: skip
BWD_BIAS = {1: cl.conv1d_backward_bias, 2: cl.conv2d_backward_bias, 3: cl.conv3d_backward_bias}
TRANSPOSE = {1: cl.conv_transpose1d, 2: cl.conv_transpose2d, 3: cl.conv_transpose3d}
TORCH_FWD = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}
TORCH_TRANSPOSE = {1: F.conv_transpose1d, 2: F.conv_transpose2d, 3: F.conv_transpose3d}
LAYOUTS = {1: ("NCW", "NWC"), 2: ("NCHW", "NHWC"), 3: ("NCDHW", "NDHWC")}
SOLVERS = {d: [n for n in registry.NAMES if n.startswith(f"conv_{d}_")]
           for d in ("fwd", "bwd_data", "bwd_filter")}  # fmt: skip
SHORT = {"float32": "fp32", "float64": "fp64", "float16": "fp16"}
UNIT = {"fp32": 2.0**-24, "fp16": 2.0**-24, "fp64": 2.0**-53}  # the accumulation type's
OUT_RTOL = {"fp32": 0.0, "fp64": 0.0, "fp16": 2.0**-11}
WINOGRAD_GROWTH = 256.0


# ------------------------------------------------------------------ cases


@dataclasses.dataclass(frozen=True)
class Case:
    """One convolution as a user writes it. Forward: c input and k output channels, w
    (k, c/g, *filt). Transposed: c = C_in, k = C_out, w (c, k/g, *filt). Channels-last
    moves the channel dim of x, y and w last. n None: unbatched."""

    nd: int
    n: int | None
    c: int
    k: int
    groups: int
    spatial: tuple[int, ...]
    filt: tuple[int, ...]
    stride: Any = 1  # as passed: an int, a tuple or a 1-tuple
    padding: Any = 0  # as passed: also (before, after) pairs, "same", "valid"
    dilation: Any = 1
    channels_last: bool = False
    dtype: str = "float32"
    bias: bool = True
    seed: int = 0
    transposed: bool = False
    output_padding: Any = 0

    @property
    def layout(self) -> str:
        return LAYOUTS[self.nd][self.channels_last]

    @property
    def short(self) -> str:
        return SHORT[self.dtype]

    def per_dim(self, value: Any) -> tuple[int, ...]:
        """An int or a 1-tuple broadcast to every dim, as PyTorch does."""
        if isinstance(value, int):
            return (value,) * self.nd
        return tuple(value) * self.nd if len(value) == 1 else tuple(value)

    @property
    def strides(self) -> tuple[int, ...]:
        return self.per_dim(self.stride)

    @property
    def dils(self) -> tuple[int, ...]:
        return self.per_dim(self.dilation)

    @property
    def pads(self) -> tuple[tuple[int, int], ...]:
        p = self.padding
        if p == "valid":
            return ((0, 0),) * self.nd
        if p == "same":  # PyTorch: the odd one of an odd total after
            totals = [d * (f - 1) for d, f in zip(self.dils, self.filt, strict=True)]
            return tuple((t // 2, t - t // 2) for t in totals)
        if isinstance(p, tuple) and len(p) == 2 * self.nd:
            return tuple((p[2 * i], p[2 * i + 1]) for i in range(self.nd))
        return tuple((v, v) for v in self.per_dim(p))

    def shape(self, channels: int, spatial: tuple[int, ...]) -> tuple[int, ...]:
        inner = (*spatial, channels) if self.channels_last else (channels, *spatial)
        return inner if self.n is None else (self.n, *inner)

    @property
    def x_shape(self) -> tuple[int, ...]:
        return self.shape(self.c, self.spatial)

    @property
    def w_shape(self) -> tuple[int, ...]:
        lead, per_group = (self.c, self.k) if self.transposed else (self.k, self.c)
        cg = per_group // self.groups
        return (lead, *self.filt, cg) if self.channels_last else (lead, cg, *self.filt)

    @property
    def out_spatial(self) -> tuple[int, ...]:
        if self.transposed:
            ops = self.per_dim(self.output_padding)
            return tuple((i - 1) * s - 2 * p + d * (f - 1) + op + 1 for i, s, (p, _), d, f, op
                         in zip(self.spatial, self.strides, self.pads, self.dils, self.filt,
                                ops, strict=True))  # fmt: skip
        return tuple((i + b + a - d * (f - 1) - 1) // s + 1 for i, (b, a), d, f, s
                     in zip(self.spatial, self.pads, self.dils, self.filt, self.strides,
                            strict=True))  # fmt: skip

    @property
    def y_shape(self) -> tuple[int, ...]:
        return self.shape(self.k, self.out_spatial)

    @property
    def winograd_ok(self) -> bool:
        """Whether a Winograd solver may run it (forward or backward data, on auto too)."""
        return (self.nd == 2 and self.filt == (3, 3) and self.strides == (1, 1)
                and self.dils == (1, 1) and self.groups == 1 and self.short != "fp64")  # fmt: skip

    def conv_args(self) -> tuple:
        """stride, padding, dilation, groups as the forward and its gradients take them."""
        return (self.stride, self.padding, self.dilation, self.groups)


def make(nd: int, n: int | None, c: int, k: int, spatial: tuple, filt: tuple, **kw: Any) -> Case:
    return Case(nd=nd, n=n, c=c, k=k, groups=kw.pop("groups", 1), spatial=spatial, filt=filt,
                **kw)  # fmt: skip


def _form(draw: st.DrawFn, nd: int, values: st.SearchStrategy) -> Any:
    """An int, a 1-tuple (PyTorch broadcasts it) or one value per dim."""
    kind = draw(st.sampled_from(("int", "one", "tuple")))
    if kind == "int":
        return draw(values)
    if kind == "one":
        return (draw(values),)
    return tuple(draw(values) for _ in range(nd))


@st.composite
def cases(draw: st.DrawFn, kind: str = "any") -> Case:
    """A small valid forward convolution; kind "winograd" steers to 3x3 stride 1 groups 1
    (the Winograd family applies), "transposed" draws a conv_transpose."""
    wino = kind == "winograd"
    nd = 2 if wino else draw(st.sampled_from((1, 2, 2, 3)))
    groups = 1 if wino else draw(st.sampled_from((1, 1, 2, 3)))
    cpg, kpg = draw(st.integers(1, 6)), draw(st.integers(1, 6))
    if not wino and draw(st.integers(0, 4)) == 0:  # depthwise, channel multiplier kpg
        groups, cpg, kpg = draw(st.integers(1, 6)), 1, draw(st.integers(1, 3))
    filt = (3, 3) if wino else tuple(draw(st.integers(1, 3)) for _ in range(nd))
    stride = 1 if wino else _form(draw, nd, st.integers(1, 3))
    dilation = draw(st.sampled_from((1, (1,), (1, 1)))) if wino else _form(
        draw, nd, st.integers(1, 2))  # fmt: skip
    case = make(nd, draw(st.sampled_from((None, 0, 1, 1, 2, 2))), cpg * groups, kpg * groups,
                (1,) * nd, filt, groups=groups, stride=stride, dilation=dilation,
                channels_last=draw(st.booleans()), bias=draw(st.booleans()),
                dtype=draw(st.sampled_from(("float32", "float32", "float64", "float16"))),
                seed=draw(st.integers(0, 2**16)))  # fmt: skip
    if kind == "transposed":
        return _transposed(draw, case)
    form = draw(st.sampled_from(("int", "one", "tuple", "pairs", "valid", "same")))
    pad = st.integers(0, 3)
    if form == "same":  # PyTorch's "same" needs stride 1
        case = dataclasses.replace(case, stride=draw(st.sampled_from((1, (1,), (1,) * nd))))
    padding = {
        "int": lambda: draw(pad),
        "one": lambda: (draw(pad),),
        "tuple": lambda: tuple(draw(pad) for _ in range(nd)),
        "pairs": lambda: tuple(draw(st.integers(0, 2)) for _ in range(2 * nd)),
    }.get(form, lambda: form)()
    case = dataclasses.replace(case, padding=padding)
    # each size at least the dilated filter once padded: a non-empty output
    sizes = [st.integers(1, 4)] + [st.integers(1, 7)] * 2 if nd == 3 else [st.integers(1, 7)] * nd
    spatial = tuple(max(draw(s), d * (f - 1) + 1 - b - a) for s, d, f, (b, a)
                    in zip(sizes, case.dils, filt, case.pads, strict=True))  # fmt: skip
    return dataclasses.replace(case, spatial=spatial)


def _transposed(draw: st.DrawFn, case: Case) -> Case:
    """case's channels and hyper-parameters as a conv_transpose: symmetric int padding and
    output_padding < max(stride, dilation) (PyTorch's rules), an output of at least 1."""
    nd = case.nd
    spatial = tuple(draw(st.integers(1, 4 if nd == 3 else 5)) for _ in range(nd))
    ops = tuple(draw(st.integers(0, max(s, d) - 1)) for s, d in zip(case.strides, case.dils,
                                                                     strict=True))  # fmt: skip
    output_padding = ops if draw(st.booleans()) or len(set(ops)) > 1 else ops[0]
    # the output (i-1)*s - 2p + d*(f-1) + op + 1 stays >= 1
    room = [((i - 1) * s + d * (f - 1) + op) // 2 for i, s, d, f, op
            in zip(spatial, case.strides, case.dils, case.filt, ops, strict=True)]  # fmt: skip
    pads = tuple(min(draw(st.integers(0, 2)), r) for r in room)
    padding = pads[0] if len(set(pads)) == 1 and draw(st.booleans()) else pads
    return dataclasses.replace(case, transposed=True, spatial=spatial, padding=padding,
                    output_padding=output_padding)  # fmt: skip


# Edge cases every run starts with (hypothesis @example): 1x1 image padded by 3, a stride
# larger than the image, K = C = 1 with an odd "same" total, an empty batch, unbatched
# channels-last, the 3-D 1x3x3 and 3x1x1 filters, a Winograd-applicable 3x3, depthwise fp16.
EDGE_CASES = (
    make(2, 1, 2, 3, (1, 1), (3, 3), padding=3),
    make(2, 2, 3, 2, (2, 3), (1, 2), stride=3, bias=False),
    make(2, 2, 1, 1, (5, 6), (2, 3), padding="same", dilation=(1, 2)),  # totals 1 and 4
    make(2, 0, 4, 6, (5, 5), (3, 3), padding=1),
    make(2, None, 3, 4, (5, 6), (2, 3), padding="valid", channels_last=True),
    make(3, 1, 2, 3, (2, 5, 5), (1, 3, 3), padding=(0, 1, 1)),
    make(3, 2, 3, 2, (4, 3, 3), (3, 1, 1), stride=(2, 1, 1), channels_last=True),
    make(2, 2, 5, 4, (7, 7), (3, 3), padding=1, seed=1),
    make(2, 1, 4, 8, (6, 6), (3, 3), padding=(1,), groups=4, dtype="float16"),
)
TRANSPOSED_EDGE_CASES = (
    make(2, 1, 2, 3, (1, 1), (3, 3), stride=3, output_padding=2, transposed=True),
    make(1, 2, 1, 1, (4,), (3,), stride=2, dilation=2, padding=1, output_padding=1,
         transposed=True),
    make(2, 0, 4, 6, (3, 3), (2, 2), stride=2, groups=2, transposed=True),
    make(3, None, 3, 2, (2, 2, 3), (3, 1, 1), stride=(1, 2, 2), output_padding=(0, 1, 0),
         channels_last=True, transposed=True),
)  # fmt: skip


# ------------------------------------------------------------------ operands and PyTorch


def rand(rng: np.random.Generator, shape: tuple[int, ...], dtype: str) -> np.ndarray:
    a = rng.standard_normal(shape).astype(np.float32).astype(dtype)
    if dtype == "float64":
        a += rng.standard_normal(shape) * 2.0**-30  # bits a float32 path would drop
    return a


def operands(case: Case) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, np.ndarray]:
    """x, w, bias (or None) and a dy shaped like the output."""
    rng = np.random.default_rng(case.seed)
    bias = rand(rng, (case.k,), case.dtype) if case.bias else None
    return (rand(rng, case.x_shape, case.dtype), rand(rng, case.w_shape, case.dtype), bias,
            rand(rng, case.y_shape, case.dtype))  # fmt: skip


def batched(case: Case, a: np.ndarray) -> np.ndarray:
    return a[None] if case.n is None else a


def unbatched(case: Case, a: np.ndarray) -> np.ndarray:
    return a[0] if case.n is None else a


def vec(b: np.ndarray | None) -> Any:
    return None if b is None else torch.from_numpy(b.astype(np.float64))


def data_first(case: Case, a: np.ndarray) -> Any:
    """x, y or dy as a float64 torch tensor in PyTorch's channels-first layout."""
    a = np.asarray(a, np.float64)
    if case.channels_last:
        a = np.moveaxis(a, -1, 0 if case.n is None else 1)
    return torch.from_numpy(np.ascontiguousarray(a))


def data_back(case: Case, t: Any) -> np.ndarray:
    a = t.detach().numpy()
    return np.moveaxis(a, 0 if case.n is None else 1, -1) if case.channels_last else a


def filter_first(case: Case, w: np.ndarray) -> Any:
    w = np.asarray(w, np.float64)
    return torch.from_numpy(np.ascontiguousarray(np.moveaxis(w, -1, 1) if case.channels_last
                                                 else w))  # fmt: skip


def filter_back(case: Case, t: Any) -> np.ndarray:
    return np.moveaxis(t.detach().numpy(), 1, -1) if case.channels_last else t.detach().numpy()


def torch_forward(case: Case, x: Any, w: Any, b: Any) -> Any:
    """PyTorch's convolution of float64 channels-first tensors, with case's arguments as
    passed; (before, after) pairs, which PyTorch's conv takes only through F.pad, become a
    padded input."""
    padding = case.padding
    if isinstance(padding, tuple) and len(padding) == 2 * case.nd:
        x = F.pad(x, [v for pair in reversed(case.pads) for v in pair])  # last dim first
        padding = 0
    with warnings.catch_warnings():  # "same" with an even filter: PyTorch copies x
        warnings.simplefilter("ignore", UserWarning)
        return TORCH_FWD[case.nd](x, w, b, case.stride, padding, case.dilation, case.groups)


def torch_grads(case: Case, x: np.ndarray, w: np.ndarray, dy: np.ndarray
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:  # fmt: skip
    """(dx, dw, dbias) of PyTorch's autograd, in case's layout."""
    xt = data_first(case, x).requires_grad_()
    wt = filter_first(case, w).requires_grad_()
    bt = torch.zeros(case.k, dtype=torch.float64, requires_grad=True)
    torch_forward(case, xt, wt, bt).backward(data_first(case, dy))
    grads = [t.grad if t.grad is not None else torch.zeros_like(t) for t in (xt, wt, bt)]
    return data_back(case, grads[0]), filter_back(case, grads[1]), grads[2].numpy()


# ------------------------------------------------------------------ comparison


def bound(case: Case, want: np.ndarray, mag: np.ndarray, terms: int,
          winograd: bool = False) -> np.ndarray:  # fmt: skip
    """The module docstring's tolerance of each output."""
    s = case.short
    factor = 2.0 * terms
    if winograd and case.winograd_ok and mag.size:
        mag, factor = np.full_like(mag, mag.max()), factor + WINOGRAD_GROWTH
    b = (factor * ACCUMULATION_EPS[s] * mag
         + (2 * UNIT[s] + OUT_RTOL[s]) * np.abs(want))  # fmt: skip
    return b + 2.0**-14 if s == "fp16" else b


def channel_axis(case: Case) -> int:
    """Where x's channels are."""
    if case.channels_last:
        return case.nd if case.n is None else case.nd + 1
    return 0 if case.n is None else 1


def run_algos(call: Callable[[str], Any], extra: str) -> dict[str, Any]:
    """call(algo) for every family and for the solver name ``extra``; those that do not
    apply (NotSupportedError) are left out."""
    results = {}
    for algo in (*ALGO_FAMILIES, extra):
        try:
            results[algo] = call(algo)
        except NotSupportedError:
            continue
    return results


def winograd_may_run(algo: str) -> bool:
    """Whether ``algo`` may run a Winograd solver (auto may choose one)."""
    return algo == "auto" or "winograd" in algo


def check_algos(auto: Any, call: Callable[[str], Any], extra: str, want: np.ndarray,
                ref: np.ndarray, tol: Callable[[str], np.ndarray],
                what: str) -> dict[str, Any]:  # fmt: skip
    """The result of algo="auto" within ``tol("auto")`` of PyTorch's ``want`` and of the
    reference's ``ref``; then call(algo) for every family and the solver ``extra`` that
    apply (:func:`run_algos`), each within ``tol(algo)`` of ``ref``. Returns those results."""
    assert_within(auto, want, tol("auto"), f"{what} auto vs PyTorch")
    assert_within(auto, ref, tol("auto"), f"{what} auto vs reference")
    done = run_algos(call, extra)
    for algo, got in done.items():
        assert_within(got, ref, tol(algo), f"{what} algo={algo}")
    return done
