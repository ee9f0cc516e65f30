"""The autotuner: times every usable (solver, config) of a problem and stores the
ranking in the user tuning DB.

Method: random operands of the problem's shapes; for each candidate a warm-up launch
(which also compiles), then repeats until the last three are within 5% of their
median or the repeat budget is spent; the median is the figure. On a GPU the L2 cache
is flushed by writing a 256 MiB buffer before every repeat and the candidate's GPU work
alone is timed with CUDA events: the flush and a spin kernel (``spin_wait``) are queued
first, the start event after them, and while the GPU spins Python issues the candidate's
launches, which then run back to back before the end event (the host time between
launches is not counted; a candidate whose launches take longer to issue than the spin
is timed again behind a longer one). On the emulator perf_counter times the call.
Candidates whose first timed run is 10x slower than the best so far are not repeated
(pruning).

A candidate that fails (a CUDA error at launch or at the synchronization after it, a
compile error, a refused configuration) is reported with a warning and skipped; the
others are still timed. A CUDA error that leaves the context unusable (an illegal
address, a trap: every later CUDA call fails too) ends the run with an ExecutionError
naming the candidate; nothing is stored.
"""

from __future__ import annotations

import statistics
import time
import warnings
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from ..errors import BadParamError, CudnnliteError, ExecutionError, NotSupportedError
from ..runtime.backend import Backend
from ..runtime.caps import capabilities
from ..runtime.graph import note_host_work
from ..runtime.kernel import ModuleSpec
from ..runtime.select import backend_by_name
from ..runtime.variants import register
from . import registry
from .select import family_of, usable
from .tuning_db import Entry, database

_NUMPY_DTYPES = {"fp32": np.float32, "fp16": np.float16, "fp64": np.float64}


def _numpy_dtype(short: str) -> Any:
    if short == "bf16":
        from ..dtypes import bfloat16

        if bfloat16 is None:
            raise NotSupportedError("bf16 needs ml_dtypes")
        return bfloat16
    return _NUMPY_DTYPES[short]


SPIN_SOURCE = "tuner/spin_wait.cu"


def spin_spec() -> ModuleSpec:
    return ModuleSpec.make(SPIN_SOURCE, ["spin_wait"])


@register("tuner")
def module_specs() -> list[ModuleSpec]:
    return [spin_spec()]


# clock64 cycles per microsecond of spin: no GPU clocks its SMs above 2 GHz, so a spin
# of us * 2000 cycles lasts at least us microseconds.
_CYCLES_PER_US = 2000
_MAX_SPIN_US = 200_000.0


class _Timer:
    def __init__(self, backend: Backend) -> None:
        self.backend = backend
        self.gpu = backend.name == "cuda"
        self.spin_us = 100.0  # grows to cover the slowest candidate's launch issue time
        if self.gpu:
            cp = backend.xp
            self._flush = cp.empty(256 << 20, dtype=cp.uint8)
            self._start, self._end = cp.cuda.Event(), cp.cuda.Event()
            self._spin = backend.kernel(spin_spec(), "spin_wait")

    def once_us(self, fn: Callable[[], None]) -> float:
        if not self.gpu:
            t0 = time.perf_counter()
            fn()
            return (time.perf_counter() - t0) * 1e6
        while True:
            self._flush.fill(1)
            self._spin(1, 32, (np.int64(self.spin_us * _CYCLES_PER_US),))
            self._start.record()
            t0 = time.perf_counter()
            fn()
            issue_us = (time.perf_counter() - t0) * 1e6
            self._end.record()
            self._end.synchronize()
            gpu_us = self.backend.xp.cuda.get_elapsed_time(self._start, self._end) * 1e3
            if issue_us < self.spin_us or self.spin_us >= _MAX_SPIN_US:
                return gpu_us
            # the GPU may have waited for Python between launches: again, spinning longer
            self.spin_us = min(_MAX_SPIN_US, 2 * issue_us + 50)


def _stable_median(timer: _Timer, fn: Callable[[], None], best: float | None,
                   max_repeats: int) -> float:  # fmt: skip
    times = [timer.once_us(fn)]
    if best is not None and times[0] > 10 * best:
        return times[0]  # hopeless: do not spend repeats on it
    while len(times) < max_repeats:
        times.append(timer.once_us(fn))
        if len(times) >= 3:
            last = times[-3:]
            med = statistics.median(last)
            if max(abs(t - med) for t in last) <= 0.05 * med:
                break
    return statistics.median(times)


def _random(problem: Any, backend: Backend, shape: tuple[int, ...], seed: int) -> Any:
    dt = _numpy_dtype(problem.dtype)
    rng = np.random.default_rng(seed)
    return backend.xp.asarray(rng.standard_normal(shape, dtype=np.float32).astype(dt))


def _empty(problem: Any, backend: Backend, shape: tuple[int, ...]) -> Any:
    return backend.xp.empty(shape, dtype=_numpy_dtype(problem.dtype))


def _conv_epilogue() -> Any:
    from ..solvers.conv.common import Epilogue

    return Epilogue()


def _fwd_tensors(problem: Any, backend: Backend) -> tuple[Any, Any]:
    from ..solvers.conv.common import ConvTensors

    x = _random(problem, backend, problem.x_shape(), 0)
    w = _random(problem, backend, problem.w_shape(), 1)
    return ConvTensors(x=x, w=w, y=_empty(problem, backend, problem.y_shape())), _conv_epilogue()


def _bwd_data_tensors(problem: Any, backend: Backend) -> tuple[Any, Any]:
    from ..solvers.conv.bwd_data import BwdDataTensors

    dy = _random(problem, backend, problem.y_shape(), 0)
    w = _random(problem, backend, problem.w_shape(), 1)
    dx = _empty(problem, backend, problem.x_shape())
    return BwdDataTensors(dy=dy, w=w, dx=dx), _conv_epilogue()


def _bwd_filter_tensors(problem: Any, backend: Backend) -> tuple[Any, Any]:
    from ..solvers.conv.bwd_filter import BwdFilterTensors

    x = _random(problem, backend, problem.x_shape(), 0)
    dy = _random(problem, backend, problem.y_shape(), 1)
    dw = _empty(problem, backend, problem.w_shape())
    return BwdFilterTensors(x=x, dy=dy, dw=dw), _conv_epilogue()


def _sdpa_tensors(problem: Any, backend: Backend) -> tuple[Any, Any]:
    from ..ops.attention import tuning_operands

    return tuning_operands(problem, backend, _random, _empty)


def _rnn_tensors(problem: Any, backend: Backend) -> tuple[Any, Any]:
    from ..ops.rnn import tuning_operands

    return tuning_operands(problem, backend, _random, _empty)


# The operands of one timed call, per family (what each family's runners take).
_TENSOR_FACTORIES: dict[str, Callable[[Any, Backend], tuple[Any, Any]]] = {
    "conv_fwd": _fwd_tensors,
    "conv_bwd_data": _bwd_data_tensors,
    "conv_bwd_filter": _bwd_filter_tensors,
    "sdpa_fwd": _sdpa_tensors,
    "sdpa_bwd": _sdpa_tensors,
    "rnn_fwd": _rnn_tensors,
    "rnn_bwd": _rnn_tensors,
}


def tune_problem(problem: Any, backend: Backend, *, store: bool = True,
                 max_repeats: int | None = None) -> list[Entry]:  # fmt: skip
    """Times every usable (solver, config) for ``problem`` on ``backend``; returns the
    entries ranked fastest first and (``store``) records them in the user DB."""
    # Every candidate's launches, timed: work a launch template or an emulator graph must
    # not replay (a recording is refused; a template records the next call's launches).
    note_host_work("tuning: every usable solver launched and timed")
    caps = capabilities(backend)
    tensors, epilogue = _TENSOR_FACTORIES[family_of(problem)](problem, backend)
    timer = _Timer(backend)
    repeats = max_repeats or (20 if timer.gpu else 3)
    results: list[Entry] = []
    best: float | None = None
    xp = backend.xp
    candidates = [
        (solver, config)
        for solver in registry.solvers(family_of(problem))
        if usable(solver, problem, caps)
        for config in solver.configs(problem, caps)
        if usable(solver, problem, caps, config)
    ]
    backend.prefetch(lambda: [_dry_prepare(s, backend, problem, c) for s, c in candidates])
    for solver, config in candidates:
        size = solver.workspace_size(problem, config)
        workspace = xp.empty(size, dtype=xp.uint8) if size else None
        try:
            runner = solver.prepare(backend, problem, config)

            def run(runner: Any = runner, workspace: Any = workspace) -> None:
                runner(tensors, epilogue, workspace)

            run()  # warm-up (and compile)
            backend.synchronize()  # an asynchronous CUDA error surfaces here
            t = _stable_median(timer, run, best, repeats)
        except Exception as exc:  # a candidate that fails is not a candidate
            if not isinstance(exc, CudnnliteError) and not is_cuda_error(exc):
                raise  # a bug of ours, not the candidate's
            what = f"tuning {problem.key()}: {solver.name} {config.to_dict()}"
            if timer.gpu and context_is_lost(backend):
                raise ExecutionError(
                    f"{what} failed with {type(exc).__name__}: {exc}; the error left "
                    "the CUDA context unusable (every later CUDA call fails), so tuning "
                    f"stops here and nothing is stored ({len(results)} candidates were "
                    "timed); restart the process, and disable this solver "
                    "(CUDNNLITE_DISABLE_SOLVERS) or report it"
                ) from exc
            warnings.warn(f"{what} failed, skipped: {type(exc).__name__}: {exc}",
                          stacklevel=2)  # fmt: skip
            continue
        results.append(Entry(solver.name, config.to_dict(), t, size))
        best = t if best is None else min(best, t)
    results.sort(key=lambda e: e.time_us if e.time_us is not None else float("inf"))
    if store and results:
        database(caps.arch).record(problem.key(), results)
    return results


def _dry_prepare(solver: Any, backend: Backend, problem: Any, config: Any) -> None:
    """One candidate's preparation in tune_problem's dry run (Backend.prefetch): a
    candidate that cannot prepare must not stop the others' builds."""
    try:
        solver.prepare(backend, problem, config)
    except Exception:  # (timing it reports it)
        pass


_CUDA_ERRORS = ("CUDADriverError", "CUDARuntimeError", "CUBLASError", "CompileException")


def is_cuda_error(exc: BaseException) -> bool:
    """An error CuPy raises for a CUDA failure (driver, runtime, cuBLAS, NVRTC)."""
    return type(exc).__name__ in _CUDA_ERRORS


def context_is_lost(backend: Backend) -> bool:
    """Whether the CUDA context is poisoned by a sticky error: a device synchronization
    and a small allocation and copy, which fail after one, are tried."""
    xp = backend.xp
    try:
        xp.cuda.runtime.deviceSynchronize()
        probe = xp.zeros(1, dtype=xp.float32)
        probe += 1
        return float(probe.get()[0]) != 1.0
    except Exception as exc:
        if is_cuda_error(exc) or isinstance(exc, CudnnliteError):
            return True
        raise


def tune(problems: Any, *, backend: str | Backend = "auto", progress: bool = True,
         store: bool = True) -> dict[str, list[Entry]]:  # fmt: skip
    """Tunes one problem or many (problem objects of any family, or their keys) and stores the
    rankings in the user DB; returns ``{key: ranked entries}``.

    ``backend``: "cuda", "cpu" (the emulator) or "auto" (the GPU when CuPy sees one).
    A progress bar (tqdm) shows when tuning more than one problem.
    """
    from ..problems import is_problem, parse_key

    if isinstance(problems, str) or is_problem(problems):
        problems = [problems]
    try:
        problems = list(problems)
    except TypeError:
        raise BadParamError(f"problems: expected a problem, its key, or an iterable of them, "
                            f"got {type(problems).__name__}") from None  # fmt: skip
    items = [parse_key(p) if isinstance(p, str) else p for p in problems]
    for p in items:
        if not is_problem(p):
            raise BadParamError(
                f"problems: expected problem objects or their keys, got {type(p).__name__}"
            )
    b = _resolve_backend(backend)
    iterator: Iterable[Any] = items
    if progress and len(items) > 1:
        from tqdm.auto import tqdm

        iterator = tqdm(items, desc=f"tuning on {b.name}", unit="problem")
    return {p.key(): tune_problem(p, b, store=store) for p in iterator}


def _resolve_backend(backend: str | Backend) -> Backend:
    if isinstance(backend, Backend):
        return backend
    if backend == "auto":
        from ..runtime.cuda import CudaBackend

        return backend_by_name("cuda" if CudaBackend.available() else "cpu")
    return backend_by_name(backend)
