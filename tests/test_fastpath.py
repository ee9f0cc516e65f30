"""The fast path of repeated calls (cudnnlite/ops/_fastpath.py): cached calls give the
slow path's results bit for bit, anything the slow path reads misses the cache, bad
arguments after a cached call raise the slow path's errors, and the caches are safe to
share between threads. Uses modules other tests compile already (relu, conv2d's 3x3
solvers, softmax, pooling in fp32)."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pytest

import cudnnlite as cl
from cudnnlite.dispatch import plans
from cudnnlite.errors import BadParamError
from cudnnlite.ops import _fastpath
from cudnnlite.ops import activation as act_mod
from cudnnlite.ops import conv as conv_mod
from cudnnlite.runtime import template_record, templates
from cudnnlite.testing import to_backend, to_numpy


def rand(shape: tuple[int, ...], seed: int = 0, dtype: Any = np.float32) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


@pytest.fixture(autouse=True)
def fresh_caches() -> Any:
    # These tests count the ops' own slow-path calls, which a launch template would skip
    # (tests/test_templates_*.py test those): templates off, the ops' caches on.
    _fastpath.clear_all()
    templates.set_enabled(False)
    yield
    templates.set_enabled(True)
    _fastpath.clear_all()


class SlowCalls:
    """Counts how often ``module.name`` (a function only the slow path calls) runs."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, module: Any, name: str) -> None:
        self.count = 0
        original = getattr(module, name)

        def counting(*args: Any, **kwargs: Any) -> Any:
            self.count += 1
            return original(*args, **kwargs)

        monkeypatch.setattr(module, name, counting)


def same_bits(a: Any, b: Any) -> None:
    a, b = to_numpy(a), to_numpy(b)
    assert a.dtype == b.dtype and a.shape == b.shape
    assert a.tobytes() == b.tobytes()


def first_later_and_uncached(call: Callable[[], Any]) -> None:
    first, later = call(), call()
    with _fastpath.disabled():
        slow = call()
    same_bits(first, later)
    same_bits(first, slow)


# ------------------------------------------------------------------ bit-identical results


def test_conv2d_cached_calls_match_the_slow_path(backend: str) -> None:
    x, w = to_backend(rand((2, 4, 7, 9), 1), backend), to_backend(rand((4, 4, 3, 3), 2), backend)
    b = to_backend(rand((4,), 3), backend)
    first_later_and_uncached(lambda: cl.conv2d(x, w, b, padding=1, activation="relu"))


def test_relu_and_activations_cached_calls_match_the_slow_path(backend: str) -> None:
    x = to_backend(rand((3, 5, 7), 4), backend)
    first_later_and_uncached(lambda: cl.relu(x))
    first_later_and_uncached(lambda: cl.activation_forward(x, "relu", alpha=-0.0))


def test_softmax_and_pooling_cached_calls_match_the_slow_path(backend: str) -> None:
    x = to_backend(rand((2, 3, 8, 8), 5), backend)
    first_later_and_uncached(lambda: cl.softmax(x, 1))
    first_later_and_uncached(lambda: cl.max_pool2d(x, 2))
    first_later_and_uncached(lambda: cl.avg_pool2d(x, 3, 1, 1))


# ------------------------------------------------------------------ cache misses


def test_conv2d_misses_on_any_change(monkeypatch: pytest.MonkeyPatch) -> None:
    slow = SlowCalls(monkeypatch, conv_mod, "make_problem")
    x, w = rand((1, 4, 8, 8), 1), rand((4, 4, 3, 3), 2)
    calls: list[Callable[[], Any]] = [
        lambda: cl.conv2d(x, w, padding=1),
        lambda: cl.conv2d(x, w, padding=(1, 1)),
        lambda: cl.conv2d(x, w, padding=1, stride=2),
        lambda: cl.conv2d(x, w, padding=1, alpha=-0.0),  # -0.0 == 0.0, but not its sign bit
        lambda: cl.conv2d(x, w, padding=1, alpha=0.0),
        lambda: cl.conv2d(x, w, padding=1, activation="relu"),
        lambda: cl.conv2d(x[:, :, ::-1], w, padding=1),  # a non-contiguous view
        lambda: cl.conv2d(np.asfortranarray(x), w, padding=1),
        lambda: cl.conv2d(x[:, :, :7], w, padding=1),  # another shape
        lambda: cl.conv2d(
            x.transpose(0, 2, 3, 1), w.transpose(0, 2, 3, 1), padding=1, layout="NHWC"
        ),  # fmt: skip
    ]
    for i, call in enumerate(calls):
        call()
        assert slow.count == i + 1, f"call {i} hit another call's entry"
        call()
        assert slow.count == i + 1, f"call {i} missed its own entry"
    cl.conv2d(x, w, padding=np.int64(1))  # equal to 1, but another type: its own key
    assert slow.count == len(calls) + 1


def test_conv2d_settings_and_switches_miss(monkeypatch: pytest.MonkeyPatch) -> None:
    slow = SlowCalls(monkeypatch, conv_mod, "get_plan")
    x, w = rand((1, 4, 8, 8), 1), rand((4, 4, 3, 3), 2)
    ref = cl.conv2d(x, w, padding=1)
    assert slow.count == 1
    with cl.settings(deterministic=True):
        cl.conv2d(x, w, padding=1)
    assert slow.count == 2
    monkeypatch.setenv("CUDNNLITE_FORCE_SOLVER", "conv_fwd_direct")
    forced = cl.conv2d(x, w, padding=1)
    assert slow.count == 3
    monkeypatch.delenv("CUDNNLITE_FORCE_SOLVER")
    np.testing.assert_allclose(forced, ref, rtol=1e-5, atol=1e-5)
    cl.conv2d(x, w, padding=1)
    assert slow.count == 3  # back to the first entry
    plans.clear_plan_cache()  # a cleared plan cache empties the call caches
    cl.conv2d(x, w, padding=1)
    assert slow.count == 4


def test_relu_misses_on_dtype_layout_stride_alignment(monkeypatch: pytest.MonkeyPatch) -> None:
    slow = SlowCalls(monkeypatch, act_mod, "_launch")
    buf = rand((4, 65), 1)
    arrays = [
        buf[:, :64],  # strided: never cached
        np.ascontiguousarray(buf[:, :64]),
        np.ascontiguousarray(buf[:, :64]).astype(np.float16),
        np.asfortranarray(buf[:, :64]),
        buf.reshape(-1)[1:257],  # contiguous but not 16-byte aligned
        np.ascontiguousarray(buf[:, :64]).astype(np.float64),  # float64: its own entry
    ]
    expected = [2, 3, 4, 5, 6, 7]
    for a, count in zip(arrays, expected, strict=True):
        same_bits(cl.relu(a), np.maximum(a, 0))
        same_bits(cl.relu(a), np.maximum(a, 0))
        assert slow.count == count
    cl.leaky_relu(arrays[1], 0.5)
    cl.leaky_relu(arrays[1], 0.25)
    assert slow.count == 9
    # the same scalars on float64 and float32 are different calls (exact vs rounded coef)
    x64 = arrays[-1]
    same_bits(cl.leaky_relu(x64, 0.1), np.where(x64 > 0, x64, x64 * 0.1))
    assert slow.count == 10


# ------------------------------------------------------------------ errors and threads


@pytest.mark.parametrize("with_templates", [False, True])
def test_bad_arguments_after_a_cached_call_raise_the_same_errors(with_templates: bool) -> None:
    templates.set_enabled(with_templates)  # (the fixture turns them back on)
    x, w = rand((1, 4, 8, 8), 1), rand((4, 4, 3, 3), 2)
    for _ in range(3):
        cl.conv2d(x, w, padding=1)
        cl.relu(x)
        cl.softmax(x, 1)
        cl.max_pool2d(x, 2)
        with pytest.raises(BadParamError, match="padding: every value must be >= 0"):
            cl.conv2d(x, w, padding=-1)
        with pytest.raises(BadParamError, match="w: has 3 channels per group"):
            cl.conv2d(x, w[:, :3], padding=1)
        with pytest.raises(BadParamError, match="alpha: expected a finite number"):
            cl.conv2d(x, w, padding=1, alpha=float("nan"))
        with pytest.raises(BadParamError, match="mode: expected one of"):
            cl.activation_forward(x, "rleu")
        with pytest.raises(BadParamError, match="beta: blending"):
            cl.activation_forward(x, "relu", beta=1.0)
        with pytest.raises(BadParamError, match="axis: 4 is out of range"):
            cl.softmax(x, 4)
        with pytest.raises(BadParamError, match="padding: expected at most half"):
            cl.max_pool2d(x, 2, padding=2)
    if with_templates:
        assert type(templates.lookup(cl.conv2d, (x, w), {"padding": 1})) is template_record.Template


def test_eight_threads_share_the_caches() -> None:
    xs = [rand((2, 4, 6, 6), seed) for seed in range(8)]
    w = rand((4, 4, 3, 3), 9)

    def work(x: np.ndarray) -> list[np.ndarray]:
        return [
            r
            for _ in range(5)
            for r in (cl.conv2d(x, w, padding=1), cl.relu(x), cl.softmax(x, 1), cl.max_pool2d(x, 2))
        ]

    with _fastpath.disabled():
        expected = [work(x)[:4] for x in xs]
    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(work, xs))
    for got, exp in zip(results, expected, strict=True):
        for i, r in enumerate(got):
            same_bits(r, exp[i % 4])


def test_the_cache_is_bounded() -> None:
    cache = _fastpath.CallCache("test", size=3)
    for i in range(5):
        cache.put((i,), i)
    assert len(cache) == 3 and cache.get((0,)) is None and cache.get((4,)) == 4
    assert _fastpath.scalars_key(1) != _fastpath.scalars_key(True) != _fastpath.scalars_key(1.0)
    assert _fastpath.scalars_key(object()) is None
    assert _fastpath.arrays_key(np.zeros(3), [1, 2]) is None


# ------------------------------------------------------------------ plans


def test_conv_plan_quick_calls_match_the_full_checks(backend: str) -> None:
    x, w = to_backend(rand((2, 4, 7, 9), 1), backend), to_backend(rand((4, 4, 3, 3), 2), backend)
    b, z = to_backend(rand((4,), 3), backend), to_backend(rand((2, 4, 7, 9), 4), backend)
    plan = cl.conv2d_plan(x.shape, w.shape, padding=1, backend=backend)
    first_later_and_uncached(lambda: plan(x, w, b, z=z, activation="relu", alpha=0.5))
    same_bits(plan(x, w, b), cl.conv2d(x, w, b, padding=1))
    out = to_backend(np.empty((2, 4, 7, 9), np.float32), backend)
    same_bits(plan(x, w, b, out=out), plan(x, w, b))


def test_conv_plan_misuse_raises_clear_errors() -> None:
    x, w = rand((1, 4, 8, 8), 1), rand((4, 4, 3, 3), 2)
    plan = cl.conv2d_plan(x.shape, w.shape, padding=1, backend="cpu")
    for _ in range(2):
        plan(x, w)
        with pytest.raises(BadParamError, match=r"x: expected shape \(1, 4, 8, 8\)"):
            plan(x[:, :, :7], w)
        with pytest.raises(BadParamError, match="x: this plan is for fp32"):
            plan(x.astype(np.float16), w.astype(np.float16))
        with pytest.raises(BadParamError, match="w: expected shape"):
            plan(x, w[:2])
        with pytest.raises(BadParamError, match="bias: expected shape"):
            plan(x, w, np.zeros(3, np.float32))
        with pytest.raises(BadParamError, match="x: expected a NumPy or CuPy array"):
            plan(x.tolist(), w)
        with pytest.raises(BadParamError, match="activation: expected None or one of"):
            plan(x, w, activation="rleu")
        with pytest.raises(BadParamError, match="out: overlaps x"):
            plan(x, w, out=x)


def test_op_plans_match_the_functional_calls(backend: str) -> None:
    x = to_backend(rand((2, 3, 8, 8), 6), backend)
    cases: list[tuple[Any, Callable[[], Any]]] = [
        (cl.activation_plan(x.shape, "leaky_relu", coef=0.2, backend=backend),
         lambda: cl.leaky_relu(x, 0.2)),
        (cl.softmax_plan(x.shape, 1, log=True, backend=backend), lambda: cl.log_softmax(x, 1)),
        (cl.pooling_plan(x.shape, "max", 2, backend=backend), lambda: cl.max_pool2d(x, 2)),
        (cl.pooling_plan(x.shape, "avg_exclude_pad", 3, 1, 1, backend=backend),
         lambda: cl.avg_pool2d(x, 3, 1, 1, count_include_pad=False)),
    ]  # fmt: skip
    for plan, functional in cases:
        same_bits(plan(x), functional())
        same_bits(plan(x, stream=None), functional())
        out = to_backend(np.empty(functional().shape, np.float32), backend)
        assert plan(x, out=out) is out
        same_bits(out, functional())


def test_max_pool_plan_with_indices_for_training(backend: str) -> None:
    # A training step's pooling: (y, indices) from the plan, bit for bit the functional
    # call's, repeated on new data; indices are max pooling's only.
    plan = cl.pooling_plan((2, 3, 9, 8), "max", 3, 2, 1, return_indices=True, backend=backend)
    for seed in (7, 8):
        x = to_backend(rand((2, 3, 9, 8), seed), backend)
        y, idx = plan(x)
        want_y, want_idx = cl.max_pool2d(x, 3, 2, 1, return_indices=True)
        same_bits(y, want_y)
        np.testing.assert_array_equal(to_numpy(idx), to_numpy(want_idx))
    with pytest.raises(BadParamError, match="return_indices: avg_include_pad pooling has no"):
        cl.pooling_plan((2, 3, 9, 8), "avg_include_pad", 3, return_indices=True, backend=backend)
    with pytest.raises(BadParamError, match="return_indices: expected True or False"):
        cl.pooling_plan((2, 3, 9, 8), "max", 3, return_indices=1, backend=backend)


def test_op_plan_misuse_raises_clear_errors() -> None:
    x = rand((2, 3, 8, 8), 6)
    plan = cl.activation_plan(x.shape, "relu", backend="cpu")
    with pytest.raises(BadParamError, match=r"x: this activation plan is for shape \(2, 3, 8, 8\)"):
        plan(x[0])
    with pytest.raises(BadParamError, match="x: this activation plan is for float32, got float16"):
        plan(x.astype(np.float16))
    with pytest.raises(BadParamError, match="runs on cpu and takes numpy.ndarray arrays, got list"):
        plan(x.tolist())
    with pytest.raises(cl.NotSupportedError, match="stream: the emulator"):
        plan(x, stream=1)
    # The arguments are checked when planning, with the functional call's messages.
    with pytest.raises(BadParamError, match="mode: expected one of"):
        cl.activation_plan(x.shape, "rleu", backend="cpu")
    with pytest.raises(BadParamError, match="axis: 4 is out of range"):
        cl.softmax_plan(x.shape, 4, backend="cpu")
    with pytest.raises(BadParamError, match="padding: expected at most half"):
        cl.pooling_plan(x.shape, "max", 2, padding=2, backend="cpu")
    with pytest.raises(BadParamError, match="shape: expected 3 to 5 dims"):
        cl.pooling_plan((3, 8), "max", 2, backend="cpu")
    with pytest.raises(BadParamError, match="dtype: expected float32, .* or float64"):
        cl.softmax_plan(x.shape, dtype=np.int32, backend="cpu")
    with pytest.raises(BadParamError, match="shape: expected a tuple of ints"):
        cl.softmax_plan((2, -1), backend="cpu")
    assert "stream" in inspect.signature(cl.OpPlan.__call__).parameters


def test_op_plans_take_the_functional_calls_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    slow = SlowCalls(monkeypatch, act_mod, "_launch")
    x = rand((2, 3, 8, 8), 6)
    plan = cl.activation_plan(x.shape, "relu", backend="cpu")
    for _ in range(3):
        same_bits(plan(x), np.maximum(x, 0))
    cl.relu(x)  # the same key as the plan's
    assert slow.count == 1


def test_batch_norm_inference_cached_calls_match_the_slow_path(backend: str) -> None:
    x = to_backend(rand((2, 3, 5, 5), 7), backend)
    rm, w, b = (to_backend(rand((3,), s), backend) for s in (8, 9, 10))
    rv = to_backend(np.abs(rand((3,), 11)) + 0.5, backend)
    first_later_and_uncached(lambda: cl.batch_norm_forward_inference(x, rm, rv, w, b))
    first_later_and_uncached(
        lambda: cl.batch_norm_forward_inference(x, rm, rv, activation="relu", eps=1e-3)
    )
    for _ in range(2):
        with pytest.raises(BadParamError, match="eps: expected a finite number >= 0"):
            cl.batch_norm_forward_inference(x, rm, rv, w, b, eps=-1.0)
        with pytest.raises(BadParamError, match=r"weight: expected shape \(3,\)"):
            cl.batch_norm_forward_inference(x, rm, rv, w[:2], b)


def test_batch_norm_inference_plan_matches_the_functional_call(backend: str) -> None:
    x = to_backend(rand((2, 3, 5, 5), 7), backend)
    rm, w, b = (to_backend(rand((3,), s), backend) for s in (8, 9, 10))
    rv = to_backend(np.abs(rand((3,), 11)) + 0.5, backend)
    plan = cl.batch_norm_inference_plan(x.shape, eps=1e-3, activation="relu", backend=backend)
    templates.set_enabled(True)  # (off in this module; a plan's repeat is a replay)
    for args in ((rm, rv), (rm, rv, w), (rm, rv, w, b)):
        want = cl.batch_norm_forward_inference(x, *args, eps=1e-3, activation="relu")
        for _ in range(2):
            same_bits(plan(x, *args), want)
        out = to_backend(np.empty(x.shape, np.float32), backend)
        assert plan(x, *args, out=out) is out
        same_bits(out, want)
    nhwc = cl.batch_norm_inference_plan((2, 5, 5, 3), layout="NHWC", backend=backend)
    xt = to_backend(np.ascontiguousarray(to_numpy(x).transpose(0, 2, 3, 1)), backend)
    same_bits(nhwc(xt, rm, rv), cl.batch_norm_forward_inference(xt, rm, rv, layout="NHWC"))


def test_batch_norm_inference_plan_misuse_raises_clear_errors() -> None:
    x, rm, rv = rand((2, 3, 5, 5), 1), rand((3,), 2), np.abs(rand((3,), 3)) + 0.5
    plan = cl.batch_norm_inference_plan(x.shape, backend="cpu")
    takes = r"takes \(x, running_mean, running_var, weight=None, bias=None\), got"
    with pytest.raises(BadParamError, match=takes + " 1 arrays"):
        plan(x)
    with pytest.raises(BadParamError, match=takes + " 6 arrays"):
        plan(x, rm, rv, rm, rm, rm)
    with pytest.raises(BadParamError, match=r"running_var: expected shape \(3,\), got \(2,\)"):
        plan(x, rm, rv[:2])
    with pytest.raises(BadParamError, match=r"x: this batch_norm_inference plan is for shape"):
        plan(x[:1], rm, rv)
    with pytest.raises(BadParamError, match="eps: expected a finite number >= 0"):
        cl.batch_norm_inference_plan(x.shape, eps=-1.0, backend="cpu")
    with pytest.raises(BadParamError, match="mode: expected 'spatial' or 'per_activation'"):
        cl.batch_norm_inference_plan(x.shape, mode="channel", backend="cpu")
    with pytest.raises(BadParamError, match="layout: expected 'NCHW' or 'NHWC'"):
        cl.batch_norm_inference_plan(x.shape, layout="NCDHW", backend="cpu")
    with pytest.raises(BadParamError, match="activation: expected None or one of"):
        cl.batch_norm_inference_plan(x.shape, activation="rleu", backend="cpu")
    with pytest.raises(BadParamError, match=r"shape: expected at least 2 dims"):
        cl.batch_norm_inference_plan((3,), backend="cpu")
