"""NumPy float64 reference of the spatial transformer: affine_grid and grid_sample,
forward and backward, with PyTorch's semantics.

grid_sample maps each output point's grid coordinates (x, y[, z]) in [-1, 1] to input
pixel indices (``align_corners``: -1 and 1 are the corner pixels' centres, else their outer
edges), applies the padding (``border`` clips, ``reflection`` reflects then clips), and
samples: ``bilinear`` (trilinear in 3-D) from the 2^ndim surrounding pixels, ``nearest``
from the pixel at the index rounded half to even, ``bicubic`` (2-D) from 4 x 4 pixels with
Keys' cubic (A = -0.75), padding each integer tap. Out-of-bounds pixels read as zero.
Non-finite or huge indices (|i| >= 2^30) become -100 (out of bounds), and NaN clips to 0
under border/reflection (fmin/fmax), as PyTorch's CUDA kernels do.

Every mode is written as taps: per output point, K input positions with weights and the
weights' derivatives with respect to the unnormalized indices; forward and backward both
use them, so the gradients are exactly those of the forward function.
"""

from __future__ import annotations

from typing import Any

import numpy as np

MODES = ("bilinear", "nearest", "bicubic")
PADDINGS = ("zeros", "border", "reflection")
_A = -0.75


# ------------------------------------------------------------------ affine_grid


def _base_coords(steps: int, align_corners: bool) -> np.ndarray:
    if steps <= 1:
        return np.zeros(max(steps, 0))
    r = np.linspace(-1.0, 1.0, steps)
    return r if align_corners else r * (steps - 1) / steps


def base_grid(size: tuple[int, ...], align_corners: bool) -> np.ndarray:
    """The homogeneous base grid (spatial..., ndim + 1): (x, y[, z], 1) per output point."""
    spatial = tuple(size[2:])
    axes = [_base_coords(s, align_corners) for s in spatial]  # (d,) h, w
    mesh = np.meshgrid(*axes, indexing="ij")
    coords = [m for m in reversed(mesh)]  # x first
    return np.stack([*coords, np.ones(spatial)], axis=-1)


def affine_grid(theta: Any, size: tuple[int, ...], align_corners: bool = False) -> np.ndarray:
    """grid[n, ..., :] = theta[n] @ (x, y[, z], 1); float64."""
    theta = np.asarray(theta, np.float64)
    base = base_grid(size, align_corners)
    return np.einsum("...k,nik->n...i", base, theta)


def affine_grid_backward(
    grad_grid: Any, size: tuple[int, ...], align_corners: bool = False
) -> np.ndarray:
    """d theta[n, i, k] = sum over points of grad_grid[n, p, i] * base[p, k]; float64."""
    g = np.asarray(grad_grid, np.float64)
    base = base_grid(size, align_corners)
    nd = base.ndim - 1
    axes = "".join("dhw"[3 - nd :])
    return np.einsum(f"n{axes}i,{axes}k->nik", g, base)


# ------------------------------------------------------------------ coordinates


def _unnormalize(g: np.ndarray, size: int, align: bool) -> tuple[np.ndarray, float]:
    if align:
        return (g + 1) / 2 * (size - 1), (size - 1) / 2
    return ((g + 1) * size - 1) / 2, size / 2


def _clip(i: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray]:
    grad = ((i > 0) & (i < size - 1)).astype(np.float64)
    return np.fmin(size - 1.0, np.fmax(i, 0.0)), grad  # fmax: NaN -> 0


def _reflect(i: np.ndarray, twice_lo: int, twice_hi: int) -> tuple[np.ndarray, np.ndarray]:
    if twice_lo == twice_hi:
        return np.zeros_like(i), np.zeros_like(i)
    lo, span = twice_lo / 2, (twice_hi - twice_lo) / 2
    d = i - lo
    sign = np.where(d < 0, -1.0, 1.0)
    d = np.abs(d)
    with np.errstate(invalid="ignore"):
        extra = np.fmod(d, span)
        odd = np.fmod(np.floor(d / span), 2) != 0
    return np.where(odd, span - extra + lo, extra + lo), np.where(odd, -sign, sign)


def _pad(i: np.ndarray, size: int, padding: str, align: bool) -> tuple[np.ndarray, np.ndarray]:
    grad = np.ones_like(i)
    if padding == "border":
        i, grad = _clip(i, size)
    elif padding == "reflection":
        i, gr = _reflect(i, 0, 2 * (size - 1)) if align else _reflect(i, -1, 2 * size - 1)
        i, gc = _clip(i, size)
        grad = gr * gc
    with np.errstate(invalid="ignore"):
        ok = np.abs(i) < 2.0**30
    return np.where(ok, i, -100.0), grad


def _cubic(u: np.ndarray) -> tuple[list[np.ndarray], list[np.ndarray]]:
    def c1(x: np.ndarray) -> np.ndarray:
        return ((_A + 2) * x - (_A + 3)) * x * x + 1

    def c2(x: np.ndarray) -> np.ndarray:
        return ((_A * x - 5 * _A) * x + 8 * _A) * x - 4 * _A

    def d1(x: np.ndarray) -> np.ndarray:
        return (3 * (_A + 2) * x - 2 * (_A + 3)) * x

    def d2(x: np.ndarray) -> np.ndarray:
        return (3 * _A * x - 10 * _A) * x + 8 * _A

    coef = [c2(u + 1), c1(u), c1(1 - u), c2(2 - u)]
    dcoef = [d2(u + 1), d1(u), -d1(1 - u), -d2(2 - u)]
    return coef, dcoef


class _Taps:
    """pos[k]: (ndim,) int index arrays (x, y[, z]) of tap k, each shaped like the points;
    valid[k]; w[k]; dw[k][j] = d w[k] / d index_j; scale[j] = d index_j / d grid_j."""

    def __init__(self) -> None:
        self.pos: list[list[np.ndarray]] = []
        self.valid: list[np.ndarray] = []
        self.w: list[np.ndarray] = []
        self.dw: list[list[np.ndarray]] = []
        self.scale: list[Any] = []
        self.dense = False  # bicubic: invalid taps still weigh a zero (NaN * 0 = NaN)


def _inside(pos: list[np.ndarray], sizes: list[int]) -> np.ndarray:
    ok = np.ones(pos[0].shape, bool)
    for p, s in zip(pos, sizes, strict=True):
        ok &= (p >= 0) & (p < s)
    return ok


def _taps(grid: np.ndarray, spatial: tuple[int, ...], mode: str, padding: str, align: bool):
    nd = grid.shape[-1]
    sizes = list(reversed(spatial))  # x, y[, z]
    t = _Taps()
    idx = []
    for j in range(nd):
        i, s = _unnormalize(grid[..., j], sizes[j], align)
        if mode != "bicubic":
            i, gp = _pad(i, sizes[j], padding, align)
            s = s * gp
        idx.append(i)
        t.scale.append(s)
    if mode == "nearest":
        pos = [np.rint(i).astype(np.int64) for i in idx]  # rint: half to even
        t.pos, t.valid = [pos], [_inside(pos, sizes)]
        t.w = [np.ones(grid.shape[:-1])]
        t.dw = [[np.zeros(grid.shape[:-1])] * nd]
        return t
    if mode == "bilinear":
        lo = [np.floor(i) for i in idx]
        wl = [(f + 1) - i for f, i in zip(lo, idx, strict=True)]
        wh = [i - f for f, i in zip(lo, idx, strict=True)]
        for b in range(1 << nd):
            bits = [(b >> j) & 1 for j in range(nd)]
            pos = [(lo[j] + bits[j]).astype(np.int64) for j in range(nd)]
            f = [wh[j] if bits[j] else wl[j] for j in range(nd)]
            t.pos.append(pos)
            t.valid.append(_inside(pos, sizes))
            t.w.append(np.prod(f, axis=0))
            t.dw.append(
                [
                    (1 if bits[j] else -1) * np.prod([f[m] for m in range(nd) if m != j], axis=0)
                    for j in range(nd)
                ]
            )
        return t
    # bicubic (2-D): each integer tap padded on its own, no gradient through the padding
    t.dense = True
    base = [np.floor(i) for i in idx]
    with np.errstate(invalid="ignore"):  # inf - inf: NaN weights, as PyTorch's
        cx, dcx = _cubic(idx[0] - base[0])
        cy, dcy = _cubic(idx[1] - base[1])
    tx = [_pad(base[0] - 1 + a, sizes[0], padding, align)[0] for a in range(4)]
    ty = [_pad(base[1] - 1 + a, sizes[1], padding, align)[0] for a in range(4)]
    for j in range(4):
        for i in range(4):
            pos = [np.trunc(tx[i]).astype(np.int64), np.trunc(ty[j]).astype(np.int64)]
            t.pos.append(pos)
            t.valid.append(_inside(pos, sizes))
            t.w.append(cx[i] * cy[j])
            t.dw.append([dcx[i] * cy[j], cx[i] * dcy[j]])
    return t


def _gather(x: np.ndarray, pos: list[np.ndarray], valid: np.ndarray) -> np.ndarray:
    """x (N, C, *spatial) at tap positions (N, *out) -> (N, C, *out); 0 where invalid."""
    n = np.arange(x.shape[0]).reshape((-1,) + (1,) * (pos[0].ndim - 1))
    clipped = [np.where(valid, p, 0) for p in pos]
    idx = tuple(reversed(clipped))  # (z,) y, x
    v = x[(n, slice(None), *idx)]  # advanced indices around a slice: (N, *out, C)
    v = np.moveaxis(v, -1, 1)
    return np.where(valid[:, None], v, 0.0)


def _check(mode: str, padding: str, nd: int) -> None:
    if mode not in MODES:
        raise ValueError(f"mode: expected one of {MODES}, got {mode!r}")
    if padding not in PADDINGS:
        raise ValueError(f"padding_mode: expected one of {PADDINGS}, got {padding!r}")
    if mode == "bicubic" and nd != 2:
        raise ValueError("mode: bicubic needs 2-D input")


def grid_sample(
    x: Any,
    grid: Any,
    mode: str = "bilinear",
    padding_mode: str = "zeros",
    align_corners: bool = False,
) -> np.ndarray:
    """x (N, C, [D,] H, W), grid (N, [Do,] Ho, Wo, ndim) -> (N, C, [Do,] Ho, Wo), float64."""
    x = np.asarray(x, np.float64)
    grid = np.asarray(grid, np.float64)
    _check(mode, padding_mode, grid.shape[-1])
    t = _taps(grid, x.shape[2:], mode, padding_mode, align_corners)
    out = np.zeros((x.shape[0], x.shape[1], *grid.shape[1:-1]))
    with np.errstate(invalid="ignore", over="ignore"):
        for pos, valid, w in zip(t.pos, t.valid, t.w, strict=True):
            v = _gather(x, pos, valid)
            contrib = v * w[:, None]
            out += contrib if t.dense else np.where(valid[:, None], contrib, 0.0)
    return out


def grid_sample_backward(
    grad_out: Any,
    x: Any,
    grid: Any,
    mode: str = "bilinear",
    padding_mode: str = "zeros",
    align_corners: bool = False,
) -> tuple[np.ndarray, np.ndarray]:
    """(dx, dgrid) of :func:`grid_sample` for the output gradient ``grad_out``; float64."""
    g = np.asarray(grad_out, np.float64)
    x = np.asarray(x, np.float64)
    grid = np.asarray(grid, np.float64)
    _check(mode, padding_mode, grid.shape[-1])
    nd = grid.shape[-1]
    t = _taps(grid, x.shape[2:], mode, padding_mode, align_corners)
    dx = np.zeros_like(x)
    gi = [np.zeros(grid.shape[:-1]) for _ in range(nd)]
    nidx = np.broadcast_to(
        np.arange(x.shape[0]).reshape((-1,) + (1,) * (grid.ndim - 2)), grid.shape[:-1]
    )
    with np.errstate(invalid="ignore", over="ignore"):
        for pos, valid, w, dw in zip(t.pos, t.valid, t.w, t.dw, strict=True):
            v = _gather(x, pos, valid)
            for j in range(nd):
                term = (g * v * dw[j][:, None]).sum(axis=1)
                if not t.dense:
                    term = np.where(valid, term, 0.0)
                gi[j] += term
            # dx[n, c, pos] += w * g, for valid taps
            sel = valid
            gv = np.moveaxis(g, 1, -1)[sel] * w[sel][:, None]  # (taps, C)
            idx = tuple(p[sel] for p in reversed(pos))
            np.add.at(np.moveaxis(dx, 1, -1), (nidx[sel], *idx), gv)
    if mode == "nearest":
        gi = [np.zeros_like(a) for a in gi]
    dgrid = np.stack([gi[j] * t.scale[j] for j in range(nd)], axis=-1)
    return dx, dgrid


__all__ = [
    "MODES",
    "PADDINGS",
    "affine_grid",
    "affine_grid_backward",
    "base_grid",
    "grid_sample",
    "grid_sample_backward",
]
