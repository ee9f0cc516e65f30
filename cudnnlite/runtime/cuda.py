"""The CUDA backend: NVRTC with our options, a CUBIN cache on disk, CuPy's current stream
and memory pool. Works with cupy-cuda12x and cupy-cuda13x.

A module is compiled by NVRTC with ``compile_options.runtime_options`` (the options the
NVRTC check uses; float32 subnormals kept, as in PyTorch), its CUBIN loaded with
``cupy.cuda.function.Module`` and its kernels found by their lowered names. Not
``cupy.RawModule``: CuPy appends ``-ftz=true`` to every compile, which no option of ours
can undo. The NVRTC is ours (``cuda_toolkit``, through ctypes, as in the NVRTC check)
when it has the CUDA major version of CuPy's runtime, else CuPy's own NVRTC binding with
the same options (a CUBIN of another major may not load). CUBINs go to
``cubin_cache`` (``$CUDNNLITE_CACHE_DIR/cubin``), so another process loads them.

Nothing here imports CuPy or touches a GPU until a module is built.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import BadParamError, CompileError, ExecutionError, NotSupportedError
from . import compile_options, cubin_cache
from .backend import Backend, Dim, Kernel, Module, check_cooperative_grid, launch_dims
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


class CudaKernel(Kernel):
    def __init__(self, spec: ModuleSpec, name: str, function: Any) -> None:
        self.spec = spec
        self.name = name
        self.function = function  # a LoadedFunction; its cupy.cuda.Function is .kernel
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
            recorder.record_cuda(self, args, grid=grid, block=block,
                                 shared_mem=shared_mem, cooperative=cooperative,
                                 copies=bool(copies))  # fmt: skip
        self.launch_prepared(g, b, args, shared_mem, cooperative)
        if copies:
            for c in copies:
                c.copy_back()

    def prepare(self, grid: Dim, block: Dim, args: Sequence[Any], shared_mem: int = 0,
                vary: int = -1) -> Any:  # fmt: skip
        """:meth:`Kernel.prepare`: the fixed arguments in CuPy's form and the dims checked
        once; each launch swaps in the varying one (a struct as a size-one array)."""
        ordinary = Kernel.prepare(self, grid, block, args, shared_mem, vary)
        converted, copies = _host_arguments(args)
        if copies:  # host arrays copied per launch: the ordinary path does it each time
            return ordinary
        self._opt_in_shared_memory(shared_mem)
        g, b = launch_dims(grid, block)
        fixed = list(converted)
        index = vary % len(fixed)

        def launch(value: Any) -> None:
            if current_recorder() is not None:
                ordinary(value)  # (a capture or a template sees every launch)
                return
            call = list(fixed)
            call[index] = np.asarray(value) if isinstance(value, np.void) else value
            self.launch_prepared(g, b, tuple(call), shared_mem, False)

        return launch

    def launch_prepared(self, g: tuple, b: tuple, args: tuple, shared_mem: int,
                        cooperative: bool) -> None:  # fmt: skip
        """Launches with arguments in the form CuPy takes (device arrays, NumPy scalars,
        structs as size-one arrays) and checked dims, on CuPy's current stream: what
        :meth:`__call__` ends with, and what a launch template replays (runtime.templates)
        after one ordinary launch made the shared-memory opt-in and the checks."""
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


class LoadedFunction:
    """One kernel of a loaded CUBIN (a ``cupy.cuda.function.Function``) with the part of
    ``cupy.RawKernel``'s interface :class:`CudaKernel` uses: calling it launches on CuPy's
    current stream, ``.kernel`` is the Function, ``max_dynamic_shared_size_bytes`` opts in
    to more than 48 KiB of dynamic shared memory."""

    __slots__ = ("kernel", "name", "symbol", "_driver")

    def __init__(self, cupy: Any, function: Any, name: str, symbol: str) -> None:
        self.kernel = function
        self.name = name  # the name expression
        self.symbol = symbol  # its lowered name in the CUBIN
        self._driver = cupy.cuda.driver

    def __call__(self, grid: tuple, block: tuple, args: tuple, shared_mem: int = 0) -> None:
        self.kernel(grid, block, args, shared_mem)  # stream None: CuPy's current stream

    @property
    def max_dynamic_shared_size_bytes(self) -> int:
        attr = self._driver.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
        return int(self._driver.funcGetAttribute(attr, self.kernel.ptr))

    @max_dynamic_shared_size_bytes.setter
    def max_dynamic_shared_size_bytes(self, size: int) -> None:
        attr = self._driver.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
        self._driver.funcSetAttribute(self.kernel.ptr, attr, size)


def _cuda_major(cupy: Any) -> int | None:
    """The CUDA major version CuPy was built for (12 or 13), None if it cannot tell."""
    try:
        return int(cupy.cuda.runtime.runtimeGetVersion()) // 1000
    except Exception:
        return None


class NvrtcCompiler:
    """Compiles a module with exactly the run-time options, through one NVRTC: ours
    (``nvrtc_check.compile_program``) or CuPy's binding (``cupy.cuda.nvrtc``)."""

    def __init__(self, cupy: Any) -> None:
        """``cupy`` None (ahead-of-time builds without CuPy): our NVRTC, whatever its major."""
        from . import cuda_toolkit

        self._cupy_nvrtc: Any = None
        self.library: cuda_toolkit.NvrtcLibrary | None = None  # ours, when it compiles
        self.nvrtc: cuda_toolkit.NvrtcLibrary  # whichever compiles: its version and archs
        want = _cuda_major(cupy)
        try:
            ours = cuda_toolkit.find_nvrtc()
        except NotSupportedError as exc:
            ours, why = None, str(exc)
        else:
            why = f"NVRTC {ours.version_string()} ({ours.path}) is not CuPy's CUDA {want}"
        if ours is not None and (want is None or ours.major == want):
            self.library = self.nvrtc = ours
            self.version: tuple[int, ...] = ours.version
            self.origin = f"NVRTC {ours.version_string()} ({ours.origin})"
            return
        nvrtc = getattr(cupy.cuda, "nvrtc", None) if cupy is not None else None
        if nvrtc is None:
            raise NotSupportedError(f"cudnnlite: no usable NVRTC: {why}")
        self._cupy_nvrtc = nvrtc
        self.version = tuple(int(v) for v in nvrtc.getVersion())
        try:
            archs = tuple(int(a) for a in nvrtc.getSupportedArchs())
        except Exception:  # an NVRTC too old to list them
            archs = ()
        self.nvrtc = cuda_toolkit.NvrtcLibrary(
            Path("libnvrtc (CuPy)"), self.version[:2], "CuPy", archs
        )
        self.origin = f"CuPy's NVRTC {'.'.join(map(str, self.version))} ({why})"

    def target(self, arch: str) -> str:
        """``arch`` (``sm_90``: a CUBIN), or for a device newer than this NVRTC knows the
        ``compute_XX`` whose PTX the driver compiles at load (what CuPy does too)."""
        return arch if self.nvrtc.supports(arch) else self.nvrtc.ptx_target(arch)

    def include_dirs(self, cupy: Any) -> list[str]:
        """The CUDA headers' folders (cuda_fp16.h, ...): the pip wheels' or a toolkit's
        (``cuda_toolkit``), else, with CuPy's NVRTC, the toolkit CuPy uses."""
        from .cuda_toolkit import find_cuda_include_dirs

        try:
            if self.library is not None:
                return [str(d) for d in find_cuda_include_dirs()]
            return [str(d) for d in find_cuda_include_dirs(self.version[:2])]
        except NotSupportedError:
            if self._cupy_nvrtc is None:
                raise
            get_path = getattr(cupy.cuda, "get_cuda_path", None)
            root = get_path() if get_path is not None else None
            if root and (Path(root) / "include" / "cuda_fp16.h").is_file():
                return [str(Path(root) / "include")]
            raise

    def compile(
        self,
        text: str,
        program: str,
        names: Sequence[str],
        arch: str,
        options: Sequence[str],
        defines: Sequence[str],
    ) -> cubin_cache.CompiledModule:
        if self._cupy_nvrtc is None:
            from .nvrtc_check import compile_program

            res = compile_program(text, program, names, arch, options, defines)
            return cubin_cache.CompiledModule(res.cubin, res.lowered_names, res.log)
        return _compile_with_cupy_nvrtc(self._cupy_nvrtc, text, program, names, arch, options)


def _compile_with_cupy_nvrtc(
    nvrtc: Any, text: str, program: str, names: Sequence[str], arch: str, options: Sequence[str]
) -> cubin_cache.CompiledModule:
    prog = nvrtc.createProgram(text, program, (), ())
    try:
        for name in names:
            nvrtc.addNameExpression(prog, name)
        try:
            nvrtc.compileProgram(prog, list(options))
        except Exception as exc:  # NVRTCError
            raise CompileError(f"{exc}\n{nvrtc.getProgramLog(prog)}") from exc
        log = nvrtc.getProgramLog(prog).strip()
        lowered = {name: nvrtc.getLoweredName(prog, name) for name in names}
        image = nvrtc.getPTX(prog) if arch.startswith("compute_") else nvrtc.getCUBIN(prog)
        return cubin_cache.CompiledModule(image, lowered, log)
    finally:
        nvrtc.destroyProgram(prog)


def build_cubin(spec: ModuleSpec, arch: str, cupy: Any) -> cubin_cache.CompiledModule:
    """The CUBIN and lowered names of ``spec`` for a device of ``arch``: from the disk
    cache, else compiled with ``compile_options.runtime_options`` (no GPU needed). A
    device newer than the NVRTC gets PTX for the newest arch NVRTC knows instead.
    ``cupy`` picks the NVRTC as a run on a GPU would (None: ours)."""
    path = source_path(spec.source)
    text = path.read_text()
    compiler = NvrtcCompiler(cupy)
    arch = compiler.target(arch)
    defines = spec.define_options()
    try:
        options = compile_options.runtime_options(arch, defines, compiler.include_dirs(cupy))
    except NotSupportedError as exc:
        raise NotSupportedError(f"cannot compile {spec.label()} for the GPU: {exc}") from exc
    key = cubin_cache.cache_key(text, spec.names, options, compiler.version, arch)

    def compile_now() -> cubin_cache.CompiledModule:
        try:
            return compiler.compile(text, str(path), spec.names, arch, options, defines)
        except CompileError as exc:
            raise CompileError(
                f"NVRTC failed to compile {spec.source} for {arch} ({compiler.origin})\n"
                f"  kernels: {', '.join(spec.names)}\n  defines: {dict(spec.defines)}\n{exc}"
            ) from exc

    return cubin_cache.get_or_compile(arch, key, spec.names, compile_now)


class CudaModule(Module):
    def __init__(self, spec: ModuleSpec, cupy: Any, arch: str) -> None:
        self.spec = spec
        self.arch = arch
        built = build_cubin(spec, arch, cupy)
        self.lowered_names = built.lowered_names
        try:
            # Loads into the current device's context (the backend builds per device).
            self.module = cupy.cuda.function.Module()
            self.module.load(built.cubin)
            self.functions = {
                name: LoadedFunction(cupy, self.module.get_function(sym), name, sym)
                for name, sym in built.lowered_names.items()
            }
        except Exception as exc:
            if type(exc).__name__ not in ("CUDADriverError", "CUDARuntimeError"):
                raise
            raise ExecutionError(
                f"loading the CUBIN of {spec.label()} ({arch}) failed: {exc}"
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
    per_kernel_modules = True

    def __init__(self) -> None:
        super().__init__()
        self._limits: dict[int, tuple[int, int | None]] = {}

    @property
    def xp(self) -> Any:
        return import_cupy()

    def device_key(self) -> str:
        return f"cuda:{self.xp.cuda.Device().id}"

    def arch(self) -> str:
        return "sm_" + str(self.xp.cuda.Device().compute_capability)

    def _build(self, spec: ModuleSpec) -> Module:
        return CudaModule(spec, self.xp, self.arch())

    def _worker_scope(self) -> Callable[[], Any]:
        device = self.xp.cuda.Device()  # this thread's; another thread starts on device 0
        return lambda: self.xp.cuda.Device(device.id)

    def synchronize(self) -> None:
        self.xp.cuda.get_current_stream().synchronize()

    def _device_limits(self) -> tuple[int, int | None]:
        """(SMs, opt-in shared bytes per block) of the current device, read once per device
        (CuPy's Device.attributes queries every attribute of the device, far too slow for a
        per-call grid size); the second None if the device does not say."""
        device = self.xp.cuda.Device()
        found = self._limits.get(device.id)
        if found is None:
            attributes = device.attributes
            smem = attributes.get("MaxSharedMemoryPerBlockOptin")
            found = (int(attributes["MultiProcessorCount"]), int(smem) if smem else None)
            self._limits[device.id] = found
        return found

    def multiprocessor_count(self) -> int:
        """SMs of the current device."""
        return self._device_limits()[0]

    def max_shared_per_block(self) -> int | None:
        """The current device's opt-in maximum of shared memory per block (a GPU newer than
        the arch table, or one of its arch with less, sizes tiles by what it has)."""
        return self._device_limits()[1]

    @staticmethod
    def available() -> bool:
        try:
            cupy = importlib.import_module("cupy")
            return cupy.cuda.runtime.getDeviceCount() > 0
        except Exception:
            return False


# ------------------------------------------------------------------ ahead of time


class _AheadOfTimeKernel(Kernel):
    def __init__(self, spec: ModuleSpec, name: str, arch: str) -> None:
        self.spec, self.name, self.arch = spec, name, arch

    def __call__(self, grid: Dim, block: Dim, args: Sequence[Any], shared_mem: int = 0,
                 cooperative: bool = False) -> None:  # fmt: skip
        raise NotSupportedError(
            f"kernel {self.name} was compiled ahead of time for {self.arch}; there is no "
            "GPU here to run it on"
        )

    def max_cooperative_blocks(self, block_threads: int, shared_mem: int = 0) -> int:
        raise NotSupportedError(f"{self.arch} ahead of time: no device to ask for occupancy")


class _AheadOfTimeModule(Module):
    def __init__(self, spec: ModuleSpec, built: cubin_cache.CompiledModule, arch: str) -> None:
        self.spec, self.built, self.arch = spec, built, arch

    def get_function(self, name: str) -> Kernel:
        if name not in self.built.lowered_names:
            raise BadParamError(f"kernel {name!r} is not among the names compiled for "
                                f"{self.spec.label()}")  # fmt: skip
        return _AheadOfTimeKernel(self.spec, name, self.arch)


class AheadOfTimeBackend(Backend):
    """The CUDA backend's compile half for a GPU that is not here (``cudnnlite precompile
    --arch sm_90``): the same compile units, options, NVRTC choice and CUBIN cache as a
    run on that GPU, so the run finds every module compiled. Plans can be made on it (the
    dispatcher sees ``arch`` and that arch's typical SM count); kernels cannot run."""

    name = "cuda"
    per_kernel_modules = True

    def __init__(self, arch: str) -> None:
        from .caps import for_sm

        super().__init__()
        if not arch.startswith("sm_") or not arch[3:].isdigit():
            raise BadParamError(f"arch: expected sm_XX (sm_80, sm_90, ...), got {arch!r}")
        self._arch = arch
        self._sm_count = for_sm(int(arch[3:])).sm_count
        try:
            self._cupy: Any = importlib.import_module("cupy")
        except ImportError:
            self._cupy = None  # no CuPy: our NVRTC, as a CuPy of its CUDA major would pick

    @property
    def xp(self) -> Any:
        return np

    def device_key(self) -> str:
        return f"aot:{self._arch}"

    def arch(self) -> str:
        return self._arch

    def multiprocessor_count(self) -> int:
        return self._sm_count

    def _build(self, spec: ModuleSpec) -> Module:
        return _AheadOfTimeModule(spec, build_cubin(spec, self._arch, self._cupy), self._arch)

    def synchronize(self) -> None:
        pass
