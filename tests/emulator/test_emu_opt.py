"""CUDNNLITE_EMU_OPT: g++'s optimization level of emulator modules (README, emulator switches)."""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from cudnnlite.errors import BadParamError
from cudnnlite.runtime.emulator import build


def test_levels_and_their_flags(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CUDNNLITE_EMU_OPT", raising=False)
    assert build.opt_flags() == ["-O2"]  # the default
    monkeypatch.setenv("CUDNNLITE_EMU_OPT", "1")
    # -O1 alone would drop the FMA contraction that makes the emulator round as a GPU
    assert build.opt_flags() == ["-O1", "-fexpensive-optimizations"]
    assert "-O2" not in build.compile_flags(False)
    monkeypatch.setenv("CUDNNLITE_EMU_OPT", "0")
    assert build.opt_flags() == ["-O0", "-g"]
    for bad in ("3", "fast", "-O2"):
        monkeypatch.setenv("CUDNNLITE_EMU_OPT", bad)
        with pytest.raises(BadParamError, match=r"CUDNNLITE_EMU_OPT must be one of 0, 1, 2"):
            build.compile_flags(False)


def _has_fma() -> bool:
    try:
        return " fma " in open("/proc/cpuinfo").read().replace("\n", " ")
    except OSError:
        return False


@pytest.mark.skipif(not _has_fma(), reason="a CPU without FMA cannot contract")
@pytest.mark.parametrize("level", ["1", "2"])
def test_fma_is_contracted_at_both_fast_levels(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, level: str
) -> None:
    # a*b+c with one rounding, as a GPU's FFMA: (1 + 2^-23)^2 minus its rounded square
    # is 2^-46 fused and 0 with two roundings.
    monkeypatch.setenv("CUDNNLITE_EMU_OPT", level)
    monkeypatch.delenv("CUDNNLITE_EMU_PORTABLE", raising=False)
    src = tmp_path / "fma.cpp"
    src.write_text('extern "C" __attribute__((visibility("default")))\n'
                   "float muladd(float a, float b, float c) { return a * b + c; }\n")  # fmt: skip
    lib = tmp_path / "fma.so"
    subprocess.run([build.compiler(), *build.compile_flags(False), str(src), "-o", str(lib)],
                   check=True)  # fmt: skip
    muladd = ctypes.CDLL(str(lib)).muladd
    muladd.restype = ctypes.c_float
    muladd.argtypes = [ctypes.c_float] * 3
    a = np.float32(1 + 2.0**-23)
    assert muladd(a, a, -(a * a)) == 2.0**-46


@pytest.mark.parametrize("level", ["0", "2"])  # the debugger's; the default (the suite's is 1)
def test_other_levels_build_and_run(tmp_path: Path, level: str) -> None:
    code = (
        "import numpy as np, cudnnlite as cl\n"
        "x = np.linspace(-1, 1, 7, dtype=np.float32)\n"
        "assert (cl.relu(x) == np.maximum(x, 0)).all()\n"
        "print('ok')\n"
    )
    env = {
        **os.environ,
        "CUDNNLITE_EMU_OPT": level,
        "CUDNNLITE_CACHE_DIR": str(tmp_path),
        "CUDNNLITE_EMU_NO_PCH": "1",
    }  # (one module: no header to precompile)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=env, check=False)  # fmt: skip
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr
    assert any(tmp_path.rglob("*.so"))  # built in its own cache, keyed on the flags
