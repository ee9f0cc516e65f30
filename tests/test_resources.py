"""Per-kernel resources: ptxas's log and the CUBIN agree, and the report runs end to end.

Compiles only tiny sources and the emulator self-test module, for sm_90, to stay fast.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cudnnlite.runtime import cubin, nvrtc_check, resources
from cudnnlite.runtime.kernel import ModuleSpec

SELFTEST = ModuleSpec.make("selftest/emulator_selftest.cu", ["tiled_matmul", "block_reduce_sum"])
SELFTEST_OTHER = ModuleSpec.make("selftest/wmma_selftest.cu", ["wmma_gemm_fp16"])

TINY = """\
#include "common/cudnnlite.cuh"
__device__ __noinline__ float helper(float v) { return v * v + 1.0f; }
extern "C" __global__ void __launch_bounds__(128) bounded(float* y) {
    __shared__ float tile[300];
    tile[threadIdx.x] = y[threadIdx.x];
    __syncthreads();
    y[threadIdx.x] = helper(tile[127 - threadIdx.x]);
}
extern "C" __global__ void unbounded(float* y, int n) {
    for (int i = threadIdx.x; i < n; i += blockDim.x) y[i] = helper(y[i]);
}
"""

LOG = """\
ptxas info    : 0 bytes gmem
ptxas info    : Function properties for helper
ptxas         .     8 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Compiling entry function '_Z4gemmIfEvPf' for 'sm_90'
ptxas info    : Function properties for _Z4gemmIfEvPf
ptxas         .     40 bytes stack frame, 36 bytes spill stores, 28 bytes spill loads
ptxas info    : Used 255 registers, used 1 barriers, 8448 bytes smem
ptxas info    : Compile time = 12.389 ms
ptxas info    : Compiling entry function 'plain' for 'sm_90'
ptxas info    : Function properties for plain
ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 8 registers, 384 bytes cmem[0]
"""


def test_parse_ptxas_log() -> None:
    got = cubin.parse_ptxas_log(LOG)
    assert set(got) == {"_Z4gemmIfEvPf", "plain"}  # not the device function "helper"
    g = got["_Z4gemmIfEvPf"]
    assert (g.registers, g.stack_frame, g.spill_stores, g.spill_loads) == (255, 40, 36, 28)
    assert (g.shared, g.barriers) == (8448, 1)
    p = got["plain"]
    assert (p.registers, p.shared, p.barriers, p.spill_stores) == (8, 0, 0, 0)


def _tiny(report: tuple[str, ...] = ()) -> nvrtc_check.CompileResult:
    return nvrtc_check.compile_source(
        TINY, "tiny.cu", ["bounded", "unbounded"], "sm_90", report_options=report
    )


def test_verbose_ptxas_leaves_the_code_alone(nvrtc: None) -> None:
    quiet, verbose = _tiny(), _tiny((resources.PTXAS_VERBOSE,))
    assert "ptxas" not in quiet.log and "Used" in verbose.log
    texts = cubin.text_sections(quiet.cubin)
    assert texts and texts == cubin.text_sections(verbose.cubin)


def test_log_and_cubin_agree(nvrtc: None) -> None:
    res = _tiny((resources.PTXAS_VERBOSE,))
    from_log, from_elf = cubin.parse_ptxas_log(res.log), cubin.read_cubin(res.cubin)
    assert set(from_log) == set(from_elf) == {"bounded", "unbounded"}
    for name, rep in from_log.items():
        elf = from_elf[name]
        assert rep.registers == elf.registers > 0
        assert rep.stack_frame == elf.frame_bytes
        assert rep.shared == elf.static_shared  # sm_90's 1 KiB reserve taken off
    assert from_log["bounded"].shared == 1200 and from_log["bounded"].barriers == 1
    assert from_elf["bounded"].max_threads == 128
    assert from_elf["unbounded"].max_threads is None


def test_module_resources(nvrtc: None) -> None:
    mod = resources.module_resources(SELFTEST, "sm_90", assume_threads=256)
    assert mod.error is None
    kernels = {k.name: k for k in mod.kernels}
    assert {"tiled_matmul", "block_reduce_sum"} <= set(kernels)
    tm = kernels["tiled_matmul"]
    assert tm.registers > 0 and not tm.spills and tm.mismatch == ""
    assert tm.static_shared > 0 and tm.threads == 256 and tm.threads_from == "assumed"
    assert tm.blocks_per_sm is not None and tm.blocks_per_sm * 8 == tm.warps_per_sm
    assert "tiled_matmul" in resources.format_row(tm)


def test_command_line_json(nvrtc: None, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "res.json"
    argv = ["--resources", "--arch", "sm_90", "--json", str(out)]
    assert nvrtc_check.main(argv, specs=[SELFTEST]) == 0
    text = capsys.readouterr().out
    assert "tiled_matmul" in text and "0 failed" in text
    data = json.loads(out.read_text())
    assert data["limits"]["sm_90"]["max_warps"] == 64
    (module,) = data["modules"]
    assert module["arch"] == "sm_90" and module["error"] is None
    row = next(k for k in module["kernels"] if k["name"] == "tiled_matmul")
    assert row["registers"] > 0 and row["threads_from"] == "unknown"
    assert row["blocks_per_sm"] is None and 0 < row["warps_per_sm"] <= 64


def test_cli_subcommand(
    nvrtc: None, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    from cudnnlite.cli import main
    from cudnnlite.runtime import variants

    # Only the self-test module: the real list compiles every kernel (minutes).
    monkeypatch.setattr(variants, "all_module_specs", lambda: [SELFTEST, SELFTEST_OTHER])
    assert main(["resources", "--filter", "emulator_selftest", "-j", "1"]) == 0
    out = capsys.readouterr().out
    assert "tiled_matmul" in out and "wmma" not in out
