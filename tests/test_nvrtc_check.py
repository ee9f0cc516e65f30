"""NVRTC compile check: every kernel variant must compile to CUBIN for sm_75/80/90.

Needs no GPU, only NVRTC and the CUDA headers (the ``test`` extra installs the pip
wheels). Without NVRTC these tests skip, unless ``CUDNNLITE_REQUIRE_NVRTC=1`` (CI),
where they fail with the discovery error.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from cudnnlite.errors import BadParamError, CompileError, NotSupportedError
from cudnnlite.runtime import compile_options, cuda_toolkit, nvrtc_check
from cudnnlite.runtime.kernel import ModuleSpec

ARCHS = ("sm_75", "sm_80", "sm_90")
PROBE = "selftest/nvrtc_probe.cu"

PROBE_SPEC = ModuleSpec.make(
    PROBE,
    [
        "probe_kernel<__half>",
        "probe_kernel<__nv_bfloat16>",
        "probe_kernel<float>",
        "probe_convert<__half, __nv_bfloat16>",
        "probe_plain",
    ],
    {"PROBE_SCALE": 3},
)


# ------------------------------------------------------------------ discovery


def test_discovery_is_structured(nvrtc: cuda_toolkit.NvrtcLibrary) -> None:
    assert nvrtc.version >= (12, 0)
    assert nvrtc.path.name.startswith("libnvrtc")
    assert 90 in nvrtc.supported_archs or not nvrtc.supported_archs
    headers = cuda_toolkit.find_cuda_headers()
    assert (headers.fp16.path / "cuda_fp16.h").is_file()
    assert (headers.fp16.path / "cuda_bf16.h").is_file()
    # Headers from another CUDA major than NVRTC's would be a mismatch we avoid when possible.
    if headers.fp16.major is not None:
        assert headers.fp16.major == nvrtc.major
    dirs = cuda_toolkit.find_cuda_include_dirs()
    assert dirs[0] == headers.fp16.path
    report = cuda_toolkit.toolkit_report()
    assert report.ok and report.nvrtc == nvrtc


def test_env_override_that_is_not_nvrtc_raises(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # Runs with or without NVRTC: an explicit path must never fall back silently.
    monkeypatch.setenv(cuda_toolkit.ENV_NVRTC, str(tmp_path / "libnvrtc.so.99"))
    cuda_toolkit.clear_caches()
    try:
        with pytest.raises(NotSupportedError, match="CUDNNLITE_NVRTC") as info:
            cuda_toolkit.find_nvrtc()
        assert "cudnnlite[cuda13]" in str(info.value)
    finally:
        monkeypatch.delenv(cuda_toolkit.ENV_NVRTC)
        cuda_toolkit.clear_caches()


def test_not_found_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(cuda_toolkit.ENV_NVRTC, raising=False)
    monkeypatch.setattr(cuda_toolkit, "_nvrtc_candidates", lambda: [])
    cuda_toolkit.clear_caches()
    try:
        with pytest.raises(NotSupportedError) as info:
            cuda_toolkit.find_nvrtc()
        msg = str(info.value)
        assert 'pip install "cudnnlite[cuda13]"' in msg and "cudnnlite[cuda12]" in msg
    finally:
        cuda_toolkit.clear_caches()


# ------------------------------------------------------------------ compiling


@pytest.mark.parametrize("arch", ARCHS)
def test_probe_compiles(nvrtc: cuda_toolkit.NvrtcLibrary, arch: str) -> None:
    res = nvrtc_check.compile_to_cubin(PROBE_SPEC, arch)
    assert res.cubin_size > 0
    assert res.cubin[:4] == b"\x7fELF"  # a CUBIN is an ELF image
    assert res.arch == arch
    assert set(res.lowered_names) == set(PROBE_SPEC.names)
    # Templates lower to Itanium-mangled symbols; extern "C" keeps its name.
    half = res.lowered_names["probe_kernel<__half>"]
    assert half.startswith("_Z") and "probe_kernel" in half
    assert half != res.lowered_names["probe_kernel<__nv_bfloat16>"]
    assert res.lowered_names["probe_plain"] == "probe_plain"
    for sym in res.lowered_names.values():
        assert sym.encode() in res.cubin
    assert f"-arch={compile_options.target(arch)}" in res.options
    assert "-DPROBE_SCALE=3" in res.options
    assert any(o.startswith("-DCUDNNLITE_HEADERS=") for o in res.options)
    assert res.source.endswith("nvrtc_probe.cu")


# Kernels whose occupancy hint (__launch_bounds__' minimum blocks) asks for more threads
# than some SMs hold: 256 x 8 and 1024 x 2 (2048) against sm_86's 1536, 256 x 5 (1280)
# against sm_75's 1024. CL_MIN_BLOCKS clamps each to the arch being compiled.
HINTED = ("conv_direct<float, true, false>", "conv_direct<float, false, false>",
          "conv_direct_3d<float, true, false>", "grid_sample_fwd<float, 2, 0>",
          "rownorm_bwd<float, false, 4>")  # fmt: skip


@pytest.mark.parametrize("arch", ["sm_75", "sm_86"])
def test_occupancy_hints_fit_every_arch(nvrtc: cuda_toolkit.NvrtcLibrary, arch: str) -> None:
    """ptxas ignores a minimum-blocks hint whose threads the SM cannot hold (a warning,
    and no register cap): compiled for the SMs of 1024 and 1536 threads, the hinted
    kernels draw no such warning."""
    from cudnnlite.runtime import resources
    from cudnnlite.runtime.variants import all_module_specs

    parts = {n: part for spec in all_module_specs() for part in spec.parts() for n in part.names
             if n in HINTED}  # fmt: skip
    assert set(parts) == set(HINTED)
    for name, part in parts.items():
        res = nvrtc_check.compile_to_cubin(part, arch, report_options=(resources.PTXAS_VERBOSE,))
        assert "out of range" not in (res.log or ""), (name, res.log)
        assert "minnctapersm" not in (res.log or ""), (name, res.log)


BROKEN = """\
#include "common/cudnnlite.cuh"
template <typename T>
__global__ void broken_kernel(T* y) {
    y[0] = cl::from_float<T>(undefined_thing_xyz * BROKEN_DEFINE);
}
"""


def test_broken_source_raises_compile_error(
    nvrtc: cuda_toolkit.NvrtcLibrary, tmp_path: Path
) -> None:
    src = tmp_path / "broken_probe.cu"
    src.write_text(BROKEN)
    spec = ModuleSpec.make(
        "selftest/broken_probe.cu", ["broken_kernel<__half>"], {"BROKEN_DEFINE": 7}
    )
    with pytest.raises(CompileError) as info:
        nvrtc_check.compile_to_cubin(spec, "sm_80", source_file=src)
    msg = str(info.value)
    assert "-DBROKEN_DEFINE=7" in msg
    assert "sm_80" in msg
    assert "broken_kernel<__half>" in msg
    # NVRTC's own error line, naming the file by the program name we gave it.
    assert 'identifier "undefined_thing_xyz" is undefined' in msg
    assert f"{src}(4): error" in msg


def test_missing_kernel_name_is_a_compile_error(nvrtc: cuda_toolkit.NvrtcLibrary) -> None:
    spec = ModuleSpec.make(PROBE, ["probe_kernel<__half>", "no_such_kernel<float>"])
    with pytest.raises(CompileError, match="no_such_kernel"):
        nvrtc_check.compile_to_cubin(spec, "sm_90")


def test_compile_source_text(nvrtc: cuda_toolkit.NvrtcLibrary) -> None:
    text = 'extern "C" __global__ void k(float* y) { y[threadIdx.x] = 1.0f; }\n'
    res = nvrtc_check.compile_source(text, "inline_test.cu", ["k"], "sm_75")
    assert res.lowered_names == {"k": "k"} and res.cubin_size > 0


def test_virtual_arch_is_rejected(nvrtc: cuda_toolkit.NvrtcLibrary) -> None:
    with pytest.raises(BadParamError, match="real architecture"):
        nvrtc_check.compile_to_cubin(PROBE_SPEC, "compute_90")


def test_unsupported_arch_names_supported_ones(nvrtc: cuda_toolkit.NvrtcLibrary) -> None:
    if not nvrtc.supported_archs:
        pytest.skip("this NVRTC does not list its archs")
    with pytest.raises(NotSupportedError, match="sm_90"):
        nvrtc_check.compile_to_cubin(PROBE_SPEC, "sm_10")


# ------------------------------------------------------------------ check_all / CLI


def test_check_all_own_specs(nvrtc: cuda_toolkit.NvrtcLibrary, tmp_path: Path) -> None:
    specs = [PROBE_SPEC, ModuleSpec.make(PROBE, ["probe_kernel<float>"], {"PROBE_SCALE": 1})]
    results = nvrtc_check.check_all(specs, ARCHS)
    assert [(r.spec, r.arch) for r in results] == [(s, a) for s in specs for a in ARCHS]
    assert all(r.ok and r.cubin_size > 0 and r.seconds > 0 for r in results), [
        r.error for r in results if not r.ok
    ]


def test_check_all_reports_failures(nvrtc: cuda_toolkit.NvrtcLibrary) -> None:
    bad = ModuleSpec.make(PROBE, ["no_such_kernel"])
    missing = ModuleSpec.make("selftest/does_not_exist.cu", ["k"])
    results = nvrtc_check.check_all([PROBE_SPEC, bad, missing], ("sm_90",))
    assert [r.ok for r in results] == [True, False, False]
    assert "no_such_kernel" in (results[1].error or "")
    assert "does_not_exist.cu" in (results[2].error or "")


def test_main_prints_one_line_per_spec_and_arch(
    nvrtc: cuda_toolkit.NvrtcLibrary, capsys: pytest.CaptureFixture[str]
) -> None:
    assert nvrtc_check.main(["--arch", "sm_80", "--arch", "sm_90"], specs=[PROBE_SPEC]) == 0
    lines = capsys.readouterr().out.splitlines()
    rows = [ln for ln in lines if ln.startswith(("OK", "FAIL"))]
    assert len(rows) == 2 and all(r.startswith("OK") for r in rows)
    assert "sm_80" in rows[0] and "sm_90" in rows[1]

    bad = ModuleSpec.make(PROBE, ["no_such_kernel"])
    assert nvrtc_check.main(["--arch", "sm_90"], specs=[bad]) == 1
    assert "FAIL" in capsys.readouterr().out


def test_main_list_needs_no_nvrtc(capsys: pytest.CaptureFixture[str]) -> None:
    assert nvrtc_check.main(["--list"], specs=[PROBE_SPEC]) == 0
    assert PROBE_SPEC.label() in capsys.readouterr().out


def test_coverage_tasks_cover_every_code_path_on_every_arch() -> None:
    tile = [ModuleSpec.make("conv/x.cu", [f"k<__half, {t}>"], {"BM": t}) for t in (64, 128)]
    other = [ModuleSpec.make("conv/x.cu", ["k<float, 64>"], {"BM": 64}),
             ModuleSpec.make("conv/x.cu", ["k_3d<__half, 64>"], {"BM": 64}),
             ModuleSpec.make("conv/y.cu", ["k"], {"T": "__nv_bfloat16"})]  # fmt: skip
    tasks = nvrtc_check.coverage_tasks(tile + other, ARCHS, "sm_90")
    assert [s for s, a in tasks if a == "sm_90"] == tile + other  # every variant once
    # with ptx_variants, a code path's later tile variants compile to PTX only, and so do
    # sm_75's header-only code paths (no arch test of ours between sm_75 and sm_80)
    ptx = nvrtc_check.coverage_tasks(tile + other, ARCHS, "sm_90", ptx_variants=True)
    assert [s for s, a in ptx if a == "compute_90"] == [tile[1]]
    assert [s for s, a in ptx if a == "sm_90"] == [tile[0], *other]
    assert [s for s, a in ptx if a == "compute_75"] == [tile[0], other[1], other[2]]
    # one per code path, float-only ones (other[0]) only where a source tests sm_75/80
    assert [s for s, a in tasks if a == "sm_75"] == [tile[0], other[1], other[2]]
    assert nvrtc_check.code_path(other[2])[1] == ("__nv_bfloat16",)
    # sm_80 only where a source (with its headers) tells sm_80 from sm_90 apart
    flash = ModuleSpec.make("attention/flash_bwd.cu", ["sdpa_flash_bwd_main<__half>"])
    relu = ModuleSpec.make("activation/activation.cu", ["act_fwd<float, 1>"])
    assert any(800 < t <= 900 for t in nvrtc_check.arch_thresholds(flash.source))
    assert 800 in nvrtc_check.arch_thresholds("conv/tc_implicit_gemm.cu")  # via mma.cuh
    tasks = nvrtc_check.coverage_tasks([flash, relu], ARCHS, "sm_90")
    assert [s for s, a in tasks if a == "sm_80"] == [flash]
    assert [s for s, a in tasks if a == "sm_75"] == [flash]  # relu: float alone, no 7.5 test
    # a code path in float or double alone meets sm_75 only where a source tells sm_75
    # from sm_80; one naming a 16-bit type, or no type, always does
    relu64 = ModuleSpec.make("activation/activation.cu", ["act_fwd<double, 1>"])
    tc64 = ModuleSpec.make("conv/tc_implicit_gemm.cu", ["k<double>"])
    untyped = ModuleSpec.make("activation/activation.cu", ["act_fwd_vec"])
    tasks = nvrtc_check.coverage_tasks([relu64, tc64, relu, untyped], ARCHS, "sm_90")
    assert [s for s, a in tasks if a == "sm_75"] == [tc64, untyped]
    assert [s for s, a in tasks if a == "sm_90"] == [relu64, tc64, relu, untyped]


# The CI check runs in shards so that pytest-xdist spreads its ~300 compiles over both
# workers (one test of 400 s ran alone at the end of the suite).
NVRTC_SHARDS = 10


def one_per_template(spec: ModuleSpec) -> ModuleSpec:
    """``spec`` with the first instantiation of each of its kernel templates only (a name
    up to its ``<``): NVRTC compiles only the templates a program names."""
    first: dict[str, str] = {}
    for name in spec.names:
        first.setdefault(name.split("<", 1)[0], name)
    return ModuleSpec(spec.source, tuple(first.values()), spec.defines)


def test_one_per_template_keeps_each_template_once() -> None:
    names = ["r_block<float, 0>", "r_block<float, 1>", "r_warp<float, 0>", "plain", "r_warp<f, 3>"]
    spec = ModuleSpec.make("tensor/reduce.cu", names, {"BLOCK": 256})
    assert one_per_template(spec).names == ("r_block<float, 0>", "r_warp<float, 0>", "plain")
    assert one_per_template(spec).defines == spec.defines


@pytest.mark.parametrize("shard", range(NVRTC_SHARDS))
def test_every_registered_variant_compiles(nvrtc: cuda_toolkit.NvrtcLibrary, shard: int) -> None:
    """THE CI check: every ModuleSpec the library can generate compiles for sm_90, one per
    code path (source, dtype, kernel templates) to a CUBIN and the later tile variants of
    a code path to PTX (compute_90); and one per code path for sm_75 (float/double-only
    paths where a source tells sm_75 from sm_80), and for sm_80 where a source tells it
    from sm_90 (coverage_tasks), in NVRTC_SHARDS shards. The CI budget: every task at
    NVRTC's fast-compile level (otherwise a third of the suite's time), where each still
    meets the front end, code generation and, for sm_XX, ptxas; and per source one more
    module for sm_90 with exactly the run-time options: of its code paths the one of the
    most kernel templates, one instantiation of each (one_per_template: the 72 kernels of the
    reductions are 6 templates times 12 ops, 20 s in full, 1.5 s as 6).
    `python -m cudnnlite.runtime.nvrtc_check` compiles every one for all three with the
    run-time options."""
    import importlib

    from cudnnlite.runtime import variants

    for name in variants._PROVIDER_MODULES:  # every provider exists and imports
        importlib.import_module(name)
    specs = variants.all_module_specs()
    assert len(specs) >= 50, f"only {len(specs)} kernel modules registered"
    tasks = nvrtc_check.coverage_tasks(specs, ARCHS, "sm_90", ptx_variants=True)
    assert {spec for spec, arch in tasks if arch in ("sm_90", "compute_90")} == set(specs)
    full: dict[str, ModuleSpec] = {}  # per source, its sm_90 spec of the most templates
    for spec, arch in tasks:
        best = full.get(spec.source)
        sample = one_per_template(spec)
        if arch == "sm_90" and (best is None or len(sample.names) > len(best.names)):
            full[spec.source] = sample
    assert set(full) == {spec.source for spec in specs}  # every source meets the optimizer
    full_tasks = {(spec, "sm_90") for spec in full.values()}
    # (a full task that is a task already, a spec of distinct templates, runs once)
    every = [*tasks, *sorted(full_tasks - set(tasks), key=lambda t: t[0].source)]

    # one compile at a time: the other test process keeps the other core busy
    def quick(spec: ModuleSpec, arch: str) -> bool:
        return (spec, arch) not in full_tasks

    results = nvrtc_check.check_all(tasks=every[shard::NVRTC_SHARDS], jobs=1, quick=quick)
    failures = [f"{r.spec.label()} {r.arch}:\n{r.error}" for r in results if not r.ok]
    assert not failures, "\n\n".join(failures)
    # ptxas warns where it drops what a kernel asks for (an occupancy hint an SM cannot
    # hold, a stack it cannot size): none anywhere
    warned = [
        f"{r.spec.label()} {r.arch}: {line}"
        for r in results
        for line in (r.log or "").splitlines()
        if line.startswith("ptxas warning")
    ]
    assert not warned, "\n".join(warned)


def test_quick_tasks_add_the_fast_compile_level(nvrtc: cuda_toolkit.NvrtcLibrary) -> None:
    spec = ModuleSpec.make(PROBE, ["probe_kernel<float>"], {"PROBE_SCALE": 2})
    fast = nvrtc_check.fast_compile_options()
    assert fast in (nvrtc_check.FAST_COMPILE, ())  # () where this NVRTC refuses the option
    if nvrtc.version >= (13, 0):
        assert fast == nvrtc_check.FAST_COMPILE
    full, quick, ptx = nvrtc_check.check_all(
        tasks=[(spec, "sm_90"), (spec, "sm_80"), (spec, "compute_90")],
        quick=lambda spec, arch: arch != "sm_90",
    )
    assert full.ok and quick.ok and ptx.ok, [full.error, quick.error, ptx.error]
    assert full.cubin_size > 0 and quick.cubin_size > 0
    assert set(full.lowered_names) == set(quick.lowered_names) == set(spec.names)
    # a compile error shows at the fast level as it does at the full one
    bad = ModuleSpec.make(PROBE, ["no_such_kernel<float>"])
    slow_fail, quick_fail = nvrtc_check.check_all(
        tasks=[(bad, "sm_90"), (bad, "sm_75")], quick=lambda spec, arch: arch == "sm_75"
    )
    assert not slow_fail.ok and not quick_fail.ok
    assert "no_such_kernel" in (quick_fail.error or "")
    if fast:
        assert fast[0] in (quick_fail.error or "")  # the options are in the message


def test_an_nvrtc_without_the_fast_level_compiles_in_full(
    nvrtc: cuda_toolkit.NvrtcLibrary, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(*args: object, **kwargs: object) -> None:
        raise CompileError("cudnnlite: NVRTC compilation failed (NVRTC_ERROR_INVALID_OPTION)")

    monkeypatch.setattr(nvrtc_check, "compile_program", refuse)
    assert nvrtc_check._fast_compile_options.__wrapped__(nvrtc.path) == ()
