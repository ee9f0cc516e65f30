"""Executes the notebooks in notebooks/ top to bottom (nbclient, a fresh kernel each), as
a user would, and checks what they show: every plotting cell displays a PNG inline, and
the lines that carry each notebook's story (per-op checks, tuning results, the DLPack
round trip) are printed. The committed notebooks carry the outputs of an emulator run;
the same checks hold for those, and they name no path on the machine that made them.

Skipped without the ``notebooks`` extra; the PyTorch notebook also needs ``interop``.

Refresh the committed outputs after changing a notebook (never done by the test):
``python tests/test_notebooks.py [NAME ...]`` from the repository root."""

from __future__ import annotations

import importlib.util
import os
import re
import sys
import tempfile
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")
pytest.importorskip("matplotlib")

REPO = Path(__file__).resolve().parent.parent
NOTEBOOKS = REPO / "notebooks"
NEEDS = {"03_pytorch_interop.ipynb": "torch", "04_dask_scaleout.ipynb": "distributed"}

# A code cell that draws: a call on plt / ax / axes / fig.
PLOTTING = re.compile(r"\b(plt|ax|axes|fig)\.\w+\(")
# An absolute POSIX path of two or more components in an output (/tmp/..., /home/...).
ABSOLUTE_PATH = re.compile(r"(?:^|[\s'\"(=:])/[\w.+-]+/[\w.+-]")


def _check_line(op: str) -> str:
    """A quickstart check line: the op, its array module, shape, error, bound, ``ok``."""
    return rf"^{re.escape(op)} +(numpy|cupy) +\([\d, ]+\) +max err \S+ <= \S+  ok$"


# Per notebook: how many plotting cells it has, and {regex: minimum number of matching
# lines} over its printed text (multiline; a GPU machine repeats some lines per backend).
EXPECTED: dict[str, tuple[int, dict[str, int]]] = {
    "01_quickstart.ipynb": (
        0,
        {
            r"^\[ ok \] backends: a NumPy array runs on cpu": 1,
            r"^array modules: \['numpy'": 1,
            **{
                _check_line(op): 1
                for op in (
                    "conv2d 3x3 pad 1",
                    "batch_norm (inference)",
                    "relu",
                    "max_pool2d 2x2",
                    "softmax",
                    "gelu float16",
                    "gelu bfloat16",
                )
            },
            r"^BadParamError: x: expected a NumPy or CuPy array": 1,
            r"^BadParamError: out: the array is read-only$": 1,
        },
    ),
    "02_autotuning.ipynb": (
        1,
        {
            # Each of the six layers' key, then its fastest solver and time.
            r"^conv2d_fwd n\d+-c\d+-h\d+-w\d+ k\d+-r3-s3 \S+ g\d+ NCHW fp32\n"
            r"    fastest: conv_fwd_\w+.* [\d,]+ us$": 6,
            r"^choice:  conv_fwd_\w+ \(from user DB\)$": 1,
            r"^\* conv_fwd_\w+ +yes ": 1,
            r"^plan picks the tuned solver: conv_fwd_\w+ ": 1,
        },
    ),
    "03_pytorch_interop.ipynb": (
        0,
        {
            r"^  \(conv\): Conv2d\(3, 16, kernel_size=\(3, 3\)": 1,
            r"^max \|difference\|: \d\.\de-\d\d$": 1,
            r"^cudnnlite matches PyTorch$": 1,
            r"^(numpy|cupy) result; shares memory with the tensor: True$": 1,
            r"^tensor\(\[\[2\., 2\., 2\.\],$": 1,
            r"^(NotSupportedError: stream: the emulator|ran on <torch\.cuda\.Stream)": 1,
        },
    ),
    "04_dask_scaleout.ipynb": (
        1,
        {
            r"^workers: 2 processes$": 1,
            r"^sequential: 8 tasks, output \(32, 8, 1, 1\), equal to one call: True$": 1,
            # (not anchored: the figure's text/plain ends without a newline)
            r"conv2d \{.*\}: 3x2 blocks -> output chunks .*, equal to one call: True$": 2,
            r"^(dask_cuda is not installed|LocalCUDACluster: \d+ GPU workers)": 1,
        },
    ),
    "05_training.ipynb": (
        2,
        {
            r"^array module: (numpy|cupy)$": 1,
            r"^step +0: loss \d\.\d{3}$": 1,
            r"^step 199: loss \d\.\d{3}$": 1,
            # The loss falls from about ln 4 (1.39) to below 0.4, and both accuracies reach
            # 0.90 (chance: 0.25; the emulator run: 0.99 and 1.00): far above chance, with room
            # for a GPU's different summation order to change the trajectory a little.
            r"^final: loss 0\.[0-3]\d\d \(mean of the last 50 steps\), "
            r"train accuracy (0\.9\d|1\.00), held-out accuracy (0\.9\d|1\.00)$": 1,
            r"^(gradients match PyTorch: max relative error \d\.\de-\d\d"
            r"|PyTorch is not installed: the gradient check is skipped)$": 1,
        },
    ),
}


def kernel_env(scratch: Path) -> dict[str, str | None]:
    """Environment changes for the notebook kernels (None: unset)."""
    return {
        # A scratch tuning DB: the notebooks leave the user's alone.
        "CUDNNLITE_TUNING_DIR": str(scratch / "tuning"),
        # ipykernel's inline backend shows figures only when no other backend is forced.
        "MPLBACKEND": None,
        # The emulator's OpenMP threads sleep between launches instead of spinning first:
        # with more busy threads than cores (CI's two workers, each with a thread per core)
        # a spinning wait holds a core another process needs. 05_training's ~3,000 small
        # launches, two runs side by side on 2 cores: 39 s each with libgomp's default,
        # 18 s passive; alone, 7 s either way.
        "OMP_WAIT_POLICY": "passive",
        # The checkout's cudnnlite, whether or not it is installed.
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
    }


def execute(name: str, workdir: Path):
    """Runs a copy of the notebook in a fresh kernel (cwd ``workdir``) and returns it."""
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    client = nbclient.NotebookClient(
        nb,
        timeout=600,
        kernel_name="python3",
        record_timing=False,  # no timestamps in the saved notebooks
        coalesce_streams=True,  # one stream output per cell, however the text arrived
        resources={"metadata": {"path": str(workdir)}},
    )
    client.execute()
    return nb


def _text(output) -> str:
    if output.get("output_type") == "stream":
        return output.get("text", "")
    if output.get("output_type") == "error":
        return "\n".join([output.get("ename", ""), output.get("evalue", "")])
    return output.get("data", {}).get("text/plain", "")


def check_outputs(name: str, nb) -> None:
    """What the notebook must show: no errors, a PNG per plotting cell, the key lines."""
    code = [cell for cell in nb.cells if cell.cell_type == "code"]
    outputs = [out for cell in code for out in cell.get("outputs", [])]
    errors = [f"{o.get('ename')}: {o.get('evalue')}" for o in outputs if o.output_type == "error"]
    assert errors == []
    assert all(cell.get("execution_count") for cell in code), "a code cell was not executed"

    n_plots, lines = EXPECTED[name]
    plotting = [cell for cell in code if PLOTTING.search(cell.source)]
    assert len(plotting) == n_plots
    for cell in plotting:
        images = [o for o in cell.get("outputs", []) if "image/png" in o.get("data", {})]
        assert images, f"no inline figure from the cell starting {cell.source[:60]!r}"

    text = "".join(_text(o) for o in outputs)
    for pattern, at_least in lines.items():
        found = len(re.findall(pattern, text, re.MULTILINE))
        assert found >= at_least, f"{pattern!r}: {found} line(s), expected {at_least}\n{text}"


def test_every_notebook_is_checked() -> None:
    assert sorted(p.name for p in NOTEBOOKS.glob("*.ipynb")) == sorted(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_notebook(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    needed = NEEDS.get(name)
    if needed and importlib.util.find_spec(needed) is None:
        pytest.skip(f"{name} needs {needed} (pip install -e '.[interop]')")

    # The committed outputs read well on GitHub: the same checks, and no machine paths.
    saved = nbformat.read(NOTEBOOKS / name, as_version=4)
    check_outputs(name, saved)
    saved_text = "".join(_text(o) for c in saved.cells for o in c.get("outputs", []))
    assert not ABSOLUTE_PATH.search(saved_text), ABSOLUTE_PATH.search(saved_text)

    for key, value in kernel_env(tmp_path).items():
        if value is None:
            monkeypatch.delenv(key, raising=False)
        else:
            monkeypatch.setenv(key, value)
    check_outputs(name, execute(name, tmp_path))


def main(names: list[str]) -> None:
    """Re-executes the notebooks and writes them back with their outputs."""
    with tempfile.TemporaryDirectory(prefix="cudnnlite-notebooks-") as scratch:
        for key, value in kernel_env(Path(scratch)).items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        for name in names or sorted(EXPECTED):
            nb = execute(name, Path(scratch))
            check_outputs(name, nb)
            nbformat.write(nb, NOTEBOOKS / name)
            print("wrote", NOTEBOOKS / name)


if __name__ == "__main__":
    main(sys.argv[1:])
