"""The spatial transformer (affine_grid, grid_sample and their backward) on every backend,
against the float64 reference and PyTorch (CPU, float64 autograd).

Tolerances (fp32): every kernel value is a sum of at most 16 taps (C of them for dgrid)
whose weights come from an index computed in float32: the index (at most ~8 here) carries
a few ulps of 8, so weights err by ~1e-6 and results (|x|, |dy| ~ 3) by K * 3 * 1e-6 ~
5e-5 at worst; dgrid further multiplies by size / 2 and sums C * K terms. Grid values that
land exactly on pixel centres or borders are exact in float32 (small dyadic numbers), so
no point falls on a different side of a pixel boundary than in float64.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import cudnnlite
from cudnnlite import dtypes
from cudnnlite.errors import BadParamError
from cudnnlite.ops.spatial import (
    affine_grid,
    affine_grid_backward,
    grid_sample,
    grid_sample_backward,
    last_kernel_name,
)
from cudnnlite.reference import spatial as ref
from cudnnlite.testing import assert_close, to_backend, to_numpy

TOL = {"rtol": 1e-5, "atol": 5e-5}
TOL_DGRID = {"rtol": 1e-5, "atol": 2e-4}
EDGES = [1.0, -1.0, 0.5, -0.5, 0.0, 1.0, -1.0, 0.25]  # borders, centres, edges


def _case(nd: int, seed: int, out: tuple[int, ...] = (3, 4)) -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(seed)
    xs = (2, 3, 4, 5) if nd == 2 else (2, 2, 3, 4, 5)
    gs = (2, *out, 2) if nd == 2 else (2, 2, *out, 3)
    x = rng.standard_normal(xs).astype(np.float32)
    g = rng.uniform(-1.4, 1.4, gs).astype(np.float32)
    g.flat[: len(EDGES)] = EDGES
    dy = rng.standard_normal(xs[:2] + gs[1:-1]).astype(np.float32)
    return x, g, dy


def _torch(x: np.ndarray, g: np.ndarray, dy: np.ndarray | None, *args: Any) -> tuple:
    """PyTorch's (y, dx, dgrid) in float64; y alone when dy is None."""
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    xt = torch.tensor(x.astype(np.float64), requires_grad=True)
    gt = torch.tensor(g.astype(np.float64), requires_grad=True)
    yt = F.grid_sample(xt, gt, *args)
    if dy is None:
        return (yt.detach().numpy(),)
    yt.backward(torch.tensor(dy.astype(np.float64)))
    return yt.detach().numpy(), xt.grad.numpy(), gt.grad.numpy()


def _ours(backend: str, x: np.ndarray, g: np.ndarray, dy: np.ndarray, *args: Any, **kw: Any):
    xb, gb, dyb = (to_backend(a, backend) for a in (x, g, dy))
    y = grid_sample(xb, gb, *args)
    dx, dg = grid_sample_backward(dyb, xb, gb, *args, **kw)
    return to_numpy(y), to_numpy(dx), to_numpy(dg)


def _compare(got: tuple, want: tuple, what: str) -> None:
    for name, a, b in zip(("y", "dx", "dgrid"), got, want, strict=True):
        tol = TOL_DGRID if name == "dgrid" else TOL
        assert_close(a, b, np.float32, what=f"{what} {name}", **tol)


CASES_2D = [(m, p, a) for m in ref.MODES for p in ref.PADDINGS for a in (False, True)]
CASES_3D = [(m, p, a) for m in ("bilinear", "nearest") for p in ref.PADDINGS for a in (False, True)]


@pytest.mark.parametrize("nd,mode,padding,align", [(2, *c) for c in CASES_2D]
                         + [(3, *c) for c in CASES_3D], ids=str)  # fmt: skip
def test_matches_reference_and_torch(
    backend: str, nd: int, mode: str, padding: str, align: bool
) -> None:
    x, g, dy = _case(nd, seed=hash((nd, mode, padding, align)) % 1000)
    args = (mode, padding, align)
    got = _ours(backend, x, g, dy, *args)
    want = (ref.grid_sample(x, g, *args), *ref.grid_sample_backward(dy, x, g, *args))
    _compare(got, want, f"{nd}-D {args} vs reference")
    _compare(got, _torch(x, g, dy, *args), f"{nd}-D {args} vs torch")


# float64 (double kernels): the fp32 argument with 2^-52 for 2^-23: indices (<= ~8) carry a
# few ulps of 8 (~4e-15), so weights err by ~1e-14 and y, dx (<= 16 taps of |x|, |dy| <= 4)
# by 16 * 4 * 1e-14 ~ 6e-13; dgrid sums C * K = 48 such terms times size / 2 <= 2.5.
TOL64 = {"rtol": 1e-12, "atol": 1e-12}
TOL64_DGRID = {"rtol": 1e-12, "atol": 1e-11}
CASES_64 = [(2, "bicubic", "reflection", False), (3, "bilinear", "border", True),
            (2, "nearest", "zeros", False)]  # fmt: skip


def _case64(nd: int, seed: int) -> tuple[np.ndarray, ...]:
    """_case's shapes with values that are not float32 numbers, and NaN / inf points."""
    rng = np.random.default_rng(seed)
    x, g, dy = (a.astype(np.float64) for a in _case(nd, seed))
    x += rng.standard_normal(x.shape) * 2.0**-30
    g.flat[len(EDGES) :] += rng.standard_normal(g.size - len(EDGES)) * 1e-9  # EDGES stay exact
    if nd == 2:  # the last row: non-finite and far-away coordinates
        g[1, -1, :4] = [[np.nan, 0.0], [np.inf, 0.2], [1e20, 0.0], [-7.0, 2.5]]
    return x, g, dy


@pytest.mark.parametrize("nd,mode,padding,align", CASES_64, ids=str)
def test_float64_matches_reference_and_torch(
    backend: str, nd: int, mode: str, padding: str, align: bool
) -> None:
    x, g, dy = _case64(nd, seed=20 + nd)
    args = (mode, padding, align)
    got = _ours(backend, x, g, dy, *args)
    assert last_kernel_name() == "dx_gather_fp64"
    want = (ref.grid_sample(x, g, *args), *ref.grid_sample_backward(dy, x, g, *args))
    for name, a, b in zip(("y", "dx", "dgrid"), got, want, strict=True):
        assert a.dtype == np.float64
        assert_close(a, b, np.float64, what=name, **(TOL64_DGRID if name == "dgrid" else TOL64))
    dx_atomic = grid_sample_backward(*(to_backend(a, backend) for a in (dy, x, g)), *args,
                                     deterministic=False)[0]  # fmt: skip
    assert last_kernel_name() == f"bwd{nd}_{mode}_fp64"  # float64 atomics straight into dx
    assert_close(dx_atomic, want[1], np.float64, what="dx atomic", **TOL64)
    # PyTorch's CPU backward crashes on NaN coordinates: batch entry 0 (all finite) only.
    assert np.isfinite(g[:1]).all()
    theirs = _torch(x[:1], g[:1], dy[:1], *args)
    for name, a, b in zip(("y", "dx", "dgrid"), got, theirs, strict=True):
        assert_close(a[:1], b, np.float64, what=f"{name} vs torch",
                     **(TOL64_DGRID if name == "dgrid" else TOL64))  # fmt: skip


@pytest.mark.parametrize("mode", ["bilinear", "bicubic"])
def test_float64_gradients_by_central_differences(backend: str, mode: str) -> None:
    # L = sum(dy * grid_sample(x, grid)); dL/dx and dL/dgrid against central differences,
    # every perturbed copy in its own batch entry (one forward call per argument).
    rng = np.random.default_rng(30)
    x = rng.standard_normal((1, 2, 4, 5))
    g = rng.uniform(-0.9, 0.9, (1, 2, 3, 2))
    dy = rng.standard_normal((1, 2, 2, 3))
    args = (mode, "zeros", False)
    dx, dg = (to_numpy(a) for a in grid_sample_backward(
        *(to_backend(a, backend) for a in (dy, x, g)), *args))  # fmt: skip

    def loss(xs: np.ndarray, gs: np.ndarray) -> np.ndarray:
        y = to_numpy(grid_sample(to_backend(xs, backend), to_backend(gs, backend), *args))
        return (y * dy).reshape(len(y), -1).sum(1)

    def central(a: np.ndarray, h: float, f: Any) -> np.ndarray:
        bump = np.eye(a.size).reshape(a.size, *a.shape[1:]) * h
        both = np.concatenate([a + bump, a - bump])
        v = f(both)
        return ((v[: a.size] - v[a.size :]) / (2 * h)).reshape(a.shape)

    # x: L is linear in x, so any h is exact up to rounding: h = 1 leaves only the
    # cancellation 2^-52 * |L| (|L| <= 20) ~ 5e-15 per evaluation.
    fd_x = central(x, 1.0, lambda xs: loss(xs, np.repeat(g, len(xs), 0)))
    assert_close(dx, fd_x, np.float64, what="dx", rtol=0, atol=1e-13)
    # grid: h = 1e-6 moves an index by ~2.5e-6, within its pixel cell for these points
    # (bilinear is linear there: no truncation error; bicubic's truncation is
    # h^2 / 6 * |d3L| ~ 1e-11); cancellation 2^-52 * |L| / h ~ 5e-9; atol 1e-7.
    fd_g = central(g, 1e-6, lambda gs: loss(np.repeat(x, len(gs), 0), gs))
    assert_close(dg, fd_g, np.float64, what="dgrid", rtol=0, atol=1e-7)


def test_channels_last_and_strided_views_read_in_place(backend: str) -> None:
    x, g, dy = _case(2, seed=3)
    args = ("bilinear", "reflection", False)
    want = _ours(backend, x, g, dy, *args)
    xb = to_backend(np.ascontiguousarray(x.transpose(0, 2, 3, 1)), backend).transpose(0, 3, 1, 2)
    gb = to_backend(np.ascontiguousarray(g[..., ::-1]), backend)[..., ::-1]  # reversed coords
    dyb = to_backend(np.ascontiguousarray(dy.transpose(0, 2, 3, 1)), backend).transpose(0, 3, 1, 2)
    y = grid_sample(xb, gb, *args)
    dx, dg = grid_sample_backward(dyb, xb, gb, *args)
    assert y.strides[1] == y.itemsize and dx.strides == xb.strides  # x's memory format
    for a, b in zip((y, dx, dg), want, strict=True):
        np.testing.assert_array_equal(to_numpy(a), b)  # same arithmetic, any strides
    # NDHWC, 3-D
    x3, g3, dy3 = _case(3, seed=4)
    want3 = _ours(backend, x3, g3, dy3, "nearest", "border", True)
    x3b = to_backend(np.ascontiguousarray(x3.transpose(0, 2, 3, 4, 1)), backend)
    x3b = x3b.transpose(0, 4, 1, 2, 3)
    got3 = _ours_arrays(x3b, to_backend(g3, backend), to_backend(dy3, backend),
                        "nearest", "border", True)  # fmt: skip
    for a, b in zip(got3, want3, strict=True):
        np.testing.assert_array_equal(a, b)


def _ours_arrays(xb: Any, gb: Any, dyb: Any, *args: Any) -> tuple[np.ndarray, ...]:
    y = grid_sample(xb, gb, *args)
    dx, dg = grid_sample_backward(dyb, xb, gb, *args)
    return to_numpy(y), to_numpy(dx), to_numpy(dg)


NAN_GRID = [[np.nan, 0.0], [0.0, np.nan], [np.nan, np.nan], [np.inf, 0.0], [-np.inf, 0.3],
            [1e20, 0.0], [1.0, 1.0], [-1.0, -1.0], [1.5, -3.0], [-7.0, 2.5]]  # fmt: skip


@pytest.mark.parametrize("padding", ref.PADDINGS)
@pytest.mark.parametrize("mode", ref.MODES)
def test_non_finite_and_outside_points(backend: str, mode: str, padding: str) -> None:
    x = np.arange(1.0, 13.0, dtype=np.float32).reshape(1, 1, 3, 4)
    g = np.array(NAN_GRID, np.float32).reshape(1, 2, 5, 2)
    dy = np.ones((1, 1, 2, 5), np.float32)
    for align in (False, True):
        args = (mode, padding, align)
        got = _ours(backend, x, g, dy, *args)
        want = (ref.grid_sample(x, g, *args), *ref.grid_sample_backward(dy, x, g, *args))
        _compare(got, want, f"{args} vs reference")
        # forward only: PyTorch's CPU backward indexes with NaN coordinates (it crashes)
        torch_y = _torch(x, g, None, *args)[0]
        if mode == "bilinear" and padding == "zeros":
            # PyTorch's CUDA kernels (and ours) send non-finite indices out of bounds:
            # 0; its vectorized CPU kernel weighs them and returns NaN.
            rows = np.isfinite(g).all(-1).reshape(-1)
            np.testing.assert_allclose(got[0].reshape(-1)[rows], torch_y.reshape(-1)[rows],
                                       **TOL)  # fmt: skip
            assert np.all(got[0].reshape(-1)[~rows] == 0)
        else:
            np.testing.assert_allclose(got[0], torch_y, equal_nan=True, **TOL)


def test_nearest_rounds_half_to_even(backend: str) -> None:
    x = np.arange(5, dtype=np.float32).reshape(1, 1, 1, 5)
    # align_corners=True, W=5: index = (g + 1) * 2, so g = -0.75 -> 0.5, -0.25 -> 1.5, ...
    g = np.array([-0.75, -0.25, 0.25, 0.75], np.float32)
    grid = np.stack([g, np.zeros_like(g)], -1).reshape(1, 1, 4, 2)
    y = to_numpy(grid_sample(to_backend(x, backend), to_backend(grid, backend), "nearest",
                             "zeros", True))  # fmt: skip
    np.testing.assert_array_equal(y.reshape(-1), [0.0, 2.0, 2.0, 4.0])


def test_bfloat16(backend: str) -> None:
    if dtypes.bfloat16 is None:
        pytest.skip("needs ml_dtypes")
    bf = dtypes.bfloat16
    x, g, dy = (a.astype(bf) for a in _case(2, seed=7))
    args = ("bicubic", "border", False)
    got = _ours(backend, x, g, dy, *args)
    want = (ref.grid_sample(x, g, *args), *ref.grid_sample_backward(dy, x, g, *args))
    # float32 math on bf16 inputs, one bf16 rounding of a result of magnitude <= ~10
    # (2^-8 * 10 ~ 0.04) plus bf16 rounding of the coordinates' float32 products.
    for name, a, b in zip(("y", "dx", "dgrid"), got, want, strict=True):
        assert a.dtype == bf
        assert_close(a, b, bf, rtol=2e-2, atol=0.25 if name == "dgrid" else 5e-2, what=name)
    dx_atomic = grid_sample_backward(*(to_backend(a, backend) for a in (dy, x, g)), *args,
                                     deterministic=False)[0]  # fmt: skip
    assert_close(dx_atomic, want[1], bf, rtol=2e-2, atol=5e-2, what="dx atomic")


def _zoom_case() -> tuple[np.ndarray, ...]:
    """Many output points per input pixel: long, order-sensitive sums."""
    rng = np.random.default_rng(11)
    x = rng.standard_normal((2, 3, 3, 4)).astype(np.float32)
    g = rng.uniform(-0.6, 0.6, (2, 24, 24, 2)).astype(np.float32)
    dy = rng.standard_normal((2, 3, 24, 24)).astype(np.float32)
    return x, g, dy


def test_deterministic_dx_is_bitwise_reproducible(
    backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    x, g, dy = (to_backend(a, backend) for a in _zoom_case())
    args = ("bilinear", "zeros", False)
    a, ga = grid_sample_backward(dy, x, g, *args)
    assert last_kernel_name() == "dx_gather_fp32"
    b, gb = grid_sample_backward(dy, x, g, *args)
    if backend == "cpu":
        monkeypatch.setenv("CUDNNLITE_EMU_SCHEDULE", "reverse")
    c, gc = grid_sample_backward(dy, x, g, *args)
    for u, v in ((a, b), (a, c), (ga, gb), (ga, gc)):
        np.testing.assert_array_equal(to_numpy(u).view(np.uint32), to_numpy(v).view(np.uint32))
    # atomic variant: only when asked and determinism is off; close, not bitwise
    d, gd = grid_sample_backward(dy, x, g, *args, deterministic=False)
    assert last_kernel_name() == "bwd2_bilinear_fp32"
    assert_close(d, to_numpy(a).astype(np.float64), np.float32, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(to_numpy(gd), to_numpy(ga))
    with cudnnlite.settings(deterministic=True):
        e, _ = grid_sample_backward(dy, x, g, *args, deterministic=False)
        assert last_kernel_name() == "dx_gather_fp32"
    np.testing.assert_array_equal(to_numpy(e), to_numpy(a))


def test_no_input_grad_and_empty(backend: str) -> None:
    x, g, dy = (to_backend(a, backend) for a in _case(2, seed=5))
    dx, dg = grid_sample_backward(dy, x, g, "bicubic", "zeros", True, False)
    assert dx is None
    np.testing.assert_array_equal(to_numpy(dg), to_numpy(grid_sample_backward(
        dy, x, g, "bicubic", "zeros", True)[1]))  # fmt: skip
    g0 = g[:, :0]
    y0 = grid_sample(x, g0)
    assert y0.shape == (2, 3, 0, 4)
    dx0, dg0 = grid_sample_backward(to_backend(np.zeros((2, 3, 0, 4), np.float32), backend),
                                    x, g0)  # fmt: skip
    assert np.all(to_numpy(dx0) == 0) and dg0.shape == g0.shape


@pytest.mark.parametrize("align", [False, True])
@pytest.mark.parametrize("size", [(2, 3, 4, 5), (2, 1, 1, 3), (2, 3, 2, 3, 4)], ids=str)
def test_affine_grid(backend: str, size: tuple, align: bool) -> None:
    torch = pytest.importorskip("torch")
    nd = len(size) - 2
    rng = np.random.default_rng(len(size) + align)
    theta = rng.standard_normal((2, nd, nd + 1)).astype(np.float32)
    grid = affine_grid(to_backend(theta, backend), size, align)
    assert grid.dtype == np.float32 and grid.shape == (size[0], *size[2:], nd)
    assert_close(grid, ref.affine_grid(theta, size, align), np.float32, rtol=1e-6)
    gg = rng.standard_normal(grid.shape).astype(np.float32)
    dtheta = affine_grid_backward(to_backend(gg, backend), size, align)
    # float32 sums of P <= 24 products of magnitude ~3
    assert_close(dtheta, ref.affine_grid_backward(gg, size, align), np.float32, rtol=1e-5,
                 atol=1e-5)  # fmt: skip
    tt = torch.tensor(theta.astype(np.float64), requires_grad=True)
    with pytest.warns(UserWarning) if align and 1 in size[2:] else _nothing():
        tg = torch.nn.functional.affine_grid(tt, size, align_corners=align)
    tg.backward(torch.tensor(gg.astype(np.float64)))
    assert_close(grid, tg.detach().numpy(), np.float32, rtol=1e-6)
    assert_close(dtheta, tt.grad.numpy(), np.float32, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", [np.float32, np.float16], ids=["fp32", "fp16"])
def test_affine_grid_kernels_over_many_points(backend: str, dtype: Any) -> None:
    """More points per image than a block has threads (the backward's strided partials
    and their tree), a 3-D size, channels-irrelevant C, and a 16-bit theta (computed in
    float32, rounded once to fp16 at the end)."""
    for size in ((3, 7, 20, 33), (2, 1, 5, 9, 11)):
        nd = len(size) - 2
        rng = np.random.default_rng(sum(size))
        theta = rng.standard_normal((size[0], nd, nd + 1)).astype(dtype)
        grid = affine_grid(to_backend(theta, backend), size, False)
        assert grid.dtype == dtype and grid.shape == (size[0], *size[2:], nd)
        gg = rng.standard_normal(grid.shape).astype(dtype)
        dtheta = affine_grid_backward(to_backend(gg, backend), size, True)
        # fp32: sums of <= 4 (grid) and P <= 660 (dtheta) products of magnitude <~ 3, in
        # float32 (relative 2^-24 each: P * 3 * 6e-8 ~ 1e-4 absolute at most); fp16: one
        # final rounding to 2^-11 relative on top.
        rtol, atol = (1e-5, 2e-4) if dtype == np.float32 else (2e-3, 2e-2)
        want_g = ref.affine_grid(theta.astype(np.float64), size, False)
        want_d = ref.affine_grid_backward(gg.astype(np.float64), size, True)
        assert_close(grid, want_g, dtype, rtol=rtol, atol=atol)
        assert_close(dtheta, want_d, dtype, rtol=rtol, atol=atol * 20)


def test_affine_grid_float64(backend: str) -> None:
    torch = pytest.importorskip("torch")
    size, align = (2, 3, 2, 3, 4), False
    theta = np.random.default_rng(40).standard_normal((2, 3, 4))  # not float32 numbers
    grid = affine_grid(to_backend(theta, backend), size, align)
    gg = np.random.default_rng(41).standard_normal(grid.shape)
    dtheta = affine_grid_backward(to_backend(gg, backend), size, align)
    assert grid.dtype == np.float64 and dtheta.dtype == np.float64
    tt = torch.tensor(theta, requires_grad=True)
    tg = torch.nn.functional.affine_grid(tt, size, align_corners=align)
    tg.backward(torch.tensor(gg))
    # float64 sums of 4 (grid) and P = 24 (dtheta) products of magnitude ~3: K * 3 * 2^-52.
    checks = [
        ("grid", grid, ref.affine_grid(theta, size, align), tg, 1e-14),
        ("dtheta", dtheta, ref.affine_grid_backward(gg, size, align), tt.grad, 1e-13),
    ]
    for name, got, want, theirs, atol in checks:
        assert_close(got, want, np.float64, rtol=1e-14, atol=atol, what=name)
        assert_close(got, theirs.detach().numpy(), np.float64, rtol=1e-14, atol=atol, what=name)


class _nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: Any) -> None:
        return None


def test_bad_input_names_the_argument() -> None:
    x, g, dy = _case(2, seed=9)
    keep = [a.copy() for a in (x, g, dy)]
    bad = [
        (lambda: grid_sample(x, g[..., :1]), "grid: expected the last dimension to be 2"),
        (lambda: grid_sample(x, g[0]), "grid: expected a 4-D"),
        (lambda: grid_sample(x[0], g), "x: expected a 4-D"),
        (lambda: grid_sample(x, g[:1]), "grid: expected batch size 2"),
        (lambda: grid_sample(x, g.astype(np.float16)), "grid: expected dtype float32"),
        (lambda: grid_sample(x.astype(np.int32), g), "x: expected dtype float32"),
        (lambda: grid_sample(x.astype(np.float64), g), "grid: expected dtype float64 like x"),
        (lambda: grid_sample(x, g, "linear"), "mode: expected one of"),
        (lambda: grid_sample(x, g, "bilinear", "clamp"), "padding_mode: expected one of"),
        (lambda: grid_sample(x, g, "bilinear", "zeros", 1),
         "align_corners: expected True or False"),
        (lambda: grid_sample(x[:, :, :0], g), "x: expected non-empty spatial"),
        (
            lambda: grid_sample(
                np.zeros((1, 1, 2, 2, 2), np.float32),
                np.zeros((1, 1, 1, 1, 3), np.float32),
                "bicubic",
            ),
            "mode: bicubic is supported for 2-D",
        ),  # fmt: skip
        (lambda: grid_sample_backward(dy[:, :1], x, g), "grad_out: expected shape"),
        (lambda: grid_sample_backward(dy.astype(np.float16), x, g), "grad_out: expected dtype"),
        (lambda: grid_sample_backward(dy.astype(np.float64), x, g), "grad_out: expected dtype"),
        (lambda: grid_sample_backward(dy, x, g, deterministic=None), "deterministic: expected"),
        (
            lambda: affine_grid(np.zeros((2, 2, 3), np.float32), (2, 1, 4, 4, 4)),
            "theta: expected shape (N, 3, 4)",
        ),  # fmt: skip
        (lambda: affine_grid(np.zeros((2, 2, 3), np.float32), (3, 1, 4, 4)), "size: expected N"),
        (lambda: affine_grid(np.zeros((2, 2, 3), np.float32), (2, 4, 4)), "size: expected"),
        (lambda: affine_grid(np.zeros((2, 2, 3), np.int32), (2, 1, 4, 4)), "theta: expected"),
        (
            lambda: affine_grid_backward(np.zeros((2, 4, 4, 3), np.float32), (2, 1, 4, 4)),
            "grad_grid: expected shape (2, 4, 4, 2)",
        ),  # fmt: skip
    ]
    for call, message in bad:
        with pytest.raises(BadParamError, match=_re(message)):
            call()
    for a, b in zip((x, g, dy), keep, strict=True):
        np.testing.assert_array_equal(a, b)


def _re(s: str) -> str:
    import re

    return re.escape(s)
