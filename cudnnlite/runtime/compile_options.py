"""The NVRTC options a kernel module is compiled with, in one place.

The CUDA backend hands :func:`base_options` to ``cupy.RawModule(options=...)``; CuPy then
adds options of its own before it calls NVRTC. The NVRTC check (``nvrtc_check``), which
calls NVRTC directly on a machine without a GPU, appends :func:`cupy_added_options` to the
same base so that the registers, spills and SASS it reports are those of the code that
runs. ``tests/test_compile_options.py`` pins both lists.

What CuPy adds for ``RawModule(code=..., options=..., name_expressions=...)``, read from its
source for CuPy 13.x (v13.6.0) and 14.x (v14.2.0, and main as of 2026-08):

- ``cupy/_core/core.pyx``, ``assemble_cupy_compiler_options``: ``--std=c++17`` (CuPy 14;
  ``--std=c++11`` in CuPy 13) only when no ``-std=`` option is given (ours gives one), its
  bundled CCCL include folders in front, and its own ``include`` folder and the CUDA
  headers' folder (cudart wheel or ``CUDA_PATH``) at the end. Include folders choose
  headers, not code generation; without CuPy the NVRTC check uses the pip wheels' headers
  (``cuda_toolkit.find_cuda_include_dirs``), which is also what the backend falls back to.
- ``cupy/cuda/compiler.py``, ``_compile_with_cache_cuda``: ``-ftz=true`` always
  (``--device-debug --generate-line-info`` only with ``CUPY_CUDA_COMPILE_WITH_DEBUG=1``;
  ``-DCUPY_USE_JITIFY`` only with ``jitify=True``, which we never pass).
- ``cupy/cuda/compiler.py``, ``_compile_using_nvrtc_no_warning``: ``-arch=sm_XX`` from
  ``_get_arch_for_options_for_nvrtc`` (``-arch=compute_XX``, i.e. PTX, only with
  ``CUPY_COMPILE_WITH_PTX=1`` or a device newer than NVRTC knows), then
  ``--device-as-default-execution-space`` (no jitify), and ``--pch`` only with
  ``CUPY_NVRTC_USE_PCH=1`` (CuPy 14, NVRTC >= 12.8).

The environment-dependent ones are left out: they are not what runs by default.
"""

from __future__ import annotations

from collections.abc import Iterable

from .sources import common_headers_digest, cuda_src_dir


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


def cupy_added_options(arch: str) -> tuple[str, ...]:
    """What ``cupy.RawModule`` appends for NVRTC on a device of ``arch`` (``sm_90``),
    leaving out include folders and the options CuPy adds only under an environment switch."""
    return ("-ftz=true", f"-arch={arch}", "--device-as-default-execution-space")
