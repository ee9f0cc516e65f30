"""``cudnnlite doctor``: checks the environment and explains it in plain words.

cuDNN's most common pain is a mismatch (driver, toolkit, library) that ends in a cryptic
error far from its cause. The doctor looks at each piece in turn and says, for each one
that is wrong, what to do next:

- the C++ compiler the emulator needs (NumPy arrays);
- CuPy, the driver's CUDA version and CuPy's, and the GPU (its arch);
- NVRTC (found where, which version, does it match the driver) and the fp16/bf16, CCCL
  and crt/mma.h headers the kernels include;
- whether every kernel compiles for the GPU's arch (or ``arch=``), with NVRTC;
- the kernel caches (emulator modules, CUBINs) and tuning directories (writable?), the
  tuning DB for the arch;
- which backend a NumPy or a CuPy array would use.

``doctor()`` returns a :class:`DoctorReport` (a list of :class:`Check`), never raises,
and prints nothing; ``cudnnlite doctor`` prints it and exits 1 when a check failed.
"""

from __future__ import annotations

import importlib
import shutil
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

OK, WARN, FAIL = "ok", "warn", "fail"
_MARK = {OK: "[ ok ]", WARN: "[warn]", FAIL: "[FAIL]"}

CUPY_HINT = (
    'pip install "cudnnlite[cuda13]" for a CUDA 13 driver, or "cudnnlite[cuda12]" for a '
    "CUDA 12 driver (nvidia-smi shows the driver's CUDA version)"
)


@dataclass(frozen=True)
class Check:
    """One finding: ``status`` is "ok", "warn" or "fail"; ``advice`` says what to do
    next (empty when there is nothing to do)."""

    name: str
    status: str
    message: str
    advice: str = ""

    def __str__(self) -> str:
        text = f"{_MARK[self.status]} {self.name}: {self.message}"
        if self.advice:
            text += f"\n       -> {self.advice}"
        return text


@dataclass
class DoctorReport:
    checks: list[Check] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """No check failed (warnings allowed)."""
        return not self.failed

    @property
    def failed(self) -> list[Check]:
        return [c for c in self.checks if c.status == FAIL]

    @property
    def warnings(self) -> list[Check]:
        return [c for c in self.checks if c.status == WARN]

    def __getitem__(self, name: str) -> Check:
        for c in self.checks:
            if c.name == name:
                return c
        raise KeyError(name)

    def names(self) -> list[str]:
        return [c.name for c in self.checks]

    def to_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "checks": [asdict(c) for c in self.checks]}

    def __str__(self) -> str:
        lines = [str(c) for c in self.checks]
        n_fail, n_warn = len(self.failed), len(self.warnings)
        lines.append("")
        if n_fail:
            lines.append(f"{n_fail} check(s) failed, {n_warn} warning(s): see the -> lines above.")
        elif n_warn:
            lines.append(f"All checks passed, {n_warn} warning(s).")
        else:
            lines.append("All checks passed.")
        return "\n".join(lines)

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:  # IPython / notebooks
        p.text(str(self))


# ------------------------------------------------------------------ probes
# Each probe is a small function, so that tests can replace one to make it fail.


@dataclass
class GpuInfo:
    cupy_version: str | None = None
    cupy_error: str | None = None
    runtime_version: int | None = None  # CUDA version CuPy was built for, e.g. 13000
    driver_version: int | None = None  # CUDA version the driver supports
    devices: list[tuple[str, str]] = field(default_factory=list)  # (name, "sm_90")
    device_error: str | None = None


def probe_gpu() -> GpuInfo:
    """CuPy, the CUDA versions and the visible GPUs; never raises."""
    info = GpuInfo()
    try:
        cupy = importlib.import_module("cupy")
    except Exception as exc:
        info.cupy_error = f"{type(exc).__name__}: {exc}"
        return info
    info.cupy_version = str(cupy.__version__)
    rt = cupy.cuda.runtime
    try:
        info.runtime_version = int(rt.runtimeGetVersion())
        info.driver_version = int(rt.driverGetVersion())
    except Exception as exc:
        info.device_error = f"{type(exc).__name__}: {exc}"
        return info
    try:
        for i in range(rt.getDeviceCount()):
            p = rt.getDeviceProperties(i)
            name = p["name"].decode() if isinstance(p["name"], bytes) else str(p["name"])
            info.devices.append((name, f"sm_{p['major']}{p['minor']}"))
    except Exception as exc:
        info.device_error = f"{type(exc).__name__}: {exc}"
    return info


def _cuda_version(v: int) -> str:
    return f"{v // 1000}.{v % 1000 // 10}"


def _writable(path: Path) -> str | None:
    """None when ``path`` (created if missing) takes a new file, else the reason."""
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path, prefix=".doctor-"):
            pass
    except OSError as exc:
        return f"{type(exc).__name__}: {exc.strerror or exc}"
    return None


# ------------------------------------------------------------------ checks


def _check_compiler() -> Check:
    from .runtime.emulator import build

    cxx = build.compiler()
    exe = shutil.which(cxx)
    if exe is None:
        return Check(
            "emulator compiler",
            FAIL,
            f"{cxx!r} was not found, so NumPy arrays cannot run (the emulator compiles the "
            "CUDA sources with a C++17 compiler)",
            "install g++ (Debian/Ubuntu: apt-get install g++), or set CUDNNLITE_CXX to a "
            "C++17 compiler",
        )
    return Check("emulator compiler", OK, f"{build.compiler_version(cxx)} ({exe})")


def _check_cupy(gpu: GpuInfo) -> list[Check]:
    if gpu.cupy_version is None:
        return [
            Check(
                "cupy",
                WARN,
                f"CuPy is not importable ({gpu.cupy_error}); only the emulator (NumPy "
                "arrays) can run",
                f"for the GPU, {CUPY_HINT}",
            )
        ]
    checks = [Check("cupy", OK, f"CuPy {gpu.cupy_version}")]
    if gpu.driver_version is None:
        checks.append(
            Check(
                "CUDA driver",
                WARN,
                f"CuPy cannot reach the CUDA driver ({gpu.device_error})",
                "install the NVIDIA driver, or check that this container sees the GPU "
                "(docker --gpus all); NumPy arrays still run on the emulator",
            )
        )
        return checks
    drv, rt = gpu.driver_version, gpu.runtime_version or 0
    text = f"driver supports CUDA {_cuda_version(drv)}; CuPy built for CUDA {_cuda_version(rt)}"
    if drv // 1000 < rt // 1000:
        checks.append(
            Check(
                "CUDA driver",
                FAIL,
                text + ": the driver is older than CuPy's CUDA major version",
                f"upgrade the NVIDIA driver, or install the CuPy for CUDA {drv // 1000}: pip "
                f'uninstall cupy-cuda{rt // 1000}x && pip install "cudnnlite[cuda{drv // 1000}]"',
            )
        )
    else:
        checks.append(Check("CUDA driver", OK, text))
    return checks


def _check_gpu(gpu: GpuInfo) -> Check:
    if gpu.devices:
        listed = ", ".join(f"{name} ({arch})" for name, arch in gpu.devices)
        return Check("GPU", OK, listed)
    reason = gpu.device_error or ("CuPy is not installed" if gpu.cupy_version is None else "")
    return Check(
        "GPU",
        WARN,
        "no GPU"
        + (f" ({reason})" if reason else " visible to CuPy")
        + ": NumPy arrays run on the emulator; CuPy arrays cannot run here",
        "nothing to do for CPU work; for the GPU, run on a machine with an NVIDIA GPU, "
        "its driver and " + CUPY_HINT.split(" for a ")[0],
    )


def _check_nvrtc(report: Any, gpu: GpuInfo, need: bool) -> Check:
    from .runtime.cuda_toolkit import INSTALL_HINT

    # Without a GPU, NVRTC only serves the compile check: a warning, not a failure.
    missing = FAIL if need else WARN
    lib = report.nvrtc
    if lib is None:
        return Check(
            "NVRTC",
            missing,
            f"no NVRTC library found ({report.nvrtc_error})",
            INSTALL_HINT,
        )
    text = f"NVRTC {lib.version_string()} at {lib.path} (found by: {lib.origin})"
    if gpu.driver_version is not None and lib.major > gpu.driver_version // 1000:
        drv = gpu.driver_version // 1000
        return Check(
            "NVRTC",
            FAIL,
            text + f"; the driver only supports CUDA {_cuda_version(gpu.driver_version)}, "
            "so it cannot load what this NVRTC compiles",
            f'install NVRTC for CUDA {drv}: pip install "cudnnlite[cuda{drv}]", or set '
            f"CUDNNLITE_NVRTC to a CUDA {drv} libnvrtc.so, or upgrade the driver",
        )
    return Check("NVRTC", OK, text)


def _check_headers(report: Any, need: bool) -> list[Check]:
    from .runtime.cuda_toolkit import INSTALL_HINT, _find_crt_dir

    missing = FAIL if need else WARN
    if report.headers is None:
        return [
            Check(
                "fp16/bf16 headers",
                missing,
                f"cuda_fp16.h / cuda_bf16.h not found ({report.headers_error}); float16 and "
                "bfloat16 kernels cannot compile for the GPU",
                INSTALL_HINT,
            )
        ]
    h = report.headers
    cccl = h.cccl.path if h.cccl else "provided by NVRTC"
    checks = [Check("fp16/bf16 headers", OK, f"{h.fp16.path} (nv/target: {cccl})")]
    crt = _find_crt_dir(h.fp16.major)
    if crt is None:
        major = h.fp16.major or 13
        wheel = "nvidia-cuda-crt" if major >= 13 else "nvidia-cuda-nvcc-cu12"
        checks.append(
            Check(
                "crt/mma.h",
                missing,
                "crt/mma.h not found: the tensor-core (WMMA) kernels cannot compile",
                f"pip install {wheel} (part of cudnnlite[cuda{major}])",
            )
        )
    else:
        checks.append(Check("crt/mma.h", OK, str(crt / "crt" / "mma.h")))
    return checks


def _check_compile(arch: str, toolkit_ok: bool) -> Check:
    from .runtime import nvrtc_check

    name = f"kernels compile for {arch}"
    if not toolkit_ok:
        return Check(name, FAIL, "not tried: NVRTC or its headers are missing", "see above")
    try:
        results = nvrtc_check.check_all(archs=[arch])
    except Exception as exc:  # NotSupportedError: the toolkit went missing meanwhile
        return Check(name, FAIL, f"{type(exc).__name__}: {exc}", "see the NVRTC checks above")
    bad = [r for r in results if not r.ok]
    if not bad:
        seconds = sum(r.seconds for r in results)
        return Check(name, OK, f"all {len(results)} modules compiled ({seconds:.1f} s of NVRTC)")
    first = bad[0]
    first_error = (first.error or "").strip().splitlines()
    return Check(
        name,
        FAIL,
        f"{len(bad)} of {len(results)} modules failed, first {first.spec.label()}: "
        + (first_error[0] if first_error else "no log"),
        f"run python -m cudnnlite.runtime.nvrtc_check --arch {arch} -v for the full logs; "
        "an NVRTC older than the arch (or than CUDA 12.2) cannot compile it: upgrade "
        "NVRTC, else report the log as a cudnnlite bug",
    )


def _check_dir(name: str, path: Path, env: str) -> Check:
    reason = _writable(path)
    if reason is None:
        return Check(name, OK, f"{path} is writable")
    return Check(
        name,
        FAIL,
        f"{path} is not writable ({reason})",
        f"set {env} to a writable folder (e.g. export {env}=$HOME/.cache/cudnnlite), or fix "
        "the folder's permissions",
    )


def _check_tuning_db(arch: str) -> Check:
    from .dispatch import tuning_db

    name = f"tuning DB for {arch}"
    shipped = tuning_db.shipped_path(arch)
    user = tuning_db.user_dir() / f"{arch}.yaml"
    found = [str(p) for p in (shipped, user) if p is not None and p.is_file()]
    if found:
        return Check(name, OK, ", ".join(found))
    return Check(
        name,
        WARN,
        f"no tuning DB for {arch}: the heuristics choose each convolution's solver",
        f"tune your layers once (cudnnlite tune --help; results go to {user}), or set "
        'cudnnlite.set_mode("benchmark") to tune each new shape on first use',
    )


def _wgmma_failure() -> str | None:
    """Why the current CUDA device fails the wgmma check (runtime/wgmma_check.py), or None."""
    from .runtime import wgmma_check
    from .runtime.select import backend_by_name

    return wgmma_check.failure(backend_by_name("cuda"))


def _check_wgmma(gpu: GpuInfo) -> list[Check]:
    """On an sm_90 GPU: whether its wgmma passed the check the Hopper solvers need."""
    if not gpu.devices or gpu.devices[0][1] != "sm_90":
        return []
    why = _wgmma_failure()
    if why is None:
        ok = "this sm_90 GPU computes wgmma as the kernels assume: the Hopper convolution "
        return [Check("wgmma", OK, ok + "solvers are on", "")]
    advice = "mma.sync runs instead (correct, slower); please report this output"
    return [Check("wgmma", WARN, f"the Hopper solvers are off on this GPU: {why}", advice)]


def _check_backends(gpu: GpuInfo) -> Check:
    from .runtime.select import forced_backend

    forced = forced_backend()
    cuda = "cuda (GPU)" if gpu.devices else "cuda, which cannot run here (no GPU)"
    if forced:
        return Check(
            "backends",
            WARN,
            f"CUDNNLITE_BACKEND={forced} sends every call to {forced}, whatever the arrays",
            "unset CUDNNLITE_BACKEND to choose the backend from the arrays",
        )
    return Check(
        "backends",
        OK,
        f"a NumPy array runs on cpu (the emulator); a CuPy array runs on {cuda}",
    )


def doctor(*, arch: str | None = None, compile: bool = True) -> DoctorReport:
    """Checks the environment; see the module's docstring. Never raises.

    Args:
        arch: compile every kernel for this arch (``sm_90``) even without a GPU; by
            default the GPU's arch, and no compile check when there is no GPU.
        compile: False skips the NVRTC compile of every kernel (the slowest check:
            about a minute).
    """
    from .runtime import cuda_toolkit
    from .runtime.emulator import build

    checks: list[Check] = []

    def run(probe: Callable[[], Check | Sequence[Check]], name: str) -> None:
        try:
            result = probe()
        except Exception as exc:  # a broken probe must not take the doctor down
            result = Check(name, FAIL, f"the check itself failed: {type(exc).__name__}: {exc}",
                           "report this as a cudnnlite bug, with this message")  # fmt: skip
        checks.extend([result] if isinstance(result, Check) else result)

    gpu = probe_gpu()
    report = cuda_toolkit.toolkit_report()
    need_cuda = bool(gpu.devices) or arch is not None
    target = arch or (gpu.devices[0][1] if gpu.devices else None)

    run(_check_compiler, "emulator compiler")
    run(lambda: _check_cupy(gpu), "cupy")
    run(lambda: _check_gpu(gpu), "GPU")
    run(lambda: _check_nvrtc(report, gpu, need_cuda), "NVRTC")
    run(lambda: _check_headers(report, need_cuda), "fp16/bf16 headers")
    if target is None:
        checks.append(
            Check(
                "kernels compile",
                OK,
                "not checked: no GPU (the emulator compiles with g++ on first use; "
                "cudnnlite doctor --arch sm_90 compiles every kernel for an arch)",
                "",
            )
        )
    elif compile:
        run(lambda: _check_compile(target, report.ok), f"kernels compile for {target}")
    run(
        lambda: _check_dir("kernel cache dir", build.cache_dir(), "CUDNNLITE_CACHE_DIR"),
        "kernel cache dir",
    )
    if gpu.cupy_version is not None:
        from .runtime import cubin_cache

        run(
            lambda: _check_dir("CUBIN cache", cubin_cache.cache_dir(), "CUDNNLITE_CACHE_DIR"),
            "CUBIN cache",
        )
    from .dispatch import tuning_db

    run(
        lambda: _check_dir("tuning dir", tuning_db.user_dir(), "CUDNNLITE_TUNING_DIR"),
        "tuning dir",
    )
    run(lambda: _check_tuning_db(target or "cpu"), "tuning DB")
    run(lambda: _check_wgmma(gpu), "wgmma")
    run(lambda: _check_backends(gpu), "backends")
    return DoctorReport(checks)


__all__ = ["Check", "DoctorReport", "doctor"]
