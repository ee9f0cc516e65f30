"""cudnnlite.dask: batch-sharded layers and halo'd convolution on a 2-process LocalCluster.

Every result is compared with the single cudnnlite call on the whole array, for exact
equality in float32: each block runs the solver and config chosen for the whole input, the
halo holds the rows the single call reads (zeros at the border, as its padding), and
Winograd's tiles stay on the whole output's grid; per output the arithmetic is the same.
One case also goes to the float64 reference. Worker processes share the test's tuning DB
and kernel cache; one test tunes in both workers, one kills a worker mid-run.
"""

from __future__ import annotations

import functools
import logging
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

da = pytest.importorskip("dask.array")
distributed = pytest.importorskip("distributed")

import cudnnlite as cl  # noqa: E402
import cudnnlite.dask as cld  # noqa: E402
from cudnnlite import reference as ref  # noqa: E402
from cudnnlite.dispatch import registry, tuning_db  # noqa: E402
from cudnnlite.errors import BadParamError  # noqa: E402

# The tests that use the cluster, together on one xdist worker under --dist loadgroup (one
# cluster start instead of one per test process).
on_cluster = pytest.mark.xdist_group("dask_cluster")


def rand(shape: tuple[int, ...], seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape, dtype=np.float32)


@pytest.fixture(scope="module")
def tuning_dir(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """One user tuning DB for this process and the workers: a block then picks what the
    single call here picks."""
    path = tmp_path_factory.mktemp("tuning")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("CUDNNLITE_TUNING_DIR", str(path))
        tuning_db.forget_databases()
        yield path
    tuning_db.forget_databases()


@pytest.fixture(scope="module")
def client(tuning_dir: Path) -> Any:
    env = {"CUDNNLITE_TUNING_DIR": str(tuning_dir), "CUDNNLITE_EMU_THREADS": "1"}
    with distributed.LocalCluster(
        n_workers=2,
        threads_per_worker=1,
        processes=True,
        dashboard_address=":0",
        silence_logs=logging.CRITICAL,  # the killed worker's traceback is expected
        env=env,
    ) as cluster, distributed.Client(cluster) as c:  # fmt: skip
        yield c


# ------------------------------------------------------------------ batch-sharded layers


def _layers(c: int, k: int) -> list[Any]:
    w = rand((k, c, 3, 3), 1)
    mean, var = rand((k,), 2), np.abs(rand((k,), 3)) + 0.5
    gamma, beta = rand((k,), 4), rand((k,), 5)
    return [
        functools.partial(cl.conv2d, w=w, padding=1),
        functools.partial(
            cl.batch_norm_forward_inference,
            running_mean=mean,
            running_var=var,
            weight=gamma,
            bias=beta,
        ),  # fmt: skip
        cl.relu,
        functools.partial(cl.max_pool2d, kernel_size=2),
    ]


@on_cluster
def test_sequential_equals_one_call(client: Any) -> None:
    x = rand((5, 3, 8, 8), 0)
    layers = _layers(3, 4)
    want = x
    for layer in layers:
        want = layer(want)
    y = cld.sequential(da.from_array(x, chunks=(2, 3, 8, 8)), layers)
    assert y.chunks == ((2, 2, 1), (4,), (4,), (4,))
    assert y.dtype == np.float32 and isinstance(y._meta, np.ndarray)
    got = client.compute(y).result()
    np.testing.assert_array_equal(got, want)
    # Given the output shape and dtype, no dry run; the threaded scheduler shares a process.
    xd = da.from_array(x, chunks=(1, -1, -1, -1))
    y2 = cld.sequential(xd, layers, out_shape=(4, 4, 4), dtype="f4")
    np.testing.assert_array_equal(y2.compute(scheduler="threads", num_workers=2), want)


# ------------------------------------------------------------------ halo'd convolution

# (x shape, w shape, chunks, conv2d keywords): odd sizes and uneven chunks.
CASES = {
    "same3x3": ((2, 4, 21, 19), (5, 4, 3, 3), (1, 4, 7, (5, 6, 8)), {"padding": "same"}),
    "valid": ((2, 4, 21, 19), (5, 4, 3, 3), (2, 4, 7, 10), {"padding": 0}),
    "stride2": ((2, 4, 21, 19), (5, 4, 3, 3), (2, 4, 7, 10), {"padding": 1, "stride": 2}),
    "dilated5x5": (
        (2, 4, 21, 19),
        (5, 4, 5, 5),
        (2, 4, (9, 12), 10),
        {"padding": 2, "dilation": 2, "activation": "relu"},
    ),  # fmt: skip
    "same4x4": ((2, 4, 21, 19), (5, 4, 4, 4), (2, 4, 7, 10), {"padding": "same"}),
    "asym_stride3x2": (
        (2, 4, 21, 19),
        (5, 4, 4, 4),
        (2, 4, 7, 10),
        {"padding": (0, 3, 1, 2), "stride": (3, 2)},
    ),  # fmt: skip
    "depthwise": ((1, 4, 13, 12), (4, 1, 3, 3), (1, 4, 5, 6), {"padding": 1, "groups": 4}),
    "winograd_f4": (
        (1, 16, 21, 19),
        (16, 16, 3, 3),
        (1, 16, (5, 6, 10), (7, 6, 6)),
        {"padding": "same", "algo": "conv_fwd_winograd_f4x4_3x3"},
    ),  # fmt: skip
}
ON_CLUSTER = ("same3x3", "winograd_f4")


def _conv_case(name: str) -> tuple[np.ndarray, Any, np.ndarray, np.ndarray, dict]:
    x_shape, w_shape, chunks, kw = CASES[name]
    x, w, b = rand(x_shape, 10), rand(w_shape, 11), rand((w_shape[0],), 12)
    return x, da.from_array(x, chunks=chunks), w, b, kw


@on_cluster
def test_conv2d_on_the_cluster_equals_one_call(client: Any) -> None:
    ys, wants = [], []
    for name in ON_CLUSTER:
        x, xd, w, b, kw = _conv_case(name)
        # The same input with another filter too: the graphs' keys must differ.
        for scale in (1, 2) if name == "same3x3" else (1,):
            ys.append(cld.conv2d(xd, w * scale, b, **kw))
            wants.append(cl.conv2d(x, w * scale, b, **kw))
    assert len({y.name for y in ys}) == len(ys)
    for got, want in zip(client.gather(client.compute(ys)), wants, strict=True):
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("name", sorted(set(CASES) - set(ON_CLUSTER)))
def test_conv2d_threads_equals_one_call(tuning_dir: Path, name: str) -> None:
    x, xd, w, b, kw = _conv_case(name)
    y = cld.conv2d(xd, w, b, **kw).compute(scheduler="threads", num_workers=2)
    np.testing.assert_array_equal(y, cl.conv2d(x, w, b, **kw))


@pytest.mark.parametrize(
    ("layout", "chunks", "kw"),
    [
        ("NCDHW", (1, 3, (4, 5), 5, (5, 6)), {"padding": "same"}),
        ("NDHWC", (1, 5, 5, 6, 3), {"padding": (0, 1, 2), "stride": 2, "dilation": (1, 1, 2)}),
    ],
    ids=["same", "ndhwc_strided"],
)
def test_conv3d_threads_equals_one_call(tuning_dir: Path, layout: str, chunks: tuple,
                                        kw: dict) -> None:  # fmt: skip
    x, w = rand((1, 3, 9, 10, 11), 60), rand((4, 3, 3, 3, 3), 61)
    if layout == "NDHWC":
        x, w = (np.ascontiguousarray(np.moveaxis(a, 1, -1)) for a in (x, w))
    y = cld.conv3d(da.from_array(x, chunks=chunks), w, layout=layout, **kw)
    got = y.compute(scheduler="threads", num_workers=2)
    np.testing.assert_array_equal(got, cl.conv3d(x, w, layout=layout, **kw))


def test_conv2d_nhwc_matches_reference(tuning_dir: Path) -> None:
    x, w, b = rand((2, 15, 13, 4), 20), rand((6, 3, 3, 4), 21), rand((6,), 22)
    y = cld.conv2d(da.from_array(x, chunks=(1, 8, 7, 4)), w, b, padding=1, layout="NHWC")
    got = y.compute(scheduler="sync")
    np.testing.assert_array_equal(got, cl.conv2d(x, w, b, padding=1, layout="NHWC"))
    want = ref.conv_forward(x.astype(np.float64), w.astype(np.float64), ((1, 1), (1, 1)),
                            (1, 1), (1, 1), 1, True) + b  # fmt: skip
    # fp32 accumulation of 36 products of N(0,1) values: well within 1e-5 relative to the
    # sum of |products| (about 30 here).
    np.testing.assert_allclose(got, want, rtol=0, atol=3e-4)


def test_axis_halo_covers_every_output_once() -> None:
    """Brute force over small axes: the blocks' owned outputs tile [0, n_out) in order, and
    every computed output reads only rows inside its haloed block."""
    for size, chunks in ((11, (4, 4, 3)), (9, (9,)), (12, (5, 7)), (16, (4, 4, 4, 4))):
        for filt, stride, dil, pads, align in (
            (3, 1, 1, (1, 1), 4), (3, 2, 1, (0, 0), 1), (4, 1, 1, (1, 2), 1),
            (3, 1, 2, (2, 2), 1), (1, 3, 1, (0, 0), 1), (5, 2, 1, (3, 0), 1),
        ):  # fmt: skip
            try:
                halo = cld.axis_halo(chunks, filt, stride, dil, pads, align)
            except BadParamError:
                continue
            extent = dil * (filt - 1) + 1
            n_out = (size + sum(pads) - extent) // stride + 1
            assert [lo for lo, _ in halo.owned] + [n_out] == [0] + [hi for _, hi in halo.owned]
            a = 0
            for (c0, c1), start, c in zip(halo.computed, halo.starts, chunks, strict=True):
                assert start >= 0 and start + (c1 - c0 - 1) * stride + extent <= c + 2 * halo.depth
                assert (c0 * stride - pads[0]) - (a - halo.depth) == start
                a += c


def test_bad_inputs_name_the_argument() -> None:
    x = rand((2, 4, 12, 12), 30)
    xd = da.from_array(x, chunks=(1, 4, 6, 6))
    w = rand((5, 4, 3, 3), 31)
    with pytest.raises(BadParamError, match="x: expected a dask.array.Array"):
        cld.conv2d(x, w, padding=1)
    with pytest.raises(BadParamError, match="w: expected a NumPy or CuPy array"):
        cld.conv2d(xd, da.from_array(w), padding=1)
    with pytest.raises(BadParamError, match="chunked along the channel axis"):
        cld.conv2d(da.from_array(x, chunks=(1, 2, 6, 6)), w, padding=1)
    with pytest.raises(BadParamError, match=r"chunks along axis 2 must be at least the halo of 4"):
        cld.conv2d(da.from_array(x, chunks=(1, 4, (3, 9), 6)), w, padding=1)
    with pytest.raises(BadParamError, match="block 1 along axis 3 .* would own no output"):
        cld.conv2d(da.from_array(x, chunks=(1, 4, 6, (6, 1, 5))), w, stride=(1, 7))
    with pytest.raises(BadParamError, match="w: has 3 channels per group"):
        cld.conv2d(xd, w[:, :3], padding=1)
    with pytest.raises(BadParamError, match=r"bias: expected shape \(5,\)"):
        cld.conv2d(xd, w, np.zeros(4, np.float32), padding=1)
    layers = _layers(4, 4)
    with pytest.raises(BadParamError, match="x: chunked along axis 2"):
        cld.sequential(xd, layers)
    with pytest.raises(BadParamError, match="layers: expected a non-empty list"):
        cld.sequential(da.from_array(x, chunks=(1, -1, -1, -1)), [])
    with pytest.raises(BadParamError, match="layers: layer 0 .* changed the batch axis"):
        cld.sequential(da.from_array(x, chunks=(1, -1, -1, -1)), [lambda a: a[0]])
    with pytest.raises(BadParamError, match="out_shape, dtype: give both"):
        cld.sequential(da.from_array(x, chunks=(1, -1, -1, -1)), layers, out_shape=(4, 6, 6))


def test_import_guard_and_no_import_from_cudnnlite() -> None:
    code = (
        "import sys; sys.modules['dask'] = None\n"
        "import cudnnlite\n"
        "assert 'cudnnlite.dask' not in sys.modules\n"
        "try:\n    import cudnnlite.dask\nexcept ImportError as e:\n    print(e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "pip install 'cudnnlite[dask]'" in out.stdout


# ------------------------------------------------------------------ workers


def _tune_direct_only(key: str) -> tuple[int, list[str]]:
    """Tunes one problem in this worker, over the direct solver only (one small module)."""
    others = [s.name for s in registry.solvers("conv_fwd") if s.name != "conv_fwd_direct"]
    os.environ["CUDNNLITE_DISABLE_SOLVERS"] = ",".join(others)
    try:
        result = cl.tune(key, backend="cpu", progress=False)
    finally:
        del os.environ["CUDNNLITE_DISABLE_SOLVERS"]
    return os.getpid(), [e.solver for e in result[key]]


@on_cluster
def test_tuning_in_two_workers_lands_in_the_shared_db(client: Any, tuning_dir: Path) -> None:
    keys = [f"conv2d_fwd n1-c3-h{h}-w9 k2-r3-s3 p1x1-u1x1-d1x1 g1 NCHW fp32" for h in (5, 7)]
    client.wait_for_workers(2, timeout=120)  # a worker killed by an earlier test restarts
    workers = sorted(client.scheduler_info()["workers"])
    futures = [
        client.submit(
            _tune_direct_only, key, workers=[addr], allow_other_workers=False, pure=False
        )  # fmt: skip
        for key, addr in zip(keys, workers, strict=True)
    ]
    results = client.gather(futures)
    assert len({pid for pid, _ in results}) == 2
    assert all(solvers == ["conv_fwd_direct"] for _, solvers in results)
    saved = tuning_db.read_file(tuning_dir / "cpu.yaml", move_corrupt=False)
    assert set(keys) <= set(saved)
    assert all(saved[k][0].solver == "conv_fwd_direct" for k in keys)


def _die_once(x: np.ndarray, marker: str) -> np.ndarray:
    """A layer that kills its worker process the first time any worker runs it."""
    try:
        fd = os.open(marker, os.O_CREAT | os.O_EXCL)
    except FileExistsError:
        return x
    os.close(fd)
    os._exit(1)


@on_cluster
def test_a_worker_killed_mid_run_is_recovered(client: Any, tmp_path: Path) -> None:
    x = rand((4, 3, 8, 8), 40)
    layers = _layers(3, 4)
    want = x
    for layer in layers:
        want = layer(want)
    marker = tmp_path / "died"
    killer = functools.partial(_die_once, marker=str(marker))
    y = cld.sequential(da.from_array(x, chunks=(1, 3, 8, 8)), [layers[0], killer, *layers[1:]],
                       out_shape=want.shape[1:], dtype=want.dtype)  # fmt: skip
    got = client.compute(y).result(timeout=60)
    assert marker.exists()  # a worker did die
    np.testing.assert_array_equal(got, want)


def test_misaligned_numpy_blocks_run() -> None:
    """Distributed may hand a task a NumPy block unpickled at an odd byte offset; kernels
    that copy with cp.async need aligned pointers, so the emulator stages such arrays."""
    x0 = rand((2, 4, 9, 10), 50)
    x = np.empty(x0.nbytes + 1, np.uint8)[1:].view(np.float32).reshape(x0.shape)
    x[...] = x0
    assert not x.flags.aligned
    w = rand((5, 4, 3, 3), 51)
    algo = "conv_fwd_implicit_precomp_gemm"  # its loads are cp.async
    got = cl.conv2d(x, w, padding=1, algo=algo)
    np.testing.assert_array_equal(got, cl.conv2d(x0, w, padding=1, algo=algo))
    np.testing.assert_array_equal(x, x0)


def test_an_unbatched_array_is_refused_with_what_to_do() -> None:
    """The wrappers split the batch, so x must have one: the error says x[None] (it said
    an unbatched 3-D array was allowed)."""
    x = da.from_array(np.zeros((3, 12, 12), np.float32), chunks=(-1, 6, 6))
    with pytest.raises(BadParamError, match=r"x: expected a batched 4-D .*x\[None\]"):
        cld.conv2d(x, np.zeros((4, 3, 3, 3), np.float32), padding=1)
