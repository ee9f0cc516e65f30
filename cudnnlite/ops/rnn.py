"""Recurrent networks: ``rnn`` (RNN tanh/ReLU, LSTM with projections, GRU; multi-layer,
bidirectional, variable lengths, dropout between layers) and ``rnn_backward``, with
PyTorch's semantics: a ``torch.nn.LSTM``'s weights (``rnn_weights_from_torch``) give its
results and gradients.

A call checks the arguments, brings x to time-major (T, B, I), builds an RnnProblem, takes
a plan from the in-process cache (explicit ``algo`` -> tuning DB -> heuristics) and runs it.

Weights: a dict with PyTorch's names (``weight_ih_l{k}[_reverse]``, ``weight_hh_...``,
``bias_ih_...``, ``bias_hh_...``, ``weight_hr_...``; biases may all be absent, as in a
``bias=False`` module), or one flat buffer packed as ``pack_rnn_weights`` does: layer after
layer, each layer's w_ih (D, G*H, I_l), w_hh (D, G*H, Ho), b_ih (D, G*H), b_hh (D, G*H) and,
with projections, w_hr (D, P, H), each stacked over the D directions (forward first), all
contiguous. A flat buffer saves the per-call stacking copies: use it with plans and loops.

Precision: float32/float16/bfloat16 run the GEMMs with float32 accumulation and the cells in
float32 (c, the gates and every gradient buffer float32); float64 runs all of it in float64
(DGEMMs, double cells), forward and backward, on both solvers.

Deliberate differences from PyTorch (also in the README): dropout uses the library's Philox
stream (layer k's output mask is ``dropout(y_k, p, seed, offset=k)`` on the time-major
output); ``lengths`` replaces packed sequences (padded input, any order, as
``pack_padded_sequence(enforce_sorted=False)``), and outputs past a sequence's end are 0.
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
from ..problems.rnn import GATES, MODES, RnnProblem
from ..runtime.backend import Backend
from ..runtime.select import backend_for
from ..runtime.streams import with_stream
from ..solvers.rnn.common import (
    LayerWeights,
    RnnBwdTensors,
    RnnReserve,
    RnnScalars,
    RnnTensors,
)
from ._arrays import as_array, flag, float_dtype
from .dropout import check_seed

_PARTS = ("w_ih", "w_hh", "b_ih", "b_hh", "w_hr")
_TORCH = {"w_ih": "weight_ih", "w_hh": "weight_hh", "b_ih": "bias_ih", "b_hh": "bias_hh",
          "w_hr": "weight_hr"}  # fmt: skip


@dataclass(frozen=True)
class _Dims:
    """Sizes fixed by the arguments (before the data)."""

    mode: str
    layers: int
    dirs: int
    i: int
    h: int
    p: int

    @property
    def gh(self) -> int:
        return GATES[self.mode] * self.h

    @property
    def hout(self) -> int:
        return self.p or self.h

    def layer_input(self, layer: int) -> int:
        return self.i if layer == 0 else self.dirs * self.hout

    def shapes(self, layer: int) -> dict[str, tuple[int, ...]]:
        """The stacked (D, ...) shape of each part of a layer."""
        d, gh = self.dirs, self.gh
        out = {"w_ih": (d, gh, self.layer_input(layer)), "w_hh": (d, gh, self.hout),
               "b_ih": (d, gh), "b_hh": (d, gh)}  # fmt: skip
        if self.p:
            out["w_hr"] = (d, self.p, self.h)
        return out

    def flat_size(self, h: int | None = None) -> int:
        """Elements of the flat buffer: layer 0, then layers 1.. alike (closed form: a huge
        num_layers costs nothing before the buffer's size refuses it)."""
        dims = self if h is None else _Dims(self.mode, self.layers, self.dirs, self.i, h, self.p)

        def size(layer: int) -> int:
            return sum(math.prod(s) for s in dims.shapes(layer).values())

        return size(0) + (self.layers - 1) * (size(1) if self.layers > 1 else 0)


def _torch_name(part: str, layer: int, d: int) -> str:
    return f"{_TORCH[part]}_l{layer}{'_reverse' if d else ''}"


# ------------------------------------------------------------------ argument checks


def _mode(mode: Any) -> str:
    if mode not in MODES:
        raise BadParamError(f"mode: expected one of {MODES}, got {mode!r}")
    return mode


def _int(name: str, v: Any, low: int) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < low:
        raise BadParamError(f"{name}: expected an integer >= {low}, got {v!r}")
    return int(v)


def _dropout(p: Any) -> float:
    try:
        f = float(p)
    except (TypeError, ValueError):
        raise BadParamError(f"dropout: expected a float in [0, 1), got {p!r}") from None
    if not 0.0 <= f < 1.0:
        raise BadParamError(f"dropout: expected a float in [0, 1), got {p!r}")
    return f


def _seed(seed: Any, needed: bool, backend: Backend, x: Any) -> Any:
    """An integer seed, or a PhiloxState living where x does (layer k's mask then draws at
    its counter + k)."""
    if seed is None:
        return int(np.random.randint(0, 2**63, dtype=np.int64)) if needed else 0
    return check_seed(seed, backend, x)


def _hidden_from_dict(weights: dict, mode: str, p: int) -> int:
    for name in ("weight_hr_l0", "weight_hh_l0") if p else ("weight_hh_l0",):
        if name in weights:
            shape = tuple(getattr(weights[name], "shape", ()))
            if len(shape) != 2:
                raise BadParamError(f"weights[{name!r}]: expected a 2-D array, got shape {shape}")
            return shape[1] if name == "weight_hr_l0" else shape[0] // GATES[mode]
    raise BadParamError(f"weights: missing 'weight_hh_l0'{' and weight_hr_l0' if p else ''}")


def _hidden_from_flat(size: int, dims: _Dims) -> int:
    """The hidden size whose packing has ``size`` elements (the count grows with H)."""
    lo, hi = max(1, dims.p + 1), max(2, dims.p + 2)
    while dims.flat_size(hi) < size:
        hi *= 2
    while lo < hi:
        mid = (lo + hi) // 2
        if dims.flat_size(mid) < size:
            lo = mid + 1
        else:
            hi = mid
    if dims.flat_size(lo) != size:
        raise BadParamError(
            f"weights: a flat buffer of {size} elements matches no hidden size for mode "
            f"{dims.mode!r}, {dims.layers} layer(s), {dims.dirs} direction(s), input size "
            f"{dims.i}, proj_size {dims.p} (see pack_rnn_weights)"
        )
    return lo


def _stack_dict(weights: dict, dims: _Dims, dtype: Any, xp: Any) -> tuple[list[LayerWeights], bool]:
    """Per-layer stacked weights from PyTorch's names; (layers, has_bias)."""
    last = _torch_name("w_ih", dims.layers - 1, 0)  # (before any per-layer work)
    if last not in weights:
        raise BadParamError(f"weights: missing {last!r} for {dims.layers} layer(s)")
    expected = {_torch_name(part, layer, d) for layer in range(dims.layers)
                for d in range(dims.dirs) for part in dims.shapes(layer)}  # fmt: skip
    bias_names = {n for n in expected if n.startswith("bias")}
    has_bias = any(n in weights for n in bias_names)
    unknown = sorted(set(weights) - expected)
    if unknown:
        raise BadParamError(f"weights: unexpected entries {unknown} for mode {dims.mode!r}, "
                            f"{dims.layers} layer(s), proj_size {dims.p}")  # fmt: skip
    out = []
    for layer in range(dims.layers):
        parts = {}
        for part, shape in dims.shapes(layer).items():
            if part.startswith("b") and not has_bias:
                parts[part] = xp.zeros(shape, dtype)
                continue
            arrays = []
            for d in range(dims.dirs):
                name = _torch_name(part, layer, d)
                if name not in weights:
                    raise BadParamError(f"weights: missing {name!r}")
                a = as_array(f"weights[{name!r}]", weights[name])
                if tuple(a.shape) != shape[1:]:
                    raise BadParamError(f"weights[{name!r}]: expected shape {shape[1:]}, got "
                                        f"{tuple(a.shape)}")  # fmt: skip
                if a.dtype != dtype:
                    raise BadParamError(f"weights[{name!r}]: expected dtype {dtype} like x, got "
                                        f"{a.dtype}")  # fmt: skip
                arrays.append(a)
            parts[part] = xp.ascontiguousarray(xp.stack(arrays))
        out.append(LayerWeights(**parts))
    return out, has_bias


def _views(flat: Any, dims: _Dims) -> list[LayerWeights]:
    """Per-layer views of a flat buffer packed as pack_rnn_weights does."""
    out, at = [], 0
    for layer in range(dims.layers):
        parts = {}
        for part, shape in dims.shapes(layer).items():
            n = int(np.prod(shape))
            parts[part] = flat[at : at + n].reshape(shape)
            at += n
        out.append(LayerWeights(**parts))
    return out


def _lengths(lengths: Any, b: int, t: int, xp: Any) -> Any:
    if lengths is None:
        return None
    a = np.asarray(lengths) if isinstance(lengths, (list, tuple)) else as_array("lengths", lengths)
    if a.ndim != 1 or a.shape[0] != b or a.dtype.kind not in "iu":
        raise BadParamError(f"lengths: expected {b} integers (one per sequence), got shape "
                            f"{tuple(a.shape)} dtype {a.dtype}")  # fmt: skip
    host = np.asarray(a.get() if hasattr(a, "get") else a)
    if host.size and (host.min() < 1 or host.max() > t):
        raise BadParamError(f"lengths: each must be in [1, {t}] (the sequence length), got "
                            f"{host.tolist()}")  # fmt: skip
    return xp.asarray(host.astype(np.int32))


def _state(name: str, a: Any, shape: tuple[int, ...], dtype: Any) -> Any:
    if a is None:
        return None
    a = as_array(name, a)
    if tuple(a.shape) != shape:
        raise BadParamError(f"{name}: expected shape {shape}, got {tuple(a.shape)}")
    if a.dtype != dtype:
        raise BadParamError(f"{name}: expected dtype {dtype} like x, got {a.dtype}")
    return a


@dataclass
class _Call:
    backend: Backend
    problem: RnnProblem
    dims: _Dims
    x: Any  # time-major (T, B, I), contiguous
    hx: Any
    cx: Any
    weights: list[LayerWeights]
    flat: bool  # weights came as one flat buffer
    has_bias: bool
    weight_names: tuple[str, ...]  # the dict's keys in its order (for the gradients)
    lengths: Any
    scalars: RnnScalars
    batch_first: bool
    unbatched: bool


def _make_call(x: Any, hx: Any, weights: Any, cx: Any, lengths: Any, mode: Any,
               num_layers: Any, bidirectional: Any, batch_first: Any, dropout: Any, seed: Any,
               proj_size: Any, training: bool) -> _Call:  # fmt: skip
    mode = _mode(mode)
    layers = _int("num_layers", num_layers, 1)
    proj = _int("proj_size", proj_size, 0)
    if proj and mode != "lstm":
        raise BadParamError(f"proj_size: projections need mode 'lstm', got mode {mode!r}")
    if cx is not None and mode != "lstm":
        raise BadParamError(f"cx: only mode 'lstm' has a cell state (mode {mode!r})")
    p_drop = _dropout(dropout)
    is_dict = isinstance(weights, dict)
    arrays = {"x": x, "hx": hx, "cx": cx}
    if not is_dict:
        arrays["weights"] = weights
    backend = backend_for(*arrays.values(), names=tuple(arrays))
    xp = backend.xp
    x = as_array("x", x)
    float_dtype("x", x)
    if x.ndim not in (2, 3):
        raise BadParamError(f"x: expected (T, B, I), (B, T, I) with batch_first, or unbatched "
                            f"(T, I); got shape {tuple(x.shape)}")  # fmt: skip
    unbatched = x.ndim == 2
    batch_first, bidirectional = flag("batch_first", batch_first), flag("bidirectional",
                                                                         bidirectional)
    xt = x[:, None] if unbatched else (x.transpose(1, 0, 2) if batch_first else x)
    t, b, i = xt.shape
    if t == 0:
        raise BadParamError("x: the sequence length must be at least 1 (as in PyTorch)")
    dirs = 2 if bidirectional else 1
    if is_dict:
        h = _hidden_from_dict(weights, mode, proj)
    else:
        flat = as_array("weights", weights)
        if flat.ndim != 1 or flat.dtype != x.dtype:
            raise BadParamError(f"weights: expected a dict of PyTorch-named arrays or a 1-D "
                                f"buffer of dtype {x.dtype}; got shape {tuple(flat.shape)} "
                                f"dtype {flat.dtype}")  # fmt: skip
        h = _hidden_from_flat(flat.size, _Dims(mode, layers, dirs, i, 1, proj))
    if proj and proj >= h:
        raise BadParamError(f"proj_size: must be smaller than hidden_size={h}, got {proj}")
    dims = _Dims(mode, layers, dirs, i, h, proj)
    if is_dict:
        stacked, has_bias = _stack_dict(weights, dims, x.dtype, xp)
        names = tuple(weights)
    else:
        stacked, has_bias, names = _views(xp.ascontiguousarray(flat), dims), True, ()
    lead = (layers * dirs,) if unbatched else (layers * dirs, b)
    hx = _state("hx", hx, (*lead, dims.hout), x.dtype)
    cx = _state("cx", cx, (*lead, h), x.dtype)
    if unbatched:
        hx = hx[:, None] if hx is not None else None
        cx = cx[:, None] if cx is not None else None
    lens = _lengths(lengths, b, t, xp)
    drop = p_drop > 0 and layers > 1 and training
    scalars = RnnScalars(dropout=p_drop if drop else 0.0, seed=_seed(seed, drop, backend, x))
    problem = RnnProblem(mode=mode, t=t, b=b, i=i, h=h, p=proj, layers=layers,
                         bidirectional=dirs == 2, dtype=float_dtype("x", x).short,
                         varlen=lens is not None, dropout=drop)  # fmt: skip
    return _Call(backend, problem, dims, xp.ascontiguousarray(xt), hx, cx, stacked,
                 not is_dict, has_bias, names, lens, scalars, bool(batch_first),
                 unbatched)  # fmt: skip


def _user_seq(a: Any, call: _Call) -> Any:
    """A time-major (T, B, F) array in the caller's layout."""
    if call.unbatched:
        return a[:, 0]
    if call.batch_first:
        return call.backend.xp.ascontiguousarray(a.transpose(1, 0, 2))
    return a


def _user_state(a: Any, call: _Call) -> Any:
    return a[:, 0] if call.unbatched and a is not None else a


# ------------------------------------------------------------------ public API


@with_stream
def rnn(
    x: Any,
    hx: Any,
    weights: Any,
    *,
    mode: str = "lstm",
    num_layers: int = 1,
    bidirectional: bool = False,
    batch_first: bool = False,
    dropout: float = 0.0,
    seed: int | None = None,
    proj_size: int = 0,
    lengths: Any = None,
    training: bool = False,
    cx: Any = None,
    algo: str = "auto",
) -> tuple[Any, ...]:
    """A stack of recurrent layers, as ``torch.nn.RNN/LSTM/GRU(x, hx)``.

    Args:
        x: (T, B, I), (B, T, I) with ``batch_first``, or unbatched (T, I); float32, float16,
            bfloat16 (computed in float32, h rounded to x's dtype each step) or float64
            (computed, accumulated and saved in float64). hx, cx and the weights take x's
            dtype.
        hx: initial h, (num_layers * D, B, Ho) (unbatched: (num_layers * D, Ho)), or None
            for zeros. D = 2 when bidirectional; Ho = proj_size or the hidden size.
        weights: a dict of PyTorch-named arrays or a flat buffer (module docstring).
        mode: "lstm", "gru", "rnn_tanh" or "rnn_relu".
        dropout: probability of dropping each output of every layer but the last
            (training only), with the library's Philox stream from ``seed``: an integer
            (layer k's mask at offset k), or a :class:`~cudnnlite.PhiloxState` (offset k
            added to its counter: advance it by num_layers per step for fresh masks).
        proj_size: LSTM projections (PyTorch's ``proj_size``), 0 for none.
        lengths: per-sequence lengths (B,), in any order, each in [1, T]: steps past a
            sequence's end do not exist (outputs 0; final states at the own last step).
        training: apply dropout and keep what the backward needs; the result then ends
            with a reserve object for ``rnn_backward``.
        cx: LSTM initial cell state, (num_layers * D, B, H), or None for zeros.
        algo: "auto" or a solver name ("rnn_fwd_standard", "rnn_fwd_persistent").

    Returns:
        ``(y, hy)``, ``(y, hy, cy)`` for LSTM, and the reserve last with ``training``.
        y is (T, B, D * Ho) in x's layout.
    """
    training = flag("training", training)
    call = _make_call(x, hx, weights, cx, lengths, mode, num_layers, bidirectional,
                      batch_first, dropout, seed, proj_size, training)  # fmt: skip
    check_algo(algo, call.problem.family)  # (an empty batch never dispatches)
    return _run_forward(call, lambda p: get_plan(call.backend, p, algo), training)


def _run_forward(call: _Call, plan_for: Any, training: bool) -> tuple[Any, ...]:
    """Allocates the outputs, launches ``plan_for(problem)`` and shapes the results."""
    p, xp = call.problem, call.backend.xp
    dtype = call.x.dtype
    y = xp.empty((p.t, p.b, p.dirs * p.hout), dtype)
    hy = xp.empty((p.layers * p.dirs, p.b, p.hout), dtype)
    cy = xp.empty((p.layers * p.dirs, p.b, p.h), dtype) if p.mode == "lstm" else None
    reserve = None
    if training:
        reserve = RnnReserve(p, call.backend, call.weights, call.hx, call.cx, call.lengths,
                             call.scalars.dropout, call.scalars.seed)  # fmt: skip
        reserve.meta = {"call": call}
    if p.b:
        tensors = RnnTensors(call.x, call.hx, call.cx, call.weights, call.lengths, y, hy, cy,
                             reserve)  # fmt: skip
        plan_for(p).launch(tensors, call.scalars)
    out = [_user_seq(y, call), _user_state(hy, call)]
    if cy is not None:
        out.append(_user_state(cy, call))
    if reserve is not None:
        out.append(reserve)
    return tuple(out)


@with_stream
def rnn_backward(dy: Any, dhy: Any, dcy: Any, reserve: RnnReserve, *,
                 algo: str = "auto") -> tuple[Any, Any, Any, Any]:  # fmt: skip
    """Gradients of a training ``rnn`` call: ``(dx, dhx, dcx, dweights)``.

    dy is like y, dhy like hy, dcy like cy (None: zero). dx is like x, dhx like hx and dcx
    like cx (None unless LSTM; zeros-shaped when hx/cx were None); dweights has the
    structure of the weights given to ``rnn`` (the same dict keys, or a flat buffer).
    """
    if not isinstance(reserve, RnnReserve):
        raise BadParamError(f"reserve: expected the reserve returned by rnn(..., training=True), "
                            f"got {type(reserve).__name__}")  # fmt: skip
    call: _Call = reserve.meta["call"]
    p = call.problem
    xp = call.backend.xp
    backend_for(dy, dhy, dcy, *([call.x] if p.b else []), names=("dy", "dhy", "dcy", "x"))
    dtype = call.x.dtype
    lead = (p.layers * p.dirs,) if call.unbatched else (p.layers * p.dirs, p.b)
    f = p.dirs * p.hout  # y's shape in the caller's layout
    seq = (p.b, p.t) if call.batch_first else (p.t, p.b)
    dy_shape = (p.t, f) if call.unbatched else (*seq, f)
    dy = _state("dy", dy, dy_shape, dtype)
    if dy is None:
        raise BadParamError("dy: expected the gradient of y, got None")
    dhy = _state("dhy", dhy, (*lead, p.hout), dtype)
    dcy = _state("dcy", dcy, (*lead, p.h), dtype)
    if dcy is not None and p.mode != "lstm":
        raise BadParamError(f"dcy: only mode 'lstm' has a cell state (mode {p.mode!r})")
    if call.unbatched:
        dy, dhy, dcy = dy[:, None], _lift(dhy), _lift(dcy)
    elif call.batch_first:
        dy = dy.transpose(1, 0, 2)
    dx = xp.empty((p.t, p.b, p.i), dtype)
    dhx = xp.empty((p.layers * p.dirs, p.b, p.hout), dtype)
    dcx = xp.empty((p.layers * p.dirs, p.b, p.h), dtype) if p.mode == "lstm" else None
    flat = xp.zeros((call.dims.flat_size(),), dtype)
    dweights = _views(flat, call.dims)
    if p.b:
        tensors = RnnBwdTensors(xp.ascontiguousarray(dy), dhy, dcy, reserve, dx, dhx, dcx,
                                dweights)  # fmt: skip
        get_plan(call.backend, p.backward(), algo).launch(tensors, call.scalars)
    else:
        check_algo(algo, p.backward().family)  # (no dispatch: the algo is checked all the same)
        dx.fill(0), dhx.fill(0)
        if dcx is not None:
            dcx.fill(0)
    grads = flat if call.flat else _grad_dict(dweights, call)
    return _user_seq(dx, call), _user_state(dhx, call), _user_state(dcx, call), grads


def _lift(a: Any) -> Any:
    return a[:, None] if a is not None else None


def _grad_dict(dweights: list[LayerWeights], call: _Call) -> dict[str, Any]:
    out = {}
    for name in call.weight_names:
        prefix, _, rest = name.rpartition("_l")
        layer = int(rest.split("_")[0])
        d = 1 if rest.endswith("_reverse") else 0
        part = next(k for k, v in _TORCH.items() if v == prefix)
        out[name] = getattr(dweights[layer], part)[d]
    return out


@with_stream
def pack_rnn_weights(weights: dict, *, mode: str = "lstm", num_layers: int = 1,
                     bidirectional: bool = False, proj_size: int = 0,
                     input_size: int | None = None) -> Any:  # fmt: skip
    """One flat buffer of PyTorch-named weights, in the packing ``rnn`` reads (module
    docstring); missing biases (a ``bias=False`` module) are packed as zeros."""
    if not isinstance(weights, dict) or "weight_ih_l0" not in weights:
        raise BadParamError("weights: expected a dict of PyTorch-named arrays with 'weight_ih_l0'")
    mode = _mode(mode)
    first = as_array("weights['weight_ih_l0']", weights["weight_ih_l0"])
    float_dtype("weights['weight_ih_l0']", first)
    backend = backend_for(first, names=("weights['weight_ih_l0']",))
    xp = backend.xp
    proj = _int("proj_size", proj_size, 0)
    i = first.shape[1] if input_size is None else _int("input_size", input_size, 1)
    h = _hidden_from_dict(weights, mode, proj)
    dirs = 2 if flag("bidirectional", bidirectional) else 1
    dims = _Dims(mode, _int("num_layers", num_layers, 1), dirs, i, h, proj)
    stacked, _ = _stack_dict(weights, dims, first.dtype, xp)
    return xp.concatenate([a.reshape(-1) for lw in stacked for a in lw.arrays()])


@with_stream
def rnn_weights_from_torch(module: Any) -> dict[str, Any]:
    """A ``torch.nn.RNN/LSTM/GRU``'s parameters as arrays by name, through DLPack (NumPy
    arrays for CPU tensors, CuPy arrays for CUDA tensors, imported on ``stream``; no
    copy)."""
    # (an RNNCell / LSTMCell has no layers: its weight_ih has no _l0 suffix)
    if not hasattr(module, "named_parameters") or not hasattr(module, "num_layers"):
        raise BadParamError(f"module: expected a torch.nn.RNN, LSTM or GRU, got "
                            f"{type(module).__name__}")  # fmt: skip
    named = list(module.named_parameters())
    return {name: as_array(name, t.detach()) for name, t in named}


def tuning_operands(problem: RnnProblem, backend: Backend, random: Any, empty: Any) -> tuple:
    """The tensors and scalars of one timed call of ``problem`` (the tuner's factory): random
    data; for the backward, the reserve of one standard training forward."""
    from ..solvers.rnn.standard import ForwardRunner

    p, xp = problem.forward(), backend.xp
    dims = _Dims(p.mode, p.layers, p.dirs, p.i, p.h, p.p)
    flat = random(p, backend, (dims.flat_size(),), 0) * 0.1
    weights = _views(flat, dims)
    x = random(p, backend, (p.t, p.b, p.i), 1)
    lengths = xp.asarray(np.linspace(p.t, 1, p.b).astype(np.int32)) if p.varlen else None
    cy = empty(p, backend, (p.layers * p.dirs, p.b, p.h)) if p.mode == "lstm" else None
    scalars = RnnScalars(dropout=0.25 if p.dropout else 0.0, seed=1)
    y = empty(p, backend, (p.t, p.b, p.dirs * p.hout))
    hy = empty(p, backend, (p.layers * p.dirs, p.b, p.hout))
    fwd = RnnTensors(x, None, None, weights, lengths, y, hy, cy)
    if problem.direction == "fwd":
        return fwd, scalars
    fwd.reserve = RnnReserve(p, backend, weights, None, None, lengths, scalars.dropout, 1)
    ForwardRunner(backend, p)(fwd, scalars, None)
    dx = empty(p, backend, (p.t, p.b, p.i))
    dhx = empty(p, backend, (p.layers * p.dirs, p.b, p.hout))
    dcx = empty(p, backend, (p.layers * p.dirs, p.b, p.h)) if p.mode == "lstm" else None
    grads = _views(xp.empty_like(flat), dims)
    dy = random(p, backend, fwd.y.shape, 2)
    return RnnBwdTensors(dy, None, None, fwd.reserve, dx, dhx, dcx, grads), scalars


class RnnPlan:
    """An RNN prepared once for time-major inputs of fixed sizes and flat weights
    (``pack_rnn_weights``): problem, solver and compiled kernels. Calling it checks the
    arrays' kind, shapes and dtype and launches. Made by :func:`rnn_plan`."""

    def __init__(self, plan: Any, dims: _Dims, dropout: float) -> None:
        self._plan = plan
        self._dims = dims
        self._dropout = dropout
        self.problem: RnnProblem = plan.problem
        self.solver = plan.solver.name
        self.config = plan.config

    @with_stream
    def __call__(self, x: Any, hx: Any, weights: Any, *, cx: Any = None, lengths: Any = None,
                 training: bool = False, seed: int | None = None) -> tuple[Any, ...]:  # fmt: skip
        """Like :func:`rnn` on (T, B, I) ``x`` with flat ``weights``: (y, hy[, cy][, reserve])."""
        p, dims = self.problem, self._dims
        backend = backend_for(x, hx, weights, cx, names=("x", "hx", "weights", "cx"))
        if backend is not self._plan.backend:
            raise BadParamError(f"x: this plan runs on {self._plan.backend.name}, the arrays "
                                f"are for {backend.name}")  # fmt: skip
        dt = float_dtype("x", as_array("x", x))
        if dt.short != p.dtype:
            raise BadParamError(f"x: this plan is for {p.dtype}, got {dt.numpy}")
        dtype = dt.numpy
        x = _state("x", x, (p.t, p.b, p.i), dtype)
        flat = _state("weights", weights, (dims.flat_size(),), dtype)
        lead = (p.layers * p.dirs, p.b)
        hx = _state("hx", hx, (*lead, p.hout), dtype)
        if cx is not None and p.mode != "lstm":
            raise BadParamError(f"cx: only mode 'lstm' has a cell state (mode {p.mode!r})")
        cx = _state("cx", cx, (*lead, p.h), dtype)
        if (lengths is None) == p.varlen:
            raise BadParamError(f"lengths: this plan was made {'with' if p.varlen else 'without'}"
                                " per-sequence lengths")  # fmt: skip
        xp = backend.xp
        lens = _lengths(lengths, p.b, p.t, xp)
        training = flag("training", training)
        drop = p.dropout and training
        scalars = RnnScalars(self._dropout if drop else 0.0, _seed(seed, drop, backend, x))
        call = _Call(backend, p, dims, xp.ascontiguousarray(x), hx, cx,
                     _views(xp.ascontiguousarray(flat), dims), True, True, (), lens, scalars,
                     False, False)  # fmt: skip
        return _run_forward(call, lambda _: self._plan, training)

    def __repr__(self) -> str:
        return f"<RnnPlan {self._plan.describe()}>"


def rnn_plan(x_shape: Any, hidden_size: int, *, mode: str = "lstm", num_layers: int = 1,
             bidirectional: bool = False, proj_size: int = 0, dtype: Any = np.float32,
             varlen: bool = False, dropout: float = 0.0, algo: str = "auto",
             backend: str = "auto") -> RnnPlan:  # fmt: skip
    """Plans ``rnn`` for time-major x of shape (T, B, I) and flat weights: the solver is
    chosen and its kernels compiled now. ``varlen``: calls pass ``lengths``. ``backend``:
    "cpu" (emulator), "cuda", or "auto" (the GPU when CuPy sees one)."""
    from ._fastpath import plan_backend, plan_shape

    dims = plan_shape(x_shape, "x_shape")  # (ints: 3.9 is no size)
    if len(dims) != 3:
        raise BadParamError(f"x_shape: expected (T, B, I), got {x_shape!r}")
    t, b, i = dims
    if min(t, b, i) < 1:
        raise BadParamError(f"x_shape: expected positive sizes, got {tuple(x_shape)}")
    dt = dtypes.lookup(dtype)
    if dt is None:
        raise BadParamError(f"dtype: expected {dtypes.names()}, got {dtype!r}")
    mode = _mode(mode)
    layers = _int("num_layers", num_layers, 1)
    h = _int("hidden_size", hidden_size, 1)
    proj = _int("proj_size", proj_size, 0)
    p_drop = _dropout(dropout)
    problem = RnnProblem(mode=mode, t=t, b=b, i=i, h=h, p=proj, layers=layers,
                         bidirectional=flag("bidirectional", bidirectional), dtype=dt.short,
                         varlen=flag("varlen", varlen),
                         dropout=p_drop > 0)  # fmt: skip
    dims = _Dims(mode, layers, problem.dirs, i, h, proj)
    return RnnPlan(get_plan(plan_backend(backend), problem, algo), dims, p_drop)
