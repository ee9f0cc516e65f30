"""The float64 recurrent-network reference against torch.nn.RNN / LSTM / GRU on CPU in
float64 (forward and every gradient), dropout against its own layer-by-layer composition,
and the backward against finite differences (which needs no torch)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

from cudnnlite.reference.dropout import dropout_backward, dropout_forward
from cudnnlite.reference.rnn import rnn_backward, rnn_forward

# Both sides compute in float64 in different summation orders over at most 6 steps and
# 3 layers: differences are a few ulps of O(1) values (seen: < 2e-15), far below 1e-10.
RTOL, ATOL = 1e-10, 1e-12


@dataclass(frozen=True)
class Case:
    mode: str
    steps: int = 5
    batch: int = 3
    inputs: int = 4
    hidden: int = 5
    layers: int = 1
    bidirectional: bool = False
    proj_size: int = 0
    batch_first: bool = False
    unbatched: bool = False
    bias: bool = True
    hx_none: bool = False
    lengths: tuple[int, ...] | None = None

    def __str__(self) -> str:
        flags = [self.mode, f"T{self.steps}B{self.batch}H{self.hidden}L{self.layers}"]
        flags += ["bi"] * self.bidirectional + [f"proj{self.proj_size}"] * bool(self.proj_size)
        flags += ["bf"] * self.batch_first + ["unbatched"] * self.unbatched
        flags += ["nobias"] * (not self.bias) + ["hxNone"] * self.hx_none
        flags += [f"len{''.join(map(str, self.lengths))}"] if self.lengths else []
        return "-".join(flags)

    def kwargs(self) -> dict[str, Any]:
        return dict(
            mode=self.mode, num_layers=self.layers, bidirectional=self.bidirectional,
            batch_first=self.batch_first, proj_size=self.proj_size, lengths=self.lengths,
        )  # fmt: skip


CASES = [
    Case("lstm"),
    Case("lstm", hidden=7, layers=2, bidirectional=True),
    Case("lstm", layers=2, bidirectional=True, proj_size=3),
    Case("lstm", proj_size=2, unbatched=True, layers=2),
    Case("lstm", layers=2, bidirectional=True, lengths=(3, 5, 1)),  # unsorted, a length 1
    Case("lstm", batch_first=True, bias=False, hx_none=True, bidirectional=True),
    Case("lstm", proj_size=4, batch_first=True, lengths=(2, 6, 4), steps=6, hidden=7),
    Case("gru"),
    Case("gru", layers=3, bidirectional=True, lengths=(4, 2, 5), hidden=7),
    Case("gru", unbatched=True, batch_first=True, bidirectional=True),
    Case("gru", bias=False, hx_none=True, layers=2, steps=1),
    Case("rnn_tanh", layers=2, bidirectional=True),
    Case("rnn_relu", layers=3, lengths=(5, 3, 4), bidirectional=True),
    Case("rnn_tanh", steps=1, batch=1, hx_none=True),
    Case("rnn_relu", batch=1, lengths=(2,), batch_first=True, bias=False),
]


def _torch_run(c: Case, seed: int) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """The module's weights, and its inputs, outputs and gradients, as NumPy arrays."""
    torch = pytest.importorskip("torch")
    nn = torch.nn
    torch.manual_seed(seed)
    cls = {"lstm": nn.LSTM, "gru": nn.GRU, "rnn_tanh": nn.RNN, "rnn_relu": nn.RNN}[c.mode]
    extra = {"proj_size": c.proj_size} if c.mode == "lstm" else {}
    if c.mode.startswith("rnn"):
        extra["nonlinearity"] = c.mode[4:]
    m = cls(c.inputs, c.hidden, num_layers=c.layers, bias=c.bias, batch_first=c.batch_first,
            bidirectional=c.bidirectional, dtype=torch.float64, **extra)  # fmt: skip
    dirs = 2 if c.bidirectional else 1
    hout = c.proj_size or c.hidden
    if c.unbatched:
        xshape, bshape = (c.steps, c.inputs), ()
    else:
        xshape = (c.batch, c.steps, c.inputs) if c.batch_first else (c.steps, c.batch, c.inputs)
        bshape = (c.batch,)

    def rand(*shape: int) -> Any:
        return torch.randn(*shape, dtype=torch.float64, requires_grad=True)

    x = rand(*xshape)
    hx = None if c.hx_none else rand(c.layers * dirs, *bshape, hout)
    cx = None if c.hx_none or c.mode != "lstm" else rand(c.layers * dirs, *bshape, c.hidden)
    state = hx if c.mode != "lstm" or hx is None else (hx, cx)
    if c.lengths is None:
        y, hn = m(x, state)
    else:
        pack = nn.utils.rnn.pack_padded_sequence(
            x, torch.tensor(c.lengths), batch_first=c.batch_first, enforce_sorted=False
        )
        out, hn = m(pack, state)
        y, _ = nn.utils.rnn.pad_packed_sequence(
            out, batch_first=c.batch_first, total_length=c.steps
        )
    hy, cy = hn if c.mode == "lstm" else (hn, None)
    dy, dhy = torch.randn_like(y), torch.randn_like(hy)
    loss = (y * dy).sum() + (hy * dhy).sum()
    dcy = None
    if cy is not None:
        dcy = torch.randn_like(cy)
        loss = loss + (cy * dcy).sum()
    loss.backward()

    def npy(t: Any) -> np.ndarray | None:
        return None if t is None else t.detach().numpy()

    weights = {k: npy(v) for k, v in m.named_parameters()}
    run = {
        "x": npy(x), "hx": npy(hx), "cx": npy(cx), "y": npy(y), "hy": npy(hy),
        "cy": npy(cy), "dy": npy(dy), "dhy": npy(dhy), "dcy": npy(dcy),
        "dx": npy(x.grad), "dhx": None if hx is None else npy(hx.grad),
        "dcx": None if cx is None else npy(cx.grad),
        "dweights": {k: npy(v.grad) for k, v in m.named_parameters()},
    }  # fmt: skip
    return weights, run


def _close(actual: Any, expected: Any) -> None:
    np.testing.assert_allclose(actual, expected, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("case", CASES, ids=str)
def test_matches_torch(case: Case) -> None:
    w, r = _torch_run(case, seed=CASES.index(case))
    y, hy, cy = rnn_forward(r["x"], r["hx"], w, cx=r["cx"], **case.kwargs())
    _close(y, r["y"])
    _close(hy, r["hy"])
    if case.mode == "lstm":
        _close(cy, r["cy"])
    else:
        assert cy is None
    dx, dhx, dcx, dw = rnn_backward(
        r["dy"], r["dhy"], r["dcy"], r["x"], r["hx"], w, cx=r["cx"], **case.kwargs()
    )
    _close(dx, r["dx"])
    assert dhx.shape == hy.shape
    if r["dhx"] is not None:
        _close(dhx, r["dhx"])
    if r["dcx"] is not None:
        _close(dcx, r["dcx"])
    assert (dcx is None) == (case.mode != "lstm")
    assert list(dw) == list(w)  # same keys, no bias keys without biases
    for name, g in r["dweights"].items():
        _close(dw[name], g)


def _random_weights(rng: np.random.Generator, mode: str, inputs: int, hidden: int,
                    layers: int, dirs: int, proj: int = 0) -> dict[str, np.ndarray]:  # fmt: skip
    gh = {"lstm": 4, "gru": 3}.get(mode, 1) * hidden
    hout = proj or hidden
    w = {}
    for k in range(layers):
        for d in range(dirs):
            sfx = f"_l{k}" + ("_reverse" if d else "")
            w["weight_ih" + sfx] = rng.uniform(-0.6, 0.6, (gh, inputs if k == 0 else dirs * hout))
            w["weight_hh" + sfx] = rng.uniform(-0.6, 0.6, (gh, hout))
            w["bias_ih" + sfx] = rng.uniform(-0.6, 0.6, gh)
            w["bias_hh" + sfx] = rng.uniform(-0.6, 0.6, gh)
            if proj:
                w["weight_hr" + sfx] = rng.uniform(-0.6, 0.6, (hout, hidden))
    return w


def _layer(w: dict[str, np.ndarray], k: int) -> dict[str, np.ndarray]:
    """Layer k of a stacked model as a one-layer model."""
    tag = f"_l{k}"
    return {n.replace(tag, "_l0"): v for n, v in w.items() if tag + "_" in n or n.endswith(tag)}


def test_dropout_between_layers_is_the_composition() -> None:
    rng = np.random.default_rng(1)
    steps, batch, hidden, p, seed = 6, 3, 5, 0.4, 1234
    w = _random_weights(rng, "lstm", 4, hidden, layers=2, dirs=2)
    x = rng.standard_normal((batch, steps, 4))  # batch_first: the mask is time-major
    hx, cx = rng.standard_normal((2, 4, batch, hidden))
    kw = dict(mode="lstm", bidirectional=True, lengths=(6, 2, 4))
    both = dict(kw, num_layers=2, batch_first=True, dropout=p, seed=seed, training=True)
    y, hy, cy = rnn_forward(x, hx, w, cx=cx, **both)

    w0, w1 = _layer(w, 0), _layer(w, 1)
    xt = x.swapaxes(0, 1)
    y0, hy0, cy0 = rnn_forward(xt, hx[:2], w0, cx=cx[:2], **kw)
    x1 = dropout_forward(y0, p, seed, offset=0)
    assert 0 < np.count_nonzero(x1) < np.count_nonzero(y0)  # the mask dropped something
    y1, hy1, cy1 = rnn_forward(x1, hx[2:], w1, cx=cx[2:], **kw)
    _close(y, y1.swapaxes(0, 1))
    _close(hy, np.concatenate([hy0, hy1]))
    _close(cy, np.concatenate([cy0, cy1]))

    dy = rng.standard_normal(y.shape)
    dhy, dcy = rng.standard_normal((2, 4, batch, hidden))
    dx, dhx, dcx, dw = rnn_backward(dy, dhy, dcy, x, hx, w, cx=cx, **both)
    dx1, dhx1, dcx1, dw1 = rnn_backward(
        dy.swapaxes(0, 1), dhy[2:], dcy[2:], x1, hx[2:], w1, cx=cx[2:], **kw
    )
    dy0 = dropout_backward(dx1, p, seed, offset=0)
    dx0, dhx0, dcx0, dw0 = rnn_backward(dy0, dhy[:2], dcy[:2], xt, hx[:2], w0, cx=cx[:2], **kw)
    _close(dx, dx0.swapaxes(0, 1))
    _close(dhx, np.concatenate([dhx0, dhx1]))
    _close(dcx, np.concatenate([dcx0, dcx1]))
    for name, g in dw0.items():
        _close(dw[name], g)
    for name, g in dw1.items():
        _close(dw[name.replace("_l0", "_l1")], g)

    # No dropout when not training, or with nothing between layers.
    plain = rnn_forward(x, hx, w, cx=cx, **dict(both, training=False, dropout=0.0))
    _close(rnn_forward(x, hx, w, cx=cx, **dict(both, training=False))[0], plain[0])
    one = dict(both, num_layers=1)
    _close(
        rnn_forward(x, hx[:2], w0, cx=cx[:2], **one)[0],
        rnn_forward(x, hx[:2], w0, cx=cx[:2], **dict(one, training=False))[0],
    )


def _numgrad(f: Callable[[], float], a: np.ndarray, h: float = 1e-6) -> np.ndarray:
    g = np.zeros_like(a)
    for i in np.ndindex(a.shape):
        old = a[i]
        a[i] = old + h
        fp = f()
        a[i] = old - h
        fm = f()
        a[i] = old
        g[i] = (fp - fm) / (2 * h)
    return g


@pytest.mark.parametrize("mode", ["lstm", "gru"])
def test_backward_matches_finite_differences(mode: str) -> None:
    """Independent of torch: central differences of the forward (error O(h^2) ~ 1e-12
    plus rounding ~ 1e-16 / h = 1e-10, so 1e-7 is a wide margin)."""
    rng = np.random.default_rng(2)
    proj = 2 if mode == "lstm" else 0
    hidden, hout, steps, batch = 3, proj or 3, 3, 2
    w = _random_weights(rng, mode, 2, hidden, layers=1, dirs=2, proj=proj)
    x = rng.standard_normal((steps, batch, 2))
    hx = rng.standard_normal((2, batch, hout))
    cx = rng.standard_normal((2, batch, hidden)) if mode == "lstm" else None
    kw = dict(mode=mode, bidirectional=True, proj_size=proj, lengths=(2, 3))
    dy = rng.standard_normal((steps, batch, 2 * hout))
    dhy = rng.standard_normal(hx.shape)
    dcy = None if cx is None else rng.standard_normal(cx.shape)

    def loss() -> float:
        y, hy, cy = rnn_forward(x, hx, w, cx=cx, **kw)
        return float((y * dy).sum() + (hy * dhy).sum() + (0 if cy is None else (cy * dcy).sum()))

    dx, dhx, dcx, dw = rnn_backward(dy, dhy, dcy, x, hx, w, cx=cx, **kw)
    fd = dict(rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(dx, _numgrad(loss, x), **fd)
    np.testing.assert_allclose(dhx, _numgrad(loss, hx), **fd)
    if cx is not None:
        np.testing.assert_allclose(dcx, _numgrad(loss, cx), **fd)
    for name in ("weight_ih_l0", "weight_hh_l0_reverse", "bias_hh_l0", "bias_ih_l0_reverse"):
        np.testing.assert_allclose(dw[name], _numgrad(loss, w[name]), **fd)
    if proj:
        np.testing.assert_allclose(dw["weight_hr_l0"], _numgrad(loss, w["weight_hr_l0"]), **fd)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (dict(mode="elman"), "mode"),
        (dict(mode="gru", proj_size=2), "proj_size"),
        (dict(lengths=(0, 3)), "lengths"),
        (dict(lengths=(4, 3)), "lengths"),
        (dict(dropout=1.0), "dropout"),
        (dict(drop_key="weight_hh_l0"), "weight_hh_l0"),
        (dict(hx=np.zeros((1, 3, 3))), "hx"),
    ],
)
def test_bad_input(change: dict[str, Any], message: str) -> None:
    rng = np.random.default_rng(3)
    w = _random_weights(rng, "gru", 2, 3, layers=1, dirs=1)
    w.pop(change.pop("drop_key", "none"), None)
    args = dict(mode="gru", hx=None) | change
    with pytest.raises(ValueError, match=message):
        rnn_forward(rng.standard_normal((3, 2, 2)), args.pop("hx"), w, **args)
