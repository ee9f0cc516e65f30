"""Tensor-core FlashAttention-2 backward (``sdpa_bwd_flash_tc``, ``sdpa_bwd_flash_tc_split``)
against the float64 reference.

Backward tolerance, per element, from float64 magnitudes of the same problem (BHSD, GQA
heads expanded; P, Pd = P * dropout from the reference forward run on v = identity):
  - P's relative error eps_p[i, j]: the scores' fp32 accumulation over d products of
    16-bit operands (exact products; d * 2^-24 * scale * (|q| |k|^T)[i, j]), plus 2^-18
    for exp2f, the fp32 lse and the log2-domain sums;
  - dP = dO V^T in fp32: dv * 2^-24 * (|dO| |V|^T) (bounded by 2^-16 * A, A = that product
    times the dropout scale);
  - delta = rowsum(dO * o) from o stored in the 16-bit type: (eps_T + 2^-16) * E[i],
    E = rowsum(|dO| |o|);
  - so |dS error| <= dS_err = P * (2^-16 * A + (eps_T + 2^-16) * E) + eps_p * |dS|;
  - dK = scale * dS^T Q and dQ = scale * dS K: the dS error carried through |Q| (|K|), plus
    dS rounded to the 16-bit type before the MMA and the fp32 accumulation over at most
    sq (skv) <= 256 terms: (eps_T + 2^-16) * scale * |dS|^T |Q|; summed over the group's
    heads for dK;
  - dV = Pd^T dO: Pd rounded to the 16-bit type before the MMA, P's own error and the fp32
    accumulation: (eps_T + eps_p_max + 2^-16) * Pd^T |dO|;
  - every stored gradient: one more rounding to its type (eps_T * |ref|); dmask is written
    in fp32 from the registers (dS_err only); 1e-6 absolute for zeros.
eps_T = 2^-11 (fp16), 2^-8 (bf16). The forward's o and lse come from the reference (o
rounded to the dtype, lse to float32), as a forward solver would have written them.
"""

from __future__ import annotations

import numpy as np
import pytest
from attention_support import (
    NUMPY_DTYPE,
    OUT_EPS,
    default_scalars,
    operands,
    reference_backward,
    reference_forward,
    run_backward,
)

from cudnnlite.problems.attention import AttentionProblem
from cudnnlite.reference.attention import sdpa_forward
from cudnnlite.runtime.caps import EMULATOR, Capabilities
from cudnnlite.solvers.attention.flash_bwd import (
    FlashBwdConfig,
    FlashTcBwdSolver,
    FlashTcBwdSplitSolver,
    general_path,
)

SOLVERS = (FlashTcBwdSolver(), FlashTcBwdSplitSolver())


def _bhsd(a: np.ndarray, layout: str) -> np.ndarray:
    a = np.asarray(a, dtype=np.float64)
    return a.swapaxes(1, 2) if layout == "BSHD" else a


def _probs(problem: AttentionProblem, ops: dict, scalars, dropout: bool) -> np.ndarray:
    """P (or P * dropout) (b, hq, sq, skv): the reference forward with v = identity."""
    eye = np.broadcast_to(np.eye(problem.skv), (problem.b, problem.hkv, problem.skv, problem.skv))
    v = eye.swapaxes(1, 2) if problem.layout == "BSHD" else eye
    kw = dict(
        attn_mask=ops.get("mask"), dropout_p=scalars.dropout_p if dropout else 0.0,
        is_causal=problem.causal, scale=scalars.scale, layout=problem.layout,
        causal_align=problem.align, window=problem.window, seed=scalars.seed,
        offset=scalars.offset, lengths_q=ops.get("lengths_q"), lengths_kv=ops.get("lengths_kv"),
    )  # fmt: skip
    out, _ = sdpa_forward(ops["q"], ops["k"], v, **kw)
    return _bhsd(out, problem.layout)


def _bounds(problem: AttentionProblem, ops: dict, scalars, o: np.ndarray, lse: np.ndarray,
            ref: tuple) -> dict[str, np.ndarray]:  # fmt: skip
    """The module docstring's per-element bounds, in the problem's layout."""
    lay, grp = problem.layout, problem.group
    eps_t = OUT_EPS[problem.dtype]
    q, k, v, do = (_bhsd(ops[n], lay) for n in ("q", "k", "v", "dout"))
    k, v = np.repeat(k, grp, axis=1), np.repeat(v, grp, axis=1)
    p = _probs(problem, ops, scalars, dropout=False)
    pd = _probs(problem, ops, scalars, dropout=problem.dropout) if problem.dropout else p
    keep_scale = np.where(p > 0, pd / np.where(p > 0, p, 1.0), 0.0)
    if problem.varlen:  # the reference zeroes dO past lengths_q
        rows = np.arange(problem.sq)[None, :] < ops["lengths_q"][:, None]
        do = do * rows[:, None, :, None]
    eps_p = problem.d * 2.0**-24 * scalars.scale * np.einsum("bhid,bhjd->bhij", abs(q), abs(k))
    eps_p += 2.0**-18
    a = np.einsum("bhid,bhjd->bhij", abs(do), abs(v)) * np.maximum(keep_scale, 1.0)
    e = np.sum(abs(do) * abs(_bhsd(o, lay)), axis=-1, keepdims=True)
    ds = _bhsd(ref[3], "BHSD") if ref[3] is not None else None
    if ds is None:  # |dS| from the reference's formula
        dp = np.einsum("bhid,bhjd->bhij", do, v) * keep_scale
        ds = p * (dp - np.sum(dp * p, axis=-1, keepdims=True))
    ds_err = p * (2.0**-16 * a + (eps_t + 2.0**-16) * e) + eps_p * abs(ds)
    acc = eps_t + 2.0**-16

    def fold(x: np.ndarray) -> np.ndarray:
        return x.reshape(problem.b, problem.hkv, grp, *x.shape[2:]).sum(axis=2)

    def back(x: np.ndarray) -> np.ndarray:
        return x.swapaxes(1, 2) if lay == "BSHD" else x

    sc = scalars.scale
    dq = sc * (ds_err @ abs(k) + acc * abs(ds) @ abs(k))
    dk = fold(sc * (ds_err.swapaxes(2, 3) @ abs(q) + acc * abs(ds).swapaxes(2, 3) @ abs(q)))
    dv = fold((acc + eps_p.max()) * pd.swapaxes(2, 3) @ abs(do))
    out = {}
    for name, bound, r in (("dq", dq, ref[0]), ("dk", dk, ref[1]), ("dv", dv, ref[2])):
        out[name] = back(bound) + eps_t * abs(r) + 1e-6
    if ref[3] is not None:
        out["dmask"] = ds_err + 1e-6
    return out


def _check(problem: AttentionProblem, solver, ops: dict, scalars, what: str = "") -> dict:
    o, lse = reference_forward(problem, ops, scalars)
    o = np.ascontiguousarray(o.astype(NUMPY_DTYPE[problem.dtype]))
    lse = np.ascontiguousarray(lse, dtype=np.float32)
    got = run_backward("cpu", solver, problem, ops, scalars, o, lse)
    ref = reference_backward(problem, ops, scalars)
    bounds = _bounds(problem, ops, scalars, o, lse, ref)
    for name, r in zip(("dq", "dk", "dv", "dmask"), ref, strict=True):
        if r is None:
            assert name not in got
            continue
        err = np.abs(got[name].astype(np.float64) - r)
        bad = ~(err <= bounds[name])  # NaN counts as bad
        if bad.any():
            i = tuple(np.argwhere(bad)[0])
            raise AssertionError(f"{what} {solver.name} {problem.key()} {name}: {bad.sum()} of "
                                 f"{bad.size} off; first at {i}: got {got[name][i]}, ref {r[i]}, "
                                 f"bound {bounds[name][i]:.3g}")  # fmt: skip
    return got


def _p(b, hq, hkv, sq, skv, d, dv, dtype="fp16", **kw) -> AttentionProblem:
    return AttentionProblem(b, hq, hkv, sq, skv, d, dv, dtype=dtype, direction="bwd", **kw)


# (problem, extra operands: mask_shape / lengths / dropout_p / a fully masked row)
CASES = [
    # GQA (2 query heads per kv head), sq != skv, both primes: bucket 32
    (_p(1, 4, 2, 37, 45, 32, 32), {}),
    # MQA, BSHD, bf16, d != dv (bucket 64), causal bottom-right with sq > skv
    (_p(1, 3, 1, 70, 53, 40, 24, "bf16", layout="BSHD", causal=True, align="bottom_right"), {}),
    # bucket 128 (dv = 128, d = 72), sliding window and causal top-left together
    (_p(1, 2, 1, 67, 61, 72, 128, causal=True, window=(5, 3)), {}),
    # additive mask broadcast over (sq, skv), one row all -inf: dmask; causal top-left sq < skv
    (
        _p(1, 2, 1, 29, 70, 32, 32, causal=True, mask="additive"),
        {"mask_shape": (29, 70), "dead_row": 3},
    ),  # fmt: skip
    # bool mask (b, 1, 1, skv) with batch entry 1 fully masked
    (
        _p(2, 2, 2, 19, 23, 16, 16, "bf16", mask="bool"),
        {"mask_shape": (2, 1, 1, 23), "dead_batch": 1},
    ),  # fmt: skip
    # varlen with lengths 0 and 1, causal bottom-right per entry's own lengths
    (
        _p(3, 2, 1, 40, 50, 32, 32, causal=True, align="bottom_right", varlen=True),
        {"lengths": ([0, 1, 33], [5, 0, 50])},
    ),  # fmt: skip
    # dropout (the forward's Philox numbering), GQA: skv % 4 != 0 (a row's groups of four
    # keys straddle rows: one draw per element or pair), then skv % 4 == 0 (lanes share
    # each group's draw through shuffles)
    (_p(1, 2, 1, 40, 50, 32, 32, dropout=True), {"dropout_p": 0.3}),
    (_p(1, 2, 1, 40, 52, 32, 32, causal=True, dropout=True), {"dropout_p": 0.3}),
    # explicit masks with the ranges cutting tiles (the masked path's per-line ranges):
    # varlen + causal bottom-right + an additive (b, 1, sq, skv) mask (rows past lengths_q,
    # keys past lengths_kv, an entry of no keys); a per-head bool mask with a sliding window
    (
        _p(3, 2, 1, 40, 50, 32, 32, causal=True, align="bottom_right", varlen=True,
           mask="additive"),
        {"mask_shape": (3, 1, 40, 50), "lengths": ([0, 17, 33], [5, 0, 50])},
    ),  # fmt: skip
    (
        _p(1, 2, 2, 33, 71, 64, 64, "bf16", window=(4, 9), mask="bool"),
        {"mask_shape": (1, 2, 33, 71)},
    ),  # fmt: skip
    # one query, one key
    (_p(2, 2, 1, 1, 1, 8, 8, "bf16"), {}),
    # bucket 256 (64 queries x 32 keys, four warps per 16 keys; dQ kernel two warps per 16
    # queries): GQA, causal bottom-right with sq < skv (several key blocks and dQ key tiles,
    # two query heads per block: the single-buffered Q / dO reload)
    (_p(1, 4, 2, 37, 70, 256, 256, causal=True, align="bottom_right"), {}),
    # bucket 256 padded (d = 136, dv = 200), bf16, MQA, BSHD, sliding window
    (_p(1, 2, 1, 29, 40, 136, 200, "bf16", layout="BSHD", window=(6, 9)), {}),
    # bucket 256, general path: additive mask (b, 1, 1, skv) + dropout (skv % 4 == 0), dmask
    (
        _p(2, 1, 1, 23, 36, 256, 256, "bf16", mask="additive", dropout=True),
        {"mask_shape": (2, 1, 1, 36), "dropout_p": 0.2},
    ),  # fmt: skip
]


@pytest.mark.parametrize("problem,extra", CASES, ids=[c[0].key() for c in CASES])
def test_backward_matches_reference(problem: AttentionProblem, extra: dict) -> None:
    ops = operands(problem, mask_shape=extra.get("mask_shape"), lengths=extra.get("lengths"))
    if "dead_row" in extra:
        ops["mask"][extra["dead_row"]] = -np.inf
    if "dead_batch" in extra:
        ops["mask"][extra["dead_batch"]] = False
    scalars = default_scalars(problem, dropout_p=extra.get("dropout_p", 0.0))
    for solver in SOLVERS:
        _check(problem, solver, ops, scalars)


def test_fast_path_matches_general_path() -> None:
    """The fast instantiation (no explicit mask or dropout; causal / window tested on
    boundary tiles only) against the general one on the same data: an all-True bool mask
    sends the problem down the general path. Both meet the reference's bounds; they differ
    only by fp32 rounding (exp2 argument), which can flip one 16-bit rounding of P or dS
    per product: |fast - general| <= 2 eps_T |ref| + the bound."""
    fast = _p(1, 2, 1, 45, 70, 32, 32, causal=True, align="bottom_right", window=(20, 3))
    general = _p(1, 2, 1, 45, 70, 32, 32, causal=True, align="bottom_right", window=(20, 3),
                 mask="bool")  # fmt: skip
    assert not general_path(fast) and general_path(general)
    assert general_path(_p(1, 1, 1, 8, 8, 32, 32, dropout=True))
    ops = operands(general, mask_shape=(45, 70), seed=5)
    ops["mask"][...] = True
    ops_fast = {k: v for k, v in ops.items() if k != "mask"}
    scalars = default_scalars(fast)
    eps_t = OUT_EPS["fp16"]
    for solver in SOLVERS:
        a = _check(fast, solver, ops_fast, scalars, "fast")
        b = _check(general, solver, ops, scalars, "general")
        ref = reference_backward(fast, ops_fast, scalars)
        for name, r in zip(("dq", "dk", "dv"), ref[:3], strict=False):
            diff = np.abs(a[name].astype(np.float64) - b[name].astype(np.float64))
            assert np.all(diff <= 2 * eps_t * np.abs(r) + 1e-2 * np.abs(r).max()), name


def test_split_is_bitwise_reproducible() -> None:
    problem = _p(1, 2, 1, 45, 37, 32, 32, causal=True)
    ops = operands(problem, seed=3)
    scalars = default_scalars(problem)
    a = _check(problem, SOLVERS[1], ops, scalars)
    b = _check(problem, SOLVERS[1], ops, scalars)
    for name in ("dq", "dk", "dv"):
        assert a[name].tobytes() == b[name].tobytes(), name


def test_determinism_flags() -> None:
    assert not FlashTcBwdSolver.deterministic
    assert FlashTcBwdSplitSolver.deterministic


SM75 = Capabilities("sm_75", 75, True, False, 64 * 1024, False)
SM80 = Capabilities("sm_80", 80, True, True, 163 * 1024, False)
SM86 = Capabilities("sm_86", 86, True, True, 99 * 1024, False)
SM90 = Capabilities("sm_90", 90, True, True, 227 * 1024, False)


@pytest.mark.parametrize(
    "problem,caps,reason",
    [
        (_p(1, 1, 1, 8, 8, 64, 64, "fp32"), EMULATOR, "needs fp16 or bf16"),
        (_p(1, 1, 1, 8, 8, 60, 64), EMULATOR, "needs head dims that are multiples of 8"),
        (_p(1, 1, 1, 8, 8, 64, 12), EMULATOR, "needs head dims that are multiples of 8"),
        (_p(1, 1, 1, 8, 8, 264, 256), EMULATOR, "needs head dims <= 256"),
        (_p(1, 1, 1, 8, 8, 256, 256), SM75, "bytes of shared memory"),
        (_p(1, 1, 1, 8, 8, 200, 128), SM86, "bytes of shared memory"),
        (_p(1, 1, 1, 0, 8, 64, 64), EMULATOR, "needs sq and skv >= 1"),
        (_p(1, 1, 1, 8, 8, 64, 64, "bf16"), SM75, "bf16 needs sm_80+"),
        (_p(1, 1, 1, 8, 8, 128, 128), SM75, "bytes of shared memory"),
    ],
)
def test_is_applicable_reasons(problem: AttentionProblem, caps: Capabilities, reason: str) -> None:
    for solver in SOLVERS:
        ok = solver.is_applicable(problem, caps)
        assert not ok and reason in ok.reason, (solver.name, ok.reason)


def test_head_dim_256_shared_memory() -> None:
    """The d256 config fits sm_80 and sm_90 (main kernel with one Q / dO stage, dQ kernel
    of 64 queries x 32 keys), two main blocks per SM on sm_90; sm_86 / sm_89 (99 KB) refuse
    it with the byte count."""
    problem = _p(1, 2, 1, 64, 64, 256, 256)
    cfg = FlashBwdConfig(64, 32, 8)
    assert cfg.main_smem(256) == 107520 and cfg.dq_smem(256) == 135168
    assert cfg.dq_tile(256) == (64, 32, 8) and cfg.dq_tile(128) == (32, 64, 2)
    assert 2 * cfg.main_smem(256) <= SM90.max_shared_bytes
    for caps in (SM80, SM90):
        for solver in SOLVERS:
            assert solver.is_applicable(problem, caps), (caps.arch, solver.name)
            assert solver.default_config(problem, caps) == cfg
    for solver in SOLVERS:
        ok = solver.is_applicable(problem, SM86)
        assert not ok and "needs 1" in ok.reason and "sm_86" in ok.reason, ok.reason


def test_configs_and_workspace() -> None:
    problem = _p(2, 4, 2, 100, 90, 64, 64)
    for solver in SOLVERS:
        assert solver.is_applicable(problem, EMULATOR)
        cfg = solver.default_config(problem, EMULATOR)
        assert solver.is_valid(cfg, problem, EMULATOR)
        assert cfg.smem_bytes(64) <= EMULATOR.max_shared_bytes
    delta = 4 * 2 * 4 * 100
    ws_atomic = SOLVERS[0].workspace_size(problem, cfg)
    ws_split = SOLVERS[1].workspace_size(problem, cfg)
    assert ws_split >= delta and ws_atomic >= ws_split + 4 * 2 * 4 * 100 * 64
    with pytest.raises(ValueError):
        FlashBwdConfig(48, 64, 4)
    with pytest.raises(ValueError):
        FlashBwdConfig(64, 64, 2)
    with pytest.raises(ValueError):
        FlashBwdConfig(32, 32, 8)  # 8 queries per warp
    assert len({s for solver in SOLVERS for s in solver.module_specs()}) <= 5


def test_mask_strides_beyond_32_bits_are_refused() -> None:
    """The kernels step along a mask line in 32-bit offsets: a query or key stride of 2^23
    elements or more is refused with a clear error (the forward takes the same mask)."""
    import cudnnlite as cl
    from cudnnlite.errors import NotSupportedError

    p = _p(1, 1, 1, 2, 3, 8, 8, mask="additive")
    ops = operands(p)
    base = np.zeros(2**23 + 3, NUMPY_DTYPE["fp16"])  # 16 MB: rows 0 and 2^23 of it
    mask = np.lib.stride_tricks.as_strided(base, (p.sq, p.skv), (2**24, 2))
    out, lse = cl.scaled_dot_product_attention(ops["q"], ops["k"], ops["v"], mask,
                                               return_lse=True)  # fmt: skip
    with pytest.raises(NotSupportedError, match="query and key strides"):
        cl.scaled_dot_product_attention_backward(ops["dout"], ops["q"], ops["k"], ops["v"], out,
                                                 lse, mask, algo="sdpa_bwd_flash_tc")  # fmt: skip
