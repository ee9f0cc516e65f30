"""Scaled dot-product attention, forward and backward: the dispatcher's choice and every
applicable solver, in TFLOP/s, with the time ratio against PyTorch's SDPA backends
(FlashAttention-2 and cuDNN) measured in the same run.

    python benchmarks/attention.py [--small] [--dtype bf16 ...] [--head-dim 64 ...]
                                   [--direction fwd|bwd ...] [--no-solvers]

Table: bf16/fp16, head dim 64 and 128, sequence 512 to 16k with batch x heads sized for
16k tokens x 16 heads (FlashAttention's benchmark convention), causal and not; then, at
4k tokens and not causal, the general kernels: a key-padding bool mask (b, 1, 1, s) that
keeps the first 7/8 of each row's keys (``padmask``) and dropout 0.1 (``dropout``). FLOPs:
4 * b * h * sq * skv * d for the forward (two GEMMs), 2.5x that for the backward, halved
when causal (``AttentionProblem.flops``; a padding mask's skipped keys still count). The
ratio is PyTorch's time over ours (> 1: we are faster); PyTorch's flash backend takes no
explicit mask (its error is reported). Goals (issue 15, on the plain rows): forward >=
1.0x PyTorch's FlashAttention-2 backend, backward >= 0.8x; the cuDNN backend is reported
as it is.

Method (DESIGN.md section 7): CUDA events, a warm-up, L2 flushed before each repeat,
the median. With --small or without a GPU the same code runs on the emulator with tiny
shapes so the script keeps working in CI.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from typing import Any

import numpy as np
from _bench import (
    array_module_and_clock,
    geomean,
    import_cudnnlite,
    print_table,
)

GOALS = {"fwd vs flash": 1.0, "bwd vs flash": 0.8}
TOKENS = 16384
HEADS = 16


@dataclass(frozen=True)
class Row:
    b: int
    h: int
    s: int
    d: int
    causal: bool
    variant: str = "plain"  # or "padmask", "dropout" (the general kernels)


VARIANT_SEQ = 4096
DROPOUT_P = 0.1


def table(small: bool, head_dims: list[int], seqs: tuple[int, ...]) -> list[Row]:
    if small:
        return [Row(1, 2, 33, 32, True), Row(1, 2, 36, 32, False, "padmask"),
                Row(1, 2, 36, 32, False, "dropout")]  # fmt: skip
    rows = []
    for d in head_dims:
        for s in seqs:
            for causal in (False, True):
                rows.append(Row(max(1, TOKENS // s), HEADS, s, d, causal))
        for variant in ("padmask", "dropout"):
            rows.append(Row(TOKENS // VARIANT_SEQ, HEADS, VARIANT_SEQ, d, False, variant))
    return rows


def _variant_args(row: Row, xp: Any) -> dict[str, Any]:
    """The call's extra arguments for a row's variant (``xp``: numpy, cupy or torch)."""
    if row.variant == "padmask":
        keep = np.arange(row.s) < row.s - row.s // 8
        mask = np.broadcast_to(keep, (row.b, 1, 1, row.s)).copy()
        if xp.__name__ == "torch":
            return {"attn_mask": xp.as_tensor(mask, device="cuda")}
        return {"attn_mask": xp.asarray(mask)}
    if row.variant == "dropout":
        return {"dropout_p": DROPOUT_P}
    return {}


def _torch_backends(torch: Any) -> dict[str, Any]:
    from torch.nn.attention import SDPBackend

    return {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION}


def _torch_times(row: Row, dtype: str, direction: str, clock: Any) -> dict[str, Any]:
    """PyTorch's SDPA per backend on the same shapes (GPU only)."""
    try:
        import torch
        from torch.nn.attention import sdpa_kernel
    except Exception as exc:
        return {"torch_error": f"{type(exc).__name__}: {exc}"}
    if not torch.cuda.is_available():
        return {}
    tdt = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}[dtype]
    shape = (row.b, row.h, row.s, row.d)
    q, k, v = (torch.randn(shape, device="cuda", dtype=tdt, requires_grad=True) for _ in range(3))
    extra = _variant_args(row, torch)
    out: dict[str, Any] = {}
    for name, backend in _torch_backends(torch).items():
        try:
            with sdpa_kernel(backend):
                o = torch.nn.functional.scaled_dot_product_attention(
                    q, k, v, is_causal=row.causal, **extra
                )
                if direction == "fwd":

                    def fn() -> Any:
                        with torch.no_grad():
                            return torch.nn.functional.scaled_dot_product_attention(
                                q, k, v, is_causal=row.causal, **extra
                            )
                else:
                    grad_out = torch.randn_like(o)

                    def fn(o: Any = o, grad_out: Any = grad_out) -> Any:
                        return torch.autograd.grad(o, (q, k, v), grad_out, retain_graph=True)

                out[f"{name}_ms"] = clock.time_ms(fn)
        except Exception as exc:
            out[f"{name}_error"] = f"{type(exc).__name__}: {str(exc)[:80]}"
    return out


def _operands(cl: Any, row: Row, dtype: str, xp: Any) -> tuple[Any, ...]:
    npdt = {"fp16": np.float16, "fp32": np.float32, "bf16": cl.bfloat16}[dtype]
    rng = np.random.default_rng(0)
    shape = (row.b, row.h, row.s, row.d)
    return tuple(xp.asarray(rng.standard_normal(shape, dtype=np.float32).astype(npdt))
                 for _ in range(4))  # fmt: skip


def bench_row(cl: Any, row: Row, dtype: str, direction: str, clock: Any, xp: Any,
              solvers: bool) -> list[dict[str, Any]]:  # fmt: skip
    from cudnnlite.dispatch import registry
    from cudnnlite.dispatch.select import select, usable
    from cudnnlite.problems.attention import AttentionProblem
    from cudnnlite.runtime.caps import capabilities
    from cudnnlite.runtime.select import backend_by_name

    backend = backend_by_name("cuda" if xp.__name__ == "cupy" else "cpu")
    problem = AttentionProblem(row.b, row.h, row.h, row.s, row.s, row.d, row.d, dtype=dtype,
                               direction=direction, causal=row.causal,
                               mask="bool" if row.variant == "padmask" else "none",
                               dropout=row.variant == "dropout")  # fmt: skip
    q, k, v, do = _operands(cl, row, dtype, xp)
    extra = _variant_args(row, xp)
    if row.variant == "dropout":
        extra["seed"] = 1  # (the backward needs the forward's)
    o, lse = cl.scaled_dot_product_attention(q, k, v, is_causal=row.causal, return_lse=True,
                                             **extra)  # fmt: skip
    caps = capabilities(backend)
    names = ["auto"]
    if solvers:
        names += [s.name for s in registry.solvers(problem.family) if usable(s, problem, caps)]
        names = list(dict.fromkeys(names))
    chosen = select(problem, backend).solver.name
    torch = _torch_times(row, dtype, direction, clock)
    rows = []
    for name in names:
        if direction == "fwd":

            def fn(name: str = name) -> Any:
                return cl.scaled_dot_product_attention(q, k, v, is_causal=row.causal, algo=name,
                                                       **extra)  # fmt: skip
        else:

            def fn(name: str = name) -> Any:
                return cl.scaled_dot_product_attention_backward(
                    do, q, k, v, o, lse, is_causal=row.causal, algo=name, **extra
                )

        label = chosen if name == "auto" else name
        r: dict[str, Any] = dict(
            row.__dict__, dtype=dtype, direction=direction, solver=label, auto=name == "auto"
        )
        try:
            ms = clock.time_ms(fn)
            r.update(ms=ms, tflops=problem.flops() / ms / 1e9)
            for t in ("flash", "cudnn"):
                if f"{t}_ms" in torch:
                    r[f"{t}_ms"] = torch[f"{t}_ms"]
                    r[f"{t}_over_ours"] = torch[f"{t}_ms"] / ms
        except Exception as exc:  # a benchmark reports, it never stops at one failure
            r["error"] = f"{type(exc).__name__}: {str(exc)[:120]}"
        rows.append(r)
    return rows


# run_all.py's run on a GPU (the device check's time): bf16, three lengths; the command
# line's default is the whole table.
QUICK_SEQS = (1024, 4096, 16384)
ALL_SEQS = (512, 1024, 2048, 4096, 8192, 16384)


def run(small: bool = False, dtypes_: list[str] | None = None, head_dims: list[int] | None = None,
        directions: list[str] | None = None, solvers: bool = True,
        seqs: tuple[int, ...] = QUICK_SEQS) -> dict[str, Any]:  # fmt: skip
    cl = import_cudnnlite()
    gpu, xp, clock = array_module_and_clock(small)
    # (bf16 needs ml_dtypes, which the GPU box may lack)
    dts = dtypes_ or (["bf16"] if gpu and cl.dtypes.HAVE_BFLOAT16 else ["fp16"])
    solvers = solvers and gpu  # the emulator's small mode keeps CI short: the choice only
    rows: list[dict[str, Any]] = []
    for direction in directions or ["fwd", "bwd"]:
        for dtype in dts:
            for row in table(not gpu, head_dims or [64, 128], seqs):
                rows += bench_row(cl, row, dtype, direction, clock, xp, solvers)
    cols = ["dir", "dtype", "b", "h", "s", "d", "causal", "variant", "solver", "ms",
            "TFLOP/s", "flash/ours", "cudnn/ours"]  # fmt: skip
    print_table(
        f"attention on {'the GPU' if gpu else 'the emulator'} ({clock.name}); "
        f"ratio = PyTorch time / ours; goals: fwd >= {GOALS['fwd vs flash']}x flash, "
        f"bwd >= {GOALS['bwd vs flash']}x flash",
        cols,
        [[r["direction"], r["dtype"], r["b"], r["h"], r["s"], r["d"], r["causal"], r["variant"],
          ("* " if r["auto"] else "  ") + r["solver"], r.get("ms", r.get("error")),
          r.get("tflops"), r.get("flash_over_ours"), r.get("cudnn_over_ours")]
         for r in rows],
    )  # fmt: skip
    summary = {}
    for direction in ("fwd", "bwd"):
        for t in ("flash", "cudnn"):
            key = f"{t}_over_ours"
            vals = [r[key] for r in rows if r["auto"] and r["direction"] == direction
                    and r["variant"] == "plain" and key in r]  # fmt: skip
            if vals:
                summary[f"{direction} vs {t} (geo-mean)"] = geomean(vals)
    return {"target": "cuda" if gpu else "cpu", "rows": rows, "summary": summary, "goals": GOALS}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--small", action="store_true", help="emulator, tiny shapes")
    p.add_argument("--dtype", action="append", choices=("fp16", "bf16", "fp32"))
    p.add_argument("--head-dim", type=int, action="append")
    p.add_argument("--direction", action="append", choices=("fwd", "bwd"))
    p.add_argument("--no-solvers", action="store_true", help="only the dispatcher's choice")
    args = p.parse_args(argv)
    from cudnnlite import dtypes

    dts = args.dtype or (["bf16", "fp16"] if dtypes.HAVE_BFLOAT16 else ["fp16"])
    run(args.small, dts, args.head_dim, args.direction, not args.no_solvers, ALL_SEQS)
    return 0


if __name__ == "__main__":
    sys.exit(main())
