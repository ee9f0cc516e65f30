"""Scaled dot-product attention: ``scaled_dot_product_attention`` (PyTorch's signature and
semantics, plus cuDNN/FlashAttention's extras) and its backward.

A call normalizes q, k, v to 4-D (batch, heads, sequence, head dim) in the chosen layout
(BHSD as PyTorch, or BSHD as FlashAttention), builds an AttentionProblem, takes a plan
from the in-process cache (explicit ``algo`` → tuning DB → heuristics) and launches it.

Shapes as PyTorch: q (..., L, E), k (..., S, E), v (..., S, Ev) for BHSD, where "..." is
(batch..., heads) or fewer dims; the batch dims broadcast between q, k and v; k/v with one
head serve every query head (multi-query), and with ``enable_gqa`` hq may be any multiple
of hkv. BSHD takes (batch, S, heads, E) (or (S, heads, E)).

Deliberate differences from PyTorch (also in the README):
- ``attn_mask`` together with ``is_causal`` is allowed (both apply); PyTorch refuses it;
- dropout uses the library's Philox stream from ``seed`` (PyTorch's global generator has
  no equivalent); with ``seed=None`` a seed is drawn from NumPy's global generator, and the
  backward needs the seed, so pass one when training. ``seed`` may be a
  :class:`~cudnnlite.PhiloxState`: its device-side counter adds to ``offset``, read by the
  kernels at each launch, so a graph or launch template replaying a training step draws a
  new mask once the state is advanced (``state.advance(n)``, after the step's backward:
  the backward must see the forward's counter).

float64 inputs compute in double throughout (scores, softmax, accumulations); their lse
and the additive mask's gradient are float64 too, and the dropout scale is 1 / (1 - p)
in double (float32(1 / (1 - p)) for the other dtypes); the dropout mask is the same for a
seed whatever the dtype.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import dtypes
from ..dispatch.plans import get_plan
from ..dispatch.select import check_algo
from ..errors import BadParamError
from ..problems.attention import AttentionProblem
from ..runtime.backend import Backend
from ..runtime.graph import graph_safe, note_host_work
from ..runtime.select import backend_for
from ..runtime.streams import with_stream
from ..solvers.attention.common import (
    AttentionBwdTensors,
    AttentionTensors,
    Scalars,
    acc_numpy,
    data_ptr,
    same_strides,
)
from ._arrays import array_module, as_array, check_out, flag, float_dtype
from .dropout import stream

LAYOUTS = ("BHSD", "BSHD")
ALIGNS = ("top_left", "bottom_right")


@dataclass(frozen=True)
class _Shapes:
    """q, k, v brought to 4-D in the layout; ``out_shape`` is the user's output shape."""

    q: Any
    k: Any
    v: Any
    batch: tuple[int, ...]  # the (broadcast) batch dims, flattened into b
    out_shape: tuple[int, ...]
    lse_shape: tuple[int, ...]


def _check_layout(layout: Any) -> str:
    if layout not in LAYOUTS:
        raise BadParamError(f"layout: expected 'BHSD' or 'BSHD', got {layout!r}")
    return layout


def _split(name: str, a: Any, layout: str) -> tuple[tuple[int, ...], int, int, int]:
    """(batch dims, heads, seq, head dim) of an operand."""
    shape = tuple(a.shape)
    if layout == "BHSD":
        if len(shape) < 2:
            raise BadParamError(f"{name}: expected at least 2 dims (..., L, E), got {shape}")
        heads = shape[-3] if len(shape) >= 3 else 1
        return shape[:-3], heads, shape[-2], shape[-1]
    if len(shape) not in (3, 4):
        raise BadParamError(
            f"{name}: BSHD expects (batch, S, heads, E) or (S, heads, E), got {shape}"
        )
    return shape[:-3], shape[-2], shape[-3], shape[-1]


def _broadcast_batch(shapes: dict[str, tuple[int, ...]]) -> tuple[int, ...]:
    try:
        return tuple(np.broadcast_shapes(*shapes.values()))
    except ValueError:
        raise BadParamError(
            "q, k, v: batch dims do not broadcast: "
            + ", ".join(f"{n} {s}" for n, s in shapes.items())
        ) from None


def _to_4d(a: Any, batch: tuple[int, ...], heads: int, seq: int, dim: int, layout: str) -> Any:
    """(b, h, s, d) or (b, s, h, d) with the batch dims broadcast and flattened into b."""
    inner = (heads, seq, dim) if layout == "BHSD" else (seq, heads, dim)
    if a.ndim < 3:  # (L, E): one head
        a = a.reshape((1, seq, dim))
    if tuple(a.shape) != batch + inner:  # batch dims, or q's single head, broadcast
        a = array_module(a).broadcast_to(a, batch + inner)
    return a.reshape((math.prod(batch), *inner))


def _shapes(q: Any, k: Any, v: Any, layout: str, enable_gqa: bool) -> _Shapes:
    (bq, hq, sq, d), (bk, hk, skv, dk), (bv, hv, sv, dv) = (
        _split(n, a, layout) for n, a in (("q", q), ("k", k), ("v", v))
    )
    if dk != d:
        raise BadParamError(f"k: head dim {dk} differs from q's {d}")
    if sv != skv:
        raise BadParamError(f"v: sequence length {sv} differs from k's {skv}")
    if hv != hk:
        raise BadParamError(f"v: {hv} heads differ from k's {hk}")
    if hq == 1 and hk > 1:  # one query head broadcast over the key/value heads (matmul's rule)
        hq = hk
    if hk != hq and hk != 1 and not (enable_gqa and hk > 0 and hq % hk == 0):
        want = (
            "a divisor of"
            if enable_gqa
            else "equal to (or 1, or enable_gqa=True with a divisor of)"
        )
        raise BadParamError(f"k, v: {hk} heads; expected {want} q's {hq} heads")
    if hk == 0 and hq != 0:
        raise BadParamError(f"k, v: 0 heads for q's {hq} heads")
    batch = _broadcast_batch({"q": bq, "k": bk, "v": bv})
    if layout == "BHSD":
        headed = max(q.ndim, k.ndim, v.ndim) >= 3
        out_shape = (*batch, hq, sq, dv) if headed else (sq, dv)
        lse_shape = (*batch, hq, sq) if headed else (sq,)
    else:
        out_shape = (*batch, sq, hq, dv)
        lse_shape = (*batch, hq, sq)
    return _Shapes(
        _to_4d(q, batch, hq, sq, d, layout),
        _to_4d(k, batch, hk, skv, d, layout),
        _to_4d(v, batch, hk, skv, dv, layout),
        batch,
        out_shape,
        lse_shape,
    )


def _aligned(a: Any, align_bytes: int) -> Any:
    """``a`` if the kernels can read it as it is (head dim contiguous, every stride and the
    base address multiples of the vector width), else a contiguous copy."""
    outer = zip(a.strides[:-1], a.shape[:-1], strict=True)
    ok = a.strides[-1] == a.itemsize and all(s % align_bytes == 0 for s, n in outer if n > 1)
    if ok and data_ptr(a) % align_bytes == 0:
        return a
    return _packed(a)


def _packed(a: Any) -> Any:
    """``a`` C-contiguous from a 16-byte aligned address (the kernels' vector loads), as it
    is or as a fresh copy (``ascontiguousarray`` keeps a contiguous view at an odd offset)."""
    if a.flags.c_contiguous and data_ptr(a) % 16 == 0:
        return a
    note_host_work("attention: an aligned, contiguous copy of an operand")
    copy = array_module(a).empty(a.shape, dtype=a.dtype)
    copy[...] = a
    return copy


def _mask(
    attn_mask: Any, dtype: Any, shapes: _Shapes, hq: int, sq: int, skv: int
) -> tuple[Any, str]:
    """The mask as the kernels read it, 4-D (b, hq, sq, skv) with 0 strides where it
    broadcasts (bool as uint8), and its kind."""
    if attn_mask is None:
        return None, "none"
    m = as_array("attn_mask", attn_mask)
    if m.dtype == np.bool_:
        kind = "bool"
    elif dtypes.lookup(m.dtype) is not None or np.dtype(m.dtype).kind == "f":
        kind = "additive"
        if m.dtype != dtype:  # added in q's dtype, as PyTorch's kernels do
            note_host_work("attention: the additive mask converted to q's dtype")
            m = m.astype(dtype)
    else:
        raise BadParamError(f"attn_mask: expected a bool or floating-point array, got {m.dtype}")
    # PyTorch broadcasts the mask against (batch..., heads, L, S) of the BHSD output.
    full = (*shapes.batch, hq, sq, skv) if len(shapes.out_shape) > 2 else (sq, skv)
    xp = array_module(m)
    try:
        view = xp.broadcast_to(m, full)
    except ValueError:
        raise BadParamError(
            f"attn_mask: shape {tuple(m.shape)} does not broadcast to {full} "
            "(batch..., heads, L, S)"
        ) from None
    if kind == "bool":
        view = view.view(np.uint8)
    b = math.prod(shapes.batch)
    flat = view.reshape(b, hq, sq, skv)
    if not xp.may_share_memory(flat, m):  # (broadcast batch dims that merge only by copy)
        note_host_work("attention: a copy of the broadcast mask")
    return flat, kind


def _lengths(name: str, lengths: Any, b: int, limit: int, xp: Any) -> Any:
    if lengths is None:
        return None
    a = np.asarray(lengths) if isinstance(lengths, (list, tuple)) else as_array(name, lengths)
    if a.ndim != 1 or a.shape[0] != b or a.dtype.kind not in "iu":
        raise BadParamError(
            f"{name}: expected {b} integers (one per batch entry), got "
            f"shape {tuple(a.shape)} dtype {a.dtype}"
        )
    # validated on the host: a replay of launches would skip the check (and a conversion)
    note_host_work(f"attention: {name} read and checked on the host")
    host = np.asarray(a.get() if hasattr(a, "get") else a)
    if host.size and (host.min() < 0 or host.max() > limit):
        raise BadParamError(f"{name}: lengths must be in [0, {limit}], got {host.tolist()}")
    if a.dtype == np.int32 and array_module(a) is xp:
        return xp.ascontiguousarray(a)  # already where the kernels read it
    return xp.asarray(host.astype(np.int32))


def _window(window: Any) -> tuple[int, int] | None:
    if window is None:
        return None
    try:
        left, right = window
    except (TypeError, ValueError):
        raise BadParamError(f"window: expected (left, right) integers, got {window!r}") from None
    if any(isinstance(w, bool) or not isinstance(w, (int, np.integer)) for w in (left, right)):
        raise BadParamError(f"window: expected (left, right) integers, got {window!r}")
    left, right = int(left), int(right)
    if left < -1 or right < -1:
        raise BadParamError(f"window: entries must be >= 0, or -1 for unbounded, got {window!r}")
    # a bound past any sequence (the kernels take 32-bit ones) is no bound: the same keys
    big = 2**31 - 1
    return min(left, big), min(right, big)


def _scalars(dropout_p: Any, scale: Any, seed: Any, offset: Any, d: int, backend: Backend,
             q: Any) -> Scalars:  # fmt: skip
    try:
        p = float(dropout_p)
    except (TypeError, ValueError):
        raise BadParamError(f"dropout_p: expected a float in [0, 1), got {dropout_p!r}") from None
    if not 0.0 <= p < 1.0:
        raise BadParamError(f"dropout_p: expected a float in [0, 1), got {dropout_p!r}")
    if scale is None:
        sc = 1.0 / math.sqrt(d) if d else 1.0
    else:
        try:
            if isinstance(scale, (bool, np.bool_)):
                raise TypeError
            sc = float(scale)
        except (TypeError, ValueError):
            raise BadParamError(f"scale: expected a float or None, got {scale!r}") from None
        if not math.isfinite(sc):
            raise BadParamError(f"scale: expected a finite float, got {scale!r}")
        # float32 arithmetic but for float64: the kernels take scale * log2(e) in float32
        if q.dtype != np.float64 and abs(sc) * math.log2(math.e) > float(np.finfo(np.float32).max):
            raise BadParamError(f"scale: expected a float finite in float32 (times log2(e)) for "
                                f"{q.dtype} inputs, got {scale!r}")  # fmt: skip
    if seed is None:
        seed = int(np.random.randint(0, 2**63, dtype=np.int64)) if p > 0 else 0
    # a PhiloxState's counter adds to offset, read on the device
    seed, offset, counter = stream(seed, offset, q, backend)
    return Scalars(scale=sc, dropout_p=p, seed=seed, offset=offset, counter=counter)


@dataclass
class _Call:
    backend: Backend
    problem: AttentionProblem
    shapes: _Shapes
    mask: Any
    lengths_q: Any
    lengths_kv: Any
    scalars: Scalars
    dtype: Any


def _make_call(
    q: Any,
    k: Any,
    v: Any,
    attn_mask: Any,
    dropout_p: Any,
    is_causal: Any,
    scale: Any,
    enable_gqa: Any,
    layout: Any,
    causal_align: Any,
    window: Any,
    seed: Any,
    offset: Any,
    lengths_q: Any,
    lengths_kv: Any,
    direction: str,
    extra: dict[str, Any],
) -> _Call:
    arrays = {"q": q, "k": k, "v": v, "attn_mask": attn_mask, **extra}
    arrays = {n: a for n, a in arrays.items() if not isinstance(a, (list, tuple))}
    backend = backend_for(*arrays.values(), names=tuple(arrays))
    q, k, v = as_array("q", q), as_array("k", k), as_array("v", v)
    float_dtype("q", q)
    for name, a in (("k", k), ("v", v)):
        if a.dtype != q.dtype:
            raise BadParamError(f"{name}: expected dtype {q.dtype} like q, got {a.dtype}")
    layout = _check_layout(layout)
    if causal_align not in ALIGNS:
        raise BadParamError(f"causal_align: expected one of {ALIGNS}, got {causal_align!r}")
    flag("is_causal", is_causal)
    shapes = _shapes(q, k, v, layout, flag("enable_gqa", enable_gqa))
    b, hq, sq, d = _dims(shapes.q, layout)
    _, hkv, skv, _ = _dims(shapes.k, layout)
    dv = shapes.v.shape[-1]
    mask, kind = _mask(attn_mask, q.dtype, shapes, hq, sq, skv)
    xp = backend.xp
    lq = _lengths("lengths_q", lengths_q, b, sq, xp)
    lkv = _lengths("lengths_kv", lengths_kv, b, skv, xp)
    if (lq is None) != (lkv is None):
        lq = lq if lq is not None else xp.full((b,), sq, dtype=np.int32)
        lkv = lkv if lkv is not None else xp.full((b,), skv, dtype=np.int32)
    scalars = _scalars(dropout_p, scale, seed, offset, d, backend, q)
    problem = AttentionProblem(
        b=b,
        hq=hq,
        hkv=hkv,
        sq=sq,
        skv=skv,
        d=d,
        dv=dv,
        layout=layout,
        dtype=float_dtype("q", q).short,
        direction=direction,
        causal=bool(is_causal),
        align=causal_align,
        window=_window(window),
        mask=kind,
        dropout=scalars.dropout_p > 0,
        varlen=lq is not None,
    )
    return _Call(backend, problem, shapes, mask, lq, lkv, scalars, q.dtype)


def _dims(a: Any, layout: str) -> tuple[int, int, int, int]:
    b, x, y, d = a.shape
    return (b, x, y, d) if layout == "BHSD" else (b, y, x, d)


def _operands(call: _Call, plan_problem: AttentionProblem) -> tuple[Any, Any, Any]:
    from ..solvers.attention.common import head_dim_align

    width = min(16, head_dim_align(plan_problem) * np.dtype(call.dtype).itemsize)
    return tuple(_aligned(a, width) for a in (call.shapes.q, call.shapes.k, call.shapes.v))


def _result(y: Any, out: Any, shape: tuple[int, ...]) -> Any:
    y = y.reshape(shape)
    if out is None:
        return y
    note_host_work("attention: a copy into a non-contiguous out=")
    out[...] = y
    return out


# ------------------------------------------------------------------ public API


@with_stream
def scaled_dot_product_attention(
    q: Any,
    k: Any,
    v: Any,
    attn_mask: Any = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: float | None = None,
    enable_gqa: bool = False,
    *,
    layout: str = "BHSD",
    causal_align: str = "top_left",
    window: tuple[int, int] | None = None,
    seed: Any = None,
    offset: int = 0,
    return_lse: bool = False,
    lengths_q: Any = None,
    lengths_kv: Any = None,
    algo: str = "auto",
    out: Any = None,
) -> Any:
    """``softmax(q k^T * scale + mask) v`` without materializing the score matrix (the
    flash solvers), with PyTorch's semantics (module docstring for the shapes).

    Args:
        q, k, v: float32, float16, bfloat16 or float64 arrays of one kind (NumPy →
            emulator, CuPy → GPU); fp32 accumulation and softmax (double for float64).
        attn_mask: None, a bool array (True = keep) or an additive array of q's dtype,
            broadcastable to (batch..., heads, L, S).
        dropout_p: dropout on the attention probabilities, in [0, 1).
        is_causal: keep keys j <= i (+ S - L with ``causal_align="bottom_right"``; with
            lengths, S and L are the batch entry's own lengths_kv[b] and lengths_q[b], as
            FlashAttention's varlen).
        scale: the softmax scale (default 1 / sqrt(E)).
        enable_gqa: allow hq to be any multiple of hkv (grouped-query attention).
        layout: "BHSD" (PyTorch) or "BSHD" (FlashAttention, (batch, S, heads, E)).
        causal_align: "top_left" (PyTorch) or "bottom_right" (FlashAttention, decoding).
        window: (left, right) sliding window around each query's aligned position, -1 for
            unbounded (FlashAttention's ``window_size``).
        seed, offset: the Philox stream of the dropout mask: an integer seed, or a
            :class:`~cudnnlite.PhiloxState` whose counter adds to offset (module docstring).
        return_lse: also return the logsumexp (float32, float64 for float64 inputs;
            (batch..., heads, L), natural log; -inf for rows that keep nothing), which the
            backward takes.
        lengths_q, lengths_kv: per-batch-entry lengths (padded varlen): keys at or past
            lengths_kv[b] are masked; query rows at or past lengths_q[b] give 0.
        algo: "auto" or a solver name (``cudnnlite.explain`` lists them).
        out: the output array.

    Returns:
        out, or (out, lse) with ``return_lse``.
    """
    call = _make_call(
        q,
        k,
        v,
        attn_mask,
        dropout_p,
        is_causal,
        scale,
        enable_gqa,
        layout,
        causal_align,
        window,
        seed,
        offset,
        lengths_q,
        lengths_kv,
        "fwd",
        {"out": out, "lengths_q": lengths_q, "lengths_kv": lengths_kv},
    )
    p = call.problem
    xp = call.backend.xp
    return_lse = flag("return_lse", return_lse)
    if out is not None:
        # shape, dtype, writable; any overlap with an input is refused below (check_out
        # would let out be an input itself: attention cannot run in place)
        check_out(out, call.shapes.out_shape, call.dtype, call.backend, {})
        for name, a in (("q", q), ("k", k), ("v", v), ("attn_mask", attn_mask)):
            if a is not None and array_module(out).may_share_memory(as_array(name, a), out):
                raise BadParamError(f"out: overlaps {name}; attention cannot run in place")
    direct = out is not None and out.flags.c_contiguous
    o = out.reshape(p.o_shape()) if direct else xp.empty(p.o_shape(), dtype=call.dtype)
    if p.empty:
        check_algo(algo, p.family)  # (no dispatch: the algo is checked all the same)
        note_host_work("attention: the result of an attention without work")
        o[...] = 0
        lse = xp.full(p.lse_shape(), -np.inf, dtype=acc_numpy(p))
    else:
        lse = xp.empty(p.lse_shape(), dtype=acc_numpy(p))  # every solver writes every row
        plan = get_plan(call.backend, p, algo)
        qq, kk, vv = _operands(call, p)
        plan.launch(
            AttentionTensors(qq, kk, vv, o, lse, call.mask, call.lengths_q, call.lengths_kv),
            call.scalars,
        )
    result = out if direct else _result(o, out, call.shapes.out_shape)
    return (result, lse.reshape(call.shapes.lse_shape)) if return_lse else result


@with_stream
def scaled_dot_product_attention_backward(
    dout: Any,
    q: Any,
    k: Any,
    v: Any,
    out: Any,
    lse: Any,
    attn_mask: Any = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: float | None = None,
    enable_gqa: bool = False,
    *,
    layout: str = "BHSD",
    causal_align: str = "top_left",
    window: tuple[int, int] | None = None,
    seed: Any = None,
    offset: int = 0,
    lengths_q: Any = None,
    lengths_kv: Any = None,
    mask_grad: bool = False,
    algo: str = "auto",
) -> tuple[Any, ...]:
    """The gradients of ``scaled_dot_product_attention`` given ``dout`` and the forward's
    ``out`` and ``lse`` (``return_lse=True``), with the forward's other arguments.

    Returns (dq, dk, dv) shaped like q, k, v (dk, dv summed over the query heads that share
    a key/value head and over broadcast batch dims), plus the additive mask's gradient
    (shaped and typed like attn_mask) with ``mask_grad=True``. With dropout, ``seed`` and
    ``offset`` must be the forward's.
    """
    if dropout_p and seed is None:
        raise BadParamError("seed: the backward of dropout needs the forward's seed")
    call = _make_call(
        q,
        k,
        v,
        attn_mask,
        dropout_p,
        is_causal,
        scale,
        enable_gqa,
        layout,
        causal_align,
        window,
        seed,
        offset,
        lengths_q,
        lengths_kv,
        "bwd",
        {"dout": dout, "out": out, "lse": lse},
    )
    if mask_grad and call.problem.mask != "additive":
        raise BadParamError("mask_grad: needs an additive (float) attn_mask")
    p = call.problem
    xp = call.backend.xp
    dout, o, lse = as_array("dout", dout), as_array("out", out), as_array("lse", lse)
    for name, a in (("dout", dout), ("out", o)):
        if tuple(a.shape) != call.shapes.out_shape or a.dtype != call.dtype:
            raise BadParamError(
                f"{name}: expected shape {call.shapes.out_shape} dtype "
                f"{np.dtype(call.dtype)}, got {tuple(a.shape)} {a.dtype}"
            )
    lse_dtype = acc_numpy(p)  # what the forward returned for this dtype
    if tuple(lse.shape) != call.shapes.lse_shape or lse.dtype != lse_dtype:
        raise BadParamError(
            f"lse: expected {lse_dtype} of shape {call.shapes.lse_shape}, got "
            f"{lse.dtype} {tuple(lse.shape)}"
        )
    # Every solver writes every element (its tests start from NaN): zeros only when
    # there is nothing to compute.
    alloc = xp.zeros if p.empty else xp.empty
    if p.empty:
        check_algo(algo, p.family)  # (no dispatch: the algo is checked all the same)
    dq = alloc(p.q_shape(), dtype=call.dtype)
    dk = alloc(p.k_shape(), dtype=call.dtype)
    dv = alloc(p.v_shape(), dtype=call.dtype)
    full = (p.b, p.hq, p.sq, p.skv)
    dmask = alloc(full, dtype=acc_numpy(p)) if p.mask == "additive" else None
    if not p.empty:
        qq, kk, vv = _operands(call, p)
        o4 = _packed(o.reshape(p.o_shape()))
        d4 = _packed(dout.reshape(p.o_shape()))
        tensors = AttentionBwdTensors(
            qq,
            kk,
            vv,
            o4,
            d4,
            _packed(lse.reshape(p.lse_shape())),
            dq,
            dk,
            dv,
            dmask,
            call.mask,
            call.lengths_q,
            call.lengths_kv,
        )
        # the kernels index q and dq (k and dk, v and dv) with one set of strides
        if not same_strides(qq, dq):
            tensors.q = _packed(qq)
        if not same_strides(kk, dk):
            tensors.k = _packed(kk)
        if not same_strides(vv, dv):
            tensors.v = _packed(vv)
        get_plan(call.backend, p, algo).launch(tensors, call.scalars)
    grads = [_fold(g, a, call, layout) for g, a in ((dq, q), (dk, k), (dv, v))]
    if mask_grad:
        grads.append(_fold_mask(dmask, attn_mask, call))
    return tuple(grads)


def _sum_to(g: Any, shape: tuple[int, ...]) -> Any:
    """The gradient of an operand of ``shape`` that was broadcast to ``g.shape``: summed
    over the leading dims it lacks and the dims where it has 1 (broadcasting's adjoint)."""
    lead = g.ndim - len(shape)
    axes = tuple(i for i, (n, m) in enumerate(zip(shape, g.shape[lead:], strict=True))
                 if n == 1 != m)  # fmt: skip
    if lead or axes:
        note_host_work("attention: a gradient summed over the dims its operand broadcast")
    if lead:
        g = g.sum(axis=tuple(range(lead)))
    return g.sum(axis=axes, keepdims=True) if axes else g


def _fold(g: Any, like: Any, call: _Call, layout: str) -> Any:
    """A gradient of the 4-D operand back to the user's operand: summed over the batch dims
    (and the single query head) it was broadcast along."""
    like = as_array("operand", like)
    g = g.reshape((*call.shapes.batch, *g.shape[1:]))
    shape = tuple(like.shape)
    if layout == "BHSD" and like.ndim < 3:
        shape = (1, *shape)  # (L, E): one head
    return _sum_to(g, shape).reshape(like.shape).astype(like.dtype, copy=False)


def _fold_mask(dmask: Any, attn_mask: Any, call: _Call) -> Any:
    """The additive mask's gradient, from (b, hq, sq, skv) to the mask's own shape."""
    m = as_array("attn_mask", attn_mask)
    note_host_work("attention: the mask's gradient folded to the mask's shape")
    g = dmask.reshape((*call.shapes.batch, *dmask.shape[1:]))
    return _sum_to(g, tuple(m.shape)).reshape(m.shape).astype(m.dtype)


def tuning_operands(
    problem: AttentionProblem, backend: Backend, random: Any, empty: Any
) -> tuple[Any, Scalars]:
    """Random operands of ``problem`` for the tuner (the masks and lengths its key names)."""
    xp = backend.xp
    q = random(problem, backend, problem.q_shape(), 0)
    k = random(problem, backend, problem.k_shape(), 1)
    v = random(problem, backend, problem.v_shape(), 2)
    full = (problem.b, problem.hq, problem.sq, problem.skv)
    mask = None
    if problem.mask == "bool":
        mask = xp.ones(full, dtype=np.uint8)
    elif problem.mask == "additive":
        mask = empty(problem, backend, full)
        mask[...] = 0
    lq = lkv = None
    if problem.varlen:
        lq = xp.full((problem.b,), problem.sq, dtype=np.int32)
        lkv = xp.full((problem.b,), problem.skv, dtype=np.int32)
    scalars = Scalars(
        scale=1.0 / math.sqrt(problem.d), dropout_p=0.1 if problem.dropout else 0.0, seed=1
    )
    lse = xp.empty(problem.lse_shape(), dtype=acc_numpy(problem))
    o = empty(problem, backend, problem.o_shape())
    if problem.direction == "fwd":
        return AttentionTensors(q, k, v, o, lse, mask, lq, lkv), scalars
    o[...] = 0
    lse[...] = 0
    dout = random(problem, backend, problem.o_shape(), 3)
    dmask = xp.empty(full, dtype=acc_numpy(problem)) if problem.mask == "additive" else None
    tensors = AttentionBwdTensors(
        q,
        k,
        v,
        o,
        dout,
        lse,
        empty(problem, backend, problem.q_shape()),
        empty(problem, backend, problem.k_shape()),
        empty(problem, backend, problem.v_shape()),
        dmask,
        mask,
        lq,
        lkv,
    )
    return tensors, scalars


__all__ = ["scaled_dot_product_attention", "scaled_dot_product_attention_backward"]

# Kernel launches only once the arguments are checked (copies, folds and the host check of
# lengths reported): an emulator graph may replay them, and repeated calls (a decoding
# loop) replay their launch templates.
graph_safe(scaled_dot_product_attention, scaled_dot_product_attention_backward)
