"""Differential test against PyTorch's own OpInfo sample inputs (issue 12).

Every op of ``torch.testing._internal.common_methods_invocations.op_db`` that maps to a
cudnnlite function runs its float32 and float64 samples through cudnnlite (NumPy arrays:
the emulator) and through PyTorch (CPU), forward, and backward where the sample needs a
gradient and cudnnlite has the backward; the results must agree at the dtype's tolerance.

A sample that differs on purpose matches one row of :data:`DIFFERENCES` (op, condition,
reason); such a sample is asserted to still differ, so the table stays true, and is
counted. ``test_opinfo_summary`` prints "N samples pass, M deliberate differences".
Ops with many samples (max pooling has hundreds of parameter combinations) are
subsampled deterministically: every k-th sample, at most :data:`MAX_SAMPLES` per op and
dtype (``CUDNNLITE_OPINFO_SAMPLES``; 0: all). Skipped without PyTorch (the ``interop``
extra) or its test helper expecttest.

Run it as a script (``python tests/test_opinfo_parity.py``) to print every sample's
outcome.
"""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
from opinfo_support import ADAPTERS, NotMapped, _grad_seed, _np, common, torch

from cudnnlite.errors import CudnnliteError

#: at most this many samples per op and dtype (every k-th of op_db's list);
#: CUDNNLITE_OPINFO_SAMPLES=0 runs every sample (6,924: about a minute on 2 cores)
MAX_SAMPLES = int(os.environ.get("CUDNNLITE_OPINFO_SAMPLES", "12")) or sys.maxsize
DTYPES = (torch.float32, torch.float64)
# PyTorch's own assert_close defaults are rtol 1.3e-6 / atol 1e-5 (fp32) and 1e-7 / 1e-7
# (fp64); both sides sum in different orders (conv: up to a few hundred products,
# norms: whole planes), so the bounds are a few units of those.
TOL = {torch.float32: (2e-5, 2e-5), torch.float64: (1e-10, 1e-10)}
# CTC's input gradient is exp(log_probs) - exp(log_alpha + log_beta - log_probs + nll):
# log-space sums over 50 steps of magnitude ~100 (an fp32 ulp there is ~1e-5) whose
# difference is exponentiated; both sides' fp32 answers are ~1e-4 from float64's.
# Attention: op_db's tensors reach +-9, so logits q.k * scale reach ~230 where an fp32
# ulp is ~1.5e-5; exp turns that into relative errors of the probabilities, and each
# side's fp32 gradients land up to ~2e-5 from float64's (measured: cudnnlite 2.0e-5,
# PyTorch 1.4e-5 on one sample with PyTorch 2.13), so the two may differ by twice that.
TOL_OVERRIDES = {
    ("nn.functional.ctc_loss", torch.float32): (3e-4, 3e-4),
    ("nn.functional.scaled_dot_product_attention", torch.float32): (5e-5, 5e-5),
}


# ------------------------------------------------------------------ deliberate differences


def _kw(s: Any, name: str, pos: int | None = None, default: Any = None) -> Any:
    if name in s.kwargs:
        return s.kwargs[name]
    if pos is not None and len(s.args) > pos:
        return s.args[pos]
    return default


@dataclass(frozen=True)
class Difference:
    op: str
    applies: Callable[[Any], bool]
    reason: str


#: Every sample that differs from PyTorch on purpose: (op, condition on the sample, why).
#: A sample matching a row must still differ (raise a cudnnlite error or disagree).
_NORMS_WITH_EPS = ("nn.functional.layer_norm", "nn.functional.rms_norm",
                   "nn.functional.group_norm", "nn.functional.batch_norm",
                   "nn.functional.instance_norm")  # fmt: skip
_NEGATIVE_EPS = (
    "a negative eps is refused (BadParamError naming eps): cuDNN's normalizations "
    "require eps >= 0, and x - mean over sqrt(var + eps) with eps < 0 is NaN or inf for a "
    "constant group; op_db samples eps=-0.5 only to exercise argument plumbing"
)

_MOMENTUM = (
    "a momentum outside [0, 1] is refused when running statistics are updated (cuDNN's "
    "exponentialAverageFactor); PyTorch accepts any number, e.g. op_db's momentum=-1.0"
)

DIFFERENCES: tuple[Difference, ...] = (
    *(
        Difference(op, lambda s: (_kw(s, "eps") or 0) < 0, _NEGATIVE_EPS) for op in _NORMS_WITH_EPS
    ),  # fmt: skip
    Difference(
        "nn.functional.batch_norm",
        lambda s: bool(_kw(s, "training", 5, False)) and not 0 <= _kw(s, "momentum", 6, 0.1) <= 1,
        _MOMENTUM,
    ),
    Difference(
        "nn.functional.instance_norm",
        lambda s: (
            _kw(s, "running_mean", 0) is not None
            and bool(_kw(s, "use_input_stats", 5, True))
            and not 0 <= _kw(s, "momentum", 6, 0.1) <= 1
        ),
        _MOMENTUM,
    ),
    Difference(
        "nn.functional.batch_norm",
        lambda s: s.input.dim() < 2,
        "batch_norm needs x of at least 2 dims (N, C, ...): op_db's empty 1-d input (0,) "
        "with zero-length statistics, which PyTorch accepts, is refused by name",
    ),
    Difference(
        "nn.functional.dropout",
        lambda s: bool(_kw(s, "training", 1, True)) and 0 < _kw(s, "p", 0, 0.5) < 1,
        "dropout's mask comes from cudnnlite's own Philox stream (seed, offset), not "
        "PyTorch's generator: the kept elements differ (tests/test_dropout*.py check the "
        "keep rate and scaling instead)",
    ),
)


DIFFERENCES += (
    Difference(
        "nn.functional.hardsigmoid",
        lambda s: s.input.dtype == torch.float64 and bool(((s.input > -3) & (s.input < 3)).any()),
        "float64 hardsigmoid backward: PyTorch's CPU kernel multiplies by 1.0f / 6.0f, "
        "float32's 1/6 (3e-8 relative off) even for double; cudnnlite's 1/6 is double's "
        "(its forward, and PyTorch's, are exact)",
    ),
    Difference(
        "nn.functional.scaled_dot_product_attention",
        lambda s: _kw(s, "dropout_p", 3, 0.0) > 0,
        "attention dropout draws its mask from cudnnlite's Philox stream (seed, offset), "
        "not PyTorch's generator (tests/test_attention*.py check it against the reference "
        "with the same mask)",
    ),
)


def _difference(op: str, sample: Any) -> Difference | None:
    for d in DIFFERENCES:
        if d.op == op and d.applies(sample):
            return d
    return None


# ------------------------------------------------------------------ running one sample


def _op_entries() -> dict[str, Any]:
    out = {}
    for op in common.op_db:
        full = op.name + (f".{op.variant_test_name}" if op.variant_test_name else "")
        if full in ADAPTERS:
            out[full] = op
    return out


OPS = _op_entries()


def samples(name: str, dtype: Any) -> tuple[list[Any], int]:
    """(the chosen samples, how many op_db has) of op ``name`` for ``dtype``."""
    op = OPS[name]
    torch.manual_seed(0)  # op_db draws its tensors from the global generator
    every = list(op.sample_inputs("cpu", dtype, requires_grad=op.supports_autograd))
    step = max(1, math.ceil(len(every) / MAX_SAMPLES))
    return every[::step], len(every)


def _tensors_out(r: Any) -> list[Any]:
    if isinstance(r, (tuple, list)):
        return [a for a in r if isinstance(a, torch.Tensor)]
    return [r]


def _compare(name: str, got: Any, want: torch.Tensor, tol: tuple[float, float]) -> None:
    got = np.asarray(got)
    if tuple(got.shape) != tuple(want.shape):
        raise AssertionError(f"{name}: shape {got.shape}, PyTorch {tuple(want.shape)}")
    w = want.detach().numpy()
    if w.dtype.kind in "iub":
        np.testing.assert_array_equal(got, w, err_msg=name)
        return
    rtol, atol = tol
    np.testing.assert_allclose(got, w, rtol=rtol, atol=atol, equal_nan=True, err_msg=name)


def _differentiable(sample: Any) -> dict[str, torch.Tensor]:
    named = {"input": sample.input}
    for i, a in enumerate(sample.args):
        named[f"args.{i}"] = a
    named.update({f"kwargs.{k}": v for k, v in sample.kwargs.items()})
    return {k: v for k, v in named.items()
            if isinstance(v, torch.Tensor) and v.requires_grad}  # fmt: skip


# PyTorch's names for an adapter's weight / bias gradients: the arguments' positions
# after the input (convolutions: weight, bias; the normalizations put theirs later)
_PARAM_POSITIONS = {
    "nn.functional.layer_norm": (1, 2),
    "nn.functional.rms_norm": (1, None),
    "nn.functional.group_norm": (1, 2),
    "nn.functional.batch_norm": (2, 3),
    "nn.functional.instance_norm": (2, 3),
}


def _aliases(op: str, key: str) -> tuple[str, ...]:
    if key not in ("weight", "bias"):
        return (key,)
    pos = _PARAM_POSITIONS.get(op, (0, 1))[key == "bias"]
    return (f"kwargs.{key}",) + (() if pos is None else (f"args.{pos}",))


def run_sample(name: str, sample: Any, dtype: Any) -> str:
    """Runs one sample: "pass", or raises (an assertion or cudnnlite's error)."""
    op = OPS[name]
    fwd, bwd = ADAPTERS[name]
    tol = TOL_OVERRIDES.get((name, dtype), TOL[dtype])
    x, args, kwargs = _np(sample.input), _np(sample.args), _np(sample.kwargs)
    with torch.no_grad():
        want = op(sample.input, *sample.args, **sample.kwargs)
    got = fwd(x, *args, **kwargs)
    wants, gots = _tensors_out(want), (list(got) if isinstance(got, tuple) else [got])
    if len(wants) != len(gots):
        raise AssertionError(f"forward: {len(gots)} outputs, PyTorch {len(wants)}")
    for i, (g, w) in enumerate(zip(gots, wants, strict=True)):
        _compare(f"forward output {i}", g, w, tol)
    if name == "nn.functional.batch_norm":  # the running statistics, updated in place
        for i, a in enumerate(args):
            if isinstance(a, np.ndarray) and a.ndim == 1:
                _compare(f"running statistic args.{i}", a, sample.args[i], tol)
    diff_in = _differentiable(sample)
    if bwd is None or not diff_in or not op.supports_autograd:
        return "pass"
    out = op(sample.input, *sample.args, **sample.kwargs)
    out0 = _tensors_out(out)[0]
    if not out0.requires_grad or not out0.dtype.is_floating_point:
        return "pass"
    dy = _grad_seed(out0, 0)
    grads = torch.autograd.grad(out0, list(diff_in.values()), dy, allow_unused=True)
    grads = dict(zip(diff_in, grads, strict=True))
    mine = bwd(_np(dy), x, *args, **kwargs)
    for key, g in mine.items():
        for alias in _aliases(name, key):
            if alias in grads and grads[alias] is not None:
                _compare(f"gradient of {alias}", g, grads[alias], tol)
    return "pass"


def outcome(name: str, sample: Any, dtype: Any) -> tuple[str, str]:
    """("pass" | "differs" | "not mapped" | "FAIL", detail)."""
    diff = _difference(name, sample)
    try:
        run_sample(name, sample, dtype)
    except NotMapped as exc:
        return "not mapped", str(exc)
    except (AssertionError, CudnnliteError) as exc:
        if diff is not None:
            return "differs", diff.reason
        return "FAIL", f"{type(exc).__name__}: {str(exc)[:400]}"
    if diff is not None:
        return "FAIL", f"listed as a deliberate difference but agrees: {diff.reason}"
    return "pass", ""


def _describe(sample: Any) -> str:
    def d(v: Any) -> Any:
        return tuple(v.shape) if isinstance(v, torch.Tensor) else v

    return f"input {d(sample.input)} args {[d(a) for a in sample.args]} " \
           f"kwargs { {k: d(v) for k, v in sample.kwargs.items()} }"  # fmt: skip


# ------------------------------------------------------------------ tests

_TALLY: dict[str, dict[str, int]] = {}
_DIFFERING: dict[tuple[str, str], int] = {}  # (op, reason) -> samples


@pytest.mark.parametrize("dtype", DTYPES, ids=["fp32", "fp64"])
@pytest.mark.parametrize("name", sorted(ADAPTERS))
def test_opinfo_samples(name: str, dtype: Any) -> None:
    if name not in OPS:
        pytest.skip(f"{name} is not in this PyTorch's op_db")
    chosen, total = samples(name, dtype)
    tally = _TALLY.setdefault(f"{name} {dtype}", {"of": total, "run": len(chosen)})
    failures = []
    for i, sample in enumerate(chosen):
        status, detail = outcome(name, sample, dtype)
        tally[status] = tally.get(status, 0) + 1
        if status == "differs":
            _DIFFERING[name, detail] = _DIFFERING.get((name, detail), 0) + 1
        if status == "FAIL":
            failures.append(f"sample {i} ({_describe(sample)}): {detail}")
    assert not failures, "\n".join(failures)


def test_opinfo_summary() -> None:
    """Prints the counts the README quotes (after the sample tests in this process)."""
    if not _TALLY:
        pytest.skip("no sample test ran in this process")
    total = {k: sum(t.get(k, 0) for t in _TALLY.values()) for k in
             ("pass", "differs", "not mapped", "FAIL", "run", "of")}  # fmt: skip
    print(
        f"\nOpInfo parity: {total['pass']} samples pass, {total['differs']} deliberate "
        f"differences, {total['not mapped']} not mapped, {total['FAIL']} failures "
        f"({total['run']} run of op_db's {total['of']}, {len(_TALLY)} op/dtype pairs)"
    )
    for (op, reason), count in sorted(_DIFFERING.items()):
        print(f"  differs: {op} ({count} samples): {reason}")
    assert total["pass"] > 0


def test_difference_table_is_used() -> None:
    """Every row of the table names a mapped op (a stale row is an error)."""
    for d in DIFFERENCES:
        assert d.op in ADAPTERS, d


if __name__ == "__main__":  # pragma: no cover - exploration aid
    import time

    names = sys.argv[1:] or sorted(ADAPTERS)
    counts: dict[str, int] = {}
    for name in names:
        if name not in OPS:
            print(f"{name}: not in op_db")
            continue
        for dtype in DTYPES:
            t0 = time.perf_counter()
            chosen, total = samples(name, dtype)
            line = {}
            for i, sample in enumerate(chosen):
                status, detail = outcome(name, sample, dtype)
                line[status] = line.get(status, 0) + 1
                counts[status] = counts.get(status, 0) + 1
                if status in ("FAIL", "not mapped"):
                    print(f"  {name} {dtype} #{i} {status}: {_describe(sample)}\n      {detail}")
            print(f"{name} {dtype}: {len(chosen)}/{total} {line} {time.perf_counter() - t0:.2f}s")
    print(counts)
