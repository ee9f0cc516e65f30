"""CTC loss and its gradient against the float64 reference and torch.nn.functional.ctc_loss.

Tolerances (float32 arithmetic in log space): alpha/beta at frame t carry about 3 float32
roundings per frame on values no larger than the loss, so the loss is within ~4*T ulps of
its magnitude (T <= 16 here: rtol 1e-5); the gradient's exp(lse + nll - lp) inherits that
absolute error in its exponent (atol/rtol 3e-5 on values in [-1, e^max(lp)]). fp16/bf16
store log_probs and results only: the loss is rounded once to the storage type. float64
runs the same recursions in double: see FP64_TOL.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import cudnnlite
from cudnnlite import dtypes
from cudnnlite import reference as ref
from cudnnlite.errors import BadParamError
from cudnnlite.ops.ctc import last_kernel_name
from cudnnlite.testing import assert_close, to_backend, to_numpy

LOSS_TOL = {"rtol": 1e-5, "atol": 1e-5}
GRAD_TOL = {"rtol": 3e-5, "atol": 3e-5}
# float64: the float32 argument with 2^-52 for 2^-23: ~4 roundings per frame (two log_adds
# and the add of lp, each exp/log1p within 2 ulps) on values <= the loss (|loss| <= 40
# here), T <= 12 frames: 4 * 12 * 40 * 2^-52 ~ 4e-13 absolute on the loss and in the
# gradient's exponent (gradient values <= e^0 = 1), so 1e-12 bounds both with headroom.
FP64_TOL = {"rtol": 1e-12, "atol": 1e-12}


def log_softmax(x: np.ndarray) -> np.ndarray:
    m = x.max(-1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(-1, keepdims=True))


def batch(seed: int = 0, t: int = 12, n: int = 5, c: int = 7, blank: int = 0) -> dict:
    """A random batch: different input/target lengths, a repeated label, a length-0 target
    and a single-frame input; padding filled with -1 (never read)."""
    rng = np.random.default_rng(seed)
    lp = log_softmax(rng.standard_normal((t, 5, c)))
    il = np.minimum([t, t - 2, 9, 1, 6], t)
    tl = np.array([4, 5, 3, 0, 2])
    labels = [k for k in range(c) if k != blank]
    tg = np.full((5, 5), -1, np.int64)
    for i in range(5):
        tg[i, : tl[i]] = rng.choice(labels, tl[i])
    tg[1, 1] = tg[1, 0]  # a repeat: needs a blank in between
    tg[2, 1:3] = tg[2, 0]  # three in a row
    return {"lp": lp[:, :n], "tg": tg[:n], "il": il[:n], "tl": tl[:n], "blank": blank}


def torch_ctc(lp: np.ndarray, tg: Any, il: Any, tl: Any, **kw: Any) -> tuple:
    """(loss, autograd gradient) from PyTorch on CPU in float64."""
    torch = pytest.importorskip("torch")
    x = torch.tensor(lp, dtype=torch.float64, requires_grad=True)
    loss = torch.nn.functional.ctc_loss(
        x, torch.as_tensor(tg), torch.as_tensor(il), torch.as_tensor(tl), **kw
    )
    g = torch.ones_like(loss)
    loss.backward(g)
    return loss.detach().numpy(), x.grad.numpy(), g.numpy()


def run(backend: str, b: dict, tg: Any, dtype: Any = np.float32, **kw: Any) -> tuple:
    lp = to_backend(b["lp"].astype(dtype), backend)
    args = (lp, to_backend(np.asarray(tg), backend), b["il"], b["tl"])
    loss = cudnnlite.ctc_loss(*args, blank=b["blank"], **kw)
    reduced = kw.get("reduction", "mean") != "none"
    go = 1.0 if reduced else to_backend(np.ones(loss.shape, np.float32), backend)
    grad = cudnnlite.ctc_loss_backward(go, *args, blank=b["blank"], **kw)
    return to_numpy(loss), to_numpy(grad)


def check(backend: str, b: dict, tg: Any, **kw: Any) -> None:
    loss, grad = run(backend, b, tg, **kw)
    want = ref.ctc_loss_forward(b["lp"], tg, b["il"], b["tl"], blank=b["blank"], **kw)
    go = np.ones(want.shape)
    want_g = ref.ctc_loss_backward(go, b["lp"], tg, b["il"], b["tl"], blank=b["blank"], **kw)
    assert loss.shape == want.shape and loss.dtype == np.float32
    assert_close(loss, want, np.float32, what="loss", **LOSS_TOL)
    assert_close(grad, want_g, np.float32, what="grad", **GRAD_TOL)
    t_loss, t_grad, _ = torch_ctc(b["lp"], tg, b["il"], b["tl"], blank=b["blank"], **kw)
    np.testing.assert_allclose(want, t_loss, rtol=1e-12, atol=1e-12)  # reference = torch
    np.testing.assert_allclose(want_g, t_grad, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
def test_padded_batch_every_reduction(backend: str, reduction: str) -> None:
    b = batch()
    check(backend, b, b["tg"], reduction=reduction)
    assert last_kernel_name() == "ctc_grad_fp32"


def test_concatenated_targets_and_blank_last(backend: str) -> None:
    b = batch(seed=1, blank=6)
    flat = np.concatenate([b["tg"][i, : b["tl"][i]] for i in range(5)]).astype(np.int32)
    check(backend, b, flat, reduction="none")
    padded, _ = run(backend, b, b["tg"], reduction="none")
    concat, _ = run(backend, b, flat, reduction="none")
    np.testing.assert_array_equal(padded, concat)


def test_unnormalized_log_probs_gradient_is_torchs(backend: str) -> None:
    b = batch(seed=2, t=8, n=2)
    b["lp"] = np.random.default_rng(3).standard_normal(b["lp"].shape) * 0.5
    b["il"], b["tl"] = np.array([8, 5]), np.array([3, 2])
    check(backend, b, b["tg"], reduction="sum")


def test_impossible_alignments_inf_or_zero(backend: str) -> None:
    # Sample 0: 3 labels with a repeat need 4 frames but get 3; sample 1 is possible.
    b = batch(seed=4, t=6, n=2)
    b["il"], b["tl"] = np.array([3, 6]), np.array([3, 2])
    b["tg"][0, :3] = [2, 2, 3]
    loss, grad = run(backend, b, b["tg"], reduction="none")
    t_loss, t_grad, _ = torch_ctc(b["lp"], b["tg"], b["il"], b["tl"], reduction="none")
    assert loss[0] == np.inf and np.isfinite(loss[1])
    assert np.isnan(grad[:3, 0]).all() and (grad[3:, 0] == 0).all()  # as PyTorch's
    np.testing.assert_array_equal(np.isnan(grad), np.isnan(t_grad))
    check(backend, b, b["tg"], reduction="mean", zero_infinity=True)
    loss, grad = run(backend, b, b["tg"], reduction="none", zero_infinity=True)
    assert loss[0] == 0 and (grad[:, 0] == 0).all()


def test_nan_log_prob_keeps_pathless_gradients_finite(backend: str) -> None:
    # A NaN at (t=0, blank) makes alpha NaN along its paths; at the last frame only the
    # positions that end the target have a suffix (beta finite), so the other columns get
    # no path term: PyTorch's gradient is finite there (it was NaN, NaN + -inf)
    b = {"lp": np.log(np.full((2, 1, 5), 0.2)), "il": np.array([2]), "tl": np.array([2]),
         "blank": 0}  # fmt: skip
    b["lp"][0, 0, 0] = np.nan
    tg = np.array([[4, 3]])
    loss, grad = run(backend, b, tg, dtype=np.float64, reduction="none")
    t_loss, t_grad, _ = torch_ctc(b["lp"], tg, b["il"], b["tl"], reduction="none")
    np.testing.assert_allclose(loss, t_loss, rtol=1e-12)
    np.testing.assert_allclose(grad, t_grad, rtol=1e-12, atol=1e-15)  # NaN where torch's
    np.testing.assert_allclose(grad[1, 0], [0.2, 0.2, 0.2, -0.8, 0.2], rtol=1e-12)
    want = ref.ctc_loss_backward(np.ones(1), b["lp"], tg, b["il"], b["tl"], reduction="none")
    np.testing.assert_allclose(want, t_grad, rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("reduction", ["sum", "mean"])
def test_reduced_loss_is_a_0d_array(backend: str, reduction: str) -> None:
    # (NumPy's sum / mean return a scalar, which has no __dlpack__ for torch.from_dlpack)
    b = batch(seed=6, t=6, n=2)
    loss, _ = run(backend, b, b["tg"], reduction=reduction)
    got = cudnnlite.ctc_loss(to_backend(b["lp"].astype(np.float32), backend), b["tg"],
                             b["il"], b["tl"], reduction=reduction)  # fmt: skip
    assert type(got).__name__ == "ndarray" and got.shape == () and got.dtype == np.float32
    assert hasattr(got, "__dlpack__")


def test_empty_inputs_and_targets(backend: str) -> None:
    # input length 0 with target length 0 (loss 0) and with a label (inf); T = 1.
    b = batch(seed=5, t=1, n=3, c=4)
    b["il"], b["tl"] = np.array([0, 0, 1]), np.array([0, 1, 1])
    check(backend, b, b["tg"], reduction="none", zero_infinity=True)
    loss, _ = run(backend, b, b["tg"], reduction="none")
    assert loss[0] == 0 and loss[1] == np.inf


def test_unbatched(backend: str) -> None:
    b = batch(seed=6)
    lp2 = b["lp"][:, 0]
    args = (to_backend(lp2.astype(np.float32), backend), b["tg"][0], 12, [4])
    loss = cudnnlite.ctc_loss(*args, reduction="none")
    want = ref.ctc_loss_forward(lp2, b["tg"][0], 12, 4, reduction="none")
    assert loss.shape == () and want.shape == ()
    assert_close(loss, want, np.float32, **LOSS_TOL)
    grad = cudnnlite.ctc_loss_backward(np.float32(2.0), *args, reduction="none")
    want_g = ref.ctc_loss_backward(2.0, lp2, b["tg"][0], 12, 4, reduction="none")
    assert grad.shape == lp2.shape
    assert_close(grad, want_g, np.float32, **GRAD_TOL)


def test_torch_tensors_as_arguments(backend: str, emulator_only: None) -> None:
    torch = pytest.importorskip("torch")
    b = batch(seed=10)
    want = cudnnlite.ctc_loss(b["lp"].astype(np.float32), b["tg"], b["il"], b["tl"])
    t = (
        torch.tensor(b["lp"], dtype=torch.float32),
        *map(torch.tensor, (b["tg"], b["il"], b["tl"])),
    )
    np.testing.assert_array_equal(to_numpy(cudnnlite.ctc_loss(*t)), want)
    grad = cudnnlite.ctc_loss_backward(torch.tensor(1.0), *t)
    np.testing.assert_array_equal(
        grad, cudnnlite.ctc_loss_backward(1.0, t[0].numpy(), b["tg"], b["il"], b["tl"])
    )


@pytest.mark.parametrize("dtype", [d.numpy for d in dtypes.FP32_COMPUTE_TYPES[1:]], ids=str)
def test_16_bit_storage(backend: str, dtype: Any) -> None:
    b = batch(seed=7)
    b["lp"] = b["lp"].astype(dtype).astype(np.float64)  # the reference sees the stored values
    loss, grad = run(backend, b, b["tg"], dtype=dtype, reduction="none")
    assert loss.dtype == dtype and grad.dtype == dtype
    want = ref.ctc_loss_forward(b["lp"], b["tg"], b["il"], b["tl"], reduction="none")
    want_g = ref.ctc_loss_backward(np.ones(5), b["lp"], b["tg"], b["il"], b["tl"], reduction="none")
    assert_close(loss, want, dtype, what="loss")  # one storage rounding
    assert_close(grad, want_g, dtype, what="grad", atol=dtypes.finfo(dtype).eps)


@pytest.mark.parametrize("reduction", ["none", "mean"])
def test_float64_against_reference_and_torch(backend: str, reduction: str) -> None:
    # Double kernels, not float32 ones fed doubles: the loss must agree with the
    # reference far beyond float32's 1e-5, an impossible alignment stays inf / NaN.
    b = batch(seed=11)
    b["il"][4], b["tl"][4] = 1, 2  # sample 4: two labels in one frame, no alignment
    kw = {"reduction": reduction, "zero_infinity": reduction == "mean"}
    loss, grad = run(backend, b, b["tg"], dtype=np.float64, **kw)
    assert loss.dtype == np.float64 and grad.dtype == np.float64
    assert last_kernel_name() == "ctc_grad_fp64"
    args = (b["lp"], b["tg"], b["il"], b["tl"])
    want = ref.ctc_loss_forward(*args, **kw)
    want_g = ref.ctc_loss_backward(np.ones(want.shape), *args, **kw)
    assert_close(loss, want, np.float64, what="loss", **FP64_TOL)
    assert_close(grad, want_g, np.float64, what="grad", **FP64_TOL)
    t_loss, t_grad, _ = torch_ctc(*args, **kw)
    assert_close(loss, t_loss, np.float64, what="loss vs torch", **FP64_TOL)
    assert_close(grad, t_grad, np.float64, what="grad vs torch", **FP64_TOL)
    if reduction == "none":
        assert loss[4] == np.inf and np.isnan(grad[:1, 4]).all()


def test_float64_gradient_by_central_differences(backend: str) -> None:
    # One sample with T = 5, C = 4 (a repeated label), every element perturbed by +-h in
    # its own batch entry so that one reduction="none" call evaluates all 2 * 20 losses.
    b = batch(seed=12, t=5, n=1, c=4)
    b["tl"][0] = 2
    b["tg"][0, :2] = [2, 2]
    t, _, c = b["lp"].shape
    m = t * c
    # h = 1e-5 ~ cbrt(2^-52 |loss|): truncation h^2/6 |f'''| (~2e-11 for |f'''| <= 1)
    # plus cancellation 2^-52 |loss| / h (|loss| <= 10: ~2e-10); atol 1e-8 bounds both.
    h = 1e-5
    bump = np.eye(m).reshape(m, t, c).transpose(1, 0, 2) * h
    lp = np.concatenate([b["lp"] + bump, b["lp"] - bump], axis=1)  # (T, 2m, C)
    k = 2 * m
    x = to_backend(lp, backend)
    tg = np.repeat(b["tg"][:1, :2], k, axis=0)
    il, tl = np.full(k, t), np.full(k, 2)
    losses = to_numpy(cudnnlite.ctc_loss(x, tg, il, tl, reduction="none"))
    fd = ((losses[:m] - losses[m:]) / (2 * h)).reshape(t, c)
    # PyTorch's convention adds exp(lp) to the true derivative (see ctc_loss_backward).
    x0 = to_backend(b["lp"], backend)
    grad = to_numpy(cudnnlite.ctc_loss_backward(1.0, x0, tg[:1], [t], [2], reduction="sum"))
    assert_close(grad[:, 0] - np.exp(b["lp"][:, 0]), fd, np.float64, rtol=0, atol=1e-8)


def test_deterministic_under_other_schedules(
    backend: str, emulator_only: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    b = batch(seed=8)
    _, first = run(backend, b, b["tg"], reduction="sum")
    monkeypatch.setenv("CUDNNLITE_EMU_SCHEDULE", "reverse")
    _, again = run(backend, b, b["tg"], reduction="sum")
    np.testing.assert_array_equal(first.view(np.uint32), again.view(np.uint32))


def test_brute_force_sum_over_alignments() -> None:
    hyp = pytest.importorskip("hypothesis")
    st = pytest.importorskip("hypothesis.strategies")

    @hyp.settings(max_examples=12, deadline=None)
    @hyp.given(
        t=st.integers(1, 4),
        blank=st.integers(0, 2),
        target=st.lists(st.integers(0, 1), max_size=3),
        seed=st.integers(0, 2**16),
    )
    def prop(t: int, blank: int, target: list[int], seed: int) -> None:
        labels = [k for k in range(3) if k != blank]
        tgt = [labels[k] for k in target]
        lp = log_softmax(np.random.default_rng(seed).standard_normal((t, 3)))
        want = ref.ctc.ctc_brute_force_nll(lp, tgt, blank)
        got = cudnnlite.ctc_loss(
            lp.astype(np.float32), np.array(tgt, np.int64), t, len(tgt), blank, "none"
        )
        if want == np.inf:
            assert got == np.inf
        else:
            np.testing.assert_allclose(float(got), want, **LOSS_TOL)

    prop()


def test_bad_inputs_raise_and_leave_inputs_untouched(backend: str) -> None:
    b = batch(seed=9)
    lp = to_backend(b["lp"].astype(np.float32), backend)
    tg, il, tl = b["tg"], b["il"], b["tl"]
    before = to_numpy(lp).tobytes(), tg.tobytes()
    ctc, bwd = cudnnlite.ctc_loss, cudnnlite.ctc_loss_backward
    bad = [
        (lambda: ctc(to_backend(b["lp"].astype(np.int32), backend), tg, il, tl), "log_probs"),
        (lambda: ctc(lp[0, 0], tg, il, tl), "log_probs"),
        (lambda: ctc(lp, tg, il, tl, blank=7), "blank"),
        (lambda: ctc(lp, tg, il, tl, blank=-1), "blank"),
        (lambda: ctc(lp, tg, il, tl, reduction="avg"), "reduction"),
        (lambda: ctc(lp, tg, il, tl, zero_infinity=1), "zero_infinity"),
        (lambda: ctc(lp, tg, [13, 1, 1, 1, 1], tl), "input_lengths"),
        (lambda: ctc(lp, tg, [-1, 1, 1, 1, 1], tl), "input_lengths"),
        (lambda: ctc(lp, tg, il[:4], tl), "input_lengths"),
        (lambda: ctc(lp, tg, il.astype(np.float32), tl), "input_lengths"),
        (lambda: ctc(lp, tg, il, [6, 1, 1, 1, 1]), "target_lengths"),
        (lambda: ctc(lp, tg, il, [-1, 1, 1, 1, 1]), "target_lengths"),
        (lambda: ctc(lp, tg[:4], il, tl), "targets"),
        (lambda: ctc(lp, tg.astype(np.float32), il, tl), "targets"),
        (lambda: ctc(lp, tg[None], il, tl), "targets"),
        (lambda: ctc(lp, np.ones(13, np.int64), il, tl), "targets"),  # sum(tl) = 14
        (lambda: ctc(lp, np.where(tg == tg[0, 0], 0, tg), il, tl), "targets"),  # the blank
        (lambda: ctc(lp, np.where(tg == tg[0, 0], 7, tg), il, tl), "targets"),  # >= C
        (lambda: bwd(np.ones(5, np.float32), lp, tg, il, tl), "grad_out"),  # mean: scalar
        (lambda: bwd(1.0, lp, tg, il, tl, reduction="none"), "grad_out"),
        (lambda: bwd("1", lp, tg, il, tl), "grad_out"),
    ]
    for fn, name in bad:
        with pytest.raises(BadParamError, match=name):
            fn()
    assert (to_numpy(lp).tobytes(), tg.tobytes()) == before
