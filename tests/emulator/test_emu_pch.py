"""The emulator's precompiled header (build._precompiled_header) and runtime object
(build._runtime_object): each built once per header content, compiler, CPU and flags and
shared by every module built with them; a module compiles the same with or without the
header."""

from __future__ import annotations

from pathlib import Path

import pytest

from cudnnlite.runtime.emulator import build
from cudnnlite.runtime.selftest import GRID_SYNC_SELFTEST, MMA_SELFTEST


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


def test_concurrent_builders_of_one_module_run_the_compiler_once(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # Two builders at once (threads here; xdist workers or Dask workers are processes:
    # the lock is a file lock either way): the second waits and finds the module built.
    import threading

    log = tmp_path / "calls.log"
    cxx = tmp_path / "cxx"
    cxx.write_text(f'#!/bin/sh\necho "$@" >> {log}\nexec {build.compiler()} "$@"\n')
    cxx.chmod(0o755)
    monkeypatch.setenv("CUDNNLITE_CXX", str(cxx))
    monkeypatch.setenv("CUDNNLITE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("CUDNNLITE_EMU_OPT", "0")  # (the quickest build)
    built: list[Path] = []
    threads = [threading.Thread(target=lambda: built.append(build._compile(MMA_SELFTEST, False)))
               for _ in range(2)]  # fmt: skip
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(built) == 2 and built[0] == built[1] and built[0].exists()
    calls = log.read_text().splitlines()
    modules = [c for c in calls if "emu_entry.cpp" in c]
    headers = [c for c in calls if "c++-header" in c]
    runtimes = [c for c in calls if "emu_runtime.cpp" in c]
    assert len(modules) == 1 and len(headers) == 1 and len(runtimes) == 1, calls
    # Every module built with these flags links that one runtime object: another module
    # compiles its own source only.
    assert build._compile(GRID_SYNC_SELFTEST, False).exists()
    calls = log.read_text().splitlines()
    assert len([c for c in calls if "emu_entry.cpp" in c]) == 2, calls
    assert len([c for c in calls if "emu_runtime.cpp" in c]) == 1, calls
    (runtime,) = (tmp_path / "cache" / "emu").glob("runtime-*.o")
    assert all(str(runtime) in c for c in calls if "emu_entry.cpp" in c), calls
