"""NumPy float64 reference of recurrent networks (RNN tanh/ReLU, LSTM, GRU), forward and
backward, with the semantics of ``torch.nn.RNN`` / ``LSTM`` / ``GRU``.

- Weights use PyTorch's names: ``weight_ih_l{k}{sfx}`` (G*H, I_k), ``weight_hh_l{k}{sfx}``
  (G*H, Hout), ``bias_ih_l{k}{sfx}`` and ``bias_hh_l{k}{sfx}`` (G*H,), ``weight_hr_l{k}{sfx}``
  (Hout, H) with projections; ``sfx`` is ``""`` or ``"_reverse"``; absent biases are zero
  (a module built with ``bias=False``) and get no gradient. Gate order: LSTM i, f, g, o;
  GRU r, z, n with ``b_hn`` inside ``r * (h W_hn^T + b_hn)``.
- x is (T, B, I) (``batch_first``: (B, T, I)) or unbatched (T, I); hx is (L*D, B, Hout),
  cx (L*D, B, H), layer l direction d at index ``l*D + d``; y is (T, B, D*Hout) with the
  reverse direction in the second half.
- ``lengths`` (B,) in any order, as packed sequences: entry b has steps t < L_b only,
  y is 0 past them, the forward direction's final state is taken at t = L_b - 1 and the
  reverse direction starts there from hx; x past L_b is never read (NaN there reaches no
  result, as with PyTorch's packed sequences). Implemented by letting an inactive step
  carry the state through unchanged, on x with zeros past each length.
- Dropout between layers (training, p > 0): the input of layer k >= 1 is
  ``dropout_forward(y_{k-1}, p, seed, offset=k-1, dtype=dtype)`` on the time-major
  (T, B, D*Hout) output; ``dtype`` is the storage type of the kernels being modelled, which
  picks the dropout scale (float32's 1 / (1 - p) unless float64: see ``dropout_scale``).

The backward is hand-written back-propagation through time; the forward is recomputed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .dropout import dropout_backward, dropout_forward

GATES = {"rnn_tanh": 1, "rnn_relu": 1, "lstm": 4, "gru": 3}


@dataclass(frozen=True)
class _Dims:
    mode: str
    layers: int
    dirs: int
    hidden: int  # H: the cell size
    hout: int  # proj_size or H: what h and y carry
    steps: int
    batch: int
    unbatched: bool
    batch_first: bool


@dataclass(frozen=True)
class _Cell:
    """One layer and direction's weights, biases zero where absent."""

    w_ih: np.ndarray
    w_hh: np.ndarray
    b_ih: np.ndarray
    b_hh: np.ndarray
    w_hr: np.ndarray | None


@dataclass(frozen=True)
class _Prepared:
    dims: _Dims
    x: np.ndarray  # time-major (T, B, I)
    hx: np.ndarray  # (L*D, B, Hout)
    cx: np.ndarray | None  # (L*D, B, H), lstm only
    active: np.ndarray  # (T, B) bool: step t exists for entry b
    weights: dict[str, np.ndarray]
    drop: float  # the dropout probability actually applied between layers (0: none)
    seed: int
    dtype: Any = np.float32  # the modelled storage type (the dropout scale)


def _sigmoid(a: np.ndarray) -> np.ndarray:
    return np.exp(-np.logaddexp(0.0, -a))  # no overflow warning for large |a|


def _suffix(d: int) -> str:
    return "_reverse" if d else ""


def _expected_keys(dims: _Dims) -> list[str]:
    keys = []
    for k in range(dims.layers):
        for d in range(dims.dirs):
            names = ["weight_ih", "weight_hh", "bias_ih", "bias_hh"]
            names += ["weight_hr"] if dims.hout != dims.hidden else []
            keys += [f"{n}_l{k}{_suffix(d)}" for n in names]
    return keys


def _check_shape(name: str, a: np.ndarray, shape: tuple[int, ...]) -> None:
    if a.shape != shape:
        raise ValueError(f"{name}: expected shape {shape}, got {a.shape}")


def _prepare(x, hx, cx, weights, mode, num_layers, bidirectional, batch_first, proj_size,
             lengths, dropout, seed, training, dtype=np.float32) -> _Prepared:  # fmt: skip
    if mode not in GATES:
        raise ValueError(f"mode: expected one of {', '.join(GATES)}, got {mode!r}")
    if proj_size and mode != "lstm":
        raise ValueError(f"proj_size > 0 needs mode 'lstm', got {mode!r}")
    if num_layers < 1:
        raise ValueError(f"num_layers must be >= 1, got {num_layers}")
    if not 0.0 <= dropout < 1.0:
        raise ValueError(f"dropout must be in [0, 1), got {dropout}")
    w = {name: np.asarray(v, dtype=np.float64) for name, v in weights.items()}
    for base in ("weight_ih_l0", "weight_hh_l0") + (("weight_hr_l0",) if proj_size else ()):
        if base not in w:
            raise ValueError(f"weights: missing {base!r}")
    hidden = w["weight_hr_l0"].shape[1] if proj_size else w["weight_hh_l0"].shape[1]
    hout = proj_size or hidden
    if proj_size >= hidden:
        raise ValueError(f"proj_size ({proj_size}) must be smaller than hidden ({hidden})")

    x = np.asarray(x, dtype=np.float64)
    if x.ndim not in (2, 3):
        raise ValueError(f"x: expected 2 (unbatched) or 3 dimensions, got shape {x.shape}")
    unbatched = x.ndim == 2
    x = x[:, None, :] if unbatched else (x.swapaxes(0, 1) if batch_first else x)
    steps, batch, _ = x.shape
    dirs = 2 if bidirectional else 1
    dims = _Dims(mode, num_layers, dirs, hidden, hout, steps, batch, unbatched, batch_first)

    expected = _expected_keys(dims)
    unknown = sorted(set(w) - set(expected))
    if unknown:
        raise ValueError(f"weights: unexpected {', '.join(map(repr, unknown))}")
    gh = GATES[mode] * hidden
    for k in range(num_layers):
        i_k = x.shape[2] if k == 0 else dirs * hout
        for d in range(dirs):
            sfx = f"_l{k}{_suffix(d)}"
            shapes = {"weight_ih": (gh, i_k), "weight_hh": (gh, hout)}
            shapes |= {"bias_ih": (gh,), "bias_hh": (gh,)}
            shapes |= {"weight_hr": (hout, hidden)} if proj_size else {}
            for n, shape in shapes.items():
                if n + sfx in w:
                    _check_shape(n + sfx, w[n + sfx], shape)
                elif n.startswith("weight"):
                    raise ValueError(f"weights: missing {n + sfx!r}")

    hx, cx = (_state(s, name, (num_layers * dirs, hout if name == "hx" else hidden), dims)
              for s, name in ((hx, "hx"), (cx, "cx")))  # fmt: skip
    if mode != "lstm":
        cx = None
    active = np.ones((steps, batch), dtype=bool)
    if lengths is not None:
        lens = np.asarray(lengths).reshape(-1).astype(np.int64)
        if lens.shape != (batch,) or np.any(lens < 1) or np.any(lens > steps):
            raise ValueError(f"lengths: expected {batch} values in [1, {steps}], got {lengths}")
        active = np.arange(steps)[:, None] < lens[None, :]
        x = np.where(active[:, :, None], x, 0.0)  # (padding, NaN included, is never read)
    drop = float(dropout) if training and num_layers > 1 else 0.0
    return _Prepared(dims, x, hx, cx, active, w, drop, int(seed), dtype)


def _state(s: Any, name: str, shape: tuple[int, int], dims: _Dims) -> np.ndarray:
    """hx or cx as (L*D, B, size), zeros when None; unbatched states are (L*D, size)."""
    full = (shape[0], dims.batch, shape[1])
    if s is None:
        return np.zeros(full)
    s = np.asarray(s, dtype=np.float64)
    _check_shape(name, s, shape if dims.unbatched else full)
    return s[:, None, :] if dims.unbatched else s


def _cell(w: dict[str, np.ndarray], k: int, d: int, gh: int) -> _Cell:
    sfx = f"_l{k}{_suffix(d)}"
    return _Cell(
        w["weight_ih" + sfx],
        w["weight_hh" + sfx],
        w.get("bias_ih" + sfx, np.zeros(gh)),
        w.get("bias_hh" + sfx, np.zeros(gh)),
        w.get("weight_hr" + sfx),
    )


# ---- one step ------------------------------------------------------------------------


def _step_forward(mode: str, xw: np.ndarray, h: np.ndarray, c: np.ndarray | None, w: _Cell):
    """(h', c', saved) of one step; xw = x W_ih^T + b_ih already computed."""
    gh = h @ w.w_hh.T + w.b_hh
    if mode == "gru":
        r_a, z_a, n_x = np.split(xw, 3, axis=1)
        r_h, z_h, n_h = np.split(gh, 3, axis=1)
        r, z = _sigmoid(r_a + r_h), _sigmoid(z_a + z_h)
        n = np.tanh(n_x + r * n_h)
        return (1.0 - z) * n + z * h, None, (h, r, z, n, n_h)
    a = xw + gh
    if mode == "rnn_tanh":
        h_new = np.tanh(a)
        return h_new, None, (h, h_new)
    if mode == "rnn_relu":
        h_new = np.maximum(a, 0.0)
        return h_new, None, (h, h_new)
    i_a, f_a, g_a, o_a = np.split(a, 4, axis=1)
    i, f, g, o = _sigmoid(i_a), _sigmoid(f_a), np.tanh(g_a), _sigmoid(o_a)
    c_new = f * c + i * g
    tc = np.tanh(c_new)
    m = o * tc
    h_new = m if w.w_hr is None else m @ w.w_hr.T
    return h_new, c_new, (h, c, i, f, g, o, tc, m)


def _step_backward(mode: str, saved: tuple, dh: np.ndarray, dc: np.ndarray | None, w: _Cell,
                   grads: dict[str, np.ndarray]):  # fmt: skip
    """(d xw, dh_prev, dc_prev) of one step; adds the W_hh, b_hh, W_hr gradients to grads."""
    dc_prev = None
    if mode == "gru":
        h, r, z, n, n_h = saved
        dn_a = dh * (1.0 - z) * (1.0 - n * n)
        dr_a = dn_a * n_h * r * (1.0 - r)
        dz_a = dh * (h - n) * z * (1.0 - z)
        dxw = np.concatenate([dr_a, dz_a, dn_a], axis=1)
        dgh = np.concatenate([dr_a, dz_a, dn_a * r], axis=1)
        dh_prev = dh * z + dgh @ w.w_hh
    elif mode in ("rnn_tanh", "rnn_relu"):
        h, h_new = saved
        # relu: PyTorch's threshold_backward zeroes only where h <= 0; a NaN h passes dh
        dxw = dh * (1.0 - h_new * h_new) if mode == "rnn_tanh" else np.where(h_new <= 0, 0.0, dh)
        dgh = dxw
        dh_prev = dgh @ w.w_hh
    else:
        h, c, i, f, g, o, tc, m = saved
        dm = dh
        if w.w_hr is not None:
            grads["w_hr"] += dh.T @ m
            dm = dh @ w.w_hr
        dcn = dc + dm * o * (1.0 - tc * tc)
        dxw = np.concatenate(
            [dcn * g * i * (1.0 - i), dcn * c * f * (1.0 - f), dcn * i * (1.0 - g * g),
             dm * tc * o * (1.0 - o)],
            axis=1,
        )  # fmt: skip
        dgh = dxw
        dh_prev = dgh @ w.w_hh
        dc_prev = dcn * f
    grads["w_hh"] += dgh.T @ h
    grads["b_hh"] += dgh.sum(axis=0)
    return dxw, dh_prev, dc_prev


# ---- one layer and direction ---------------------------------------------------------


def _order(steps: int, reverse: bool) -> range:
    return range(steps - 1, -1, -1) if reverse else range(steps)


def _direction_forward(mode: str, x: np.ndarray, h: np.ndarray, c: np.ndarray | None,
                       w: _Cell, active: np.ndarray, reverse: bool):  # fmt: skip
    """(y (T, B, Hout), h_final, c_final, saved per step)."""
    xw = x @ w.w_ih.T + w.b_ih
    y = np.zeros((x.shape[0], x.shape[1], h.shape[1]))
    saved = [None] * x.shape[0]
    for t in _order(x.shape[0], reverse):
        h_new, c_new, saved[t] = _step_forward(mode, xw[t], h, c, w)
        act = active[t][:, None]
        y[t] = np.where(act, h_new, 0.0)
        h = np.where(act, h_new, h)  # an inactive step carries the state through
        if c is not None:
            c = np.where(act, c_new, c)
    return y, h, c, saved


def _direction_backward(mode: str, x: np.ndarray, saved: list, w: _Cell, active: np.ndarray,
                        reverse: bool, dy: np.ndarray, dh: np.ndarray,
                        dc: np.ndarray | None):  # fmt: skip
    """(dx, dh0, dc0, grads of w_ih, w_hh, b_ih, b_hh, w_hr)."""
    grads = {"w_hh": np.zeros_like(w.w_hh), "b_hh": np.zeros_like(w.b_hh)}
    if w.w_hr is not None:
        grads["w_hr"] = np.zeros_like(w.w_hr)
    dxw = np.zeros((x.shape[0], x.shape[1], w.w_ih.shape[0]))
    for t in reversed(_order(x.shape[0], reverse)):
        act = active[t][:, None]
        # Inactive rows get zero gradient into the step (so no weight gradient) and pass
        # the carried gradient through unchanged.
        dh_in = np.where(act, dh + dy[t], 0.0)
        dc_in = None if dc is None else np.where(act, dc, 0.0)
        dxw[t], dh_prev, dc_prev = _step_backward(mode, saved[t], dh_in, dc_in, w, grads)
        dh = np.where(act, dh_prev, dh)
        if dc is not None:
            dc = np.where(act, dc_prev, dc)
    flat_dxw = dxw.reshape(-1, dxw.shape[2])
    grads["w_ih"] = flat_dxw.T @ x.reshape(-1, x.shape[2])
    grads["b_ih"] = flat_dxw.sum(axis=0)
    return dxw @ w.w_ih, dh, dc, grads


# ---- the network ---------------------------------------------------------------------


def _network_forward(p: _Prepared):
    """(y time-major, hy, cy, per-layer inputs, per-(layer, direction) saved steps)."""
    dims = p.dims
    gh = GATES[dims.mode] * dims.hidden
    hy, cy = np.zeros_like(p.hx), None if p.cx is None else np.zeros_like(p.cx)
    inputs, saved = [], {}
    inp = p.x
    for k in range(dims.layers):
        if k > 0 and p.drop > 0:
            inp = dropout_forward(inp, p.drop, p.seed, offset=k - 1, dtype=p.dtype)
        inputs.append(inp)
        outs = []
        for d in range(dims.dirs):
            s = k * dims.dirs + d
            c0 = None if p.cx is None else p.cx[s]
            y_d, hy[s], c_final, saved[k, d] = _direction_forward(
                dims.mode, inp, p.hx[s], c0, _cell(p.weights, k, d, gh), p.active, d == 1
            )
            if cy is not None:
                cy[s] = c_final
            outs.append(y_d)
        inp = np.concatenate(outs, axis=2)
    return inp, hy, cy, inputs, saved


def _to_user(a: np.ndarray, dims: _Dims) -> np.ndarray:
    """A time-major (T, B, F) array in the caller's layout."""
    if dims.unbatched:
        return a[:, 0, :]
    return a.swapaxes(0, 1) if dims.batch_first else a


def _state_to_user(s: np.ndarray | None, dims: _Dims) -> np.ndarray | None:
    return None if s is None else (s[:, 0, :] if dims.unbatched else s)


def rnn_forward(
    x: Any,
    hx: Any,
    weights: dict[str, Any],
    *,
    mode: str,
    num_layers: int = 1,
    bidirectional: bool = False,
    batch_first: bool = False,
    proj_size: int = 0,
    lengths: Any = None,
    cx: Any = None,
    dropout: float = 0.0,
    seed: int = 0,
    training: bool = False,
    dtype: Any = np.float32,
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """(y, hy, cy) float64; cy is None unless mode == "lstm". ``dtype``: the storage type
    whose dropout scale to apply (module docstring)."""
    p = _prepare(x, hx, cx, weights, mode, num_layers, bidirectional, batch_first, proj_size,
                 lengths, dropout, seed, training, dtype)  # fmt: skip
    y, hy, cy, _, _ = _network_forward(p)
    return _to_user(y, p.dims), _state_to_user(hy, p.dims), _state_to_user(cy, p.dims)


def rnn_backward(
    dy: Any,
    dhy: Any,
    dcy: Any,
    x: Any,
    hx: Any,
    weights: dict[str, Any],
    *,
    mode: str,
    num_layers: int = 1,
    bidirectional: bool = False,
    batch_first: bool = False,
    proj_size: int = 0,
    lengths: Any = None,
    cx: Any = None,
    dropout: float = 0.0,
    seed: int = 0,
    training: bool = False,
    dtype: Any = np.float32,
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, dict[str, np.ndarray]]:
    """(dx, dhx, dcx, dweights): gradients of sum(y*dy) + sum(hy*dhy) + sum(cy*dcy).

    dhy / dcy may be None (zero). dx has x's shape; dhx and dcx have the shape hx and cx
    have (or would have, when passed as None); dcx is None unless lstm. dweights has the
    keys of ``weights`` (no bias keys for a model without biases). ``dtype`` as for
    :func:`rnn_forward`."""
    p = _prepare(x, hx, cx, weights, mode, num_layers, bidirectional, batch_first, proj_size,
                 lengths, dropout, seed, training, dtype)  # fmt: skip
    dims = p.dims
    _, _, _, inputs, saved = _network_forward(p)
    y_shape = (dims.steps, dims.batch, dims.dirs * dims.hout)
    dy = np.asarray(dy, dtype=np.float64)
    _check_shape("dy", dy, _to_user(np.empty(y_shape), dims).shape)
    dy = dy[:, None, :] if dims.unbatched else (dy.swapaxes(0, 1) if batch_first else dy)
    dhy = _state(dhy, "dhy", (p.hx.shape[0], dims.hout), dims)
    dcy = None if p.cx is None else _state(dcy, "dcy", (p.cx.shape[0], dims.hidden), dims)

    gh = GATES[mode] * dims.hidden
    dhx, dcx = np.zeros_like(p.hx), None if p.cx is None else np.zeros_like(p.cx)
    dweights: dict[str, np.ndarray] = {}
    names = {"w_ih": "weight_ih", "w_hh": "weight_hh", "b_ih": "bias_ih", "b_hh": "bias_hh",
             "w_hr": "weight_hr"}  # fmt: skip
    d_out = dy  # gradient of the current layer's output (T, B, D*Hout)
    for k in reversed(range(dims.layers)):
        d_in = np.zeros_like(inputs[k])
        for d in range(dims.dirs):
            s = k * dims.dirs + d
            dc_final = None if dcy is None else dcy[s]
            dx_d, dhx[s], dc0, grads = _direction_backward(
                mode, inputs[k], saved[k, d], _cell(p.weights, k, d, gh), p.active, d == 1,
                d_out[:, :, d * dims.hout : (d + 1) * dims.hout], dhy[s], dc_final,
            )  # fmt: skip
            if dcx is not None:
                dcx[s] = dc0
            d_in += dx_d
            for short, g in grads.items():
                key = f"{names[short]}_l{k}{_suffix(d)}"
                if key in p.weights:
                    dweights[key] = g
        if k and p.drop:
            d_out = dropout_backward(d_in, p.drop, p.seed, offset=k - 1, dtype=p.dtype)
        else:
            d_out = d_in
    dweights = {key: dweights[key] for key in weights}
    return (
        _to_user(d_out, dims),
        _state_to_user(dhx, dims),
        _state_to_user(dcx, dims),
        dweights,
    )


__all__ = ["GATES", "rnn_backward", "rnn_forward"]
