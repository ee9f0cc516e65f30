"""Calls a launch template could not reproduce are refused and say why; the checked mode
catches a template that skips host work; the switches turn templates off; poisoned
replays still give the op's result."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from templates_support import (
    Replays,
    fresh_templates,  # noqa: F401 (autouse: a clean store)
    rand,
    replays_like_the_op,
    same_bits,
)

import cudnnlite as cl
from cudnnlite.dispatch import plans, tuning_db
from cudnnlite.errors import ExecutionError
from cudnnlite.ops import _fastpath
from cudnnlite.runtime import graph, templates

# ------------------------------------------------------------------ refusals


def test_calls_a_replay_cannot_reproduce_are_refused() -> None:
    x = rand((2, 3, 8, 8), 1)
    w = rand((3, 3, 3, 3), 2)
    cl.relu(np.empty((0, 4), np.float32))
    entry = templates.lookup(cl.relu, (np.empty((0, 4), np.float32),), {})
    assert type(entry) is templates.Refused and "no kernel" in entry.reason
    # the weights are a view into the input's memory: the recording cannot tell which
    # array a pointer belongs to
    both = np.concatenate([x.reshape(-1), w.reshape(-1)])
    overlapping = (both[: x.size].reshape(x.shape), both[4 : 4 + w.size].reshape(w.shape))
    for _ in range(3):
        y = cl.conv2d(*overlapping, padding=1)
        with templates.disabled():
            same_bits(y, cl.conv2d(*overlapping, padding=1))
    entry = templates.lookup(cl.conv2d, overlapping, {"padding": 1})
    assert type(entry) is templates.Refused and "overlap" in entry.reason and entry.final


def test_an_output_that_is_part_of_a_larger_buffer_is_refused() -> None:
    """A replay allocates only the returned array's layout; an op that wrote a larger
    buffer and returned part of it must keep running its own code."""

    def sliced(x: np.ndarray) -> np.ndarray:
        buf = np.empty(x.size + 16, x.dtype)
        return cl.relu(x.reshape(-1), out=buf[: x.size])

    x = rand((3, 4), 1)
    for _ in range(3):
        same_bits(templates.call(sliced, sliced, (x,), {}), np.maximum(x, 0).reshape(-1))
    entry = templates.lookup(sliced, (x,), {})
    assert type(entry) is templates.Refused and "larger allocation" in entry.reason


class Counted:
    """An op for templates.call: relu, with host work on the calls ``busy`` names."""

    def __init__(self, busy: Callable[[int], bool]) -> None:
        self.calls = 0
        self.busy = busy

    def __call__(self, x: np.ndarray) -> Any:
        self.calls += 1
        if self.busy(self.calls):
            graph.note_host_work("a warm-up")
        return cl.relu(x)


def test_the_check_catches_a_template_that_skips_unreported_host_work(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An op breaking graph_safe's contract (NumPy work on the data, not reported) records
    a template that replays stale data; CUDNNLITE_TEMPLATE_CHECK=1 (the test suite's
    setting) compares every replay with the op's own call and says so."""

    def doubled_relu(x: np.ndarray) -> np.ndarray:
        return cl.relu(x * 2)  # x * 2: host work on the data, unreported

    x1, x2 = rand((3, 4), 1), rand((3, 4), 2)
    monkeypatch.setenv("CUDNNLITE_TEMPLATE_CHECK", "0")
    templates.call(doubled_relu, doubled_relu, (x1,), {})
    stale = templates.call(doubled_relu, doubled_relu, (x2,), {})
    same_bits(stale, np.maximum(x1 * 2, 0))  # what an unchecked replay gives: x1's result
    monkeypatch.setenv("CUDNNLITE_TEMPLATE_CHECK", "1")
    templates.call(doubled_relu, doubled_relu, (x1,), {})  # (a new key: the switch changed)
    with pytest.raises(ExecutionError, match="launch template of .*doubled_relu: its replay"):
        templates.call(doubled_relu, doubled_relu, (x2,), {})


def test_a_call_that_tunes_is_not_templated_its_next_call_is(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """In benchmark mode a key's first call times every solver: none of those launches
    may end up in a template (its replays would run them all)."""
    monkeypatch.setenv("CUDNNLITE_TUNING_DIR", str(tmp_path))  # an empty user DB
    tuning_db.forget_databases()
    plans.clear_plan_cache()
    monkeypatch.setattr(tuning_db, "shipped_path", lambda arch: None)
    replays = Replays(monkeypatch)
    xs = [rand((1, 6, 9, 9), s) for s in (1, 2, 3)]
    w = rand((6, 6, 3, 3), 4)
    try:
        with cl.settings(mode="benchmark"):
            cl.conv2d(xs[0], w, padding=1)
            entry = templates.lookup(cl.conv2d, (xs[0], w), {"padding": 1})
            assert type(entry) is templates.Refused and "tuning" in entry.reason
            replays_like_the_op(replays, lambda x: cl.conv2d(x, w, padding=1), xs[1:])
            assert len(templates.lookup(cl.conv2d, (xs[0], w), {"padding": 1})) == 1
    finally:  # later tests read the DBs their own settings name
        tuning_db.forget_databases()
        plans.clear_plan_cache()


def test_a_first_refusal_is_recorded_again_a_second_is_kept(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("CUDNNLITE_TEMPLATE_CHECK", "0")  # (its checks would call ops again)
    xs = [rand((3, 4), s) for s in range(4)]
    once = Counted(lambda n: n == 1)  # e.g. a tuning run with temporaries on the first call
    for x in xs:
        same_bits(templates.call(once, once, (x,), {}), np.maximum(x, 0))
    assert once.calls == 2  # recorded, recorded again, then replayed
    assert type(templates.lookup(once, (xs[0],), {})) is templates.Template

    always = Counted(lambda n: True)
    for x in xs:
        same_bits(templates.call(always, always, (x,), {}), np.maximum(x, 0))
    assert always.calls == len(xs)
    entry = templates.lookup(always, (xs[0],), {})
    assert type(entry) is templates.Refused and entry.final and "warm-up" in entry.reason


def test_switches_turn_templates_off(monkeypatch: pytest.MonkeyPatch) -> None:
    replays = Replays(monkeypatch)
    x = rand((3, 4), 1)
    with templates.disabled():
        cl.relu(x), cl.relu(x)
    assert templates.lookup(cl.relu, (x,), {}) is None
    templates.set_enabled(False)
    try:
        cl.relu(x), cl.relu(x)
        assert templates.lookup(cl.relu, (x,), {}) is None
    finally:
        templates.set_enabled(True)
    cl.relu(x), cl.relu(x)
    assert replays.count == 1
    # the public switches: both fast paths (templates and the ops' caches)
    cl.set_fast_paths(False)
    try:
        assert not templates.enabled() and not _fastpath.enabled()
        assert templates.lookup(cl.relu, (x,), {}) is None  # (and the store was cleared)
    finally:
        cl.set_fast_paths(True)
    with cl.fast_paths_off():
        assert not templates.enabled() and not _fastpath.enabled()
    assert templates.enabled() and _fastpath.enabled()


def test_poisoned_replays_still_give_the_ops_result(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDNNLITE_EMU_POISON", "1")
    replays = Replays(monkeypatch)
    x = rand((2, 3, 8, 8), 1)
    cl.max_pool2d(x, 2)
    entry = templates.lookup(cl.max_pool2d, (x, 2), {})
    assert type(entry) is templates.Template and entry.poison
    replays_like_the_op(replays, lambda a: cl.avg_pool2d(a, 3, 1, 1), [x, rand(x.shape, 2)])
    # 0-d outputs too (a 0-d array's value is keyed: the same value, in new arrays)
    scalars = [np.array(v, np.float32) for v in (np.nan, np.nan, np.nan)]
    replays_like_the_op(replays, cl.softmax, scalars)
