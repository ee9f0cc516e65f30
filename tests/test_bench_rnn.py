"""benchmarks/rnn.py: the GPU table, FLOP counts, summary and headline lines (pure Python,
so the GPU-only code is checked here), and one benchmark row timed with every applicable
solver on each backend (on CUDA against cuDNN, as the device check runs it).
"""

from __future__ import annotations

import importlib
import math
import sys
import types
from pathlib import Path

import numpy as np
import pytest

BENCH = Path(__file__).resolve().parent.parent / "benchmarks"


@pytest.fixture(scope="module")
def bench() -> types.ModuleType:
    sys.path.insert(0, str(BENCH))
    try:
        return importlib.import_module("rnn")
    finally:
        sys.path.remove(str(BENCH))


def test_tables_and_flops(bench: types.ModuleType) -> None:
    modes, hs, bs = ["lstm", "gru"], list(bench.HIDDENS), list(bench.BATCHES)
    full = bench.table(False, modes, hs, bs, quick=False)
    quick = bench.table(False, modes, hs, bs, quick=True)
    # 2 modes x 3 hidden x 3 batch + the bidirectional row; quick keeps GRU at 512 only.
    assert len(full) == 19 and len(quick) == 9 + 3 + 1
    assert {r.t for r in full} == {100} and full[-1] == bench.Row("lstm", 100, 64, 512, 2, True)
    small = bench.table(True, modes, hs, bs, quick=True)
    assert [(r.mode, r.t, r.b, r.h) for r in small] == [("lstm", 5, 2, 8), ("gru", 5, 2, 8)]
    row = bench.Row("lstm", 100, 64, 1024)
    fwd = 2 * 100 * 64 * (4 * 1024) * (1024 + 1024)  # x W_ih^T and h W_hh^T per step
    assert bench.flops(row, "fp32", "fwd") == fwd
    assert bench.flops(row, "fp32", "fwd+bwd") == 3 * fwd  # backward: data + weight GEMMs


def test_summary_and_headlines(bench: types.ModuleType) -> None:
    def r(b: int, direction: str, ratio: float, auto: bool = True) -> dict:
        return dict(b=b, direction=direction, dtype="fp16", auto=auto, ms=1.0,
                    torch_over_ours=ratio, rel_err=1e-3)  # fmt: skip

    rows = [r(64, "fwd", 1.2), r(64, "fwd", 0.8), r(64, "fwd", 9.0, auto=False),
            r(8, "fwd+bwd", 2.0), r(1, "fwd+bwd", 0.5),
            dict(b=1, direction="fwd", dtype="fp32", auto=True, skipped="time budget"),
            dict(b=1, direction="fwd", dtype="fp32", auto=True, error="NotSupportedError: x"),
            dict(b=1, direction="fwd", dtype="fp32", auto=True, ms=2.0, rel_err=1e-6)]  # fmt: skip
    summ = bench.summarize(rows)
    b64 = summ["ratios"]["fwd batch 64"]  # the non-auto solver's 9x is not the dispatcher's
    assert math.isclose(b64["geo_mean"], math.sqrt(1.2 * 0.8)) and b64["min"] == 0.8
    assert b64["goal"] == 1.0 and summ["ratios"]["fwd+bwd batch <= 8"]["goal"] == 1.5
    assert math.isclose(summ["ratios"]["fwd+bwd batch <= 8"]["geo_mean"], 1.0)
    assert summ["max_rel_err"] == {"fp16": 1e-3, "fp32": 1e-6}
    assert summ["errors"] == 1 and summ["skipped"] == 1
    res = {"target": "cuda", "torch_device": "cuda (cuDNN)", "rows": rows, "summary": summ}
    lines = bench.headlines(res)
    assert "rnn fwd batch 64 on cuda: torch/ours geo-mean 0.98x, min 0.80x over 2 rows " \
           "(goal >= 1.0x)" in lines  # fmt: skip
    assert any("1 rows raised" in line for line in lines)
    assert any("1 rows skipped" in line for line in lines)
    sys.path.insert(0, str(BENCH))
    try:
        run_all = importlib.import_module("run_all")
        assert set(lines) <= set(run_all.headlines({"results": {"rnn": res}}))
    finally:
        sys.path.remove(str(BENCH))


@pytest.mark.parametrize("with_torch", [False, True])
def test_row_with_every_solver(bench: types.ModuleType, backend: str, with_torch: bool) -> None:
    import cudnnlite as cl

    torch = pytest.importorskip("torch") if with_torch else None
    threads = torch.get_num_threads() if torch else 0
    if backend == "cuda":
        import cupy as xp

        clock = sys.modules["_bench"].GpuClock(flush_bytes=1 << 20)
    else:
        xp, clock = np, sys.modules["_bench"].CpuClock(flush_bytes=1 << 20)
    try:
        torch = bench._torch(backend == "cuda") if with_torch else None
        direction = "fwd+bwd" if with_torch else "fwd"
        row = bench.Row("lstm", 3, 2, 8)
        rows = bench.bench_row(cl, row, "fp32", direction, clock, xp, True, torch)
    finally:
        if torch is not None:
            torch.set_num_threads(threads)  # _torch pins 1 thread next to the emulator
    assert rows[0]["auto"] and all("error" not in r for r in rows), rows
    labels = [r["solver"] for r in rows[1:]]
    assert ("rnn_fwd_standard + auto" if with_torch else "rnn_fwd_standard") in labels
    for r in rows:
        assert r["ms"] > 0 and math.isclose(r["tflops"], r["flop"] / r["ms"] / 1e9)
        if with_torch:
            # fp32 against torch's fp32 on the same weights: sums of 16 products per gate
            # over 3 steps, a few ulps apart (1e-5 leaves room for TF32-free GEMM orders).
            assert r["rel_err"] < 1e-5
            assert ("torch_over_ours" in r) == (backend == "cuda")
