"""``cudnnlite.explain(problem)``: every solver of the family, applicable or not and
why, what the tuning DB holds for the problem, what the heuristics rank, and which
one a call would take — as a text table (``str()``) and HTML for Jupyter."""

from __future__ import annotations

import html
from dataclasses import dataclass, field
from typing import Any

from ..errors import BadParamError, CudnnliteError
from ..problems import is_problem, parse_key
from ..runtime.backend import Backend
from ..runtime.caps import capabilities
from ..runtime.select import backend_by_name
from . import registry
from .heuristics import RANKINGS
from .select import family_of, select, usable
from .tuning_db import database


@dataclass
class SolverRow:
    name: str
    applicable: bool
    reason: str
    workspace: int | None
    heuristic_rank: int | None
    db_time_us: float | None
    db_source: str | None
    chosen: bool = False


@dataclass
class Explanation:
    problem: Any
    backend: str
    arch: str
    choice: str | None
    source: str | None
    error: str | None
    rows: list[SolverRow] = field(default_factory=list)

    def __str__(self) -> str:
        lines = [f"problem: {self.problem.key()}", f"backend: {self.backend} ({self.arch})"]
        if self.choice:
            lines.append(f"choice:  {self.choice} (from {self.source})")
        else:
            lines.append(f"choice:  none: {self.error}")
        head = (
            f"  {'solver':<34} {'applies':<7} {'rank':>4} {'DB time':>10} {'workspace':>10}  note"
        )
        lines += ["", head]
        for r in self.rows:
            mark = "*" if r.chosen else " "
            rank = "-" if r.heuristic_rank is None else str(r.heuristic_rank)
            t = "-" if r.db_time_us is None else f"{r.db_time_us:.1f} us"
            ws = "-" if r.workspace is None else str(r.workspace)
            note = r.reason if not r.applicable else (r.db_source or "")
            lines.append(
                f"{mark} {r.name:<34} {'yes' if r.applicable else 'no':<7} {rank:>4} {t:>10} "
                f"{ws:>10}  {note}"
            )
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        e = html.escape
        rows = []
        for r in self.rows:
            style = ' style="font-weight:bold"' if r.chosen else ""
            rows.append(
                f"<tr{style}><td>{e(r.name)}</td><td>{'yes' if r.applicable else 'no'}</td>"
                f"<td>{'' if r.heuristic_rank is None else r.heuristic_rank}</td>"
                f"<td>{'' if r.db_time_us is None else f'{r.db_time_us:.1f} us'}</td>"
                f"<td>{'' if r.workspace is None else r.workspace}</td>"
                f"<td>{e(r.reason if not r.applicable else (r.db_source or ''))}</td></tr>"
            )
        choice = (
            f"{e(self.choice)} <i>(from {e(self.source or '')})</i>"
            if self.choice
            else f"none: {e(self.error or '')}"
        )
        return (
            f"<div><code>{e(self.problem.key())}</code> on {e(self.backend)} ({e(self.arch)})"
            f"<br>choice: {choice}<table><tr><th>solver</th><th>applies</th><th>heuristic rank</th>"
            f"<th>DB time</th><th>workspace</th><th>note</th></tr>{''.join(rows)}</table></div>"
        )


def explain(
    problem: Any, backend: str | Backend = "cpu", algo: str = "auto"
) -> Explanation:
    """Explains the dispatch of ``problem`` (a problem of any family, e.g. a ConvProblem
    or an AttentionProblem, or its key) on ``backend`` ("cpu" for the emulator, "cuda");
    lists every registered solver of the family."""
    if isinstance(problem, str):
        problem = parse_key(problem)
    if not is_problem(problem):
        raise BadParamError(
            f"problem: expected a problem (ConvProblem, AttentionProblem) or its key, got "
            f"{type(problem).__name__}"
        )
    b = backend if isinstance(backend, Backend) else backend_by_name(backend)
    caps = capabilities(b)
    family = family_of(problem)
    ranking = RANKINGS[family](problem, caps)
    found = database(caps.arch).lookup(problem.key())
    db_times: dict[str, tuple[float | None, str]] = {}
    if found:
        for entry in found[0]:
            db_times.setdefault(entry.solver, (entry.time_us, found[1]))
    try:
        choice = select(problem, b, algo)
        chosen, source, error = choice.solver.name, choice.source, None
    except BadParamError:
        raise  # an unknown algo (or a solver of another family) is the caller's mistake
    except CudnnliteError as exc:  # nothing the choice allows can run it: explained
        chosen, source, error = None, None, str(exc)
    out = Explanation(problem, b.name, caps.arch, chosen, source, error)
    for name in registry.NAMES:
        try:
            solver = registry.get(name)
        except CudnnliteError as exc:
            if name.startswith(family + "_"):
                out.rows.append(SolverRow(name, False, str(exc), None, None, None, None))
            continue
        if solver.family != family:
            continue
        app = usable(solver, problem, caps)
        ws = solver.workspace_size(problem, solver.default_config(problem, caps)) if app else None
        t, src = db_times.get(name, (None, None))
        rank = ranking.index(name) + 1 if name in ranking else None
        out.rows.append(SolverRow(name, bool(app), app.reason, ws, rank, t, src, name == chosen))
    return out


def explain_call(x: Any, w: Any, **conv_args: Any) -> Explanation:
    """Explains what ``conv1d/conv2d/conv3d(x, w, **conv_args)`` would run (the rank of x
    says which)."""
    import inspect

    from ..ops._arrays import as_array
    from ..ops.conv import conv2d
    from ..ops.conv_args import make_problem
    from ..runtime.select import backend_for

    b = backend_for(x, w, names=("x", "w"))
    x, w = as_array("x", x), as_array("w", w)
    keys = ("stride", "padding", "dilation", "groups", "layout")
    # conv2d's other arguments (bias, the epilogue, out, stream) do not change the choice
    known = set(inspect.signature(conv2d).parameters) - {"x", "w"}
    unknown = sorted(set(conv_args) - known)
    if unknown:
        raise BadParamError(f"conv_args: unknown arguments {unknown}; conv2d takes "
                            f"{sorted(known)}")  # fmt: skip
    nd = len(x.shape) - 2
    kwargs = {"layout": {1: "NCW", 3: "NCDHW"}.get(nd, "NCHW")}
    kwargs.update({k: conv_args[k] for k in keys if k in conv_args})
    problem = make_problem(x.shape, w.shape, x.dtype, math_mode=conv_args.get("math", "default"),
                           nd=nd, **kwargs)  # fmt: skip
    return explain(problem, b, conv_args.get("algo", "auto"))
