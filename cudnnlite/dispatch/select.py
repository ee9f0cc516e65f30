"""Choosing (solver, config) for a problem, in this order:

1. an explicit ``algo=`` (NotSupportedError with the solver's own reason if it does
   not apply), or ``CUDNNLITE_FORCE_SOLVER``; ``algo=`` may also name an algorithm
   family (:data:`ALGO_FAMILIES`: the best usable solver of that family, by the tuning
   DB's times and then the heuristic ranking);
2. (the in-process plan cache, in plans.py, which stores what 3-5 chose);
3. the user tuning DB, then the shipped DB of the device's arch (entries that no
   longer apply or validate are skipped);
4. in "benchmark" mode, tuning the problem now (stored in the user DB);
5. the heuristics.
Every path respects the workspace limit, the deterministic setting and
``CUDNNLITE_DISABLE_SOLVERS``.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any

from ..errors import BadParamError, NotSupportedError
from ..runtime.backend import Backend
from ..runtime.caps import Capabilities, capabilities
from ..solvers.base import Applicability, Config, Solver, not_applicable
from . import registry, settings
from .heuristics import RANKINGS
from .tuning_db import Entry, TuningDBWarning, database


@dataclass(frozen=True)
class Choice:
    solver: Solver
    config: Config
    source: str  # "explicit", "forced", "user DB", "shipped DB", "tuned", "heuristic"
    time_us: float | None = None


def family_of(problem: Any) -> str:
    return problem.family


# Algorithm families an ``algo=`` may name instead of a solver. A solver belongs to every
# family its algorithm falls in (tc_implicit_gemm is both "implicit_gemm" and
# "tensor_core"); membership comes from the solver's name, whose parts are stable.
ALGO_FAMILIES = ("winograd", "implicit_gemm", "direct", "gemm", "tensor_core")
_TENSOR_CORE_PARTS = ("wmma", "tc", "dmma")


def algo_families(solver_name: str) -> frozenset[str]:
    """The :data:`ALGO_FAMILIES` a solver belongs to: "winograd", "direct", "implicit_gemm"
    (implicit GEMM on CUDA or tensor cores, incl. precomputed offsets), "gemm" (an
    explicit GEMM: 1x1 as a GEMM, im2col/col2im with cuBLAS), "tensor_core" (WMMA,
    mma.sync or DMMA)."""
    parts = solver_name.split("_")
    found = set()
    if "winograd" in parts:
        found.add("winograd")
    if "direct" in parts:
        found.add("direct")
    if "implicit" in parts:
        found.add("implicit_gemm")
    elif "gemm" in parts:
        found.add("gemm")
    if any(t in parts for t in _TENSOR_CORE_PARTS):
        found.add("tensor_core")
    return frozenset(found)


def _family_choice(algo: str, problem: Any, caps: Capabilities) -> Choice:
    family = family_of(problem)
    members = {s.name: s for s in registry.solvers(family) if algo in algo_families(s.name)}
    if not members:
        raise NotSupportedError(f"algo: no {algo} solver solves {family}")
    found = database(caps.arch).lookup(problem.key())
    if found is not None:
        entries = [e for e in found[0] if e.solver in members]
        choice = from_entries(entries, problem, caps, found[1])
        if choice is not None:
            return Choice(choice.solver, choice.config, f"{algo} ({found[1]})", choice.time_us)
    ranked = [n for n in RANKINGS[family](problem, caps) if n in members]
    ranked += [n for n in members if n not in ranked]
    reasons = []
    for name in ranked:
        solver = members[name]
        app = usable(solver, problem, caps)
        if app:
            return Choice(solver, solver.default_config(problem, caps), f"{algo} (heuristic)")
        reasons.append(f"{name}: {app.reason}")
    raise NotSupportedError(f"algo={algo!r}: no {algo} solver can run {problem.key()}: "
                            + "; ".join(reasons))  # fmt: skip


def usable(solver: Solver, problem: Any, caps: Capabilities, config: Config | None = None,
           st: settings.Settings | None = None) -> Applicability:  # fmt: skip
    """Applicable, and allowed by the settings (workspace limit, determinism, disabled)."""
    st = st or settings.current()
    if solver.name in settings.disabled_solvers():
        return not_applicable("disabled by CUDNNLITE_DISABLE_SOLVERS")
    if st.deterministic and not solver.deterministic:
        return not_applicable("not bitwise reproducible (deterministic mode is on)")
    app = solver.is_applicable(problem, caps)
    if not app:
        return app
    config = config or solver.default_config(problem, caps)
    need = solver.workspace_size(problem, config)
    if st.workspace_limit is not None and need > st.workspace_limit:
        return not_applicable(
            f"needs {need} bytes of workspace, over the limit {st.workspace_limit}"
        )
    return app


def _explicit(name: str, problem: Any, caps: Capabilities, config: dict | None,
              source: str) -> Choice:  # fmt: skip
    solver = registry.get(name)
    if solver.family != family_of(problem):
        raise BadParamError(f"algo: {name} solves {solver.family}, not {family_of(problem)}")
    # applicability first: a solver's configs may assume a problem it can run
    app = usable(solver, problem, caps)
    if not app:
        raise NotSupportedError(f"{name} cannot run {problem.key()}: {app.reason}")
    if config is None:
        return Choice(solver, solver.default_config(problem, caps), source)
    try:
        cfg = solver.config_from_dict(config)
    except (TypeError, ValueError) as exc:
        raise BadParamError(f"config for {name}: {exc}") from None
    if not solver.is_valid(cfg, problem, caps):
        raise NotSupportedError(f"{name}: config {config} is not valid for {problem.key()}")
    app = usable(solver, problem, caps, cfg)  # (the given config's own workspace)
    if not app:
        raise NotSupportedError(f"{name} cannot run {problem.key()}: {app.reason}")
    return Choice(solver, cfg, source)


_warned_keys: set[tuple[str, str]] = set()


def from_entries(
    entries: list[Entry], problem: Any, caps: Capabilities, source: str
) -> Choice | None:
    """The first entry that still validates; one warning per key when some do not."""
    skipped = []
    for e in entries:
        try:
            solver = registry.get(e.solver)
        except BadParamError:
            skipped.append(f"unknown solver {e.solver!r}")
            continue
        if solver.family != family_of(problem):
            skipped.append(f"{e.solver} is not a {family_of(problem)} solver")
            continue
        try:
            cfg = solver.config_from_dict(e.config)
        except (TypeError, ValueError) as exc:
            skipped.append(f"{e.solver}: invalid config {e.config} ({exc})")
            continue
        if not solver.is_valid(cfg, problem, caps):
            skipped.append(f"{e.solver}: config {e.config} not valid for this problem")
            continue
        if not usable(solver, problem, caps, cfg):
            continue  # e.g. over today's workspace limit: not an error in the DB
        if skipped:
            _warn_once(problem.key(), source, skipped)
        return Choice(solver, cfg, source, e.time_us)
    if skipped:
        _warn_once(problem.key(), source, skipped)
    return None


def _warn_once(key: str, source: str, skipped: list[str]) -> None:
    if (key, source) in _warned_keys:
        return
    _warned_keys.add((key, source))
    warnings.warn(f"{source} entries for {key} skipped: {'; '.join(skipped)}", TuningDBWarning,
                  stacklevel=4)  # fmt: skip


def heuristic(problem: Any, caps: Capabilities) -> Choice:
    family = family_of(problem)
    available = {s.name: s for s in registry.solvers(family)}
    ranked = [n for n in RANKINGS[family](problem, caps) if n in available]
    ranked += [n for n in available if n not in ranked]
    reasons = []
    for name in ranked:
        solver = available[name]
        app = usable(solver, problem, caps)
        if app:
            return Choice(solver, solver.default_config(problem, caps), "heuristic")
        reasons.append(f"{name}: {app.reason}")
    raise NotSupportedError(f"no solver can run {problem.key()}: " + "; ".join(reasons))


def check_algo(algo: Any, family: str) -> None:
    """The checks of an ``algo=`` that need no problem: a string, and "auto", an algorithm
    family or the name of a solver of ``family`` (``conv_fwd``, ...). :func:`select` makes
    them first; a call without work (an empty batch), which never dispatches, makes them
    itself, so that a bad ``algo`` raises the same error at any size."""
    if not isinstance(algo, str):
        raise BadParamError(
            f"algo: expected 'auto', an algorithm family ({', '.join(ALGO_FAMILIES)}) or a "
            f"solver name, got {algo!r}"
        )
    if algo == "auto" or algo in ALGO_FAMILIES:
        return
    if algo not in registry.NAMES:
        raise BadParamError(
            f"algo: unknown solver {algo!r}, nor an algorithm family (families: "
            f"{', '.join(ALGO_FAMILIES)}); solvers: {', '.join(registry.NAMES)}"
        )
    solver_family = registry.get(algo).family
    if solver_family != family:
        raise BadParamError(f"algo: {algo} solves {solver_family}, not {family}")


def select(problem: Any, backend: Backend, algo: str = "auto") -> Choice:
    caps = capabilities(backend)
    check_algo(algo, family_of(problem))
    if algo in ALGO_FAMILIES:
        return _family_choice(algo, problem, caps)
    if algo != "auto":
        return _explicit(algo, problem, caps, None, "explicit")
    forced = settings.forced_solver()
    if forced is not None:
        return _explicit(forced[0], problem, caps, forced[1], "forced by CUDNNLITE_FORCE_SOLVER")
    db = database(caps.arch)
    found = db.lookup(problem.key())
    if found is not None:
        choice = from_entries(found[0], problem, caps, found[1])
        if choice is not None:
            return choice
    if settings.current().mode == "benchmark":
        from .tuner import tune_problem

        entries = tune_problem(problem, backend)
        choice = from_entries(entries, problem, caps, "tuned")
        if choice is not None:
            return choice
    return heuristic(problem, caps)
