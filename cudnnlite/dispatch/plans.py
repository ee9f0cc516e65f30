"""Plans: the dispatch path stopped before the launch. A plan holds the problem, the
chosen solver and config, the prepared runner (compiled kernels) and the workspace,
so calling it again costs a launch and nothing more. Functional calls go through an
in-process cache of plans keyed by device, problem, algo and the settings."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from ..errors import BadParamError
from ..runtime.backend import Backend
from ..runtime.graph import current_recorder, note_nondeterministic
from . import settings
from .select import Choice, select

_CACHE_SIZE = 1024


class Plan:
    """A prepared (problem, solver, config) on one backend."""

    def __init__(self, backend: Backend, problem: Any, choice: Choice) -> None:
        self.backend = backend
        self.problem = problem
        self.choice = choice
        self.solver = choice.solver
        self.config = choice.config
        # A first call builds the runner's kernels side by side (Backend.prefetch).
        backend.prefetch(lambda: choice.solver.prepare(backend, problem, choice.config))
        self.runner = choice.solver.prepare(backend, problem, choice.config)
        self.workspace_bytes = choice.solver.workspace_size(problem, choice.config)
        self._workspace: Any = None
        self._lock = threading.Lock()

    @property
    def source(self) -> str:
        return self.choice.source

    @property
    def kernel_names(self) -> list[str]:
        return self.runner.kernel_names

    def launch(self, tensors: Any, epilogue: Any) -> None:
        """Runs the runner with this plan's workspace (a fresh one if another thread
        is using it, or if a graph is capturing: the graph keeps its launches' arguments,
        the fresh workspace with them, and replays them later without this plan's lock,
        so a shared workspace would be written by its replays and by every other call of
        the plan at once)."""
        if not self.solver.deterministic:
            note_nondeterministic(f"{self.solver.name}: atomics")
        if not self.workspace_bytes:
            self.runner(tensors, epilogue, None)
            return
        if current_recorder() is not None:
            self.runner(tensors, epilogue, self.backend.empty((self.workspace_bytes,), "uint8"))
            return
        if self._lock.acquire(blocking=False):
            try:
                if self._workspace is None:
                    self._workspace = self.backend.empty((self.workspace_bytes,), "uint8")
                self.runner(tensors, epilogue, self._workspace)
            finally:
                self._lock.release()
        else:
            self.runner(tensors, epilogue, self.backend.empty((self.workspace_bytes,), "uint8"))

    def describe(self) -> str:
        return (
            f"{self.problem.key()} -> {self.solver.name} [{self.config.label()}] "
            f"({self.source}; workspace {self.workspace_bytes} B)"
        )

    def __repr__(self) -> str:
        return f"<Plan {self.describe()}>"


_plans: OrderedDict[tuple, Plan] = OrderedDict()
_plans_lock = threading.Lock()


def _cache_key(backend: Backend, problem: Any, algo: str) -> tuple:
    st = settings.current()
    return (
        backend.device_key(),
        problem,
        algo,
        st,
        settings.disabled_solvers(),
        settings.forced_solver() and str(settings.forced_solver()),
    )


def get_plan(backend: Backend, problem: Any, algo: str = "auto") -> Plan:
    """The cached plan for this call, making it on first use."""
    if not isinstance(algo, str):
        raise BadParamError(f"algo: expected 'auto', a solver name or a family, got {algo!r}")
    key = _cache_key(backend, problem, algo)
    with _plans_lock:
        plan = _plans.get(key)
        if plan is not None:
            _plans.move_to_end(key)
            return plan
    plan = Plan(backend, problem, select(problem, backend, algo))
    with _plans_lock:
        _plans[key] = plan
        while len(_plans) > _CACHE_SIZE:
            _plans.popitem(last=False)
    return plan


_clear_hooks: list[Callable[[], None]] = []


def on_clear(hook: Callable[[], None]) -> None:
    """Calls ``hook`` whenever the plan cache is cleared (the ops' call caches hold plans)."""
    _clear_hooks.append(hook)


def clear_plan_cache() -> None:
    with _plans_lock:
        _plans.clear()
    for hook in _clear_hooks:
        hook()
