"""The emulator's precompiled header (build._precompiled_header): built once per
header content, compiler, CPU and flags; a module compiles the same with or without it."""

from __future__ import annotations

from pathlib import Path

import pytest

from cudnnlite.runtime.emulator import build
from cudnnlite.runtime.selftest import MMA_SELFTEST


def _compile(monkeypatch: pytest.MonkeyPatch, cache: Path, no_pch: bool) -> Path:
    monkeypatch.setenv("CUDNNLITE_CACHE_DIR", str(cache))
    monkeypatch.setenv("CUDNNLITE_EMU_NO_PCH", "1" if no_pch else "0")
    return build._compile(MMA_SELFTEST, asan=False)


def test_modules_compile_with_and_without_the_precompiled_header(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    with_pch = _compile(monkeypatch, tmp_path / "a", no_pch=False)
    without = _compile(monkeypatch, tmp_path / "b", no_pch=True)
    assert with_pch.exists() and without.exists()
    assert with_pch.name == without.name  # the same cache key: the header changes nothing
    assert list((tmp_path / "a" / "emu").glob("pch-*/cuda_emu.h.gch"))
    assert not list((tmp_path / "b" / "emu").glob("pch-*"))


def test_a_header_that_cannot_be_precompiled_falls_back(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # A compiler that fails the header build: no .gch, the module still compiles (with g++).
    monkeypatch.setenv("CUDNNLITE_CACHE_DIR", str(tmp_path))
    flags = build.compile_flags(False)
    assert build._precompiled_header("false", flags) is None
    assert build._compile(MMA_SELFTEST, asan=False).exists()
