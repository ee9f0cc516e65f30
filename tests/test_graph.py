"""cudnnlite.graph(): a recorded chain of calls replays to the eager results, picks up new
contents of its recorded buffers, and misuse raises clear errors.

The emulator records launches; the CUDA path (stream capture) is checked here against a
stand-in for CuPy's stream and graph, and for real in the device check. Shapes and ops are
those other tests compile already (no new kernel module).
"""

from __future__ import annotations

import contextlib
import sys
import types
from typing import Any

import numpy as np
import pytest

import cudnnlite as cl
from cudnnlite.errors import BadParamError, NotSupportedError
from cudnnlite.runtime import blas
from cudnnlite.runtime.graph import check_flag, current_recorder, note_host_work
from cudnnlite.testing import to_backend, to_numpy


def rand(shape: tuple[int, ...], seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def network(x: np.ndarray, w: np.ndarray, b: np.ndarray, plan: Any) -> tuple[Any, ...]:
    """conv (functional) -> relu -> conv (plan) -> softmax, every output a new array."""
    h = cl.conv2d(x, w, b, padding=1)
    r = cl.relu(h)
    p = plan(r, w, b, activation="relu")
    s = cl.softmax(p)
    return h, r, p, s


@pytest.fixture
def inputs() -> tuple[np.ndarray, np.ndarray, np.ndarray, Any]:
    x, w, b = rand((2, 4, 7, 7), 18), rand((4, 4, 3, 3), 19), rand((4,), 20)
    plan = cl.conv2d_plan(x.shape, w.shape, padding=1, backend="cpu")
    return x, w, b, plan


def test_replay_matches_eager_and_reads_new_input_contents(inputs: Any) -> None:
    x, w, b, plan = inputs
    eager = network(x, w, b, plan)
    with cl.graph("cpu") as g:
        recorded = network(x, w, b, plan)
    assert len(g) >= 4
    for got, want in zip(recorded, eager, strict=True):
        np.testing.assert_array_equal(got, want)  # the capture ran the calls too
    for out in recorded:
        out[...] = np.nan
    g.replay()
    for got, want in zip(recorded, eager, strict=True):
        np.testing.assert_array_equal(got, want)
    # New contents written into the recorded input buffer are what a replay reads.
    x[...] = rand(x.shape, 21)
    g.replay()
    g.replay()  # idempotent
    for got, want in zip(recorded, network(x, w, b, plan), strict=True):
        np.testing.assert_array_equal(got, want)


def test_norms_tensor_ops_and_backward_ops_replay_on_new_contents() -> None:
    """The ops marked graph-safe with the launch templates (layer/RMS/group norm, the
    tensor ops, activation and softmax backward, grid_sample) replay in an emulator graph
    and read new input contents, as eager calls would."""
    x, gamma = rand((4, 6, 10), 31), rand((10,), 32)
    bias, dy = rand((1, 6, 1), 33), rand((4, 6, 10), 34)
    grid = np.tanh(rand((4, 3, 5, 2), 37))

    def block(x: np.ndarray) -> list[np.ndarray]:
        h = cl.layer_norm(x, (10,), gamma)
        h = cl.op_tensor("add", h, bias)
        h = cl.rms_norm(cl.maximum(h, x), (10,))
        s = cl.softmax(h, -1)
        g = cl.group_norm(x, 3)
        return [s, g, cl.softmax_backward(dy, s, -1), cl.activation_backward(dy, h, "gelu"),
                cl.reduce_tensor(h, "max", axes=(2,)),
                cl.grid_sample(x[:, None], grid)]  # fmt: skip

    with cl.graph("cpu") as g:
        recorded = block(x)
    x[...] = rand(x.shape, 35)
    dy[...] = rand(dy.shape, 36)
    grid[...] = np.tanh(rand(grid.shape, 38))
    g.replay()
    for got, want in zip(recorded, block(x), strict=True):
        np.testing.assert_array_equal(got, want)


def test_a_training_step_replays_with_its_index_check() -> None:
    """Forward and backward of conv -> relu -> max pool in one emulator graph (the
    backward convolutions and pooling backward are kernel launches only): a replay on new
    input contents gives the eager step's gradients, and saved indices made bad between
    replays raise the eager call's error from replay()."""
    x, w, b = rand((2, 3, 8, 8), 40), rand((4, 3, 3, 3), 41), rand((4,), 42)
    dy = rand((2, 4, 4, 4), 43)

    def step(x: np.ndarray, dy: np.ndarray) -> tuple[Any, ...]:
        h = cl.conv2d(x, w, b, padding=1)
        r = cl.relu(h)
        y, ind = cl.max_pool2d(r, 2, return_indices=True)
        dr = cl.max_pool_backward(dy, ind, r.shape, 2)
        dh = cl.activation_backward(dr, h, "relu")
        grads = (cl.conv2d_backward_data(dh, w, x.shape, padding=1),
                 cl.conv2d_backward_filter(x, dh, w.shape, padding=1),
                 cl.conv2d_backward_bias(dh))  # fmt: skip
        return (y, ind, *grads)

    with cl.graph("cpu") as g:
        recorded = step(x, dy)
    x[...] = rand(x.shape, 44)
    dy[...] = rand(dy.shape, 45)
    g.replay()
    for got, want in zip(recorded, step(x, dy), strict=True):
        np.testing.assert_array_equal(got, want)
    # The max pooling backward's saved indices are an input buffer of the graph too; the
    # replay overwrites them with the forward's, so make the graph read a bad one: a
    # graph of the backward alone.
    ind = recorded[1].copy()
    with cl.graph("cpu") as back:
        cl.max_pool_backward(dy, ind, (2, 4, 8, 8), 2, deterministic=True)
        cl.max_pool_backward(dy, ind, (2, 4, 8, 8), 2)
    back.replay()
    ind[1, 2, 3, 0] = 0  # output (3, 0)'s window holds rows 6-7
    with pytest.raises(BadParamError, match=r"indices: entry \(1, 2, 3, 0\) is 0"):
        back.replay()


def test_a_batch_norm_training_step_replays_and_updates_the_running_statistics() -> None:
    """Batch norm training forward (updating its running statistics) and backward, layer
    norm backward: each replay computes the step on the buffers' new contents and updates
    the running statistics once more, as the eager calls do."""
    x, w, b = rand((4, 3, 5, 5), 50), rand((3,), 51), rand((3,), 52)
    dy = rand((4, 3, 5, 5), 53)
    rm, rv = rand((3,), 54), np.abs(rand((3,), 55))
    rm_eager, rv_eager = rm.copy(), rv.copy()

    def step(rm: np.ndarray, rv: np.ndarray) -> tuple[Any, ...]:
        y, mean, invstd = cl.batch_norm_forward_training(x, w, b, rm, rv, activation="relu")
        dx, dw, db, _ = cl.batch_norm_backward(dy, x, mean, invstd, w, bias=b,
                                               activation="relu")  # fmt: skip
        _, lm, lr = cl.layer_norm_forward(y, (5,))
        return (y, dx, dw, db, *cl.layer_norm_backward(dy, y, (5,), lm, lr))

    with cl.graph("cpu") as g:
        recorded = step(rm, rv)
    step(rm_eager, rv_eager)
    for seed in (56, 57):
        x[...] = rand(x.shape, seed)
        dy[...] = rand(dy.shape, seed + 10)
        g.replay()
        want = step(rm_eager, rv_eager)
        for got, expected in zip(recorded, want, strict=True):
            if expected is not None:
                np.testing.assert_array_equal(got, expected)
        np.testing.assert_array_equal(rm, rm_eager)
        np.testing.assert_array_equal(rv, rv_eager)


def test_an_attention_block_replays_on_new_contents() -> None:
    """layer norm -> attention (causal, grouped-query) -> dropout (seeded) -> residual add,
    and the attention backward: a replay reads the new q/k/v contents."""
    x, k, v = rand((2, 4, 6, 8), 60), rand((2, 2, 9, 8), 61), rand((2, 2, 9, 8), 62)
    dout = rand((2, 4, 6, 8), 63)

    def block() -> tuple[Any, ...]:
        h = cl.layer_norm(x, (8,))
        a, lse = cl.scaled_dot_product_attention(h, k, v, is_causal=True, enable_gqa=True,
                                                 causal_align="bottom_right",
                                                 return_lse=True)  # fmt: skip
        y = cl.op_tensor("add", cl.dropout(a, 0.2, seed=5, offset=1), x)
        grads = cl.scaled_dot_product_attention_backward(
            dout, h, k, v, a, lse, is_causal=True, enable_gqa=True, causal_align="bottom_right"
        )
        return (y, *grads)

    with cl.graph("cpu") as g:
        recorded = block()
    for seed in (64, 65):
        for a in (x, k, v, dout):
            a[...] = rand(a.shape, seed)
            seed += 10
        g.replay()
        for got, want in zip(recorded, block(), strict=True):
            np.testing.assert_array_equal(got, want)


def test_whole_sgd_steps_replay_like_eager_steps() -> None:
    """A whole training step in one graph: forward (conv, relu, global average pool, 1x1
    conv classifier), the softmax cross-entropy gradient (softmax - one-hot) / N, every
    backward, and the SGD update written into the parameters in place. Three replays on
    new batches leave the parameters exactly where three eager steps do."""
    n, classes, lr = 4, 3, 0.5
    x, onehot = rand((n, 2, 6, 6), 70), np.zeros((n, classes, 1, 1), np.float32)
    params = {
        "w1": rand((5, 2, 3, 3), 71) * 0.3,
        "b1": rand((5,), 72) * 0.1,
        "w2": rand((classes, 5, 1, 1), 73) * 0.3,
        "b2": rand((classes,), 74) * 0.1,
    }
    eager = {k: v.copy() for k, v in params.items()}

    def step(p: dict[str, np.ndarray]) -> None:
        h = cl.conv2d(x, p["w1"], p["b1"], padding=1)
        r = cl.relu(h)
        pooled = cl.global_avg_pool(r)
        logits = cl.conv2d(pooled, p["w2"], p["b2"])
        dlogits = cl.op_tensor("add", cl.softmax(logits, 1), onehot, alpha1=1 / n,
                               alpha2=-1 / n)  # fmt: skip
        dpooled = cl.conv2d_backward_data(dlogits, p["w2"], pooled.shape)
        grads = {"w2": cl.conv2d_backward_filter(pooled, dlogits, p["w2"].shape),
                 "b2": cl.conv2d_backward_bias(dlogits)}  # fmt: skip
        dh = cl.activation_backward(cl.adaptive_avg_pool_backward(dpooled, r.shape), h, "relu")
        grads["w1"] = cl.conv2d_backward_filter(x, dh, p["w1"].shape, padding=1)
        grads["b1"] = cl.conv2d_backward_bias(dh)
        for k, g in grads.items():
            cl.add_tensor(g, p[k], alpha=-lr)  # p -= lr * g, in place

    def batch(seed: int) -> None:
        x[...] = rand(x.shape, seed)
        onehot[...] = 0
        onehot[np.arange(n), np.random.default_rng(seed).integers(0, classes, n)] = 1

    batch(75)
    with cl.graph("cpu") as g:
        step(params)  # (the capture runs the step: the first of the graph's steps)
    step(eager)
    for seed in (76, 77, 78):
        batch(seed)
        g.replay()
        step(eager)
    for k in params:
        np.testing.assert_array_equal(params[k], eager[k], err_msg=k)
    assert not np.array_equal(params["w1"], rand((5, 2, 3, 3), 71) * 0.3)


def test_replay_into_caller_buffers(inputs: Any) -> None:
    x, w, b, plan = inputs
    y = np.empty((2, 4, 7, 7), np.float32)
    with cl.graph("cpu") as g:
        cl.relu(x, out=y)
    x[...] = -x
    g.replay()
    np.testing.assert_array_equal(y, np.maximum(x, 0))


def test_misuse_raises_clear_errors(inputs: Any) -> None:
    x = inputs[0]
    with cl.graph("cpu") as g:
        with pytest.raises(BadParamError, match="nested capture"):
            with cl.graph("cpu"):
                pass
        with pytest.raises(BadParamError, match="still capturing"):
            g.replay()
        cl.relu(x)
    with cl.graph("cpu") as outer:
        with pytest.raises(BadParamError, match="replay.. inside a cudnnlite.graph"):
            g.replay()
    assert current_recorder() is None and len(outer) == 0
    with pytest.raises(ValueError, match="user error"):
        with cl.graph("cpu") as failed:
            cl.relu(x)
            raise ValueError("user error")
    assert current_recorder() is None
    with pytest.raises(BadParamError, match="capture failed"):
        failed.replay()
    with pytest.raises(BadParamError, match="unknown backend"):
        with cl.graph("tpu"):
            pass


def test_host_work_makes_an_emulator_graph_refuse_to_replay(inputs: Any) -> None:
    x = inputs[0]
    a, c = np.ones((2, 3), np.float32), np.zeros((2, 2), np.float32)
    with cl.graph("cpu") as g:
        cl.relu(x)
        blas.gemm(
            cl.runtime.backend_by_name("cpu"),
            blas.Mat(a, 2, 3, 3),
            blas.Mat(a, 2, 3, 3),
            blas.Mat(c, 2, 2, 2),
            trans_b=True,
        )
    np.testing.assert_array_equal(c, 3.0)  # it ran during the capture
    with pytest.raises(NotSupportedError, match=r"blas.gemm .* does host work"):
        g.replay()
    note_host_work("outside any graph")  # a no-op


def test_the_graph_keeps_recorded_arrays_alive(inputs: Any) -> None:
    import gc
    import weakref

    x = inputs[0].copy()
    with cl.graph("cpu") as g:
        y = cl.relu(x)
    ref = weakref.ref(y)
    del y
    gc.collect()
    assert ref() is not None  # the replay still writes into it
    g.replay()
    np.testing.assert_array_equal(ref(), np.maximum(x, 0))


# ------------------------------------------------------------------ CUDA, with a fake CuPy
class _FakeGraph:
    def __init__(self) -> None:
        self.launches = 0

    def launch(self, stream: Any = None) -> None:
        self.launches += 1


class _FakeStream:
    def __init__(self, ptr: int) -> None:
        self.ptr = ptr
        self.capturing = False
        self.graphs: list[_FakeGraph] = []

    def begin_capture(self, mode: Any = None) -> None:
        assert not self.capturing
        self.capturing = True

    def end_capture(self) -> _FakeGraph:
        assert self.capturing
        self.capturing = False
        self.graphs.append(_FakeGraph())
        return self.graphs[-1]


@pytest.fixture
def fake_cupy(monkeypatch: pytest.MonkeyPatch) -> types.SimpleNamespace:
    state = types.SimpleNamespace(stream=_FakeStream(ptr=1234))
    cupy = types.ModuleType("cupy")
    cupy.cuda = types.SimpleNamespace(  # type: ignore[attr-defined]
        get_current_stream=lambda: state.stream
    )
    monkeypatch.setitem(sys.modules, "cupy", cupy)
    return state


def test_cuda_capture_and_replay_through_cupy_graphs(fake_cupy: Any) -> None:
    stream = fake_cupy.stream
    with cl.graph("cuda") as g:
        assert stream.capturing and current_recorder() is g
    assert not stream.capturing and current_recorder() is None
    g.replay()
    g.replay()
    assert stream.graphs[0].launches == 2


def test_cuda_capture_on_the_legacy_default_stream_is_refused(fake_cupy: Any) -> None:
    fake_cupy.stream = _FakeStream(ptr=0)
    with pytest.raises(BadParamError, match="legacy default stream"):
        with cl.graph("cuda"):
            pass
    assert current_recorder() is None


def test_cuda_capture_ends_when_the_block_raises(fake_cupy: Any) -> None:
    stream = fake_cupy.stream
    with pytest.raises(KeyError):
        with cl.graph("cuda") as g:
            raise KeyError("boom")
    assert not stream.capturing
    with pytest.raises(BadParamError, match="capture failed"):
        g.replay()


def test_a_device_side_check_is_kept_by_a_cuda_capture_and_made_by_replays(
    fake_cupy: Any,
) -> None:
    """Inside a CUDA capture nothing has run: check_flag only registers its check (reading
    the flag would sync the capturing stream); each replay reads it after the launch."""
    flag = np.zeros(1, np.uint64)
    failures: list[int] = []

    def on_bad() -> None:
        failures.append(int(flag[0]))
        raise BadParamError("bad")

    flag[0] = 7  # what a launch would write later; not read during the capture
    with cl.graph("cuda") as g:
        check_flag(flag, 0, on_bad)
    assert failures == []
    with pytest.raises(BadParamError, match="bad"):
        g.replay()
    flag[0] = 0
    g.replay()
    assert failures == [7] and fake_cupy.stream.graphs[0].launches == 2
    with pytest.raises(BadParamError, match="bad"):  # outside a capture: read at once
        check_flag(np.full(1, 3, np.uint64), 0, on_bad)


def test_host_arrays_inside_a_cuda_capture_are_refused(fake_cupy: Any, inputs: Any) -> None:
    with pytest.raises(BadParamError, match="NumPy arrays inside a GPU capture"):
        with cl.graph("cuda"):
            cl.relu(inputs[0])


def test_replay_matches_eager_on_every_backend(backend: str) -> None:
    # On CUDA: capture on a stream of its own; the eager call first fills CuPy's pool.
    x = to_backend(rand((3, 17), 30), backend)
    ctx: Any = contextlib.nullcontext()
    if backend == "cuda":
        import cupy

        ctx = cupy.cuda.Stream(non_blocking=True)
    with ctx:
        eager = to_numpy(cl.softmax(cl.relu(x)))
        with cl.graph(backend) as g:
            y = cl.softmax(cl.relu(x))
        x[...] = x * 2
        g.replay()
        g.replay()
        np.testing.assert_array_equal(to_numpy(y), to_numpy(cl.softmax(cl.relu(x))))
    assert not np.array_equal(to_numpy(y), eager)


def test_a_launch_on_a_host_copy_makes_the_graph_refuse_to_replay() -> None:
    from cudnnlite.runtime.selftest import EMULATOR_SELFTEST

    k = cl.runtime.backend_by_name("cpu").module(EMULATOR_SELFTEST).get_function("block_reduce_sum")
    raw = np.zeros(256 * 4 + 1, np.uint8)
    x = raw[1:].view(np.float32)  # unaligned: the launch runs on an aligned copy
    x[...] = 1.0
    out = np.zeros(1, np.float32)
    with cl.graph("cpu") as g:
        k(1, 256, (x, out, np.int32(256)))
    assert out[0] == 256.0
    with pytest.raises(NotSupportedError, match="a host copy of an argument does host work"):
        g.replay()


def test_an_op_not_marked_graph_safe_makes_an_emulator_graph_refuse() -> None:
    """ctc_loss is not marked graph_safe (nor checked to be launches only): its capture
    runs, but a replay could skip NumPy work, so it is refused."""
    x = np.arange(16, dtype=np.float32).reshape(4, 4)
    log_probs = np.log(np.full((3, 1, 2), 0.5, np.float32))
    with cl.graph("cpu") as g:
        cl.relu(x)
        cl.ctc_loss(log_probs, np.array([[1]]), np.array([3]), np.array([1]))
    with pytest.raises(NotSupportedError, match=r"ctc_loss \(not known to be kernel launch"):
        g.replay()
    with cl.graph("cpu") as ok:  # marked ops only: replayable
        cl.softmax(cl.relu(x))
    ok.replay()


def test_graphs_of_one_problem_replay_at_once_from_threads() -> None:
    """Each graph owns the workspaces of its launches (a Winograd convolution here):
    graphs of the same problem replayed from two threads, and eager calls of it from a
    third, each give their own serial result (they shared the plan's workspace: about
    80% of the replays were wrong, found by a concurrency fuzzer)."""
    import threading

    rng = np.random.default_rng(0)
    x1, x2, x3 = (rng.standard_normal((1, 8, 8, 8)).astype(np.float32) for _ in range(3))
    w = rng.standard_normal((8, 8, 3, 3)).astype(np.float32)
    algo = "conv_fwd_winograd_f2x2_3x3"
    with cl.fast_paths_off():
        want = [cl.conv2d(x, w, padding=1, algo=algo) for x in (x1, x2, x3)]
    with cl.graph() as g1:
        y1 = cl.conv2d(x1, w, padding=1, algo=algo)
    with cl.graph() as g2:
        y2 = cl.conv2d(x2, w, padding=1, algo=algo)
    bad = [0, 0, 0]

    def replays(i: int, g: Any, y: Any) -> None:
        for _ in range(30):
            g.replay()
            bad[i] += not np.array_equal(y, want[i])

    def eager() -> None:
        for _ in range(30):
            bad[2] += not np.array_equal(cl.conv2d(x3, w, padding=1, algo=algo), want[2])

    threads = [threading.Thread(target=replays, args=(0, g1, y1)),
               threading.Thread(target=replays, args=(1, g2, y2)),
               threading.Thread(target=eager)]  # fmt: skip
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert bad == [0, 0, 0]


def _selftest_launches(*launches: tuple[str, Any, Any, tuple]) -> tuple[Any, list, list]:
    """Launch-list entries (kernel, config, argument array) of self-test kernels, as a
    capture records them, without running them; and what must stay alive with them."""
    from cudnnlite.runtime import backend_by_name
    from cudnnlite.runtime.selftest import EMULATOR_SELFTEST

    module = backend_by_name("cpu").module(EMULATOR_SELFTEST)
    entries, keep = [], []
    for name, grid, block, args in launches:
        kernel = module.get_function(name)
        cfg = kernel._config(grid, block, 0, False)
        with module.lock:
            kernel._convert(args, [])
            arena, values = kernel.snapshot_arguments()
        entries.append((kernel, cfg, values))
        keep.append((arena, cfg, args))
    return module, entries, keep


@pytest.mark.parametrize("one_by_one", [False, True])
def test_an_emulator_replay_stops_at_the_failing_launch_and_names_its_kernel(
    monkeypatch: pytest.MonkeyPatch, one_by_one: bool
) -> None:
    """An emulator graph replays its launches in one C call (launcher.LaunchList): in
    order, the first that fails stops the list and raises its own kernel's error, and every
    module lock is free again. A list with a race-check module runs launch by launch in
    Python (``one_by_one``: the module's flag set; without TSan loaded its capture reports
    nothing) and behaves the same."""
    from cudnnlite.errors import ExecutionError
    from cudnnlite.runtime.emulator.launcher import LaunchList

    before, after = np.full(64, -7, np.int32), np.full(64, -7, np.int32)
    module, entries, keep = _selftest_launches(
        ("early_exit_barrier", 1, 64, (before, np.int32(10))),
        ("trap_if", 2, 8, (np.int32(1),)),
        ("early_exit_barrier", 1, 64, (after, np.int32(10))),
    )
    monkeypatch.setattr(module, "racecheck", one_by_one)
    launches = LaunchList(entries)
    assert len(launches) == 3 and (launches._one_by_one is not None) == one_by_one
    with pytest.raises(ExecutionError, match=r"kernel trap_if \(.*\) failed: .*__trap"):
        launches()
    want = np.full(64, -7, np.int32)
    want[:10] = 3 * (9 - np.arange(10))
    np.testing.assert_array_equal(before, want)  # the launch before ran
    np.testing.assert_array_equal(after, np.full(64, -7, np.int32))  # the one after did not
    assert not module.lock.locked()
    LaunchList([entries[0], entries[2]])()  # the module works on
    np.testing.assert_array_equal(after, want)
    LaunchList([])()  # nothing to run
    del keep
