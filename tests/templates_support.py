"""Helpers of the launch-template tests (tests/test_templates_*.py): random operands, a
clean template store around each test (``fresh_templates``, autouse where a test file
imports it), a replay counter, and the check that a replay gives the op's own result bit
for bit."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from cudnnlite.ops import _fastpath
from cudnnlite.runtime import templates
from cudnnlite.testing import to_numpy


def rand(shape: tuple[int, ...], seed: int = 0, dtype: Any = np.float32) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


@pytest.fixture(autouse=True)
def fresh_templates() -> Any:
    _fastpath.clear_all()
    yield
    _fastpath.clear_all()


class Replays:
    """Counts template replays (Template.replay calls that launched)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.count = 0
        original = templates.Template.replay

        def counting(tmpl: templates.Template, *args: Any) -> Any:
            result = original(tmpl, *args)
            self.count += result is not None
            return result

        monkeypatch.setattr(templates.Template, "replay", counting)


def same_bits(a: Any, b: Any) -> None:
    if isinstance(a, tuple):
        assert isinstance(b, tuple) and len(a) == len(b)
        for x, y in zip(a, b, strict=True):
            same_bits(x, y)
        return
    if a is None or b is None:  # (an optional result: both must lack it)
        assert a is None and b is None
        return
    a, b = to_numpy(a), to_numpy(b)
    assert a.dtype == b.dtype and a.shape == b.shape and a.strides == b.strides
    assert a.tobytes() == b.tobytes()


def replays_like_the_op(
    replays: Replays, op: Callable[[Any], Any], inputs: list[Any], **how: Any
) -> None:
    """``op(inputs[0])`` records; each later input is a replay whose result must be the
    op's own, bit for bit, on that input (new data, new addresses)."""
    before = replays.count
    op(inputs[0])
    for i, x in enumerate(inputs[1:], 1):
        got = op(x)
        with templates.disabled():
            want = op(x)
        same_bits(got, want)
        assert replays.count == before + i, f"call {i} was not replayed ({how})"
