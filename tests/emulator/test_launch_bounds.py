"""A GPU refuses to launch a kernel with more threads per block than its
``__launch_bounds__`` ("too many resources requested for launch"); the emulator refuses it
too: its build opens each bounded kernel's body with a check of the launch
(``build.with_launch_bound_checks``, ``EMU_LAUNCH_BOUNDS`` in cuda_emu.h)."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import numpy as np
import pytest

from cudnnlite.errors import ExecutionError
from cudnnlite.runtime import ModuleSpec, backend_by_name
from cudnnlite.runtime.emulator.build import with_launch_bound_checks
from cudnnlite.runtime.sources import cuda_src_dir
from cudnnlite.testing import to_backend, to_numpy

REFUSED = r"more than its __launch_bounds__\({bound}\): a GPU refuses this launch"


# ------------------------------------------------------------------ the rewriting
def test_checks_open_each_bounded_body_on_its_own_line() -> None:
    text = textwrap.dedent(
        """\
        template <typename T, int N>
        __global__ void __launch_bounds__(Tile<T, N>::THREADS,
                                          N > 2 ? 1 : 2)
            k(const T* x,
              int (*f)(int)) {
            body();
        }
        extern "C" __global__ void __launch_bounds__(256) plain(float* y) { y[0] = 1; }
        extern "C" __global__ void free_kernel(float* y) { y[0] = 2; }
        """
    )
    out = with_launch_bound_checks(text)
    assert out.count("\n") == text.count("\n")  # messages keep their line numbers
    lines = out.splitlines()
    assert lines[4].endswith("{ EMU_LAUNCH_BOUNDS(Tile<T, N>::THREADS, N > 2 ? 1 : 2);")
    assert lines[5] == "    body();"
    assert "plain(float* y) { EMU_LAUNCH_BOUNDS(256); y[0] = 1; }" in lines[7]
    assert lines[8] == text.splitlines()[8]  # no bound, no check


@pytest.mark.parametrize(
    "text",
    [
        "__global__ void __launch_bounds__(128) k(float* y);\n",  # a declaration
        "// __launch_bounds__(256) k(float* y) { is prose here }\n",
        "    // __launch_bounds__ minimum: 16 warps per SM\n",
        "__launch_bounds__(256\n",  # unbalanced: left for the compiler to report
    ],
)
def test_declarations_comments_and_fragments_are_left_alone(text: str) -> None:
    assert with_launch_bound_checks(text) == text


def test_every_library_kernel_declares_its_bounds() -> None:
    """The emulator can check only bounded kernels, and the static reports
    (``nvrtc_check --resources``) take the block size from the bound."""
    root = cuda_src_dir()
    unbounded = []
    for path in sorted([*root.rglob("*.cu"), *root.rglob("*.cuh")]):
        if path.relative_to(root).parts[0] == "selftest":
            continue
        text = path.read_text()
        for m in re.finditer(r"__global__\s+void\s+(?!__launch_bounds__)(\w+)", text):
            unbounded.append(f"{path.relative_to(root)}: {m.group(1)}")
        checked = with_launch_bound_checks(text)
        kernels = len(re.findall(r"__global__\s+void\s+__launch_bounds__", text))
        assert checked.count("EMU_LAUNCH_BOUNDS(") == kernels, path
    assert not unbounded


# ------------------------------------------------------------------ launches
@pytest.fixture(scope="module")
def bounded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """SOURCE in a file of its own, shared by the tests (one g++ build per backend)."""
    src = tmp_path_factory.mktemp("bounds") / "bounded.cu"
    src.write_text(textwrap.dedent(SOURCE))
    return src


SOURCE = """\
    #include "common/cudnnlite.cuh"
    #include "conv/splitk_reduce.cuh"

    template <int N>
    __global__ void __launch_bounds__(N * 2, 1)
        fill(float* y) {
        y[threadIdx.x + threadIdx.y * blockDim.x] = 1.0f;
    }
    """


@pytest.mark.parametrize("block", [64, (8, 8), 1])
def test_launches_within_the_bound_run(backend: str, bounded: Path, block: object) -> None:
    spec = ModuleSpec.make(str(bounded), ["fill<32>", "bwd_filter_reduce<float>"])
    y = to_backend(np.zeros(64, np.float32), backend)
    backend_by_name(backend).kernel(spec, "fill<32>")((1,), block, (y,))
    threads = int(np.prod(block))
    assert to_numpy(y).sum() == threads


@pytest.mark.parametrize("block", [65, (8, 9), (2, 2, 32)])
def test_launches_past_the_bound_are_refused(
    backend: str, emulator_only: None, bounded: Path, block: object
) -> None:
    spec = ModuleSpec.make(str(bounded), ["fill<32>", "bwd_filter_reduce<float>"])
    y = np.zeros(1024, np.float32)
    kernel = backend_by_name("cpu").kernel(spec, "fill<32>")
    threads = int(np.prod(block))
    with pytest.raises(ExecutionError, match=f"blocks of {threads} threads, "
                       + REFUSED.format(bound=64)):  # fmt: skip
        kernel((1,), block, (y,))


def test_a_kernel_from_a_shared_header_is_checked_too(
    backend: str, emulator_only: None, bounded: Path
) -> None:
    """bwd_filter_reduce lives in conv/splitk_reduce.cuh, which every split-K module
    includes: the build checks the headers' kernels as well."""
    spec = ModuleSpec.make(str(bounded), ["fill<32>", "bwd_filter_reduce<float>"])
    kernel = backend_by_name("cpu").kernel(spec, "bwd_filter_reduce<float>")
    ws, dw = np.arange(8, dtype=np.float32), np.zeros(4, np.float32)
    kernel((1,), (256,), (ws, dw, np.int32(2), np.int64(4)))
    np.testing.assert_array_equal(dw, ws[:4] + ws[4:])
    with pytest.raises(ExecutionError, match=REFUSED.format(bound=256)):
        kernel((1,), (512,), (ws, dw, np.int32(2), np.int64(4)))
