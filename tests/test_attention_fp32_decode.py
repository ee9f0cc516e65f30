"""The CUDA-core attention solvers (``sdpa_fwd_flash_fp32``, ``sdpa_bwd_flash_fp32``) and
flash-decoding (``sdpa_fwd_flash_decode``), each run directly against the float64
reference: every dtype, odd and non-power-of-two head dims (scalar and vector loads),
GQA/MQA, causal both alignments with sq != skv, windows, bool/additive masks with
broadcast shapes, varlen with lengths 0 and 1, fully masked rows, dropout, both layouts.

Backward tolerance, per gradient tensor g (dq, dk, dv, dmask) with reference r:
    |g - r| <= out_eps * |r| + (4 * out_eps + 2^-14) * max|r| + 1e-6
  - out_eps * |r|: the gradient's own rounding to the storage dtype;
  - 4 * out_eps * max|r|: the backward reads o as the forward stored it (fp16/bf16), so
    delta = rowsum(dout * o) carries o's rounding, out_eps relative to sum |dout||o| over
    dv terms (larger than |delta| itself), and dS = P (dP - delta) passes it to dq, dk and
    dmask at the scale of the gradients (measured: 2.7 out_eps on the bf16 dv = 72 case,
    0.3 on fp16); the inputs' own rounding does not count (the reference runs on the
    stored values);
  - 2^-14 * max|r|: fp32 math: the scores and dP accumulate over d <= 256 products and the
    gradients over sq / skv <= 70 terms (each ~2^-24 relative, summed in magnitude), P is
    recomputed from the forward's fp32 lse (2^-16 relative, as the forward's bound), and
    the gradients cancel (dS sums to 0 over a row), so the error is relative to the
    tensor's scale, not to each (possibly cancelled) element.
"""

from __future__ import annotations

import numpy as np
import pytest
from attention_support import (
    OUT_EPS,
    assert_forward_close,
    default_scalars,
    operands,
    reference_backward,
    run_backward,
    run_forward,
)

from cudnnlite.problems.attention import AttentionProblem
from cudnnlite.runtime.caps import EMULATOR, for_sm
from cudnnlite.solvers.attention.flash_decode import DecodeConfig, FlashDecodeSolver
from cudnnlite.solvers.attention.flash_fp32 import FlashFp32BwdSolver, FlashFp32FwdSolver

FWD, BWD, DECODE = FlashFp32FwdSolver(), FlashFp32BwdSolver(), FlashDecodeSolver()

# (problem fields, operand options, dropout p)
CASES = [
    # GQA, odd head dims (scalar loads), sq != skv, several query tiles
    (dict(b=1, hq=2, hkv=1, sq=67, skv=45, d=24, dv=40), {}, 0.0),
    # the smallest problem
    (dict(b=1, hq=1, hkv=1, sq=1, skv=1, d=1, dv=1), {}, 0.0),
    # bottom-right causal with sq > skv: the first rows keep nothing; BSHD; vector loads
    (
        dict(
            b=2,
            hq=2,
            hkv=2,
            sq=29,
            skv=13,
            d=64,
            dv=64,
            causal=True,
            align="bottom_right",
            layout="BSHD",
            dtype="fp16",
        ),
        {},
        0.0,
    ),  # fmt: skip
    # top-left causal and a window, head tile 128, bf16
    (
        dict(
            b=1, hq=2, hkv=1, sq=23, skv=67, d=128, dv=72, causal=True, window=(7, 2), dtype="bf16"
        ),
        {},
        0.0,
    ),  # fmt: skip
    # MQA, a bool mask broadcast over (b, h), a prime head dim
    (
        dict(b=1, hq=4, hkv=1, sq=19, skv=37, d=17, dv=33, mask="bool"),
        dict(mask_shape=(19, 37)),
        0.0,
    ),  # fmt: skip
    # additive mask over keys (b, 1, 1, skv), varlen with lengths 0 and 1, dropout
    (
        dict(
            b=3, hq=2, hkv=2, sq=11, skv=41, d=32, dv=16, mask="additive", varlen=True, dropout=True
        ),
        dict(mask_shape=(3, 1, 1, 41), lengths=([0, 11, 1], [5, 1, 41])),
        0.25,
    ),  # fmt: skip
    # dropout with skv % 4 == 0: four lanes share each Philox group's draw (drop_row);
    # GQA, causal bottom-right
    (
        dict(b=1, hq=2, hkv=1, sq=13, skv=44, d=32, dv=32, causal=True,
             align="bottom_right", dropout=True),
        {},
        0.3,
    ),  # fmt: skip
    # 16-bit additive masks (read as their bits, decoded per dtype): bf16 per (h, i, j)
    # with causal; fp16 over (sq, skv)
    (
        dict(b=1, hq=2, hkv=1, sq=21, skv=45, d=40, dv=40, mask="additive", causal=True,
             dtype="bf16"),
        dict(mask_shape=(1, 2, 21, 45)),
        0.0,
    ),  # fmt: skip
    (
        dict(b=1, hq=1, hkv=1, sq=9, skv=20, d=16, dv=16, mask="additive", dtype="fp16"),
        dict(mask_shape=(9, 20)),
        0.0,
    ),  # fmt: skip
    # head tile 256, window bottom-right, dropout
    (
        dict(
            b=1,
            hq=2,
            hkv=2,
            sq=7,
            skv=33,
            d=200,
            dv=256,
            window=(4, 1),
            align="bottom_right",
            dropout=True,
            dtype="fp16",
        ),
        {},
        0.2,
    ),  # fmt: skip
]


def _case(i: int) -> tuple[AttentionProblem, dict, object]:
    fields, opts, p_drop = CASES[i]
    problem = AttentionProblem(**fields)
    ops = operands(problem, seed=i, **opts)
    return problem, ops, default_scalars(problem, dropout_p=p_drop)


def assert_backward_close(got: dict, problem: AttentionProblem, ops: dict, scalars) -> None:
    """Gradients against the reference at the bound of the module docstring."""
    eps = OUT_EPS[problem.dtype]
    ref = dict(zip(("dq", "dk", "dv", "dmask"), reference_backward(problem, ops, scalars),
                   strict=True))  # fmt: skip
    for name in ("dq", "dk", "dv", "dmask"):
        if ref[name] is None:
            assert name not in got
            continue
        r = ref[name]
        g = got[name].astype(np.float64)
        bound = eps * np.abs(r) + (4 * eps + 2.0**-14) * np.abs(r).max() + 1e-6
        err = np.abs(g - r)
        bad = ~(err <= bound)
        assert not bad.any(), (
            f"{problem.key()} {name}: {bad.sum()} of {bad.size} off, worst "
            f"{np.nanmax(err - bound):.3g} over the bound (max|r| {np.abs(r).max():.3g})"
        )


@pytest.mark.parametrize("i", range(len(CASES)))
def test_forward_and_backward(backend: str, i: int) -> None:
    problem, ops, scalars = _case(i)
    o, lse = run_forward(backend, FWD, problem, ops, scalars)
    assert_forward_close(o, lse, problem, ops, scalars, tensor_cores=False, what="fp32 fwd")
    grads = run_backward(backend, BWD, problem.backward(), ops, scalars, o, lse)
    assert_backward_close(grads, problem, ops, scalars)


def test_fully_masked_rows(backend: str) -> None:
    """Rows that a bool mask empties give o = 0, lse = -inf and zero gradients."""
    problem = AttentionProblem(b=1, hq=1, hkv=1, sq=9, skv=70, d=8, dv=8, mask="bool")
    ops = operands(problem, seed=3)
    ops["mask"][0, 0, 2] = False
    ops["mask"][0, 0, 7] = False
    scalars = default_scalars(problem)
    o, lse = run_forward(backend, FWD, problem, ops, scalars)
    assert np.all(o[0, 0, [2, 7]] == 0) and np.all(np.isneginf(lse[0, 0, [2, 7]]))
    assert_forward_close(o, lse, problem, ops, scalars, tensor_cores=False)
    grads = run_backward(backend, BWD, problem.backward(), ops, scalars, o, lse)
    assert np.all(grads["dq"][0, 0, [2, 7]] == 0)
    assert_backward_close(grads, problem, ops, scalars)


# (problem fields, operand options, dropout p, config: None = the default)
DECODE_CASES = [
    # MHA decode, odd dims, the default split
    (dict(b=1, hq=2, hkv=1, sq=1, skv=45, d=24, dv=40), {}, 0.0, None),
    # GQA group 4 x sq 5 = 20 rows (two row blocks), more splits than key tiles (empty
    # splits), bottom-right causal, fp16
    (
        dict(
            b=2,
            hq=4,
            hkv=1,
            sq=5,
            skv=70,
            d=64,
            dv=64,
            causal=True,
            align="bottom_right",
            dtype="fp16",
        ),
        {},
        0.0,
        DecodeConfig(64, 3),
    ),  # fmt: skip
    # additive mask over keys, a prime head dim, three splits
    (
        dict(b=1, hq=8, hkv=2, sq=3, skv=67, d=7, dv=13, mask="additive"),
        dict(mask_shape=(1, 1, 1, 67)),
        0.0,
        DecodeConfig(64, 2),
    ),  # fmt: skip
    # window, varlen with lengths 0 and 1 (keys), dropout, bf16, BSHD
    (
        dict(
            b=3,
            hq=2,
            hkv=1,
            sq=9,
            skv=61,
            d=16,
            dv=16,
            window=(5, 3),
            varlen=True,
            dropout=True,
            dtype="bf16",
            layout="BSHD",
        ),
        dict(lengths=([0, 7, 9], [61, 1, 40])),
        0.3,
        None,
    ),  # fmt: skip
    # sq = 16 (the limit), a bool mask, head tile 256, causal top-left
    (
        dict(b=1, hq=2, hkv=2, sq=16, skv=40, d=130, dv=200, mask="bool", causal=True),
        {},
        0.0,
        DecodeConfig(32, 2),
    ),  # fmt: skip
]


@pytest.mark.parametrize("i", range(len(DECODE_CASES)))
def test_decode(backend: str, i: int) -> None:
    fields, opts, p_drop, config = DECODE_CASES[i]
    problem = AttentionProblem(**fields)
    ops = operands(problem, seed=10 + i, **opts)
    scalars = default_scalars(problem, dropout_p=p_drop)
    o, lse = run_forward(backend, DECODE, problem, ops, scalars, config=config)
    assert_forward_close(o, lse, problem, ops, scalars, tensor_cores=False, what="decode")


def test_decode_splits_fill_two_waves() -> None:
    """b * hkv * row blocks * splits ~ 2 waves of the SMs, at least one key tile a split."""
    problem = AttentionProblem(b=1, hq=32, hkv=8, sq=1, skv=8192, d=128, dv=128, dtype="fp16")
    cfg = DECODE.default_config(problem, for_sm(90))
    assert cfg == DecodeConfig(64, 33)  # 8 blocks x 33 >= 2 x 132
    short = AttentionProblem(b=1, hq=8, hkv=8, sq=1, skv=100, d=64, dv=64)
    assert DECODE.default_config(short, for_sm(90)).splits == 2  # two key tiles
    big = AttentionProblem(b=64, hq=32, hkv=32, sq=1, skv=4096, d=64, dv=64)
    assert DECODE.default_config(big, for_sm(90)).splits == 1
    assert cfg in DECODE.configs(problem, for_sm(90))


def test_applicability_reasons() -> None:
    huge = AttentionProblem(b=1, hq=1, hkv=1, sq=4, skv=4, d=300, dv=64)
    for solver in (FWD, BWD, DECODE):
        ok = solver.is_applicable(huge, EMULATOR)
        assert not ok and "head dims" in ok.reason
        empty = AttentionProblem(b=1, hq=1, hkv=1, sq=0, skv=4, d=8, dv=8)
        assert "sq and skv" in solver.is_applicable(empty, EMULATOR).reason
    long_q = AttentionProblem(b=1, hq=1, hkv=1, sq=17, skv=64, d=64, dv=64)
    ok = DECODE.is_applicable(long_q, EMULATOR)
    assert not ok and "sq <= 16" in ok.reason
    assert FWD.is_applicable(long_q, EMULATOR)
    wide = AttentionProblem(b=1, hq=1, hkv=1, sq=4, skv=4, d=256, dv=256)
    for solver in (FWD, BWD):  # over 100 KiB of shared memory: more than sm_75 gives
        ok = solver.is_applicable(wide, for_sm(75))
        assert not ok and "shared memory" in ok.reason
        assert solver.is_applicable(wide, for_sm(90))


def test_module_budget() -> None:
    """Three solvers, two modules for fp32 / fp16 / bf16 (the dtype is a run-time
    argument) and two for fp64 (the double kernels): the NVRTC check's share of CI stays
    small."""
    specs = {*FWD.module_specs(), *BWD.module_specs(), *DECODE.module_specs()}
    assert len(specs) <= 4
    fp64 = [s for s in specs if any("double" in n for n in s.names)]
    assert len(fp64) == 2
    assert sum(len(s.names) for s in specs if s not in fp64) <= 16
    assert sum(len(s.names) for s in fp64) <= 16


def test_dmask_rows_past_every_key_stay_in_bounds(
    backend: str, emulator_only: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Top-left window with sq > skv + left: the last query tiles see no key, and their
    key range starts past skv. The dQ kernel's dmask zero-fill must stay inside the rows
    (it once wrote up to br.lo > skv columns: past the end of dmask, caught by ASan)."""
    problem = AttentionProblem(b=1, hq=1, hkv=1, sq=96, skv=10, d=8, dv=8, window=(0, 0),
                               mask="additive")  # fmt: skip
    ops = operands(problem, seed=5)
    scalars = default_scalars(problem)
    o, lse = run_forward(backend, FWD, problem, ops, scalars)
    monkeypatch.setenv("CUDNNLITE_EMU_ASAN", "1")
    grads = run_backward(backend, BWD, problem.backward(), ops, scalars, o, lse)
    assert_backward_close(grads, problem, ops, scalars)
