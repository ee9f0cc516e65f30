"""NumPy float64 reference of scaled dot-product attention, forward and backward.

Semantics (``cudnnlite/problems/attention.py`` states them for every solver):

- scores ``s = scale * q k^T`` (scale defaults to ``1 / sqrt(d)``), plus an additive mask;
  a boolean mask keeps the True entries (PyTorch's convention);
- causal and the sliding window keep key ``j`` for query ``i`` when
  ``i + shift - left <= j <= i + shift + right`` (``-1`` = unbounded; causal is
  ``right = 0``), ``shift = 0`` top-left or ``skv - sq`` bottom-right, per batch entry's
  own lengths when ``lengths_q`` / ``lengths_kv`` are given;
- keys at or past ``lengths_kv[b]`` are masked; query rows at or past ``lengths_q[b]``
  give zero output and gradients (and ``lse = -inf``);
- ``lse`` is the natural-log logsumexp of each row's kept scores; a row with nothing kept
  gives zero output and zero gradients (PyTorch's answer), ``lse = -inf``;
- GQA: query head ``h`` reads key/value head ``h // (hq // hkv)``;
- dropout on the probabilities with the Philox stream of ``reference/dropout.py``: the
  element numbering is C order over ``(b, hq, sq, skv)``; kept probabilities are scaled by
  ``float32(1 / (1 - p))``, or by ``1 / (1 - p)`` unrounded with ``exact_dropout_scale``
  (what the library does for float64 inputs).

Arrays are BHSD (``layout="BSHD"`` swaps axes 1 and 2 of q, k, v, out and their
gradients); masks broadcast to ``(b, hq, sq, skv)``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .dropout import dropout_mask, dropout_scale


@dataclass(frozen=True)
class _Probs:
    p: np.ndarray  # softmax probabilities (b, hq, sq, skv), 0 where masked
    pd: np.ndarray  # after dropout (p * keep * scale)
    keep_scale: np.ndarray | float  # keep * scale, or 1.0 without dropout
    lse: np.ndarray  # (b, hq, sq), -inf for rows with nothing kept
    row_ok: np.ndarray  # (b, 1, sq, 1) query rows inside their sequence


def _bhsd(a: Any, layout: str) -> np.ndarray:
    a = np.asarray(a, dtype=np.float64)
    return a.swapaxes(1, 2) if layout == "BSHD" else a


def keep_mask(
    sq: int,
    skv: int,
    *,
    causal: bool = False,
    align: str = "top_left",
    window: tuple[int, int] | None = None,
    len_q: int | None = None,
    len_kv: int | None = None,
) -> np.ndarray:
    """(sq, skv) boolean: which keys each query may see from causal, window and lengths
    (without the explicit mask)."""
    lq = sq if len_q is None else len_q
    lkv = skv if len_kv is None else len_kv
    i = np.arange(sq)[:, None]
    j = np.arange(skv)[None, :]
    keep = (j < lkv) & (i < lq)
    shift = lkv - lq if align == "bottom_right" else 0
    left, right = window if window is not None else (-1, -1)
    if causal:
        right = 0 if right == -1 else min(right, 0)
    if right != -1:
        keep &= j <= i + shift + right
    if left != -1:
        keep &= j >= i + shift - left
    return keep


def _probs(q, k, attn_mask, dropout_p, causal, scale, layout, align, window, seed, offset,
           lengths_q, lengths_kv, exact_dropout_scale=False
           ) -> tuple[_Probs, np.ndarray, np.ndarray]:  # fmt: skip
    b, hq, sq, d = q.shape
    hkv, skv = k.shape[1], k.shape[2]
    group = hq // hkv
    kk = np.repeat(k, group, axis=1)
    scale = 1.0 / np.sqrt(d) if scale is None else float(scale)
    s = scale * np.einsum("bhid,bhjd->bhij", q, kk)
    keep = np.empty((b, 1, sq, skv), dtype=bool)
    for bi in range(b):
        keep[bi, 0] = keep_mask(
            sq, skv, causal=causal, align=align, window=window,
            len_q=None if lengths_q is None else int(lengths_q[bi]),
            len_kv=None if lengths_kv is None else int(lengths_kv[bi]),
        )  # fmt: skip
    if attn_mask is not None:
        m = np.asarray(attn_mask)
        if m.dtype == np.bool_:
            keep = keep & np.broadcast_to(m, (b, hq, sq, skv))
        else:
            s = s + np.broadcast_to(m.astype(np.float64), (b, hq, sq, skv))
    keep = np.broadcast_to(keep, s.shape)
    s = np.where(keep, s, -np.inf)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        smax = np.max(s, axis=-1, keepdims=True)
        finite = np.isfinite(smax)
        shifted = np.where(finite, s - np.where(finite, smax, 0.0), -np.inf)
        e = np.exp(shifted)
        total = e.sum(axis=-1, keepdims=True)
        lse = np.where(finite, smax + np.log(total), -np.inf)[..., 0]
        p = np.where(finite, e / np.where(total > 0, total, 1.0), 0.0)
    # NaN inputs: a NaN score makes its row NaN, as in PyTorch (max and exp carry it).
    nan_rows = np.isnan(s).any(axis=-1, keepdims=True)
    p = np.where(nan_rows, np.nan, p)
    lse = np.where(nan_rows[..., 0], np.nan, lse)
    row_ok = np.ones((b, 1, sq, 1), dtype=bool)
    if lengths_q is not None:
        row_ok = (np.arange(sq)[None, :] < np.asarray(lengths_q)[:, None])[:, None, :, None]
    keep_scale: np.ndarray | float = 1.0
    if dropout_p > 0:
        kept = dropout_mask((b, hq, sq, skv), dropout_p, seed, offset)
        factor = 1.0 / (1.0 - dropout_p) if exact_dropout_scale else dropout_scale(dropout_p)
        keep_scale = kept * factor
    pd = p * keep_scale
    return _Probs(p, pd, keep_scale, lse, row_ok), kk, s


def sdpa_forward(
    q: Any,
    k: Any,
    v: Any,
    attn_mask: Any = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: float | None = None,
    *,
    layout: str = "BHSD",
    causal_align: str = "top_left",
    window: tuple[int, int] | None = None,
    seed: int = 0,
    offset: int = 0,
    lengths_q: Any = None,
    lengths_kv: Any = None,
    exact_dropout_scale: bool = False,
) -> tuple[np.ndarray, np.ndarray]:
    """(out, lse): out in ``layout``, lse (b, hq, sq) float64 (natural log)."""
    q, k, v = (_bhsd(a, layout) for a in (q, k, v))
    pr, _, _ = _probs(q, k, attn_mask, dropout_p, is_causal, scale, layout, causal_align,
                      window, seed, offset, lengths_q, lengths_kv,
                      exact_dropout_scale)  # fmt: skip
    group = q.shape[1] // k.shape[1]
    out = np.einsum("bhij,bhjd->bhid", pr.pd, np.repeat(v, group, axis=1))
    out = np.where(pr.row_ok, out, 0.0)
    lse = np.where(pr.row_ok[:, :, :, 0], pr.lse, -np.inf)
    return (out.swapaxes(1, 2) if layout == "BSHD" else out), lse


def sdpa_backward(
    dout: Any,
    q: Any,
    k: Any,
    v: Any,
    attn_mask: Any = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: float | None = None,
    *,
    layout: str = "BHSD",
    causal_align: str = "top_left",
    window: tuple[int, int] | None = None,
    seed: int = 0,
    offset: int = 0,
    lengths_q: Any = None,
    lengths_kv: Any = None,
    exact_dropout_scale: bool = False,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]:
    """(dq, dk, dv, dmask): the gradients of ``sum(out * dout)``; dmask is the gradient
    of an additive mask at full (b, hq, sq, skv) shape (None for other masks)."""
    q, k, v, do = (_bhsd(a, layout) for a in (q, k, v, dout))
    b, hq, sq, d = q.shape
    hkv = k.shape[1]
    group = hq // hkv
    pr, kk, _ = _probs(q, k, attn_mask, dropout_p, is_causal, scale, layout, causal_align,
                       window, seed, offset, lengths_q, lengths_kv,
                       exact_dropout_scale)  # fmt: skip
    scale = 1.0 / np.sqrt(d) if scale is None else float(scale)
    do = np.where(pr.row_ok, do, 0.0)
    vv = np.repeat(v, group, axis=1)
    dv_full = np.einsum("bhij,bhid->bhjd", pr.pd, do)
    dpd = np.einsum("bhid,bhjd->bhij", do, vv)
    dp = dpd * pr.keep_scale
    ds = pr.p * (dp - np.sum(dp * pr.p, axis=-1, keepdims=True))
    dq = scale * np.einsum("bhij,bhjd->bhid", ds, kk)
    dk_full = scale * np.einsum("bhij,bhid->bhjd", ds, q)

    def fold(a: np.ndarray) -> np.ndarray:  # sum the query heads sharing a kv head
        return a.reshape(b, hkv, group, *a.shape[2:]).sum(axis=2)

    dk, dv = fold(dk_full), fold(dv_full)
    dmask = ds if attn_mask is not None and np.asarray(attn_mask).dtype != np.bool_ else None
    if layout == "BSHD":
        dq, dk, dv = (a.swapaxes(1, 2) for a in (dq, dk, dv))
    return dq, dk, dv, dmask
