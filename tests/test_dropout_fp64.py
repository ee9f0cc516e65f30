"""float64 dropout: the Philox mask does not depend on the dtype (float64 and float32
drop the same elements for the same seed and offset), and kept elements are scaled by
1 / (1 - p) in double, one rounding: bit for bit x * (1 / (1 - p)) as NumPy computes it.
test_dropout.py runs float64 through its reference checks too.
"""

from __future__ import annotations

import numpy as np
import pytest

from cudnnlite import reference as ref
from cudnnlite.ops.dropout import dropout, dropout_backward, last_kernel_name
from cudnnlite.testing import to_backend, to_numpy


def rand(shape: tuple[int, ...], seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape)


@pytest.mark.parametrize("shape", [(3, 7, 11), (2, 768)], ids=str)
def test_same_mask_as_float32_and_exact_scale(backend: str, shape: tuple) -> None:
    x = rand(shape, seed=1)
    p, seed, offset = 0.3, 2**40 + 12345, 7  # 1 / 0.7 is not a float32
    y64, m64 = dropout(to_backend(x, backend), p, seed, offset, return_mask=True)
    y32, m32 = dropout(to_backend(x.astype(np.float32), backend), p, seed, offset,
                       return_mask=True)  # fmt: skip
    m64, m32 = to_numpy(m64), to_numpy(m32)
    np.testing.assert_array_equal(m64, m32)
    np.testing.assert_array_equal(m64, ref.dropout_mask(shape, p, seed, offset))
    np.testing.assert_array_equal(to_numpy(y32) != 0, to_numpy(y64) != 0)
    want = np.where(m64, x * (1.0 / (1.0 - p)), 0.0)
    np.testing.assert_array_equal(to_numpy(y64), want)
    np.testing.assert_array_equal(to_numpy(y64), ref.dropout_forward(x, p, seed, offset,
                                                                     dtype=np.float64))  # fmt: skip
    assert not np.array_equal(to_numpy(y64), ref.dropout_forward(x, p, seed, offset))


def test_backward_regenerated_and_saved_masks_agree(backend: str) -> None:
    x, dy = rand((5, 13), seed=2), rand((5, 13), seed=3)
    _, mask = dropout(to_backend(x, backend), 0.25, 11, 3, return_mask=True)
    dyb = to_backend(dy, backend)
    a = to_numpy(dropout_backward(dyb, 0.25, 11, 3))
    b = to_numpy(dropout_backward(dyb, 0.25, mask=mask))
    want = np.where(to_numpy(mask), dy * (1.0 / 0.75), 0.0)
    np.testing.assert_array_equal(a, want)
    np.testing.assert_array_equal(b, want)


def test_pack_path_needs_16_bytes_not_32(backend: str) -> None:
    """A group of 4 doubles is two 16-byte accesses: a 16-byte aligned view takes the
    vector path, an 8-byte aligned one the scalar path; both number elements from the
    view's start."""
    base = rand((203,), seed=4)
    xb = to_backend(base, backend)
    ptr = xb.__array_interface__["data"][0] if backend == "cpu" else int(xb.data.ptr)
    at16 = 0 if ptr % 16 == 0 else 1
    for start, tag in ((at16, "vec4"), (at16 + 1, "scalar"), (at16 + 2, "vec4")):
        view = xb[start : start + 101]
        y = to_numpy(dropout(view, 0.5, 5))
        assert last_kernel_name() == f"dropout_fwd_{tag}_fp64"
        keep = ref.dropout_mask((101,), 0.5, 5)
        np.testing.assert_array_equal(y, np.where(keep, to_numpy(view) * 2.0, 0.0))


def test_p_zero_and_one_and_nan(backend: str) -> None:
    x = rand((4, 9), seed=5)
    x[0, 0] = np.nan
    x[1, 1] = np.inf
    xb = to_backend(x, backend)
    np.testing.assert_array_equal(to_numpy(dropout(xb, 0.0, 1)), x)
    y = to_numpy(dropout(xb, 1.0, 1))  # x * 0, as PyTorch: NaN and inf give NaN
    assert np.isnan(y[0, 0]) and np.isnan(y[1, 1])
    assert np.all(np.delete(y.reshape(-1), [0, 10]) == 0)
