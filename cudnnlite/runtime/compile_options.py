"""The NVRTC options a kernel module is compiled with, in one place.

The CUDA backend compiles every module with our own NVRTC call (``nvrtc_check``'s
``compile_source`` through ctypes) and loads the CUBIN with ``cupy.cuda.function.Module``;
the NVRTC check compiles with the same call. Both take their options from
:func:`runtime_options`, so the registers, spills and SASS the check reports are those
of the code that runs. ``tests/test_compile_options.py`` pins the list.

Why not ``cupy.RawModule``: CuPy appends options of its own, and one of them decides the
numbers. What it adds, read from its source for CuPy 13.x (v13.6.0) and 14.x (v14.2.0,
and main as of 2026-08), is kept in :func:`cupy_added_options`:

- ``cupy/cuda/compiler.py``, ``_compile_with_cache_cuda``: ``-ftz=true`` always, after
  the caller's options. Float32 subnormals would flush to zero on the GPU
  (``relu(1e-40)`` gives 0) while PyTorch, NumPy and the emulator keep them.
- ``cupy/cuda/compiler.py``, ``_compile_using_nvrtc_no_warning``: ``-arch=sm_XX`` and
  ``--device-as-default-execution-space``.
- ``cupy/_core/core.pyx``, ``assemble_cupy_compiler_options``: include folders (CCCL,
  its own, the CUDA headers'), which choose headers, not code generation.

Our run-time options keep CuPy's code-generation choices except that one: subnormals are
kept (``-ftz=false``, NVRTC's default, written out so that nothing downstream can append
the opposite unnoticed), as in PyTorch, whose CUDA kernels nvcc compiles without
``--use_fast_math``. Division and square root stay IEEE-rounded (NVRTC's defaults
``-prec-div=true``, ``-prec-sqrt=true``); ``-fmad=true`` (contraction to FMA) stays as in
CuPy, PyTorch and nvcc by default.
"""

from __future__ import annotations

from collections.abc import Iterable
from os import PathLike

from .sources import common_headers_digest, cuda_src_dir

# Float32 subnormals are kept (PyTorch's semantics): the one option that differs from
# what cupy.RawModule would compile with.
SUBNORMALS = "-ftz=false"


def base_options(defines: Iterable[str] = ()) -> tuple[str, ...]:
    """Our options for a module: language, our include folder, the headers' digest, defines.

    ``defines`` are ``-DK=V`` strings (``ModuleSpec.define_options()``).
    """
    return (
        "-std=c++17",
        f"-I{cuda_src_dir()}",  # kernels include "common/cudnnlite.cuh"
        # Compilers' caches key on the main source only; the headers' digest keeps them honest.
        f"-DCUDNNLITE_HEADERS={common_headers_digest()}",
        *defines,
    )


def arch_defines(arch: str) -> tuple[str, ...]:
    """What the kernels know of the target besides ``__CUDA_ARCH__``: its resident threads
    per SM (``runtime/occupancy.py``'s table), the ceiling of their occupancy hints
    (``CL_MIN_BLOCKS`` in common/cudnnlite.cuh: ptxas ignores a minimum of blocks whose
    threads the SM cannot hold). A define rather than ``__CUDA_ARCH__`` tests in the header
    every source includes, which would make every source look arch-dependent to the NVRTC
    check's coverage (``nvrtc_check.arch_thresholds``)."""
    from .occupancy import sm_threads

    return (f"-DCUDNNLITE_SM_THREADS={sm_threads(arch)}",)


# Archs whose cubins are built for the arch-specific target (``sm_90a``): its features
# (Hopper's wgmma, common/mma.cuh) run only on that arch's devices, which is all a cubin
# built for one arch runs on anyway.
ARCH_SPECIFIC = frozenset({"sm_90"})


def target(arch: str) -> str:
    """The ``-arch`` value for a device of ``arch``: ``sm_90a`` for ``sm_90``, else itself."""
    return f"{arch}a" if arch in ARCH_SPECIFIC else arch


def codegen_options(arch: str) -> tuple[str, ...]:
    """The target and floating-point options, after the include folders: ``-arch`` (the
    arch-specific target where there is one: :func:`target`), subnormals kept, and
    unannotated functions compiled as device code (as CuPy does: helpers in
    conv/implicit_gemm.cu and others rely on it)."""
    return (f"-arch={target(arch)}", SUBNORMALS, "--device-as-default-execution-space")


def runtime_options(
    arch: str, defines: Iterable[str] = (), include_dirs: Iterable[str | PathLike] = ()
) -> tuple[str, ...]:
    """EXACTLY the NVRTC options of a module at run time, in order: :func:`base_options`,
    :func:`arch_defines`, the CUDA headers' folders (``cuda_toolkit.find_cuda_include_dirs()``),
    then :func:`codegen_options`. The CUDA backend and the NVRTC check both compile with this."""
    return (
        *base_options(defines),
        *arch_defines(arch),
        *(f"-I{d}" for d in include_dirs),
        *codegen_options(arch),
    )


def cupy_added_options(arch: str) -> tuple[str, ...]:
    """What ``cupy.RawModule`` would append for NVRTC on a device of ``arch`` (``sm_90``),
    leaving out include folders and the options CuPy adds only under an environment switch
    (``CUPY_CUDA_COMPILE_WITH_DEBUG``, ``CUPY_COMPILE_WITH_PTX``, ``CUPY_NVRTC_USE_PCH``).
    Kept as a record of why the backend does not use ``RawModule``; nothing compiles with it."""
    return ("-ftz=true", f"-arch={arch}", "--device-as-default-execution-space")
