"""cuDNN's tensor operations on every backend against the float64 reference.

Tolerances: elementwise ops are one float32 operation (or two with beta) and one rounding
to the storage type: cudnnlite.testing's elementwise rtol. Reductions: a float32 sum of n
terms has error <= (n + 32) ulps of sum|terms| (serial part plus the shuffle tree), a
product <= (n + 32) ulps relative; min / max / amax pick a stored element (exact); each
result is then rounded once to the storage type. float64 computes in double: the same
bounds in units of 2^-53, plus the float64 reference's own error of the same kind (n more
units), since the reference is then no more precise than the kernel.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from cudnnlite import dtypes
from cudnnlite import reference as ref
from cudnnlite.errors import BadParamError
from cudnnlite.ops._arrays import collapse_dims
from cudnnlite.ops.reduce import REDUCE_OPS, reduce_tensor
from cudnnlite.ops.tensor import (
    OP_TENSOR_OPS,
    add_tensor,
    last_kernel_name,
    nchw_to_nhwc,
    nhwc_to_nchw,
    op_tensor,
    scale_tensor,
    set_tensor,
    transform_tensor,
)
from cudnnlite.testing import ELEMENTWISE_RTOL, assert_close, to_backend, to_numpy

DTYPES = [d.numpy for d in dtypes.FLOAT_TYPES]
SHORT = {d.numpy: d.short for d in dtypes.FLOAT_TYPES}
STORAGE = {"fp32": 0.0, "fp16": 2.0**-11, "bf16": 2.0**-8, "fp64": 0.0}
# half the spacing of fp16's subnormals (below 6e-5 fp16 rounds absolutely, e.g. products)
SUBNORMAL = {"fp32": 0.0, "fp16": 2.0**-25, "bf16": 0.0, "fp64": 0.0}
# unit roundoff of the arithmetic (float32 for the 16- and 32-bit types)
UNIT = {"fp32": 2.0**-24, "fp16": 2.0**-24, "bf16": 2.0**-24, "fp64": 2.0**-53}


def round_once(x: np.ndarray, dst: Any) -> np.ndarray:
    """x converted to dst with one rounding (to nearest even). NumPy converts float64 to
    float32 / float16 directly, but ml_dtypes' bfloat16 goes through float32 (two
    roundings); float32 rounded to odd, then to bfloat16, is the one rounding."""
    if dtypes.BFLOAT16 is None or np.dtype(dst) != dtypes.BFLOAT16.numpy or x.dtype != np.float64:
        return x.astype(dst)
    f = x.astype(np.float32)
    fix = (f.astype(np.float64) != x) & (f.view(np.uint32) % 2 == 0)
    toward = np.where(x > f, np.float32(np.inf), np.float32(-np.inf))
    f[fix] = np.nextafter(f[fix], toward[fix])
    return f.astype(dst)


def converted(x: np.ndarray, dst: Any) -> np.ndarray:
    """What a conversion kernel stores: the value (exact in its arithmetic) rounded once."""
    return round_once(x if x.dtype == np.float64 else x.astype(np.float32), dst)


def rand(shape: tuple[int, ...], dtype: Any, seed: int = 0, lo: float = -2, hi: float = 2) -> Any:
    return np.random.default_rng(seed).uniform(lo, hi, shape).astype(dtype)


def check_reduce(
    got: Any, x: np.ndarray, op: str, axes: Any, keepdims: bool = False, idx: Any = None
) -> None:
    want, want_idx = ref.reduce_tensor(x, op, axes, keepdims)
    short = SHORT[x.dtype]
    g = to_numpy(got).astype(np.float64)
    n = max(1, x.size // max(1, want.size))
    u = UNIT[short]
    ulps = (2 * n + 32 if short == "fp64" else n + 32) * u  # fp64: + the reference's n
    last = 4 * u if short == "fp64" else 2.0**-23  # alpha * v, the division of avg, sqrt
    if op in ("min", "max", "amax"):
        np.testing.assert_array_equal(g, want)
        if idx is not None:
            np.testing.assert_array_equal(to_numpy(idx), want_idx)
        return
    if op in ("sum", "avg", "norm1", "norm2"):
        mag, _ = ref.reduce_tensor(np.abs(x.astype(np.float64)), "sum", axes, keepdims)
        if op == "avg":
            mag = mag / n
        if op == "norm2":
            mag = np.abs(want)
        bound = ulps * mag + (STORAGE[short] + last) * np.abs(want) + SUBNORMAL[short] + 1e-30
    else:
        bound = (ulps + STORAGE[short] + last) * np.abs(want) + SUBNORMAL[short] + 1e-30
    assert np.all(np.abs(g - want) <= bound), f"{op} {axes} {short}: {np.abs(g - want).max()}"


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: SHORT[d])
@pytest.mark.parametrize("op", OP_TENSOR_OPS)
def test_op_tensor(backend: str, dtype: Any, op: str) -> None:
    a = rand((2, 16, 5, 7), dtype, seed=1, lo=0.1 if op == "sqrt" else -2)
    b_full = rand((2, 16, 5, 7), dtype, seed=2)
    b_bias = rand((1, 16, 1, 1), dtype, seed=3)
    prior = rand((2, 16, 5, 7), dtype, seed=4)
    for b in (None,) if op in ("sqrt", "not") else (b_full, b_bias):
        bb = None if b is None else to_backend(b, backend)
        r = op_tensor(op, to_backend(a, backend), bb, alpha1=1.5, alpha2=-0.5)
        assert_close(r, ref.op_tensor(op, a, b, 1.5, -0.5), dtype, what=op)
        out = to_backend(prior, backend)
        op_tensor(op, to_backend(a, backend), bb, alpha1=0.5, alpha2=2.0, beta=0.25, out=out)
        want = ref.op_tensor(op, a, b, 0.5, 2.0, 0.25, prior)
        # two float32 operations before the store (op, then the fma with beta)
        assert_close(out, want, dtype, rtol=ELEMENTWISE_RTOL[SHORT[dtype]] * 2, what=op)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: SHORT[d])
def test_set_tensor_takes_infinities_and_nan(backend: str, dtype: Any) -> None:
    """-inf (a running max's start), +inf and NaN fill as any value does, rounded to y's
    dtype (1e39 is inf in the 32-bit and 16-bit types); only non-numbers are refused."""
    for value in (-np.inf, np.inf, np.nan, 1e39):
        y = to_backend(np.zeros(7, dtype), backend)
        got = to_numpy(set_tensor(y, value)).astype(np.float64)
        with np.errstate(over="ignore"):
            want = np.float64(value) if dtype == np.float64 else np.float64(np.float32(value))
        np.testing.assert_array_equal(got, np.full(7, want))


@pytest.mark.parametrize("op", ["add", "mul", "max", "min"])
def test_op_tensor_out_shifted_over_an_input(backend: str, op: str) -> None:
    """out a shifted view of the same buffer as a (or b), of the same shape: not in place,
    so the input is read as it was (the op copied it only when the shapes differed and
    then read elements out had already overwritten)."""
    for which in ("a", "b"):
        host = np.arange(12, dtype=np.float32)
        other = np.full((2, 4), 2.5, np.float32)
        buf = to_backend(host, backend)
        inp, out = buf[:8].reshape(2, 4), buf[4:].reshape(2, 4)
        args = (inp, to_backend(other, backend)) if which == "a" else (
            to_backend(other, backend), inp)
        want = {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}[op](
            *(host[:8].reshape(2, 4), other)[:: 1 if which == "a" else -1])
        got = op_tensor(op, *args, out=out)
        np.testing.assert_array_equal(to_numpy(got), want)


def test_op_tensor_paths_and_broadcast_both_ways(backend: str) -> None:
    a = rand((4, 1, 6), np.float32, seed=5)
    b = rand((3, 1), np.float32, seed=6)
    r = op_tensor("mul", to_backend(a, backend), to_backend(b, backend))
    assert r.shape == (4, 3, 6) and last_kernel_name() == "tensor_binary_strided_fp32"
    assert_close(r, ref.op_tensor("mul", a, b), np.float32)
    c = rand((64,), np.float32, seed=7)
    op_tensor("add", to_backend(c, backend), to_backend(c, backend))
    assert last_kernel_name() == "tensor_binary_vec4_fp32"


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: SHORT[d])
def test_add_tensor_bias_on_resnet_shapes(backend: str, dtype: Any) -> None:
    for shape in ((2, 64, 7, 7), (2, 256, 3, 3), (1, 3, 11, 13)):
        c = rand(shape, dtype, seed=8)
        bias = rand((1, shape[1], 1, 1), dtype, seed=9)
        cb = to_backend(c, backend)
        assert add_tensor(to_backend(bias, backend), cb) is cb
        assert_close(cb, ref.add_tensor(bias, c), dtype)
        cb = to_backend(c, backend)
        add_tensor(to_backend(bias[0], backend), cb, alpha=2.0, beta=0.5)  # (C,1,1): padded
        assert_close(
            cb, ref.add_tensor(bias[0], c, 2.0, 0.5), dtype, rtol=2 * ELEMENTWISE_RTOL[SHORT[dtype]]
        )


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: SHORT[d])
@pytest.mark.parametrize("op", REDUCE_OPS)
def test_reduce_tensor(backend: str, dtype: Any, op: str) -> None:
    lo = 0.5 if op in ("mul", "mul_no_zeros") else -2  # products of 0.5..1.5 stay in range
    hi = 1.5 if lo == 0.5 else 2
    x = rand((2, 8, 5, 6), dtype, seed=10, lo=lo, hi=hi)
    if op == "mul_no_zeros":
        x[:, ::3] = 0
    xb = to_backend(x, backend)
    for axes in ((1,), (2, 3), (0, 2, 3), None, (0,), 3):
        idx = op in ("min", "max", "amax")
        r = reduce_tensor(xb, op, axes, return_indices=idx)
        if idx:
            check_reduce(r[0], x, op, axes, idx=r[1])
        else:
            check_reduce(r, x, op, axes)


def test_reduce_variants_and_long_rows(backend: str) -> None:
    x = rand((3, 5000), np.float32, seed=11)
    xb = to_backend(x, backend)
    check_reduce(reduce_tensor(xb, "sum", 1), x, "sum", 1)
    assert last_kernel_name() == "tensor_reduce_block_fp32"
    check_reduce(reduce_tensor(xb, "norm2", 0), x, "norm2", 0)
    assert last_kernel_name() == "tensor_reduce_thread_fp32"
    v, i = reduce_tensor(xb[:, :100], "max", 1, return_indices=True)
    assert last_kernel_name() == "tensor_reduce_warp_fp32"
    check_reduce(v, np.ascontiguousarray(x[:, :100]), "max", 1, idx=i)
    xt = to_backend(x.T.copy(), backend).T  # transposed view: no copy, any strides
    check_reduce(reduce_tensor(xt, "avg", 1), x, "avg", 1)


def test_reduce_keepdims_out_blending_and_random_schedule(
    backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CUDNNLITE_EMU_SCHEDULE", "random")
    x = rand((2, 3, 4, 5), np.float32, seed=12)
    r = reduce_tensor(to_backend(x, backend), "sum", (0, 2, 3), keepdims=True)
    assert r.shape == (1, 3, 1, 1)
    check_reduce(r, x, "sum", (0, 2, 3), keepdims=True)
    prior = rand((3,), np.float32, seed=13)
    out = to_backend(prior, backend)
    reduce_tensor(to_backend(x, backend), "avg", (0, 2, 3), alpha=2.0, beta=-1.0, out=out)
    want = 2.0 * ref.reduce_tensor(x, "avg", (0, 2, 3))[0] - prior
    np.testing.assert_allclose(to_numpy(out), want, rtol=1e-5, atol=1e-6)
    big = rand((2, 8192), np.float32, seed=14)
    check_reduce(reduce_tensor(to_backend(big, backend), "amax", 1), big, "amax", 1)


def test_reduce_nan_ties_and_empty(backend: str) -> None:
    x = np.array([[1.0, 3.0, 3.0, -3.0], [2.0, np.nan, 5.0, np.nan]], np.float32)
    v, i = reduce_tensor(to_backend(x, backend), "max", 1, return_indices=True)
    assert to_numpy(i).tolist() == [1, 1] and np.isnan(to_numpy(v)[1])
    v, i = reduce_tensor(to_backend(x[:1], backend), "amax", 1, return_indices=True)
    assert to_numpy(i).tolist() == [1]  # |3| == |-3|: the lower index
    e = to_backend(np.zeros((3, 0), np.float32), backend)
    np.testing.assert_array_equal(to_numpy(reduce_tensor(e, "sum", 1)), [0, 0, 0])
    np.testing.assert_array_equal(to_numpy(reduce_tensor(e, "mul", 1)), [1, 1, 1])
    assert reduce_tensor(e, "max", 0).shape == (0,)  # nothing to reduce into: no outputs
    z = to_backend(np.zeros((2, 3), np.float32), backend)
    np.testing.assert_array_equal(to_numpy(reduce_tensor(z, "mul_no_zeros", 1)), [1, 1])


@pytest.mark.parametrize("src", DTYPES, ids=lambda d: SHORT[d])
@pytest.mark.parametrize("dst", DTYPES, ids=lambda d: SHORT[d])
def test_transform_conversions_and_layouts(backend: str, src: Any, dst: Any) -> None:
    x = rand((2, 16, 5, 7), src, seed=15)
    y = nchw_to_nhwc(to_backend(x, backend), dtype=dst)
    assert y.shape == (2, 5, 7, 16) and y.flags.c_contiguous and y.dtype == dst
    want = converted(x.transpose(0, 2, 3, 1), dst)  # exact values, one rounding
    np.testing.assert_array_equal(to_numpy(y).astype(np.float64), want.astype(np.float64))
    back = nhwc_to_nchw(y, dtype=src)
    if np.dtype(dst).itemsize >= np.dtype(src).itemsize and not (
        SHORT[src] == "fp16" and SHORT[dst] == "bf16"
    ):
        np.testing.assert_array_equal(to_numpy(back), x)  # lossless round trip


def test_transform_strided_out_and_blending(backend: str) -> None:
    x = rand((4, 6), np.float32, seed=16)
    prior = rand((4, 12), np.float32, seed=17)
    out_base = to_backend(prior, backend)
    out = out_base[:, ::-2]
    transform_tensor(to_backend(x, backend), out, alpha=3.0, beta=0.5)
    want = ref.transform_tensor(x, 3.0, 0.5, prior[:, ::-2])
    assert_close(out, want, np.float32, rtol=4e-7)
    np.testing.assert_array_equal(to_numpy(out_base)[:, -2::-2], prior[:, -2::-2])


def test_scale_and_set(backend: str) -> None:
    x = rand((3, 5, 7), np.float16, seed=18)
    xb = to_backend(x, backend)
    assert scale_tensor(xb, -2.5) is xb
    assert_close(xb, x.astype(np.float64) * -2.5, np.float16)
    view = xb[:, ::2]
    set_tensor(view, 0.1)
    assert np.all(to_numpy(xb)[:, ::2] == np.float16(0.1))
    assert np.all(
        to_numpy(xb)[:, 1::2] == (x[:, 1::2].astype(np.float32) * -2.5).astype(np.float16)
    )


def test_bad_inputs_raise_and_leave_inputs_untouched(backend: str) -> None:
    x = rand((2, 3, 4), np.float32)
    xb = to_backend(x, backend)
    before = to_numpy(xb).tobytes()
    other = to_backend(rand((2, 5, 4), np.float32), backend)
    half = to_backend(x.astype(np.float16), backend)
    bad = [
        (lambda: op_tensor("div", xb, xb), "op"),
        (lambda: op_tensor("add", xb, other), "b"),
        (lambda: op_tensor("add", xb), "b"),
        (lambda: op_tensor("sqrt", xb, xb), "b"),
        (lambda: op_tensor("add", xb, half), "b"),
        (lambda: op_tensor("add", xb, xb, beta=1.0), "beta"),
        (lambda: op_tensor("add", xb, xb, alpha1="2"), "alpha1"),
        (lambda: add_tensor(other, xb), "a"),
        (lambda: reduce_tensor(xb, "median"), "op"),
        (lambda: reduce_tensor(xb, "sum", 3), "axes"),
        (lambda: reduce_tensor(xb, "sum", (0, -3)), "axes"),
        (lambda: reduce_tensor(xb, "sum", 1.5), "axes"),
        (lambda: reduce_tensor(xb, "sum", return_indices=True), "return_indices"),
        (lambda: reduce_tensor(to_backend(np.zeros((2, 0)), backend), "min", 1), "x"),
        (lambda: reduce_tensor(to_backend(np.zeros((2, 0), np.float32), backend), "max", 1), "x"),
        (lambda: reduce_tensor(to_backend(np.zeros((2, 0), np.float32), backend), "avg"), "x"),
        (
            lambda: reduce_tensor(xb, "sum", 1, out=to_backend(np.zeros(3, np.float32), backend)),
            "out",
        ),
        (lambda: transform_tensor(xb, dtype=np.int32), "dtype"),
        (lambda: nchw_to_nhwc(xb), "x"),
        (lambda: set_tensor(xb, "a"), "value"),
        (lambda: scale_tensor(to_backend(x.astype(np.int32), backend), 2.0), "y"),
        (lambda: op_tensor("add", xb, to_backend(x.astype(np.float64), backend)), "b"),
    ]
    for call, name in bad:
        with pytest.raises(BadParamError, match=name):
            call()
    assert to_numpy(xb).tobytes() == before


# ------------------------------------------------------------------ fast paths


@pytest.mark.parametrize("src", DTYPES, ids=lambda d: SHORT[d])
@pytest.mark.parametrize("dst", DTYPES, ids=lambda d: SHORT[d])
def test_tiled_transpose_odd_sizes(backend: str, src: Any, dst: Any) -> None:
    for c in (1, 31, 33, 97):
        for hw in ((1, 1), (1, 7), (13, 1), (5, 7)):  # H*W = 1, primes, 35 (partial tiles)
            x = rand((2, c, *hw), src, seed=c + hw[0])
            y = nchw_to_nhwc(to_backend(x, backend), dtype=dst)
            tiled = min(c, hw[0] * hw[1]) >= 4
            assert last_kernel_name().startswith("tensor_transpose" if tiled else "tensor_trans")
            assert (last_kernel_name() == f"tensor_transpose_{SHORT[src]}_to_{SHORT[dst]}") == tiled
            want = converted(x.transpose(0, 2, 3, 1), dst)  # one rounding
            np.testing.assert_array_equal(to_numpy(y).astype(np.float64), want.astype(np.float64))
            back = nhwc_to_nchw(y)
            assert (last_kernel_name() == f"tensor_transpose_{SHORT[dst]}_to_{SHORT[dst]}") == tiled
            np.testing.assert_array_equal(to_numpy(back), want.transpose(0, 3, 1, 2))


def test_tiled_transpose_blending_batch_one_and_random_schedule(
    backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CUDNNLITE_EMU_SCHEDULE", "random")
    x = rand((1, 70, 9, 11), np.float32, seed=30)  # N = 1: a plain 2-D transpose, 3x4 tiles
    prior = rand((1, 9, 11, 70), np.float16, seed=31)
    out = to_backend(prior, backend)
    transform_tensor(to_backend(x, backend).transpose(0, 2, 3, 1), out, alpha=2.0, beta=-0.5)
    assert last_kernel_name() == "tensor_transpose_fp32_to_fp16"
    want = ref.transform_tensor(x.transpose(0, 2, 3, 1), 2.0, -0.5, prior)
    assert_close(out, want, np.float16, rtol=2 * ELEMENTWISE_RTOL["fp16"])
    # a strided destination (rows apart by more than cols) keeps the tiled path
    base = to_backend(np.zeros((3, 99, 40), np.float32), backend)
    xs = rand((3, 40, 37), np.float32, seed=32)
    transform_tensor(to_backend(xs, backend).transpose(0, 2, 1), base[:, 1:38, :])
    assert last_kernel_name() == "tensor_transpose_fp32_to_fp32"
    np.testing.assert_array_equal(to_numpy(base)[:, 1:38], xs.transpose(0, 2, 1))
    assert not to_numpy(base)[:, 38:].any() and not to_numpy(base)[:, 0].any()


# (x shape, reduced axes, expected split kernel): a sum of everything, per-channel sums
# over N, H, W of NCHW (lanes walk the reduced range) and of NHWC (threads walk channels)
SPLIT_CASES = [
    ((4, 16, 32, 32), None, "split_block"),
    ((8, 16, 32, 32), (0, 2, 3), "split_block"),
    ((8, 16, 16, 64), (0, 1, 2), "split_thread"),
]


@pytest.mark.parametrize("case", range(len(SPLIT_CASES)))
def test_split_reductions(backend: str, case: int) -> None:
    shape, axes, kind = SPLIT_CASES[case]
    x = rand(shape, np.float32, seed=40 + case)
    xb = to_backend(x, backend)
    for op in ("sum", "avg", "norm1", "norm2", "max", "min", "amax"):
        idx = op in ("max", "min", "amax")
        r = reduce_tensor(xb, op, axes, return_indices=idx)
        if backend == "cpu":  # the GPU's target block count may not need a split
            assert last_kernel_name() == f"tensor_reduce_{kind}_fp32", op
        check_reduce(r[0] if idx else r, x, op, axes, idx=r[1] if idx else None)
        again = reduce_tensor(xb, op, axes, return_indices=idx)
        first, second = (r[0], again[0]) if idx else (r, again)
        assert to_numpy(first).tobytes() == to_numpy(second).tobytes()  # deterministic
    prior = rand(to_numpy(r[0]).shape, np.float32, seed=50)
    out = to_backend(prior, backend)
    reduce_tensor(xb, "sum", axes, alpha=0.5, beta=2.0, out=out)
    want = 0.5 * ref.reduce_tensor(x, "sum", axes)[0] + 2.0 * prior
    mag = 0.5 * ref.reduce_tensor(np.abs(x.astype(np.float64)), "sum", axes)[0] + 2 * abs(prior)
    n = x.size // max(1, prior.size)
    assert np.all(np.abs(to_numpy(out) - want) <= (n + 32) * 2.0**-24 * mag + 1e-30)


# Views whose reduced dims do not merge (slices, negative steps), one per kernel kind and
# number of reduced dims left after merging (1-3 have loops of their own, more the general
# walk): (base shape, the view's index, reduced axes, kernel kind on the emulator, dims).
# Each kernel's step (1, 32 or 256 elements) crosses dims of other sizes, so the walk
# carries through several digits at once.
UNMERGED_CASES = [
    ((6, 5, 7, 9), np.s_[::2, :, ::-1, 1:], (1, 2, 3), "warp", 3),
    ((3, 4, 3, 5, 2, 6), np.s_[:, ::-1, :, ::2, :, 1:], (1, 2, 3, 4, 5), "warp", 5),
    ((8, 3, 7, 9, 11), np.s_[:, :, ::-1, 1:, ::2], (1, 2, 3, 4), "warp", 4),
    ((64, 2, 40, 120), np.s_[:, 0, :, 5:], (1, 2), "block", 2),
    ((64, 3, 40, 70), np.s_[:, ::-1, ::2, 1:], (1, 2, 3), "block", 3),
    ((2, 8, 40, 60), np.s_[:, ::-1, :, 1:], (1, 2, 3), "split_block", 3),
    ((5, 6, 7, 40), np.s_[::-1, :, ::2, :], (0, 2), "thread", 2),
    ((6, 10, 9, 40), np.s_[::-1, :, 1:, :], (0, 1, 2), "split_thread", 3),
    ((2, 3, 300, 40), np.s_[:, :, :, ::-1], (0, 1, 2), "split_thread", 1),
]


def test_collapse_dims_in_order() -> None:
    """A reduction's dims merge only with their neighbours, in their order (the flattened
    index stays C order), when the strides of every operand compose; size-1 dims go."""
    # (axes' sizes, x strides, out strides) -> merged
    assert collapse_dims([4, 5, 6], [[30, 6, 1]], reorder=False) == ([120], [[1]])
    assert collapse_dims([4, 1, 5, 6], [[-30, 7, 6, 1]], reorder=False) == ([4, 30], [[-30, 1]])
    assert collapse_dims([4, 5], [[5, 1], [1, 4]], reorder=False) == ([4, 5], [[5, 1], [1, 4]])
    assert collapse_dims([4, 5], [[1, 4]], reorder=False) == ([4, 5], [[1, 4]])  # no reorder
    assert collapse_dims([4, 5], [[1, 4]]) == ([20], [[1]])
    assert collapse_dims([1, 1], [[3, 1]], reorder=False) == ([], [[]])


@pytest.mark.parametrize("case", range(len(UNMERGED_CASES)))
def test_reduce_unmerged_strided_views(backend: str, case: int) -> None:
    shape, index, axes, kind, dims = UNMERGED_CASES[case]
    base = rand(shape, np.float32, seed=70 + case)
    view = base[index]
    sizes = [view.shape[a] for a in axes]
    strides = [[view.strides[a] // view.itemsize for a in axes]]
    assert len(collapse_dims(sizes, strides, reorder=False)[0]) == dims  # (the case's point)
    x = np.ascontiguousarray(view)
    xb = to_backend(base, backend)[index]
    for op in (*REDUCE_OPS, "max_num"):
        name = "max" if op == "max_num" else op
        if op.startswith("mul"):  # products of many elements near 1 stay in range
            x = np.ascontiguousarray(rand(shape, np.float32, seed=case, lo=0.99, hi=1.01)[index])
            xb = to_backend(rand(shape, np.float32, seed=case, lo=0.99, hi=1.01), backend)[index]
        idx = name in ("min", "max", "amax")
        r = reduce_tensor(xb, name, axes, return_indices=idx, nan_propagation=op != "max_num")
        if backend == "cpu":  # (a GPU's block counts may choose another kind)
            assert last_kernel_name() == f"tensor_reduce_{kind}_fp32", op
        check_reduce(r[0] if idx else r, x, name, axes, idx=r[1] if idx else None)
    # Small integers sum exactly in float32: an element read twice, skipped or taken from a
    # wrong offset changes the sum (a summation-error tolerance could hide it).
    ints = np.random.default_rng(case).integers(-8, 9, shape).astype(np.float32)
    got = reduce_tensor(to_backend(ints, backend)[index], "sum", axes)
    want = ints[index].sum(axes, dtype=np.float64).astype(np.float32)
    np.testing.assert_array_equal(to_numpy(got), want)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: SHORT[d])
def test_split_reduction_half_types_with_ties(backend: str, dtype: Any) -> None:
    x = rand((2, 8, 64, 64), dtype, seed=60)  # 65536 elements, chunks of 4096
    x[1, 7, 63, 60] = x[0, 0, 0, 5] = 9.0  # a tie across chunks: the lower index wins
    xb = to_backend(x, backend)
    v, i = reduce_tensor(xb, "max", None, return_indices=True)
    assert float(to_numpy(v)) == 9.0 and int(to_numpy(i)) == 5
    check_reduce(reduce_tensor(xb, "sum", None), x, "sum", None)
    check_reduce(reduce_tensor(xb, "norm2", (0, 2, 3)), x, "norm2", (0, 2, 3))


# (c shape, bias shape, expected path): NCHW with inner % VEC == 0 or not, NHWC with
# C % VEC == 0 or not, a linear layer's (N, C) + (C,), N = 1
CHANNEL_CASES = [
    ((2, 32, 4, 4), (1, 32, 1, 1), "vec"),
    ((2, 33, 7, 7), (1, 33, 1, 1), "scalar"),
    ((2, 5, 5, 32), (1, 1, 1, 32), "vec"),
    ((2, 3, 3, 33), (33,), "scalar"),
    ((7, 96), (96,), "vec"),
    ((1, 24, 3, 5), (24, 1, 1), "scalar"),
]


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: SHORT[d])
def test_channel_bias_fast_path(backend: str, dtype: Any) -> None:
    rtol = 2 * ELEMENTWISE_RTOL[SHORT[dtype]]  # the op, then the fma with beta
    for i, (shape, bshape, path) in enumerate(CHANNEL_CASES):
        c = rand(shape, dtype, seed=70 + i)
        bias = rand(bshape, dtype, seed=80 + i)
        vec = 16 // np.dtype(dtype).itemsize
        name = f"tensor_channel_{f'vec{vec}' if path == 'vec' else 'scalar'}_{SHORT[dtype]}"
        if path == "vec" and (shape[-1] % vec if bshape[-1] > 1 else np.prod(shape[2:]) % vec):
            name = f"tensor_channel_scalar_{SHORT[dtype]}"  # fp16 / bf16 packs of 8
        cb = to_backend(c, backend)
        add_tensor(to_backend(bias, backend), cb, alpha=1.5, beta=0.5)
        assert last_kernel_name() == name, (shape, bshape)
        assert_close(cb, ref.add_tensor(bias, c, 1.5, 0.5), dtype, rtol=rtol)
        for op in ("add", "mul", "min", "max"):
            r = op_tensor(op, to_backend(c, backend), to_backend(bias, backend), alpha2=-2.0)
            assert last_kernel_name() == name
            assert_close(r, ref.op_tensor(op, c, bias, 1.0, -2.0), dtype, what=op)
            out = to_backend(c, backend)
            op_tensor(op, to_backend(bias, backend), out, alpha1=0.5, beta=0.25, out=out)
            assert last_kernel_name() == name  # the vector as a, the full operand as b
            assert_close(out, ref.op_tensor(op, bias, c, 0.5, 1.0, 0.25, c), dtype, rtol=rtol)
