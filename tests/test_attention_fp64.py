"""float64 scaled dot-product attention on the emulator: the CUDA-core flash solvers
(forward, backward, decode) and the unfused solvers against the float64 reference, a
central-difference check of the backward, and the refusals (tensor-core solvers, mixed
dtypes, a float32 lse).

Tolerance (``_bounds``), per element, with u = ACCUMULATION_EPS["fp64"] = 2^-52 (one
double rounding in the kernel and one in the reference's different summation order):
  - every probability P = exp(s - lse) carries a relative error of at most
    c_p = u * (d * smag + skv + 16): the score is a sum of d products (error d * u times
    the scores' absolute magnitude smag = max scale * sum|q||k| + max|mask|, which the
    exponent turns into a relative error of P), the normalizer a sum of skv terms, and a
    handful of exp2 / log2 / scale products of 1-2 ulps each (16);
  - out = sum_j P v: c_p + skv * u relative to M_o = P |v| (a sum of skv products);
  - lse: c_p absolute plus u |lse| (its own rounding);
  - dS = P (dP * keep - delta) with dP, delta sums of dv products: relative to
    M_ds = P (keep |dout| |v|^T + |dout| . |o|); dq = scale dS k sums skv terms, dk =
    scale dS^T q and dv = P^T dout sum group * sq terms: c_p + u * (dv + skv + group *
    sq + 16) relative to the same products of magnitudes (M_dq = scale M_ds |k|, ...).
These magnitudes come from the reference itself (P from a forward with v = identity), so
the bounds hold for any masking; the observed errors sit two to three orders below them
(error / bound 0.001 to 0.03 over these cases; a float32 rounding anywhere would exceed
them by about 10^7).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from attention_support import (
    default_scalars,
    operands,
    reference_backward,
    reference_forward,
    run_backward,
    run_forward,
)

import cudnnlite as cl
from cudnnlite.dispatch import registry
from cudnnlite.dispatch.plans import get_plan
from cudnnlite.errors import BadParamError, NotSupportedError
from cudnnlite.problems.attention import AttentionProblem
from cudnnlite.reference.attention import sdpa_forward
from cudnnlite.reference.dropout import dropout_mask
from cudnnlite.runtime.select import backend_by_name
from cudnnlite.solvers.attention.common import Scalars
from cudnnlite.solvers.attention.flash_decode import DecodeConfig, FlashDecodeSolver, block_n
from cudnnlite.testing import ACCUMULATION_EPS

U = ACCUMULATION_EPS["fp64"]


def _p(**kw) -> AttentionProblem:
    base = dict(b=1, hq=2, hkv=1, sq=5, skv=7, d=8, dv=8, dtype="fp64")
    return AttentionProblem(**{**base, **kw})


# Odd sequence lengths everywhere; key counts that cross the fp64 key tiles (32, 16).
CASES = {
    # causal + GQA (4 query heads on 2 kv heads), BHSD, vector loads (d, dv multiples of 4)
    "causal_gqa": (_p(b=2, hq=4, hkv=2, sq=13, skv=37, d=24, dv=16, causal=True), {}),
    # a broadcast bool mask, BSHD, head dims that force scalar loads, bottom-right causal
    "bool_mask_odd_dims": (
        _p(sq=9, skv=21, d=5, dv=7, layout="BSHD", causal=True, align="bottom_right", mask="bool"),
        {"mask_shape": (9, 21)},
    ),  # fmt: skip
    # additive mask (dmask checked), window, dropout and lengths; head dim 100 (HD 128 tile)
    "additive_window_dropout": (
        _p(
            hq=2,
            hkv=2,
            sq=11,
            skv=19,
            d=100,
            dv=36,
            window=(6, 3),
            mask="additive",
            dropout=True,
            varlen=True,
        ),
        {"lengths": ([9], [17]), "dropout_p": 0.25},
    ),  # fmt: skip
}


def _bhsd(a: np.ndarray, problem: AttentionProblem) -> np.ndarray:
    return a.swapaxes(1, 2) if problem.layout == "BSHD" else a


def _probabilities(problem: AttentionProblem, ops: dict, scalars: Scalars) -> np.ndarray:
    """The reference's undropped P (b, hq, sq, skv): its forward with v = identity."""
    eye = np.broadcast_to(np.eye(problem.skv), (problem.b, problem.hkv, problem.skv, problem.skv))
    kw = dict(ops, v=_bhsd(eye, problem) if problem.layout == "BSHD" else eye)
    no_drop = Scalars(scalars.scale, 0.0, scalars.seed, scalars.offset)
    p, _ = reference_forward(problem, kw, no_drop)
    return _bhsd(p, problem)


def _bounds(problem: AttentionProblem, ops: dict, scalars: Scalars, o: np.ndarray) -> dict:
    """Per-element error bounds of out, lse, dq, dk, dv, dmask (module docstring)."""
    pb = problem
    q, k, v, do = (_bhsd(np.abs(ops[n]), pb) for n in ("q", "k", "v", "dout"))
    g = pb.group
    kk, vv = np.repeat(k, g, axis=1), np.repeat(v, g, axis=1)
    smag = scalars.scale * np.einsum("bhid,bhjd->bhij", q, kk).max()
    if pb.mask == "additive":
        smag += np.abs(ops["mask"]).max()
    c_p = U * (pb.d * smag + pb.skv + 16)
    P = _probabilities(pb, ops, scalars)
    keep = 1.0
    if pb.dropout:
        from cudnnlite.solvers.attention.common import drop_scale

        keep = dropout_mask(P.shape, scalars.dropout_p, scalars.seed, scalars.offset)
        keep = keep * drop_scale(scalars.dropout_p, True)
    m_o = np.einsum("bhij,bhjd->bhid", P * keep, vv)
    oo = _bhsd(np.abs(o), pb)
    m_ds = P * (keep * np.einsum("bhid,bhjd->bhij", do, vv) + (do * oo).sum(-1, keepdims=True))

    def fold(a: np.ndarray) -> np.ndarray:
        return a.reshape(pb.b, pb.hkv, g, *a.shape[2:]).sum(axis=2)

    c_g = c_p + U * (pb.dv + pb.skv + g * pb.sq + 16)
    return {
        "out": _bhsd((c_p + pb.skv * U) * m_o, pb),
        "lse_c": c_p,
        "dq": _bhsd(c_g * scalars.scale * np.einsum("bhij,bhjd->bhid", m_ds, kk), pb),
        "dk": _bhsd(c_g * scalars.scale * fold(np.einsum("bhij,bhid->bhjd", m_ds, q)), pb),
        "dv": _bhsd(c_g * fold(np.einsum("bhij,bhid->bhjd", P * keep, do)), pb),
        "dmask": c_g * m_ds,
    }


def _within(got: np.ndarray, ref: np.ndarray, bound: np.ndarray, what: str) -> float:
    """Asserts |got - ref| <= bound (NaN fails); returns the largest error / bound ratio."""
    assert got.dtype == np.float64, f"{what}: {got.dtype}"
    err = np.abs(got - ref)
    bad = ~(err <= bound)
    if bad.any():
        i = tuple(np.argwhere(bad)[0])
        raise AssertionError(f"{what}: {bad.sum()} of {bad.size} off; first at {i}: got "
                             f"{got[i]!r}, ref {ref[i]!r}, bound {bound[i]:.3g}")  # fmt: skip
    nz = bound > 0
    return float((err[nz] / bound[nz]).max()) if nz.any() else 0.0


def _check_forward(problem, ops, scalars, o, lse) -> dict:
    ref_o, ref_lse = reference_forward(problem, ops, scalars)
    bd = _bounds(problem, ops, scalars, ref_o)
    _within(o, ref_o, bd["out"], f"{problem.key()} out")
    assert lse.dtype == np.float64
    assert np.array_equal(np.isneginf(lse), np.isneginf(ref_lse)), "lse -inf rows"
    fin = np.isfinite(ref_lse)
    lse_bound = bd["lse_c"] + U * np.abs(np.where(fin, ref_lse, 0.0))
    _within(np.where(fin, lse, 0.0), np.where(fin, ref_lse, 0.0), lse_bound, "lse")
    return bd


def _check_solvers(problem: AttentionProblem, extra: dict, seed: int, fwd: str,
                   bwd: str | None = None) -> None:
    """The forward solver ``fwd`` (and the backward ``bwd`` on its output) against the
    reference within the bounds above; ``extra``: operands' options and ``dropout_p``."""
    extra = dict(extra)
    dropout_p = extra.pop("dropout_p", 0.0)
    ops = operands(problem, seed=seed, **extra)
    scalars = default_scalars(problem, dropout_p=dropout_p)
    o, lse = run_forward("cpu", registry.get(fwd), problem, ops, scalars)
    bd = _check_forward(problem, ops, scalars, o, lse)
    if bwd is None:
        return
    bwd_problem = dataclasses.replace(problem, direction="bwd")
    grads = run_backward("cpu", registry.get(bwd), bwd_problem, ops, scalars, o, lse)
    ref = dict(zip(("dq", "dk", "dv", "dmask"), reference_backward(bwd_problem, ops, scalars),
                   strict=True))  # fmt: skip
    assert {"dq", "dk", "dv"} <= set(grads)
    for name in grads:
        _within(grads[name], ref[name], bd[name], f"{problem.key()} {bwd} {name}")


@pytest.mark.parametrize("flash", [True, False], ids=["flash_fp32", "unfused"])
@pytest.mark.parametrize("case", list(CASES))
def test_fp64_forward_backward_match_reference(case: str, flash: bool) -> None:
    names = ("sdpa_fwd_flash_fp32", "sdpa_bwd_flash_fp32") if flash else (
        "sdpa_fwd_unfused", "sdpa_bwd_unfused")  # fmt: skip
    _check_solvers(*CASES[case], 3, *names)


def test_fp64_decode_matches_reference() -> None:
    """The split-KV decode kernel in double: several splits merged by the combine kernel,
    GQA (4 query heads per kv head), bottom-right causal, lengths."""
    problem = _p(b=2, hq=4, hkv=1, sq=3, skv=70, d=32, dv=20, causal=True,
                 align="bottom_right", varlen=True)  # fmt: skip
    ops = operands(problem, seed=5, lengths=([3, 2], [70, 45]))
    scalars = default_scalars(problem)
    cfg = DecodeConfig(block_n(problem), splits=3)  # 16-key tiles: 5 tiles over 3 splits
    o, lse = run_forward("cpu", FlashDecodeSolver(), problem, ops, scalars, cfg)
    _check_forward(problem, ops, scalars, o, lse)


def _loss(q, k, v, m, w) -> float:
    o = cl.scaled_dot_product_attention(q, k, v, attn_mask=m, enable_gqa=True)
    return float((o * w).sum())


def test_fp64_backward_matches_central_differences() -> None:
    """dq, dk, dv and dmask of the op (the CUDA-core flash solvers) against central
    differences of its forward, f = sum(out * w), on a tiny GQA problem with an additive
    mask. Step h = 2^-16 (exact in binary, so x +- h is exact): the truncation error is
    h^2 / 6 |f'''| ~ 4e-11 for |f'''| ~ 1, the rounding error of the difference quotient
    u |f| / h ~ 1e-11 (f is a double sum of a few dozen terms of size ~1); 2e-9 leaves
    a margin of ~20 for larger third derivatives."""
    rng = np.random.default_rng(11)
    q = rng.standard_normal((1, 2, 3, 4))
    k = rng.standard_normal((1, 1, 5, 4))
    v = rng.standard_normal((1, 1, 5, 3))
    m = rng.standard_normal((3, 5))
    w = rng.standard_normal((1, 2, 3, 3))
    o, lse = cl.scaled_dot_product_attention(q, k, v, attn_mask=m, enable_gqa=True,
                                             return_lse=True)  # fmt: skip
    assert o.dtype == lse.dtype == np.float64
    grads = cl.scaled_dot_product_attention_backward(w, q, k, v, o, lse, m, enable_gqa=True,
                                                     mask_grad=True)  # fmt: skip
    h = 2.0**-16
    args = [q, k, v, m]
    for which, (x, g) in enumerate(zip(args, grads, strict=True)):
        assert g.dtype == np.float64 and g.shape == x.shape
        fd = np.empty_like(x)
        for idx in np.ndindex(x.shape):
            xp, xm = x.copy(), x.copy()
            xp[idx] += h
            xm[idx] -= h
            plus = _loss(*[xp if i == which else a for i, a in enumerate(args)], w)
            minus = _loss(*[xm if i == which else a for i, a in enumerate(args)], w)
            fd[idx] = (plus - minus) / (2 * h)
        np.testing.assert_allclose(g, fd, rtol=0, atol=2e-9, err_msg="qkvm"[which])


def test_fp64_dispatch_and_dtypes() -> None:
    """The dispatcher takes a CUDA-core solver for float64; lse and the mask's gradient are
    float64; the dropout mask is the float32 one (only the scale is exact)."""
    backend = backend_by_name("cpu")
    for direction, want in (("fwd", "sdpa_fwd_flash_fp32"), ("bwd", "sdpa_bwd_flash_fp32")):
        p = _p(sq=33, skv=33, d=64, dv=64, direction=direction)
        assert get_plan(backend, p, "auto").solver.name == want
    rng = np.random.default_rng(2)
    q, k, v = (rng.standard_normal((1, 2, 6, 8)) for _ in range(3))
    o64, lse = cl.scaled_dot_product_attention(q, k, v, dropout_p=0.3, seed=9, return_lse=True)
    assert o64.dtype == lse.dtype == np.float64
    # With v = identity, out = P * keep * scale: its zeros are the dropped entries, the
    # same for float64 and float32.
    eye = np.broadcast_to(np.eye(6), (1, 2, 6, 6))
    p64 = cl.scaled_dot_product_attention(q, k, eye, dropout_p=0.3, seed=9)
    p32 = cl.scaled_dot_product_attention(*(a.astype(np.float32) for a in (q, k, eye)),
                                          dropout_p=0.3, seed=9)  # fmt: skip
    assert np.array_equal(p64 == 0, p32 == 0) and (p64 == 0).any()
    # The scale is 1 / 0.7 in double: float32's rounding of it (relative 2e-8) would fail
    # this; P's own error is c_p ~ U * (d * smag + skv + 16) < 100 U (d = 8, smag < 4).
    ref, _ = sdpa_forward(q, k, eye, dropout_p=0.3, seed=9, exact_dropout_scale=True)
    np.testing.assert_allclose(p64, ref, rtol=100 * U, atol=0)


def test_fp64_refusals() -> None:
    """Forced tensor-core solvers say they cannot run float64; mixed dtypes and a float32
    lse for float64 inputs are clear BadParamErrors."""
    rng = np.random.default_rng(4)
    q, k, v = (rng.standard_normal((1, 2, 8, 16)) for _ in range(3))
    for algo in ("sdpa_fwd_flash_tc",):
        with pytest.raises(NotSupportedError, match=f"{algo} cannot run .*fp64"):
            cl.scaled_dot_product_attention(q, k, v, algo=algo)
    o, lse = cl.scaled_dot_product_attention(q, k, v, return_lse=True)
    for algo in ("sdpa_bwd_flash_tc", "sdpa_bwd_flash_tc_split"):
        with pytest.raises(NotSupportedError, match=f"{algo} cannot run .*fp64"):
            cl.scaled_dot_product_attention_backward(o, q, k, v, o, lse, algo=algo)
    with pytest.raises(BadParamError, match="k: expected dtype float64"):
        cl.scaled_dot_product_attention(q, k.astype(np.float32), v)
    with pytest.raises(BadParamError, match="lse: expected float64"):
        cl.scaled_dot_product_attention_backward(o, q, k, v, o, lse.astype(np.float32))


@pytest.mark.parametrize(
    "sm, head_dims",
    [(75, (64,)), (86, (64, 128)), (90, (64, 128, 256))],
)
def test_fp64_flash_head_dims_by_shared_memory(sm: int, head_dims: tuple[int, ...]) -> None:
    """Double tiles take 8 bytes per element: the head dims whose fp64 tiles fit each
    arch's shared memory (64 KiB sm_75, 99 KiB sm_86, 227 KiB sm_90); the others say why."""
    from cudnnlite.runtime.caps import for_sm

    caps = for_sm(sm)
    for name in ("sdpa_fwd_flash_fp32", "sdpa_bwd_flash_fp32"):
        for hd in (64, 128, 256):
            p = _p(d=hd, dv=hd, direction=name.split("_")[1])
            ok = registry.get(name).is_applicable(p, caps)
            assert bool(ok) == (hd in head_dims), (name, sm, hd, ok.reason)
            if not ok:
                assert "bytes of shared memory" in ok.reason


# ------------------------------------------------------------------ fp64 tensor cores
# sdpa_fwd_flash_dmma (m8n8k4 .f64): the same bounds as the CUDA-core kernel (double
# products and sums; only the summation order differs), over the cases above and shapes
# that cross its tiles (64 query rows x 32 keys for HD 64, 64 x 16 for HD 128, 32 x 8 for
# HD 256): several query and key tiles, partial last tiles, fully masked key tiles skipped.
DMMA_CASES = {
    **CASES,
    "tiles_hd64_causal": (_p(b=1, hq=2, hkv=2, sq=70, skv=75, d=64, dv=40, causal=True), {}),
    "tiles_hd128_window_bool": (
        _p(sq=67, skv=41, d=72, dv=128, window=(20, 5), mask="bool"), {"mask_shape": (67, 41)}
    ),  # fmt: skip
    "tiles_hd256_gqa_lengths": (
        _p(b=2, hq=2, hkv=1, sq=35, skv=29, d=256, dv=130, varlen=True),
        {"lengths": ([35, 20], [29, 11])},
    ),  # fmt: skip
}


@pytest.mark.parametrize("case", list(DMMA_CASES))
def test_fp64_tensor_core_forward_matches_reference(case: str) -> None:
    _check_solvers(*DMMA_CASES[case], 7, "sdpa_fwd_flash_dmma")


def test_fp64_tensor_core_forward_dispatch_and_refusals() -> None:
    from cudnnlite.dispatch import heuristics as h
    from cudnnlite.runtime.caps import EMULATOR, for_sm

    solver = registry.get("sdpa_fwd_flash_dmma")
    p = _p(sq=33, skv=33, d=64, dv=64)
    assert h.sdpa_fwd_ranking(p, for_sm(90))[0] == "sdpa_fwd_flash_dmma"
    assert "sdpa_fwd_flash_dmma" not in h.sdpa_fwd_ranking(p, EMULATOR)
    assert "sm_80" in solver.is_applicable(p, for_sm(75)).reason
    assert "needs fp64" in solver.is_applicable(dataclasses.replace(p, dtype="fp32"),
                                                EMULATOR).reason  # fmt: skip
    for hd in (64, 128, 256):  # two blocks per SM on sm_90 (227 KiB), each tile fits sm_86
        q = _p(d=hd, dv=hd)
        assert solver.is_applicable(q, for_sm(86)), hd
        assert 2 * solver._smem(q) <= 228 * 1024  # sm_90's shared memory per SM
    rng = np.random.default_rng(1)
    q, k, v = (rng.standard_normal((1, 2, 8, 16)) for _ in range(3))
    with pytest.raises(NotSupportedError, match="sdpa_fwd_flash_dmma cannot run .*fp32"):
        cl.scaled_dot_product_attention(*(a.astype(np.float32) for a in (q, k, v)),
                                        algo="sdpa_fwd_flash_dmma")  # fmt: skip
    o = cl.scaled_dot_product_attention(q, k, v, algo="sdpa_fwd_flash_dmma")
    np.testing.assert_allclose(o, cl.scaled_dot_product_attention(q, k, v), rtol=0, atol=1e-14)


@pytest.mark.parametrize("case", [c for c in DMMA_CASES if "hd256" not in c])
def test_fp64_tensor_core_backward_matches_reference(case: str) -> None:
    """sdpa_bwd_flash_dmma (head dims up to 128): dq, dk, dv and the additive mask's
    gradient within the CUDA-core backward's bounds (the forward from the CUDA-core
    solver, so only the backward is under test)."""
    _check_solvers(*DMMA_CASES[case], 5, "sdpa_fwd_flash_fp32", "sdpa_bwd_flash_dmma")


def test_fp64_tensor_core_backward_dispatch_and_refusals() -> None:
    from cudnnlite.dispatch import heuristics as h
    from cudnnlite.runtime.caps import EMULATOR, for_sm

    solver = registry.get("sdpa_bwd_flash_dmma")
    p = _p(sq=33, skv=33, d=64, dv=64, direction="bwd")
    assert h.sdpa_bwd_ranking(p, for_sm(90))[0] == "sdpa_bwd_flash_dmma"
    assert "sdpa_bwd_flash_dmma" not in h.sdpa_bwd_ranking(p, EMULATOR)
    wide = _p(d=200, dv=64, direction="bwd")
    assert "head dims d, dv <= 128" in solver.is_applicable(wide, EMULATOR).reason
    assert "sm_80" in solver.is_applicable(p, for_sm(75)).reason
    backend = backend_by_name("cpu")
    assert get_plan(backend, wide, "auto").solver.name != "sdpa_bwd_flash_dmma"
    assert solver.workspace_size(p, solver.default_config(p, EMULATOR)) == 8 * 2 * 33
    for hd in (64, 128):  # both kernels fit sm_86's shared memory; two blocks per SM on sm_90
        q = _p(d=hd, dv=hd, direction="bwd")
        assert solver.is_applicable(q, for_sm(86)), hd
        assert 2 * solver._smem(q) <= 228 * 1024


@pytest.mark.parametrize(
    "problem, extra",
    [
        DMMA_CASES["tiles_hd256_gqa_lengths"],  # d 256, dv 130: dV's second half is 2 columns
        (_p(sq=9, skv=21, d=130, dv=40, causal=True, mask="additive"), {}),  # dV: first half only
    ],
    ids=["d256_dv130_gqa_lengths", "d130_dv40_causal_additive"],
)
def test_fp64_cuda_core_backward_head_dim_256_column_halves(problem, extra) -> None:
    """The CUDA-core dK/dV kernel of fp64 head dim 256 runs two blocks per key tile, each
    holding half of dK's and dV's columns (its double accumulators would spill otherwise):
    every column of both halves against the reference, head dims that end in either half."""
    _check_solvers(problem, extra, 9, "sdpa_fwd_flash_fp32", "sdpa_bwd_flash_fp32")
