"""cudnnlite.rnn / rnn_backward: the standard solver against the float64 reference and
PyTorch, the API's shapes and weight forms, dropout, and bad input."""

from __future__ import annotations

import os

import numpy as np
import pytest

import cudnnlite as cl
from cudnnlite.errors import BadParamError
from cudnnlite.problems import RnnProblem, parse_key
from cudnnlite.reference import rnn as ref
from cudnnlite.testing import to_backend, to_numpy

# fp32: every value is a sum of at most G*H + I + 2 products of O(1) terms rounded once
# (sgemm / the cell kernel), ~1e-6 relative per step; errors compound through T <= 6
# steps of contractive gates, so 2e-5 absolute on O(1) values leaves a wide margin while
# a wrong index or gate gives errors of order 0.1.
ATOL32 = 2e-5
# fp16: h is rounded to fp16 (2^-11 relative) every step, as PyTorch stores it; the error
# grows about linearly with T (<= 5 here) -> 5 * 2^-11 ~ 2.5e-3, doubled for the
# backward's products of such values. bf16 has 8 fewer mantissa bits (2^-8): 8x that.
ATOL = {np.float16: 6e-3, "bfloat16": 5e-2}


def _weights(mode, layers, dirs, i, h, p=0, dtype=np.float32, bias=True, seed=0):
    rng = np.random.default_rng(seed)
    g, ho, w = ref.GATES[mode], p or h, {}
    for layer in range(layers):
        for d in range(dirs):
            sfx = "_reverse" if d else ""
            il = i if layer == 0 else dirs * ho
            w[f"weight_ih_l{layer}{sfx}"] = rng.uniform(-0.5, 0.5, (g * h, il))
            w[f"weight_hh_l{layer}{sfx}"] = rng.uniform(-0.5, 0.5, (g * h, ho))
            if bias:
                w[f"bias_ih_l{layer}{sfx}"] = rng.uniform(-0.5, 0.5, g * h)
                w[f"bias_hh_l{layer}{sfx}"] = rng.uniform(-0.5, 0.5, g * h)
            if p:
                w[f"weight_hr_l{layer}{sfx}"] = rng.uniform(-0.5, 0.5, (p, h))
    return {k: v.astype(dtype) for k, v in w.items()}


def _case(mode, t, b, i, h, *, layers=1, bi=False, p=0, lens=None, batch_first=False,
          unbatched=False, bias=True, with_hx=True, dtype=np.float32, seed=0):  # fmt: skip
    rng = np.random.default_rng(seed + 1)
    dirs = 2 if bi else 1
    w = _weights(mode, layers, dirs, i, h, p, dtype, bias, seed)
    xs = (t, i) if unbatched else ((b, t, i) if batch_first else (t, b, i))
    lead = (layers * dirs,) if unbatched else (layers * dirs, b)
    x = rng.standard_normal(xs).astype(dtype)
    hx = rng.standard_normal((*lead, p or h)).astype(dtype) if with_hx else None
    cx = rng.standard_normal((*lead, h)).astype(dtype) if mode == "lstm" and with_hx else None
    lengths = None if lens is None else np.array(lens)
    kw = dict(mode=mode, num_layers=layers, bidirectional=bi, proj_size=p,
              batch_first=batch_first, lengths=lengths)  # fmt: skip
    return x, hx, cx, w, kw


def _upcast(d):
    return {k: np.asarray(v, np.float64) for k, v in d.items()} if isinstance(d, dict) else d


def f64(a):
    return None if a is None else np.asarray(a, np.float64)


def _on(backend, a):
    """``a`` (an array, None, or a dict of arrays) on the backend."""
    if isinstance(a, dict):
        return {k: to_backend(v, backend) for k, v in a.items()}
    return None if a is None else to_backend(a, backend)


def _check_fwd_bwd(x, hx, cx, w, kw, atol, rng_seed=3, algo="auto", backend="cpu", **extra):
    """Forward and every gradient on ``backend`` against the float64 reference."""
    kw_b = {**kw, "lengths": _on(backend, kw["lengths"])}
    out = cl.rnn(_on(backend, x), _on(backend, hx), _on(backend, w), cx=_on(backend, cx),
                 training=True, algo=algo, **kw_b, **extra)  # fmt: skip
    out = (*(to_numpy(a) for a in out[:-1]), out[-1])
    y_r, hy_r, cy_r = ref.rnn_forward(f64(x), f64(hx), _upcast(w), cx=f64(cx), training=True,
                                      dtype=x.dtype, **kw, **extra)  # fmt: skip
    np.testing.assert_allclose(out[0].astype(np.float64), y_r, atol=atol, rtol=0)
    np.testing.assert_allclose(out[1].astype(np.float64), hy_r, atol=atol, rtol=0)
    if cy_r is not None:
        np.testing.assert_allclose(out[2].astype(np.float64), cy_r, atol=atol, rtol=0)
    rng = np.random.default_rng(rng_seed)
    dy = rng.standard_normal(out[0].shape).astype(x.dtype)
    dhy = rng.standard_normal(out[1].shape).astype(x.dtype)
    dcy = rng.standard_normal(out[2].shape).astype(x.dtype) if cy_r is not None else None
    dx, dhx, dcx, dw = cl.rnn_backward(_on(backend, dy), _on(backend, dhy), _on(backend, dcy),
                                       out[-1])  # fmt: skip
    dx, dhx, dw = to_numpy(dx), to_numpy(dhx), {k: to_numpy(v) for k, v in dw.items()}
    dcx = None if dcx is None else to_numpy(dcx)
    g = ref.rnn_backward(f64(dy), f64(dhy), f64(dcy), f64(x), f64(hx), _upcast(w), cx=f64(cx),
                         training=True, dtype=x.dtype, **kw, **extra)  # fmt: skip
    np.testing.assert_allclose(dx.astype(np.float64), g[0], atol=4 * atol, rtol=0)
    np.testing.assert_allclose(dhx.astype(np.float64), g[1], atol=4 * atol, rtol=0)
    if g[2] is not None:
        np.testing.assert_allclose(dcx.astype(np.float64), g[2], atol=4 * atol, rtol=0)
    assert list(dw) == list(w)
    for k in w:  # weight gradients sum over T * B terms
        np.testing.assert_allclose(dw[k].astype(np.float64), g[3][k], atol=8 * atol, rtol=0,
                                   err_msg=k)  # fmt: skip
    return out


CASES = [
    ("lstm", dict(t=5, b=3, i=4, h=5, layers=2, bi=True)),
    ("lstm", dict(t=4, b=3, i=3, h=6, p=2, bi=True, lens=[4, 1, 3])),
    ("lstm", dict(t=1, b=1, i=2, h=3, with_hx=False)),
    ("gru", dict(t=5, b=3, i=4, h=7, layers=2, bi=True, lens=[2, 5, 4])),
    ("gru", dict(t=3, b=2, i=3, h=4, batch_first=True, bias=False)),
    ("rnn_tanh", dict(t=4, b=2, i=3, h=5, unbatched=True, bi=True)),
    ("rnn_relu", dict(t=5, b=4, i=2, h=3, layers=3, lens=[5, 1, 3, 2])),
]


@pytest.mark.parametrize("mode,kw", CASES, ids=lambda v: str(v)[:60])
def test_standard_matches_reference(mode, kw, backend):
    # (the dispatcher would take the persistent solver here: tests/test_rnn_persistent.py)
    _check_fwd_bwd(*_case(mode, **kw), atol=ATOL32, algo="rnn_fwd_standard", backend=backend)


@pytest.mark.parametrize("mode,kw", [CASES[1], CASES[3]], ids=["lstm_proj_lens", "gru"])
def test_prepared_launches_equal_ordinary_ones(mode, kw, monkeypatch, emulator_only):
    """The standard solver's time loops launch through Kernel.prepare (the fixed
    arguments converted once, a step's parameters per launch): bit for bit what ordinary
    launches give, forward and backward."""
    from cudnnlite.runtime.backend import Kernel
    from cudnnlite.runtime.emulator.launcher import EmulatorKernel

    x, hx, cx, w, kwargs = _case(mode, **kw)

    def run():
        y, hy, *rest = cl.rnn(x, hx, w, cx=cx, training=True, algo="rnn_fwd_standard",
                              **kwargs)  # fmt: skip
        grads = cl.rnn_backward(np.ones_like(y), np.ones_like(hy), None, rest[-1])
        return [y, hy, *rest[:-1], *grads[:3], *grads[3].values()]

    fast = []  # the prepared launches' runs (Kernel.prepare's fast path, not its fallback)
    original = EmulatorKernel.recorded_launcher

    def launcher(kernel: EmulatorKernel, *args: object) -> object:
        run = original(kernel, *args)
        return lambda *ptrs: (fast.append(kernel.name), run(*ptrs))[1]

    monkeypatch.setattr(EmulatorKernel, "recorded_launcher", launcher)
    with cl.fast_paths_off():
        prepared = run()
        if os.environ.get("CUDNNLITE_EMU_ASAN", "0") in ("", "0"):  # (ASan: ordinary launches)
            assert any("rnn_cell_fwd" in n for n in fast)
            assert any("rnn_cell_bwd" in n for n in fast)
        monkeypatch.setattr(EmulatorKernel, "prepare", Kernel.prepare)
        ordinary = run()
    assert len(prepared) == len(ordinary)
    for a, b in zip(prepared, ordinary, strict=True):
        if a is None:
            assert b is None
        else:
            assert a.dtype == b.dtype and a.tobytes() == b.tobytes()


def test_dispatcher_choice_matches_reference(backend):
    x, hx, cx, w, kw = _case("gru", 4, 3, 3, 6, layers=2, bi=True, lens=[4, 2, 1])
    _check_fwd_bwd(x, hx, cx, w, kw, atol=ATOL32, backend=backend)


@pytest.mark.parametrize("dtype", [np.float16, "bfloat16"])
def test_16bit(dtype):
    dt = cl.bfloat16 if dtype == "bfloat16" else dtype
    if dt is None:
        pytest.skip("no bfloat16 (ml_dtypes missing)")
    x, hx, cx, w, kw = _case("lstm", 5, 2, 3, 4, bi=True, lens=[5, 3], dtype=dt)
    out = _check_fwd_bwd(x, hx, cx, w, kw, atol=ATOL[dtype])
    assert out[0].dtype == dt and out[1].dtype == dt and out[2].dtype == dt


# fp64: the fp32 argument with 2^-53 for 2^-24: a step's value sums at most G*H + I + 2 ~ 40
# products of O(1) terms (5e-15) and double tanh/exp are within 2 ulps on a GPU; through
# T <= 5 steps of contractive gates that stays under 3e-14. 1e-13 (and _check_fwd_bwd's 4x /
# 8x for the gradients) bounds it, while one float32 rounding anywhere (~1e-7) fails.
ATOL64 = 1e-13
CASES_64 = [
    # a tiny LSTM through the dispatcher (the persistent solver at this batch), with lengths
    ("lstm", dict(t=3, b=2, i=3, h=4, bi=True, lens=[3, 2]), "auto", {}),
    ("lstm", dict(t=4, b=3, i=3, h=6, p=2, bi=True, lens=[4, 1, 3]), "rnn_fwd_standard", {}),
    ("gru", dict(t=5, b=3, i=4, h=7, layers=2, bi=True), "rnn_fwd_standard",
     dict(dropout=0.4, seed=11)),
]  # fmt: skip


@pytest.mark.parametrize("mode,kw,algo,extra", CASES_64, ids=lambda v: str(v)[:40])
def test_float64_matches_reference(mode, kw, algo, extra, backend):
    x, hx, cx, w, kw = _case(mode, dtype=np.float64, **kw)
    out = _check_fwd_bwd(x, hx, cx, w, kw, atol=ATOL64, algo=algo, backend=backend, **extra)
    assert all(a.dtype == np.float64 for a in out[:-1])  # y, hy (, cy)


def test_float64_matches_torch():
    torch = pytest.importorskip("torch")
    torch.manual_seed(1)
    m = torch.nn.LSTM(3, 4, bidirectional=True, batch_first=True).double()
    x = torch.randn(2, 3, 3, dtype=torch.float64, requires_grad=True)
    h0 = torch.randn(2, 2, 4, dtype=torch.float64, requires_grad=True)
    c0 = torch.randn(2, 2, 4, dtype=torch.float64, requires_grad=True)
    y, (hy, cy) = m(x, (h0, c0))
    (y.square().sum() + hy.sum() + (cy * 2).sum()).backward()
    w = cl.rnn_weights_from_torch(m)  # float64 arrays, no copy
    assert all(v.dtype == np.float64 for v in w.values())
    xn, hn, cn = (a.detach().numpy() for a in (x, h0, c0))
    kw = dict(mode="lstm", bidirectional=True, batch_first=True)
    y2, hy2, cy2, res = cl.rnn(xn, hn, w, cx=cn, training=True, **kw)
    for a, b in ((y2, y), (hy2, hy), (cy2, cy)):
        np.testing.assert_allclose(a, b.detach().numpy(), atol=ATOL64, rtol=0)
    dx, dhx, dcx, dw = cl.rnn_backward(2 * y2, np.ones_like(hy2), np.full_like(cy2, 2), res)
    for a, b in ((dx, x), (dhx, h0), (dcx, c0)):
        np.testing.assert_allclose(a, b.grad.numpy(), atol=4 * ATOL64, rtol=0)
    for name, prm in m.named_parameters():
        np.testing.assert_allclose(dw[name], prm.grad.numpy(), atol=8 * ATOL64, rtol=0,
                                   err_msg=name)  # fmt: skip


def test_flat_weights_equal_dict():
    x, hx, cx, w, kw = _case("lstm", 4, 2, 3, 5, layers=2, bi=True, p=3, lens=[4, 2])
    flat = cl.pack_rnn_weights(w, mode="lstm", num_layers=2, bidirectional=True, proj_size=3)
    a = cl.rnn(x, hx, w, cx=cx, training=True, **kw)
    b = cl.rnn(x, hx, flat, cx=cx, training=True, **kw)
    for u, v in zip(a[:3], b[:3], strict=True):
        np.testing.assert_array_equal(u, v)
    dy = np.ones_like(a[0])
    ga = cl.rnn_backward(dy, None, None, a[-1])
    gb = cl.rnn_backward(dy, None, None, b[-1])
    assert gb[3].shape == flat.shape
    packed = cl.pack_rnn_weights(ga[3], mode="lstm", num_layers=2, bidirectional=True, proj_size=3)
    np.testing.assert_array_equal(packed, gb[3])
    np.testing.assert_array_equal(ga[0], gb[0])


def test_plan_equals_the_function():
    x, hx, cx, w, kw = _case("lstm", 4, 3, 3, 5, layers=2, bi=True, lens=[4, 2, 3])
    flat = cl.pack_rnn_weights(w, mode="lstm", num_layers=2, bidirectional=True)
    plan = cl.rnn_plan(x.shape, 5, num_layers=2, bidirectional=True, varlen=True, backend="cpu")
    assert plan.solver.startswith("rnn_fwd_") and plan.problem.varlen
    a = plan(x, hx, flat, cx=cx, lengths=kw["lengths"], training=True)
    b = cl.rnn(x, hx, w, cx=cx, **kw)
    for u, v in zip(a[:3], b, strict=True):
        np.testing.assert_array_equal(u, v)
    g = cl.rnn_backward(np.ones_like(a[0]), None, None, a[-1])
    assert g[3].shape == flat.shape
    with pytest.raises(BadParamError, match="lengths: this plan was made with"):
        plan(x, hx, flat, cx=cx)
    with pytest.raises(BadParamError, match="x: expected shape"):
        plan(x[:2], hx, flat, cx=cx, lengths=kw["lengths"])
    with pytest.raises(BadParamError, match="weights: expected shape"):
        plan(x, hx, flat[1:], cx=cx, lengths=kw["lengths"])


def test_dropout_between_layers():
    x, hx, cx, w, kw = _case("gru", 5, 3, 4, 6, layers=2, bi=True)
    out = _check_fwd_bwd(x, hx, cx, w, kw, atol=ATOL32, dropout=0.4, seed=11)
    y_eval = cl.rnn(x, hx, w, dropout=0.4, seed=11, **kw)[0]
    y_nodrop = ref.rnn_forward(x, hx, _upcast(w), **kw)[0]
    np.testing.assert_allclose(y_eval, y_nodrop, atol=ATOL32, rtol=0)  # eval: no dropout
    assert np.abs(out[0] - y_eval).max() > 0.01


def test_dropout_backward_uses_the_forward_mask():
    x, hx, cx, w, kw = _case("lstm", 3, 2, 3, 4, layers=2)
    out = cl.rnn(x, hx, w, cx=cx, training=True, dropout=0.5, seed=5, **kw)
    dy = np.ones_like(out[0])
    got = cl.rnn_backward(dy, None, None, out[-1])
    want = ref.rnn_backward(dy, None, None, x, hx, _upcast(w), cx=cx, dropout=0.5, seed=5,
                            training=True, **kw)  # fmt: skip
    np.testing.assert_allclose(got[0], want[0], atol=4 * ATOL32, rtol=0)


def test_dropout_with_a_philox_state():
    """seed=PhiloxState: layer k draws at the counter + k, so a state at 0 gives the integer
    seed's masks; advanced, new masks, which the backward (through the reserve) reuses: the
    same as a fresh state started at that offset."""
    x, hx, cx, w, kw = _case("lstm", 3, 2, 3, 4, layers=3)
    state = cl.PhiloxState(5, backend="cpu")
    y_int = cl.rnn(x, hx, w, cx=cx, training=True, dropout=0.5, seed=5, **kw)[0]
    y0 = cl.rnn(x, hx, w, cx=cx, training=True, dropout=0.5, seed=state, **kw)[0]
    np.testing.assert_array_equal(y0, y_int)
    state.advance(3)  # one step of a 3-layer stack
    out = cl.rnn(x, hx, w, cx=cx, training=True, dropout=0.5, seed=state, **kw)
    assert np.abs(out[0] - y_int).max() > 0.01
    again = cl.rnn(x, hx, w, cx=cx, training=True, dropout=0.5,
                   seed=cl.PhiloxState(5, offset=3, backend="cpu"), **kw)  # fmt: skip
    np.testing.assert_array_equal(out[0], again[0])
    dy = np.ones_like(out[0])
    for a, b in zip(cl.rnn_backward(dy, None, None, out[-1])[:3],
                    cl.rnn_backward(dy, None, None, again[-1])[:3], strict=True):  # fmt: skip
        np.testing.assert_array_equal(a, b)
    with pytest.raises(BadParamError, match="seed: expected an integer in"):
        cl.rnn(x, hx, w, cx=cx, training=True, dropout=0.5, seed=1.5, **kw)


def test_matches_torch():
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    m = torch.nn.LSTM(4, 6, num_layers=2, bidirectional=True, proj_size=3, batch_first=True)
    x = torch.randn(3, 5, 4, requires_grad=True)
    h0 = torch.randn(4, 3, 3, requires_grad=True)
    c0 = torch.randn(4, 3, 6, requires_grad=True)
    y, (hy, cy) = m(x, (h0, c0))
    (y.square().sum() + hy.sum() + (cy * 2).sum()).backward()
    w = cl.rnn_weights_from_torch(m)
    kw = dict(mode="lstm", num_layers=2, bidirectional=True, proj_size=3, batch_first=True)
    xn, hn, cn = (a.detach().numpy() for a in (x, h0, c0))
    y2, hy2, cy2, res = cl.rnn(xn, hn, w, cx=cn, training=True, **kw)
    for a, b in ((y2, y), (hy2, hy), (cy2, cy)):
        np.testing.assert_allclose(a, b.detach().numpy(), atol=ATOL32, rtol=0)
    dx, dhx, dcx, dw = cl.rnn_backward(2 * y2, np.ones_like(hy2), np.full_like(cy2, 2), res)
    for a, b in ((dx, x), (dhx, h0), (dcx, c0)):
        np.testing.assert_allclose(a, b.grad.numpy(), atol=4 * ATOL32, rtol=0)
    for name, prm in m.named_parameters():
        np.testing.assert_allclose(dw[name], prm.grad.numpy(), atol=1e-4, rtol=0, err_msg=name)


@pytest.mark.parametrize("algo", ["rnn_fwd_standard", "rnn_fwd_persistent"])
def test_relu_nan_passes_the_gradient_as_torch(algo):
    # PyTorch's relu keeps a NaN and its threshold_backward zeroes only h <= 0: a NaN
    # pre-activation passes dh (it used to give 0), and a NaN weight gives NaN gradients
    torch = pytest.importorskip("torch")
    torch.manual_seed(2)
    m = torch.nn.RNN(2, 3, nonlinearity="relu", bidirectional=True).double()
    x = torch.randn(4, 2, 2, dtype=torch.float64)
    x[1, 0, 1] = float("nan")
    x.requires_grad_(True)
    y, hy = m(x)
    (y * torch.linspace(-1, 1, y.numel(), dtype=torch.float64).reshape(y.shape)).sum().backward()
    w = cl.rnn_weights_from_torch(m)
    kw = dict(mode="rnn_relu", bidirectional=True, training=True, algo=algo)
    y2, hy2, res = cl.rnn(x.detach().numpy(), None, w, **kw)  # (no cy but for an LSTM)
    np.testing.assert_array_equal(np.isnan(y2), np.isnan(y.detach().numpy()))
    dy = np.linspace(-1, 1, y2.size).reshape(y2.shape)
    dx, _, _, dw = cl.rnn_backward(dy, np.zeros_like(hy2), None, res)
    # dx stays finite (dh passes the NaN cells); the weights' gradients meet the NaN h
    np.testing.assert_allclose(dx, x.grad.numpy(), atol=ATOL64, rtol=0)
    assert np.isfinite(dx).all() and np.isnan(dw["weight_hh_l0"]).any()
    for name, prm in m.named_parameters():
        np.testing.assert_allclose(dw[name], prm.grad.numpy(), atol=ATOL64, rtol=0,
                                   err_msg=name)  # fmt: skip  # (NaN where torch's)


def test_empty_batch_and_key():
    x, hx, cx, w, kw = _case("gru", 3, 0, 2, 3, bi=True)
    y, hy = cl.rnn(x, hx, w, **kw)
    assert y.shape == (3, 0, 6) and hy.shape == (2, 0, 3)
    p = RnnProblem("lstm", 100, 64, 256, 512, 128, 2, True, "fp16", varlen=True, dropout=True)
    assert parse_key(p.key()) == p
    assert p.key() == "rnn_fwd lstm t100-b64 i256-h512-p128 l2 bi fp16 varlen drop"
    assert "rnn_fwd_standard" in str(cl.explain(p))


def test_tune_records_both_directions(tmp_path, monkeypatch):
    monkeypatch.setenv("CUDNNLITE_TUNING_DIR", str(tmp_path))
    keys = [
        "rnn_fwd lstm t3-b2 i3-h4-p2 l1 bi fp32 varlen",
        "rnn_bwd gru t3-b2 i3-h4-p0 l2 uni fp32",
        "rnn_bwd lstm t3-b2 i3-h4-p0 l1 bi fp64",
    ]
    results = cl.tune(keys, backend="cpu", progress=False)
    assert results[keys[0]][0].solver.startswith("rnn_fwd_")
    assert results[keys[1]][0].solver == results[keys[2]][0].solver == "rnn_bwd_standard"


# ------------------------------------------------------------------ bad input


def _bad(match, **changes):
    x, hx, cx, w, kw = _case("lstm", 3, 2, 3, 4, layers=2)
    args = dict(x=x, hx=hx, weights=w, cx=cx, **kw)
    args.update(changes)
    before = {k: v.copy() for k, v in w.items()}
    x0 = x.copy()
    with pytest.raises(BadParamError, match=match):
        cl.rnn(args.pop("x"), args.pop("hx"), args.pop("weights"), **args)
    np.testing.assert_array_equal(x, x0)
    for k in w:
        np.testing.assert_array_equal(w[k], before[k])


def test_bad_input():
    _, _, _, w, _ = _case("lstm", 3, 2, 3, 4, layers=2)
    missing = {k: v for k, v in w.items() if k != "weight_hh_l1"}
    _bad("missing 'weight_hh_l1'", weights=missing)
    _bad(
        r"weights\['weight_ih_l1'\]: expected shape",
        weights={**w, "weight_ih_l1": w["weight_ih_l0"]},
    )
    _bad("unexpected entries", weights={**w, "weight_hr_l0": np.zeros((2, 4), np.float32)})
    _bad("hx: expected shape", hx=np.zeros((2, 2, 5), np.float32))
    _bad("cx: expected shape", cx=np.zeros((1, 2, 4), np.float32))
    _bad(r"lengths: each must be in \[1, 3\]", lengths=np.array([0, 2]))
    _bad(r"lengths: each must be in \[1, 3\]", lengths=np.array([4, 2]))
    _bad("lengths: expected 2 integers", lengths=np.array([1.0, 2.0]))
    _bad("proj_size: must be smaller than hidden_size=4", proj_size=4)
    _bad("projections need mode 'lstm'", mode="gru", proj_size=1, cx=None)
    _bad(r"dropout: expected a float in \[0, 1\)", dropout=1.0)
    _bad("mode: expected one of", mode="elman")
    _bad("cx: only mode 'lstm'", mode="gru")
    _bad("num_layers: expected an integer >= 1", num_layers=0)
    _bad("x: expected dtype", x=np.zeros((3, 2, 3), np.int32))
    _bad("hx: expected dtype float32", hx=np.zeros((2, 2, 4), np.float16))
    _bad("hx: expected dtype float32", hx=np.zeros((2, 2, 4), np.float64))  # mixed
    _bad(r"weights\['weight_ih_l0'\]: expected dtype float32",
         weights={**w, "weight_ih_l0": w["weight_ih_l0"].astype(np.float64)})  # fmt: skip
    _bad("sequence length must be at least 1", x=np.zeros((0, 2, 3), np.float32))
    _bad("matches no hidden size", weights=np.zeros(17, np.float32))
    with pytest.raises(BadParamError, match="reserve: expected the reserve"):
        cl.rnn_backward(np.zeros(1), None, None, object())
    x, hx, cx, w, kw = _case("gru", 3, 2, 3, 4)
    out = cl.rnn(x, hx, w, training=True, **kw)
    with pytest.raises(BadParamError, match="dcy: only mode 'lstm'"):
        cl.rnn_backward(out[0], None, np.zeros((1, 2, 4), np.float32), out[-1])
    with pytest.raises(BadParamError, match="dy: expected shape"):
        cl.rnn_backward(out[0][:2], None, None, out[-1])
