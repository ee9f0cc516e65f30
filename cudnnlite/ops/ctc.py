"""CTC loss (connectionist temporal classification), forward and gradient, with
``torch.nn.functional.ctc_loss``'s arguments and semantics.

``ctc_loss(log_probs, targets, input_lengths, target_lengths, blank=0, reduction="mean",
zero_infinity=False)``: log_probs ``(T, N, C)`` (or unbatched ``(T, C)``), targets padded
``(N, S)`` or concatenated 1-D (``sum(target_lengths)`` labels), lengths as ints, sequences
or integer arrays. ``ctc_loss_backward(grad_out, ...)`` returns the gradient w.r.t.
log_probs with PyTorch's convention (see its docstring and :mod:`cudnnlite.reference.ctc`).

Kernels (``cuda_src/ctc/ctc.cu``, one module for every dtype): ``ctc_alpha<T>`` and
``ctc_beta<T>`` (a block per batch entry, threads over the extended label positions, a
barrier per frame; the (N, T, 2S+1) tables in a workspace of the accumulation type) and
``ctc_grad<T>`` (a block per (frame, batch entry), deterministic: no float atomics).
Arithmetic is in log space, float32 for float32/float16/bfloat16 (float16/bfloat16 results
are rounded once at the end) and float64 for float64 (tables, losses, reductions and the
gradient scale included).
Inputs of any strides are copied to C order first; targets and lengths may live on the
host or the device (they are moved to log_probs' kind, as PyTorch allows CPU targets).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import dtypes
from ..errors import BadParamError
from ..runtime.backend import Backend, Kernel
from ..runtime.kernel import ModuleSpec
from ..runtime.select import backend_for
from ..runtime.streams import with_stream
from ..runtime.variants import register
from ._arrays import array_module, as_array, flag, float_dtype
from ._kernels import LastLaunch

SOURCE = "ctc/ctc.cu"
REDUCTIONS = ("none", "sum", "mean")
_GRAD_BLOCK = 128  # ctc_grad's __launch_bounds__
_MAX_RECURSION_BLOCK = 256  # ctc_alpha / ctc_beta's __launch_bounds__

# cuda_src/ctc/ctc.cu: struct CtcParams.
_PARAMS_DTYPE = np.dtype(
    [
        ("t_max", "<i8"),
        ("n", "<i8"),
        ("c", "<i8"),
        ("lw", "<i8"),
        ("s_max", "<i8"),
        ("blank", "<i4"),
        ("zero_infinity", "<i4"),
    ],
    align=True,
)

_KINDS = ("ctc_alpha", "ctc_beta", "ctc_grad")


def module_spec() -> ModuleSpec:
    """Every CTC kernel of every storage type: one module (one compile)."""
    return ModuleSpec.make(
        SOURCE, [f"{k}<{dt.ctype}>" for dt in dtypes.FLOAT_TYPES for k in _KINDS]
    )


@register("ctc")
def module_specs() -> list[ModuleSpec]:
    return [module_spec()]


_KERNELS: dict[tuple, Kernel] = {}
_LOCK = threading.Lock()
_LAST = LastLaunch()


def _kernel(backend: Backend, kind: str, dt: dtypes.DType) -> Kernel:
    name = f"{kind}<{dt.ctype}>"
    key = (id(backend), backend.device_key(), name)
    k = _KERNELS.get(key)
    if k is None:
        with _LOCK:
            k = _KERNELS.get(key)
            if k is None:
                k = _KERNELS[key] = backend.kernel(module_spec(), name)
    _LAST.set(f"{kind}_{dt.short}")
    return k


def last_kernel_name() -> str | None:
    """Readable name of the last CTC kernel this thread launched (``ctc_grad_fp32``)."""
    return _LAST.get()


# ------------------------------------------------------------------ checks


@dataclass(frozen=True)
class _Problem:
    """A checked call: device arrays ready for the kernels, host lengths for the rest."""

    backend: Backend
    dt: dtypes.DType
    batched: bool
    lp: Any  # (T, N, C) C-contiguous
    targets: Any  # int32, flat
    offsets: Any  # int64 (N,): where each target starts in ``targets``
    in_len: Any  # int32 (N,) on the device
    tgt_len: Any  # int32 (N,) on the device
    tgt_len_host: np.ndarray  # int64 (N,)
    blank: int

    @property
    def acc(self) -> np.dtype:
        """The kernels' arithmetic type (cl::acc_t<T>): float64 for float64, else float32."""
        return np.dtype(np.float64 if self.dt.acc_ctype == "double" else np.float32)

    @property
    def shape(self) -> tuple[int, int, int]:
        return tuple(self.lp.shape)  # type: ignore[return-value]

    def params(self, zero_infinity: bool) -> np.void:
        t, n, c = self.shape
        s_max = int(self.tgt_len_host.max(initial=0))
        return np.array(
            (t, n, c, 2 * s_max + 1, max(s_max, 1), self.blank, int(zero_infinity)),
            dtype=_PARAMS_DTYPE,
        )[()]


def _to_host(a: Any) -> np.ndarray:
    return a if isinstance(a, np.ndarray) else np.asarray(a.get() if hasattr(a, "get") else a)


def _lengths(name: str, v: Any, n: int, batched: bool) -> np.ndarray:
    """Lengths as a host int64 (N,) array: ints, sequences of ints, or integer arrays."""
    if isinstance(v, bool):
        raise BadParamError(f"{name}: expected integer lengths, got {v!r}")
    if isinstance(v, (int, np.integer)):
        v = [v]
    if isinstance(v, (list, tuple)):
        if any(isinstance(x, bool) or not isinstance(x, (int, np.integer)) for x in v):
            raise BadParamError(f"{name}: expected a sequence of ints, got {v!r}")
        if any(not -(2**62) < int(x) < 2**62 for x in v):  # (no length is that long)
            raise BadParamError(f"{name}: lengths out of range, got {v!r}")
        arr = np.array([int(x) for x in v], np.int64).reshape(-1)
    else:
        a = _to_host(as_array(name, v))
        if a.dtype.kind not in "iu":
            raise BadParamError(f"{name}: expected an integer array, got dtype {a.dtype}")
        if a.ndim > 1:
            raise BadParamError(f"{name}: expected a 1-D array of {n} lengths, got {a.shape}")
        if a.size and a.dtype.kind == "u" and int(a.max()) >= 2**62:  # (not to wrap in int64)
            raise BadParamError(f"{name}: lengths out of range, got {a.tolist()!r}")
        arr = a.astype(np.int64).reshape(-1)
    if arr.shape != (n,):
        what = "one length (unbatched log_probs)" if not batched else f"{n} lengths (N = {n})"
        raise BadParamError(f"{name}: expected {what}, got {arr.size}")
    return arr


def _check_targets_values(xp: Any, tg: Any, used: Any, c: int, blank: int) -> None:
    """Every label a target uses must be in [0, C) and not the blank (one host round trip
    for device arrays). Padding beyond a target's length is never read."""
    bad = used & ((tg < 0) | (tg >= c) | (tg == blank))
    if not bool(bad.any()):
        return
    bad_h, tg_h = _to_host(bad), _to_host(tg)
    where = tuple(int(i) for i in np.argwhere(bad_h)[0])
    value = int(tg_h[where])
    why = "the blank label" if value == blank else f"out of range [0, {c})"
    raise BadParamError(
        f"targets: label {value} at index {where if len(where) > 1 else where[0]} is {why}; "
        f"targets hold the labels 0..{c - 1} other than blank = {blank}"
    )


def _problem(
    log_probs: Any, targets: Any, input_lengths: Any, target_lengths: Any, blank: Any
) -> _Problem:
    backend = backend_for(log_probs, names=("log_probs",))
    lp = as_array("log_probs", log_probs)
    dt = float_dtype("log_probs", lp)
    if lp.ndim not in (2, 3):
        raise BadParamError(
            f"log_probs: expected (T, N, C) or unbatched (T, C), got shape {tuple(lp.shape)}"
        )
    batched = lp.ndim == 3
    xp = array_module(lp)
    if not batched:
        lp = lp[:, None, :]
    t_max, n, c = (int(v) for v in lp.shape)
    if c < 1:
        raise BadParamError(f"log_probs: expected at least one class (C >= 1), got C = {c}")
    if isinstance(blank, bool) or not isinstance(blank, (int, np.integer)):
        raise BadParamError(f"blank: expected an int in [0, {c}), got {blank!r}")
    blank = int(blank)
    if not 0 <= blank < c:
        raise BadParamError(f"blank: expected a class index in [0, C = {c}), got {blank}")
    il = _lengths("input_lengths", input_lengths, n, batched)
    tl = _lengths("target_lengths", target_lengths, n, batched)
    for name, arr in (("input_lengths", il), ("target_lengths", tl)):
        if arr.size and arr.min() < 0:
            raise BadParamError(f"{name}: expected lengths >= 0, got {int(arr.min())}")
    if il.size and il.max() > t_max:
        raise BadParamError(
            f"input_lengths: expected lengths <= T = {t_max} (log_probs' first dimension), "
            f"got {int(il.max())}"
        )

    tg = as_array("targets", targets)
    if isinstance(tg, np.ndarray) and xp is not np:
        tg = xp.asarray(tg)
    elif not isinstance(tg, np.ndarray) and xp is np:
        tg = _to_host(tg)
    if tg.dtype.kind not in "iu":
        raise BadParamError(f"targets: expected an integer array, got dtype {tg.dtype}")
    if batched and tg.ndim == 2:
        if tg.shape[0] != n:
            raise BadParamError(
                f"targets: expected {n} rows (N = {n}) of padded targets, got shape {tg.shape}"
            )
        s = int(tg.shape[1])
        if tl.size and tl.max() > s:
            raise BadParamError(
                f"target_lengths: expected lengths <= S = {s} (targets' second dimension), "
                f"got {int(tl.max())}"
            )
        used = xp.arange(s)[None, :] < xp.asarray(tl)[:, None]
        offsets = np.arange(n, dtype=np.int64) * s
    elif tg.ndim == 1:
        if batched:
            total = int(tl.sum())
            if tg.shape[0] != total:
                raise BadParamError(
                    f"targets: concatenated targets must hold sum(target_lengths) = {total} "
                    f"labels, got {tg.shape[0]}"
                )
            used = xp.ones(tg.shape, bool)
            offsets = np.concatenate([[0], np.cumsum(tl)[:-1]]).astype(np.int64)
        else:
            if tl[0] > tg.shape[0]:
                raise BadParamError(
                    f"target_lengths: expected a length <= S = {tg.shape[0]} (targets' size), "
                    f"got {int(tl[0])}"
                )
            used = xp.arange(tg.shape[0]) < int(tl[0])
            offsets = np.zeros(1, np.int64)
    else:
        want = "(N, S) padded or 1-D concatenated" if batched else "1-D (S,) with unbatched"
        raise BadParamError(f"targets: expected {want} targets, got shape {tuple(tg.shape)}")
    if tg.size:
        _check_targets_values(xp, tg, used, c, blank)

    return _Problem(
        backend=backend,
        dt=dt,
        batched=batched,
        lp=lp if lp.flags.c_contiguous else xp.ascontiguousarray(lp),
        targets=xp.ascontiguousarray(tg.reshape(-1), dtype=np.int32)
        if tg.size
        else xp.zeros(1, np.int32),
        offsets=xp.asarray(offsets),
        in_len=xp.asarray(il.astype(np.int32)),
        tgt_len=xp.asarray(tl.astype(np.int32)),
        tgt_len_host=tl,
        blank=blank,
    )


def _reduction(reduction: Any) -> str:
    if reduction not in REDUCTIONS:
        raise BadParamError(f"reduction: expected one of {REDUCTIONS}, got {reduction!r}")
    return str(reduction)


# ------------------------------------------------------------------ launches


def _recursion_threads(prob: _Problem) -> int:
    """Threads of ctc_alpha / ctc_beta: the extended positions of the longest target,
    rounded up to a warp (a thread per position up to 256, then several per thread)."""
    lw = 2 * int(prob.tgt_len_host.max(initial=0)) + 1
    return min(_MAX_RECURSION_BLOCK, -(-lw // 32) * 32)


def _alpha(prob: _Problem, params: np.void) -> tuple[Any, Any]:
    """(alpha table, raw per-sample nll (N,)), both in the accumulation type."""
    xp = array_module(prob.lp)
    t, n, _ = prob.shape
    alpha = xp.empty(max(n * t * int(params["lw"]), 1), prob.acc)
    nll = xp.empty(n, prob.acc)
    if n:
        _kernel(prob.backend, "ctc_alpha", prob.dt)(
            n,
            _recursion_threads(prob),
            (prob.lp, prob.targets, prob.offsets, prob.in_len, prob.tgt_len, alpha, nll, params),
        )
    return alpha, nll


def _per_sample(prob: _Problem, nll: Any, zero_infinity: bool) -> Any:
    """Per-sample losses (accumulation type) with zero_infinity applied."""
    xp = array_module(nll)
    return xp.where(nll == np.inf, xp.zeros_like(nll), nll) if zero_infinity else nll


def _reduce(prob: _Problem, losses: Any, reduction: str) -> Any:
    xp = array_module(losses)
    if reduction == "none":
        out = losses if prob.batched else losses.reshape(())
    elif reduction == "sum":
        out = losses.sum()
    else:
        div = xp.asarray(np.maximum(prob.tgt_len_host, 1).astype(prob.acc))
        out = (losses / div).mean() if losses.size else xp.asarray(prob.acc.type(np.nan))
    # NumPy's sum / mean give a scalar, not an array: a 0-d array as documented (and as
    # PyTorch's 0-d tensor; a NumPy scalar has no __dlpack__)
    return xp.asarray(out.astype(prob.dt.numpy))


def _grad_scale(prob: _Problem, grad_out: Any, reduction: str) -> Any:
    """(N,) in the accumulation type: d(result)/d(nll[n]) times grad_out, as autograd
    composes it (a float64 grad_out reaches float64 kernels unrounded)."""
    xp = array_module(prob.lp)
    n = prob.shape[1]
    if isinstance(grad_out, bool):
        raise BadParamError(f"grad_out: expected a number or an array, got {grad_out!r}")
    if isinstance(grad_out, (int, float, np.integer, np.floating)):
        g = xp.asarray(prob.acc.type(grad_out))
    else:
        g = as_array("grad_out", grad_out)
        if isinstance(g, np.ndarray) and xp is not np:
            g = xp.asarray(g)
        elif not isinstance(g, np.ndarray) and xp is np:
            g = _to_host(g)
        if g.dtype.kind != "f" and dtypes.lookup(g.dtype) is None:
            raise BadParamError(f"grad_out: expected a float array, got dtype {g.dtype}")
        g = g.astype(prob.acc)
    want = (n,) if reduction == "none" and prob.batched else ()
    if tuple(g.shape) != want:
        what = f"shape {want} (the loss's shape with reduction={reduction!r})"
        raise BadParamError(f"grad_out: expected {what}, got {tuple(g.shape)}")
    g = xp.broadcast_to(g.reshape(-1) if g.ndim else g, (n,))
    if reduction == "mean":
        g = g / xp.asarray((np.maximum(prob.tgt_len_host, 1) * max(n, 1)).astype(prob.acc))
    return xp.ascontiguousarray(g, dtype=prob.acc)


# ------------------------------------------------------------------ public API


@with_stream
def ctc_loss(
    log_probs: Any,
    targets: Any,
    input_lengths: Any,
    target_lengths: Any,
    blank: int = 0,
    reduction: str = "mean",
    zero_infinity: bool = False,
) -> Any:
    """The CTC loss, as ``torch.nn.functional.ctc_loss``.

    Args:
        log_probs: (T, N, C) or unbatched (T, C), float32, float16, bfloat16 or float64;
            normally log_softmax outputs (not required: the loss is computed from them as
            given).
        targets: integer labels, padded (N, S) (entries past a target's length are ignored)
            or concatenated 1-D holding sum(target_lengths) labels; unbatched: (S,). Labels
            must be in [0, C) and differ from ``blank`` (BadParamError otherwise; PyTorch
            reads out-of-range labels unchecked). Host or device arrays.
        input_lengths: N frame counts in [0, T] (ints, a sequence, or an integer array).
        target_lengths: N target lengths >= 0 (<= S for padded targets).
        blank: the blank class, in [0, C).
        reduction: "none" (per-sample losses (N,), () unbatched), "sum", or "mean" (each
            loss divided by max(target length, 1), then the batch mean).
        zero_infinity: infinite losses (no alignment exists) become 0.

    Returns:
        The loss in log_probs' dtype, an array of log_probs' kind (0-d for sum/mean).
    """
    reduction = _reduction(reduction)
    zero_infinity = flag("zero_infinity", zero_infinity)
    prob = _problem(log_probs, targets, input_lengths, target_lengths, blank)
    _, nll = _alpha(prob, prob.params(zero_infinity))
    return _reduce(prob, _per_sample(prob, nll, zero_infinity), reduction)


@with_stream
def ctc_loss_backward(
    grad_out: Any,
    log_probs: Any,
    targets: Any,
    input_lengths: Any,
    target_lengths: Any,
    blank: int = 0,
    reduction: str = "mean",
    zero_infinity: bool = False,
) -> Any:
    """Gradient of :func:`ctc_loss` w.r.t. log_probs, exactly as PyTorch's autograd gives it.

    PyTorch's convention (kept here): for frames t < input_length[n],
    ``grad[t, n, c] = g[n] * (exp(lp[t, n, c]) - exp(log(sum over paths through (t, c))
    - log P(target) - lp[t, n, c]))``, i.e. the true derivative of the loss w.r.t. lp plus
    ``g[n] * exp(lp[t, n, c])``. When log_probs come from log_softmax that extra term
    vanishes in the composed gradient (the true derivative sums to -g[n] over c and
    log_softmax's backward removes exactly the softmax-weighted sum), so chaining this with
    log_softmax's backward gives the correct gradient w.r.t. the logits; for log_probs that
    are not normalized it is not the plain derivative (PyTorch's answer, matched on purpose).
    Frames t >= input_length[n] get 0. An infinite loss gives NaN rows (as PyTorch), or 0
    with zero_infinity.

    Args:
        grad_out: the loss's gradient: a number or 0-d array for "sum"/"mean", an (N,)
            array for "none" (0-d unbatched). g[n] is grad_out[n] for "none", grad_out for
            "sum", grad_out / (N * max(target_lengths[n], 1)) for "mean".
        log_probs, targets, input_lengths, target_lengths, blank, reduction, zero_infinity:
            as for :func:`ctc_loss` (the same values as the forward call).

    Returns:
        The gradient, log_probs' shape and dtype (C order).
    """
    reduction = _reduction(reduction)
    zero_infinity = flag("zero_infinity", zero_infinity)
    prob = _problem(log_probs, targets, input_lengths, target_lengths, blank)
    scale = _grad_scale(prob, grad_out, reduction)
    xp = array_module(prob.lp)
    t, n, c = prob.shape
    grad = xp.empty(prob.lp.shape, prob.lp.dtype)
    if grad.size:
        params = prob.params(zero_infinity)
        alpha, nll = _alpha(prob, params)
        s_max = int(params["s_max"])
        beta = xp.empty_like(alpha)
        nxt = xp.empty(n * s_max, np.int32)
        head = xp.empty(n * s_max, np.int32)
        common = (prob.lp, prob.targets, prob.offsets, prob.in_len, prob.tgt_len)
        _kernel(prob.backend, "ctc_beta", prob.dt)(
            n, _recursion_threads(prob), (*common, beta, nxt, head, params)
        )
        _kernel(prob.backend, "ctc_grad", prob.dt)(
            t * n, _GRAD_BLOCK, (*common, alpha, beta, nxt, head, nll, scale, grad, params)
        )
    return grad if prob.batched else grad[:, 0, :]


__all__ = ["REDUCTIONS", "ctc_loss", "ctc_loss_backward", "last_kernel_name", "module_specs"]
