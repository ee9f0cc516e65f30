"""Kernel runtime: one kernel source, two backends (CUDA via NVRTC, CPU emulator)."""

from .backend import Backend, Kernel, Module
from .kernel import ModuleSpec
from .select import backend_by_name, backend_for

__all__ = ["Backend", "Kernel", "Module", "ModuleSpec", "backend_by_name", "backend_for"]
