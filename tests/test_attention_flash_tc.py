"""Tensor-core FlashAttention-2 forward (cudnnlite/solvers/attention/flash_fwd.py) run
directly on every backend against the float64 reference.

Tolerance: tests/attention_support.py's assert_forward_close with tensor_cores=True (P is
rounded to the storage type before the PV MMA; scores accumulate in fp32 from exact
products of 16-bit inputs). Shapes stay tiny: the emulator runs every MMA lane by lane,
and each (dtype, head-dim bucket, config, mask, dropout) is a separate compile, so the
table below reuses a few kernels across many masking cases.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from attention_support import (
    NUMPY_DTYPE,
    assert_forward_close,
    default_scalars,
    operands,
    run_forward,
)

from cudnnlite import dtypes
from cudnnlite.errors import NotSupportedError
from cudnnlite.problems.attention import AttentionProblem
from cudnnlite.runtime.backend import Backend
from cudnnlite.runtime.caps import EMULATOR, for_sm
from cudnnlite.runtime.select import backend_by_name
from cudnnlite.solvers.attention.flash_fwd import FlashConfig, FlashTcFwdSolver, kernel_name
from cudnnlite.testing import to_backend, to_numpy

SOLVER = FlashTcFwdSolver()
SMALL = FlashConfig(64, 128, 4)  # the default for head dims <= 64


def prob(b=1, hq=2, hkv=1, sq=37, skv=70, d=64, dv=None, dtype="fp16", **kw) -> AttentionProblem:
    return AttentionProblem(b=b, hq=hq, hkv=hkv, sq=sq, skv=skv, d=d, dv=d if dv is None else dv,
                            dtype=dtype, **kw)  # fmt: skip


def _check(backend, problem, config=None, dropout_p=0.0, mask_shape=None, lengths=None,
           mask=None, scale=None):  # fmt: skip
    ops = operands(problem, mask_shape=mask_shape, lengths=lengths)
    if mask is not None:
        ops["mask"] = mask
    scalars = default_scalars(problem, dropout_p=dropout_p)
    if scale is not None:
        scalars = dataclasses.replace(scalars, scale=scale)
    o, lse = run_forward(backend, SOLVER, problem, ops, scalars, config)
    assert_forward_close(o, lse, problem, ops, scalars, tensor_cores=True)
    return o, lse


# (problem, config): few kernels (dtype, head-dim bucket, config), many masking cases.
CASES = [
    # GQA, causal bottom-right with sq < skv; the same top-left with sq > skv (BSHD).
    (prob(causal=True, align="bottom_right"), None),
    (prob(sq=70, skv=37, causal=True, layout="BSHD"), None),
    # sq > skv bottom-right: the first sq - skv rows keep nothing (0 output, lse -inf).
    (prob(sq=53, skv=19, causal=True, align="bottom_right"), None),
    # single query / key, non-power-of-two head dims with d != dv (bucket 64)
    (prob(sq=1, skv=1, d=40, dv=24), None),
    (prob(sq=1, skv=67, d=40, dv=56, hq=1), None),
    # sliding windows, alone and with causal; MQA
    (prob(hq=4, sq=61, skv=61, window=(5, -1)), None),
    (prob(hq=4, sq=61, skv=47, window=(9, 3), causal=True, align="bottom_right"), None),
    # bf16, 8 warps, head dim 32 bucket
    (prob(dtype="bf16", sq=67, skv=53, d=24, dv=32, causal=True), FlashConfig(128, 64, 8)),
    (prob(dtype="bf16", b=2, hq=2, hkv=2, sq=29, skv=70, d=32, layout="BSHD"),
     FlashConfig(128, 64, 8)),
    # head dim 128 with 8 warps and 32-key tiles; 96 pads to 128
    (prob(sq=43, skv=59, d=96, dv=128, causal=True), FlashConfig(128, 32, 8)),
]  # fmt: skip


@pytest.mark.parametrize("problem,config", CASES, ids=lambda x: getattr(x, "key", lambda: x)())
def test_forward(backend, problem, config):
    _check(backend, problem, config)


# The kernel scales in one FFMA after the row max of the raw scores, so a negative scale
# flips Q's signs (the max of -s); 0 keeps every kept key at weight 1. Interior tiles
# (skv = 130: tile 0 of block 0, 128 keys) and masked ones (tile 1; causal), then explicit
# masks.
@pytest.mark.parametrize("scale", [-0.3, 0.0])
def test_negative_and_zero_scale(backend, scale):
    _check(backend, prob(hq=1, sq=70, skv=130), scale=scale)
    _check(backend, prob(hq=1, sq=70, skv=70, causal=True), scale=scale)


# The mask tests run the mask + dropout kernels (fewer compiles), without and with dropout.
def test_fully_masked_rows_bool_mask_head_dim_256(backend):
    # (sq, skv) bool mask broadcast over batch and heads; rows 3 and 7 keep nothing.
    p = prob(sq=17, skv=29, d=256, dv=136, mask="bool", dropout=True)
    rng = np.random.default_rng(1)
    mask = rng.random((17, 29)) > 0.3
    mask[[3, 7]] = False
    _, lse = _check(backend, p, mask=mask)
    assert np.isneginf(lse[:, :, [3, 7]]).all()
    _check(backend, p, mask=mask, dropout_p=0.25)
    _check(backend, p, mask=mask, scale=-0.2)  # Q from shared memory, negated there


def test_additive_mask_broadcast_bf16(backend):
    # (b, 1, 1, skv) additive mask with -inf entries, plus causal; then dropout with an
    # odd skv (the Philox pairs of a row straddle groups of four) and GQA.
    p = prob(dtype="bf16", b=2, sq=23, skv=41, mask="additive", causal=True, dropout=True)
    rng = np.random.default_rng(2)
    m = rng.standard_normal((2, 1, 1, 41)).astype(np.float32)
    m[0, 0, 0, :5] = -np.inf
    _check(backend, p, mask=m.astype(NUMPY_DTYPE["bf16"]))
    _check(backend, p, mask=m.astype(NUMPY_DTYPE["bf16"]), dropout_p=0.2)
    _check(backend, p, mask=m.astype(NUMPY_DTYPE["bf16"]), scale=-0.25)


def test_masks_strided_along_keys(backend):
    # The forward's strided-mask tile loop (key stride != 1): masks broadcast along keys
    # (stride 0) against the reference; a transposed mask (key stride sq) through the public
    # function, bit for bit the answer of its contiguous copy.
    p = prob(dtype="bf16", b=2, sq=23, skv=41, mask="additive", causal=True, dropout=True)
    rng = np.random.default_rng(5)
    if "bf16" in NUMPY_DTYPE:  # (ml_dtypes)
        _check(backend, p, mask=rng.standard_normal((23, 1)).astype(NUMPY_DTYPE["bf16"]))
    pb = prob(sq=17, skv=29, d=256, dv=136, mask="bool", dropout=True)
    _check(backend, pb, mask=rng.random((17, 1)) > 0.3)
    import cudnnlite as cl

    ops = operands(p)
    q, k, v = (to_backend(ops[n], backend) for n in "qkv")
    m = rng.standard_normal((41, 23)).astype(NUMPY_DTYPE["bf16"])
    m[:3, 4] = -np.inf
    strided = to_backend(m, backend).T  # (23, 41), key stride 23
    assert strided.strides[-1] == 23 * m.itemsize
    contiguous = to_backend(np.ascontiguousarray(m.T), backend)
    kw = dict(is_causal=True, dropout_p=0.2, seed=3, algo="sdpa_fwd_flash_tc", enable_gqa=True)
    got = cl.scaled_dot_product_attention(q, k, v, strided, **kw)
    want = cl.scaled_dot_product_attention(q, k, v, contiguous, **kw)
    np.testing.assert_array_equal(to_numpy(got), to_numpy(want))


def test_mask_key_stride_beyond_32_bits_is_refused() -> None:
    import cudnnlite as cl

    p = prob(dtype="bf16", b=2, sq=5, skv=2, mask="additive", causal=True, dropout=True)
    ops = operands(p)
    base = np.zeros(2**23 + 1, NUMPY_DTYPE["bf16"])  # 16 MB: keys 0 and 2^23 of it
    mask = np.lib.stride_tricks.as_strided(base, (p.sq, p.skv), (0, 2**24))
    with pytest.raises(NotSupportedError, match="key stride"):
        cl.scaled_dot_product_attention(ops["q"], ops["k"], ops["v"], mask, 0.2, True, seed=1,
                                        algo="sdpa_fwd_flash_tc", enable_gqa=True)  # fmt: skip


def test_dropout_keys_multiple_of_four(backend):
    # skv % 4 == 0: lanes t and t ^ 1 share each Philox group's draw (a shuffle); 128-key
    # tiles take two 8-tile chunks of keep bits; causal masks the last tile.
    p = prob(sq=37, skv=132, causal=True, align="bottom_right", dropout=True)
    _check(backend, p, SMALL, dropout_p=0.3)


def test_varlen_lengths_zero_and_one(backend):
    p = prob(b=3, hq=1, hkv=1, sq=37, skv=45, varlen=True, causal=True, align="bottom_right")
    o, lse = _check(backend, p, lengths=([0, 1, 37], [5, 0, 44]))
    assert (o[0] == 0).all() and np.isneginf(lse[0]).all()
    assert np.isneginf(lse[1]).all()  # one query row, no keys


def test_applicability_reasons():
    def reason(caps=EMULATOR, **kw):
        return SOLVER.is_applicable(prob(**kw), caps).reason

    assert SOLVER.is_applicable(prob(), EMULATOR)
    assert "fp16 or bf16" in reason(dtype="fp32")
    assert "multiples of 8" in reason(d=12)
    assert "multiples of 8" in reason(dv=20, d=16)
    assert "d, dv <= 256" in reason(d=264)
    assert "sm_80" in reason(for_sm(75), dtype="bf16")
    assert SOLVER.is_applicable(prob(), for_sm(75))
    assert "sm_75" in reason(for_sm(70))
    bwd = AttentionProblem(1, 1, 1, 8, 8, 64, 64, dtype="fp16", direction="bwd")
    assert "forward" in SOLVER.is_applicable(bwd, EMULATOR).reason


def test_configs_and_names():
    with pytest.raises(ValueError):
        FlashConfig(100, 64, 4)
    with pytest.raises(ValueError):
        FlashConfig(64, 48, 4)
    for d in (8, 64, 72, 128, 256):
        p = prob(d=d, sq=4096, skv=4096)
        cfgs = SOLVER.configs(p, for_sm(90))
        assert cfgs and SOLVER.default_config(p, for_sm(90)) in cfgs
        assert all(SOLVER.is_valid(c, p, for_sm(90)) for c in cfgs)
    with pytest.raises(ValueError):
        FlashConfig(128, 64, 4)  # 32 rows per warp spill
    assert len(SOLVER.module_specs()) <= 4
    runner = SOLVER.prepare(_cpu(), prob(d=40), SMALL)  # compiled by test_forward already
    assert runner.kernel_names == ["sdpa_flash_fwd_tc_64x128_d64_w4_s2_fp16"]
    if dtypes.BFLOAT16 is None:
        return  # (the name below needs the bf16 DType: ml_dtypes)
    name = kernel_name(dtypes.BFLOAT16, 256, FlashConfig(64, 32, 4), "additive", True)
    assert name == "sdpa_flash_fwd_tc_64x32_d256_w4_s2_mask_add_drop_bf16"


def _cpu() -> Backend:
    return backend_by_name("cpu")


@pytest.mark.parametrize("dtype,scale", [("bf16", 1e5), ("bf16", 1e9), ("fp16", 200.0)])
def test_huge_logits_stay_finite(backend, dtype, scale):
    # Logits of 1e10-1e18 (well inside fp32): the row max is scaled with upward rounding,
    # so no s * c - m rounds above 0 and exp2 never overflows (a row of NaN before). The
    # output is a convex combination of v's rows: inside their range column by column.
    import cudnnlite as cl

    rng = np.random.default_rng(5)
    dt = NUMPY_DTYPE[dtype]
    q = (rng.standard_normal((1, 1, 4, 16)) * scale).astype(dt)
    k = (rng.standard_normal((1, 1, 8, 16)) * scale).astype(dt)
    v = rng.standard_normal((1, 1, 8, 16)).astype(dt)
    o = to_numpy(cl.scaled_dot_product_attention(
        *(to_backend(a, backend) for a in (q, k, v)), algo="sdpa_fwd_flash_tc")).astype(float)
    vf = v.astype(float)[0, 0]
    assert np.isfinite(o).all()
    assert (o >= vf.min(0) - 1e-2).all() and (o <= vf.max(0) + 1e-2).all()
