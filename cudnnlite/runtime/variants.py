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
        importlib.import_module(name)
    specs: list[ModuleSpec] = []
    for family in sorted(_PROVIDERS):
        specs.extend(_PROVIDERS[family]())
    return list(dict.fromkeys(specs))
