"""Property tests of cudnnlite.rnn / rnn_backward (hypothesis), on every backend: forward and
every gradient against the float64 reference and torch.nn.RNN/LSTM/GRU over random
configurations; the semantics of ``lengths`` (what lies past a sequence's end is never read
and its outputs are 0, a sequence's results are its own whatever the batch around it, the
batch order only permutes the results); the two forward solvers against each other; and the
caller's arrays left as they were.

Kept apart from test_rnn.py so that a machine without hypothesis still runs the rest."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, example, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from test_rnn import _case, _on, _upcast, f64  # noqa: E402

import cudnnlite as cl  # noqa: E402
from cudnnlite.reference import rnn as ref  # noqa: E402
from cudnnlite.testing import to_numpy  # noqa: E402

HYPO = settings(suppress_health_check=[HealthCheck.function_scoped_fixture])

STANDARD, PERSISTENT = "rnn_fwd_standard", "rnn_fwd_persistent"
MODES = ("lstm", "gru", "rnn_tanh", "rnn_relu")
FORWARD = ("y", "hy", "cy")
STATE_GRADS = ("dx", "dhx", "dcx")


@dataclass(frozen=True)
class Case:
    """One configuration; ``arrays`` makes its data (test_rnn's case builder, seeded)."""

    mode: str
    t: int
    n: int
    i: int
    h: int
    layers: int = 1
    bi: bool = False
    proj: int = 0
    batch_first: bool = False
    lengths: tuple[int, ...] | None = None
    dtype: Any = np.float32
    with_hx: bool = True
    bias: bool = True
    algo: str = STANDARD
    seed: int = 0

    @property
    def dirs(self) -> int:
        return 2 if self.bi else 1

    @property
    def hout(self) -> int:
        return self.proj or self.h

    def lens(self) -> np.ndarray:
        """Every sequence's length (T where there are no lengths)."""
        return np.array(self.lengths if self.lengths is not None else (self.t,) * self.n)

    def arrays(self) -> dict[str, Any]:
        """x, hx, cx, weights, the call's keywords and random dy, dhy, dcy."""
        x, hx, cx, w, kw = _case(self.mode, self.t, self.n, self.i, self.h, layers=self.layers,
                                 bi=self.bi, p=self.proj, lens=self.lengths,
                                 batch_first=self.batch_first, bias=self.bias,
                                 with_hx=self.with_hx, dtype=self.dtype,
                                 seed=self.seed)  # fmt: skip
        rng = np.random.default_rng(self.seed + 2)
        seq = (self.n, self.t) if self.batch_first else (self.t, self.n)
        lead = (self.layers * self.dirs, self.n)
        dcy = rng.standard_normal((*lead, self.h)) if self.mode == "lstm" else None
        return dict(x=x, hx=hx, cx=cx, w=w, kw=kw,
                    dy=rng.standard_normal((*seq, self.dirs * self.hout)).astype(self.dtype),
                    dhy=rng.standard_normal((*lead, self.hout)).astype(self.dtype),
                    dcy=None if dcy is None else dcy.astype(self.dtype))  # fmt: skip


@st.composite
def cases(draw: Any, *, proj: bool = True, varlen: bool | None = None,
          layers: int | None = None) -> Case:  # fmt: skip
    """A random Case; ``proj=False``: none (the persistent solver's limit); ``varlen``: with
    lengths (True), without (False) or either (None); ``layers``: that many, else 1 or 2."""
    mode = draw(st.sampled_from(MODES))
    t, n, h = draw(st.integers(1, 5)), draw(st.integers(1, 3)), draw(st.integers(1, 5))
    p = draw(st.integers(0, h - 1)) if proj and mode == "lstm" else 0
    lens = st.lists(st.integers(1, t), min_size=n, max_size=n).map(tuple)
    if varlen is None:
        lens = st.none() | lens
    elif not varlen:
        lens = st.none()
    return Case(
        mode, t, n, draw(st.integers(1, 4)), h,
        layers=layers or draw(st.integers(1, 2)), bi=draw(st.booleans()), proj=p,
        batch_first=draw(st.booleans()), lengths=draw(lens),
        dtype=draw(st.sampled_from([np.float32, np.float64])),
        with_hx=draw(st.booleans()), bias=draw(st.booleans()),
        # (projections run on the standard solver only; "auto" picks it then)
        algo=draw(st.sampled_from([STANDARD, "auto"] if p else [STANDARD, PERSISTENT, "auto"])),
        seed=draw(st.integers(0, 2**16)),
    )  # fmt: skip


# ------------------------------------------------------------------ tolerances

# Unit roundoff of the computing type: float32 runs the GEMMs and cells in float32, float64
# all of it in double.
UNIT = {np.dtype(np.float32): 2.0**-24, np.dtype(np.float64): 2.0**-53}


def tolerance(c: Case, name: str) -> float:
    """Bound on |got - float64 truth| / max(1, max |truth|) for result ``name``.

    A pre-activation sums K = I_l + Ho + 2 products (x W_ih^T, h W_hh^T, two biases), each
    sum rounded with at most K u relative error of the summed magnitude; the cell's
    sigmoid/tanh/exp add a few ulps each (+8, also covering the reference's own double
    rounding). h = f(W x + U h + b) feeds the next step and the next layer, so over T steps
    and L layers those errors add up, passed on through f' <= 1 and |U| <= Ho / 2 (relu's
    growth shows in max |truth| too): 4 (K + 8) T L u. The backward runs the same chain back
    (2x); a weight gradient sums T * N terms of random sign that carry that error, its
    magnitude (the scale) growing with them: 2x more for partial cancellation. float32 at
    the largest sizes (K = 17, T = 5, L = 2): 6e-5, 1.2e-4, 2.4e-4 (seen over 800 random
    cases: 25x under), far below the 0.1-size errors of a wrong index, gate or step;
    float64's 1e-13 to 4e-13 is far below one float32 rounding anywhere (1e-7).
    """
    k = max(c.i, c.dirs * c.hout) + c.hout + 2
    base = 4 * (k + 8) * c.t * c.layers * UNIT[np.dtype(c.dtype)]
    if name in FORWARD:
        return base
    if name in STATE_GRADS:
        return 2 * base
    return 4 * base  # a weight gradient


def assert_results_close(c: Case, got: dict, want: dict, factor: float = 1.0, what: str = "",
                         scales: dict | None = None) -> None:  # fmt: skip
    """Every result of ``want`` in ``got``, within ``factor`` x its tolerance (2: two runs
    that each carry their own rounding) of ``scales[name]`` (default: max |want|)."""
    assert got.keys() == want.keys()
    for name, w in want.items():
        if w is None:
            assert got[name] is None, name
            continue
        g = np.asarray(got[name], np.float64)
        w = np.asarray(w, np.float64)
        assert g.shape == w.shape, name
        scale = max(1.0, float(np.abs(w).max(initial=0.0)), (scales or {}).get(name, 0.0))
        atol = factor * tolerance(c, name) * scale
        np.testing.assert_allclose(g, w, atol=atol, rtol=0, err_msg=f"{what} {name} ({c})")


# ------------------------------------------------------------------ running


def run(c: Case, backend: str, a: dict[str, Any], algo: str | None = None,
        **extra: Any) -> dict[str, Any]:  # fmt: skip
    """A training forward and its backward on ``backend``, as NumPy arrays by name
    (y, hy, cy, dx, dhx, dcx and ``w:<name>`` per weight); fails if any array passed in
    (x, hx, cx, the weights, lengths, dy, dhy, dcy) has changed."""
    names = ("x", "hx", "cx", "dy", "dhy", "dcy")
    passed = {k: a[k] for k in names} | a["w"] | {"lengths": a["kw"]["lengths"]}
    dev = {k: _on(backend, v) for k, v in passed.items()}
    w = {k: dev[k] for k in a["w"]}
    kw = {**a["kw"], "lengths": dev["lengths"]}
    out = cl.rnn(dev["x"], dev["hx"], w, cx=dev["cx"], training=True, algo=algo or c.algo,
                 **kw, **extra)  # fmt: skip
    y, hy, cy = out[0], out[1], out[2] if c.mode == "lstm" else None
    assert y.dtype == hy.dtype == np.dtype(c.dtype)
    dx, dhx, dcx, dw = cl.rnn_backward(dev["dy"], dev["dhy"], dev["dcy"], out[-1])
    assert list(dw) == list(a["w"])  # the weights' keys, in their order
    for name, before in passed.items():
        if before is not None:
            np.testing.assert_array_equal(to_numpy(dev[name]), before, err_msg=f"{name} changed")
    res = dict(y=y, hy=hy, cy=cy, dx=dx, dhx=dhx, dcx=dcx)
    res |= {f"w:{k}": v for k, v in dw.items()}
    return {k: None if v is None else to_numpy(v) for k, v in res.items()}


def reference(c: Case, a: dict[str, Any], **extra: Any) -> dict[str, Any]:
    """The float64 reference's results, named as ``run``'s."""
    common = dict(cx=f64(a["cx"]), dtype=c.dtype, **a["kw"], **extra)
    y, hy, cy = ref.rnn_forward(f64(a["x"]), f64(a["hx"]), _upcast(a["w"]), **common)
    dx, dhx, dcx, dw = ref.rnn_backward(f64(a["dy"]), f64(a["dhy"]), f64(a["dcy"]), f64(a["x"]),
                                        f64(a["hx"]), _upcast(a["w"]), **common)  # fmt: skip
    res = dict(y=y, hy=hy, cy=cy, dx=dx, dhx=dhx, dcx=dcx)
    return res | {f"w:{k}": v for k, v in dw.items()}


def time_major(c: Case, a: np.ndarray) -> np.ndarray:
    """x, y, dx or dy (T, N, F) whatever the layout."""
    return a.swapaxes(0, 1) if c.batch_first else a


# ------------------------------------------------------------------ properties


@HYPO
@given(case=cases())
@example(case=Case("lstm", t=1, n=1, i=1, h=1))
@example(case=Case("gru", t=1, n=1, i=1, h=1, algo=PERSISTENT, with_hx=False))
@example(case=Case("rnn_tanh", t=3, n=2, i=2, h=1, bi=True, lengths=(3, 3), algo=PERSISTENT))
@example(case=Case("rnn_relu", t=4, n=3, i=3, h=2, layers=2, bi=True, lengths=(1, 1, 1)))
@example(case=Case("lstm", t=5, n=3, i=4, h=5, layers=2, bi=True, proj=4, lengths=(1, 5, 3),
                   batch_first=True, dtype=np.float64))  # fmt: skip
@example(case=Case("lstm", t=4, n=2, i=2, h=3, proj=1, bias=False, with_hx=False, lengths=(2, 4)))
def test_forward_and_gradients_match_reference(backend: str, case: Case) -> None:
    """y, hy, cy and dx, dhx, dcx and every weight's gradient equal the float64 reference's,
    on any solver; no array passed in is modified (``run``); inference (no saves) gives the
    training forward's results bit for bit."""
    a = case.arrays()
    got = run(case, backend, a)
    assert_results_close(case, got, reference(case, a))
    kw = {**a["kw"], "lengths": _on(backend, a["kw"]["lengths"])}
    infer = cl.rnn(_on(backend, a["x"]), _on(backend, a["hx"]), _on(backend, a["w"]),
                   cx=_on(backend, a["cx"]), algo=case.algo, **kw)  # fmt: skip
    assert len(infer) == (3 if case.mode == "lstm" else 2)
    for name, v in zip(FORWARD, infer, strict=False):
        np.testing.assert_array_equal(to_numpy(v), got[name], err_msg=f"inference {name}")


@HYPO
@given(case=cases(layers=2), p=st.sampled_from([0.3, 0.6]), seed=st.integers(0, 2**31))
@example(case=Case("gru", t=2, n=1, i=1, h=1, layers=2), p=0.6, seed=0)
def test_dropout_between_layers_matches_reference(
    backend: str, case: Case, p: float, seed: int
) -> None:
    """Training with dropout: the reference draws layer k's mask from the same Philox
    stream (offset k), so results and gradients still match."""
    a = case.arrays()
    got = run(case, backend, a, dropout=p, seed=seed)
    assert_results_close(case, got, reference(case, a, dropout=p, seed=seed, training=True))


@HYPO
@given(case=cases(varlen=True))
@example(case=Case("lstm", t=1, n=1, i=1, h=1, lengths=(1,)))
@example(case=Case("gru", t=4, n=3, i=2, h=3, bi=True, lengths=(1, 1, 1), algo=PERSISTENT))
@example(case=Case("rnn_relu", t=5, n=3, i=2, h=2, layers=2, bi=True, lengths=(5, 1, 3),
                   batch_first=True))  # fmt: skip
def test_padding_is_never_read_and_outputs_there_are_zero(backend: str, case: Case) -> None:
    """Steps past a sequence's end do not exist: y and dx there are 0, and other values of x
    and dy there, NaN and inf included (PyTorch's packed sequences never read them), change
    nothing, bit for bit."""
    a = case.arrays()
    got = run(case, backend, a)
    pad = np.arange(case.t)[:, None] >= case.lens()[None, :]  # (T, N)
    for name in ("y", "dx"):
        assert not time_major(case, got[name])[pad].any(), f"{name} past a sequence's end"
    rng = np.random.default_rng(case.seed + 3)
    other = dict(a)
    for name in ("x", "dy"):
        b = time_major(case, a[name]).copy()
        junk = rng.standard_normal(b[pad].shape) * 100
        junk.reshape(-1)[::3] = np.nan  # (uninitialized padding may hold any bits)
        junk.reshape(-1)[1::5] = -np.inf
        b[pad] = junk.astype(case.dtype)
        other[name] = time_major(case, b)
    again = run(case, backend, other)
    for name, v in got.items():
        if v is None:
            assert again[name] is None
        else:
            np.testing.assert_array_equal(again[name], v, err_msg=name)


def _entry(c: Case, a: dict[str, Any], b: int) -> tuple[Case, dict[str, Any], dict[str, Any]]:
    """Batch entry b alone, cut to its own length, without lengths: its case, its arrays,
    and how to take its part of each of the batch's results but the weight gradients."""
    tb = int(c.lens()[b])

    def cut(v: np.ndarray) -> np.ndarray:  # a sequence: its first tb steps
        return time_major(c, time_major(c, v)[:tb, b : b + 1])

    def row(v: np.ndarray | None) -> np.ndarray | None:  # a state
        return None if v is None else v[:, b : b + 1]

    one = dict(a, x=cut(a["x"]), dy=cut(a["dy"]), hx=row(a["hx"]), cx=row(a["cx"]),
               dhy=row(a["dhy"]), dcy=row(a["dcy"]),
               kw={**a["kw"], "lengths": None})  # fmt: skip
    take = dict(y=cut, dx=cut, hy=row, cy=row, dhx=row, dcx=row)  # entry b of the batch's
    return replace(c, t=tb, n=1, lengths=None), one, take


@HYPO
@given(case=cases())
@example(case=Case("lstm", t=3, n=3, i=2, h=2, bi=True, lengths=(3, 3, 3)))
@example(case=Case("gru", t=5, n=3, i=1, h=4, layers=2, lengths=(1, 5, 2), batch_first=True))
@example(case=Case("rnn_tanh", t=4, n=2, i=3, h=2, bi=True, lengths=(1, 1), algo=PERSISTENT))
def test_each_sequence_equals_running_it_alone(backend: str, case: Case) -> None:
    """Entry b gives what it gives alone, cut to its own length (T_b steps, no lengths): its
    y, final states and data gradients; the weight gradients are the sum over entries."""
    a = case.arrays()
    batch = run(case, backend, a)
    weights = [k for k in batch if k.startswith("w:")]
    total = {k: np.zeros_like(batch[k]) for k in weights}
    sizes = dict.fromkeys(weights, 0.0)  # sum of the entries' scales: their errors add
    for b in range(case.n):
        alone, one, take = _entry(case, a, b)
        got = run(alone, backend, one)
        want = {k: f(batch[k]) for k, f in take.items()}
        assert_results_close(case, {k: got[k] for k in want}, want, factor=2,
                             what=f"entry {b} alone:")  # fmt: skip
        for k in weights:
            total[k] += got[k]
            sizes[k] += max(1.0, float(np.abs(got[k]).max(initial=0.0)))
    assert_results_close(case, total, {k: batch[k] for k in weights}, factor=2, scales=sizes,
                         what="sum of the entries' weight gradients:")  # fmt: skip


@st.composite
def permuted(draw: Any) -> tuple[Case, list[int]]:
    case = draw(cases())
    return case, draw(st.permutations(range(case.n)))


@HYPO
@given(pair=permuted())
@example(pair=(Case("lstm", t=2, n=3, i=2, h=3, proj=2, lengths=(2, 1, 2)), [2, 0, 1]))
@example(pair=(Case("gru", t=3, n=3, i=2, h=2, bi=True, lengths=(3, 1, 2), algo=PERSISTENT,
                    batch_first=True), [1, 2, 0]))  # fmt: skip
def test_permuting_the_batch_permutes_the_results(backend: str, pair: Any) -> None:
    """x, hx, cx, lengths, dy, dhy and dcy taken in another batch order give the results in
    that order, and the same weight gradients (summed in another order: within rounding)."""
    case, perm = pair
    a = case.arrays()
    seq_axis = 0 if case.batch_first else 1

    def take(v: np.ndarray | None, axis: int) -> np.ndarray | None:
        return None if v is None else np.take(v, perm, axis=axis)

    moved = {k: take(a[k], 1) for k in ("hx", "cx", "dhy", "dcy")}
    moved |= {k: take(a[k], seq_axis) for k in ("x", "dy")}
    lens = None if case.lengths is None else tuple(int(v) for v in take(case.lens(), 0))
    moved["kw"] = {**a["kw"], "lengths": None if lens is None else np.array(lens)}
    got = run(replace(case, lengths=lens), backend, dict(a, **moved))
    want = run(case, backend, a)
    want |= {k: take(want[k], seq_axis) for k in ("y", "dx")}
    want |= {k: take(want[k], 1) for k in ("hy", "cy", "dhx", "dcx")}
    assert_results_close(case, got, want, factor=2, what=f"batch order {perm}:")


@HYPO
@given(case=cases(proj=False))
@example(case=Case("lstm", t=1, n=1, i=1, h=1, dtype=np.float64))
@example(case=Case("gru", t=5, n=3, i=4, h=5, layers=2, bi=True, lengths=(5, 1, 3)))
@example(case=Case("rnn_relu", t=3, n=2, i=1, h=5, bi=True, lengths=(3, 3), with_hx=False))
def test_standard_and_persistent_solvers_agree(backend: str, case: Case) -> None:
    """The two forward solvers give the same results, and their saves the same gradients
    through rnn_backward, within rounding (only the order of the h W_hh^T sums differs)."""
    a = case.arrays()
    assert_results_close(case, run(case, backend, a, algo=PERSISTENT),
                         run(case, backend, a, algo=STANDARD), factor=2)  # fmt: skip


def _torch_results(c: Case, a: dict[str, Any], module: Any) -> dict[str, Any]:
    """The module's results and gradients for ``a``'s x, states and dy, dhy, dcy (packed
    sequences when there are lengths: PyTorch's semantics for ``lengths``)."""
    import torch

    def leaf(v: np.ndarray | None) -> Any:
        return None if v is None else torch.from_numpy(v.copy()).requires_grad_(True)

    # hx None: zeros as leaves, for their gradients (the library's dhx/dcx then)
    lead = (c.layers * c.dirs, c.n)
    hx = leaf(a["hx"] if a["hx"] is not None else np.zeros((*lead, c.hout), c.dtype))
    cx = leaf(a["cx"] if a["cx"] is not None else np.zeros((*lead, c.h), c.dtype))
    x = leaf(a["x"])
    state = (hx, cx) if c.mode == "lstm" else hx
    inp = x
    if c.lengths is not None:
        inp = torch.nn.utils.rnn.pack_padded_sequence(x, torch.tensor(c.lengths),
                                                      batch_first=c.batch_first,
                                                      enforce_sorted=False)  # fmt: skip
    y, hn = module(inp, state)
    if c.lengths is not None:
        y, _ = torch.nn.utils.rnn.pad_packed_sequence(y, batch_first=c.batch_first,
                                                      total_length=c.t)  # fmt: skip
    hy, cy = hn if c.mode == "lstm" else (hn, None)
    loss = (y * torch.from_numpy(a["dy"])).sum() + (hy * torch.from_numpy(a["dhy"])).sum()
    if cy is not None:
        loss = loss + (cy * torch.from_numpy(a["dcy"])).sum()
    loss.backward()

    def npy(t: Any) -> np.ndarray | None:
        return None if t is None else t.detach().numpy()

    res = dict(y=npy(y), hy=npy(hy), cy=npy(cy), dx=npy(x.grad), dhx=npy(hx.grad),
               dcx=None if cy is None else npy(cx.grad))  # fmt: skip
    return res | {f"w:{k}": npy(p.grad) for k, p in module.named_parameters()}


@pytest.mark.filterwarnings("ignore:LSTM with projections is not supported with oneDNN")
@HYPO
@given(case=cases())
@example(case=Case("lstm", t=1, n=1, i=1, h=2, proj=1, with_hx=False))
@example(case=Case("gru", t=4, n=3, i=3, h=4, layers=2, bi=True, lengths=(4, 1, 2),
                   batch_first=True, dtype=np.float64, algo=PERSISTENT))  # fmt: skip
def test_matches_torch(backend: str, case: Case) -> None:
    """torch.nn.LSTM/GRU/RNN on CPU with the same weights (rnn_weights_from_torch: the
    module's own parameters) in the same dtype; lengths as packed sequences."""
    torch = pytest.importorskip("torch")
    torch.manual_seed(case.seed)
    cls = {"lstm": torch.nn.LSTM, "gru": torch.nn.GRU}.get(case.mode, torch.nn.RNN)
    extra = {"proj_size": case.proj} if case.mode == "lstm" else {}
    if case.mode.startswith("rnn_"):
        extra["nonlinearity"] = case.mode[4:]
    dtype = torch.float64 if case.dtype == np.float64 else torch.float32
    m = cls(case.i, case.h, num_layers=case.layers, bias=case.bias, bidirectional=case.bi,
            batch_first=case.batch_first, dtype=dtype, **extra)  # fmt: skip
    a = dict(case.arrays(), w=cl.rnn_weights_from_torch(m))
    got = run(case, backend, a)
    # PyTorch rounds in its own order: both sides within their tolerance of the truth
    assert_results_close(case, got, _torch_results(case, a, m), factor=2, what="vs torch:")
