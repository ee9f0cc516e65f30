"""Launch templates' keys: anything the op's own path reads is part of the key, and calls
with out= or unkeyable arguments are never templated."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import numpy as np
import pytest
from templates_support import (
    fresh_templates,  # noqa: F401 (autouse: a clean store)
    rand,
    same_bits,
)

import cudnnlite as cl
from cudnnlite.runtime import templates

# ------------------------------------------------------------------ keys


def test_anything_the_op_reads_is_part_of_the_key(monkeypatch: pytest.MonkeyPatch) -> None:
    x, w = rand((1, 4, 8, 8), 1), rand((4, 4, 3, 3), 2)
    buf = rand((4, 65), 3)
    variants: list[tuple[Any, tuple, dict]] = [
        (cl.conv2d, (x, w), {"padding": 1}),
        (cl.conv2d, (x, w), {"padding": (1, 1)}),  # equal meaning, another value
        (cl.conv2d, (x, w), {"padding": np.int64(1)}),  # equal value, another type
        (cl.conv2d, (x, w), {"padding": 1, "alpha": 0.0}),
        (cl.conv2d, (x, w), {"padding": 1, "alpha": -0.0}),  # -0.0 == 0.0, not its sign
        (cl.conv2d, (x[:, :, ::-1], w), {"padding": 1}),  # strides
        (cl.conv2d, (np.asfortranarray(x), w), {"padding": 1}),
        (cl.conv2d, (x[:, :, :7], w), {"padding": 1}),  # shape
        (cl.conv2d, (x.astype(np.float64), w.astype(np.float64)), {"padding": 1}),
        (cl.relu, (buf[:, :64],), {}),
        (cl.relu, (np.ascontiguousarray(buf[:, :64]),), {}),
        (cl.relu, (buf.reshape(-1)[1:257],), {}),  # contiguous, not 16-byte aligned
        (cl.leaky_relu, (x, 0.5), {}),
        (cl.leaky_relu, (x, 0.25), {}),
    ]
    keys = [templates.call_key(op, args, kw) for op, args, kw in variants]
    assert all(k is not None for k in keys)
    assert len({k[0] for k in keys}) == len(keys)
    # an int or 0-d array may be a value read on the host (padding=np.array([1, 1])): its
    # contents are keyed; a float tensor's are not
    pads = [templates.call_key(cl.conv2d, (x, w), {"padding": np.array([p, p])}) for p in (1, 2)]
    assert pads[0][0] != pads[1][0]
    zero_d = [templates.call_key(cl.relu, (np.array(v, np.float32),), {}) for v in (1, 2)]
    assert zero_d[0][0] != zero_d[1][0]
    assert templates.call_key(cl.relu, (x,), {})[0] == templates.call_key(cl.relu, (x + 1,), {})[0]
    for p in (1, 2, 1):
        same_bits(cl.conv2d(x, w, padding=np.array([p, p])), cl.conv2d(x, w, padding=p))
    readonly = x.copy()
    readonly.flags.writeable = False
    assert (
        templates.call_key(cl.relu, (readonly,), {})[0]
        != templates.call_key(cl.relu, (x.copy(),), {})[0]
    )
    # another address with the same alignment is the same key: that is what is replayed
    assert (
        templates.call_key(cl.relu, (x.copy(),), {})[0]
        == templates.call_key(cl.relu, (x + 1,), {})[0]
    )
    # the dispatch settings and every switch the op's own path reads
    base = templates.call_key(cl.relu, (x,), {})[0]
    with cl.settings(deterministic=True):
        assert templates.call_key(cl.relu, (x,), {})[0] != base
    for name in ("CUDNNLITE_FORCE_SOLVER", "CUDNNLITE_EMU_POISON", "CUDNNLITE_EMU_SCHEDULE"):
        with monkeypatch.context() as env:
            env.setenv(name, "another value")
            assert templates.call_key(cl.relu, (x,), {})[0] != base, name
    assert templates.call_key(cl.relu, (x,), {})[0] == base


def test_out_and_unkeyable_arguments_are_never_templated() -> None:
    x = rand((2, 3), 1)
    assert templates.call_key(cl.relu, (x,), {"out": np.empty_like(x)}) is None
    assert templates.call_key(cl.leaky_relu, (x, Fraction(1, 4)), {}) is None
    assert templates.call_key(cl.relu, (x,), {"out": None}) is not None
    out = np.empty_like(x)
    for _ in range(2):
        assert cl.relu(x, out=out) is out
    same_bits(out, np.maximum(x, 0))
    assert templates.lookup(cl.relu, (x,), {"out": out}) is None
