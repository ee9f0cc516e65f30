"""The CUDA backend: ``cupy.RawModule`` through NVRTC, CuPy's disk cache, CuPy's
current stream and memory pool. Works with cupy-cuda12x and cupy-cuda13x.

Nothing here imports CuPy or touches a GPU until a module is built.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..errors import BadParamError, CompileError, ExecutionError, NotSupportedError
from .backend import Backend, Dim, Kernel, Module, check_cooperative_grid, launch_dims
from .compile_options import base_options
from .graph import current_recorder
from .kernel import ModuleSpec
from .sources import source_path
from .transfer import HostToDevice

# Dynamic shared memory a kernel may use without opting in (CUDA's default limit).
_DEFAULT_DYNAMIC_SMEM = 48 * 1024


def import_cupy() -> Any:
    try:
        return importlib.import_module("cupy")
    except ImportError as exc:
        raise NotSupportedError(
            "the CUDA backend needs CuPy: pip install 'cudnnlite[cuda13]' (or [cuda12])"
        ) from exc


def _missing_header(log: str) -> bool:
    return "cannot open source file" in log or "could not open source file" in log


class CudaKernel(Kernel):
    def __init__(self, spec: ModuleSpec, name: str, function: Any) -> None:
        self.spec = spec
        self.name = name
        self.function = function  # a cupy.RawKernel; its cupy.cuda.Function is .kernel
        self._smem_limit = _DEFAULT_DYNAMIC_SMEM
        # (device, block threads, dynamic shared memory) -> co-resident blocks
        self._cooperative_limits: dict[tuple[int, int, int], int] = {}

    def _opt_in_shared_memory(self, shared_mem: int) -> None:
        if shared_mem < 0:
            raise BadParamError(f"shared_mem must be >= 0, got {shared_mem}")
        if shared_mem > self._smem_limit:
            # Above 48 KiB a kernel must opt in to the larger carve-out.
            self.function.max_dynamic_shared_size_bytes = shared_mem
            self._smem_limit = shared_mem

    def max_cooperative_blocks(self, block_threads: int, shared_mem: int = 0) -> int:
        """SMs x blocks resident per SM (cuOccupancyMaxActiveBlocksPerMultiprocessor),
        the bound cuLaunchCooperativeKernel enforces."""
        if block_threads < 1:
            raise BadParamError(f"block_threads must be >= 1, got {block_threads}")
        # The occupancy of a kernel over 48 KiB counts only after its opt-in.
        self._opt_in_shared_memory(shared_mem)
        cupy = import_cupy()
        device = cupy.cuda.runtime.getDevice()
        key = (device, block_threads, shared_mem)
        limit = self._cooperative_limits.get(key)
        if limit is None:
            per_sm = cupy.cuda.driver.occupancyMaxActiveBlocksPerMultiprocessor(
                self.function.kernel.ptr, block_threads, shared_mem
            )
            sms = cupy.cuda.runtime.deviceGetAttribute(
                cupy.cuda.runtime.cudaDevAttrMultiProcessorCount, device
            )
            limit = self._cooperative_limits[key] = int(per_sm) * int(sms)
        return limit

    def __call__(
        self,
        grid: Dim,
        block: Dim,
        args: Sequence[Any],
        shared_mem: int = 0,
        cooperative: bool = False,
    ) -> None:
        self._opt_in_shared_memory(shared_mem)
        g, b = launch_dims(grid, block)
        if cooperative:
            check_cooperative_grid(self, g, b, shared_mem)
        # One pass over the arguments; a tuple is what CuPy wants, built once. The common
        # case (device arrays and NumPy scalars) copies nothing else.
        copies = None
        if any(isinstance(a, (np.ndarray, np.void)) for a in args):
            args, copies = _host_arguments(args)
        elif type(args) is not tuple:
            args = tuple(args)
        recorder = current_recorder()
        if recorder is not None:
            recorder.record_cuda(self, args)
        try:
            if cooperative:
                # cupy.cuda.Function launches with cuLaunchCooperativeKernel on request
                # (RawKernel.__call__ would pass its own enable_cooperative_groups).
                self.function.kernel(
                    g, b, args, shared_mem=shared_mem, enable_cooperative_groups=True
                )
            else:
                self.function(g, b, args, shared_mem=shared_mem)
        except Exception as exc:  # CUDADriverError and friends
            if type(exc).__name__ in ("CUDADriverError", "CUDARuntimeError"):
                raise ExecutionError(
                    f"kernel {self.name} ({self.spec.label()}) failed: {exc}"
                ) from exc
            raise
        if copies:
            for c in copies:
                c.copy_back()


def _host_arguments(args: Sequence[Any]) -> tuple[tuple[Any, ...], list[HostToDevice]]:
    """The arguments CuPy accepts for host objects: NumPy arrays (from
    CUDNNLITE_BACKEND=cuda) become device copies, copied back after the launch; a struct
    goes by value only as a size-one numpy.ndarray (CuPy's CNumpyArray path; CuPy 13
    rejects a numpy.void scalar: "Unsupported type")."""
    out: list[Any] = []
    copies: list[HostToDevice] = []
    for a in args:
        if isinstance(a, np.ndarray):
            copy = HostToDevice(a)
            copies.append(copy)
            a = copy.view
        elif isinstance(a, np.void):
            a = np.asarray(a)
        out.append(a)
    return tuple(out), copies


class CudaModule(Module):
    def __init__(self, spec: ModuleSpec, cupy: Any) -> None:
        self.spec = spec
        text = source_path(spec.source).read_text()
        # CuPy appends compile_options.cupy_added_options(arch) to these (-ftz=true, -arch).
        base = base_options(spec.define_options())
        try:
            self.functions = self._compile(cupy, text, base)
        except CompileError as first:
            if not _missing_header(str(first)):
                raise
            # CuPy found no CUDA headers (fp16/bf16); add the toolkit's from the pip wheels.
            from .cuda_toolkit import find_cuda_include_dirs

            extra = tuple(f"-I{d}" for d in find_cuda_include_dirs())
            if not extra:
                raise
            self.functions = self._compile(cupy, text, base + extra)

    def _compile(self, cupy: Any, text: str, options: tuple[str, ...]) -> dict[str, Any]:
        spec = self.spec
        try:
            module = cupy.RawModule(code=text, options=options, name_expressions=list(spec.names))
            return {name: module.get_function(name) for name in spec.names}
        except Exception as exc:
            if type(exc).__name__ != "CompileException":
                raise
            raise CompileError(
                f"NVRTC failed to compile {spec.source}\n  kernels: {', '.join(spec.names)}\n"
                f"  defines: {dict(spec.defines)}\n{exc}"
            ) from exc

    def get_function(self, name: str) -> Kernel:
        try:
            return CudaKernel(self.spec, name, self.functions[name])
        except KeyError:
            raise BadParamError(
                f"kernel {name!r} is not among the names compiled for {self.spec.label()}"
            ) from None


class CudaBackend(Backend):
    """Runs kernels on the current CuPy device and stream."""

    name = "cuda"

    def __init__(self) -> None:
        super().__init__()
        self._sm_counts: dict[int, int] = {}

    @property
    def xp(self) -> Any:
        return import_cupy()

    def device_key(self) -> str:
        return f"cuda:{self.xp.cuda.Device().id}"

    def arch(self) -> str:
        return "sm_" + str(self.xp.cuda.Device().compute_capability)

    def _build(self, spec: ModuleSpec) -> Module:
        return CudaModule(spec, self.xp)

    def synchronize(self) -> None:
        self.xp.cuda.get_current_stream().synchronize()

    def multiprocessor_count(self) -> int:
        """SMs of the current device (cached: CuPy's Device.attributes queries every
        attribute of the device, far too slow for a per-call grid size)."""
        device = self.xp.cuda.Device()
        count = self._sm_counts.get(device.id)
        if count is None:
            count = self._sm_counts[device.id] = int(device.attributes["MultiProcessorCount"])
        return count

    @staticmethod
    def available() -> bool:
        try:
            cupy = importlib.import_module("cupy")
            return cupy.cuda.runtime.getDeviceCount() > 0
        except Exception:
            return False
