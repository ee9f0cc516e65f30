"""Property tests (hypothesis) of convolution backward: the adjoint identity
<conv(x, w), dy> == <x, bwd_data(dy, w)> == <w, bwd_filter(x, dy)> over random
problems (strides with gaps, dilation, groups, asymmetric padding, both layouts),
through the dispatcher on every backend."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import cudnnlite.ops.conv_backward as cb  # noqa: E402
from cudnnlite.reference.conv import conv_forward  # noqa: E402
from cudnnlite.testing import to_backend, to_numpy  # noqa: E402


@st.composite
def problems(draw: st.DrawFn) -> dict:
    groups = draw(st.sampled_from([1, 1, 2, 3]))
    c = groups * draw(st.integers(1, 3))
    k = groups * draw(st.integers(1, 3))
    r, s = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    stride = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    dil = (draw(st.integers(1, 2)), draw(st.integers(1, 2)))
    pads = tuple(draw(st.integers(0, 2)) for _ in range(4))
    h = draw(st.integers(max(1, dil[0] * (r - 1) + 1 - pads[0] - pads[1]), 9))
    w = draw(st.integers(max(1, dil[1] * (s - 1) + 1 - pads[2] - pads[3]), 9))
    layout = draw(st.sampled_from(["NCHW", "NHWC"]))
    return dict(n=draw(st.integers(1, 2)), c=c, k=k, h=h, w=w, r=r, s=s, stride=stride,
                dil=dil, pads=pads, groups=groups, layout=layout,
                seed=draw(st.integers(0, 2**16)))  # fmt: skip


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(problems())
def test_adjoint_identity(backend: str, pr: dict) -> None:
    rng = np.random.default_rng(pr["seed"])
    cl = pr["layout"] == "NHWC"
    n, c, k, g = pr["n"], pr["c"], pr["k"], pr["groups"]
    x_shape = (n, pr["h"], pr["w"], c) if cl else (n, c, pr["h"], pr["w"])
    w_shape = (k, pr["r"], pr["s"], c // g) if cl else (k, c // g, pr["r"], pr["s"])
    x = rng.standard_normal(x_shape).astype(np.float32)
    w = rng.standard_normal(w_shape).astype(np.float32)
    p = pr["pads"]
    pads = [(p[0], p[1]), (p[2], p[3])]
    y = conv_forward(x, w, pads, pr["stride"], pr["dil"], g, cl)
    dy = rng.standard_normal(y.shape).astype(np.float32)
    conv = dict(stride=pr["stride"], padding=p, dilation=pr["dil"], groups=g,
                layout=pr["layout"])  # fmt: skip
    dx = to_numpy(cb.conv2d_backward_data(to_backend(dy, backend), to_backend(w, backend),
                                          x_shape, **conv))  # fmt: skip
    dw = to_numpy(cb.conv2d_backward_filter(to_backend(x, backend), to_backend(dy, backend),
                                            w_shape, **conv))  # fmt: skip
    lhs = float(np.sum(y * dy))
    # fp32 accumulation of each gradient element (<= K*R*S or N*P*Q terms), then a float64
    # dot: the error is bounded by terms * 2^-24 * sum |x| |dx-magnitude|; 1e-4 of the
    # sum of |products| is far above it and far below a wrong gradient's deviation.
    scale = float(np.sum(np.abs(y) * np.abs(dy))) + 1e-3
    assert abs(float(np.sum(x.astype(np.float64) * dx)) - lhs) <= 1e-4 * scale + 1e-4
    assert abs(float(np.sum(w.astype(np.float64) * dw)) - lhs) <= 1e-4 * scale + 1e-4
