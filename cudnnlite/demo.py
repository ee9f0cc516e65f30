"""``cudnnlite demo``: the layers of a small CNN run through cudnnlite and checked.

Today the library has its activation primitives, so the demo runs each layer's
activation, forward and backward, on feature maps of the shapes a small CNN
produces (N=2), and compares every result with the float64 reference at the
tolerances of ``cudnnlite.testing``. Convolution, pooling and normalization join
the network here as they land.
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from . import dtypes, reference, testing
from .ops import activation
from .runtime.backend import Backend
from .runtime.select import backend_for

DTYPE_CHOICES = ("fp32", "fp16", "bf16")
_NUMPY_DTYPES = {d.short: d.numpy for d in dtypes.FLOAT_TYPES}


@dataclass(frozen=True)
class Layer:
    """One layer of the demo network: where it sits, its output shape, its activation."""

    name: str
    shape: tuple[int, ...]
    mode: str
    params: dict[str, float] = field(default_factory=dict)


# A small image classifier on 32x32 inputs: three conv stages that halve the
# resolution and double the channels, then a classifier head.
NETWORK = (
    Layer("conv1 3->16", (2, 16, 32, 32), "relu"),
    Layer("conv2 16->32", (2, 32, 16, 16), "swish"),
    Layer("conv3 32->64", (2, 64, 8, 8), "gelu"),
    Layer("fc 64->10", (2, 10), "sigmoid"),
)


@dataclass
class Row:
    layer: str
    op: str
    shape: tuple[int, ...]
    dtype: str
    backend: str = ""
    kernel: str = ""
    ms: float = float("nan")
    max_err: float = float("nan")
    ok: bool = False
    error: str = ""


COLUMNS = (
    ("layer", 13),
    ("op", 13),
    ("shape", 15),
    ("dtype", 5),
    ("backend", 7),
    ("kernel", 34),
    ("ms", 8),
    ("max |err|", 9),
    ("check", 5),
)


def _format_row(r: Row) -> str:
    cells = (
        r.layer,
        r.op,
        "x".join(map(str, r.shape)),
        r.dtype,
        r.backend,
        r.kernel,
        f"{r.ms:8.3f}",
        f"{r.max_err:9.2e}",
        "OK" if r.ok else "FAIL",
    )
    return "  ".join(f"{c:<{w}}" for c, (_, w) in zip(cells, COLUMNS, strict=True))


def _header() -> str:
    line = "  ".join(f"{name:<{w}}" for name, w in COLUMNS)
    return line + "\n" + "-" * len(line)


def _launched_kernel() -> str:
    """The readable name of the kernel the last call launched (profilers show it too)."""
    return activation.last_kernel_name() or "?"


def _median_ms(fn: Callable[[], Any], backend: Backend, repeats: int) -> float:
    fn()  # warm-up: compiles the module on first use
    backend.synchronize()
    times = []
    for _ in range(max(1, repeats)):
        start = time.perf_counter()
        fn()
        backend.synchronize()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def _check(row: Row, got: Any, expected: np.ndarray, dtype: np.dtype) -> None:
    got64 = testing.to_numpy(got).astype(np.float64)
    row.max_err = float(np.max(np.abs(got64 - expected))) if expected.size else 0.0
    try:
        testing.assert_close(got, expected, dtype, what=f"{row.layer} {row.op}")
    except AssertionError as exc:
        row.error = "\n".join(str(exc).strip().splitlines()[:6])  # the mismatch summary
        return
    row.ok = True


def _layer_rows(layer: Layer, dtype: str, xp_name: str, repeats: int, seed: int) -> list[Row]:
    """Forward and backward of one layer's activation, timed and checked."""
    rng = np.random.default_rng(seed)
    npdt = _NUMPY_DTYPES[dtype]
    # Values over [-4, 4] cover both tails of every activation.
    x_host = (rng.standard_normal(layer.shape) * 2.0).astype(npdt)
    dy_host = rng.standard_normal(layer.shape).astype(npdt)
    x = testing.to_backend(x_host, xp_name)
    dy = testing.to_backend(dy_host, xp_name)
    x64 = x_host.astype(np.float64)
    dy64 = dy_host.astype(np.float64)
    backend = backend_for(x)

    rows = []
    fwd = Row(layer.name, f"{layer.mode} fwd", layer.shape, dtype, backend.name)
    bwd = Row(layer.name, f"{layer.mode} bwd", layer.shape, dtype, backend.name)

    y = None
    try:
        y = activation.activation_forward(x, layer.mode, **layer.params)
        fwd.kernel = _launched_kernel()
        fwd.ms = _median_ms(
            lambda: activation.activation_forward(x, layer.mode, **layer.params, out=y),
            backend,
            repeats,
        )
        expected = reference.activation_forward(x64, layer.mode, **layer.params)
        _check(fwd, y, expected, npdt)
    except Exception as exc:  # report and go on: the demo shows every layer
        fwd.error = f"{type(exc).__name__}: {exc}"
    rows.append(fwd)

    try:
        dx = activation.activation_backward(dy, x, layer.mode, **layer.params)
        bwd.kernel = _launched_kernel()
        bwd.ms = _median_ms(
            lambda: activation.activation_backward(dy, x, layer.mode, **layer.params, out=dx),
            backend,
            repeats,
        )
        expected = reference.activation_backward(dy64, x64, layer.mode, **layer.params)
        _check(bwd, dx, expected, npdt)
    except Exception as exc:
        bwd.error = f"{type(exc).__name__}: {exc}"
    rows.append(bwd)
    return rows


def resolve_backend(choice: str) -> str:
    """``cpu`` or ``cuda`` for ``--backend auto|cpu|cuda``; RuntimeError if cuda is absent."""
    from .runtime.cuda import CudaBackend

    if choice == "auto":
        return "cuda" if CudaBackend.available() else "cpu"
    if choice == "cuda" and not CudaBackend.available():
        raise RuntimeError(
            "--backend cuda: no GPU visible to CuPy (is CuPy installed? "
            'pip install "cudnnlite[cuda13]" or "cudnnlite[cuda12]")'
        )
    return choice


def run(backend: str = "auto", dtypes: Sequence[str] = DTYPE_CHOICES, repeats: int = 5) -> int:
    """Runs the demo and prints its table; returns the exit status (1 if a check failed)."""
    try:
        xp_name = resolve_backend(backend)
    except RuntimeError as exc:
        print(f"cudnnlite demo: {exc}", file=sys.stderr)
        return 2
    arrays = "CuPy arrays on the GPU" if xp_name == "cuda" else "NumPy arrays on the CPU emulator"
    print(
        "cudnnlite demo: the activation layers of a small CNN (N=2, 32x32 input),\n"
        f"forward and backward, on {arrays}.\n"
        "Every result is checked against the float64 reference (cudnnlite.reference).\n"
        "Convolution, pooling and normalization join this demo as they land; today each\n"
        "layer's activation runs on a synthetic feature map of that layer's output shape.\n"
        f"Times: median of {repeats} runs after a warm-up (the first call compiles).\n"
    )
    print(_header(), flush=True)
    start = time.perf_counter()
    rows: list[Row] = []
    for dtype in dtypes:
        for i, layer in enumerate(NETWORK):
            for row in _layer_rows(layer, dtype, xp_name, repeats, seed=i):
                rows.append(row)
                print(_format_row(row), flush=True)
                if row.error:
                    print("    " + row.error.replace("\n", "\n    "), flush=True)
    failed = sum(not r.ok for r in rows)
    print(
        f"\n{len(rows)} checks: {len(rows) - failed} OK, {failed} FAIL "
        f"({time.perf_counter() - start:.1f} s, compiles included)"
    )
    return 1 if failed else 0
