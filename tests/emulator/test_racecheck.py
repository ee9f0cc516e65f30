"""The emulator's race check (CUDNNLITE_EMU_RACECHECK=1; emulator/racecheck.py and
include/emu_racecheck.h).

ThreadSanitizer's runtime has to be in a process from its start, so the checks run in
one child process started by the race-check runner (``python -m
cudnnlite.runtime.emulator.racecheck -c ...``): the planted races of
cuda_src/selftest/racecheck_selftest.cu must be reported with both threads and both
source lines, the race-free self-tests, a representative kernel of several primitive
families and a cooperative launch must pass (with the right numbers). The runner, the
refusal without the runtime and the report parser are checked in this process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from cudnnlite.errors import NotSupportedError
from cudnnlite.runtime import ModuleSpec
from cudnnlite.runtime.emulator import racecheck
from cudnnlite.runtime.emulator.build import compile_flags
from cudnnlite.runtime.emulator.launcher import EmulatorBackend
from cudnnlite.runtime.selftest import RACECHECK_SELFTEST

SRC = RACECHECK_SELFTEST.source
KERNELS = list(RACECHECK_SELFTEST.names)

# Runs in the child (TSan preloaded, CUDNNLITE_EMU_RACECHECK=1): each case prints one JSON
# line {"case", "races": [...] or null, "error", "ok"}; ok compares with NumPy.
CHILD = textwrap.dedent(
    """
    import json, sys
    import numpy as np
    import cudnnlite as cl
    from cudnnlite.errors import ExecutionError
    from cudnnlite.runtime import ModuleSpec, backend_by_name

    spec = ModuleSpec.make(SRC_AND_KERNELS)
    mod = backend_by_name("cpu").module(spec)
    rng = np.random.default_rng(0)

    def emit(case, fn):
        try:
            ok = bool(fn())
            print(json.dumps({"case": case, "races": None, "ok": ok}), flush=True)
        except ExecutionError as e:
            races = [
                {"memory": r.memory, "count": r.count,
                 "current": [r.current.kind, r.current.thread, r.current.where],
                 "previous": [r.previous.kind, r.previous.thread, r.previous.where]}
                for r in getattr(e, "races", [])
            ]
            print(json.dumps({"case": case, "races": races, "error": str(e)}), flush=True)

    x = np.arange(128, dtype=np.float32)

    def launch(name, grid, block, args):
        mod.get_function(name)(grid, block, args)
        return True

    def neighbour():
        out = np.zeros(128, np.float32)
        launch("neighbour_with_syncthreads", 2, 64, (x, out))
        return np.array_equal(out.reshape(2, 64), np.roll(x.reshape(2, 64), -1, axis=1))

    def warp_sum():
        out = np.zeros(4, np.float32)
        launch("warp_sum_with_syncwarp", 2, 64, (x, out))
        return np.array_equal(out, x.reshape(4, 32).sum(axis=1))

    def shuffle():
        out, sums = np.zeros(128, np.float32), np.zeros(4, np.float32)
        launch("warp_shuffle_exchange", 2, 64, (x, out, sums))
        return np.array_equal(out, x[np.arange(128) ^ 1]) and np.array_equal(
            sums, x.reshape(4, 32).sum(axis=1))

    def histogram():
        v = rng.integers(0, 1000, 128).astype(np.int32)
        bins = np.zeros(16, np.int32)
        launch("atomic_histogram", 2, 64, (v, bins, np.int32(8)))
        want = np.stack([np.bincount(b % 8, minlength=8) for b in v.reshape(2, 64)])
        return np.array_equal(bins.reshape(2, 8), want)

    def reuse():
        out = np.zeros(64, np.float32)
        launch("barrier_reuse", 1, 64, (out, np.int32(3)))
        t = np.arange(64)
        return np.array_equal(out, sum((t ^ 1) + r for r in range(3)).astype(np.float32))

    emit("planted_missing_syncthreads", lambda: launch(
        "planted_missing_syncthreads", 2, 64, (x, np.zeros(128, np.float32))))
    emit("planted_warp_synchronous", lambda: launch(
        "planted_warp_synchronous", 2, 64, (x, np.zeros(4, np.float32))))
    emit("planted_global_race", lambda: launch(
        "planted_global_race", 2, 64, (np.zeros(2, np.int32),)))
    emit("planted_dynamic_shared", lambda: mod.get_function("planted_dynamic_shared")(
        1, 64, (x, np.zeros(128, np.float32)), shared_mem=256))
    emit("neighbour_with_syncthreads", neighbour)
    emit("warp_sum_with_syncwarp", warp_sum)
    emit("warp_shuffle_exchange", shuffle)
    emit("atomic_histogram", histogram)
    emit("barrier_reuse", reuse)

    # Representative kernels of primitive families, small shapes, against the reference.
    f = lambda *s: rng.standard_normal(s).astype(np.float32)
    a = f(4, 300)
    e = np.exp(a - a.max(axis=-1, keepdims=True))
    emit("softmax", lambda: np.allclose(
        cl.softmax(a, axis=-1), e / e.sum(axis=-1, keepdims=True), atol=1e-6))
    ln = (a - a.mean(axis=-1, keepdims=True)) / np.sqrt(a.var(axis=-1, keepdims=True) + 1e-5)
    emit("layer_norm", lambda: np.allclose(cl.layer_norm(a, (300,)), ln, atol=1e-4))
    xc, wc = f(2, 4, 6, 6), f(8, 4, 3, 3)
    emit("conv2d", lambda: np.allclose(
        cl.conv2d(xc, wc, padding=1, algo="direct"),
        cl.reference.conv_forward(xc, wc, [(1, 1), (1, 1)], [1, 1], [1, 1]), atol=1e-4))

    # A cooperative launch: blocks on OS threads of their own, ordered by grid_sync only.
    from cudnnlite.runtime.selftest import GRID_SYNC_SELFTEST
    def grid():
        kernel = backend_by_name("cpu").module(GRID_SYNC_SELFTEST).get_function("grid_exchange")
        nb, nt, rounds = 4, 32, 3
        r = np.arange(rounds)[:, None, None]
        c = np.arange(nb)[None, :, None]
        t = np.arange(nt)[None, None, :]
        want = ((r * nb + c) * nt + t + 1).sum(axis=(0, 1))
        ok = True
        for _ in range(2):  # the second launch runs on OpenMP threads woken again
            slots = np.full(2 * nb * nt, -10**6, np.int32)
            out, counter = np.zeros(nb * nt, np.int64), np.zeros(1, np.uint32)
            kernel(nb, nt, (slots, out, counter, np.int32(rounds)), cooperative=True)
            ok &= np.array_equal(out.reshape(nb, nt), np.tile(want, (nb, 1)))
        return ok
    emit("grid_exchange", grid)
    """
)


def _race_runtime() -> str:
    try:
        return racecheck.runtime_path()
    except NotSupportedError as e:
        pytest.skip(str(e))


@pytest.fixture(scope="module")
def child_results() -> dict[str, dict]:
    _race_runtime()
    code = CHILD.replace("SRC_AND_KERNELS", f"{SRC!r}, {KERNELS!r}")
    env = dict(os.environ)
    env.pop("CUDNNLITE_BACKEND", None)
    proc = subprocess.run(
        [sys.executable, "-m", "cudnnlite.runtime.emulator.racecheck", "-c", code],
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
        cwd=Path(__file__).resolve().parents[2],
    )
    results = {}
    for line in proc.stdout.splitlines():
        if line.startswith("{"):
            item = json.loads(line)
            results[item["case"]] = item
    assert proc.returncode == 0 and results, proc.stdout[-3000:] + proc.stderr[-3000:]
    return results


def _where(line_of: str) -> str:
    """`selftest/racecheck_selftest.cu:<line>` where the text first occurs."""
    text = (Path(__file__).resolve().parents[2] / "cuda_src" / SRC).read_text()
    at = text.index(line_of)
    return f"{SRC}:{text.count(chr(10), 0, at) + 1}"


def test_missing_syncthreads_is_reported_with_both_lines(child_results: dict) -> None:
    item = child_results["planted_missing_syncthreads"]
    assert item["races"], item
    write = _where("buf[t] = x[blockIdx.x * blockDim.x + t];")
    read = _where("out[blockIdx.x * blockDim.x + t] = buf[(t + 1) % blockDim.x];")
    pairs = {(r["current"][0], r["current"][2], r["previous"][0], r["previous"][2])
             for r in item["races"]}  # fmt: skip
    assert pairs <= {("write", write, "read", read), ("read", read, "write", write)}, pairs
    for r in item["races"]:
        assert r["memory"] == "shared memory"
        for side in (r["current"], r["previous"]):
            assert side[1].startswith("block (0,0,0) thread (")  # the first block races first
        assert r["current"][1] != r["previous"][1]
    # The readable message names the kernel, both threads and both lines.
    message = item["error"]
    assert "planted_missing_syncthreads" in message and write in message and read in message
    assert "races with a previous" in message


def test_warp_synchronous_code_without_syncwarp_is_a_race(child_results: dict) -> None:
    item = child_results["planted_warp_synchronous"]
    assert item["races"], item
    lines = {r["current"][2] for r in item["races"]} | {r["previous"][2] for r in item["races"]}
    assert (
        _where("if (lane < 16) v[t] += v[t + 16];") in lines
        or _where("if (lane < 8) v[t] += v[t + 8];") in lines
    )
    for r in item["races"]:
        assert r["memory"] == "shared memory"
        # Two lanes of one warp: the same block, threads of one warp.
        ta = int(r["current"][1].split("thread (")[1].split(",")[0])
        tb = int(r["previous"][1].split("thread (")[1].split(",")[0])
        assert ta // 32 == tb // 32 and ta != tb


def test_global_memory_write_write_race(child_results: dict) -> None:
    item = child_results["planted_global_race"]
    assert item["races"], item
    (race,) = item["races"]
    line = _where("if (threadIdx.x < 2) out[blockIdx.x] = (int)threadIdx.x;")
    assert race["memory"] == "global memory"
    assert race["current"][0] == race["previous"][0] == "write"
    assert race["current"][2] == race["previous"][2] == line
    threads = {race["current"][1], race["previous"][1]}
    assert threads == {"block (0,0,0) thread (0,0,0)", "block (0,0,0) thread (1,0,0)"}


def test_dynamic_shared_memory_race(child_results: dict) -> None:
    item = child_results["planted_dynamic_shared"]
    assert item["races"], item
    write = _where("buf[t] = x[blockIdx.x * blockDim.x + t];\n    // missing __syncthreads() (or")
    read = _where("out[blockIdx.x * blockDim.x + t] = buf[t ^ 1];")
    for r in item["races"]:
        assert r["memory"] == "dynamic shared memory"
        assert {r["current"][2], r["previous"][2]} == {write, read}
        ta = int(r["current"][1].split("thread (")[1].split(",")[0])
        tb = int(r["previous"][1].split("thread (")[1].split(",")[0])
        assert ta ^ 1 == tb  # the two threads of a pair


@pytest.mark.parametrize(
    "case",
    [
        "neighbour_with_syncthreads",
        "warp_sum_with_syncwarp",
        "warp_shuffle_exchange",
        "atomic_histogram",
        "barrier_reuse",
        "softmax",
        "layer_norm",
        "conv2d",
        "grid_exchange",
    ],
)
def test_race_free_kernels_pass_with_the_right_numbers(child_results: dict, case: str) -> None:
    item = child_results[case]
    assert item["races"] is None, item.get("error")
    assert item["ok"], item


# Every primitive family under the check, small shapes (about 30 instrumented modules,
# 5-20 s of g++ each when cold; 136 s in one process): CUDNNLITE_RACECHECK_SWEEP=1 (CI
# sets it). Four child processes, one per group of families sharing modules, so xdist's
# workers share the work; each prints its cases and every case name the sweep knows.
SWEEP = textwrap.dedent(
    """
    import json, os
    import numpy as np
    import cudnnlite as cl
    from cudnnlite.errors import ExecutionError

    rng = np.random.default_rng(0)
    f = lambda *s: rng.standard_normal(s).astype(np.float32)
    x4, w4, h, d = f(2, 8, 8, 8), f(8, 8, 3, 3), np.float16, np.float64
    q = f(1, 2, 16, 32)
    grid = rng.uniform(-1, 1, (2, 5, 5, 2)).astype(np.float32)

    def group_norm_nhwc_both(x, g):
        _, mean, rstd = cl.group_norm_forward(x, g, layout="NHWC")
        return cl.group_norm_backward(f(*x.shape), x, g, mean, rstd, layout="NHWC")

    def layer_norm_both(x):
        _, mean, rstd = cl.layer_norm_forward(x, x.shape[-1:])
        return cl.layer_norm_backward(f(*x.shape), x, x.shape[-1:], mean, rstd)

    cases = {
        "relu": lambda: cl.relu(f(1000)),
        "softmax": lambda: cl.softmax(f(4, 300), axis=-1),
        "softmax_backward": lambda: cl.softmax_backward(f(4, 300), f(4, 300), axis=-1),
        "softmax fp16": lambda: cl.softmax(f(4, 300).astype(h), axis=-1),
        "softmax short rows": lambda: (  # 16 lanes a row (scalar); 2 (a pack each)
            cl.softmax_backward(f(37, 10), cl.softmax(f(37, 10), axis=-1), axis=-1),
            cl.softmax(f(37, 8), axis=-1),
        ),
        "layer_norm bf16": lambda: cl.layer_norm(f(4, 300).astype(cl.bfloat16), (300,)),
        "rms_norm": lambda: cl.rms_norm(f(4, 300), (300,)),
        "layer_norm vec, split": lambda: (
            layer_norm_both(f(37, 64)),  # 16 lanes a row, the last warp partly past the end
            layer_norm_both(f(4, 256)),  # 16-byte packs, a block a row
            layer_norm_both(f(2, 8192)),  # split statistics, rownorm_apply, split backward
        ),
        "batch_norm": lambda: cl.batch_norm(x4, np.zeros(8, np.float32),
                                            np.ones(8, np.float32), training=True),
        "batch_norm_backward": lambda: cl.batch_norm_backward(
            f(2, 8, 8, 8), x4, np.zeros(8, np.float32), np.ones(8, np.float32)),
        "group_norm": lambda: (
            cl.group_norm(x4, 2),
            group_norm_nhwc_both(f(1, 20, 20, 40), 4),  # split along H*W
        ),
        "lrn": lambda: cl.lrn(x4, 3),
        "max_pool2d": lambda: cl.max_pool2d(x4, 3, 2, 1),
        "avg_pool_backward": lambda: cl.avg_pool_backward(f(2, 8, 4, 4), x4.shape, 2),
        "adaptive_avg_pool2d": lambda: cl.adaptive_avg_pool2d(x4, 3),
        "dropout": lambda: cl.dropout(f(1000), 0.5, seed=1),
        "add_tensor": lambda: cl.add_tensor(f(4, 300), f(4, 300)),
        "reduce_tensor": lambda: (  # block, split block + finish, warp, thread kernels
            cl.reduce_tensor(f(4, 5000), "max", 1, return_indices=True),
            cl.reduce_tensor(f(2, 9000)[:, ::-1], "sum", 1),
            cl.reduce_tensor(f(3, 4, 50), "norm2", (0, 2)),
            cl.reduce_tensor(f(40, 300), "avg", 0),
        ),
        "grid_sample": lambda: cl.grid_sample(x4, grid),
        "grid_sample_backward": lambda: cl.grid_sample_backward(f(2, 8, 5, 5), x4, grid),
        "affine_grid": lambda: cl.affine_grid_backward(
            cl.affine_grid(f(2, 2, 3), (2, 1, 17, 19)), (2, 1, 17, 19)
        ),
        "sdpa": lambda: cl.scaled_dot_product_attention(q, q, q),
        "sdpa fp16": lambda: cl.scaled_dot_product_attention(*(f(1, 2, 64, 64).astype(h),) * 3),
        "sdpa fp64 dmma": lambda: cl.scaled_dot_product_attention_backward(
            *(f(1, 1, 40, 16).astype(d),) * 5,
            cl.scaled_dot_product_attention(*(f(1, 1, 40, 16).astype(d),) * 3, is_causal=True,
                                            return_lse=True, algo="sdpa_fwd_flash_dmma")[1],
            is_causal=True, algo="sdpa_bwd_flash_dmma"),
        "ctc_loss": lambda: cl.ctc_loss(
            np.log(cl.softmax(f(12, 2, 5), axis=-1)),
            rng.integers(1, 5, (2, 4)).astype(np.int32),
            np.array([12, 10], np.int32), np.array([4, 3], np.int32)),
        "conv direct": lambda: cl.conv2d(x4, w4, padding=1, algo="direct"),
        "conv implicit_gemm": lambda: cl.conv2d(x4, w4, padding=1, algo="implicit_gemm"),
        "conv implicit_gemm fp16": lambda: cl.conv2d(x4.astype(h), w4.astype(h), padding=1,
                                                     algo="implicit_gemm"),
        "conv winograd": lambda: cl.conv2d(x4, w4, padding=1, algo="winograd"),
        "conv gemm": lambda: cl.conv2d(x4, w4, padding=1, algo="gemm"),
        "conv tensor_core fp16": lambda: cl.conv2d(x4.astype(h), w4.astype(h), padding=1,
                                                   algo="tensor_core"),
        "conv wgmma fp16": lambda: cl.conv2d(x4.astype(h), w4.astype(h), padding=1,
                                             algo="conv_fwd_tc_wgmma"),
        "conv3d": lambda: cl.conv3d(f(1, 4, 5, 5, 5), f(4, 4, 3, 3, 3), padding=1),
        "conv_transpose2d": lambda: cl.conv_transpose2d(x4, f(8, 4, 3, 3), padding=1),
        "conv2d_backward_data": lambda: cl.conv2d_backward_data(f(2, 8, 8, 8), w4, x4.shape,
                                                                padding=1),
        "conv2d_backward_filter": lambda: cl.conv2d_backward_filter(x4, f(2, 8, 8, 8),
                                                                    w4.shape, padding=1),
        "conv2d_backward_bias": lambda: cl.conv2d_backward_bias(f(2, 8, 8, 8)),
        "conv dmma fp64": lambda: (
            cl.conv2d(x4.astype(d), w4.astype(d), padding=1,
                      algo="conv_fwd_dmma_implicit_gemm"),
            cl.conv2d_backward_filter(x4.astype(d), f(2, 8, 4, 4).astype(d), w4.shape,
                                      padding=1, stride=2,
                                      algo="conv_bwd_filter_dmma_implicit_gemm"),
            cl.conv2d_backward_data(f(2, 8, 4, 4).astype(d), w4.astype(d), x4.shape, padding=1,
                                    stride=2, algo="conv_bwd_data_dmma_implicit_gemm_phased"),
        ),
    }
    print(json.dumps({"all": sorted(cases)}), flush=True)
    group = os.environ["SWEEP_CASES"].split("|")
    for name, fn in cases.items():
        if name not in group:
            continue
        try:
            fn()
            print(json.dumps({"case": name, "error": None}), flush=True)
        except ExecutionError as e:
            print(json.dumps({"case": name, "error": str(e)}), flush=True)
    """
)


SWEEP_GROUPS = (
    ("relu", "softmax", "softmax_backward", "softmax fp16", "softmax short rows",
     "layer_norm bf16", "rms_norm", "layer_norm vec, split",
     "batch_norm", "batch_norm_backward", "group_norm", "lrn", "ctc_loss"),
    ("max_pool2d", "avg_pool_backward", "adaptive_avg_pool2d", "dropout", "add_tensor",
     "reduce_tensor", "grid_sample", "grid_sample_backward", "affine_grid", "sdpa", "sdpa fp16",
     "sdpa fp64 dmma"),
    ("conv direct", "conv implicit_gemm", "conv implicit_gemm fp16", "conv winograd",
     "conv gemm", "conv tensor_core fp16", "conv wgmma fp16"),
    ("conv3d", "conv_transpose2d", "conv2d_backward_data", "conv2d_backward_filter",
     "conv2d_backward_bias", "conv dmma fp64"),
)  # fmt: skip


@pytest.mark.slow
@pytest.mark.skipif(
    os.environ.get("CUDNNLITE_RACECHECK_SWEEP") != "1",
    reason="every family under the race check: set CUDNNLITE_RACECHECK_SWEEP=1",
)
@pytest.mark.parametrize("group", range(len(SWEEP_GROUPS)))
def test_every_family_is_race_free(group: int) -> None:
    _race_runtime()
    cases = SWEEP_GROUPS[group]
    proc = subprocess.run(
        [sys.executable, "-m", "cudnnlite.runtime.emulator.racecheck", "-c", SWEEP],
        capture_output=True,
        text=True,
        timeout=3600,
        cwd=Path(__file__).resolve().parents[2],
        env={**os.environ, "SWEEP_CASES": "|".join(cases)},
    )
    lines = [json.loads(x) for x in proc.stdout.splitlines() if x.startswith("{")]
    assert proc.returncode == 0 and lines, proc.stdout[-3000:] + proc.stderr[-3000:]
    # The groups cover every case of the sweep, each once.
    known = lines[0]["all"]
    assert sorted(c for g in SWEEP_GROUPS for c in g) == known
    results = {r["case"]: r["error"] for r in lines[1:]}
    assert sorted(results) == sorted(cases), proc.stdout[-3000:] + proc.stderr[-3000:]
    failed = {case: error for case, error in results.items() if error}
    assert not failed, json.dumps(failed, indent=1)[:6000]


# ------------------------------------------------------------------ in this process
def test_refused_without_the_tsan_runtime(monkeypatch: pytest.MonkeyPatch) -> None:
    if racecheck.runtime_loaded():
        pytest.skip("this process runs under the race-check runner")
    monkeypatch.setenv("CUDNNLITE_EMU_RACECHECK", "1")
    backend = EmulatorBackend()
    assert backend.device_key().endswith("-racecheck")  # its own module cache
    with pytest.raises(NotSupportedError, match="cudnnlite.runtime.emulator.racecheck"):
        backend._build(ModuleSpec.make(SRC, KERNELS))


def test_compile_flags_of_the_race_check_build() -> None:
    plain, checked = compile_flags(False), compile_flags(False, racecheck=True)
    assert "-fsanitize=thread" not in plain
    assert "-fsanitize=thread" in checked and "-g1" in checked  # line tables for reports
    assert "--param=tsan-instrument-func-entry-exit=0" in checked


def test_runner_usage_and_compiler_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    assert racecheck.main(["-c"]) == 2
    monkeypatch.setenv("LD_PRELOAD", "/x/libfoo.so:/usr/lib/libtsan.so.2")
    assert racecheck.child_env()["LD_PRELOAD"] == "/x/libfoo.so"
    monkeypatch.setenv("LD_PRELOAD", "/usr/lib/libtsan.so.2")
    assert "LD_PRELOAD" not in racecheck.child_env()
    monkeypatch.delenv("LD_PRELOAD")
    assert racecheck.child_env() is None


def test_report_parser_reads_tsan_output() -> None:
    src = str(Path(__file__).resolve().parents[2] / "cuda_src" / SRC)
    log = textwrap.dedent(
        f"""\
        ==================
        WARNING: ThreadSanitizer: data race (pid=1)
          Write of size 4 at 0x7b8c00024504 by thread T3:
            #0 k {src}:27 (m.so+0x37fb)

          Previous read of size 4 at 0x7b8c00024504 by thread T2:
            #0 k {src}:29 (m.so+0x3825)

          Location is heap block of size 6408 at 0x7b8c00023000 allocated by main thread:
            #0 malloc tsan_interceptors_posix.cpp:647 (libtsan.so.2+0x3ebb8)
            #2 allocate_dtv_entry ../elf/dl-tls.c:721 (ld-linux-x86-64.so.2+0x10e4d)

          Thread T3 'block (1,0,0) thread (1,0,0)' (tid=0, running) created by main thread at:
            #0 emu::race_block_begin(emu::Worker&) emu_racecheck.h:97 (m.so+0x1a0cc)

          Thread T2 'block (1,0,0) thread (0,0,0)' (tid=0, running) created by main thread at:
            #0 emu::race_block_begin(emu::Worker&) emu_racecheck.h:97 (m.so+0x1a0cc)

        SUMMARY: ThreadSanitizer: data race {src}:27 in k
        ==================
        WARNING: ThreadSanitizer: data race (pid=1)
          Write of size 4 at 0x7b8c00024508 by thread T4:
            #0 k {src}:27 (m.so+0x37fb)

          Previous read of size 4 at 0x7b8c00024508 by thread T3:
            #0 k {src}:29 (m.so+0x3825)

          Thread T4 'block (1,0,0) thread (2,0,0)' (tid=0, running) created by main thread at:
          Thread T3 'block (1,0,0) thread (1,0,0)' (tid=0, running) created by main thread at:
        ==================
        """
    )
    (report,) = racecheck.parse_reports(log)
    assert report.count == 2 and report.memory == "shared memory"
    assert report.current == racecheck.Access(
        "write", 4, "block (1,0,0) thread (1,0,0)", f"{SRC}:27"
    )
    assert report.previous == racecheck.Access(
        "read", 4, "block (1,0,0) thread (0,0,0)", f"{SRC}:29"
    )
    err = racecheck.race_error("k", SRC, [report])
    assert "write of 4 bytes at selftest/racecheck_selftest.cu:27 by block (1,0,0)" in str(err)
    assert err.races == [report]
    assert racecheck.parse_reports("WARNING: ThreadSanitizer: thread leak\n") == []
