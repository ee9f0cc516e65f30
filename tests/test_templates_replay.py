"""What a launch template's replay reproduces and checks: atomics' inexact results, the
device-side check of saved indices, in-place outputs, layouts, temporaries and the
store's bounds, a plan's lifetime, fast_path's report, and threads replaying one
template (bad arguments after a replay: tests/test_fastpath.py)."""

from __future__ import annotations

import functools
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from templates_support import (
    Replays,
    fresh_templates,  # noqa: F401 (autouse: a clean store)
    rand,
    replays_like_the_op,
    same_bits,
)

import cudnnlite as cl
from cudnnlite.errors import BadParamError
from cudnnlite.ops import activation as act_mod
from cudnnlite.runtime import templates
from cudnnlite.testing import to_backend, to_numpy


def test_atomics_make_a_template_inexact_and_the_check_compares_within_rounding() -> None:
    """Ops whose kernels add with atomics in a varying order (a solver that is not
    deterministic, max pooling's and grid_sample's atomic scatters) say so: the template
    is not exact, and CUDNNLITE_TEMPLATE_CHECK compares its replays within rounding;
    deterministic ones stay exact (bit for bit)."""
    x, dy = rand((2, 3, 8, 8), 1), rand((2, 4, 8, 8), 2)
    atomic = "conv_bwd_filter_implicit_gemm_atomic"
    for algo, exact in ((atomic, False), ("auto", True)):
        call = (x, dy, (4, 3, 3, 3))
        cl.conv2d_backward_filter(*call, padding=1, algo=algo)
        tmpl = templates.lookup(cl.conv2d_backward_filter, call, {"padding": 1, "algo": algo})
        assert isinstance(tmpl, templates.Template) and tmpl.exact is exact, algo
    _, ind = cl.max_pool2d(x, 2, return_indices=True)
    cl.max_pool_backward(dy[:, :3, :4, :4].copy(), ind, x.shape, 2)
    inexact = [t for t in templates._cache.values() if not getattr(t, "exact", True)]
    assert [len(t) for t in inexact] == [3, 2]  # (atomic filter; pooling: prepare + scatter)
    f32 = rand((3, 5), 3)
    same = templates._host_bytes(f32)
    near = templates._host_bytes(f32 * np.float32(1 + 3e-6))
    assert templates._close(same, same) and templates._close(same, near)
    assert not templates._close(same, templates._host_bytes(f32 * 2))
    assert not templates._close(same, templates._host_bytes(np.zeros_like(f32)))
    ints = templates._host_bytes(np.arange(4))
    assert not templates._close(ints, templates._host_bytes(np.arange(4) + 1))
    half = f32.astype(np.float16)
    assert templates._close(templates._host_bytes(half),
                            templates._host_bytes(half * np.float16(1.001)))  # fmt: skip


def test_a_replay_checks_the_saved_indices_as_the_op_does(
    backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Max pooling backward checks its saved indices on the device: a templated key's
    replay reads that check's flag after its launches, and bad indices raise the op's own
    error (the op's path runs again and names the entry); good ones replay again after."""
    replays = Replays(monkeypatch)
    x = to_backend(rand((1, 2, 6, 6), 1), backend)
    _, ind = cl.max_pool2d(x, 2, return_indices=True)
    dy = to_backend(rand((1, 2, 3, 3), 2), backend)
    bad = to_numpy(ind).copy()
    bad[0, 1, 2, 0] = 0  # output (2, 0)'s window holds rows 4-5: position 0 is outside it
    bad = to_backend(bad, backend)
    for deterministic in (False, True):
        call = functools.partial(cl.max_pool_backward, dy, kernel_size=2, input_shape=x.shape,
                                 deterministic=deterministic)  # fmt: skip
        call(indices=ind)
        call(indices=ind)
        count = replays.count
        assert count >= 1
        for _ in range(2):
            with pytest.raises(BadParamError, match=r"indices: entry \(0, 1, 2, 0\) is 0, a pos"):
                call(indices=bad)
        assert replays.count == count  # the replays found the flag set; the op raised
        same_bits(call(indices=ind), call(indices=ind))
        assert replays.count == count + 2


def test_in_place_ops_replay_on_their_new_arrays(
    backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """add_tensor, scale_tensor and set_tensor write the array they are given (and return
    it); a replay writes the new one. add_tensor copies an a that overlaps c first: a
    replay of a key recorded without overlap takes the op's own path for such a call."""
    replays = Replays(monkeypatch)
    bias = to_backend(rand((1, 3, 1, 1), 1), backend)
    ops = [lambda c: cl.add_tensor(bias, c, beta=0.5), lambda y: cl.scale_tensor(y, 2.5),
           lambda y: cl.set_tensor(y, -1.25)]  # fmt: skip
    for op in ops:
        for seed in (2, 3, 4):
            c = to_backend(rand((2, 3, 4, 4), seed), backend)
            with templates.disabled():
                want = op(to_backend(to_numpy(c), backend))
            assert op(c) is c
            same_bits(c, want)
    assert replays.count == 2 * len(ops)
    buf = to_backend(np.arange(16, dtype=np.float32), backend)
    a, c = to_backend(rand((8,), 5), backend), to_backend(rand((8,), 6), backend)
    cl.add_tensor(a, c)  # recorded without overlap
    overlapping = (buf[0:8], buf[4:12])  # (same shapes, dtypes and alignment: the same key)
    assert (
        templates.call_key(cl.add_tensor, overlapping, {})[0]
        == templates.call_key(cl.add_tensor, (a, c), {})[0]
    )
    count = replays.count
    with templates.disabled():
        want = cl.add_tensor(*(to_backend(to_numpy(v), backend) for v in overlapping))
    want_buf = np.arange(16, dtype=np.float32)
    want_buf[4:12] = to_numpy(want)
    same_bits(cl.add_tensor(*overlapping), want)
    assert replays.count == count  # not replayed: the op copied a first
    same_bits(buf, want_buf)


def test_layouts_of_inputs_and_outputs_are_reproduced(monkeypatch: pytest.MonkeyPatch) -> None:
    replays = Replays(monkeypatch)
    base = [rand((2, 5, 6, 4), s) for s in (1, 2)]
    nchw_views = [b.transpose(0, 3, 1, 2) for b in base]  # channels-last memory
    replays_like_the_op(replays, cl.relu, nchw_views)  # an output laid out as its input
    strided = [rand((4, 65), s)[:, :64] for s in (3, 4)]
    replays_like_the_op(replays, cl.relu, strided)
    # pooling and softmax copy such an input on the host first: not templated
    x = nchw_views[0]
    for op, arg in ((cl.max_pool2d, 2), (cl.softmax, 1)):
        for _ in range(3):
            same_bits(op(x, arg), op(np.ascontiguousarray(x), arg))
        entry = templates.lookup(op, (x, arg), {})
        assert type(entry) is templates.Refused and "host work" in entry.reason


def test_temporaries_are_kept_and_rewritten_by_each_replay(
    backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Winograd (transformed filter and input in a workspace) and the precomputed implicit
    GEMM (an offsets table a kernel fills) launch on temporaries of the call."""
    replays = Replays(monkeypatch)
    xs = [to_backend(rand((1, 32, 14, 14), s), backend) for s in (1, 2, 3)]
    w = to_backend(rand((32, 32, 3, 3), 4), backend)
    replays_like_the_op(replays, lambda x: cl.conv2d(x, w, padding=1), xs)
    entry = templates.lookup(cl.conv2d, (xs[0], w), {"padding": 1})
    assert type(entry) is templates.Template and entry.scratch and len(entry) > 1
    x7 = [to_backend(rand((1, 3, 32, 32), s), backend) for s in (5, 6)]
    w7 = to_backend(rand((16, 3, 7, 7), 7), backend)
    replays_like_the_op(replays, lambda x: cl.conv2d(x, w7, stride=2, padding=3), x7)
    with ThreadPoolExecutor(4) as pool:  # one workspace, one replay at a time
        got = list(pool.map(lambda x: cl.conv2d(x, w, padding=1), xs * 4))
    with templates.disabled():
        want = [cl.conv2d(x, w, padding=1) for x in xs]
    for i, y in enumerate(got):
        same_bits(y, want[i % 3])


def test_temporaries_over_the_limit_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("cudnnlite.runtime.template_record.SCRATCH_LIMIT", 1024)
    x, w = rand((1, 32, 14, 14), 1), rand((32, 32, 3, 3), 4)
    for _ in range(3):
        y = cl.conv2d(x, w, padding=1)
    with templates.disabled():
        same_bits(y, cl.conv2d(x, w, padding=1))
    entry = templates.lookup(cl.conv2d, (x, w), {"padding": 1})
    assert type(entry) is templates.Refused and "temporaries" in entry.reason


def test_the_store_is_bounded_in_keys_and_in_temporaries(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(templates, "_CACHE_SIZE", 3)
    xs = [rand((2, n), n) for n in range(1, 6)]
    for x in xs:
        cl.relu(x)
    assert [templates.lookup(cl.relu, (x,), {}) is None for x in xs] == [True] * 2 + [False] * 3
    # two Winograd calls whose temporaries together pass the total: the older one leaves
    w = rand((32, 32, 3, 3), 4)
    x1, x2 = rand((1, 32, 14, 14), 1), rand((1, 32, 12, 12), 2)
    cl.conv2d(x1, w, padding=1)
    first = templates.lookup(cl.conv2d, (x1, w), {"padding": 1})
    assert first.scratch_bytes > 0
    monkeypatch.setattr(templates, "SCRATCH_TOTAL", first.scratch_bytes + 1)
    cl.conv2d(x2, w, padding=1)
    assert templates.lookup(cl.conv2d, (x1, w), {"padding": 1}) is None
    second = templates.lookup(cl.conv2d, (x2, w), {"padding": 1})
    assert type(second) is templates.Template and templates._scratch_total == second.scratch_bytes
    templates.clear()
    assert templates._scratch_total == 0


def test_a_template_does_not_keep_a_dropped_plan_alive() -> None:
    import gc
    import weakref

    x = rand((2, 3, 8, 8), 1)
    plan = cl.activation_plan(x.shape, "relu", backend="cpu")
    for _ in range(2):
        same_bits(plan(x), np.maximum(x, 0))
    assert cl.fast_path(plan, x).startswith("replayed")
    gone = weakref.ref(plan)
    del plan
    gc.collect()
    assert gone() is None


def test_fast_path_says_what_a_call_gets(monkeypatch: pytest.MonkeyPatch) -> None:
    x, w = rand((1, 32, 14, 14), 1), rand((32, 32, 3, 3), 2)
    assert cl.fast_path(cl.conv2d, x, w, padding=1).startswith("not recorded yet")
    cl.conv2d(x, w, padding=1)
    said = cl.fast_path(cl.conv2d, x, w, padding=1, stream=None)
    assert said.startswith("replayed: 4 launch(es) on cpu, 1 new output(s), ")
    assert " 0 bytes" not in said  # (Winograd's workspace)
    strided = x[:, :, ::2]
    cl.max_pool2d(strided, 2)
    assert cl.fast_path(cl.max_pool2d, strided, 2) == (
        "not templated: host work: pooling: a contiguous copy of a non-contiguous operand "
        "(its next call records again)"
    )
    said = cl.fast_path(cl.ctc_loss, np.zeros((3, 1, 2), np.float32), np.array([[1]]),
                        np.array([3]), np.array([1]))  # fmt: skip
    assert "ctc_loss is not marked graph-safe" in said
    assert "out= given" in cl.fast_path(cl.relu, x, out=np.empty_like(x))
    # what the call itself could not bind raises as the call would
    with pytest.raises(TypeError, match="paddin"):
        cl.fast_path(cl.conv2d, x, w, paddin=1)
    with pytest.raises(TypeError, match="argument"):
        cl.fast_path(cl.relu)
    with pytest.raises(BadParamError, match="op: expected a cudnnlite function or plan"):
        cl.fast_path("relu", x)
    plan = cl.activation_plan(x.shape, "relu", backend="cpu")
    plan(x)
    assert cl.fast_path(plan, x).startswith("replayed: 1 launch(es)")
    with cl.fast_paths_off():
        assert "fast paths are off" in cl.fast_path(cl.relu, x)
    # it runs nothing: no new entry for a call never made
    assert cl.fast_path(cl.relu, x[:, :3]).startswith("not recorded yet")
    assert templates.lookup(cl.relu, (x[:, :3],), {}) is None


def test_last_kernel_name_and_a_tuple_result_survive_a_replay(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    replays = Replays(monkeypatch)
    x, y = rand((3, 5, 7), 1), rand((3, 5, 7), 2)
    cl.sigmoid(x)
    recorded = act_mod.last_kernel_name()
    cl.relu(x)
    assert act_mod.last_kernel_name() != recorded
    cl.sigmoid(y)
    assert replays.count == 1
    assert act_mod.last_kernel_name() == recorded


# ------------------------------------------------------------------ threads (bad arguments
# after a replay: tests/test_fastpath.py, with templates on and off)


def test_eight_threads_replay_one_template() -> None:
    w = rand((4, 4, 3, 3), 2)
    inputs = [rand((1, 4, 6, 6), s) for s in range(8)]
    with templates.disabled():
        want = [(cl.conv2d(x, w, padding=1), cl.relu(x)) for x in inputs]

    def work(i: int) -> None:
        for _ in range(12):
            same_bits(cl.conv2d(inputs[i], w, padding=1), want[i][0])
            same_bits(cl.relu(inputs[i]), want[i][1])

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(work, range(8)))
    assert type(templates.lookup(cl.relu, (inputs[0],), {})) is templates.Template
