"""Layer, group, instance and RMS norm and cross-channel LRN, forward and backward, on
every backend against the float64 reference of cudnnlite.reference.norm.

Tolerances: as tests/test_batch_norm.py's ``check``: float32 math with exact two-pass
row statistics, one rounding to the storage type at the store (2 units of its
roundoff, relative), plus K32 float32 ulps of the result's scale for the reductions.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import pytest
from test_batch_norm import check, data, snapshot  # noqa: E402

import cudnnlite.ops.batch_norm as BN
import cudnnlite.ops.group_norm as GN
import cudnnlite.ops.lrn as LRN
import cudnnlite.ops.norm_common as NC
import cudnnlite.ops.row_norm as ROW
from cudnnlite import dtypes
from cudnnlite.errors import BadParamError
from cudnnlite.ops.norm_common import last_kernel_name
from cudnnlite.reference import norm as rn
from cudnnlite.runtime.select import backend_by_name
from cudnnlite.testing import to_backend, to_numpy

# The float32-computing types; float64 (computed in double) has its own few cases and
# tolerances in tests/test_norm_fp64.py (a full fp64 cross product would cost CI time).
DTYPES = [d.numpy for d in dtypes.FP32_COMPUTE_TYPES]
SHORT = {d.numpy: d.short for d in dtypes.FP32_COMPUTE_TYPES}


def wb(shape: tuple[int, ...], dtype: Any, seed: int = 3) -> tuple[np.ndarray, np.ndarray]:
    r = np.random.default_rng(seed)
    return (r.uniform(0.5, 1.5, shape).astype(dtype), r.standard_normal(shape).astype(dtype))


def grad_scale(dy: np.ndarray, w: np.ndarray | None, rstd: np.ndarray) -> float:
    wmax = 1.0 if w is None else float(np.abs(w.astype(float)).max())
    return float(np.abs(dy.astype(float)).max()) * wmax * float(np.max(rstd)) * 4


# BERT (tokens x hidden, scaled: 768 -> 96) and LLaMA-like RMS rows, odd sizes: a
# prime row length, a single element per row, 3-d normalized shapes.
LN_CASES = [
    ((6, 96), (96,)),
    ((2, 3, 37), (37,)),
    ((5, 1), (1,)),
    ((2, 4, 3, 5), (3, 5)),
    ((3, 700), (700,)),
]


@pytest.mark.parametrize("dtype", DTYPES, ids=SHORT.get)
@pytest.mark.parametrize("affine", [True, False])
@pytest.mark.parametrize("case", LN_CASES, ids=str)
def test_layer_norm(backend: str, case, affine: bool, dtype: Any) -> None:
    shape, ns = case
    x = data(shape, dtype, 1)
    dy = data(shape, dtype, 2, 0.0, 1.0)
    w, b = wb(ns, dtype) if affine else (None, None)
    ry, rmean, rrstd = rn.layer_norm(x, ns, w, b, 1e-5)
    tb = lambda a: None if a is None else to_backend(a, backend)  # noqa: E731
    y, mean, rstd = ROW.layer_norm_forward(tb(x), ns, tb(w), tb(b))
    assert mean.shape == shape[: len(shape) - len(ns)] and y.dtype == dtype
    check(y, ry, dtype, what="y")
    check(mean, rmean, np.float32, scale=8.0)
    check(rstd, rrstd, np.float32)
    dx, dw, db = ROW.layer_norm_backward(tb(dy), tb(x), ns, mean, rstd, tb(w), tb(b))
    rdx, rdw, rdb = rn.layer_norm_backward(dy, x, ns, rmean, rrstd, w)
    check(dx, rdx, dtype, scale=grad_scale(dy, w, rrstd))
    if affine:
        rows = x.size // int(np.prod(ns))
        check(dw, rdw, dtype, scale=float(np.abs(dy.astype(float)).max()) * 4 * rows)
        check(db, rdb, dtype, scale=float(np.abs(dy.astype(float)).max()) * rows)
    else:
        assert dw is None and db is None


def _form(dtype: Any, cols: int, aligned: bool = True) -> str:
    """The suffix of the row kernel a row of ``cols`` elements runs: ``_rows`` (a group of
    lanes per row: at most 32 16-byte packs), ``_vec`` (longer rows of whole packs), or
    ``""`` (elements: a row of no whole packs, or misaligned)."""
    vec = 16 // np.dtype(dtype).itemsize
    if not aligned or cols % vec:
        return ""
    return "_rows" if cols // vec <= 32 else "_vec"


def _shifted(a: np.ndarray | None, backend: str) -> Any:
    """``a`` on ``backend``, its data one element past a 16-byte boundary."""
    if a is None:
        return None
    padded = np.concatenate([np.zeros(1, a.dtype), a.reshape(-1)])
    return to_backend(padded, backend)[1:].reshape(a.shape)


# Row lengths of one pack, of 32 packs or fewer (fp32: 96; a group of lanes per row), of a
# pack count no multiple of the block, of BERT and of a long row; weight and bias, weight
# alone, neither.
@pytest.mark.parametrize("dtype", DTYPES, ids=SHORT.get)
@pytest.mark.parametrize("cols", [8, 96, 768, 1032, 4104])
@pytest.mark.parametrize("params", ["wb", "w", "none"])
def test_row_norms_vector_form(backend: str, dtype: Any, cols: int, params: str) -> None:
    """Aligned rows whose length is a multiple of the 16-byte pack run rownorm_*_rows or
    rownorm_*_vec; a misaligned x or weight runs the element kernels; all against the
    reference."""
    shape, ns = (5, cols), (cols,)
    x, dy = data(shape, dtype, 5), data(shape, dtype, 6, 0.0, 1.0)
    w, b = wb(ns, dtype)
    w, b = (w, b) if params == "wb" else (w, None) if params == "w" else (None, None)
    ry, rmean, rrstd = rn.layer_norm(x, ns, w, b, 1e-5)
    rdx, _, _ = rn.layer_norm_backward(dy, x, ns, rmean, rrstd, w)
    ty, trstd = rn.rms_norm(x, ns, w)
    tdx, _ = rn.rms_norm_backward(dy, x, ns, trstd, w)
    tb = lambda a: None if a is None else to_backend(a, backend)  # noqa: E731
    shifts = [(False, False), (True, False)] + ([(False, True)] if w is not None else [])
    for shift_x, shift_w in shifts:
        vec = _form(dtype, cols, not (shift_x or shift_w))
        xs = _shifted(x, backend) if shift_x else tb(x)
        dys = _shifted(dy, backend) if shift_x else tb(dy)
        ws = _shifted(w, backend) if shift_w else tb(w)
        y, mean, rstd = ROW.layer_norm_forward(xs, ns, ws, tb(b))
        assert last_kernel_name() == f"rownorm_fwd_mean{vec}_{SHORT[dtype]}"
        check(y, ry, dtype, what="y")
        check(rstd, rrstd, np.float32)
        dx, _, _ = ROW.layer_norm_backward(dys, xs, ns, mean, rstd, ws, tb(b))
        if w is None:  # (with a weight, dweight's kernels launch last)
            assert last_kernel_name() == f"rownorm_bwd_mean{vec}_{SHORT[dtype]}"
        check(dx, rdx, dtype, scale=grad_scale(dy, w, rrstd))
        y, rstd = ROW.rms_norm_forward(xs, ns, ws)
        assert last_kernel_name() == f"rownorm_fwd_rms{vec}_{SHORT[dtype]}"
        check(y, ty, dtype, what="rms y")
        dx, _ = ROW.rms_norm_backward(dys, xs, ns, rstd, ws)
        check(dx, tdx, dtype, scale=grad_scale(dy, w, trstd))


@pytest.mark.parametrize("dtype", DTYPES, ids=SHORT.get)
def test_few_long_rows_take_split_statistics(backend: str, dtype: Any) -> None:
    """Fewer rows than twice the SMs, each of >= SPLIT_MIN_COLS elements: statistics from
    split Welford reductions and the output from rownorm_apply, the backward from
    per-stretch sums (layer, RMS and group norm; a row one element shorter: one block
    per row), against the reference; a constant row still normalizes to exactly 0 about
    its first element."""
    tb = lambda a: None if a is None else to_backend(a, backend)  # noqa: E731
    n = ROW.SPLIT_MIN_COLS
    for (rows, cols), params in (((3, n + 808), "wb"), ((2, n), "none"), ((1, 2 * n + 5), "w"),
                                 ((2, n - 1), "wb")):  # fmt: skip
        x = data((rows, cols), dtype, 7, 5.0, 2.0)
        w, b = wb((cols,), dtype)
        w, b = (w, b) if params == "wb" else (w, None) if params == "w" else (None, None)
        y, mean, rstd = ROW.layer_norm_forward(tb(x), (cols,), tb(w), tb(b))
        want = f"rownorm_apply_{SHORT[dtype]}" if cols >= n else f"rownorm_fwd_mean_{SHORT[dtype]}"
        assert last_kernel_name() == want
        ry, rmean, rrstd = rn.layer_norm(x, (cols,), w, b, 1e-5)
        check(y, ry, dtype, what="y")
        check(mean, rmean, np.float32, scale=8.0)
        check(rstd, rrstd, np.float32)
        dy = data((rows, cols), dtype, 9, 0.0, 1.0)
        dx, dw, db = ROW.layer_norm_backward(tb(dy), tb(x), (cols,), mean, rstd, tb(w), tb(b))
        if w is None:  # (with a weight, dweight's kernels launch last)
            split = "bwd_apply_mean" if cols >= n else "bwd_mean"
            assert last_kernel_name() == f"rownorm_{split}_{SHORT[dtype]}"
        rdx, rdw, rdb = rn.layer_norm_backward(dy, x, (cols,), rmean, rrstd, w)
        check(dx, rdx, dtype, scale=grad_scale(dy, w, rrstd))
        if w is not None:
            check(dw, rdw, dtype, scale=float(np.abs(dy.astype(float)).max()) * 4 * rows)
        y, rstd = ROW.rms_norm_forward(tb(x), (cols,), tb(w))
        ty, trstd = rn.rms_norm(x, (cols,), w)
        check(y, ty, dtype, what="rms y")
        dx, _ = ROW.rms_norm_backward(tb(dy), tb(x), (cols,), rstd, tb(w))
        if w is None:
            split = "bwd_apply_rms" if cols >= n else "bwd_rms"
            assert last_kernel_name() == f"rownorm_{split}_{SHORT[dtype]}"
        tdx, _ = rn.rms_norm_backward(dy, x, (cols,), trstd, w)
        check(dx, tdx, dtype, scale=grad_scale(dy, w, trstd))
    # group norm (NCHW): 2 x 2 groups of 4 channels of 48 x 48, each channel's own weight
    x, dy = data((2, 8, 48, 48), dtype, 8), data((2, 8, 48, 48), dtype, 10, 0.0, 1.0)
    w, b = wb((8,), dtype)
    y, mean, rstd = GN.group_norm_forward(tb(x), 2, tb(w), tb(b))
    assert last_kernel_name() == f"rownorm_apply_{SHORT[dtype]}"
    ry, rmean, rrstd = rn.group_norm(x, 2, w, b, 1e-5, "NCHW")
    check(y, ry, dtype)
    check(rstd, rrstd, np.float32)
    dx, dw, db = GN.group_norm_backward(tb(dy), tb(x), 2, mean, rstd, tb(w), tb(b))
    rdx, rdw, rdb = rn.group_norm_backward(dy, x, 2, rmean, rrstd, w, "NCHW")
    check(dx, rdx, dtype, scale=grad_scale(dy, w, rrstd))
    check(db, rdb, dtype, scale=float(np.abs(dy.astype(float)).max()) * x.size // 8)
    v = {np.float16: 3e4}.get(dtype, 12345.678)
    y, mean, _ = ROW.layer_norm_forward(tb(np.full((2, n), v, dtype)), (n,))
    assert last_kernel_name() == f"rownorm_apply_{SHORT[dtype]}"
    assert (to_numpy(y) == 0).all() and (to_numpy(mean) == float(np.dtype(dtype).type(v))).all()


@pytest.mark.parametrize("dtype", DTYPES, ids=SHORT.get)
@pytest.mark.parametrize("affine", [True, False])
@pytest.mark.parametrize("case", [((4, 64), (64,)), ((3, 2, 11), (2, 11))], ids=str)
def test_rms_norm(backend: str, case, affine: bool, dtype: Any) -> None:
    shape, ns = case
    x = data(shape, dtype, 3)
    dy = data(shape, dtype, 4, 0.0, 1.0)
    w = wb(ns, dtype)[0] if affine else None
    ry, rrstd = rn.rms_norm(x, ns, w)  # eps None: x's machine epsilon, as PyTorch
    tb = lambda a: None if a is None else to_backend(a, backend)  # noqa: E731
    y, rstd = ROW.rms_norm_forward(tb(x), ns, tb(w))
    check(y, ry, dtype)
    check(rstd, rrstd, np.float32)
    assert last_kernel_name() == f"rownorm_fwd_rms{_form(dtype, int(np.prod(ns)))}_{SHORT[dtype]}"
    dx, dw = ROW.rms_norm_backward(tb(dy), tb(x), ns, rstd, tb(w))
    rdx, rdw = rn.rms_norm_backward(dy, x, ns, rrstd, w)
    check(dx, rdx, dtype, scale=grad_scale(dy, w, rrstd))
    if affine:
        rows = x.size // int(np.prod(ns))
        check(dw, rdw, dtype, scale=float(np.abs(dy.astype(float)).max()) * 4 * rows)
    else:
        assert dw is None


# ResNet-style GN (32 groups of 64 channels, scaled to 8 of 16), groups of 1 and of C,
# C not a multiple of 32, H*W = 1; rows longer than the block (NCHW: a thread's walk along
# its row crosses channels, H*W above and below the block size, dividing neither).
GN_CASES = [
    ((2, 16, 5, 6), 8),
    ((1, 6, 23, 29), 2),
    ((1, 4, 13, 11), 1),
    ((2, 12, 3, 3), 1),
    ((3, 6, 4, 1), 6),
    ((2, 35, 1, 1), 5),
    ((1, 4, 7), 2),
]


@pytest.mark.parametrize("dtype", DTYPES, ids=SHORT.get)
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("case", GN_CASES, ids=str)
def test_group_norm(backend: str, case, layout: str, dtype: Any) -> None:
    shape, g = case
    c = shape[1]
    if layout == "NHWC":
        shape = (shape[0], *shape[2:], c)
    x = data(shape, dtype, 5)
    dy = data(shape, dtype, 6, 0.0, 1.0)
    w, b = wb((c,), dtype)
    ry, rmean, rrstd = rn.group_norm(x, g, w, b, 1e-5, layout)
    tb = lambda a: to_backend(a, backend)  # noqa: E731
    y, mean, rstd = GN.group_norm_forward(tb(x), g, tb(w), tb(b), layout=layout)
    assert mean.shape == (shape[0], g)
    check(y, ry, dtype)
    check(rstd, rrstd, np.float32)
    dx, dw, db = GN.group_norm_backward(tb(dy), tb(x), g, mean, rstd, tb(w), tb(b), layout=layout)
    rdx, rdw, rdb = rn.group_norm_backward(dy, x, g, rmean, rrstd, w, layout)
    check(dx, rdx, dtype, scale=grad_scale(dy, w, rrstd))
    per = x.size // c
    check(dw, rdw, dtype, scale=float(np.abs(dy.astype(float)).max()) * 4 * per)
    check(db, rdb, dtype, scale=float(np.abs(dy.astype(float)).max()) * per)


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_instance_norm(backend: str, layout: str) -> None:
    shape = (2, 5, 6, 7) if layout == "NCHW" else (2, 6, 7, 5)
    x = data(shape, np.float32, 7)
    dy = data(shape, np.float32, 8, 0.0, 1.0)
    ry, rmean, rrstd = rn.instance_norm(x, None, None, 1e-5, layout)
    y, mean, rstd = GN.instance_norm_forward(to_backend(x, backend), layout=layout)
    assert mean.shape == (2, 5)
    check(y, ry, np.float32)
    dx, dw, db = GN.instance_norm_backward(
        to_backend(dy, backend), to_backend(x, backend), mean, rstd, layout=layout
    )
    assert dw is None and db is None
    rdx = rn.instance_norm_backward(dy, x, rmean, rrstd, None, layout)[0]
    check(dx, rdx, np.float32, scale=grad_scale(dy, None, rrstd))
    check(GN.instance_norm(to_backend(x, backend), layout=layout), ry, np.float32)


def test_row_norm_cancellation(backend: str) -> None:
    # mean 1e4, std 1 per row: the two-pass statistics keep full accuracy
    x = data((4, 512), np.float32, 9, loc=1e4, sd=1.0)
    ry, _, rrstd = rn.layer_norm(x, (512,))
    y, _, rstd = ROW.layer_norm_forward(to_backend(x, backend), (512,))
    np.testing.assert_allclose(to_numpy(rstd), rrstd, rtol=1e-5)
    np.testing.assert_allclose(to_numpy(y), ry, atol=2e-3)  # x itself is quantized to 2^-10


def test_strided_input_and_out(backend: str) -> None:
    x = data((6, 40), np.float32, 10)[::2, ::2]
    out = to_backend(np.zeros((3, 40), np.float32), backend)[:, ::2]
    y = ROW.layer_norm(to_backend(np.ascontiguousarray(x), backend)[...], (20,), out=out)
    assert y is out
    check(out, rn.layer_norm(x, (20,))[0], np.float32)
    xs = to_backend(data((6, 40), np.float32, 10), backend)[::2, ::2]
    check(ROW.layer_norm(xs, (20,)), rn.layer_norm(x, (20,))[0], np.float32)


@pytest.mark.parametrize("dtype", DTYPES, ids=SHORT.get)
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("size,k", [(5, 2.0), (4, 1.0), (1, 1.0), (9, 0.5)])
def test_lrn(backend: str, size: int, k: float, layout: str, dtype: Any) -> None:
    # AlexNet's LRN (size 5, alpha 1e-4, beta 0.75, k 2) at a strong alpha to exercise it
    shape = (2, 13, 3, 4) if layout == "NCHW" else (2, 3, 4, 13)
    x = data(shape, dtype, 11)
    dy = data(shape, dtype, 12, 0.0, 1.0)
    args = (size, 0.3, 0.75, k)
    y = LRN.lrn(to_backend(x, backend), *args, layout=layout)
    check(y, rn.lrn(x, *args, layout=layout), dtype)
    dx = LRN.lrn_backward(to_backend(dy, backend), to_backend(x, backend), *args, layout=layout)
    check(dx, rn.lrn_backward(dy, x, *args, layout=layout), dtype)


@pytest.mark.parametrize(
    "call,match",
    [
        (lambda x, t: GN.group_norm(x, 3), "num_groups: expected a positive divisor of the 8"),
        (lambda x, t: GN.group_norm(x, 0), "num_groups"),
        (lambda x, t: GN.group_norm(x, 2, t(np.ones(4, np.float32))), "weight: expected shape"),
        (lambda x, t: GN.group_norm(x, 2, eps=-1.0), "eps"),
        (lambda x, t: GN.group_norm(x, 2, layout="CHWN"), "layout"),
        (lambda x, t: ROW.layer_norm(x, (5,)), "normalized_shape: expected the trailing dims"),
        (lambda x, t: ROW.layer_norm(x, (-3,)), "normalized_shape: expected ints >= 0"),
        (lambda x, t: ROW.layer_norm(x, (0,)), "normalized_shape: expected the trailing dims"),
        (lambda x, t: ROW.layer_norm(x, (3,), t(np.ones(3, np.float16))), "weight: expected dtype"),
        (lambda x, t: ROW.rms_norm(x, (3,), eps=float("nan")), "eps"),
        (lambda x, t: ROW.layer_norm_backward(x, x, (3,), None, None), "mean"),
        (lambda x, t: LRN.lrn(x, 0), "size: expected a positive int"),
        (lambda x, t: LRN.lrn(x, 3, k=0.0, alpha=0.0), "k: expected k > 0"),
        (lambda x, t: GN.instance_norm(x, t(np.ones(3, np.float32))), "weight: expected shape"),
    ],
)
def test_bad_arguments(backend: str, call, match: str) -> None:
    x = to_backend(data((2, 8, 4, 3), np.float32, 13), backend)
    before = snapshot(x)
    with pytest.raises(BadParamError, match=match):
        call(x, lambda a: to_backend(a, backend))
    assert snapshot(x) == before


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_empty_batch_and_rows_of_no_elements_as_pytorch(backend: str, dtype) -> None:
    """Batch norm training on an empty batch: an empty y, the running statistics left as
    they are, zero parameter gradients (a batch of one value per channel still raises).
    Layer / RMS norm over a normalized shape with a 0: empty y and dx, mean 0 and rstd
    NaN (0 / 0), empty parameter gradients, as PyTorch's."""
    t = functools.partial(to_backend, backend=backend)
    acc = np.float64 if dtype == np.float64 else np.float32
    x = t(np.zeros((0, 3, 4), dtype))
    rm, rv = t(np.full(3, 0.5, acc)), t(np.full(3, 2.0, acc))
    y, mean, invstd = BN.batch_norm_forward_training(x, None, None, rm, rv)
    assert y.shape == (0, 3, 4) and mean.shape == invstd.shape == (3,)
    assert (to_numpy(rm) == 0.5).all() and (to_numpy(rv) == 2.0).all()
    assert BN.batch_norm(x, rm, rv, training=True).shape == (0, 3, 4)
    dx, dw, db, dz = BN.batch_norm_backward(x, x, mean, invstd, t(np.ones(3, acc)))
    assert dx.shape == (0, 3, 4) and dz is None
    assert (to_numpy(dw) == 0).all() and (to_numpy(db) == 0).all() and dw.shape == (3,)
    with pytest.raises(BadParamError, match="more than one value per channel"):
        BN.batch_norm_forward_training(t(np.zeros((1, 3, 1), dtype)))
    # an empty spatial dim (the vector kernels divided by it: the emulator died of SIGFPE)
    for shape, layout in (((2, 3, 2, 0), "NCHW"), ((2, 3, 0), "NCHW"), ((2, 0, 3), "NHWC")):
        xe = t(np.zeros(shape, dtype))
        ye = BN.batch_norm_forward_inference(xe, rm, rv, layout=layout, activation="relu")
        assert ye.shape == shape
        assert BN.batch_norm_forward_training(xe, layout=layout)[0].shape == shape

    x = t(np.zeros((2, 0, 3), dtype))
    w, b = t(np.ones((0, 3), dtype)), t(np.zeros((0, 3), dtype))
    y, mean, rstd = ROW.layer_norm_forward(x, (0, 3), w, b)
    assert y.shape == (2, 0, 3)
    np.testing.assert_array_equal(to_numpy(mean), [0.0, 0.0])
    assert np.isnan(to_numpy(rstd)).all() and rstd.shape == (2,)
    dx, dw, db = ROW.layer_norm_backward(x, x, (0, 3), mean, rstd, w, b)
    assert dx.shape == (2, 0, 3) and dw.shape == db.shape == (0, 3)
    y, rstd = ROW.rms_norm_forward(x, (0, 3))
    assert y.shape == (2, 0, 3) and np.isnan(to_numpy(rstd)).all()
    dx, dw = ROW.rms_norm_backward(x, x, (0, 3), rstd, w)
    assert dx.shape == (2, 0, 3) and dw.shape == (0, 3)
    torch = pytest.importorskip("torch")
    ref = torch.native_layer_norm(torch.zeros(2, 0, 3, dtype=torch.float64), (0, 3), None,
                                  None, 1e-5)  # fmt: skip
    assert ref[1].flatten().tolist() == [0.0, 0.0] and ref[2].isnan().all()


def test_parameters_past_one_capped_grid(backend: str) -> None:
    # The finalize kernels (per-channel statistics, parameter gradients) run one thread per
    # channel: more channels than the families' capped grid has threads must still all be
    # written (launched on that grid, they were left as allocated). N = 2 keeps it cheap.
    table = NC._table(backend_by_name(backend), dtypes.FLOAT32)
    c = table.max_grid * NC._BLOCK + 3
    tb = lambda a: None if a is None else to_backend(a, backend)  # noqa: E731
    x, dy = data((2, c), np.float32, 40), data((2, c), np.float32, 41, 0.0, 1.0)
    w, b = wb((c,), np.float32)
    # batch norm (training: statistics and running statistics; backward: dgamma, dbeta)
    rm, rv = np.zeros(c, np.float32), np.ones(c, np.float32)
    rmb, rvb = tb(rm), tb(rv)
    y, mean, invstd = BN.batch_norm_forward_training(tb(x), tb(w), tb(b), rmb, rvb)
    ref = rn.batch_norm_train(x, w, b, 1e-5, rm, rv, 0.1)
    check(y, ref["y"], np.float32)
    check(mean, ref["mean"], np.float32, scale=8.0)
    check(rmb, ref["running_mean"], np.float32, scale=8.0)
    check(rvb, ref["running_var"], np.float32, scale=8.0)
    _, dw, db = BN.batch_norm_backward(tb(dy), tb(x), mean, invstd, tb(w))[:3]
    g = rn.batch_norm_backward(dy, x, w, ref["mean"], ref["invstd"])
    check(dw, g["dgamma"], np.float32, scale=8.0)
    check(db, g["dbeta"], np.float32, scale=8.0)
    # layer norm and RMS norm over rows of c: dweight, dbias
    _, lmean, lrstd = ROW.layer_norm_forward(tb(x), (c,), tb(w), tb(b))
    _, dw, db = ROW.layer_norm_backward(tb(dy), tb(x), (c,), lmean, lrstd, tb(w), tb(b))
    check(dw, (dy * (x - x.mean(1, keepdims=True)) * to_numpy(lrstd)[:, None]).sum(0),
          np.float32, scale=8.0)  # fmt: skip
    check(db, dy.sum(0), np.float32, scale=8.0)
    _, rrstd = ROW.rms_norm_forward(tb(x), (c,), tb(w))
    _, dw = ROW.rms_norm_backward(tb(dy), tb(x), (c,), rrstd, tb(w))
    check(dw, (dy * x * to_numpy(rrstd)[:, None]).sum(0), np.float32, scale=8.0)
    # group norm (one group) on (2, c, 1): dweight, dbias per channel
    x3, dy3 = x[:, :, None], dy[:, :, None]
    _, gmean, grstd = GN.group_norm_forward(tb(x3), 1, tb(w), tb(b))
    _, dw, db = GN.group_norm_backward(tb(dy3), tb(x3), 1, gmean, grstd, tb(w), tb(b))
    xhat = (x - to_numpy(gmean)) * to_numpy(grstd)
    check(dw, (dy * xhat).sum(0), np.float32, scale=8.0)
    check(db, dy.sum(0), np.float32, scale=8.0)


@pytest.mark.parametrize("dtype", [*DTYPES, np.float64], ids=lambda d: np.dtype(d).name)
def test_constant_rows_normalize_to_exactly_zero(backend: str, dtype: Any) -> None:
    # A row / group of one repeated value: its statistics are taken about its first
    # element, so the mean is that value exactly and y is the bias, as PyTorch's Welford
    # gives (sum / n rounded off x: 12345.678 in float32 normalized to 0.295 everywhere).
    # Sums of values near the float32 maximum stay finite the same way (4e36 * 100).
    v = {np.float16: 3e4}.get(dtype, 12345.678)
    tb = lambda a: to_backend(a, backend)  # noqa: E731
    x2, x4 = np.full((2, 25), v, dtype), np.full((2, 4, 5, 5), v, dtype)
    b = np.arange(4).astype(dtype)
    y, mean, _ = ROW.layer_norm_forward(tb(x2), (25,))
    assert (to_numpy(y) == 0).all() and (to_numpy(mean) == float(x2[0, 0])).all()
    for layout, xs in (("NCHW", x4), ("NHWC", x4.transpose(0, 2, 3, 1).copy())):
        y = GN.group_norm_forward(tb(xs), 2, None, tb(b), layout=layout)[0]
        assert (to_numpy(y) == (b if layout == "NHWC" else b[:, None, None])).all(), layout
    y = GN.instance_norm_forward(tb(x4))[0]
    assert (to_numpy(y) == 0).all()
    if np.dtype(dtype) == np.float32:
        assert (to_numpy(ROW.layer_norm(tb(np.full((1, 100), 4e36, dtype)), (100,))) == 0).all()
        # the backward of a constant plane: xhat is 0, dx = rstd * (dy - mean(dy))
        x = np.full((1, 1, 5, 5), 1e19, dtype)
        dy = (np.arange(25, dtype=dtype) - 12).reshape(x.shape)
        _, m, r = GN.instance_norm_forward(tb(x))
        dx = GN.instance_norm_backward(tb(dy), tb(x), m, r)[0]
        np.testing.assert_allclose(to_numpy(dx), to_numpy(r).item() * (dy - dy.mean()),
                                   rtol=1e-6)  # fmt: skip


@pytest.mark.parametrize("scale", [1e10, 1e15, 1e17])
def test_lrn_backward_of_large_inputs(backend: str, scale: float) -> None:
    # scale^(-beta-1) underflows float32 near |x| = 1e15 (scale ~ x^2); the backward forms
    # x / scale first, so the gradient keeps float32 accuracy up to about 1e17.
    x = np.array([1.0, 2.0, -1.0], np.float32).reshape(1, 3, 1, 1) * np.float32(scale)
    dy = np.array([1.0, 0.5, -1.0], np.float32).reshape(1, 3, 1, 1)
    want = rn.lrn_backward(dy, x, 3, 1.0, 0.5, 2.0)
    got = LRN.lrn_backward(to_backend(dy, backend), to_backend(x, backend), 3, 1.0, 0.5, 2.0)
    np.testing.assert_allclose(to_numpy(got), want, rtol=1e-5)


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_group_norm_of_empty_spatial_dims_is_pytorchs(layout: str) -> None:
    """Groups of no elements launch nothing (the kernels read each group's first element;
    the row walk divided by H*W = 0: the emulator died of SIGFPE): PyTorch's answer, mean
    0, rstd NaN, dx empty, dweight NaN, dbias 0."""
    torch = pytest.importorskip("torch")
    shape = (2, 4, 0, 3) if layout == "NCHW" else (2, 0, 3, 4)
    x, w, b = np.zeros(shape, np.float32), np.ones(4, np.float32), np.zeros(4, np.float32)
    y, mean, rstd = GN.group_norm_forward(x, 2, w, b, layout=layout)
    xt = torch.zeros((2, 4, 0, 3), requires_grad=True)
    wt, bt = torch.ones(4, requires_grad=True), torch.zeros(4, requires_grad=True)
    _, tmean, trstd = torch.native_group_norm(xt, wt, bt, 2, 4, 0, 2, 1e-5)
    torch.nn.functional.group_norm(xt, 2, wt, bt).sum().backward()
    assert y.shape == shape
    np.testing.assert_array_equal(mean, tmean.detach().numpy())
    np.testing.assert_array_equal(rstd, trstd.detach().numpy())  # (NaN where torch's)
    dx, dw, db = GN.group_norm_backward(x, x, 2, mean, rstd, w, b, layout=layout)
    assert dx.shape == shape
    np.testing.assert_array_equal(dw, wt.grad.numpy())
    np.testing.assert_array_equal(db, bt.grad.numpy())
