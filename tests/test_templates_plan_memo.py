"""A plan's template memo: a plan's repeated calls replay without building a call key, on
the op's own result, and give way to whatever changed (operands, switches, settings)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pytest
from templates_support import (
    Replays,
    fresh_templates,  # noqa: F401 (autouse: a clean store)
    rand,
    same_bits,
)

import cudnnlite as cl
from cudnnlite.errors import BadParamError
from cudnnlite.runtime import templates
from cudnnlite.testing import to_backend

# ------------------------------------------------------------------ a plan's memo


class KeyCount:
    """Counts the call keys templates.call builds (a plan's memo builds none)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.count = 0
        original = templates.call_key

        def counting(*args: Any) -> Any:
            self.count += 1
            return original(*args)

        monkeypatch.setattr(templates, "call_key", counting)


def memo_plans(backend: str) -> list[tuple[Any, Callable[[int], tuple]]]:
    """Plans of three families, each with a maker of its arguments (new data per seed)."""
    b = functools.partial(to_backend, backend=backend)
    shape, w = (2, 4, 6, 6), b(rand((4, 4, 3, 3), 9))
    stats = [b(rand((4,), s)) for s in range(4)]
    stats[1] = stats[1] * stats[1] + 0.5  # (a variance)
    name = "cuda" if backend == "cuda" else "cpu"
    return [
        (cl.conv2d_plan(shape, w.shape, padding=1, backend=name),
         lambda s: (b(rand(shape, s)), w)),
        (cl.activation_plan(shape, "sigmoid", backend=name), lambda s: (b(rand(shape, s)),)),
        (cl.batch_norm_inference_plan(shape, backend=name),
         lambda s: (b(rand(shape, s)), *stats)),
    ]  # fmt: skip


# How a memo replays: checked against the op (CUDNNLITE_TEMPLATE_CHECK, the test suite's
# default), Template.replay (unchecked, the emulator's poison on: the suite's default
# too), or check and plain replay in one function (Template.host_replay: as a user runs).
MODES = {"checked": {}, "poisoned": {"CUDNNLITE_TEMPLATE_CHECK": None},
         "plain": {"CUDNNLITE_TEMPLATE_CHECK": None, "CUDNNLITE_EMU_POISON": None}}  # fmt: skip


def _mode(monkeypatch: pytest.MonkeyPatch, mode: str) -> None:
    for name in MODES[mode]:
        monkeypatch.delenv(name, raising=False)


@pytest.mark.parametrize("mode", list(MODES))
def test_a_plans_repeats_replay_through_its_memo(
    backend: str, mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """From a plan's third call on (a record, then a replay that leaves the memo), no call
    key is built, and every result is the op's own bit for bit on new data, in each way
    a memo replays (:data:`MODES`)."""
    _mode(monkeypatch, mode)
    keys = KeyCount(monkeypatch)
    replays = Replays(monkeypatch)
    for plan, make in memo_plans(backend):
        before = keys.count
        for seed in range(5):
            args = make(seed)
            got = plan(*args)
            with templates.disabled():
                same_bits(got, plan(*args))
        assert keys.count == before + 2, plan
        assert plan._template_memo is not None
    if backend == "cpu":
        plain = [t for t in templates._cache.values()
                 if isinstance(t, templates.Template) and t.plain]  # fmt: skip
        assert bool(plain) == (mode == "plain"), "the plain replay where it applies only"
        if mode != "plain":  # (Template.replay: counted)
            assert replays.count >= 3 * 4


@pytest.mark.parametrize("mode", list(MODES))
def test_a_plans_memo_gives_way_to_whatever_changed(
    mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another layout, alignment, writability, dtype or shape, a switch, a setting, a
    cleared store, a disabled() block: each call takes the usual path (a key is built)
    and gives the op's result or its error, inputs untouched."""
    _mode(monkeypatch, mode)
    keys = KeyCount(monkeypatch)
    shape = (2, 3, 5, 5)
    plan = cl.activation_plan(shape, "relu", backend="cpu")
    x = rand(shape, 1)
    plan(x), plan(x)
    before = keys.count
    plan(x)
    assert keys.count == before

    def usual(arg: np.ndarray) -> None:
        n = keys.count
        same_bits(plan(arg), np.maximum(arg, 0))
        assert keys.count > n, "the memo answered a call it cannot vouch for"

    usual(rand((2, 3, 5, 10), 2)[..., ::2])  # strided
    flat = rand((x.size + 1,), 3)
    usual(flat[1:].reshape(shape))  # off 16 bytes
    read_only = rand(shape, 4)
    read_only.setflags(write=False)
    usual(read_only)
    for bad in (x.astype(np.float64), rand((2, 3, 5, 4), 5)):
        kept = bad.copy()
        with pytest.raises(BadParamError, match="x: this activation plan is for"):
            plan(bad)
        same_bits(bad, kept)
    monkeypatch.setenv("CUDNNLITE_EMU_SEED", "3")
    usual(x)
    monkeypatch.delenv("CUDNNLITE_EMU_SEED")
    plan(x)  # (the memo of the key without the switch again)
    cl.set_deterministic(True)
    try:
        usual(x)
    finally:
        cl.set_deterministic(False)
    plan(x)
    templates.clear()
    usual(x)
    plan(x)
    replays = Replays(monkeypatch)
    with templates.disabled():  # (no template at all: not even a key)
        same_bits(plan(x), np.maximum(x, 0))
    assert replays.count == 0


@pytest.mark.parametrize("mode", list(MODES))
def test_a_plans_memo_checks_every_operand(mode: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A plan of several arrays: a change in a later one (batch norm's statistics and
    parameters: layout, alignment, writability, dtype; a conv plan's w: layout) misses
    the memo as a change in x does, and the call gives the op's own result or error."""
    _mode(monkeypatch, mode)
    keys = KeyCount(monkeypatch)
    shape, c = (2, 4, 5, 5), 4
    plan = cl.batch_norm_inference_plan(shape, backend="cpu")
    x = rand(shape, 1)
    stats = [rand((c,), s) for s in range(4)]
    stats[1] = stats[1] * stats[1] + 0.5  # (a variance)
    plan(x, *stats), plan(x, *stats)
    before = keys.count
    expected = plan(x, *stats)
    assert keys.count == before

    def usual(i: int, arg: np.ndarray) -> None:
        n = keys.count
        changed = [*stats[:i], arg, *stats[i + 1 :]]
        same_bits(plan(x, *changed), expected)
        assert keys.count > n, f"the memo answered for a changed operand {i + 1}"

    for i in range(4):
        usual(i, np.repeat(stats[i], 2)[::2])  # strided
        flat = np.empty(c + 1, np.float32)
        flat[1:] = stats[i]
        usual(i, flat[1:])  # off 16 bytes
        read_only = stats[i].copy()
        read_only.setflags(write=False)
        usual(i, read_only)
    n = keys.count
    with pytest.raises(BadParamError, match="bias"):
        plan(x, *stats[:3], stats[3].astype(np.float64))
    assert keys.count > n
    w = rand((4, 4, 3, 3), 9)
    conv = cl.conv2d_plan(shape, w.shape, padding=1, backend="cpu")
    conv(x, w), conv(x, w)
    n = keys.count
    w_t = np.ascontiguousarray(w.transpose(1, 0, 2, 3)).transpose(1, 0, 2, 3)
    same_bits(conv(x, w_t), conv(x, w))
    assert keys.count > n, "the memo answered for another layout of w"


def test_a_plan_keeps_two_memos(monkeypatch: pytest.MonkeyPatch) -> None:
    """Calls alternating between two alignments replay through the plan's two memos (no
    key after the first calls of each); a third alignment replaces the older one."""
    keys = KeyCount(monkeypatch)
    shape = (2, 3, 4, 4)
    plan = cl.activation_plan(shape, "relu", backend="cpu")
    flat = rand((np.prod(shape) + 2,), 1)
    views = [rand(shape, 2), flat[1:-1].reshape(shape), flat[2:].reshape(shape)]
    for v in views[:2]:
        plan(v), plan(v)
    before = keys.count
    for _ in range(3):
        for v in views[:2]:
            same_bits(plan(v), np.maximum(v, 0))
    assert keys.count == before
    plan(views[2]), plan(views[2])  # (a record, then a replay that leaves its memo)
    before = keys.count
    same_bits(plan(views[2]), np.maximum(views[2], 0))
    same_bits(plan(views[1]), np.maximum(views[1], 0))  # (the older of the two kept)
    assert keys.count == before
    same_bits(plan(views[0]), np.maximum(views[0], 0))  # (dropped: the usual path)
    assert keys.count == before + 1


def test_a_plans_memo_does_not_skip_a_graph_capture() -> None:
    shape = (2, 3, 4, 4)
    plan = cl.activation_plan(shape, "relu", backend="cpu")
    x = rand(shape, 1)
    plan(x), plan(x), plan(x)
    assert plan._template_memo is not None
    with cl.graph("cpu") as g:
        y = plan(x)
    assert len(g) == 1
    x[...] = rand(shape, 2)
    g.replay()
    same_bits(y, np.maximum(x, 0))


def test_eight_threads_share_a_plans_memo() -> None:
    shape = (1, 4, 6, 6)
    plans = [cl.activation_plan(shape, "relu", backend="cpu"),
             cl.conv2d_plan(shape, (4, 4, 3, 3), padding=1, backend="cpu")]  # fmt: skip
    w = rand((4, 4, 3, 3), 9)
    inputs = [rand(shape, s) for s in range(8)]
    with templates.disabled():
        want = [(plans[0](x), plans[1](x, w)) for x in inputs]

    def work(i: int) -> None:
        for _ in range(12):
            same_bits(plans[0](inputs[i]), want[i][0])
            same_bits(plans[1](inputs[i], w), want[i][1])

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(work, range(8)))
    assert all(p._template_memo is not None for p in plans)
