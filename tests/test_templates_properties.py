"""Property tests of launch templates (hypothesis): for arrays of any shape and layout
(views with steps, transposes, offsets), a repeated call of a templated op on new data
gives the op's own result bit for bit, whether it was replayed or refused. Kept apart
from the test_templates_*.py files so that a machine without hypothesis still runs those."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import cudnnlite as cl  # noqa: E402
from cudnnlite.errors import BadParamError  # noqa: E402
from cudnnlite.ops import _fastpath  # noqa: E402
from cudnnlite.runtime import templates  # noqa: E402
from cudnnlite.testing import to_backend, to_numpy  # noqa: E402

HYPO = settings(suppress_health_check=[HealthCheck.function_scoped_fixture], max_examples=20)

# One-input ops over 4-D float32 arrays (modules other tests compile already).
OPS: dict[str, Callable[[Any], Any]] = {
    "relu": cl.relu,
    "sigmoid": cl.sigmoid,
    "softmax": lambda x: cl.softmax(x, 1),
    "log_softmax": lambda x: cl.log_softmax(x, -1),
    "max_pool2d": lambda x: cl.max_pool2d(x, 2, 1),
    "avg_pool2d": lambda x: cl.avg_pool2d(x, 3, 1, 1),
    "layer_norm": lambda x: cl.layer_norm(x, x.shape[-1:]),
    "rms_norm": lambda x: cl.rms_norm(x, x.shape[-2:]),
    "reduce_tensor": lambda x: cl.reduce_tensor(x, "max", axes=(1, 3)),
    "transform_tensor": lambda x: cl.transform_tensor(x, dtype=np.float16),
}


@st.composite
def layouts(draw: Any) -> tuple[tuple[int, ...], tuple[slice, ...], tuple[int, ...], int]:
    """A 4-D base shape, a view of it (slices with steps), an axes order and an element
    offset of the whole base: arrays of any layout and alignment."""
    shape = tuple(draw(st.integers(2, 6)) for _ in range(4))
    view = tuple(
        slice(draw(st.integers(0, 1)), None, draw(st.sampled_from([1, 1, 2]))) for _ in shape
    )
    order = tuple(draw(st.permutations(range(4))))
    return shape, view, order, draw(st.integers(0, 3))


def make(layout: tuple, seed: int) -> np.ndarray:
    shape, view, order, offset = layout
    size = int(np.prod(shape))
    flat = np.random.default_rng(seed).standard_normal(size + offset).astype(np.float32)
    return flat[offset:].reshape(shape)[view].transpose(order)


@HYPO
@given(layout=layouts(), name=st.sampled_from(sorted(OPS)))
def test_a_repeated_call_gives_the_ops_own_result(backend: str, layout: tuple, name: str) -> None:
    op = OPS[name]
    _fastpath.clear_all()
    # (on CUDA, to_backend's copies are dense: the layouts are the emulator's to vary)
    first, second = to_backend(make(layout, 1), backend), to_backend(make(layout, 2), backend)
    try:
        op(first)
    except BadParamError:
        hypothesis.reject()  # (a view too small for the pooling window)
    got = op(second)  # a replay (checked by CUDNNLITE_TEMPLATE_CHECK) or the op's own path
    with templates.disabled():
        want = op(second)
    a, b = to_numpy(got), to_numpy(want)
    assert a.dtype == b.dtype and a.shape == b.shape
    assert a.tobytes() == b.tobytes()


@st.composite
def conv_cases(draw: Any) -> tuple[tuple[int, ...], tuple[int, ...], dict[str, Any], bool]:
    groups = draw(st.sampled_from([1, 1, 2]))
    c, k = groups * draw(st.integers(1, 4)), groups * draw(st.integers(1, 4))
    r = draw(st.integers(1, 3))
    kw = {
        "stride": draw(st.integers(1, 2)),
        "padding": draw(st.integers(0, 2)),
        "dilation": draw(st.integers(1, 2)),
        "groups": groups,
    }
    hw = draw(st.integers(r * kw["dilation"], 9))
    x_shape = (draw(st.integers(1, 2)), c, hw, draw(st.integers(r * kw["dilation"], 9)))
    return x_shape, (k, c // groups, r, r), kw, draw(st.booleans())


@HYPO
@given(case=conv_cases())
def test_a_repeated_convolution_gives_the_ops_own_result(backend: str, case: tuple) -> None:
    x_shape, w_shape, kw, channels_last = case
    _fastpath.clear_all()
    rng = np.random.default_rng(0)

    def operands() -> tuple[Any, Any, Any]:
        x = rng.standard_normal(x_shape).astype(np.float32)
        if channels_last:  # NCHW shape, NHWC memory
            x = np.ascontiguousarray(x.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)
        w = rng.standard_normal(w_shape).astype(np.float32)
        b = rng.standard_normal(w_shape[0]).astype(np.float32)
        return to_backend(x, backend), to_backend(w, backend), to_backend(b, backend)

    cl.conv2d(*operands(), **kw)
    again = operands()
    got = cl.conv2d(*again, **kw)
    with templates.disabled():
        want = cl.conv2d(*again, **kw)
    assert to_numpy(got).tobytes() == to_numpy(want).tobytes()


@HYPO
@given(case=conv_cases(), direction=st.sampled_from(["data", "filter", "bias", "transpose"]))
def test_a_repeated_backward_convolution_gives_the_ops_own_result(
    backend: str, case: tuple, direction: str
) -> None:
    """Backward data / filter / bias and the transposed convolution (NCHW) over the same
    cases: the second call (new dy) is a replay or the op's own path, bit for bit."""
    x_shape, w_shape, kw, _ = case
    _fastpath.clear_all()
    rng = np.random.default_rng(0)
    x = rng.standard_normal(x_shape).astype(np.float32)
    w = rng.standard_normal(w_shape).astype(np.float32)
    y_shape = cl.conv2d(x, w, **kw).shape
    r = w_shape[2]
    # conv_transpose2d of dy with w is backward data: the output padding that gives x's size
    output_padding = tuple(
        i - ((o - 1) * kw["stride"] - 2 * kw["padding"] + kw["dilation"] * (r - 1) + 1)
        for i, o in zip(x_shape[2:], y_shape[2:], strict=True)
    )
    x, w = to_backend(x, backend), to_backend(w, backend)
    ops: dict[str, Callable[[Any], Any]] = {
        "data": lambda dy: cl.conv2d_backward_data(dy, w, x_shape, **kw),
        "filter": lambda dy: cl.conv2d_backward_filter(x, dy, w_shape, **kw),
        "bias": cl.conv2d_backward_bias,
        "transpose": lambda dy: cl.conv_transpose2d(dy, w, output_padding=output_padding,
                                                    **kw),
    }  # fmt: skip
    op = ops[direction]
    op(to_backend(rng.standard_normal(y_shape).astype(np.float32), backend))
    dy = to_backend(rng.standard_normal(y_shape).astype(np.float32), backend)
    got = op(dy)
    with templates.disabled():
        want = op(dy)
    assert to_numpy(got).tobytes() == to_numpy(want).tobytes()
