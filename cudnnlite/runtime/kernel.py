"""What a kernel is: a source file under ``cuda_src/``, the kernel names (or C++ name
expressions such as ``act_fwd<float, 2>``) to take from it, and compile-time defines."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass


def _define_value(value: object) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, (int, float, str)):
        return str(value)
    raise TypeError(f"define values must be bool, int, float or str, not {type(value).__name__}")


@dataclass(frozen=True)
class ModuleSpec:
    """One compilation unit: a source, the kernels it exports, and its defines.

    Frozen and hashable: it is the key of the per-backend module caches.
    """

    source: str
    names: tuple[str, ...]
    defines: tuple[tuple[str, str], ...] = ()

    @classmethod
    def make(
        cls, source: str, names: Iterable[str], defines: Mapping[str, object] | None = None
    ) -> ModuleSpec:
        names = tuple(dict.fromkeys(names))  # de-duplicate, keep order
        if not names:
            raise ValueError("a module needs at least one kernel name")
        items = tuple(sorted((str(k), _define_value(v)) for k, v in (defines or {}).items()))
        return cls(source, names, items)

    def part(self, name: str) -> ModuleSpec:
        """The module of ``name`` alone: same source and defines. NVRTC instantiates only
        the templates a program names, so this compiles one kernel of a family module
        (a file's non-template kernels, few and small, come along)."""
        if name not in self.names:
            raise ValueError(f"{name!r} is not a kernel of {self.label()}")
        return self if len(self.names) == 1 else ModuleSpec(self.source, (name,), self.defines)

    def parts(self) -> list[ModuleSpec]:
        """One single-kernel module per name (see :meth:`part`)."""
        return [self.part(name) for name in self.names]

    def define_options(self) -> list[str]:
        return [f"-D{k}={v}" for k, v in self.defines]

    def label(self) -> str:
        """Readable identity, e.g. ``activation/activation.cu[VEC=4]``."""
        defs = ",".join(f"{k}={v}" for k, v in self.defines)
        return f"{self.source}[{defs}]" if defs else self.source
