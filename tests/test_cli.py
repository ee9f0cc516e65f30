"""The ``cudnnlite`` command, the README's two commands, and the CI and benchmark scripts."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import cudnnlite
from cudnnlite import demo
from cudnnlite.cli import main
from cudnnlite.runtime import cuda_toolkit
from cudnnlite.testing import available_backends

REPO = Path(__file__).resolve().parent.parent
DEMO_COMMAND = "python3 -m venv .venv && .venv/bin/pip install -e . && .venv/bin/cudnnlite demo"
TEST_COMMAND = (
    'python3 -m venv .venv && .venv/bin/pip install -e ".[test]" '
    "&& .venv/bin/python -m pytest -q -n 2 --dist worksteal"
)


# ------------------------------------------------------------------ info


def test_info_runs_as_a_module() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "cudnnlite.cli", "info"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    for section in ("backends", "emulator", "cuda", "nvrtc", "paths", "environment"):
        assert re.search(rf"^{section}$", proc.stdout, re.MULTILINE), section
    assert "cuda_src" in proc.stdout and "tuning_db" in proc.stdout


@pytest.fixture
def no_cupy_no_nvrtc(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    monkeypatch.setitem(sys.modules, "cupy", None)  # `import cupy` raises ImportError
    monkeypatch.setenv(cuda_toolkit.ENV_NVRTC, str(tmp_path / "libnvrtc.so.99"))
    cuda_toolkit.clear_caches()
    yield
    monkeypatch.undo()
    cuda_toolkit.clear_caches()


def test_info_says_what_is_missing(
    no_cupy_no_nvrtc: None, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["info"]) == 0
    out = capsys.readouterr().out
    assert "CuPy is not installed" in out
    assert 'pip install "cudnnlite[cuda13]"' in out
    assert "NVRTC" in out and "NOT FOUND" in out


def test_info_json(no_cupy_no_nvrtc: None, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["info", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["cudnnlite"]["version"] == cudnnlite.__version__
    assert "cpu (emulator)" in info["backends"]
    assert info["backends"]["cuda"] == "unavailable: CuPy is not installed"
    assert info["nvrtc"]["NVRTC"].startswith("NOT FOUND")


# ------------------------------------------------------------------ demo


def test_demo_fp32(backend: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--dtype", "fp32", "--backend", backend, "--repeats", "1"]) == 0
    out = capsys.readouterr().out
    rows = [ln for ln in out.splitlines() if ln.rstrip().endswith(("OK", "FAIL"))]
    layers = [r.split()[0] for r in rows]
    assert layers == ["conv1", "pool1", "conv2", "bn2", "pool2", "conv3", "gap", "fc", "softmax"]
    assert all(r.rstrip().endswith("OK") for r in rows), "\n".join(rows)
    assert all(f" {backend} " in r and " fp32 " in r for r in rows)
    assert "conv_fwd_" in rows[0] and "softmax" in rows[-1]


def test_demo_fails_when_a_check_fails(
    backend: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    real = cudnnlite.reference.softmax_forward
    monkeypatch.setattr(cudnnlite.reference, "softmax_forward", lambda *a, **k: real(*a, **k) + 1.0)
    assert demo.run(backend=backend, dtypes=("fp32",), repeats=1) == 1
    out = capsys.readouterr().out
    assert "FAIL" in out and "1 FAIL" in out


def test_demo_cuda_without_a_gpu_says_so(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from cudnnlite.runtime.cuda import CudaBackend

    monkeypatch.setattr(CudaBackend, "available", staticmethod(lambda: False))
    assert main(["demo", "--backend", "cuda"]) == 2
    assert "no GPU visible to CuPy" in capsys.readouterr().err


# ------------------------------------------------------------------ README and CI


def _fenced_blocks(text: str) -> list[str]:
    return [b.strip() for b in re.findall(r"^```[^\n]*\n(.*?)^```", text, re.S | re.M)]


def test_readme_has_the_two_commands() -> None:
    readme = (REPO / "README.md").read_text()
    blocks = _fenced_blocks(readme)
    assert DEMO_COMMAND in blocks
    marked = re.search(r"<!-- test-command -->(.*?)<!-- /test-command -->", readme, re.S)
    assert marked, "README.md lacks the <!-- test-command --> markers"
    assert _fenced_blocks(marked.group(1)) == [TEST_COMMAND]


def test_ci_extracts_the_readme_test_command() -> None:
    proc = subprocess.run(
        ["bash", str(REPO / ".ci" / "run"), "--print-test-command"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == TEST_COMMAND


@pytest.mark.parametrize("script", [".ci/run", "benchmarks/device_check.sh"])
def test_scripts_parse_and_are_executable(script: str) -> None:
    path = REPO / script
    assert subprocess.run(["bash", "-n", str(path)], check=False).returncode == 0
    assert os.access(path, os.X_OK), f"{script} is not executable"


def test_the_suite_collects_with_only_the_gpu_boxs_packages() -> None:
    """The lent GPU box has CuPy, PyTorch, NumPy, PyYAML and pytest, nothing else
    (device_check.sh). A test file that needs ml_dtypes, hypothesis or tqdm to import must
    skip, not fail to collect: a collection error stops the whole pytest run there."""
    code = (
        "import sys\n"
        "sys.modules.update(dict.fromkeys(['ml_dtypes', 'hypothesis', 'tqdm'], None))\n"
        "import pytest\n"
        "sys.exit(pytest.main(['--collect-only', '-q', '-p', 'no:cacheprovider', 'tests']))\n"
    )
    # (no plugins from entry points: hypothesis's and xdist's are not on the box either)
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=False, cwd=REPO, env=env, timeout=300)  # fmt: skip
    assert out.returncode == 0, (out.stdout + out.stderr)[-3000:]
    assert "error" not in out.stdout.splitlines()[-1], out.stdout[-3000:]


# ------------------------------------------------------------------ benchmarks


def test_emulator_benchmarks_small_mode(tmp_path: Path) -> None:
    """The emulator benchmarks run and write their JSON (the activation ones run in CI)."""
    if "cpu" not in available_backends():
        pytest.skip("the emulator is not among this run's test backends")
    run_all = REPO / "benchmarks" / "run_all.py"
    proc = subprocess.run(
        [sys.executable, str(run_all), "--small", "--only", "emulator", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (result,) = tmp_path.glob("benchmarks-*.json")
    doc = json.loads(result.read_text())
    assert doc["small"] and not doc["errors"]
    assert doc["results"]["emulator"]["switch"]["switch_ns"] > 0
    summary = subprocess.run(
        [sys.executable, str(run_all), "--summarize", str(result)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert summary.returncode == 0 and "fiber switch" in summary.stdout


def test_precompile_builds_a_family_and_refuses_unknown_targets(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from cudnnlite.cli import main
    from cudnnlite.precompile import precompile

    report = precompile(["dropout"], dtypes_=["fp32"], backend="cpu", jobs=2, progress=False)
    assert report.ok and report.built == ["dropout/dropout.cu"]  # the fp32 module only
    assert main(["precompile", "dropout", "--backend", "cpu", "--no-progress"]) == 0
    assert "1 built, 0 failed" in capsys.readouterr().out
    assert main(["precompile", "no_such_family"]) == 2
    assert "unknown 'no_such_family'" in capsys.readouterr().err
