"""Stand-in solvers for dispatcher tests: they compute with the float64 reference, so
the tests exercise selection, DB and plans without compiling kernels."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from cudnnlite.reference.conv import conv_forward
from cudnnlite.solvers.base import (
    APPLICABLE,
    Config,
    Runner,
    Solver,
    not_applicable,
)


@dataclass(frozen=True)
class TileConfig(Config):
    tile: int = 1

    def __post_init__(self) -> None:
        if self.tile not in (1, 2, 4):
            raise ValueError(f"tile must be 1, 2 or 4, got {self.tile}")


class _RefRunner(Runner):
    def __init__(self, name: str) -> None:
        self.name = name
        self.calls = 0

    def __call__(self, tensors: Any, epilogue: Any, workspace: Any) -> None:
        self.calls += 1
        p = self.problem
        y = conv_forward(tensors.x, tensors.w, p.pads, p.strides, p.dilations, p.groups,
                         p.channels_last)  # fmt: skip
        tensors.y[...] = epilogue.alpha * y

    @property
    def kernel_names(self) -> list[str]:
        return [self.name]


class _Fake(Solver):
    family = "conv_fwd"

    def module_specs(self) -> list:
        return []

    def prepare(self, backend: Any, problem: Any, config: Config) -> Runner:
        r = _RefRunner(self.name)
        r.problem = problem
        return r


class FakeA(_Fake):
    name = "fake_a"
    config_type = TileConfig

    def is_applicable(self, problem: Any, caps: Any) -> Any:
        return APPLICABLE

    def configs(self, problem: Any, caps: Any) -> list[Config]:
        return [TileConfig(1), TileConfig(2), TileConfig(4)]


class Fake3x3(_Fake):
    name = "fake_3x3"

    def is_applicable(self, problem: Any, caps: Any) -> Any:
        if problem.filter != (3, 3):
            return not_applicable("needs a 3x3 filter")
        return APPLICABLE


class FakeWorkspace(_Fake):
    name = "fake_ws"

    def is_applicable(self, problem: Any, caps: Any) -> Any:
        return APPLICABLE

    def workspace_size(self, problem: Any, config: Config) -> int:
        return 1 << 20


class FakeNondet(_Fake):
    name = "fake_nondet"
    deterministic = False

    def is_applicable(self, problem: Any, caps: Any) -> Any:
        return APPLICABLE


ENTRIES = (
    ("fake_a", "fake_solvers:FakeA"),
    ("fake_3x3", "fake_solvers:Fake3x3"),
    ("fake_ws", "fake_solvers:FakeWorkspace"),
    ("fake_nondet", "fake_solvers:FakeNondet"),
)


def problem_data(problem: Any, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return (
        rng.standard_normal(problem.x_shape()).astype(np.float32),
        rng.standard_normal(problem.w_shape()).astype(np.float32),
    )
