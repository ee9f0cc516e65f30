"""Warm the kernel cache ahead of time: ``cudnnlite precompile [TARGET ...]``.

A first call compiles the modules it needs (NVRTC on a GPU, g++ on the emulator), which
can take seconds; this compiles them beforehand, in parallel threads (NVRTC and g++ both
run outside the GIL), with a progress bar, into the same caches the calls read (CuPy's
disk cache for the current GPU; ``CUDNNLITE_CACHE_DIR`` for the emulator).

Targets:

- a kernel family of ``runtime.variants`` (``activation``, ``softmax``, ``pooling``,
  ``norm``, ``dropout``, ``tensor``, ``ctc``, ``spatial``, ``solvers`` = every registered
  solver's modules, ...): every module it can generate, in the chosen dtypes;
- a layer suite (``resnet50``, ``vgg16``, ``mobilenetv2``, ``i3d``, ...): the kernels the
  dispatcher picks for each layer's forward convolution (its plan is made, so the tuning
  DB and heuristics decide, as a later call would).

No target means every family.

On a GPU a kernel is its own compile unit (``Backend.per_kernel_modules``), so a family
is compiled kernel by kernel, as first calls would. ``arch="sm_90"`` compiles for a GPU
that is not here (a container image, a login node): the CUDA backend's NVRTC, options and
CUBIN cache, no device needed (``runtime.cuda.AheadOfTimeBackend``).
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from . import dtypes
from .errors import BadParamError
from .runtime.kernel import ModuleSpec

DTYPES = tuple(d.short for d in dtypes.FLOAT_TYPES)


@dataclass
class Report:
    """What a precompile did: modules built (or plans made) and the failures, by label."""

    built: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.failed


def families() -> list[str]:
    """The kernel families ``runtime.variants`` knows (importing their providers)."""
    from .runtime import variants

    variants.all_module_specs()  # imports every provider module
    return sorted(variants._PROVIDERS)


def _family_specs(family: str, wanted: Sequence[str]) -> list[ModuleSpec]:
    from .runtime import variants
    from .runtime.nvrtc_check import code_path

    ctypes_ = {d.ctype for d in dtypes.FLOAT_TYPES if d.short in wanted}
    out = []
    for spec in variants._PROVIDERS[family]():
        kinds = set(code_path(spec)[1])
        if not kinds or kinds & ctypes_:  # dtype-free modules (selftests) always
            out.append(spec)
    return out


def _check(targets: Sequence[str], wanted: Sequence[str]) -> None:
    from .problems.suites import SUITES

    known = families() + sorted(SUITES)
    for t in targets:
        if t not in known:
            raise BadParamError(f"target: unknown {t!r}; expected one of {', '.join(known)}")
    for d in wanted:
        if d not in DTYPES:
            raise BadParamError(f"dtype: expected one of {DTYPES}, got {d!r}")


def precompile(
    targets: Sequence[str] = (),
    *,
    dtypes_: Sequence[str] = ("fp32",),
    backend: str = "auto",
    arch: str | None = None,
    jobs: int = 8,
    progress: bool = True,
) -> Report:
    """Compiles what ``targets`` need on ``backend`` ("cpu", "cuda" or "auto": the GPU when
    CuPy sees one), or with ``arch`` for that GPU arch without one; see the module
    docstring. Failures are reported, not raised."""
    from .problems.suites import SUITES

    _check(targets, dtypes_)
    be = _backend(backend, arch)
    chosen = list(targets) or families()
    work: list[tuple[str, Any]] = []
    for target in chosen:
        if target in SUITES:
            work += [(f"{target}: {p.key()}", p) for p in _suite_problems(target, dtypes_)]
        else:
            for spec in _family_specs(target, dtypes_):
                units = be.compile_units(spec)
                work += [(spec.label() if len(units) == 1 else f"{u.label()}: {u.names[0]}", u)
                         for u in units]  # fmt: skip
    work = list(dict(work).items())  # one job per module or problem
    report = Report()

    def build(item: tuple[str, Any]) -> tuple[str, str | None]:
        label, what = item
        try:
            if isinstance(what, ModuleSpec):
                be.module(what)
            else:
                from .dispatch.plans import get_plan

                get_plan(be, what)
            return label, None
        except Exception as exc:  # reported per module: one failure must not stop the rest
            return label, f"{type(exc).__name__}: {exc}"

    with ThreadPoolExecutor(max(1, jobs)) as pool:
        results: Any = pool.map(build, work)
        if progress:  # (tqdm only then: the device check runs where it may be missing)
            from tqdm import tqdm

            results = tqdm(results, total=len(work), desc=f"precompile ({be.name})",
                           unit="module")  # fmt: skip
        for label, error in results:
            if error is None:
                report.built.append(label)
            else:
                report.failed[label] = error
    return report


def _backend(backend: str, arch: str | None) -> Any:
    from .ops._fastpath import plan_backend

    if backend not in ("auto", "cpu", "cuda"):
        raise BadParamError(f"backend: expected 'auto', 'cpu' or 'cuda', got {backend!r}")
    if arch is not None:
        if backend == "cpu":
            raise BadParamError("arch: the emulator has no GPU arch; drop arch or backend='cpu'")
        from .runtime.cuda import AheadOfTimeBackend

        return AheadOfTimeBackend(arch)
    return plan_backend(backend)  # "auto": the GPU when CuPy sees one


def _suite_problems(suite: str, wanted: Sequence[str]) -> list[Any]:
    from .problems.suites import SUITES_3D, problems

    layout = "NDHWC" if suite in SUITES_3D else "NHWC"
    out = []
    for d in wanted:
        # fp32 networks run NCHW by default; 16-bit ones channels-last on tensor cores
        lay = layout if d != "fp32" else ("NCDHW" if suite in SUITES_3D else "NCHW")
        out += problems(suite, dtype=d, layout=lay)
    return out
