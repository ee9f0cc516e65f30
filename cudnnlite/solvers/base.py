"""The solver interface: one stateless class per algorithm (MIOpen's model).

A solver answers, for a problem:

- ``is_applicable(problem, caps)`` -> Applicability: flat early returns, each with a
  reason ("needs a 3x3 filter"); ``explain()`` shows these to users;
- ``configs(problem, caps)``: its tunable space (frozen dataclasses validated in
  ``__post_init__``), pruned to what is worth timing; ``default_config(problem, caps)``;
- ``config_from_dict(d)`` / ``Config.to_dict()``: the tuning DB's representation;
  ``is_valid(config, problem, caps)`` guards what is read back from a DB;
- ``workspace_size(problem, config)`` in bytes;
- ``module_specs(dtype)``: every kernel module it can generate (the NVRTC check);
- ``prepare(backend, problem, config)`` -> a Runner holding the compiled kernels:
  ``runner(tensors, epilogue, workspace)`` only launches. Plans keep the runner.

``name`` is stable: the tuning DB stores it; the registry is append-only.
``deterministic``: bitwise reproducible from run to run (no atomics races).
"""

from __future__ import annotations

import abc
import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from ..runtime.backend import Backend
from ..runtime.caps import Capabilities
from ..runtime.kernel import ModuleSpec


@dataclass(frozen=True)
class Applicability:
    ok: bool
    reason: str = ""

    def __bool__(self) -> bool:
        return self.ok


APPLICABLE = Applicability(True)


def not_applicable(reason: str) -> Applicability:
    return Applicability(False, reason)


@dataclass(frozen=True)
class Config:
    """Base of every solver's config: a frozen dataclass of ints/strs/bools."""

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def label(self) -> str:
        """Readable, for kernel names and tables: ``tile128x64_k8``-style."""
        return "_".join(f"{k}{v}" for k, v in self.to_dict().items()) or "default"


@dataclass(frozen=True)
class NoConfig(Config):
    """For solvers without a tunable space."""


class Runner(abc.ABC):
    """A prepared (solver, config, problem) on a backend: kernels compiled and resolved."""

    @abc.abstractmethod
    def __call__(self, tensors: Any, epilogue: Any, workspace: Any) -> None: ...

    @property
    @abc.abstractmethod
    def kernel_names(self) -> list[str]:
        """Readable names of the kernels a call launches, for demo/explain output."""


class Solver(abc.ABC):
    name: ClassVar[str]
    family: ClassVar[str]  # e.g. "conv_fwd"
    config_type: ClassVar[type[Config]] = NoConfig
    deterministic: ClassVar[bool] = True

    @abc.abstractmethod
    def is_applicable(self, problem: Any, caps: Capabilities) -> Applicability: ...

    def configs(self, problem: Any, caps: Capabilities) -> Sequence[Config]:
        return [self.default_config(problem, caps)]

    def default_config(self, problem: Any, caps: Capabilities) -> Config:
        return self.config_type()

    def config_from_dict(self, d: dict[str, Any]) -> Config:
        """Raises (TypeError/ValueError) on unknown fields or invalid values."""
        return self.config_type(**d)

    def is_valid(self, config: Config, problem: Any, caps: Capabilities) -> bool:
        return isinstance(config, self.config_type) and config in list(self.configs(problem, caps))

    def workspace_size(self, problem: Any, config: Config) -> int:
        return 0

    @abc.abstractmethod
    def module_specs(self) -> list[ModuleSpec]:
        """Every kernel module this solver can generate, all dtypes and configs."""

    @abc.abstractmethod
    def prepare(self, backend: Backend, problem: Any, config: Config) -> Runner: ...

    def __repr__(self) -> str:
        return f"<solver {self.name}>"
