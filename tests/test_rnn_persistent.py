"""The persistent RNN forward solver (rnn_fwd_persistent): every mode against the float64
reference and the standard solver, its saves through the standard backward, the emulator's
thread schedules, and its limits (is_applicable reasons, a forced use that cannot run)."""

from __future__ import annotations

import numpy as np
import pytest

import cudnnlite as cl
from cudnnlite.errors import NotSupportedError
from cudnnlite.problems.rnn import RnnProblem
from cudnnlite.reference import rnn as ref
from cudnnlite.runtime.caps import EMULATOR, for_sm
from cudnnlite.runtime.select import backend_for
from cudnnlite.solvers.rnn.persistent import (
    MAX_BATCH,
    PersistentConfig,
    PersistentFwdSolver,
    smem_bytes,
)

PERSISTENT = "rnn_fwd_persistent"
STANDARD = "rnn_fwd_standard"
SOLVER = PersistentFwdSolver()

# fp32: each value is a sum of at most G*H + I + 2 O(1) products rounded once (~1e-6
# relative), compounded over T <= 6 steps of contractive gates: 2e-5 absolute leaves a wide
# margin while a wrong index, gate or stale state gives errors of order 0.1.
ATOL32 = 2e-5
# Against the standard solver only the order of the h W_hh^T sums differs (warp shuffle
# tree vs sgemm): a few fp32 ulps per step.
ATOL_SAME = 2e-6
# fp16: h is rounded to fp16 (2^-11 relative) every step, as PyTorch stores it, and the
# error grows about linearly with T (<= 5 here): 5 * 2^-11 ~ 2.5e-3, doubled for margin.
# The standard solver rounds at the same places, but a different fp32 sum order can flip
# one rounding, so it gets the same tolerance.
ATOL16 = 6e-3


def _weights(mode, layers, dirs, i, h, dtype, seed):
    rng = np.random.default_rng(seed)
    g, w = ref.GATES[mode], {}
    for layer in range(layers):
        for d in range(dirs):
            sfx = "_reverse" if d else ""
            il = i if layer == 0 else dirs * h
            w[f"weight_ih_l{layer}{sfx}"] = rng.uniform(-0.5, 0.5, (g * h, il))
            w[f"weight_hh_l{layer}{sfx}"] = rng.uniform(-0.5, 0.5, (g * h, h))
            w[f"bias_ih_l{layer}{sfx}"] = rng.uniform(-0.5, 0.5, g * h)
            w[f"bias_hh_l{layer}{sfx}"] = rng.uniform(-0.5, 0.5, g * h)
    return {k: v.astype(dtype) for k, v in w.items()}


def _case(mode, t, b, i, h, *, layers=1, bi=False, lens=None, with_hx=True,
          dtype=np.float32, seed=0):  # fmt: skip
    rng = np.random.default_rng(seed + 1)
    dirs = 2 if bi else 1
    w = _weights(mode, layers, dirs, i, h, dtype, seed)
    x = rng.standard_normal((t, b, i)).astype(dtype)
    hx = rng.standard_normal((layers * dirs, b, h)).astype(dtype) if with_hx else None
    cx = None
    if mode == "lstm" and with_hx:
        cx = rng.standard_normal((layers * dirs, b, h)).astype(dtype)
    kw = dict(mode=mode, num_layers=layers, bidirectional=bi,
              lengths=None if lens is None else np.array(lens))  # fmt: skip
    return x, hx, cx, w, kw


def _f64(a):
    return None if a is None else np.asarray(a, np.float64)


def _f64w(w):
    return {k: _f64(v) for k, v in w.items()}


def _close(a, b, atol, what):
    np.testing.assert_allclose(_f64(a), _f64(b), atol=atol, rtol=0, err_msg=what)


def _check_forward(x, hx, cx, w, kw, atol, atol_same, training=True):
    """Persistent against the reference and the standard solver; returns its output."""
    out = cl.rnn(x, hx, w, cx=cx, training=training, algo=PERSISTENT, **kw)
    std = cl.rnn(x, hx, w, cx=cx, training=training, algo=STANDARD, **kw)
    want = ref.rnn_forward(_f64(x), _f64(hx), _f64w(w), cx=_f64(cx), **kw)
    for name, got, s, r in zip(("y", "hy", "cy"), out[:3], std[:3], want, strict=False):
        if r is None:
            continue
        assert got.dtype == x.dtype, name
        _close(got, r, atol, f"{name} vs reference")
        _close(got, s, atol_same, f"{name} vs standard")
    if training:
        for layer, (a, b) in enumerate(zip(out[-1].layers, std[-1].layers, strict=True)):
            for part in ("gates", "c", "h", "ghn"):
                u, v = getattr(a, part), getattr(b, part)
                assert (u is None) == (v is None), part
                if u is not None:
                    _valid = _active_mask(kw["lengths"], u.shape, part)
                    _close(u[_valid], v[_valid], atol_same, f"saves.{part} layer {layer}")
    return out


def _active_mask(lengths, shape, part):
    """The saved entries every solver writes: all of s_h; the others at active steps only
    (the standard solver leaves absent steps' s_ghn unwritten, the backward ignores them)."""
    mask = np.ones(shape, bool)
    if lengths is None or part == "h":
        return mask
    d, t, b = shape[:3]
    for dd in range(d):
        for tt in range(t):
            mask[dd, tt, np.asarray(lengths) <= tt] = False
    return mask


def _check_backward(out, x, hx, cx, w, kw, atol):
    """rnn_backward of a persistent forward against the reference's gradients."""
    rng = np.random.default_rng(5)
    dy = rng.standard_normal(out[0].shape).astype(x.dtype)
    dhy = rng.standard_normal(out[1].shape).astype(x.dtype)
    dcy = rng.standard_normal(out[2].shape).astype(x.dtype) if kw["mode"] == "lstm" else None
    dx, dhx, dcx, dw = cl.rnn_backward(dy, dhy, dcy, out[-1])
    g = ref.rnn_backward(_f64(dy), _f64(dhy), _f64(dcy), _f64(x), _f64(hx), _f64w(w),
                         cx=_f64(cx), **kw)  # fmt: skip
    # Gradients multiply the forward's errors by O(1) terms: 4x; weight gradients sum over
    # T * B terms: 8x.
    _close(dx, g[0], 4 * atol, "dx")
    _close(dhx, g[1], 4 * atol, "dhx")
    if g[2] is not None:
        _close(dcx, g[2], 4 * atol, "dcx")
    for k in w:
        _close(dw[k], g[3][k], 8 * atol, k)


CASES = [
    # 2 layers, both directions, unsorted lengths with a 1, hidden 13 over 2 blocks of 7/6
    ("lstm", dict(t=5, b=3, i=4, h=13, layers=2, bi=True, lens=[5, 1, 3])),
    # batch 1, hidden 5, no initial state
    ("gru", dict(t=4, b=1, i=3, h=5, bi=True, with_hx=False)),
    # GRU with lengths: the n gate's recurrent part (s_ghn) and the z carry of absent rows
    ("gru", dict(t=6, b=3, i=2, h=13, lens=[2, 6, 1])),
    # 2 layers, 4 blocks of 3 units; Ho = 12: the kernel's 16-byte (float4) dot product
    ("rnn_tanh", dict(t=6, b=2, i=3, h=12, layers=2, lens=[2, 6])),
    ("rnn_relu", dict(t=3, b=3, i=2, h=5, bi=True, lens=[3, 1, 2])),
]


@pytest.mark.parametrize("mode,kw", CASES, ids=lambda v: str(v)[:50])
def test_matches_reference_and_standard(mode, kw):
    args = _case(mode, **kw)
    out = _check_forward(*args, atol=ATOL32, atol_same=ATOL_SAME)
    _check_backward(out, *args, atol=ATOL32)


def test_fp16_forward_and_backward():
    # Ho = 8: the 16-byte (8 x fp16) dot product.
    args = _case("lstm", 5, 2, 3, 8, bi=True, lens=[5, 3], dtype=np.float16)
    out = _check_forward(*args, atol=ATOL16, atol_same=ATOL16)
    _check_backward(out, *args, atol=ATOL16)


@pytest.mark.parametrize("schedule", ["reverse", "random"])
def test_thread_schedules(monkeypatch, schedule):
    """Threads run in another order: a missing __syncthreads or grid barrier shows."""
    monkeypatch.setenv("CUDNNLITE_EMU_SCHEDULE", schedule)
    x, hx, cx, w, kw = _case("lstm", 4, 3, 3, 13, bi=True, lens=[2, 4, 1], seed=7)
    y, hy, cy = cl.rnn(x, hx, w, cx=cx, algo=PERSISTENT, **kw)
    want = ref.rnn_forward(_f64(x), _f64(hx), _f64w(w), cx=_f64(cx), **kw)
    for name, got, r in zip(("y", "hy", "cy"), (y, hy, cy), want, strict=True):
        _close(got, r, ATOL32, name)


# ------------------------------------------------------------------ limits and configs


def test_not_applicable_reasons():
    base = dict(mode="lstm", t=4, b=2, i=8, h=16)
    app = SOLVER.is_applicable(RnnProblem(**base, p=8), EMULATOR)
    assert not app and "proj_size 0" in app.reason
    app = SOLVER.is_applicable(RnnProblem(**{**base, "b": MAX_BATCH + 1}), EMULATOR)
    assert not app and f"batch <= {MAX_BATCH}" in app.reason
    # Hidden 1024 on 4 blocks: 256 units x 4 gates x 1024 x 4 B = 4 MiB per block.
    app = SOLVER.is_applicable(RnnProblem(**{**base, "h": 1024}), EMULATOR)
    assert not app and "shared memory" in app.reason and "1024" in app.reason
    # On an H200-sized table (132 SMs) fp16 hidden 1024 fits: 8 units per block.
    h200 = for_sm(90, 132)
    big = RnnProblem(**{**base, "h": 1024, "dtype": "fp16"})
    assert SOLVER.is_applicable(big, h200)
    cfg = SOLVER.default_config(big, h200)
    assert cfg.units == 8 and smem_bytes(big, cfg.units) <= h200.max_shared_bytes
    # float64 counts 8 bytes per weight, staged h and pre-activation: the same slice needs
    # 8 x 4 x 1024 x 8 B = 256 KiB of W_hh alone, over an H200's block limit.
    big64 = RnnProblem(**{**base, "h": 1024, "dtype": "fp64"})
    assert smem_bytes(big64, 8) == 8 * (4 * 8 * 1024 + 2 * 1024 + 2 * 4 * 8)
    app = SOLVER.is_applicable(big64, h200)
    assert not app and "shared memory" in app.reason
    assert SOLVER.is_applicable(RnnProblem(**{**base, "dtype": "fp64"}), EMULATOR)
    app = SOLVER.is_applicable(RnnProblem(**base, bidirectional=True), for_sm(90, 1))
    assert not app and "co-resident" in app.reason


def test_configs():
    uni = RnnProblem(mode="gru", t=3, b=2, i=4, h=13)
    bi = RnnProblem(mode="gru", t=3, b=2, i=4, h=13, bidirectional=True)
    # The emulator models 4 SMs: the smallest balanced slice whose grid fits.
    assert SOLVER.default_config(uni, EMULATOR) == PersistentConfig(4)  # 4+4+4+1
    assert SOLVER.default_config(bi, EMULATOR) == PersistentConfig(7)  # 2 x (7+6)
    cfgs = SOLVER.configs(uni, EMULATOR)
    assert cfgs[0] == PersistentConfig(4) and PersistentConfig(7) in cfgs
    assert all(SOLVER.is_valid(c, uni, EMULATOR) for c in cfgs)
    assert not SOLVER.is_valid(PersistentConfig(1), uni, EMULATOR)  # 13 blocks > 4
    assert SOLVER.config_from_dict({"units": 13}) == PersistentConfig(13)
    for bad in (0, MAX_BATCH * 100, 2.0):
        with pytest.raises(ValueError):
            PersistentConfig(bad)


def test_forced_where_it_cannot_run():
    x, hx, cx, w, kw = _case("lstm", 3, 2, 3, 5)
    w["weight_hr_l0"] = np.full((2, 5), 0.1, np.float32)
    w["weight_hh_l0"] = w["weight_hh_l0"][:, :2].copy()
    hx = hx[..., :2].copy()
    before = hx.copy()
    with pytest.raises(NotSupportedError, match="rnn_fwd_persistent.*proj_size 0"):
        cl.rnn(x, hx, w, cx=cx, proj_size=2, algo=PERSISTENT, mode="lstm")
    np.testing.assert_array_equal(hx, before)


def test_runner_rechecks_co_residency():
    """A grid over the backend's cooperative limit (the emulator: 64 blocks of 256 threads)
    is refused before any launch, naming the sizes."""
    problem = RnnProblem(mode="rnn_tanh", t=2, b=1, i=2, h=65)
    backend = backend_for(np.zeros(1, np.float32), names=("x",))
    with pytest.raises(NotSupportedError, match=r"65 blocks.*1 units.*hidden size 65"):
        SOLVER.prepare(backend, problem, PersistentConfig(1))
