"""Property tests of the CTC loss and its gradient (hypothesis), on every backend.

Random small problems (T <= 12, N <= 4, C <= 6, the blank anywhere, repeated labels,
empty targets, input lengths 0..T, alignments that do not exist) against the float64
reference and PyTorch's autograd; the invariances the API promises (batch order, target
layout, padding contents, strides, unbatched calls, the reductions as sums of per-sample
losses); inputs never written (every call here compares its arguments before and after).

Tolerances (see ``bounds``): every intermediate of the recursions is a log-sum over path
sums, so its magnitude is at most mag = sum_t max_c |lp[t, c]| + T log 3 (a log-sum of
<= 3^T path sums). A frame costs alpha two log_adds and the add of lp: three adds rounded
relative to mag and exp/log1p results (values <= log 2) within 2 ulps each; 8 roundings
of (mag + 1) per frame bound that with headroom, so the loss is within
E = 8 * T * eps * (mag + 1). The gradient's exponent lse(alpha + beta) + nll - lp carries
E twice, plus the lse over the L = 2S + 1 extended positions and two adds, and its exp
term is a posterior in [0, 1] (a ratio of path sums), so its absolute error is at most
that exponent error; exp(lp) adds a few ulps of itself. eps is 2^-24 for float32 (the
reference is exact in comparison) and 2^-52 for float64 (the reference and PyTorch round
in double too: both sides count).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, example, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from test_ctc import log_softmax  # noqa: E402

import cudnnlite  # noqa: E402
from cudnnlite import reference as ref  # noqa: E402
from cudnnlite.errors import BadParamError  # noqa: E402
from cudnnlite.testing import to_backend, to_numpy  # noqa: E402

HYPO = settings(suppress_health_check=[HealthCheck.function_scoped_fixture])

F32, F64 = np.float32, np.float64
DTYPES = [F32, F64]
EPS = {np.dtype(np.float32): 2.0**-24, np.dtype(np.float64): 2.0**-52}
REDUCTIONS = ["none", "sum", "mean"]
# Per frame: two log_adds and the add of lp (see the module docstring), with headroom.
ROUNDINGS_PER_FRAME = 8


@dataclass(frozen=True)
class Case:
    """A CTC problem small enough to print: log_probs come from ``seed``."""

    t: int
    c: int
    blank: int
    il: tuple[int, ...]
    targets: tuple[tuple[int, ...], ...]
    seed: int = 0
    normalized: bool = True  # log_softmax outputs, or the raw values
    scale: float = 1.0  # logits' spread: the larger, the more peaked

    @property
    def n(self) -> int:
        return len(self.il)

    @property
    def tl(self) -> np.ndarray:
        return np.array([len(y) for y in self.targets], np.int64)

    def lp(self, dtype: Any) -> np.ndarray:
        """(T, N, C) log_probs rounded to ``dtype``, as float64 (what the kernels see)."""
        x = np.random.default_rng(self.seed).standard_normal((self.t, self.n, self.c))
        x = log_softmax(x * self.scale) if self.normalized else x * self.scale
        return x.astype(dtype).astype(np.float64)

    def padded(self, extra: int = 0, fill: int = -1) -> np.ndarray:
        """(N, S) int64 targets, S = max length + extra, ``fill`` past each length."""
        tg = np.full((self.n, int(self.tl.max(initial=0)) + extra), fill, np.int64)
        for i, y in enumerate(self.targets):
            tg[i, : len(y)] = y
        return tg

    def flat(self) -> np.ndarray:
        return np.array([k for y in self.targets for k in y], np.int32)


@st.composite
def cases(draw: Any, nonempty: bool = False) -> Case:
    t = draw(st.integers(1, 12))
    n = draw(st.integers(1, 4))
    c = draw(st.integers(2, 6))
    blank = draw(st.integers(0, c - 1))
    labels = [k for k in range(c) if k != blank]
    # full-length inputs half the time; target lengths up to T + 1 (some impossible)
    lengths = st.one_of(st.just(t), st.integers(0, t))
    il = tuple(draw(st.lists(lengths, min_size=n, max_size=n)))
    target = st.lists(st.sampled_from(labels), max_size=min(t + 1, 8)).map(tuple)
    targets = tuple(draw(st.lists(target, min_size=n, max_size=n)))
    if nonempty and not any(targets):
        targets = ((labels[0],), *targets[1:])
    return Case(
        t=t,
        c=c,
        blank=blank,
        il=il,
        targets=targets,
        seed=draw(st.integers(0, 2**16)),
        normalized=draw(st.booleans()),
        scale=draw(st.sampled_from([0.5, 1.0, 4.0])),
    )


# Edge cases that always run.
REPEATS = Case(t=5, c=4, blank=0, il=(5, 5), targets=((2, 2, 2), (1, 3, 1)), seed=1)
EMPTY = Case(t=4, c=3, blank=2, il=(4, 0, 2), targets=((), (), (1,)), seed=2)
ONE_FRAME = Case(t=1, c=3, blank=1, il=(1, 1, 0), targets=((0,), (), (2,)), seed=3)
# sample 0: [2, 2, 3] needs 4 frames (a blank between the repeats) and gets 3;
# sample 1: two labels in one frame; sample 2 is possible
IMPOSSIBLE = Case(t=4, c=5, blank=4, il=(3, 1, 4), targets=((2, 2, 3), (0, 1), (0, 3)), seed=4)
UNNORMALIZED = Case(
    t=12, c=6, blank=3, il=(12, 7), targets=((0, 0, 1, 5, 5), (2,)), normalized=False, seed=5
)


def snapshot(args: tuple) -> list:
    return [to_numpy(a).copy() if hasattr(a, "shape") else a for a in args]


def call(fn: Any, *args: Any, **kw: Any) -> np.ndarray:
    """``fn(*args, **kw)`` as NumPy, checking that no argument was written."""
    before = snapshot(args)
    out = to_numpy(fn(*args, **kw))
    for i, (a, b) in enumerate(zip(snapshot(args), before, strict=True)):
        if isinstance(b, np.ndarray):
            np.testing.assert_array_equal(a, b, err_msg=f"argument {i} was modified")
        else:
            assert a == b, f"argument {i} was modified"
    return out


def grad_out_for(reduction: str, n: int, go: float) -> np.ndarray:
    """A 0-d grad_out for sum/mean, (N,) for none (a different value per sample)."""
    if reduction != "none":
        return np.array(go)
    return np.array([go * (1 - k / 4) for k in range(n)])


def lib(
    backend: str,
    case: Case,
    dtype: Any,
    targets: Any,
    reduction: str,
    zero_inf: bool,
    go: np.ndarray,
    lp: Any = None,
    lengths: tuple | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """(loss, gradient) from cudnnlite."""
    x = to_backend(case.lp(dtype).astype(dtype), backend) if lp is None else lp
    il, tl = lengths if lengths is not None else (np.array(case.il), case.tl)
    args = (x, to_backend(np.asarray(targets), backend), il, tl)
    kw = {"blank": case.blank, "reduction": reduction, "zero_infinity": zero_inf}
    loss = call(cudnnlite.ctc_loss, *args, **kw)
    grad = call(cudnnlite.ctc_loss_backward, to_backend(go.astype(dtype), backend), *args, **kw)
    return loss, grad


def torch_ctc(case: Case, dtype: Any, reduction: str, zi: bool, go: np.ndarray) -> tuple:
    """(loss, autograd gradient) from PyTorch on CPU in float64, None without torch."""
    try:
        import torch
    except ImportError:
        return None
    x = torch.tensor(case.lp(dtype), dtype=torch.float64, requires_grad=True)
    loss = torch.nn.functional.ctc_loss(
        x,
        torch.as_tensor(case.padded()),
        torch.as_tensor(np.array(case.il)),
        torch.as_tensor(case.tl),
        blank=case.blank,
        reduction=reduction,
        zero_infinity=zi,
    )
    loss.backward(torch.as_tensor(go, dtype=torch.float64))
    return loss.detach().numpy(), x.grad.numpy()


def bounds(
    case: Case, dtype: Any, reduction: str, go: np.ndarray, want_none: np.ndarray
) -> tuple[Any, np.ndarray]:
    """(loss tolerance, gradient tolerance (T, N, C)): absolute, from the module docstring."""
    eps = EPS[np.dtype(dtype)]
    lp = case.lp(dtype)
    il, tl = np.array(case.il), case.tl
    frames = np.arange(case.t)[:, None] < il[None, :]  # (T, N)
    mag = (np.abs(lp).max(axis=2) * frames).sum(axis=0) + il * np.log(3)
    e_loss = ROUNDINGS_PER_FRAME * eps * np.maximum(il, 1) * (mag + 1)
    finite = np.where(np.isfinite(want_none), np.abs(want_none), 0.0)
    div = np.maximum(tl, 1) * case.n
    if reduction == "none":
        loss_tol = e_loss
    elif reduction == "sum":  # plus one rounding of the running sum per sample
        loss_tol = e_loss.sum() + case.n * eps * finite.sum()
    else:  # plus the division and the mean's sum
        loss_tol = (e_loss / div).sum() + (case.n + 2) * eps * (finite / div).sum()
    g = np.broadcast_to(go.astype(np.float64), (case.n,)).copy()
    if reduction == "mean":
        g /= div
    lw = 2 * tl + 1
    e_exp = 2 * e_loss + ROUNDINGS_PER_FRAME * eps * (lw + 2) * (2 * mag + 1)
    grad_tol = np.abs(g)[None, :, None] * (
        e_exp[None, :, None] + ROUNDINGS_PER_FRAME * eps * (np.exp(lp) + 1)
    )
    return loss_tol, grad_tol


def assert_within(got: np.ndarray, want: np.ndarray, tol: Any, what: str) -> None:
    """|got - want| <= tol elementwise; infinities and NaNs must match exactly."""
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    assert got.shape == want.shape, f"{what}: shape {got.shape}, want {want.shape}"
    special = ~np.isfinite(want) | ~np.isfinite(got)
    same = (got == want) | (np.isnan(got) & np.isnan(want))
    with np.errstate(invalid="ignore"):
        err = np.where(special, 0.0, np.abs(got - want))
    tol = np.broadcast_to(tol, want.shape)
    bad = np.argwhere((special & ~same) | (err > tol))
    assert bad.size == 0, (
        f"{what}: {len(bad)} mismatches, first at {tuple(bad[0])}: got {got[tuple(bad[0])]!r}, "
        f"want {want[tuple(bad[0])]!r}, tol {tol[tuple(bad[0])]:.3g}"
    )


def reference(case: Case, dtype: Any, reduction: str, zi: bool, go: np.ndarray) -> tuple:
    """(loss, gradient, per-sample losses) from the float64 reference."""
    args = (case.lp(dtype), case.padded(), np.array(case.il), case.tl)
    kw = {"blank": case.blank, "zero_infinity": zi}
    loss = ref.ctc_loss_forward(*args, reduction=reduction, **kw)
    grad = ref.ctc_loss_backward(go, *args, reduction=reduction, **kw)
    none = ref.ctc_loss_forward(*args, reduction="none", blank=case.blank)
    return loss, grad, none


GO = st.floats(-4, 4, width=16)  # exact in every dtype: the scale is not rounded


@HYPO
@given(
    case=cases(),
    dtype=st.sampled_from(DTYPES),
    reduction=st.sampled_from(REDUCTIONS),
    zero_inf=st.booleans(),
    concat=st.booleans(),
    go=GO,
)
@example(case=REPEATS, dtype=F32, reduction="none", zero_inf=False, concat=False, go=1.0)
@example(case=EMPTY, dtype=F64, reduction="mean", zero_inf=False, concat=True, go=1.0)
@example(case=ONE_FRAME, dtype=F32, reduction="sum", zero_inf=False, concat=True, go=-2.0)
@example(case=IMPOSSIBLE, dtype=F32, reduction="none", zero_inf=False, concat=False, go=1.0)
@example(case=IMPOSSIBLE, dtype=F64, reduction="none", zero_inf=True, concat=True, go=0.5)
@example(case=IMPOSSIBLE, dtype=F32, reduction="mean", zero_inf=True, concat=False, go=1.0)
@example(case=UNNORMALIZED, dtype=F64, reduction="sum", zero_inf=False, concat=False, go=1.5)
@example(case=UNNORMALIZED, dtype=F32, reduction="mean", zero_inf=False, concat=True, go=3.0)
def test_loss_and_gradient_match_reference_and_torch(
    backend: str,
    case: Case,
    dtype: Any,
    reduction: str,
    zero_inf: bool,
    concat: bool,
    go: float,
) -> None:
    g = grad_out_for(reduction, case.n, go)
    tg = case.flat() if concat else case.padded(extra=1)
    loss, grad = lib(backend, case, dtype, tg, reduction, zero_inf, g)
    assert loss.dtype == dtype and grad.dtype == dtype
    assert grad.shape == (case.t, case.n, case.c)
    want, want_g, none = reference(case, dtype, reduction, zero_inf, g)
    loss_tol, grad_tol = bounds(case, dtype, reduction, g, none)
    assert_within(loss, want, loss_tol, "loss vs reference")
    assert_within(grad, want_g, grad_tol, "grad vs reference")

    # No alignment: inf and NaN rows over the sample's frames, or exactly 0 with
    # zero_infinity (loss and gradient); frames past the input length are always 0.
    impossible = np.isinf(none)
    frames = np.arange(case.t)[:, None] < np.array(case.il)[None, :]
    if reduction == "none":
        assert (loss[impossible] == (0 if zero_inf else np.inf)).all()
    for i in np.flatnonzero(impossible):
        if zero_inf:
            assert (grad[:, i] == 0).all()
        else:
            assert np.isnan(grad[frames[:, i], i]).all()
    assert (grad[~frames] == 0).all()

    torch_result = torch_ctc(case, dtype, reduction, zero_inf, g)
    if torch_result is not None:
        assert_within(loss, torch_result[0], loss_tol, "loss vs torch")
        assert_within(grad, torch_result[1], grad_tol, "grad vs torch")


@HYPO
@given(
    case=cases(),
    dtype=st.sampled_from(DTYPES),
    reduction=st.sampled_from(REDUCTIONS),
    zero_inf=st.booleans(),
    extra=st.integers(0, 2),
    fill=st.sampled_from(["blank", -1, 7, 2**40]),
)
@example(case=EMPTY, dtype=F32, reduction="none", zero_inf=False, extra=0, fill="blank")
@example(case=IMPOSSIBLE, dtype=F64, reduction="mean", zero_inf=True, extra=2, fill=2**40)
def test_target_layout_padding_and_strides_do_not_matter(
    backend: str,
    case: Case,
    dtype: Any,
    reduction: str,
    zero_inf: bool,
    extra: int,
    fill: Any,
) -> None:
    # The same computation whatever the form of the arguments: bit for bit.
    g = grad_out_for(reduction, case.n, 1.0)

    def run(tg: np.ndarray, **kw: Any) -> tuple[np.ndarray, np.ndarray]:
        return lib(backend, case, dtype, tg, reduction, zero_inf, g, **kw)

    want = run(case.padded())
    pad = case.blank if fill == "blank" else fill  # padding is never read, nor checked
    forms = {
        "padded, wide, filled": run(case.padded(extra, pad)),
        "concatenated int32": run(case.flat()),
        "int32 lengths": run(case.padded(), lengths=(np.array(case.il, np.int32), case.tl)),
        "list lengths": run(case.padded(), lengths=(list(case.il), case.tl.tolist())),
    }
    # log_probs as a strided view: (N, T, C) memory transposed, every other class
    wide = np.repeat(case.lp(dtype).astype(dtype).transpose(1, 0, 2), 2, axis=2)
    view = to_backend(wide, backend).transpose(1, 0, 2)[:, :, ::2]
    forms["strided log_probs"] = run(case.padded(), lp=view)
    for name, (loss, grad) in forms.items():
        np.testing.assert_array_equal(loss, want[0], err_msg=f"loss, {name}")
        np.testing.assert_array_equal(grad, want[1], err_msg=f"grad, {name}")


@HYPO
@given(
    case=cases(),
    dtype=st.sampled_from(DTYPES),
    zero_inf=st.booleans(),
    perm_seed=st.integers(0, 2**16),
)
@example(case=IMPOSSIBLE, dtype=F32, zero_inf=False, perm_seed=1)
@example(case=ONE_FRAME, dtype=F64, zero_inf=True, perm_seed=2)
def test_batch_order_and_unbatched_calls_do_not_matter(
    backend: str, case: Case, dtype: Any, zero_inf: bool, perm_seed: int
) -> None:
    # Each sample is its own computation: permuting the batch permutes the losses and
    # the gradient's columns, and a sample alone (unbatched (T, C)) gives the same bits.
    g = np.linspace(1.0, 2.0, case.n)
    loss, grad = lib(backend, case, dtype, case.padded(), "none", zero_inf, g)
    perm = np.random.default_rng(perm_seed).permutation(case.n)
    shuffled = Case(
        t=case.t,
        c=case.c,
        blank=case.blank,
        il=tuple(case.il[i] for i in perm),
        targets=tuple(case.targets[i] for i in perm),
    )
    x = to_backend(case.lp(dtype)[:, perm].astype(dtype), backend)
    p_loss, p_grad = lib(
        backend, shuffled, dtype, shuffled.padded(), "none", zero_inf, g[perm], lp=x
    )
    np.testing.assert_array_equal(p_loss, loss[perm])
    np.testing.assert_array_equal(p_grad, grad[:, perm])

    lp = case.lp(dtype).astype(dtype)
    kw = {"blank": case.blank, "reduction": "none", "zero_infinity": zero_inf}
    for i in range(case.n):
        args = (to_backend(lp[:, i], backend), case.padded()[i], case.il[i], int(case.tl[i]))
        one = call(cudnnlite.ctc_loss, *args, **kw)
        one_g = call(cudnnlite.ctc_loss_backward, g[i].astype(dtype), *args, **kw)
        assert one.shape == () and one_g.shape == (case.t, case.c)
        np.testing.assert_array_equal(one, loss[i], err_msg=f"unbatched loss {i}")
        np.testing.assert_array_equal(one_g, grad[:, i], err_msg=f"unbatched grad {i}")


@HYPO
@given(
    case=cases(),
    dtype=st.sampled_from(DTYPES),
    zero_inf=st.booleans(),
    go=GO,
)
@example(case=EMPTY, dtype=F32, zero_inf=False, go=1.0)
@example(case=IMPOSSIBLE, dtype=F64, zero_inf=False, go=2.0)
@example(case=IMPOSSIBLE, dtype=F32, zero_inf=True, go=-1.0)
def test_sum_and_mean_are_reductions_of_none(
    backend: str, case: Case, dtype: Any, zero_inf: bool, go: float
) -> None:
    eps = EPS[np.dtype(dtype)]
    div = np.maximum(case.tl, 1)  # PyTorch's mean: each loss over its clamped length
    tg = case.padded()
    ones = np.ones(case.n)
    none, none_g = lib(backend, case, dtype, tg, "none", zero_inf, go * ones)
    total, sum_g = lib(backend, case, dtype, tg, "sum", zero_inf, np.array(go))
    mean, mean_g = lib(backend, case, dtype, tg, "mean", zero_inf, np.array(go))
    per = none.astype(np.float64)
    finite = np.where(np.isfinite(per), np.abs(per), 0.0)
    # one rounding of the running sum per sample (and the division and the mean's)
    assert_within(total, per.sum(), case.n * eps * finite.sum(), "sum")
    assert_within(mean, (per / div).mean(), (case.n + 2) * eps * (finite / div).sum(), "mean")
    # the same scale per sample: sum's gradient is none's with grad_out broadcast, bit
    # for bit; mean's scale go / (N * div) is rounded once either way (an ulp of each value)
    np.testing.assert_array_equal(sum_g, none_g)
    _, want_g = lib(backend, case, dtype, tg, "none", zero_inf, go / (case.n * div))
    assert_within(mean_g, want_g, 4 * eps * np.abs(want_g.astype(np.float64)), "mean grad")


@HYPO
@given(
    case=cases(nonempty=True),
    concat=st.booleans(),
    pick=st.integers(0, 2**16),
    bad=st.sampled_from(["blank", "C", -1, 2**32, -(2**31)]),
)
@example(case=REPEATS, concat=False, pick=4, bad=-1)
@example(case=ONE_FRAME, concat=True, pick=0, bad=2**32)
def test_a_used_label_out_of_range_or_blank_is_refused(
    backend: str, case: Case, concat: bool, pick: int, bad: Any
) -> None:
    # test_ctc covers the padded blank and >= C: here any used position, both layouts,
    # negative labels, and values that would wrap into [0, C) as int32 (2^32 + k).
    if concat:
        tg = case.flat().astype(np.int64)
        used = np.arange(tg.size)
    else:
        tg = case.padded()
        used = np.flatnonzero(np.arange(tg.shape[1]) < case.tl[:, None])  # flat indices
    where = int(used[pick % len(used)])
    value = {"blank": case.blank, "C": case.c}.get(bad, bad)
    if bad == 2**32:
        value = 2**32 + int(tg.reshape(-1)[where])
    tg.reshape(-1)[where] = value
    x = to_backend(case.lp(np.float32).astype(np.float32), backend)
    args = (x, tg, np.array(case.il), case.tl)
    before = snapshot(args)
    with pytest.raises(BadParamError, match=f"targets: label {value} at index"):
        cudnnlite.ctc_loss(*args, blank=case.blank)
    with pytest.raises(BadParamError, match="targets"):
        cudnnlite.ctc_loss_backward(1.0, *args, blank=case.blank)
    for a, b in zip(snapshot(args), before, strict=True):
        np.testing.assert_array_equal(a, b)
