"""``cudnnlite doctor``: each check made to fail on purpose, with the right advice."""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

import pytest

import cudnnlite
from cudnnlite.cli import main
from cudnnlite.runtime import cuda_toolkit

# cudnnlite.doctor is the function; the module is reached through importlib.
doctor_mod = importlib.import_module("cudnnlite.doctor")


@pytest.fixture
def dirs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("CUDNNLITE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("CUDNNLITE_TUNING_DIR", str(tmp_path / "tuning"))
    monkeypatch.delenv("CUDNNLITE_BACKEND", raising=False)
    return tmp_path


def _gpu(**kw: Any) -> Any:
    info = doctor_mod.GpuInfo(**kw)
    return lambda: info


H200 = {
    "cupy_version": "14.0.0",
    "runtime_version": 13000,
    "driver_version": 13000,
    "devices": [("NVIDIA H200", "sm_90")],
}


def test_report_is_structured_and_never_raises(dirs: Path) -> None:
    report = cudnnlite.doctor(compile=False)
    assert {"emulator compiler", "cupy", "GPU", "NVRTC", "backends"} <= set(report.names())
    for c in report.checks:
        assert c.status in ("ok", "warn", "fail")
        assert c.message
        if c.status != "ok":
            assert c.advice, c
    assert report["kernel cache dir"].status == "ok"
    assert report.to_dict()["ok"] == report.ok
    assert "All checks passed" in str(report) or "failed" in str(report)


def test_no_gpu_is_reported_with_advice(dirs: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(doctor_mod, "probe_gpu", _gpu(cupy_error="ModuleNotFoundError: cupy"))
    report = cudnnlite.doctor()
    gpu = report["GPU"]
    assert gpu.status == "warn" and gpu.message.startswith("no GPU")
    assert "emulator" in gpu.message and "NVIDIA GPU" in gpu.advice
    assert report["cupy"].status == "warn" and "cudnnlite[cuda13]" in report["cupy"].advice
    assert "not checked: no GPU" in report["kernels compile"].message
    assert "a CuPy array runs on cuda, which cannot run here" in report["backends"].message


def test_missing_nvrtc_fails_with_a_gpu(dirs: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(doctor_mod, "probe_gpu", _gpu(**H200))
    missing = cuda_toolkit.ToolkitReport(None, "no libnvrtc.so found", None, "no cuda_fp16.h")
    monkeypatch.setattr(cuda_toolkit, "toolkit_report", lambda: missing)
    report = cudnnlite.doctor()
    nvrtc = report["NVRTC"]
    assert nvrtc.status == "fail" and "no libnvrtc.so found" in nvrtc.message
    assert "cudnnlite[cuda13]" in nvrtc.advice and "CUDNNLITE_NVRTC" in nvrtc.advice
    assert report["fp16/bf16 headers"].status == "fail"
    compile_check = report["kernels compile for sm_90"]
    assert compile_check.status == "fail" and "NVRTC or its headers are missing" in (
        compile_check.message
    )
    assert not report.ok
    assert main(["doctor"]) == 1  # the CLI's exit status follows


def test_missing_nvrtc_is_only_a_warning_without_gpu(
    dirs: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(doctor_mod, "probe_gpu", _gpu(cupy_error="ImportError"))
    missing = cuda_toolkit.ToolkitReport(None, "no libnvrtc.so found", None, "no cuda_fp16.h")
    monkeypatch.setattr(cuda_toolkit, "toolkit_report", lambda: missing)
    report = cudnnlite.doctor()
    assert report["NVRTC"].status == "warn"
    assert report["fp16/bf16 headers"].status == "warn"


def test_driver_older_than_cupy_and_nvrtc(dirs: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    old = dict(H200, driver_version=12040)
    monkeypatch.setattr(doctor_mod, "probe_gpu", _gpu(**old))
    report = cudnnlite.doctor(compile=False)
    drv = report["CUDA driver"]
    assert drv.status == "fail" and "CUDA 12.4" in drv.message
    assert "cudnnlite[cuda12]" in drv.advice
    if cuda_toolkit.toolkit_report().nvrtc is not None:
        nvrtc = report["NVRTC"]
        if nvrtc.status == "fail":  # an NVRTC 13 cannot serve a CUDA 12 driver
            assert "cudnnlite[cuda12]" in nvrtc.advice


def test_unwritable_cache_dirs(dirs: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocker = dirs / "a-file"
    blocker.write_text("not a folder")
    # Under a regular file nothing can be created, even as root.
    monkeypatch.setenv("CUDNNLITE_CACHE_DIR", str(blocker / "cache"))
    monkeypatch.setenv("CUDNNLITE_TUNING_DIR", str(blocker / "tuning"))
    report = cudnnlite.doctor(compile=False)
    cache = report["kernel cache dir"]
    assert cache.status == "fail" and "not writable" in cache.message
    assert "CUDNNLITE_CACHE_DIR" in cache.advice
    tuning = report["tuning dir"]
    assert tuning.status == "fail" and "CUDNNLITE_TUNING_DIR" in tuning.advice
    assert not report.ok


def test_missing_compiler(dirs: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDNNLITE_CXX", "no-such-g++-cudnnlite")
    check = cudnnlite.doctor(compile=False)["emulator compiler"]
    assert check.status == "fail" and "no-such-g++-cudnnlite" in check.message
    assert "apt-get install g++" in check.advice and "CUDNNLITE_CXX" in check.advice


def test_tuning_db_presence(dirs: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(doctor_mod, "probe_gpu", _gpu(**H200))
    check = cudnnlite.doctor(compile=False)["tuning DB for sm_90"]
    if check.status == "warn":  # no shipped sm_90.yaml: the user DB makes it ok
        assert "cudnnlite tune" in check.advice
        (dirs / "tuning").mkdir(exist_ok=True)
        (dirs / "tuning" / "sm_90.yaml").write_text("schema: 1\narch: sm_90\nentries: {}\n")
        check = cudnnlite.doctor(compile=False)["tuning DB for sm_90"]
    assert check.status == "ok" and "sm_90.yaml" in check.message


def test_forced_backend_is_explained(dirs: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDNNLITE_BACKEND", "cpu")
    check = cudnnlite.doctor(compile=False)["backends"]
    assert check.status == "warn" and "unset CUDNNLITE_BACKEND" in check.advice


def test_compile_check_for_an_arch(dirs: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every kernel for an arch, here shrunk to one small module (and one broken one)."""
    if not cuda_toolkit.toolkit_report().ok:
        pytest.skip("NVRTC or the CUDA headers are not installed")
    from cudnnlite.ops import dropout
    from cudnnlite.runtime import variants
    from cudnnlite.runtime.kernel import ModuleSpec

    good = dropout.module_specs()[0]
    monkeypatch.setattr(variants, "all_module_specs", lambda: [good])
    check = cudnnlite.doctor(arch="sm_80")["kernels compile for sm_80"]
    assert check.status == "ok" and "all 1 modules compiled" in check.message
    broken = ModuleSpec.make(good.source, ["no_such_kernel<float>"])
    monkeypatch.setattr(variants, "all_module_specs", lambda: [good, broken])
    check = cudnnlite.doctor(arch="sm_80")["kernels compile for sm_80"]
    assert check.status == "fail" and "1 of 2 modules failed" in check.message
    assert "nvrtc_check --arch sm_80" in check.advice


def test_a_broken_probe_does_not_take_the_doctor_down(
    dirs: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def boom() -> Any:
        raise RuntimeError("probe exploded")

    monkeypatch.setattr(doctor_mod, "_check_compiler", boom)
    check = cudnnlite.doctor(compile=False)["emulator compiler"]
    assert check.status == "fail" and "probe exploded" in check.message


def test_cli_prints_and_exits(dirs: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["doctor", "--quick"])
    text = capsys.readouterr().out
    assert "emulator compiler" in text and "backends" in text
    assert rc == (0 if cudnnlite.doctor(compile=False).ok else 1)
    main(["doctor", "--quick", "--json"])
    import json

    data = json.loads(capsys.readouterr().out)
    assert {"ok", "checks"} <= set(data)


def test_wgmma_check_on_an_sm90_gpu(dirs: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An sm_90 GPU reports its own wgmma check (runtime/wgmma_check.py); other GPUs and no
    GPU have no such line."""
    monkeypatch.setattr(doctor_mod, "probe_gpu", _gpu(**H200))
    monkeypatch.setattr(doctor_mod, "_wgmma_failure", lambda: None)
    check = cudnnlite.doctor(compile=False)["wgmma"]
    assert check.status == "ok" and "Hopper convolution solvers are on" in check.message
    why = "wgmma_tile<__half, 128, 1>: 3 of 8192 accumulators differ"
    monkeypatch.setattr(doctor_mod, "_wgmma_failure", lambda: why)
    check = cudnnlite.doctor(compile=False)["wgmma"]
    assert check.status == "warn" and why in check.message and "mma.sync" in check.advice
    monkeypatch.setattr(doctor_mod, "probe_gpu", _gpu(**dict(H200, devices=[("A100", "sm_80")])))
    assert "wgmma" not in cudnnlite.doctor(compile=False).names()
