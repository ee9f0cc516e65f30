"""Memory the caller did not give us is never touched (issue 12, "Trust").

- Bad indices: max pooling backward follows user-provided indices; every one is checked
  against its output's window before anything is written through it, and the call
  raises BadParamError naming ``indices`` (also under the emulator's AddressSanitizer
  build, which would report the stray write as an ExecutionError).
- Aliasing: ``z is out`` (the fused residual written in place) gives the answer of a
  separate z on every convolution solver that runs here, and on batch norm + add.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import cudnnlite as cl
import cudnnlite.ops.pooling as P
from cudnnlite.dispatch import registry
from cudnnlite.errors import BadParamError, CudnnliteError
from cudnnlite.reference import pooling as rp
from cudnnlite.reference.conv import conv_forward
from cudnnlite.testing import to_backend, to_numpy


def ranked(shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    """Distinct values: the argmax of every window is unique."""
    n = int(np.prod(shape))
    return (np.random.default_rng(seed).permutation(n).astype(np.float32) / 8).reshape(shape)


# ------------------------------------------------------------------ bad indices

# 3x3 windows, stride 2, padding 1, dilation 2 on a 7x7 plane (output 2x2): a window's
# positions are start + {0, 2, 4} per dim, so start + 1 is inside the window's span but
# not one of its positions.
SHAPE, KW = (2, 3, 7, 7), dict(kernel_size=3, stride=2, padding=1, dilation=2)


def _max_case(backend: str) -> tuple[Any, Any, np.ndarray]:
    x = ranked(SHAPE)
    y, ind = P.max_pool(to_backend(x, backend), return_indices=True, **KW)
    dy = np.random.default_rng(1).standard_normal(to_numpy(y).shape).astype(np.float32)
    return to_backend(dy, backend), to_numpy(ind), x


def _bad_values(ind: np.ndarray) -> dict[str, tuple[tuple[int, ...], int]]:
    """(entry, value) per kind of bad index; entry (0, 1, 1, 0)'s window starts at
    (1, -1): positions rows 1, 3, 5 and columns 1, 3 (-1 is padding)."""
    e = (0, 1, 1, 0)
    assert ind[e] in {r * 7 + c for r in (1, 3, 5) for c in (1, 3)}
    return {
        "negative": (e, -2),
        "past the plane": (e, 49),
        "huge": (e, 1 << 40),
        "between dilated taps": (e, 2 * 7 + 1),  # row 2: inside the span, not a tap
        "another window's": (e, 0),  # (0, 0): output (0, 0)'s argmax region
    }


@pytest.mark.parametrize("deterministic", [False, True], ids=["scatter", "gather"])
def test_max_pool_backward_refuses_bad_indices(backend: str, deterministic: bool) -> None:
    dy, ind, _ = _max_case(backend)
    dy_before = to_numpy(dy).copy()
    for what, (entry, value) in _bad_values(ind).items():
        bad = ind.copy()
        bad[entry] = value
        bad_b = to_backend(bad, backend)
        with pytest.raises(BadParamError, match=rf"indices: entry \(0, 1, 1, 0\) is {value}"):
            P.max_pool_backward(dy, bad_b, SHAPE, deterministic=deterministic, **KW)
        np.testing.assert_array_equal(to_numpy(bad_b), bad, err_msg=what)  # inputs untouched
        np.testing.assert_array_equal(to_numpy(dy), dy_before, err_msg=what)
    # -1 (a window without input) is valid: that output credits nothing
    ok = ind.copy()
    ok[0, 1, 1, 0] = -1
    dx = to_numpy(P.max_pool_backward(dy, to_backend(ok, backend), SHAPE,
                                      deterministic=deterministic, **KW))  # fmt: skip
    dropped = dy_before.astype(np.float64)
    dropped[0, 1, 1, 0] = 0.0  # (the reference would read -1 as NumPy's last element)
    want = rp.max_pool_backward(dropped, ind, SHAPE)
    np.testing.assert_allclose(dx, want, rtol=1e-6, atol=1e-6)


def test_the_first_bad_entry_is_named(backend: str) -> None:
    dy, ind, _ = _max_case(backend)
    bad = ind.copy()
    bad[1, 2, 1, 1] = 10**6
    bad[0, 2, 0, 1] = -7  # lower in C order: reported
    with pytest.raises(BadParamError, match=r"entry \(0, 2, 0, 1\) is -7, outside the input"):
        P.max_pool_backward(dy, to_backend(bad, backend), SHAPE, **KW)


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_adaptive_max_pool_backward_refuses_bad_indices(backend: str, layout: str) -> None:
    # 7 -> 3 adaptive windows: rows [0, 3), [2, 5), [4, 7) (they overlap)
    x = ranked((1, 2, 7, 7), 3)
    xb = to_backend(x if layout == "NCHW" else x.transpose(0, 2, 3, 1).copy(), backend)
    y, ind = P.adaptive_max_pool(xb, 3, return_indices=True, layout=layout)
    dy = to_backend(np.ones(to_numpy(y).shape, np.float32), backend)
    ind = to_numpy(ind)
    e = (0, 0, 0, 1) if layout == "NCHW" else (0, 0, 1, 0)  # window rows 0-2, columns 2-4
    shape = xb.shape
    for value in (-3, 49, 5 * 7 + 3, 2 * 7 + 1):  # negative, too large, rows 5 / column 1
        bad = ind.copy()
        bad[e] = value
        for deterministic in (False, True):
            with pytest.raises(BadParamError, match=rf"indices: entry \({', '.join(map(str, e))}"):
                P.adaptive_max_pool_backward(dy, to_backend(bad, backend), shape, layout=layout,
                                             deterministic=deterministic)  # fmt: skip
    # the window's own corner (row 2, column 4) is fine
    ok = ind.copy()
    ok[e] = 2 * 7 + 4
    P.adaptive_max_pool_backward(dy, to_backend(ok, backend), shape, layout=layout)


def test_bad_indices_never_reach_memory_under_asan(
    backend: str, emulator_only: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Unchecked, the scatter's atomicAdd at x + 10^6 is an out-of-bounds write that the
    # AddressSanitizer build reports (ExecutionError); checked, nothing is written.
    monkeypatch.setenv("CUDNNLITE_EMU_ASAN", "1")
    dy, ind, _ = _max_case(backend)
    bad = ind.copy()
    bad[1, 0, 1, 1] = 10**6
    with pytest.raises(BadParamError, match="indices"):
        P.max_pool_backward(dy, bad, SHAPE, **KW)
    dx = P.max_pool_backward(dy, ind, SHAPE, **KW)  # the valid call still runs clean
    want = rp.max_pool_backward(to_numpy(dy).astype(np.float64), ind, SHAPE)
    np.testing.assert_allclose(to_numpy(dx), want, rtol=1e-6, atol=1e-6)


# ------------------------------------------------------------------ aliasing: z is out

# One case per kind of solver: (x, w, conv2d arguments). Every registered forward solver
# must apply to one of them, so a new solver is covered (or this list says why not).
ALIAS_CASES = {
    "fp32 3x3": ((1, 8, 9, 7), (8, 8, 3, 3), dict(padding=1), np.float32),
    "fp32 1x1": ((2, 8, 5, 6), (12, 8, 1, 1), {}, np.float32),
    "fp32 depthwise": ((1, 8, 7, 7), (8, 1, 3, 3), dict(padding=1, groups=8), np.float32),
    "fp16 3x3": ((1, 16, 8, 8), (16, 16, 3, 3), dict(padding=1), np.float16),
    "fp64 3x3": ((1, 8, 6, 6), (8, 8, 3, 3), dict(padding=1), np.float64),
}


def _alias_plan() -> dict[str, str]:
    """solver -> the first case it applies to (on the emulator: what runs here)."""
    from cudnnlite.dispatch.explain import explain_call

    plan: dict[str, str] = {}
    for case, (xs, ws, kw, dt) in ALIAS_CASES.items():
        rows = explain_call(np.zeros(xs, dt), np.zeros(ws, dt), **kw).rows
        for row in rows:
            if row.applicable and row.name not in plan:
                plan[row.name] = case
    return plan


def test_z_is_out_on_every_forward_solver(backend: str) -> None:
    plan = _alias_plan()
    missing = {s.name for s in registry.solvers("conv_fwd")} - set(plan)
    assert not missing, f"no alias case applies to {sorted(missing)}: add one"
    rng = np.random.default_rng(5)
    for solver, case in plan.items():
        xs, ws, kw, dt = ALIAS_CASES[case]
        x, w = (rng.standard_normal(s).astype(dt) for s in (xs, ws))
        bias = rng.standard_normal(ws[0]).astype(dt)
        ys = cl.conv2d(x, w, **kw).shape
        z = rng.standard_normal(ys).astype(dt)
        args = [to_backend(a, backend) for a in (x, w, bias)]
        try:
            apart = to_numpy(cl.conv2d(*args, **kw, z=to_backend(z, backend), alpha2=-0.5,
                                       activation="relu", algo=solver))  # fmt: skip
        except CudnnliteError as exc:  # a solver that takes no residual at all
            pytest.fail(f"{solver} ({case}): {exc}")
        inplace = to_backend(z, backend)
        got = cl.conv2d(*args, **kw, z=inplace, alpha2=-0.5, activation="relu", algo=solver,
                        out=inplace)  # fmt: skip
        assert got is inplace
        # same kernel, same order of operations: bit for bit
        np.testing.assert_array_equal(to_numpy(got), apart, err_msg=f"{solver} ({case})")
        # and the right answer (a guard against both being wrong the same way)
        ref = conv_forward(x.astype(np.float64), w.astype(np.float64),
                           [(p, p) for p in (kw.get("padding", 0),) * 2], (1, 1), (1, 1),
                           groups=kw.get("groups", 1))  # fmt: skip
        ref = np.maximum(ref + bias.astype(np.float64)[:, None, None] - 0.5 * z, 0)
        tol = {np.float16: 2e-2, np.float32: 1e-4, np.float64: 1e-10}[dt]
        np.testing.assert_allclose(apart, ref, rtol=tol, atol=tol, err_msg=f"{solver} ({case})")


@pytest.mark.parametrize("training", [True, False], ids=["training", "inference"])
def test_batch_norm_add_with_z_is_out(backend: str, training: bool) -> None:
    rng = np.random.default_rng(9)
    x, z = (rng.standard_normal((2, 4, 5, 3)).astype(np.float32) for _ in range(2))
    mean, var = rng.standard_normal(4).astype(np.float32), rng.random(4).astype(np.float32) + 0.5

    def run(zz: Any, out: Any = None) -> Any:
        xb = to_backend(x, backend)
        if training:
            return cl.batch_norm_forward_training(xb, z=zz, activation="relu", out=out)[0]
        m, v = to_backend(mean, backend), to_backend(var, backend)
        return cl.batch_norm_forward_inference(xb, m, v, z=zz, activation="relu", out=out)

    apart = to_numpy(run(to_backend(z, backend)))
    inplace = to_backend(z, backend)
    assert run(inplace, out=inplace) is inplace
    np.testing.assert_array_equal(to_numpy(inplace), apart)
    if training:
        mean, var = x.mean(axis=(0, 2, 3)), x.var(axis=(0, 2, 3))
    c = (slice(None), None, None)
    ref = np.maximum((x - mean[c]) / np.sqrt(var[c] + 1e-5) + z, 0)
    np.testing.assert_allclose(apart, ref, rtol=1e-5, atol=1e-5)


# ------------------------------------------------------------------ misaligned operands
def _odd(shape: tuple[int, ...], dtype, seed: int) -> np.ndarray:
    """Random values in a C-contiguous view one element past a 16-byte boundary."""
    n = int(np.prod(shape))
    buf = np.empty(n + 8, dtype)
    start = next(i for i in range(1, 9) if (buf.ctypes.data + i * buf.itemsize) % 16)
    view = buf[start : start + n].reshape(shape)
    view[...] = np.random.default_rng(seed).standard_normal(shape).astype(dtype)
    return view


def test_operands_at_odd_addresses_never_misalign_a_vector_access(
    backend: str, emulator_only: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Contiguous views at odd addresses (slices) through the families whose kernels load
    16-byte vectors (tensor-core convolution, tensor-core attention), under the ASan build,
    whose alignment check fails any access a GPU would fault on ("misaligned address"):
    the ops realign such operands, so every call runs and matches the aligned one."""
    import cudnnlite as cl

    monkeypatch.setenv("CUDNNLITE_EMU_ASAN", "1")
    h = np.float16
    x, w, z = _odd((1, 6, 6, 16), h, 0), _odd((16, 3, 3, 16), h, 1), _odd((1, 6, 6, 16), h, 2)
    kw = dict(padding=1, layout="NHWC", algo="conv_fwd_tc_implicit_gemm")
    got = cl.conv2d(x, w, z=z, **kw)
    np.testing.assert_array_equal(got, cl.conv2d(x.copy(), w.copy(), z=z.copy(), **kw))
    q, k, v = (_odd((1, 2, 16, 64), h, s) for s in (3, 4, 5))
    o = cl.scaled_dot_product_attention(q, k, v, algo="sdpa_fwd_flash_tc")
    np.testing.assert_array_equal(o, cl.scaled_dot_product_attention(
        q.copy(), k.copy(), v.copy(), algo="sdpa_fwd_flash_tc"))  # fmt: skip
