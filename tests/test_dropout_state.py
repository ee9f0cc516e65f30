"""PhiloxState: dropout whose Philox offset lives on the device (issue 13: a graph or a
launch template replays a training step with a fresh mask each time).

Every result is compared bit for bit with dropout at the integer (seed, offset) the state
holds then (the mask is a pure function of both: tests/test_dropout.py pins it against the
reference), eagerly, through launch templates (the suite sets CUDNNLITE_TEMPLATE_CHECK, so
each replay is also compared with the op's own call, the counter restored between them)
and through graph replays.
"""

from __future__ import annotations

import numpy as np
import pytest

import cudnnlite as cl
from cudnnlite.errors import BadParamError
from cudnnlite.runtime import templates
from cudnnlite.testing import to_backend, to_numpy


def rand(shape: tuple[int, ...], dtype=np.float32, seed: int = 0):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_state_equals_integer_offsets_and_advances(backend: str, dtype) -> None:
    x = to_backend(rand((5, 37), dtype), backend)
    dy = to_backend(rand((5, 37), dtype, 1), backend)
    state = cl.PhiloxState(7, offset=3, backend=backend)
    assert state.offset == 3 and state.seed == 7
    for k in range(3, 8):
        y, mask = cl.dropout(x, 0.3, seed=state, return_mask=True)
        want, want_mask = cl.dropout(x, 0.3, seed=7, offset=k, return_mask=True)
        assert np.array_equal(to_numpy(y), to_numpy(want)), k
        assert np.array_equal(to_numpy(mask), to_numpy(want_mask)), k
        dx = cl.dropout_backward(dy, 0.3, seed=state)  # the forward's offset: not moved
        assert np.array_equal(to_numpy(dx), to_numpy(cl.dropout_backward(dy, 0.3, seed=7,
                                                                          offset=k)))  # fmt: skip
        state.advance()
    assert state.offset == 8
    state.advance(5)
    assert state.offset == 13
    state.advance(0)
    assert state.offset == 13
    # a per-call offset adds to the counter (an RNN's layer within a step)
    assert np.array_equal(to_numpy(cl.dropout(x, 0.3, seed=state, offset=2)),
                          to_numpy(cl.dropout(x, 0.3, seed=7, offset=15)))  # fmt: skip
    assert np.array_equal(to_numpy(cl.dropout_backward(dy, 0.3, seed=state, offset=2)),
                          to_numpy(cl.dropout_backward(dy, 0.3, seed=7, offset=15)))  # fmt: skip


def test_repeated_calls_are_templated_and_read_the_counter_then() -> None:
    """The second call with the same state is a template replay (the counter is used in
    place, not copied as a temporary), and the advance is one too."""
    x = rand((64,))
    state = cl.PhiloxState(11, backend="cpu")
    cl.dropout(x, 0.5, seed=state)
    state.advance()
    assert cl.fast_path(cl.dropout, x, 0.5, seed=state).startswith("replayed: 1 launch(es)")
    for k in range(1, 4):
        assert np.array_equal(cl.dropout(x, 0.5, seed=state),
                              cl.dropout(x, 0.5, seed=11, offset=k)), k  # fmt: skip
        state.advance()
    assert state.offset == 4  # one add per advance, replayed or not
    assert templates.lookup(cl.dropout, (x, 0.5), {"seed": state}) is not None


def test_a_graph_replays_a_training_step_with_a_fresh_mask() -> None:
    """Forward dropout, its backward and the advance in one emulator graph: replay k uses
    offset k, as eager calls would."""
    x, dy = rand((3, 50)), rand((3, 50), seed=1)
    state = cl.PhiloxState(5, backend="cpu")
    y, dx = np.empty_like(x), np.empty_like(dy)
    with cl.graph() as g:
        cl.dropout(x, 0.25, seed=state, out=y)
        cl.dropout_backward(dy, 0.25, seed=state, out=dx)
        state.advance()
    assert state.offset == 1  # the recording ran the step once
    for k in range(1, 4):
        g.replay()
        assert np.array_equal(y, cl.dropout(x, 0.25, seed=5, offset=k)), k
        assert np.array_equal(dx, cl.dropout_backward(dy, 0.25, seed=5, offset=k)), k
    assert state.offset == 4


def test_bad_arguments() -> None:
    x = rand((8,))
    before = x.copy()
    state = cl.PhiloxState(1, backend="cpu")
    with pytest.raises(BadParamError, match="offset"):
        cl.dropout(x, 0.5, seed=state, offset=-1)
    with pytest.raises(BadParamError, match="offset: a PhiloxState holds offsets below 2"):
        cl.PhiloxState(1, offset=2**53)
    with pytest.raises(BadParamError, match="seed"):
        cl.PhiloxState(-1)
    for n in (-1, 1.5, True, "2", 2**53):
        with pytest.raises(BadParamError, match="n: expected an integer >= 0"):
            state.advance(n)
    assert state.offset == 0
    other = cl.PhiloxState(1, backend="cpu")
    other.backend = object.__new__(type(other.backend))  # a state made for another backend
    other.backend.name = "cuda"
    with pytest.raises(BadParamError, match="seed: the PhiloxState lives on cuda"):
        cl.dropout(x, 0.5, seed=other)
    assert np.array_equal(x, before)
    assert "PhiloxState seed=1 on cpu" in repr(state)


# ------------------------------------------------------------------ attention dropout
# scaled_dot_product_attention(seed=state): every solver that runs dropout reads the
# counter on the device (the parameter struct's counter pointer), so its result equals
# the integer (seed, counter + offset) call's, bit for bit, forward and backward.
ATTN_CASES = [
    ("fp32", "sdpa_fwd_flash_fp32", "sdpa_bwd_flash_fp32"),
    ("fp32", "sdpa_fwd_unfused", "sdpa_bwd_unfused"),
    ("fp64", "sdpa_fwd_flash_fp32", "sdpa_bwd_flash_fp32"),
    ("fp16", "sdpa_fwd_flash_tc", "sdpa_bwd_flash_tc"),
    ("fp16", "sdpa_fwd_flash_tc", "sdpa_bwd_flash_tc_split"),
]


def _qkv(dtype: str):
    dt = {"fp32": np.float32, "fp64": np.float64, "fp16": np.float16}[dtype]
    q = rand((1, 2, 16, 32), dt)
    return q, rand((1, 2, 24, 32), dt, 1), rand((1, 2, 24, 32), dt, 2), rand((1, 2, 16, 32), dt, 3)


@pytest.mark.parametrize("dtype, fwd, bwd", ATTN_CASES, ids=lambda v: str(v))
def test_attention_dropout_reads_the_state(backend: str, dtype: str, fwd: str, bwd: str) -> None:
    q, k, v, dout = (to_backend(a, backend) for a in _qkv(dtype))
    state = cl.PhiloxState(9, offset=4, backend=backend)
    sdpa, sdpa_bwd = cl.scaled_dot_product_attention, cl.scaled_dot_product_attention_backward
    for step in range(2):
        at = 4 + step
        got, lse = sdpa(q, k, v, dropout_p=0.25, seed=state, offset=1, return_lse=True, algo=fwd)
        want, _ = sdpa(q, k, v, dropout_p=0.25, seed=9, offset=at + 1, return_lse=True,
                       algo=fwd)  # fmt: skip
        assert np.array_equal(to_numpy(got), to_numpy(want)), step
        grads = sdpa_bwd(dout, q, k, v, got, lse, dropout_p=0.25, seed=state, offset=1,
                         algo=bwd)  # fmt: skip
        wants = sdpa_bwd(dout, q, k, v, got, lse, dropout_p=0.25, seed=9, offset=at + 1,
                         algo=bwd)  # fmt: skip
        for name, a, b in zip("qkv", grads, wants, strict=True):
            assert np.array_equal(to_numpy(a), to_numpy(b)), (step, name)
        state.advance()
    assert state.offset == 6


def test_attention_graph_replays_a_step_with_a_fresh_mask() -> None:
    """Forward attention with dropout, its backward and the advance in one emulator graph:
    replay k draws at offset k, as eager calls would."""
    q, k, v, dout = _qkv("fp32")
    state = cl.PhiloxState(3, backend="cpu")
    o = np.empty_like(q)
    with cl.graph() as g:
        _, lse = cl.scaled_dot_product_attention(q, k, v, dropout_p=0.5, seed=state, out=o,
                                                 return_lse=True)  # fmt: skip
        dq, dk, dv = cl.scaled_dot_product_attention_backward(dout, q, k, v, o, lse,
                                                              dropout_p=0.5, seed=state)
        state.advance()
    for step in range(1, 3):
        g.replay()
        want, want_lse = cl.scaled_dot_product_attention(q, k, v, dropout_p=0.5, seed=3,
                                                         offset=step, return_lse=True)
        assert np.array_equal(o, want), step
        wants = cl.scaled_dot_product_attention_backward(dout, q, k, v, want, want_lse,
                                                         dropout_p=0.5, seed=3, offset=step)
        for name, a, b in zip("qkv", (dq, dk, dv), wants, strict=True):
            assert np.array_equal(a, b), (step, name)
    assert state.offset == 3


def test_attention_repeated_calls_are_templated_with_the_state() -> None:
    q, k, v, _ = _qkv("fp32")
    state = cl.PhiloxState(21, backend="cpu")
    sdpa = cl.scaled_dot_product_attention
    sdpa(q, k, v, dropout_p=0.5, seed=state)
    assert cl.fast_path(sdpa, q, k, v, dropout_p=0.5, seed=state).startswith("replayed")
    for step in range(3):
        assert np.array_equal(sdpa(q, k, v, dropout_p=0.5, seed=state),
                              sdpa(q, k, v, dropout_p=0.5, seed=21, offset=step)), step
        state.advance()


def test_attention_state_bad_arguments() -> None:
    q, k, v, _ = _qkv("fp32")
    before = q.copy()
    state = cl.PhiloxState(1, backend="cpu")
    with pytest.raises(BadParamError, match="offset"):
        cl.scaled_dot_product_attention(q, k, v, dropout_p=0.5, seed=state, offset=-1)
    with pytest.raises(BadParamError, match="seed: expected an integer in .* or a PhiloxState"):
        cl.scaled_dot_product_attention(q, k, v, dropout_p=0.5, seed=1.5)
    np.testing.assert_array_equal(q, before)
