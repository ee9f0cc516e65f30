"""Registry of every kernel module the library can generate.

Each primitive family registers a function returning the ``ModuleSpec`` objects it
may compile. The NVRTC compile check and ``cudnnlite doctor`` walk this list, so a
kernel variant that only g++ accepts is caught without a GPU.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable

from .kernel import ModuleSpec

_PROVIDERS: dict[str, Callable[[], Iterable[ModuleSpec]]] = {}

# Modules that register providers when imported; importing them has no side effect
# beyond registration (nothing touches a GPU at import time).
_PROVIDER_MODULES = (
    "cudnnlite.ops.activation",
    "cudnnlite.ops.conv",
    "cudnnlite.ops.conv_backward",
    "cudnnlite.ops.ctc",
    "cudnnlite.ops.dropout",
    "cudnnlite.ops.norm_common",
    "cudnnlite.ops.pooling_kernels",
    "cudnnlite.ops.softmax",
    "cudnnlite.ops.spatial",
    "cudnnlite.ops.tensor",
    "cudnnlite.runtime.dgemm_tc",
    "cudnnlite.runtime.selftest",
)


def register(family: str) -> Callable:
    """Decorator: ``@register("activation")`` on a function returning ModuleSpecs."""

    def wrap(fn: Callable[[], Iterable[ModuleSpec]]) -> Callable[[], Iterable[ModuleSpec]]:
        _PROVIDERS[family] = fn
        return fn

    return wrap


def all_module_specs() -> list[ModuleSpec]:
    for name in _PROVIDER_MODULES:
        try:
            importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name != name:  # a module that exists but fails to import is a bug
                raise
    specs: list[ModuleSpec] = []
    for family in sorted(_PROVIDERS):
        specs.extend(_PROVIDERS[family]())
    return list(dict.fromkeys(specs))
