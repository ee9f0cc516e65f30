"""benchmarks/report.py: the figures and the Markdown page render from a small results file
shaped like run_all.py's (field names as conv.py, memory_bound.py, activation.py and
overhead.py write them), with and without PyTorch's columns, with error rows, and with a
benchmark missing; ``--latest`` says when benchmarks/results/ holds no GPU run.
"""

from __future__ import annotations

import copy
import importlib
import json
import sys
import types
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("matplotlib")
from matplotlib.image import imread  # noqa: E402

BENCH = Path(__file__).resolve().parent.parent / "benchmarks"


@pytest.fixture
def bench(monkeypatch: pytest.MonkeyPatch) -> types.SimpleNamespace:
    # run_all.headlines imports overhead.py at call time: benchmarks/ stays on the path.
    monkeypatch.syspath_prepend(str(BENCH))
    names = ("run_all", "report", "conv")
    return types.SimpleNamespace(**{n: importlib.import_module(n) for n in names})


def _conv_row(layer: str, key: str, dtype: str, solver: str, chosen: str, **figures: Any) -> dict:
    row = {"suite": "resnet50", "layer": layer, "key": key, "dtype": dtype, "direction": "fwd",
           "gflop": 7.4, "chosen": chosen, "solver": solver}  # fmt: skip
    return {**row, **figures}


def gpu_doc(conv: types.ModuleType) -> dict[str, Any]:
    """A GPU run: conv with cuDNN's columns (fp16) and without (fp32), an error row, a
    memory-bound row with torch and one that raised, activation rows, overhead rows."""
    key1, key2 = "conv2d_fwd n32-c64-h56-w56 k64-r3-s3", "conv2d_fwd n32-c64-h56-w56 k256-r1-s1"
    ig, wino = "conv_fwd_implicit_gemm", "conv_fwd_winograd"
    rows = [
        _conv_row("l1.conv2", key1, "fp16", ig, wino, ms=0.05, tflops=148.0,
                  torch_ms=0.06, torch_over_ours=1.2),
        _conv_row("l1.conv2", key1, "fp16", wino, wino, ms=0.04, tflops=185.0,
                  torch_ms=0.06, torch_over_ours=1.5),
        _conv_row("l1.conv3", key2, "fp16", ig, ig, error="CUDADriverError: launch failed"),
        _conv_row("l1.conv3", key2, "fp16", wino, ig, ms=0.1, tflops=74.0,
                  torch_ms=0.08, torch_over_ours=0.8),
        _conv_row("l1.conv2", key1, "fp32", ig, ig, ms=0.4, tflops=18.5),
        _conv_row("l1.conv3", key2, "fp32", ig, ig, ms=0.3, tflops=24.7),
    ]  # fmt: skip
    mb_rows = [
        {"family": "pooling", "name": "max_pool2d 3x3/2 fwd", "shape": "32x64x112x112 NCHW",
         "dtype": "fp32", "bytes": 128450560, "ms": 0.04, "gbs": 3211.3, "copy_gbs": 3900.0,
         "of_copy": 0.82, "torch_ms": 0.05, "torch_over_ours": 1.25},
        {"family": "batch_norm", "name": "bn train fwd", "shape": "32x256x56x56 NCHW",
         "dtype": "fp16", "bytes": 205520896, "error": "RuntimeError: out of memory"},
    ]  # fmt: skip
    act_rows = [
        {"mode": "relu", "dtype": "fp32", "direction": "fwd", "elements": 67108864, "ms": 0.15,
         "gbs": 3579.1, "copy_gbs": 3900.0, "of_copy": 0.92, "torch_ms": 0.16,
         "torch_over_ours": 1.07},
        {"mode": "*", "dtype": "bf16", "direction": "*", "error": "TypeError: no bfloat16"},
    ]  # fmt: skip
    work = [
        {"op": "conv2d", "us": 8.1, "target_us": 10.0, "meets": True},
        {"op": "softmax", "us": 6.2, "target_us": None, "meets": None},
        {"op": "network graph replay", "us": 6.0, "target_us": 5.0, "meets": False},
    ]
    real = [
        {"op": "conv2d", "backend": "cpu", "us": 578.3},
        {"op": "conv2d", "backend": "cuda", "us": 21.0, "torch_us": 18.0,
         "ours_over_torch": 21.0 / 18.0},
        {"op": "softmax", "backend": "cuda", "us": 12.0, "torch_error": "RuntimeError: x"},
    ]  # fmt: skip
    return {
        "date": "2026-12-01T05:44:51+00:00",
        "small": False,
        "command": "benchmarks/run_all.py --out benchmarks/results",
        "machine": {
            "cudnnlite": {"version": "0.1.0"},
            "cuda": {
                "cupy": "14.0.0",
                "CUDA runtime": "13.0",
                "CUDA driver": "13.0",
                "GPUs": "1",
                "GPU 0": "NVIDIA H200, sm_90, 140 GiB, 132 SMs",
            },
            "cpu": {"model": "AMD EPYC", "cores": 16, "load_average": [0.5, 0.4, 0.3]},
            "torch": {"version": "2.13.0", "cuda": "13.0"},
        },  # fmt: skip
        "results": {
            "conv": {
                "target": "cuda",
                "batch": 32,
                "rows": rows,
                "goals": conv.GOALS,
                "summary": conv.summarize(rows),
            },
            "memory_bound": {
                "target": "cuda",
                "goals": {"of_copy": 0.9, "torch_over_ours": 1.0},
                "rows": mb_rows,
                "missing_case_modules": [],
            },
            "activation": {
                "target": "cuda",
                "elements": 67108864,
                "clock": "cuda events",
                "repeats": 10,
                "bandwidth": act_rows,
                "seconds": 3.0,
                "overhead": {
                    "calls": 2000,
                    "us_per_call": 7.5,
                    "us_per_call_min": 7.1,
                    "goal_us": 10.0,
                    "elements": 256,
                },
            },
            "overhead": {"library_work": work, "real": real, "targets_us": {"conv2d": 10.0}},
        },  # fmt: skip
        "errors": {},
    }


def emulator_doc(conv: types.ModuleType) -> dict[str, Any]:
    """The same run in small mode on a machine without a GPU: no torch columns, no conv."""
    doc = copy.deepcopy(gpu_doc(conv))
    doc["small"] = True
    doc["machine"]["cuda"] = {"cupy": "not installed (ModuleNotFoundError)"}
    res = doc["results"]
    del res["conv"]
    res["memory_bound"]["target"] = res["activation"]["target"] = "emulator"
    for rows in (res["memory_bound"]["rows"], res["activation"]["bandwidth"]):
        for r in rows:
            r.pop("torch_ms", None)
            r.pop("torch_over_ours", None)
    res["overhead"]["real"] = [r for r in res["overhead"]["real"] if r["backend"] == "cpu"]
    return doc


def _check_pngs(paths: list[Path]) -> None:
    for p in paths:
        assert p.stat().st_size > 0
        image = imread(p)  # raises on anything but a valid PNG
        assert image.ndim == 3 and image.shape[0] > 100 and image.shape[1] > 100


def test_gpu_run_through_run_all(bench: types.SimpleNamespace, tmp_path: Path, capsys) -> None:
    src = tmp_path / "benchmarks-gpu.json"
    src.write_text(json.dumps(gpu_doc(bench.conv)))
    out = tmp_path / "report"
    assert bench.run_all.main(["--summarize", str(src), "--report", str(out)]) == 0
    assert "conv fp16 on cuda" in capsys.readouterr().out  # the headline lines still print
    pngs = sorted(out.glob("*.png"))
    names = {"conv_fwd_fp16.png", "conv_fwd_fp32.png", "memory_bound.png", "activation.png",
             "overhead.png"}  # fmt: skip
    assert {p.name for p in pngs} == names
    _check_pngs(pngs)
    page = (out / "README.md").read_text()
    for name in names:
        assert f"]({name})" in page
    assert "NVIDIA H200" in page and "No GPU figures" not in page
    assert "cuDNN's time over ours" in page  # fp16 had cuDNN's columns
    assert "no cuDNN figures in this run" in page  # fp32 had none
    assert "- conv fp16 on cuda (batch 32, 2 layers" in page  # run_all.headlines' lines


def test_emulator_run_without_conv(bench: types.SimpleNamespace, tmp_path: Path) -> None:
    doc = emulator_doc(bench.conv)
    (tmp_path / "conv_fwd_fp16.png").write_bytes(b"an earlier render")
    written = bench.report.render(doc, tmp_path)
    assert [p.name for p in written] == [
        "memory_bound.png", "activation.png", "overhead.png", "README.md"
    ]  # fmt: skip
    assert not (tmp_path / "conv_fwd_fp16.png").exists()
    _check_pngs(written[:-1])
    page = written[-1].read_text()
    assert "No GPU figures: this is an emulator run" in page
    assert "conv: no figure, not in this results file" in page
    assert "- GPU: none" in page


def test_latest_finds_only_gpu_runs(bench: types.SimpleNamespace, tmp_path: Path, capsys) -> None:
    report = bench.report
    (tmp_path / "sass_mix_sm90.json").write_text(json.dumps({"arch": "sm_90", "rows": []}))
    (tmp_path / "benchmarks-emu.json").write_text(json.dumps(emulator_doc(bench.conv)))
    assert report.latest_gpu_results(tmp_path) is None
    assert report.main(["--latest", "--results", str(tmp_path)]) == 0
    assert f"no GPU results in {tmp_path}/" in capsys.readouterr().out
    assert not (tmp_path / "report").exists()
    newer, older = gpu_doc(bench.conv), gpu_doc(bench.conv)
    older["date"] = "2026-11-30T01:00:00+00:00"
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "benchmarks-a.json").write_text(json.dumps(newer))
    (tmp_path / "benchmarks-b.json").write_text(json.dumps(older))
    assert report.latest_gpu_results(tmp_path) == tmp_path / "sub" / "benchmarks-a.json"
    # The repository's own folder: today only a sass_mix JSON, so no GPU run.
    if report.latest_gpu_results() is None:
        assert report.main(["--latest"]) == 0
        assert "no GPU results in" in capsys.readouterr().out


def test_page_without_matplotlib(
    bench: types.SimpleNamespace, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib now raises
    written = bench.report.render(emulator_doc(bench.conv), tmp_path)
    assert [p.name for p in written] == ["README.md"]
    page = written[0].read_text()
    assert "No figures drawn: matplotlib is not importable" in page
    assert "- activation overhead on emulator: 7.5 us per call" in page  # headlines stay
