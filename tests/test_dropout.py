"""Dropout and its Philox4x32-10 generator on every backend.

The mask must equal the NumPy reference bit for bit (a pure function of seed, offset and
element index); values are x * float32(1 / (1 - p)) rounded once to the storage type
(float64: x * (1 / (1 - p)) in double, one rounding), so the tolerance is one storage
rounding (cudnnlite.testing's elementwise rtol). float64 specifics: test_dropout_fp64.py.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from cudnnlite import dtypes
from cudnnlite import reference as ref
from cudnnlite.errors import BadParamError
from cudnnlite.ops.dropout import dropout, dropout_backward, last_kernel_name, philox4x32_10
from cudnnlite.testing import assert_close, to_backend, to_numpy

DTYPES = [d.numpy for d in dtypes.FLOAT_TYPES]
SHORT = {d.numpy: d.short for d in dtypes.FLOAT_TYPES}

# Random123's published known-answer vectors (kat_vectors, "philox4x32 10" lines):
# counter (4 words), key (2 words) -> output (4 words).
KAT = [
    ([0, 0, 0, 0], [0, 0], [0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8]),
    ([0xFFFFFFFF] * 4, [0xFFFFFFFF] * 2, [0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD]),
    (
        [0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344],
        [0xA4093822, 0x299F31D0],
        [0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1],
    ),
]


def rand(shape: tuple[int, ...], dtype: Any, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def test_philox_known_answers_reference() -> None:
    for counter, key, want in KAT:
        assert ref.dropout.philox4x32_10(counter, key).tolist() == want


def test_philox_known_answers_device_code() -> None:
    counters = np.array([k[0] for k in KAT], np.uint32)
    keys = np.array([k[1] for k in KAT], np.uint32)
    assert philox4x32_10(counters, keys).tolist() == [k[2] for k in KAT]


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: SHORT[d])
@pytest.mark.parametrize("shape", [(3, 7, 11), (2, 768), (1,), (4, 12, 5, 5)], ids=str)
def test_mask_and_values_match_reference(backend: str, dtype: Any, shape: tuple) -> None:
    x = rand(shape, dtype, seed=1)
    p, seed, offset = 0.3, 2**40 + 12345, 7
    y, mask = dropout(to_backend(x, backend), p, seed, offset, return_mask=True)
    want_mask = ref.dropout_mask(shape, p, seed, offset)
    np.testing.assert_array_equal(to_numpy(mask), want_mask)  # bit-exact on every backend
    assert_close(y, ref.dropout_forward(x, p, seed, offset, dtype=dtype), dtype, what="dropout")
    assert np.all(to_numpy(y)[~want_mask] == 0)


def test_vector_and_scalar_paths_agree(backend: str) -> None:
    x = rand((1001,), np.float32, seed=2)
    xb = to_backend(x, backend)
    a = to_numpy(dropout(xb, 0.5, 3))
    assert last_kernel_name() == "dropout_fwd_vec4_fp32"
    b = to_numpy(dropout(xb[1:], 0.5, 3))  # misaligned view: scalar path, elements renumbered
    assert last_kernel_name() == "dropout_fwd_scalar_fp32"
    np.testing.assert_array_equal(a != 0, ref.dropout_mask(x.shape, 0.5, 3))
    np.testing.assert_array_equal(b != 0, ref.dropout_mask((1000,), 0.5, 3))


@pytest.mark.parametrize("p", [0.1, 0.5, 0.9])
def test_keep_rate_within_binomial_bound(backend: str, p: float) -> None:
    n = 1 << 18
    _, mask = dropout(to_backend(np.ones(n, np.float32), backend), p, 99, return_mask=True)
    kept = int(to_numpy(mask).sum())
    sigma = math.sqrt(n * p * (1 - p))
    assert abs(kept - n * (1 - p)) < 5 * sigma  # fails by chance with probability < 1e-6


def test_p_zero_and_one_are_exact(backend: str) -> None:
    x = rand((5, 9), np.float32, seed=3)
    x[0, 0] = np.nan
    xb = to_backend(x, backend)
    np.testing.assert_array_equal(to_numpy(dropout(xb, 0.0, 1)), x)
    y = to_numpy(dropout(xb, 1.0, 1))  # x * 0, as PyTorch: NaN stays NaN
    assert np.isnan(y[0, 0]) and np.all(y.reshape(-1)[1:] == 0)
    assert np.all(to_numpy(dropout(xb, 1, 1, return_mask=True)[1]) == 0)


def test_seed_and_offset_select_streams(backend: str) -> None:
    xb = to_backend(np.ones(4096, np.float32), backend)
    m = lambda s, o: to_numpy(dropout(xb, 0.5, s, o, return_mask=True)[1])  # noqa: E731
    np.testing.assert_array_equal(m(5, 0), m(5, 0))
    assert (m(5, 0) != m(5, 1)).mean() > 0.4
    assert (m(5, 0) != m(5 + 2**32, 0)).mean() > 0.4  # the key's high word counts
    assert (m(5, 0) != m(5, 2**32)).mean() > 0.4  # the offset's high word counts


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: SHORT[d])
def test_backward_regenerates_or_reads_the_mask(backend: str, dtype: Any) -> None:
    x = rand((6, 33), dtype, seed=4)
    dy = rand((6, 33), dtype, seed=5)
    _, mask = dropout(to_backend(x, backend), 0.25, 11, 3, return_mask=True)
    dyb = to_backend(dy, backend)
    a = dropout_backward(dyb, 0.25, 11, 3)
    b = dropout_backward(dyb, 0.25, mask=mask)
    np.testing.assert_array_equal(to_numpy(a).view(np.uint8), to_numpy(b).view(np.uint8))
    want = ref.dropout_backward(dy, 0.25, 11, 3, dtype=dtype)
    assert_close(a, want, dtype, what="dropout bwd")


def test_strided_input_and_out(backend: str) -> None:
    base = rand((8, 10), np.float32, seed=6)
    out_base = to_backend(np.zeros((8, 10), np.float32), backend)
    out = out_base[:, ::2]
    r = dropout(to_backend(base, backend)[:, ::2], 0.4, 21, out=out)
    assert r is out
    want = ref.dropout_forward(np.ascontiguousarray(base[:, ::2]), 0.4, 21)
    assert_close(out, want, np.float32)
    assert np.all(to_numpy(out_base)[:, 1::2] == 0)
    xb = to_backend(base, backend)
    assert dropout(xb, 0.4, 21, out=xb) is xb  # in place
    assert_close(xb, ref.dropout_forward(base, 0.4, 21), np.float32)


def test_empty(backend: str) -> None:
    y, m = dropout(to_backend(np.zeros((0, 3), np.float32), backend), 0.5, 1, return_mask=True)
    assert y.shape == (0, 3) and m.shape == (0, 3)


def test_bad_inputs_raise_and_leave_inputs_untouched(backend: str) -> None:
    x = rand((4, 4), np.float32)
    xb = to_backend(x, backend)
    before = to_numpy(xb).tobytes()
    bad = [
        (lambda: dropout(xb, -0.1, 1), "p"),
        (lambda: dropout(xb, 1.5, 1), "p"),
        (lambda: dropout(xb, float("nan"), 1), "p"),
        (lambda: dropout(xb, "0.5", 1), "p"),
        (lambda: dropout(xb, 0.5, -1), "seed"),
        (lambda: dropout(xb, 0.5, 2**64), "seed"),
        (lambda: dropout(xb, 0.5, 1.5), "seed"),
        (lambda: dropout(xb, 0.5, 1, -3), "offset"),
        (lambda: dropout(to_backend(x.astype(np.int32), backend), 0.5, 1), "x"),
        (lambda: dropout(xb, 0.5, 1, out=to_backend(x.astype(np.float64), backend)), "out"),
        (lambda: dropout(xb, 0.5, 1, out=to_backend(np.zeros(3, np.float32), backend)), "out"),
        (lambda: dropout_backward(xb, 0.5), "seed"),
        (lambda: dropout_backward(xb, 0.5, 1, mask=xb), "seed"),
        (lambda: dropout_backward(xb, 0.5, mask=to_backend(np.ones(3, bool), backend)), "mask"),
        (lambda: dropout_backward(xb, 0.5, mask=xb), "mask"),
    ]
    for call, name in bad:
        with pytest.raises(BadParamError, match=name):
            call()
    assert to_numpy(xb).tobytes() == before
