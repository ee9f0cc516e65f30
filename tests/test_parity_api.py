"""PyTorch parity of the functions and options PyTorch users reach for (issue 12):
hardtanh, relu6, hardswish, hardsigmoid, mish; softmax/log_softmax(dtype=); dropout in
evaluation mode; instance norm with running statistics; batch-norm backward in
inference mode; ``algo=`` families; NaN propagation (max pooling, op_tensor max/min,
reduce_tensor min/max, activations); ``python -m cudnnlite``.

Compared with CPU PyTorch (the ``interop`` extra; skipped without it), forward and
backward, float32 and float64. Modules: the activation, softmax, tensor, pooling and
norm modules of float32 and float64 that the family tests already build (no new one).
"""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import numpy as np
import pytest

import cudnnlite as cl
from cudnnlite import reference as ref
from cudnnlite.errors import BadParamError, NotSupportedError
from cudnnlite.testing import to_backend, to_numpy

torch = pytest.importorskip("torch")
F = torch.nn.functional

NAN, INF = float("nan"), float("inf")
DTYPES = [np.float32, np.float64]
TORCH_DT = {np.float32: torch.float32, np.float64: torch.float64}
# Elementwise results: float32 math against PyTorch's float32 math (a few roundings
# apart: exp/tanh/log1p differ by an ulp or two between libms); float64 the same in double.
TOL = {np.float32: dict(rtol=2e-6, atol=1e-7), np.float64: dict(rtol=1e-14, atol=1e-300)}


def _t(a: np.ndarray, grad: bool = False) -> Any:
    return torch.from_numpy(np.array(a)).requires_grad_(grad)


def _close(got: Any, want: Any, dtype: Any, what: str, **tol: float) -> None:
    want = want.detach().numpy() if hasattr(want, "detach") else np.asarray(want)
    np.testing.assert_allclose(
        to_numpy(got).astype(np.float64), want.astype(np.float64), equal_nan=True,
        err_msg=what, **{**TOL[dtype], **tol},
    )  # fmt: skip


# ------------------------------------------------------------------ new activations

# Every kink and bound the functions have (the exact points where PyTorch picks a side),
# values around them, large values, and NaN. The infinities differ on purpose (below).
KINKS = [-8.0, -4.0, -3.0, -2.5, -1.0, -0.5, -0.0, 0.0, 0.5, 1.0, 2.0, 2.9, 3.0, 3.5, 6.0,
         7.0, 30.0, -30.0, 1e4, -1e4, NAN]  # fmt: skip

ACTS = {
    # name: (cudnnlite call, torch call, mode, coef, threshold)
    "hardtanh": (cl.hardtanh, F.hardtanh, "hardtanh", None, None),
    "hardtanh(-2,3)": (lambda x: cl.hardtanh(x, -2.0, 3.0), lambda x: F.hardtanh(x, -2.0, 3.0),
                       "hardtanh", 3.0, -2.0),  # fmt: skip
    "hardtanh(0.5,0.5)": (lambda x: cl.hardtanh(x, 0.5, 0.5), lambda x: F.hardtanh(x, 0.5, 0.5),
                          "hardtanh", 0.5, 0.5),  # fmt: skip
    "relu6": (cl.relu6, F.relu6, "hardtanh", 6.0, 0.0),
    "hardswish": (cl.hardswish, F.hardswish, "hardswish", None, None),
    "hardsigmoid": (cl.hardsigmoid, F.hardsigmoid, "hardsigmoid", None, None),
    "mish": (cl.mish, F.mish, "mish", None, None),
}


@pytest.mark.parametrize("dtype", DTYPES, ids=["fp32", "fp64"])
@pytest.mark.parametrize("name", list(ACTS))
def test_new_activations_match_torch(backend: str, name: str, dtype: Any) -> None:
    ours, theirs, mode, coef, threshold = ACTS[name]
    rng = np.random.default_rng(7)
    xv = np.concatenate([np.array(KINKS), rng.uniform(-8, 8, 43)]).astype(dtype)
    dyv = rng.uniform(-2, 2, xv.shape).astype(dtype)
    x, dy = to_backend(xv, backend), to_backend(dyv, backend)
    xt = _t(xv, grad=True)
    yt = theirs(xt)
    yt.backward(_t(dyv))
    y = ours(x)
    assert y.dtype == dtype and y.shape == xv.shape
    _close(y, yt, dtype, f"{name} forward")
    num = ~np.isnan(xv)  # signed zeros as PyTorch's (-0 in, -0 out); NaN's sign is free
    want_sign = np.signbit(yt.detach().numpy())[num]
    np.testing.assert_array_equal(np.signbit(to_numpy(y))[num], want_sign)
    dx = cl.activation_backward(dy, x, mode, coef=coef, threshold=threshold)
    want = xt.grad.numpy().copy()
    # Deliberate difference: a NaN input gives a NaN gradient (PyTorch's piecewise
    # backward passes dy, or 0, through).
    nan = np.isnan(xv)
    assert np.isnan(to_numpy(dx)[nan]).all()
    want[nan] = np.nan
    # PyTorch's float64 hardsigmoid backward multiplies by float32(1/6); ours by 1/6 in
    # double (a deliberate difference of 3e-8 relative).
    tol = dict(rtol=1e-7) if name == "hardsigmoid" and dtype == np.float64 else {}
    _close(dx, want, dtype, f"{name} backward", **tol)


def test_new_activations_kink_gradients_exactly(backend: str) -> None:
    """PyTorch's sides at the kinks, bit for bit (dy = 3: a mistaken 1 shows)."""
    x = to_backend(np.array([-3.0, -1.0, 1.0, 3.0, -2.0, 2.0]), backend)
    dy = to_backend(np.full(6, 3.0), backend)

    def grad(mode: str, **kw: Any) -> list[float]:
        return to_numpy(cl.activation_backward(dy, x, mode, **kw)).tolist()

    assert grad("hardtanh") == [0, 0, 0, 0, 0, 0]  # 0 at both bounds
    assert grad("hardtanh", coef=3.0, threshold=-3.0) == [0, 3, 3, 0, 3, 3]
    assert grad("hardswish") == [0, 3 * (-1 / 3 + 0.5), 3 * (1 / 3 + 0.5), 3, 3 * (-2 / 3 + 0.5),
                                 3 * (2 / 3 + 0.5)]  # fmt: skip
    assert grad("hardsigmoid") == [0, 0.5, 0.5, 0, 0.5, 0.5]


@pytest.mark.parametrize("dtype", DTYPES, ids=["fp32", "fp64"])
def test_infinities_give_the_limits(backend: str, dtype: Any) -> None:
    """Deliberate difference: PyTorch's CPU kernels give NaN for silu/gelu/hardswish/
    mish at -inf (inf * 0) and NaN gradients at +-inf; the library gives the limits
    (-0 and 0 or 1), as it always has for silu and gelu. Where PyTorch gives a number,
    it is the same."""
    xv = np.array([-INF, INF], dtype)
    x = to_backend(xv, backend)
    dy = to_backend(np.ones(2, dtype), backend)
    for mode in ("swish", "gelu", "gelu_tanh", "hardswish", "mish"):
        y = to_numpy(cl.activation_forward(x, mode))
        assert y[0] == 0 and np.signbit(y[0]) and y[1] == INF, (mode, y)
        assert to_numpy(cl.activation_backward(dy, x, mode)).tolist() == [0, 1], mode
    for mode, lo, hi in (("hardtanh", -1, 1), ("hardsigmoid", 0, 1), ("relu", 0, INF)):
        assert to_numpy(cl.activation_forward(x, mode)).tolist() == [lo, hi], mode
        assert to_numpy(cl.activation_backward(dy, x, mode)).tolist() == [0, 0 if hi != INF
                                                                          else 1], mode  # fmt: skip
    # where torch defines it: relu, hardtanh, hardsigmoid agree with it
    xt = torch.tensor(xv)
    assert F.hardtanh(xt).tolist() == [-1, 1] and F.hardsigmoid(xt).tolist() == [0, 1]


def test_nan_through_every_activation(backend: str) -> None:
    """NaN propagates through every mode's forward, as PyTorch (relu, hardtanh, clipped
    relu included: comparisons, not fmin/fmax)."""
    x = to_backend(np.array([NAN, 1.0], np.float32), backend)
    for mode in cl.ACTIVATION_MODES:
        assert np.isnan(to_numpy(cl.activation_forward(x, mode))[0]), mode
    for f in (cl.relu, cl.relu6, cl.hardtanh, lambda v: cl.hardtanh(v, -INF, INF)):
        assert np.isnan(to_numpy(f(x))[0])
    assert torch.isnan(F.relu6(torch.tensor([NAN]))).all()
    assert torch.isnan(F.hardtanh(torch.tensor([NAN]))).all()


def test_hardtanh_bad_bounds_leave_inputs_untouched(backend: str) -> None:
    xv = np.linspace(-2, 2, 9).astype(np.float32)
    x = to_backend(xv.copy(), backend)
    out = to_backend(np.full(9, 7.0, np.float32), backend)
    with pytest.raises(BadParamError, match="min_val"):
        cl.hardtanh(x, 2.0, 1.0, out=out)  # torch: "min_val cannot be greater than max_val"
    with pytest.raises(BadParamError, match="max_val"):
        cl.hardtanh(x, -1.0, NAN)
    with pytest.raises(BadParamError, match="min_val"):
        cl.hardtanh(x, NAN, 1.0)
    with pytest.raises(BadParamError, match="real number"):
        cl.hardtanh(x, "0", 1.0)
    with pytest.raises(BadParamError, match="coef"):
        cl.activation_forward(x, "mish", coef=1.0)
    with pytest.raises(BadParamError, match="threshold"):
        cl.activation_forward(x, "hardswish", threshold=1.0)
    assert to_numpy(x).tolist() == xv.tolist() and (to_numpy(out) == 7).all()
    # min_val == max_val is allowed (a constant), +-inf bounds too
    assert to_numpy(cl.hardtanh(x, 0.5, 0.5)).tolist() == [0.5] * 9
    assert to_numpy(cl.hardtanh(x, -INF, 1.0)).tolist() == np.minimum(xv, 1).tolist()


def test_reference_matches_torch_float64() -> None:
    x = np.array(KINKS + [INF, -INF])
    for mode, f in (("hardswish", F.hardswish), ("hardsigmoid", F.hardsigmoid),
                    ("mish", F.mish), ("hardtanh", F.hardtanh)):  # fmt: skip
        want = f(torch.tensor(x)).numpy()
        got = ref.activation_forward(x, mode)
        finite = ~np.isnan(want)  # torch's NaN at -inf: the limit here (see above)
        np.testing.assert_allclose(got[finite], want[finite], rtol=1e-15, err_msg=mode)


# ------------------------------------------------------------------ softmax(dtype=)


@pytest.mark.parametrize("log", [False, True])
def test_softmax_dtype_converts_first(backend: str, log: bool) -> None:
    """As PyTorch: x converted to dtype before the op (float32 -> float64 gives the
    float64 softmax of the float32 values), x untouched."""
    xv = np.random.default_rng(3).uniform(-30, 30, (3, 17)).astype(np.float32)
    x = to_backend(xv.copy(), backend)
    ours, theirs = (cl.log_softmax, F.log_softmax) if log else (cl.softmax, F.softmax)
    y = ours(x, 1, dtype=np.float64)
    assert y.dtype == np.float64 and to_numpy(x).tobytes() == xv.tobytes()
    # log_softmax's x - max - log(sum) cancels near its maximum: absolute error 2^-52 there
    _close(y, theirs(torch.from_numpy(xv), 1, dtype=torch.float64), np.float64, "softmax fp64",
           atol=4e-16)  # fmt: skip
    y = ours(x, -1, dtype=torch.float64)  # torch's dtype objects too
    assert y.dtype == np.float64
    same = ours(x, -1, dtype="float32")  # x's own dtype: no conversion
    _close(same, theirs(torch.from_numpy(xv), -1, dtype=torch.float32), np.float32, "fp32")
    with pytest.raises(BadParamError, match="dtype"):
        ours(x, -1, dtype=np.int32)
    with pytest.raises(BadParamError, match="dtype"):
        ours(x, -1, dtype="nope")
    out = to_backend(np.zeros((3, 17), np.float32), backend)
    with pytest.raises(BadParamError, match="out"):  # out must have the converted dtype
        ours(x, -1, dtype=np.float64, out=out)
    assert (to_numpy(out) == 0).all() and to_numpy(x).tobytes() == xv.tobytes()


# ------------------------------------------------------------------ dropout(training=False)


def test_dropout_in_evaluation_mode_returns_the_input(backend: str) -> None:
    xv = np.arange(12, dtype=np.float32).reshape(3, 4)
    x = to_backend(xv.copy(), backend)
    assert cl.dropout(x, 0.5, training=False) is x  # PyTorch returns the input itself
    assert F.dropout(torch.from_numpy(xv), 0.5, training=False).numpy().tobytes() == xv.tobytes()
    y, mask = cl.dropout(x, 0.5, 123, training=False, return_mask=True)
    assert y is x and mask.dtype == np.bool_ and to_numpy(mask).all()
    out = to_backend(np.zeros((3, 4), np.float32), backend)
    assert cl.dropout(x, 0.5, training=False, out=out) is out
    assert to_numpy(out).tolist() == xv.tolist()
    with pytest.raises(BadParamError, match="p"):  # p is checked in either mode, as torch
        cl.dropout(x, 1.5, training=False)
    with pytest.raises(BadParamError, match="training"):
        cl.dropout(x, 0.5, 1, training="no")
    with pytest.raises(BadParamError, match="seed"):
        cl.dropout(x, 0.5)  # training mode needs a seed
    with pytest.raises(BadParamError, match="out"):
        cl.dropout(x, 0.5, training=False, out=to_backend(np.zeros(3, np.float32), backend))
    assert to_numpy(x).tolist() == xv.tolist()


# ------------------------------------------------------------------ python -m cudnnlite


def test_python_dash_m_runs_the_cli() -> None:
    done = subprocess.run([sys.executable, "-m", "cudnnlite", "--help"], capture_output=True,
                          text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "doctor" in done.stdout and "tune" in done.stdout
    assert done.stdout.startswith("usage: cudnnlite")  # the program's name, not __main__.py


# ------------------------------------------------------------------ algo families


def _conv_problem(**kw: Any) -> Any:
    from cudnnlite.problems.conv import ConvProblem

    return ConvProblem.conv2d(**kw)


@pytest.fixture
def empty_dbs(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> Any:
    """An empty user DB in tmp and no shipped DB: the heuristic ranking decides."""
    from cudnnlite.dispatch import plans, tuning_db

    monkeypatch.setenv("CUDNNLITE_TUNING_DIR", str(tmp_path / "user"))
    monkeypatch.setattr(tuning_db, "shipped_path", lambda arch: None)
    for var in ("CUDNNLITE_DISABLE_SOLVERS", "CUDNNLITE_FORCE_SOLVER"):
        monkeypatch.delenv(var, raising=False)
    tuning_db.forget_databases()
    plans.clear_plan_cache()
    yield tuning_db
    tuning_db.forget_databases()
    plans.clear_plan_cache()


def test_algo_family_picks_the_best_ranked_usable_member(empty_dbs: Any) -> None:
    from cudnnlite.dispatch import heuristics, registry, select
    from cudnnlite.problems.conv import ConvProblem
    from cudnnlite.runtime.caps import capabilities
    from cudnnlite.runtime.select import backend_by_name

    cpu = backend_by_name("cpu")
    caps = capabilities(cpu)
    p = ConvProblem.parse("conv2d_fwd n1-c8-h12-w12 k8-r3-s3 p1x1-u1x1-d1x1 g1 NCHW fp32")
    ranking = heuristics.RANKINGS["conv_fwd"](p, caps)
    for family in select.ALGO_FAMILIES:
        members = [s.name for s in registry.solvers("conv_fwd")
                   if family in select.algo_families(s.name)]  # fmt: skip
        assert members, family
        usable = [n for n in ranking + members if n in members
                  and select.usable(registry.get(n), p, caps)]  # fmt: skip
        if not usable:
            with pytest.raises(NotSupportedError, match=f"no {family} solver can run"):
                select.select(p, cpu, family)
            continue
        choice = select.select(p, cpu, family)
        assert choice.solver.name == usable[0], family
        assert family in choice.source
    assert select.select(p, cpu, "winograd").solver.name.startswith("conv_fwd_winograd")
    assert select.select(p, cpu, "direct").solver.name == "conv_fwd_direct"
    # a DB's times rank the family's members first
    empty_dbs.database(caps.arch).record(p.key(), [
        empty_dbs.Entry("conv_fwd_direct", {}, 1.0),
        empty_dbs.Entry("conv_fwd_winograd_f2x2_3x3", {}, 2.0),
    ])  # fmt: skip
    choice = select.select(p, cpu, "winograd")
    assert choice.solver.name == "conv_fwd_winograd_f2x2_3x3" and "DB" in choice.source


def test_algo_family_through_conv2d_and_its_errors(empty_dbs: Any) -> None:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, 4, 6, 6)).astype(np.float32)
    w = rng.standard_normal((4, 4, 1, 1)).astype(np.float32)
    want = F.conv2d(torch.from_numpy(x), torch.from_numpy(w)).numpy()
    np.testing.assert_allclose(cl.conv2d(x, w, algo="gemm"), want, rtol=1e-5, atol=1e-5)
    with pytest.raises(NotSupportedError, match="winograd"):  # 1x1: no Winograd applies
        cl.conv2d(x, w, algo="winograd")
    with pytest.raises(BadParamError, match="unknown solver 'winogard', nor an algorithm family"):
        cl.conv2d(x, w, algo="winogard")
    with pytest.raises(BadParamError, match="algo"):
        cl.conv2d(x, w, algo=3)


# ------------------------------------------------------------------ NaN propagation


@pytest.mark.parametrize("dtype", DTYPES, ids=["fp32", "fp64"])
def test_maximum_minimum_nan_semantics(backend: str, dtype: Any) -> None:
    av = np.array([1.0, NAN, 3.0, NAN, -INF, 2.0], dtype)
    bv = np.array([NAN, 2.0, 1.0, NAN, 5.0, 2.0], dtype)
    a, b = to_backend(av, backend), to_backend(bv, backend)
    ta, tb = torch.from_numpy(av), torch.from_numpy(bv)
    _close(cl.maximum(a, b), torch.maximum(ta, tb), dtype, "maximum")  # NaN where either is
    _close(cl.minimum(a, b), torch.minimum(ta, tb), dtype, "minimum")
    _close(cl.op_tensor("max", a, b), torch.maximum(ta, tb), dtype, "op_tensor max")
    # cuDNN's NOT_PROPAGATE_NAN: the other operand (NumPy's fmax / fmin)
    _close(cl.maximum(a, b, nan_propagation=False), np.fmax(av, bv), dtype, "fmax")
    _close(cl.op_tensor("min", a, b, nan_propagation=False), np.fmin(av, bv), dtype, "fmin")
    # broadcast and alpha scaling still apply
    col = to_backend(np.array([[NAN], [0.0]], dtype), backend)
    got = to_numpy(cl.op_tensor("max", col, a, alpha2=2.0))
    np.testing.assert_array_equal(got, np.maximum(np.array([[NAN], [0.0]]), 2 * av))
    for bad in ("yes", None, 1):
        with pytest.raises(BadParamError, match="nan_propagation"):
            cl.maximum(a, b, nan_propagation=bad)
    assert to_numpy(a).tobytes() == av.tobytes()


@pytest.mark.parametrize("dtype", DTYPES, ids=["fp32", "fp64"])
def test_reduce_min_max_nan_semantics(backend: str, dtype: Any) -> None:
    xv = np.random.default_rng(5).standard_normal((4, 300)).astype(dtype)
    xv[0, 7] = xv[0, 100] = NAN  # two NaNs: the first one's index
    xv[1, :] = NAN  # all NaN: NaN either way
    xv[2, 299] = NAN
    x = to_backend(xv, backend)
    tx = torch.from_numpy(xv)
    for op, tf, nf, narg in (("max", torch.amax, np.nanmax, np.nanargmax),
                             ("min", torch.amin, np.nanmin, np.nanargmin)):  # fmt: skip
        v, i = cl.reduce_tensor(x, op, 1, return_indices=True)
        _close(v, tf(tx, 1), dtype, f"{op} propagating")
        assert to_numpy(i).tolist()[:3] == [7, 0, 299]
        v, i = cl.reduce_tensor(x, op, 1, return_indices=True, nan_propagation=False)
        with np.errstate(all="ignore"), pytest.warns(RuntimeWarning):
            want = nf(xv.astype(np.float64), axis=1)
        _close(v, want, dtype, f"{op} skipping NaN")
        got_i = to_numpy(i)
        for r in (0, 2, 3):
            assert got_i[r] == narg(xv[r]), (op, r)
    # one long row: the split reduction's partials combine in the same order
    long = np.random.default_rng(6).standard_normal(70000).astype(dtype)
    long[::5] = NAN
    v, i = cl.reduce_tensor(to_backend(long, backend), "amax", return_indices=True,
                            nan_propagation=False)  # fmt: skip
    assert float(v) == np.nanmax(np.abs(long)) and int(i) == np.nanargmax(np.abs(long))
    assert np.isnan(float(cl.reduce_tensor(to_backend(long, backend), "amax")))


@pytest.mark.parametrize("dtype", DTYPES, ids=["fp32", "fp64"])
def test_max_pool_nan_semantics(backend: str, dtype: Any) -> None:
    xv = np.random.default_rng(8).standard_normal((1, 2, 6, 6)).astype(dtype)
    xv[0, 0, 1, 1] = NAN  # one NaN in window (0, 0)
    xv[0, 0, 2:4, 2:4] = NAN  # a window of only NaN
    xv[0, 1, 4, 5] = xv[0, 1, 5, 4] = NAN  # two NaNs in one window
    x = to_backend(xv, backend)
    xt = torch.from_numpy(xv).requires_grad_(True)
    yt, it = F.max_pool2d(xt, 2, return_indices=True)
    y, i = cl.max_pool2d(x, 2, return_indices=True)
    _close(y, yt, dtype, "max_pool2d NaN propagates")
    np.testing.assert_array_equal(to_numpy(i), it.numpy())  # the same NaN's index
    dyv = np.arange(18, dtype=dtype).reshape(1, 2, 3, 3) + 1
    yt.backward(torch.from_numpy(dyv))
    dx = cl.max_pool_backward(to_backend(dyv, backend), i, xv.shape, 2)
    _close(dx, xt.grad, dtype, "max_pool2d backward through the NaN's index")
    # NOT_PROPAGATE: NaN loses to numbers, an all-NaN window stays NaN
    y, i = cl.max_pool2d(x, 2, return_indices=True, nan_propagation=False)
    windows = xv.reshape(1, 2, 3, 2, 3, 2).transpose(0, 1, 2, 4, 3, 5).reshape(1, 2, 3, 3, 4)
    with np.errstate(all="ignore"), pytest.warns(RuntimeWarning):
        want = np.nanmax(windows, axis=-1)
    _close(y, want, dtype, "max_pool2d skipping NaN")
    assert np.isnan(to_numpy(y)[0, 0, 1, 1]) and not np.isnan(to_numpy(y)[0, 0, 0, 0])
    ya = cl.adaptive_max_pool2d(x, (3, 3), nan_propagation=False)
    _close(ya, want, dtype, "adaptive_max_pool2d skipping NaN")
    _close(cl.adaptive_max_pool2d(x, (3, 3)), yt, dtype, "adaptive NaN propagates")
    yc = cl.pooling_forward(x, "max", 2, nan_propagation=False)
    _close(yc, want, dtype, "pooling_forward skipping NaN")
    dx = cl.pooling_backward(to_backend(dyv, backend), x, "max", 2, nan_propagation=False)
    assert to_numpy(dx)[0, 0, 1, 1] == 0  # the number won window (0, 0)
    for bad in ("no", 0, None):
        with pytest.raises(BadParamError, match="nan_propagation"):
            cl.max_pool2d(x, 2, nan_propagation=bad)
    with pytest.raises(BadParamError, match="nan_propagation"):
        cl.pooling_forward(x, "avg_include_pad", 2, nan_propagation="x")
    assert to_numpy(x).tobytes() == xv.tobytes()


# ------------------------------------------------------------------ fused activations


def test_new_modes_in_conv_and_batch_norm_epilogues() -> None:
    """The conv epilogue and the batch-norm fused activation run the new modes (not the
    identity their switches' default would give)."""
    rng = np.random.default_rng(9)
    x = rng.standard_normal((1, 3, 6, 6)) * 3
    w = rng.standard_normal((4, 3, 3, 3))
    pre = F.conv2d(torch.from_numpy(x), torch.from_numpy(w), padding=1)
    for act, f, kw in (("mish", F.mish, {}), ("hardswish", F.hardswish, {}),
                       ("hardsigmoid", F.hardsigmoid, {}),
                       ("hardtanh", lambda v: F.hardtanh(v, -2.0, 0.5),
                        {"activation_coef": 0.5, "activation_threshold": -2.0})):  # fmt: skip
        y = cl.conv2d(x, w, padding=1, activation=act, algo="direct", **kw)
        _close(y, f(pre), np.float64, f"conv2d + {act}", rtol=1e-12, atol=1e-12)
    with pytest.raises(BadParamError, match="min_val"):
        cl.conv2d(x, w, padding=1, activation="hardtanh", activation_coef=-3.0)
    with pytest.raises(BadParamError, match="activation_threshold"):
        cl.conv2d(x, w, padding=1, activation="mish", activation_threshold=1.0)
    rm, rv = np.zeros(3), np.ones(3)
    y = cl.batch_norm_forward_inference(x, rm, rv, activation="hardswish")
    want = F.hardswish(F.batch_norm(torch.from_numpy(x), torch.from_numpy(rm),
                                    torch.from_numpy(rv)))  # fmt: skip
    _close(y, want, np.float64, "batch norm + hardswish")
    xs = x.copy()
    with pytest.raises(BadParamError, match="mish is not fused"):  # refused, not identity
        cl.batch_norm_forward_inference(x, rm, rv, activation="mish")
    assert x.tobytes() == xs.tobytes()


# ------------------------------------------------------------------ norms


@pytest.mark.parametrize("dtype", DTYPES, ids=["fp32", "fp64"])
def test_instance_norm_running_statistics(backend: str, dtype: Any) -> None:
    rng = np.random.default_rng(10)
    xv = (rng.standard_normal((3, 4, 5, 6)) * 2 + 1).astype(dtype)
    wv, bv = rng.uniform(0.5, 1.5, 4).astype(dtype), rng.standard_normal(4).astype(dtype)
    rmv, rvv = rng.standard_normal(4).astype(dtype), rng.uniform(0.5, 2, 4).astype(dtype)
    x, w, b = (to_backend(a, backend) for a in (xv, wv, bv))
    rm, rv = to_backend(rmv.copy(), backend), to_backend(rvv.copy(), backend)
    trm, trv = torch.from_numpy(rmv.copy()), torch.from_numpy(rvv.copy())
    args = (torch.from_numpy(wv), torch.from_numpy(bv))
    yt = F.instance_norm(torch.from_numpy(xv), trm, trv, *args, True, 0.3, 1e-5)
    y = cl.instance_norm(x, w, b, 1e-5, running_mean=rm, running_var=rv, momentum=0.3)
    tol = dict(rtol=1e-5, atol=1e-6) if dtype == np.float32 else dict(rtol=1e-13, atol=1e-14)
    _close(y, yt, dtype, "instance_norm y", **tol)
    _close(rm, trm, dtype, "running_mean", **tol)
    _close(rv, trv, dtype, "running_var (unbiased)", **tol)
    # only one running statistic: that one is updated
    rm1 = to_backend(rmv.copy(), backend)
    cl.instance_norm(x, w, b, running_mean=rm1, momentum=0.3)
    _close(rm1, trm, dtype, "lone running_mean", **tol)
    # use_input_stats=False: the running statistics normalize every instance
    yt = F.instance_norm(torch.from_numpy(xv), trm, trv, *args, False, 0.3, 1e-5)
    before = to_numpy(rm).copy()
    y = cl.instance_norm(x, w, b, running_mean=rm, running_var=rv, use_input_stats=False)
    _close(y, yt, dtype, "instance_norm from running statistics", **tol)
    assert to_numpy(rm).tobytes() == before.tobytes()  # not updated


def test_instance_norm_bad_inputs_leave_running_statistics_untouched() -> None:
    x = np.random.default_rng(11).standard_normal((2, 3, 4)).astype(np.float32)
    rm, rv = np.zeros(3, np.float32), np.ones(3, np.float32)
    with pytest.raises(BadParamError, match="running_var"):
        cl.instance_norm(x, running_mean=rm, use_input_stats=False)
    with pytest.raises(BadParamError, match="use_input_stats"):
        cl.instance_norm(x, running_mean=rm, running_var=rv, use_input_stats=1)
    with pytest.raises(BadParamError, match="momentum"):
        cl.instance_norm(x, running_mean=rm, running_var=rv, momentum=1.5)
    with pytest.raises(BadParamError, match="running_mean"):
        cl.instance_norm(x, running_mean=np.zeros(4, np.float32))
    with pytest.raises(BadParamError, match="running_var"):
        cl.instance_norm(x, running_var=np.ones(3))  # float64 for float32 x
    with pytest.raises(BadParamError, match="spatial"):  # an unbiased variance of 1 value
        cl.instance_norm(x[:, :, :1], running_mean=rm, running_var=rv)
    with pytest.raises(BadParamError, match="weight"):
        cl.instance_norm(x, np.ones(5, np.float32), running_mean=rm, running_var=rv)
    assert (rm == 0).all() and (rv == 1).all()


@pytest.mark.parametrize("dtype", DTYPES, ids=["fp32", "fp64"])
def test_batch_norm_backward_in_inference_mode(backend: str, dtype: Any) -> None:
    rng = np.random.default_rng(12)
    xv = (rng.standard_normal((4, 3, 5, 5)) * 2).astype(dtype)
    dyv = rng.standard_normal(xv.shape).astype(dtype)
    wv, bv = rng.uniform(0.5, 1.5, 3).astype(dtype), rng.standard_normal(3).astype(dtype)
    rmv, rvv = rng.standard_normal(3).astype(dtype), rng.uniform(0.5, 2, 3).astype(dtype)
    xt, wt, bt = (torch.from_numpy(a).requires_grad_(True) for a in (xv, wv, bv))
    yt = F.batch_norm(xt, torch.from_numpy(rmv), torch.from_numpy(rvv), wt, bt, False, 0.1, 1e-3)
    yt.backward(torch.from_numpy(dyv))
    tb = lambda a: to_backend(a, backend)  # noqa: E731
    dx, dw, db, dz = cl.batch_norm_backward(
        tb(dyv), tb(xv), None, None, tb(wv), training=False, running_mean=tb(rmv),
        running_var=tb(rvv), eps=1e-3,
    )  # fmt: skip
    tol = dict(rtol=2e-5, atol=2e-5) if dtype == np.float32 else dict(rtol=1e-12, atol=1e-12)
    _close(dx, xt.grad, dtype, "dx", **tol)
    _close(dw, wt.grad, dtype, "dweight", **tol)
    _close(db, bt.grad, dtype, "dbias", **tol)
    assert dz is None
    # NHWC gives the same numbers
    to_nhwc = lambda a: tb(np.ascontiguousarray(a.transpose(0, 2, 3, 1)))  # noqa: E731
    dx2 = cl.batch_norm_backward(to_nhwc(dyv), to_nhwc(xv), weight=tb(wv), training=False,
                                 running_mean=tb(rmv), running_var=tb(rvv), eps=1e-3,
                                 layout="NHWC")[0]  # fmt: skip
    _close(to_numpy(dx2).transpose(0, 3, 1, 2), xt.grad, dtype, "dx NHWC", **tol)
    # the argument pairs that do not go together
    with pytest.raises(BadParamError, match="running_var"):
        cl.batch_norm_backward(tb(dyv), tb(xv), training=False, running_mean=tb(rmv))
    with pytest.raises(BadParamError, match="save_mean"):
        cl.batch_norm_backward(tb(dyv), tb(xv), tb(rmv), tb(rvv), training=False,
                               running_mean=tb(rmv), running_var=tb(rvv))  # fmt: skip
    with pytest.raises(BadParamError, match="training=False"):
        cl.batch_norm_backward(tb(dyv), tb(xv), tb(rmv), tb(rvv), running_mean=tb(rmv))
    with pytest.raises(BadParamError, match="training"):
        cl.batch_norm_backward(tb(dyv), tb(xv), training="no")
    with pytest.raises(BadParamError, match="eps"):
        cl.batch_norm_backward(tb(dyv), tb(xv), training=False, running_mean=tb(rmv),
                               running_var=tb(rvv), eps=-1.0)  # fmt: skip
