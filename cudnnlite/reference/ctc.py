"""NumPy float64 reference of the CTC loss and its gradient, with PyTorch's conventions
(``torch.nn.functional.ctc_loss``): straightforward loops, readable rather than fast.

Per sample with frames lp[t, c] (t < input_length) and target y (length S), the extended
sequence is l' = (blank, y1, blank, ..., yS, blank), L = 2S + 1, and

- alpha[t, s] = log sum over paths of frames 0..t ending at position s (s may advance by
  1, or by 2 onto a label that differs from l'[s-2]); nll = -log(exp(alpha[T-1, L-1]) +
  exp(alpha[T-1, L-2])), inf when no alignment exists;
- beta[t, s] is the same from the end, including frame t;
- the gradient w.r.t. lp follows PyTorch's convention: for t < input_length,
  ``g * (exp(lp[t, c]) - exp(lse_{s: l'[s] = c}(alpha[t, s] + beta[t, s]) + nll - lp[t, c]))``;
  the exp(lp) term is what log_softmax's backward removes again, so the gradient w.r.t. the
  logits of a log_softmax is exact, while for unnormalized log_probs this is not the plain
  derivative of the loss (PyTorch gives the same). Rows t >= input_length are 0; an
  infinite nll gives NaN rows, or 0 with zero_infinity.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

NEG_INF = -np.inf


def _lse(*vals: float) -> float:
    m = max(vals)
    if m == NEG_INF:
        return NEG_INF
    return m + np.log(sum(np.exp(v - m) for v in vals))


def extended_labels(target: Sequence[int], blank: int) -> list[int]:
    """(blank, y1, blank, y2, ..., yS, blank)."""
    ext = [blank]
    for y in target:
        ext += [int(y), blank]
    return ext


def _skip(ext: list[int], s: int, blank: int) -> bool:
    return s >= 2 and ext[s] != blank and ext[s] != ext[s - 2]


def ctc_alpha_beta(lp: np.ndarray, target: Sequence[int], blank: int = 0) -> tuple:
    """(alpha, beta, nll) of one sample: lp (T, C) holds only its input_length frames."""
    lp = np.asarray(lp, np.float64)
    ext = extended_labels(target, blank)
    n_t, n_s = lp.shape[0], len(ext)
    alpha = np.full((n_t, n_s), NEG_INF)
    beta = np.full((n_t, n_s), NEG_INF)
    if n_t == 0:
        return alpha, beta, 0.0 if n_s == 1 else np.inf
    for s in range(min(2, n_s)):
        alpha[0, s] = lp[0, ext[s]]
    for t in range(1, n_t):
        for s in range(n_s):
            terms = [alpha[t - 1, s]]
            if s >= 1:
                terms.append(alpha[t - 1, s - 1])
            if _skip(ext, s, blank):
                terms.append(alpha[t - 1, s - 2])
            alpha[t, s] = _lse(*terms) + lp[t, ext[s]]
    for s in range(max(0, n_s - 2), n_s):
        beta[n_t - 1, s] = lp[n_t - 1, ext[s]]
    for t in range(n_t - 2, -1, -1):
        for s in range(n_s):
            terms = [beta[t + 1, s]]
            if s + 1 < n_s:
                terms.append(beta[t + 1, s + 1])
            if s + 2 < n_s and _skip(ext, s + 2, blank):
                terms.append(beta[t + 1, s + 2])
            beta[t, s] = _lse(*terms) + lp[t, ext[s]]
    nll = -_lse(*alpha[n_t - 1, max(0, n_s - 2) :])
    return alpha, beta, nll


def _samples(
    log_probs: Any, targets: Any, input_lengths: Any, target_lengths: Any
) -> tuple[np.ndarray, list[list[int]], np.ndarray, bool]:
    """(lp (T, N, C) float64, the N targets as lists, input lengths, batched)."""
    lp = np.asarray(log_probs, np.float64)
    batched = lp.ndim == 3
    if not batched:
        lp = lp[:, None, :]
    il = np.atleast_1d(np.asarray(input_lengths, np.int64)).reshape(-1)
    tl = np.atleast_1d(np.asarray(target_lengths, np.int64)).reshape(-1)
    tg = np.asarray(targets, np.int64)
    if tg.ndim == 2 or not batched:
        rows = tg.reshape(len(tl), -1)
        tgts = [rows[i, : tl[i]].tolist() for i in range(len(tl))]
    else:
        starts = np.concatenate([[0], np.cumsum(tl)])
        tgts = [tg[starts[i] : starts[i + 1]].tolist() for i in range(len(tl))]
    return lp, tgts, il, batched


def ctc_loss_forward(
    log_probs: Any,
    targets: Any,
    input_lengths: Any,
    target_lengths: Any,
    blank: int = 0,
    reduction: str = "mean",
    zero_infinity: bool = False,
) -> np.ndarray:
    """float64 CTC loss with torch.nn.functional.ctc_loss's arguments."""
    lp, tgts, il, batched = _samples(log_probs, targets, input_lengths, target_lengths)
    nll = np.array([ctc_alpha_beta(lp[: il[i], i], tgts[i], blank)[2] for i in range(len(il))])
    if zero_infinity:
        nll = np.where(nll == np.inf, 0.0, nll)
    if reduction == "none":
        return nll if batched else nll.reshape(())
    if reduction == "sum":
        return np.asarray(nll.sum())
    div = np.maximum([len(t) for t in tgts], 1)
    return np.asarray((nll / div).mean() if len(nll) else np.nan)


def ctc_loss_backward(
    grad_out: Any,
    log_probs: Any,
    targets: Any,
    input_lengths: Any,
    target_lengths: Any,
    blank: int = 0,
    reduction: str = "mean",
    zero_infinity: bool = False,
) -> np.ndarray:
    """float64 gradient w.r.t. log_probs with PyTorch's convention (module docstring)."""
    lp, tgts, il, batched = _samples(log_probs, targets, input_lengths, target_lengths)
    n = len(il)
    g = np.asarray(grad_out, np.float64)
    g = np.broadcast_to(g.reshape(-1) if g.ndim else g, (n,)).copy()
    if reduction == "mean":
        g /= np.maximum([len(t) for t in tgts], 1) * n
    grad = np.zeros_like(lp)
    for i in range(n):
        alpha, beta, nll = ctc_alpha_beta(lp[: il[i], i], tgts[i], blank)
        if zero_infinity and nll == np.inf:
            continue
        ext = extended_labels(tgts[i], blank)
        for t in range(il[i]):
            lcab = np.full(lp.shape[2], NEG_INF)
            for s, c in enumerate(ext):
                a, b = alpha[t, s], beta[t, s]
                # no path through (t, s) when either side has none, even if the other is
                # NaN (a NaN log-prob elsewhere): PyTorch's gradient stays finite there
                lcab[c] = _lse(lcab[c], NEG_INF if NEG_INF in (a, b) else a + b)
            with np.errstate(invalid="ignore"):
                grad[t, i] = (np.exp(lp[t, i]) - np.exp(lcab + nll - lp[t, i])) * g[i]
    return grad if batched else grad[:, 0]


def ctc_brute_force_nll(lp: np.ndarray, target: Sequence[int], blank: int = 0) -> float:
    """-log of the sum over every frame-wise path (C^T of them) that collapses to target
    (merge repeats, then drop blanks): the definition, for tiny T and C."""
    lp = np.asarray(lp, np.float64)
    n_t, c = lp.shape
    total = NEG_INF
    for idx in np.ndindex(*([c] * n_t)):
        collapsed = [k for j, k in enumerate(idx) if k != blank and (j == 0 or idx[j - 1] != k)]
        if collapsed == list(target):
            total = _lse(total, float(sum(lp[t, k] for t, k in enumerate(idx))))
    return -total


__all__ = [
    "ctc_alpha_beta",
    "ctc_brute_force_nll",
    "ctc_loss_backward",
    "ctc_loss_forward",
    "extended_labels",
]
