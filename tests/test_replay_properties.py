"""Property tests (hypothesis) of every replay mechanism against the direct call: plans
(``conv2d_plan``, ``batch_norm_inference_plan``, ``activation_plan``, ``pooling_plan``,
``softmax_plan``: ``OpPlan``), the fast path of repeated calls (launch templates and call
caches) and graphs (``cudnnlite.graph``).

Drawn: a small network conv2d -> batch norm inference -> relu -> max/avg pool -> softmax
(dtype fp32, fp16 or fp64; layout NCHW or NHWC; batch, channels, spatial size, filter size
1 or 3), a sequence of new input values, and a second network (another dtype, a larger
input or both) whose direct calls run in between. Checked, bit for bit (same kernels on
the same inputs): every plan call, repeated call and graph replay (after new values are
written into the captured input) gives the direct call's result, taken with the fast paths
off; the interleaved calls disturb neither side; a call with a changed shape, dtype,
strides or alignment on a cached key gives the direct result or raises the direct call's
BadParamError, and a plan refuses an x it was not made for; no input is ever modified.
"""

from __future__ import annotations

import contextlib
import os
from typing import Any

import numpy as np
import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from property_support import assert_untouched, same_bits, snapshot, xp_of  # noqa: E402

import cudnnlite as cl  # noqa: E402
from cudnnlite.errors import BadParamError  # noqa: E402
from cudnnlite.testing import to_backend, to_numpy  # noqa: E402

HYPO = settings(
    max_examples=int(os.environ.get("CUDNNLITE_HYPOTHESIS_EXAMPLES", "10")),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
DTYPES = ("float32", "float16", "float64")
# The interleaved calls' network: its dtype, and whether it is larger (else the same shape)
ALT = st.tuples(st.sampled_from(DTYPES), st.booleans())


@st.composite
def nets(draw: Any) -> dict[str, Any]:
    """A tiny network's configuration: dtype, layout, shapes, pooling mode."""
    return {
        "dtype": draw(st.sampled_from(DTYPES)),
        "layout": draw(st.sampled_from(["NCHW", "NHWC"])),
        "n": draw(st.integers(1, 2)),
        "c": draw(st.integers(1, 3)),
        "k": draw(st.integers(1, 3)),
        "hw": (draw(st.integers(4, 6)), draw(st.integers(4, 6))),
        "r": draw(st.sampled_from([1, 3])),
        "pool": draw(st.sampled_from(["max", "avg_include_pad"])),
        "seed": draw(st.integers(0, 2**16)),
    }


def x_shape(net: dict[str, Any], hw: tuple[int, int] | None = None) -> tuple[int, ...]:
    h, w = hw or net["hw"]
    n, c = net["n"], net["c"]
    return (n, c, h, w) if net["layout"] == "NCHW" else (n, h, w, c)


def w_shape(net: dict[str, Any]) -> tuple[int, ...]:
    k, c, r = net["k"], net["c"], net["r"]
    return (k, c, r, r) if net["layout"] == "NCHW" else (k, r, r, c)


def rand(backend: str, shape: tuple[int, ...], dtype: str, seed: int, scale: float = 1.0) -> Any:
    a = np.random.default_rng(seed).standard_normal(shape) * scale
    return to_backend(a.astype(dtype), backend)


def params(backend: str, net: dict[str, Any]) -> dict[str, Any]:
    """The network's weights: filter, bias and batch norm's statistics and affine."""
    dt, k, s = net["dtype"], net["k"], net["seed"]
    acc = "float64" if dt == "float64" else "float32"  # batch norm's parameter type
    var = np.abs(np.random.default_rng(s + 5).standard_normal(k)) + 0.5
    return {
        "w": rand(backend, w_shape(net), dt, s + 1, 0.5),
        "b": rand(backend, (k,), dt, s + 2, 0.1),
        "mean": rand(backend, (k,), acc, s + 3, 0.1),
        "var": to_backend(var.astype(acc), backend),
        "gamma": rand(backend, (k,), acc, s + 6),
        "beta": rand(backend, (k,), acc, s + 7, 0.1),
    }


def caxis(net: dict[str, Any]) -> int:
    return 1 if net["layout"] == "NCHW" else 3


def direct(x: Any, p: dict[str, Any], net: dict[str, Any]) -> list[Any]:
    """The network as direct functional calls, every output a new array."""
    lay = net["layout"]
    h = cl.conv2d(x, p["w"], p["b"], padding=net["r"] // 2, layout=lay)
    bn = cl.batch_norm_forward_inference(h, p["mean"], p["var"], p["gamma"], p["beta"],
                                         layout=lay)  # fmt: skip
    r = cl.relu(bn)
    if net["pool"] == "max":
        q = cl.max_pool2d(r, 2, 1, layout=lay)
    else:
        q = cl.avg_pool2d(r, 2, 1, count_include_pad=True, layout=lay)
    return [h, bn, r, q, cl.softmax(q, caxis(net))]


def reference(x: Any, p: dict[str, Any], net: dict[str, Any]) -> list[np.ndarray]:
    """The direct calls with the fast paths off (full checks and dispatch)."""
    with cl.fast_paths_off():
        return [to_numpy(a).copy() for a in direct(x, p, net)]


def make_plans(backend: str, net: dict[str, Any]) -> dict[str, Any]:
    dt, lay = net["dtype"], net["layout"]
    xs = x_shape(net)
    conv = cl.conv2d_plan(xs, w_shape(net), padding=net["r"] // 2, dtype=dt, layout=lay,
                          backend=backend)  # fmt: skip
    ys = xs[:3] + (net["k"],) if lay == "NHWC" else (xs[0], net["k"], *xs[2:])
    bn = cl.batch_norm_inference_plan(ys, layout=lay, dtype=dt, backend=backend)
    relu = cl.activation_plan(ys, "relu", dtype=dt, backend=backend)
    pool = cl.pooling_plan(ys, net["pool"], 2, 1, layout=lay, dtype=dt, backend=backend)
    qs = tuple(s - 1 for s in ys[2:]) if lay == "NCHW" else tuple(s - 1 for s in ys[1:3])
    qs = (ys[0], ys[1], *qs) if lay == "NCHW" else (ys[0], *qs, ys[3])
    soft = cl.softmax_plan(qs, caxis(net), dtype=dt, backend=backend)
    assert all(isinstance(op, cl.OpPlan) for op in (bn, relu, pool, soft))
    return {"conv": conv, "bn": bn, "relu": relu, "pool": pool, "soft": soft}


def planned(x: Any, p: dict[str, Any], plans: dict[str, Any]) -> list[Any]:
    h = plans["conv"](x, p["w"], p["b"])
    bn = plans["bn"](h, p["mean"], p["var"], p["gamma"], p["beta"])
    r = plans["relu"](bn)
    q = plans["pool"](r)
    return [h, bn, r, q, plans["soft"](q)]


def all_same_bits(got: list[Any], want: list[np.ndarray], what: str) -> None:
    """Each output of a network call has the direct call's bits."""
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        same_bits(g, w, f"{what}: output {i} differs from the direct call")


def other_net(net: dict[str, Any], alt: tuple[str, bool] | None = None) -> dict[str, Any]:
    """The network on a spatially larger input (another key for every op), or with ``alt``
    = (dtype, larger): in that dtype, larger or of the same shape."""
    dtype, grow = alt or (net["dtype"], True)
    h, w = net["hw"]
    return {**net, "dtype": dtype, "hw": (h + 1, w + 2) if grow else (h, w)}


def second_net(backend: str, net: dict[str, Any], alt: tuple[str, bool]) -> tuple:
    """The network whose calls interleave with ``net``'s (:func:`other_net`): it, its
    parameters, an input and its direct results."""
    other = other_net(net, alt)
    po = params(backend, other)
    xo = rand(backend, x_shape(other), other["dtype"], net["seed"] + 99)
    return other, po, xo, reference(xo, po, other)


def outcome(fn: Any, *args: Any) -> tuple[str, Any]:
    """fn(*args)'s ("ok", host copy of the result) or ("error", the BadParamError's message)."""
    try:
        y = fn(*args)
    except BadParamError as exc:
        return "error", str(exc)
    return "ok", to_numpy(y).copy()


def assert_same_outcome(got: tuple[str, Any], want: tuple[str, Any], what: str) -> None:
    assert got[0] == want[0], f"{what}: {got[0]} where the direct call gave {want[0]}: {got[1]}"
    if got[0] == "error":
        assert got[1] == want[1], what
    else:
        assert got[1].dtype == want[1].dtype and got[1].shape == want[1].shape, what
        assert got[1].tobytes() == want[1].tobytes(), f"{what}: result differs"


# ------------------------------------------------------------------ plans


@HYPO
@given(net=nets(), replays=st.integers(2, 3), alt=ALT)
def test_plans_replay_the_direct_calls_between_other_shapes(
    backend: str, net: dict[str, Any], replays: int, alt: tuple[str, bool]
) -> None:
    p = params(backend, net)
    plans = make_plans(backend, net)
    other, po, xo, want_other = second_net(backend, net, alt)
    for i in range(replays):
        x = rand(backend, x_shape(net), net["dtype"], net["seed"] + 10 + i)
        inputs = (x, xo, *p.values(), *po.values())
        before = snapshot(*inputs)
        want = reference(x, p, net)
        all_same_bits(planned(x, p, plans), want, f"plan call {i}")
        # a direct call of another shape between plan calls: both keep their results
        all_same_bits(direct(xo, po, other), want_other, f"direct call of another shape, {i}")
        all_same_bits(planned(x, p, plans), want, f"plan call {i} after another shape")
        all_same_bits(direct(x, p, net), want, f"direct call {i} after the plans")
        assert_untouched(inputs, before)


@HYPO
@given(net=nets(), change=st.sampled_from(["shape", "dtype", "kind"]))
def test_a_plan_refuses_what_it_was_not_made_for(
    backend: str, net: dict[str, Any], change: str
) -> None:
    """After the plans have run (their caches filled), an x of another shape or dtype, or a
    non-array, raises BadParamError and leaves the plans working."""
    p = params(backend, net)
    plans = make_plans(backend, net)
    x = rand(backend, x_shape(net), net["dtype"], net["seed"] + 10)
    want = reference(x, p, net)
    all_same_bits(planned(x, p, plans), want, "first plan call")
    if change == "shape":
        bad = rand(backend, x_shape(other_net(net)), net["dtype"], 3)
    elif change == "dtype":
        other = "float64" if net["dtype"] != "float64" else "float32"
        bad = xp_of(backend).asarray(x, dtype=other)
    else:
        bad = to_numpy(x).tolist()
    before = snapshot(x)
    for name in ("relu", "soft"):
        with pytest.raises(BadParamError):
            plans[name](bad)
    with pytest.raises(BadParamError):
        plans["conv"](bad, p["w"], p["b"])
    assert_untouched((x,), before)
    all_same_bits(planned(x, p, plans), want, "plan call after a refused one")


# ------------------------------------------------------------------ the fast path


@HYPO
@given(net=nets(), replays=st.integers(2, 4), alt=ALT)
def test_repeated_direct_calls_match_the_full_path(
    backend: str, net: dict[str, Any], replays: int, alt: tuple[str, bool]
) -> None:
    """Repeated direct calls (launch templates, call caches) on new values give the full
    path's results, interleaved with calls of another shape."""
    p = params(backend, net)
    other, po, xo, want_other = second_net(backend, net, alt)
    for i in range(replays):
        x = rand(backend, x_shape(net), net["dtype"], net["seed"] + 10 + i)
        inputs = (x, xo, *p.values(), *po.values())
        before = snapshot(*inputs)
        want = reference(x, p, net)
        all_same_bits(direct(x, p, net), want, f"call {i}")
        all_same_bits(direct(xo, po, other), want_other, f"call {i} of another shape")
        all_same_bits(direct(x, p, net), want, f"call {i} again")
        assert isinstance(cl.fast_path(cl.relu, x), str)
        if i == replays - 1:  # process-wide off and on again (the caches emptied)
            try:
                cl.set_fast_paths(False)
                all_same_bits(direct(x, p, net), want, "fast paths off")
            finally:
                cl.set_fast_paths(True)
            all_same_bits(direct(x, p, net), want, "fast paths on again")
            all_same_bits(direct(x, p, net), want, "fast paths on again, repeated")
        assert_untouched(inputs, before)


VARIANTS = ("strided", "transposed", "offset", "dtype_x", "dtype_all", "shape", "fortran")


def variant(x: Any, p: dict[str, Any], net: dict[str, Any], kind: str) -> tuple[Any, Any]:
    """(x, w) changed in one way the cached key must notice."""
    xp = xp_of(x)
    w = p["w"]
    if kind == "strided":
        big = xp.repeat(x, 2, axis=-1)
        return big[..., ::2], w
    if kind == "transposed":  # the same shape, other strides (H and W swapped in memory)
        return xp.ascontiguousarray(xp.swapaxes(x, -1, -2)).swapaxes(-1, -2), w
    if kind == "offset":
        flat = xp.concatenate([xp.zeros(1, x.dtype), x.ravel()])
        return flat[1:].reshape(x.shape), w
    if kind == "fortran":
        return xp.asfortranarray(x), w
    other = "float32" if net["dtype"] != "float32" else "float64"
    if kind == "dtype_x":
        return x.astype(other), w
    if kind == "dtype_all":
        return x.astype(other), w.astype(other)
    return x[..., :-1], w  # "shape"


@HYPO
@given(net=nets(), kinds=st.lists(st.sampled_from(VARIANTS), min_size=1, max_size=3))
def test_changed_calls_on_a_cached_key_act_as_direct_calls(
    backend: str, net: dict[str, Any], kinds: list[str]
) -> None:
    """After a call is cached (twice run), the same op with x (and w) changed in shape,
    dtype, strides or alignment gives the full path's result or raises its BadParamError;
    the cached call still gives its own result afterwards."""
    p = params(backend, net)
    lay = net["layout"]
    x = rand(backend, x_shape(net), net["dtype"], net["seed"] + 10)
    pad = net["r"] // 2

    def conv(x: Any, w: Any) -> Any:  # (the bias in w's dtype: "dtype_all" is a valid call)
        return cl.conv2d(x, w, p["b"].astype(w.dtype), padding=pad, layout=lay)

    ops = {
        "conv2d": conv,
        "relu": lambda x, w: cl.relu(x),
        "softmax": lambda x, w: cl.softmax(x, caxis(net)),
        "max_pool2d": lambda x, w: cl.max_pool2d(x, 2, 1, layout=lay),
    }
    for name, op in ops.items():
        with cl.fast_paths_off():
            want = outcome(op, x, p["w"])
        for _ in range(2):
            assert_same_outcome(outcome(op, x, p["w"]), want, f"{name} cached")
        for kind in kinds:
            vx, vw = variant(x, p, net, kind)
            before = snapshot(vx, vw)
            got = outcome(op, vx, vw)
            with cl.fast_paths_off():
                full = outcome(op, vx, vw)
            assert_same_outcome(got, full, f"{name} on {kind} input")
            assert_untouched((vx, vw), before)
        assert_same_outcome(outcome(op, x, p["w"]), want, f"{name} after variants")


# ------------------------------------------------------------------ graphs


def capture_stream(backend: str) -> Any:
    if backend == "cpu":
        return contextlib.nullcontext()
    import cupy

    return cupy.cuda.Stream(non_blocking=True)


@HYPO
@given(net=nets(), use_plans=st.booleans(), replays=st.integers(1, 3), alt=ALT)
def test_graph_replays_on_new_values_match_direct_calls(
    backend: str, net: dict[str, Any], use_plans: bool, replays: int, alt: tuple[str, bool]
) -> None:
    """A captured network (direct calls or plans) replayed after new values are written
    into its input buffer gives the direct calls' results, with direct calls of another
    shape in between; the weights and statistics are never modified."""
    p = params(backend, net)
    plans = make_plans(backend, net) if use_plans else None
    other, po, xo, want_other = second_net(backend, net, alt)
    x = rand(backend, x_shape(net), net["dtype"], net["seed"] + 10)
    weights = (xo, *p.values(), *po.values())
    before_w = snapshot(*weights)
    with capture_stream(backend) as stream:
        with cl.graph(backend) as g:
            recorded = planned(x, p, plans) if plans else direct(x, p, net)
        if backend == "cpu":  # the emulator ran the calls while recording
            all_same_bits(recorded, reference(x, p, net), "capture")
        for i in range(replays):
            fresh = rand(backend, x.shape, net["dtype"], net["seed"] + 20 + i)
            x[...] = fresh
            before_x = snapshot(x)
            g.replay()
            if stream is not None:
                stream.synchronize()
            want = reference(x, p, net)
            all_same_bits(recorded, want, f"replay {i}")
            all_same_bits(direct(xo, po, other), want_other, f"other shape after replay {i}")
            all_same_bits(direct(x, p, net), want, f"direct call after replay {i}")
            assert_untouched((x,), before_x)
    assert_untouched(weights, before_w)
