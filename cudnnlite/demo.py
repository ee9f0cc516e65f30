"""``cudnnlite demo``: a small CNN's forward pass built from cudnnlite primitives.

The network (N=2, 3x32x32 images, 10 classes)::

    conv1  3->16 3x3 + bias + relu (fused)     pool1  max 2x2
    conv2 16->32 3x3 -> bn2 (inference) + relu  pool2  avg 2x2
    conv3 32->64 1x1 + bias + gelu (fused)      gap    global average pool
    fc    64->10 as a 1x1 convolution + bias    softmax

Each op runs on the backend the arrays choose (CuPy on the GPU, NumPy on the emulator),
feeds the next, and is checked against the float64 reference applied to the SAME input
it received (so the check measures that op's error, not the accumulated one). One row
per op: backend, the kernel (or solver) that ran, the median time, the error.
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from . import dtypes, reference, testing
from .ops import batch_norm, norm_common, pooling, softmax
from .ops.conv_plan import conv2d_plan
from .runtime.backend import Backend
from .runtime.select import backend_for

DTYPE_CHOICES = ("fp32", "fp16", "bf16")
_DTYPES = {d.short: d for d in dtypes.FLOAT_TYPES}  # (bf16's NumPy dtype made on use)

# Relative error allowed, against max(1, max|ref|): the output's own rounding (2^-24,
# 2^-11, 2^-8) times a margin for fp32 accumulation over up to 16*9 products and the
# inputs' rounding; the tests hold each kernel to tighter, derived bounds.
TOLERANCE = {"fp32": 1e-4, "fp16": 4e-3, "bf16": 3e-2}


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
    ("layer", 7),
    ("op", 26),
    ("output", 12),
    ("dtype", 5),
    ("backend", 7),
    ("kernel / solver", 36),
    ("ms", 8),
    ("rel err", 8),
    ("check", 5),
)


def _format_row(r: Row) -> str:
    cells = (
        r.layer,
        r.op,
        "x".join(map(str, r.shape)),
        r.dtype,
        r.backend,
        r.kernel[:36],
        f"{r.ms:8.3f}",
        f"{r.max_err:8.1e}",
        "OK" if r.ok else "FAIL",
    )
    return "  ".join(f"{c:<{w}}" for c, (_, w) in zip(cells, COLUMNS, strict=True))


def _header() -> str:
    line = "  ".join(f"{name:<{w}}" for name, w in COLUMNS)
    return line + "\n" + "-" * len(line)


def _median_ms(fn: Callable[[], Any], backend: Backend, repeats: int) -> float:
    backend.synchronize()
    times = []
    for _ in range(max(1, repeats)):
        start = time.perf_counter()
        fn()
        backend.synchronize()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


class Network:
    """Weights of the demo CNN (float32 on the host, cast per run)."""

    def __init__(self, seed: int = 0) -> None:
        rng = np.random.default_rng(seed)

        def he(*shape: int) -> np.ndarray:  # He initialisation keeps activations O(1)
            fan_in = int(np.prod(shape[1:]))
            return (rng.standard_normal(shape) * np.sqrt(2.0 / fan_in)).astype(np.float32)

        self.w1, self.b1 = he(16, 3, 3, 3), (rng.standard_normal(16) * 0.1).astype(np.float32)
        self.w2 = he(32, 16, 3, 3)
        self.bn = {
            "running_mean": (rng.standard_normal(32) * 0.1).astype(np.float32),
            "running_var": rng.uniform(0.5, 2.0, 32).astype(np.float32),
            "weight": rng.uniform(0.5, 1.5, 32).astype(np.float32),
            "bias": (rng.standard_normal(32) * 0.1).astype(np.float32),
        }
        self.w3, self.b3 = he(64, 32, 1, 1), (rng.standard_normal(64) * 0.1).astype(np.float32)
        self.wf, self.bf = he(10, 64, 1, 1), (rng.standard_normal(10) * 0.1).astype(np.float32)


def _run_op(
    rows: list[Row],
    layer: str,
    op: str,
    dtype: str,
    backend: Backend,
    repeats: int,
    call: Callable[[], Any],
    kernel: Callable[[], str],
    expected: Callable[[], np.ndarray],
) -> Any:
    """Runs one op (first call compiles), times it, checks it; returns its output."""
    row = Row(layer, op, (), dtype, backend.name)
    rows.append(row)
    try:
        y = call()
        row.shape = tuple(y.shape)
        row.kernel = kernel()
        row.ms = _median_ms(call, backend, repeats)
        ref = expected()
        got = testing.to_numpy(y).astype(np.float64)
        scale = max(1.0, float(np.max(np.abs(ref))) if ref.size else 1.0)
        row.max_err = float(np.max(np.abs(got - ref))) / scale if ref.size else 0.0
        row.ok = bool(row.max_err <= TOLERANCE[dtype])
        if not row.ok:
            row.error = f"relative error {row.max_err:.2e} > {TOLERANCE[dtype]:g}"
        return y
    except Exception as exc:  # report and stop this dtype's pass: later ops need the input
        row.error = f"{type(exc).__name__}: {exc}"
        return None


def forward(net: Network, dtype: str, xp_name: str, repeats: int) -> list[Row]:
    """The forward pass in one dtype; every op checked against the reference."""
    npdt = _DTYPES[dtype].numpy
    rng = np.random.default_rng(1)
    host = {name: getattr(net, name).astype(npdt) for name in ("w1", "b1", "w2", "w3", "b3",
                                                               "wf", "bf")}  # fmt: skip
    # batch norm's scale, shift and statistics stay float32 for 16-bit data (as cuDNN)
    bn_host = dict(net.bn)
    dev = {k: testing.to_backend(v, xp_name) for k, v in host.items()}
    bn = {k: testing.to_backend(v, xp_name) for k, v in bn_host.items()}
    x = testing.to_backend(rng.standard_normal((2, 3, 32, 32)).astype(npdt), xp_name)
    backend = backend_for(x)
    rows: list[Row] = []

    def f64(a: Any) -> np.ndarray:
        return testing.to_numpy(a).astype(np.float64)

    def conv(layer: str, op: str, inp: Any, w: str, b: str | None, pad: int,
             act: str | None) -> Any:  # fmt: skip
        plan = conv2d_plan(inp.shape, dev[w].shape, padding=pad, dtype=inp.dtype,
                           backend=backend.name)  # fmt: skip
        bias = dev[b] if b else None
        return _run_op(
            rows, layer, op, dtype, backend, repeats,
            lambda: plan(inp, dev[w], bias, activation=act),
            lambda: f"{plan.solver}",
            lambda: reference.conv_bias_act_forward(
                f64(inp), host[w], [(pad, pad)] * 2, (1, 1), (1, 1),
                bias=None if b is None else host[b], activation=act),
        )  # fmt: skip

    h = conv("conv1", "conv 3x3 + bias + relu", x, "w1", "b1", 1, "relu")
    if h is None:
        return rows
    p = h
    h = _run_op(rows, "pool1", "max_pool2d 2x2", dtype, backend, repeats,
                lambda: pooling.max_pool2d(p, 2), pooling.last_kernel_name,
                lambda: reference.pooling.max_pool(f64(p), (2, 2), (2, 2), (0, 0),
                                                   (1, 1))[0])  # fmt: skip
    if h is None:
        return rows
    h = conv("conv2", "conv 3x3", h, "w2", None, 1, None)
    if h is None:
        return rows
    q = h
    h = _run_op(rows, "bn2", "batch_norm (infer) + relu", dtype, backend, repeats,
                lambda: batch_norm.batch_norm_forward_inference(q, bn["running_mean"],
                                                                bn["running_var"], bn["weight"],
                                                                bn["bias"], activation="relu"),
                norm_common.last_kernel_name,
                lambda: reference.norm.batch_norm_inference(
                    f64(q), bn_host["weight"], bn_host["bias"], bn_host["running_mean"],
                    bn_host["running_var"], activation="relu"))  # fmt: skip
    if h is None:
        return rows
    r = h
    h = _run_op(rows, "pool2", "avg_pool2d 2x2", dtype, backend, repeats,
                lambda: pooling.avg_pool2d(r, 2), pooling.last_kernel_name,
                lambda: reference.pooling.avg_pool(f64(r), (2, 2), (2, 2), (0, 0)))  # fmt: skip
    if h is None:
        return rows
    h = conv("conv3", "conv 1x1 + bias + gelu", h, "w3", "b3", 0, "gelu")
    if h is None:
        return rows
    g = h
    h = _run_op(rows, "gap", "global_avg_pool", dtype, backend, repeats,
                lambda: pooling.global_avg_pool(g), pooling.last_kernel_name,
                lambda: reference.pooling.global_avg_pool(f64(g)))  # fmt: skip
    if h is None:
        return rows
    h = conv("fc", "linear (1x1 conv) + bias", h, "wf", "bf", 0, None)
    if h is None:
        return rows
    logits = h.reshape(2, 10)
    _run_op(rows, "softmax", "softmax over classes", dtype, backend, repeats,
            lambda: softmax.softmax(logits, axis=-1), softmax.last_kernel_name,
            lambda: reference.softmax_forward(f64(logits), axis=-1))  # fmt: skip
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
        "cudnnlite demo: a small CNN's forward pass (N=2, 3x32x32 -> 10 classes) built from\n"
        f"cudnnlite primitives, on {arrays}. Each op feeds the next and is checked\n"
        "against the float64 reference (cudnnlite.reference) on the input it received.\n"
        f"Times: median of {repeats} runs after the first call (which compiles).\n"
    )
    print(_header(), flush=True)
    start = time.perf_counter()
    rows: list[Row] = []
    net = Network()
    for dtype in dtypes:
        if dtype not in _DTYPES:
            print(f"({dtype}: not available here, needs ml_dtypes)")
            continue
        for row in forward(net, dtype, xp_name, repeats):
            rows.append(row)
            print(_format_row(row), flush=True)
            if row.error:
                print("    " + row.error.replace("\n", "\n    "), flush=True)
    failed = sum(not r.ok for r in rows)
    print(
        f"\n{len(rows)} checks: {len(rows) - failed} OK, {failed} FAIL "
        f"({time.perf_counter() - start:.1f} s, compiles included)"
    )
    return 1 if failed or not rows else 0
