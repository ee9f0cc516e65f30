"""Executes the notebooks in notebooks/ top to bottom (nbclient, a fresh kernel each), as
a user would; any cell that raises fails the test. Skipped without the ``notebooks`` extra;
the PyTorch notebook also needs the ``interop`` extra (torch)."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")
pytest.importorskip("matplotlib")

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
NEEDS = {"03_pytorch_interop.ipynb": "torch"}


def test_every_notebook_is_listed() -> None:
    names = sorted(p.name for p in NOTEBOOKS.glob("*.ipynb"))
    assert names == ["01_quickstart.ipynb", "02_autotuning.ipynb", "03_pytorch_interop.ipynb"]


@pytest.mark.parametrize("name", sorted(p.name for p in NOTEBOOKS.glob("*.ipynb")))
def test_notebook_runs(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    needed = NEEDS.get(name)
    if needed and importlib.util.find_spec(needed) is None:
        pytest.skip(f"{name} needs {needed} (pip install -e '.[interop]')")
    # The kernel inherits the environment: a scratch tuning dir, the suite's kernel cache.
    monkeypatch.setenv("CUDNNLITE_TUNING_DIR", str(tmp_path / "tuning"))
    monkeypatch.setenv("MPLBACKEND", "Agg")
    # The checkout's cudnnlite, whether or not it is installed.
    repo = str(NOTEBOOKS.parent)
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join(filter(None, [repo, os.environ.get("PYTHONPATH")]))
    )
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    client = nbclient.NotebookClient(
        nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    )
    client.execute()
    errors = [
        out
        for cell in nb.cells
        if cell.cell_type == "code"
        for out in cell.get("outputs", [])
        if out.get("output_type") == "error"
    ]
    assert errors == []
    assert os.environ["CUDNNLITE_TUNING_DIR"] == str(tmp_path / "tuning")
