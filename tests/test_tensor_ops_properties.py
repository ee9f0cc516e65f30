"""Property tests of reduce_tensor and op_tensor (hypothesis), on every backend."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from test_tensor_ops import DTYPES, check_reduce, rand  # noqa: E402

from cudnnlite import reference as ref  # noqa: E402
from cudnnlite.ops.reduce import REDUCE_OPS, reduce_tensor  # noqa: E402
from cudnnlite.ops.tensor import op_tensor  # noqa: E402
from cudnnlite.testing import assert_close, to_backend  # noqa: E402

HYPO = settings(suppress_health_check=[HealthCheck.function_scoped_fixture])


@HYPO
@given(
    shape=st.tuples(*[st.integers(1, 5)] * 4),
    axes=st.sets(st.integers(0, 3)),  # every combination of a 4-D tensor's axes, empty too
    op=st.sampled_from(REDUCE_OPS),
    dtype=st.sampled_from(DTYPES),
    keepdims=st.booleans(),
    transpose=st.booleans(),
)
def test_reduce_every_axis_combination(
    backend: str, shape: tuple, axes: set, op: str, dtype: Any, keepdims: bool, transpose: bool
) -> None:
    lo, hi = (0.5, 1.5) if op in ("mul", "mul_no_zeros") else (-2.0, 2.0)
    x = rand(shape, dtype, seed=sum(shape), lo=lo, hi=hi)
    xb = to_backend(x, backend)
    if transpose:  # a non-contiguous view of the same logical tensor
        xb = to_backend(np.ascontiguousarray(x.transpose(3, 1, 2, 0)), backend).transpose(
            3, 1, 2, 0
        )
    ax = tuple(sorted(axes))
    if not ax:  # reducing no axis: cuDNN's identity reduction (elementwise transform)
        ax_arg: Any = ()
    else:
        ax_arg = ax
    with_idx = op in ("min", "max", "amax")
    r = reduce_tensor(xb, op, ax_arg, keepdims=keepdims, return_indices=with_idx)
    if with_idx:
        check_reduce(r[0], x, op, ax_arg, keepdims, idx=r[1])
    else:
        check_reduce(r, x, op, ax_arg, keepdims)


@HYPO
@given(
    a_shape=st.lists(st.integers(1, 4), min_size=1, max_size=4),
    mask=st.lists(st.booleans(), min_size=4, max_size=4),
    op=st.sampled_from(["add", "mul", "min", "max"]),
)
def test_op_tensor_broadcasting(backend: str, a_shape: list, mask: list, op: str) -> None:
    b_shape = [1 if m else s for s, m in zip(a_shape, mask, strict=False)]
    a = rand(tuple(a_shape), np.float32, seed=1)
    b = rand(tuple(b_shape), np.float32, seed=2)
    r = op_tensor(op, to_backend(a, backend), to_backend(b, backend), alpha1=0.5, alpha2=2.0)
    assert_close(r, ref.op_tensor(op, a, b, 0.5, 2.0), np.float32)
