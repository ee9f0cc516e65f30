"""scaled_dot_product_attention and its backward through the public API: keys, the
float64 reference against PyTorch, PyTorch parity of the op (shapes PyTorch accepts,
masks, GQA, NaN, empty arrays), every masking feature through the dispatcher and the
unfused solver, and bad inputs. The fused solvers have their own test files."""

from __future__ import annotations

import numpy as np
import pytest
from attention_support import (
    assert_forward_close,
    default_scalars,
    operands,
    reference_backward,
    run_backward,
    run_forward,
)

import cudnnlite as cl
from cudnnlite.dispatch import registry
from cudnnlite.errors import BadParamError, NotSupportedError
from cudnnlite.problems import parse_key
from cudnnlite.problems.attention import AttentionProblem as AP
from cudnnlite.reference.attention import sdpa_backward, sdpa_forward
from cudnnlite.runtime.caps import capabilities
from cudnnlite.runtime.select import backend_by_name
from cudnnlite.testing import to_backend, to_numpy


# ------------------------------------------------------------------ keys
@pytest.mark.parametrize(
    "problem",
    [
        AP(1, 1, 1, 1, 1, 8, 8),
        AP(2, 8, 2, 128, 256, 64, 64, "BSHD", "fp16", "bwd", causal=True, align="bottom_right"),
        AP(
            3,
            4,
            4,
            5,
            7,
            96,
            32,
            dtype="bf16",
            window=(16, -1),
            mask="additive",
            dropout=True,
            varlen=True,
        ),  # fmt: skip
    ],
)
def test_key_round_trip(problem: AP) -> None:
    assert parse_key(problem.key()) == problem
    assert problem.family == f"sdpa_{problem.direction}"


def test_key_reads() -> None:
    p = AP(2, 8, 2, 128, 256, 64, 64, dtype="fp16", causal=True, window=(128, 0),
           align="bottom_right", mask="bool", dropout=True, varlen=True)  # fmt: skip
    assert p.key() == (
        "sdpa_fwd b2-hq8-hkv2 sq128-skv256 d64-dv64 BHSD fp16 causal win128_0 align_br "
        "mask_bool drop varlen"
    )
    assert p.bounds == (128, 0) and p.group == 4
    # alignment only matters with causal or a window: one key per problem
    assert AP(1, 1, 1, 2, 3, 8, 8, align="bottom_right") == AP(1, 1, 1, 2, 3, 8, 8)


@pytest.mark.parametrize(
    "key",
    [
        "sdpa_fwd b1-hq3-hkv2 sq1-skv1 d8-dv8 BHSD fp32",
        "sdpa_fwd b1-hq1-hkv1 sq1-skv1 d8 BHSD fp32",
        "sdpa_fwd b1-hq1-hkv1 sq1-skv1 d8-dv8 BHDS fp32",
        "sdpa_up b1-hq1-hkv1 sq1-skv1 d8-dv8 BHSD fp32",
    ],
)
def test_bad_keys(key: str) -> None:
    with pytest.raises(BadParamError):
        parse_key(key)


# ------------------------------------------------------------------ reference vs PyTorch
def _torch():
    return pytest.importorskip("torch")


REF_CASES = [
    dict(q=(2, 3, 5, 8), k=(2, 3, 7, 8), v=(2, 3, 7, 6)),
    dict(q=(5, 8), k=(7, 8), v=(7, 3)),
    dict(q=(3, 2, 4, 5, 8), k=(1, 2, 4, 7, 8), v=(1, 2, 4, 7, 3)),  # batch broadcast
    dict(q=(2, 4, 5, 8), k=(2, 1, 7, 8), v=(2, 1, 7, 6)),  # multi-query by broadcasting
    dict(q=(2, 1, 5, 8), k=(2, 4, 7, 8), v=(2, 4, 7, 3)),  # one query head over 4 kv heads
    dict(q=(5, 8), k=(4, 7, 8), v=(4, 7, 3)),  # unbatched q against headed k, v
    dict(q=(3, 2, 2, 5, 8), k=(3, 2, 2, 7, 8), v=(3, 2, 2, 7, 3), amask=(3, 1, 1, 1, 7)),
    dict(q=(2, 4, 5, 8), k=(2, 2, 7, 8), v=(2, 2, 7, 6), enable_gqa=True),
    dict(q=(2, 3, 7, 8), k=(2, 3, 5, 8), v=(2, 3, 5, 6), is_causal=True),  # L > S
    dict(q=(2, 3, 5, 8), k=(2, 3, 7, 8), v=(2, 3, 7, 6), mask=(5, 7)),
    dict(q=(2, 3, 5, 8), k=(2, 3, 7, 8), v=(2, 3, 7, 6), amask=(2, 1, 1, 7), scale=0.3),
    dict(q=(1, 2, 4, 8), k=(1, 2, 6, 8), v=(1, 2, 6, 8), mask=(4, 6), dead_row=1),
    # a negative scale: PyTorch's CPU backends disagree (NaN with is_causal), so the
    # reference and the op are checked against each other in test_negative_scale
]


def _case_arrays(c: dict, rng: np.random.Generator, dtype=np.float32):
    q, k, v = (rng.standard_normal(c[n]).astype(dtype) for n in "qkv")
    mask = None
    if "mask" in c:
        mask = rng.random(c["mask"]) > 0.3
        if "dead_row" in c:
            mask[c["dead_row"]] = False  # a fully masked row: PyTorch answers 0
    if "amask" in c:
        mask = rng.standard_normal(c["amask"]).astype(dtype)
    kw = {n: c[n] for n in ("is_causal", "enable_gqa", "scale") if n in c}
    return q, k, v, mask, kw


def _torch_sdpa(q, k, v, mask, kw, rng):
    """PyTorch's output and gradients for a random dout (returned too)."""
    torch = _torch()
    tq, tk, tv = (torch.tensor(a, requires_grad=True) for a in (q, k, v))
    tm = None
    if mask is not None:
        tm = torch.tensor(mask, requires_grad=mask.dtype != np.bool_)
    o = torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, attn_mask=tm, **kw)
    dout = rng.standard_normal(tuple(o.shape)).astype(q.dtype)
    o.backward(torch.tensor(dout))
    grads = [t.grad.numpy() for t in (tq, tk, tv)]
    if tm is not None and tm.requires_grad:
        grads.append(tm.grad.numpy())
    return o.detach().numpy(), grads, dout


REF_4D = [
    i
    for i, c in enumerate(REF_CASES)
    if len(c["q"]) == 4 and c["k"][0] == c["q"][0] and c["q"][1] % c["k"][1] == 0
]


@pytest.mark.parametrize("case", REF_4D)
def test_reference_agrees_with_torch(case: int) -> None:
    """The float64 reference is PyTorch's math, forward and backward, to float64 rounding
    (the 4-D cases; the op's tests cover the other shapes)."""
    rng = np.random.default_rng(case)
    q, k, v, mask, kw = _case_arrays(REF_CASES[case], rng, np.float64)
    want_o, want_grads, dout = _torch_sdpa(q, k, v, mask, kw, rng)
    ref_kw = {n: kw[n] for n in ("is_causal", "scale") if n in kw}
    o, _ = sdpa_forward(q, k, v, mask, **ref_kw)
    np.testing.assert_allclose(o, want_o, rtol=0, atol=1e-12)
    dq, dk, dv, dmask = sdpa_backward(dout, q, k, v, mask, **ref_kw)
    grads = [dq, dk, dv]
    if dmask is not None:  # summed over the axes the mask broadcasts along
        axes = tuple(i for i, n in enumerate((1,) * (4 - mask.ndim) + mask.shape) if n == 1)
        grads.append(dmask.sum(axis=axes, keepdims=True).reshape(mask.shape))
    for got, want in zip(grads, want_grads, strict=True):
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)


# ------------------------------------------------------------------ the op vs PyTorch
@pytest.mark.parametrize("case", range(len(REF_CASES)))
def test_op_matches_torch(backend: str, case: int) -> None:
    """Forward and backward through the dispatcher on the emulator; fp32 with fp32
    accumulation over at most 8 products and 7 keys: 1e-5 absolute is ~100 ulps of the
    unit-scale values, far above the error and far below any semantic difference."""
    rng = np.random.default_rng(100 + case)
    c = REF_CASES[case]
    q, k, v, mask, kw = _case_arrays(c, rng)
    want_o, want_grads, dout = _torch_sdpa(q, k, v, mask, kw, rng)
    additive = mask is not None and mask.dtype != np.bool_
    q, k, v, dout = (to_backend(a, backend) for a in (q, k, v, dout))
    mask = None if mask is None else to_backend(mask, backend)
    o, lse = cl.scaled_dot_product_attention(q, k, v, mask, return_lse=True, **kw)
    np.testing.assert_allclose(to_numpy(o), want_o, rtol=0, atol=1e-5)
    grads = cl.scaled_dot_product_attention_backward(
        dout, q, k, v, o, lse, mask, mask_grad=additive, **kw
    )
    grads = [to_numpy(g) for g in grads]  # fmt: skip
    assert len(grads) == len(want_grads)
    for got, want in zip(grads, want_grads, strict=True):
        assert got.shape == want.shape and got.dtype == want.dtype
        np.testing.assert_allclose(got, want, rtol=0, atol=2e-5)


def test_negative_scale(backend: str) -> None:
    """A negative scale flips which score is the row max: the flash kernels must not
    assume scale > 0."""
    rng = np.random.default_rng(9)
    q, k, v = (rng.standard_normal((1, 2, 5, 8)).astype(np.float32) for _ in range(3))
    want, _ = sdpa_forward(q, k, v, None, 0.0, True, -0.5)
    qb, kb, vb = (to_backend(a, backend) for a in (q, k, v))
    got = cl.scaled_dot_product_attention(qb, kb, vb, is_causal=True, scale=-0.5)
    np.testing.assert_allclose(to_numpy(got), want, rtol=0, atol=1e-5)
    for dt in (np.float16, cl.bfloat16):  # the tensor-core forward
        q16, k16, v16 = (to_backend(a.astype(dt), backend) for a in (q, k, v))
        got = cl.scaled_dot_product_attention(q16, k16, v16, is_causal=True, scale=-0.5)
        want16, _ = sdpa_forward(
            *(a.astype(dt).astype(np.float64) for a in (q, k, v)), None, 0.0, True, -0.5
        )
        np.testing.assert_allclose(to_numpy(got).astype(np.float64), want16, rtol=0, atol=2e-2)


def test_nan_propagates_like_pytorch_math() -> None:
    q = np.random.default_rng(0).standard_normal((1, 1, 3, 4)).astype(np.float32)
    k = np.ones((1, 1, 3, 4), np.float32)
    v = np.ones((1, 1, 3, 4), np.float32)
    q[0, 0, 1, 0] = np.nan
    o = cl.scaled_dot_product_attention(q, k, v)
    assert np.isnan(o[0, 0, 1]).all() and np.isfinite(o[0, 0, [0, 2]]).all()


@pytest.mark.parametrize(
    "shapes",
    [((2, 3, 0, 8), (2, 3, 5, 8), (2, 3, 5, 4)), ((2, 3, 4, 8), (2, 3, 0, 8), (2, 3, 0, 4)),
     ((0, 3, 4, 8), (0, 3, 5, 8), (0, 3, 5, 4))],
)  # fmt: skip
def test_empty(shapes) -> None:
    """Empty queries or batches give empty outputs; no keys gives zeros (PyTorch)."""
    q, k, v = (np.ones(s, np.float32) for s in shapes)
    o, lse = cl.scaled_dot_product_attention(q, k, v, return_lse=True)
    assert o.shape == shapes[0][:-1] + (shapes[2][-1],)
    assert (o == 0).all() and np.isneginf(lse).all()
    dq, dk, dv = cl.scaled_dot_product_attention_backward(np.ones_like(o), q, k, v, o, lse)
    assert dq.shape == q.shape and dk.shape == k.shape and dv.shape == v.shape
    assert not dq.any() and not dk.any() and not dv.any()


# ------------------------------------------------------------------ features, every dtype
FEATURES = [
    # (problem, mask shape, lengths, dropout)
    (AP(2, 4, 2, 5, 7, 8, 6, causal=True), None, None, 0.0),
    (AP(1, 2, 1, 6, 3, 5, 4, "BSHD", "fp16", mask="additive"), (1, 1, 6, 3), None, 0.0),
    (
        AP(
            2,
            2,
            2,
            4,
            9,
            8,
            8,
            dtype="bf16",
            mask="bool",
            varlen=True,
            window=(2, 1),
            align="bottom_right",
            dropout=True,
        ),
        (4, 9),
        ([3, 0], [9, 1]),
        0.3,
    ),  # fmt: skip
    (
        AP(2, 2, 1, 7, 5, 16, 16, dtype="fp16", causal=True, align="bottom_right", varlen=True),
        None,
        ([1, 7], [5, 2]),
        0.0,
    ),  # fmt: skip
]


@pytest.mark.parametrize("case", range(len(FEATURES)))
def test_unfused_solver_features(backend: str, case: int) -> None:
    """The unfused solvers against the float64 reference, forward and backward: the
    cross-check every fused solver is held to."""
    problem, mask_shape, lengths, p = FEATURES[case]
    ops = operands(problem, seed=case, mask_shape=mask_shape, lengths=lengths)
    sc = default_scalars(problem, dropout_p=p)
    o, lse = run_forward(backend, registry.get("sdpa_fwd_unfused"), problem, ops, sc)
    assert_forward_close(o, lse, problem, ops, sc, tensor_cores=False, what="unfused")
    ref_o, ref_lse = sdpa_forward(ops["q"], ops["k"], ops["v"], ops.get("mask"), p,
                                  problem.causal, sc.scale, layout=problem.layout,
                                  causal_align=problem.align, window=problem.window,
                                  seed=sc.seed, offset=sc.offset,
                                  lengths_q=ops.get("lengths_q"),
                                  lengths_kv=ops.get("lengths_kv"))  # fmt: skip
    grads = run_backward(backend, registry.get("sdpa_bwd_unfused"), problem, ops, sc,
                         ref_o.astype(ops["q"].dtype), ref_lse.astype(np.float32))  # fmt: skip
    ref = reference_backward(problem, ops, sc)
    # fp32 accumulation over <= 9 keys and <= 16 dims on the rounded o (delta = dout . o):
    # the storage type's rounding of o and of the results dominates.
    eps = {"fp32": 2e-6, "fp16": 4e-3, "bf16": 3e-2}[problem.dtype]
    for name, want in zip(("dq", "dk", "dv", "dmask"), ref, strict=True):
        if want is None:
            continue
        got = grads[name].astype(np.float64)
        np.testing.assert_allclose(got, want, rtol=eps, atol=eps, err_msg=name)


def test_op_options_and_out() -> None:
    """lengths, a window, bottom-right causal and out= through the public call."""
    rng = np.random.default_rng(3)
    q = rng.standard_normal((2, 6, 2, 8)).astype(np.float32)  # BSHD
    k = rng.standard_normal((2, 9, 2, 8)).astype(np.float32)
    v = rng.standard_normal((2, 9, 2, 8)).astype(np.float32)
    kw = dict(layout="BSHD", is_causal=True, causal_align="bottom_right", window=(3, -1),
              lengths_q=[6, 2], lengths_kv=np.array([9, 4]))  # fmt: skip
    out = np.full((2, 6, 2, 8), np.nan, np.float32)
    res, lse = cl.scaled_dot_product_attention(q, k, v, out=out, return_lse=True, **kw)
    assert res is out
    want, want_lse = sdpa_forward(q, k, v, None, 0.0, True, None, layout="BSHD",
                                  causal_align="bottom_right", window=(3, -1),
                                  lengths_q=[6, 2], lengths_kv=[9, 4])  # fmt: skip
    np.testing.assert_allclose(out, want, rtol=0, atol=1e-5)
    np.testing.assert_allclose(lse, want_lse, rtol=1e-6, atol=1e-6)
    assert (out[1, 2:] == 0).all()  # rows past lengths_q


def test_dropout_reproducible_and_seeded() -> None:
    rng = np.random.default_rng(4)
    q, k, v = (rng.standard_normal((1, 2, 5, 8)).astype(np.float32) for _ in range(3))
    a = cl.scaled_dot_product_attention(q, k, v, dropout_p=0.5, seed=11)
    b = cl.scaled_dot_product_attention(q, k, v, dropout_p=0.5, seed=11)
    c = cl.scaled_dot_product_attention(q, k, v, dropout_p=0.5, seed=12)
    want, _ = sdpa_forward(q, k, v, dropout_p=0.5, seed=11)
    assert np.array_equal(a, b) and not np.array_equal(a, c)
    np.testing.assert_allclose(a, want, rtol=0, atol=1e-5)


@pytest.mark.parametrize(
    "key",
    [
        "sdpa_fwd b1-hq2-hkv1 sq4-skv5 d8-dv8 BHSD fp32 causal mask_add",
        "sdpa_bwd b1-hq2-hkv1 sq4-skv5 d8-dv8 BSHD fp16 mask_bool drop varlen",
    ],
)
def test_tuner_times_every_attention_solver(key: str) -> None:
    """The tuner builds operands for attention keys (masks, lengths, dropout) and times
    every solver that applies."""
    problem = parse_key(key)
    results = cl.tune(key, backend="cpu", progress=False, store=False)[key]
    caps = capabilities(backend_by_name("cpu"))
    solvers = registry.solvers(problem.family)
    applicable = {s.name for s in solvers if s.is_applicable(problem, caps)}
    assert {e.solver for e in results} == applicable and len(applicable) >= 2
    assert all(e.time_us > 0 for e in results)


def test_explain_lists_attention_solvers() -> None:
    text = str(cl.explain("sdpa_fwd b1-hq2-hkv1 sq5-skv7 d8-dv8 BHSD fp32 causal"))
    assert "sdpa_fwd_unfused" in text and "choice:" in text
    assert "sdpa_bwd_unfused" in str(cl.explain("sdpa_bwd b1-hq2-hkv1 sq5-skv7 d8-dv8 BHSD fp32"))


# ------------------------------------------------------------------ bad input
def _qkv(hq=2, hk=2, d=8, dk=8, dv=8, dtype=np.float32):
    rng = np.random.default_rng(0)
    return (rng.standard_normal((1, hq, 4, d)).astype(dtype),
            rng.standard_normal((1, hk, 5, dk)).astype(dtype),
            rng.standard_normal((1, hk, 5, dv)).astype(dtype))  # fmt: skip


@pytest.mark.parametrize(
    "make, match",
    [
        (lambda: (_qkv(dk=4), {}), "k: head dim 4 differs"),
        (lambda: (_qkv(hq=3, hk=2), {"enable_gqa": True}), "k, v: 2 heads"),
        (lambda: (_qkv(hq=4, hk=2), {}), "enable_gqa"),
        (lambda: (_qkv(), {"attn_mask": np.ones((3, 5), bool)}), "attn_mask: shape"),
        (lambda: (_qkv(), {"attn_mask": np.ones((4, 5), np.int32)}), "attn_mask: expected a bool"),
        (lambda: (_qkv(), {"dropout_p": 1.0}), "dropout_p"),
        (lambda: (_qkv(), {"dropout_p": -0.1}), "dropout_p"),
        (lambda: (_qkv(), {"lengths_q": [5]}), "lengths_q: lengths must be in"),
        (lambda: (_qkv(), {"lengths_kv": [1, 2]}), "lengths_kv: expected 1 integers"),
        (lambda: (_qkv(), {"layout": "BDHS"}), "layout"),
        (lambda: (_qkv(), {"causal_align": "center"}), "causal_align"),
        (lambda: (_qkv(), {"window": (-2, 0)}), "window"),
        (lambda: (_qkv(), {"scale": float("inf")}), "scale"),
        (lambda: (_qkv(), {"seed": -1, "dropout_p": 0.1}), "seed"),
        (lambda: ((_qkv()[0], *_qkv(dtype=np.float16)[1:]), {}), "k: expected dtype float32"),
        (lambda: ((_qkv()[0].astype(np.int32), *_qkv()[1:]), {}), "q: expected dtype"),
    ],
)
def test_bad_input(make, match: str) -> None:
    (q, k, v), kw = make()
    copies = [a.copy() for a in (q, k, v)]
    with pytest.raises(BadParamError, match=match):
        cl.scaled_dot_product_attention(q, k, v, **kw)
    for a, c in zip((q, k, v), copies, strict=True):
        assert np.array_equal(a, c)


def test_float_mask_of_another_dtype_is_added_in_q_dtype() -> None:
    """PyTorch takes a float32 mask with fp16 q; so do we (rounded to q's dtype)."""
    q, k, v = _qkv(dtype=np.float16)
    m = np.random.default_rng(1).standard_normal((4, 5)).astype(np.float32)
    got = cl.scaled_dot_product_attention(q, k, v, attn_mask=m)
    want = cl.scaled_dot_product_attention(q, k, v, attn_mask=m.astype(np.float16))
    assert np.array_equal(got, want)
    o, lse = cl.scaled_dot_product_attention(q, k, v, attn_mask=m, return_lse=True)
    dm = cl.scaled_dot_product_attention_backward(o, q, k, v, o, lse, m, mask_grad=True)[3]
    assert dm.dtype == np.float32 and dm.shape == m.shape


def test_out_must_not_overlap_the_inputs() -> None:
    q, k, v = _qkv()
    with pytest.raises(BadParamError, match="out: overlaps q"):
        cl.scaled_dot_product_attention(q, k, v, out=q)
    strided = np.zeros((1, 2, 4, 16), np.float32)[..., ::2]  # not contiguous: a copy lands
    assert cl.scaled_dot_product_attention(q, k, v, out=strided) is strided
    np.testing.assert_allclose(strided, cl.scaled_dot_product_attention(q, k, v), atol=1e-6)


def test_misaligned_views_are_copied_aligned() -> None:
    """Contiguous views starting at an odd element: the op hands the kernels aligned copies
    (the tensor-core kernels read 16 bytes at a time) and the answer is unchanged."""
    rng = np.random.default_rng(5)
    buf = rng.standard_normal(4 * 2 * 6 * 8 + 1).astype(np.float16)
    q, k, v = (buf[1 + i * 96 : 1 + (i + 1) * 96].reshape(1, 2, 6, 8) for i in range(3))
    assert q.ctypes.data % 16 and q.flags.c_contiguous
    o, lse = cl.scaled_dot_product_attention(q, k, v, is_causal=True, return_lse=True)
    qa, ka, va = (a.copy() for a in (q, k, v))
    o_ref, lse_ref = cl.scaled_dot_product_attention(qa, ka, va, is_causal=True, return_lse=True)
    assert np.array_equal(o, o_ref) and np.array_equal(lse, lse_ref)
    dbuf = np.zeros(o.size + 1, np.float16)
    dout = dbuf[1:].reshape(o.shape)
    dout[...] = 1
    grads = cl.scaled_dot_product_attention_backward(dout, q, k, v, o, lse, is_causal=True)
    want = cl.scaled_dot_product_attention_backward(
        np.ones_like(o), qa, ka, va, o, lse, is_causal=True
    )
    for g, w in zip(grads, want, strict=True):
        assert np.array_equal(g, w)


@pytest.mark.parametrize(
    "dtype,algo",
    [(np.float64, "auto"), (np.float32, "auto"), (np.float16, "auto"),
     (np.float16, "sdpa_bwd_flash_tc")],
)  # fmt: skip
def test_a_head_sliced_out_of_a_tensor_runs_backward(dtype, algo: str) -> None:
    """q, k, v, dout one head of a larger tensor: C-contiguous (NumPy ignores the stride of
    a dim of one) with strides unlike a fresh array's there. The gradients (fresh arrays)
    share the kernels' strides on every other dim, so the backward runs on the views and
    answers as on copies (it raised "dv must have the strides of v")."""
    rng = np.random.default_rng(7)

    def head(s: int) -> np.ndarray:
        a = rng.standard_normal((1, 3, s, 8)).astype(dtype)[:, 1:2]
        assert a.flags.c_contiguous and a.strides[0] != s * 8 * a.itemsize
        return a

    q, k, v, dout = head(5), head(7), head(7), head(5)
    o, lse = cl.scaled_dot_product_attention(q, k, v, is_causal=True, return_lse=True)
    got = cl.scaled_dot_product_attention_backward(dout, q, k, v, o, lse, is_causal=True,
                                                   algo=algo)  # fmt: skip
    want = cl.scaled_dot_product_attention_backward(
        dout.copy(), q.copy(), k.copy(), v.copy(), o, lse, is_causal=True, algo=algo
    )
    for g, w in zip(got, want, strict=True):
        assert np.array_equal(g, w)


def test_an_odd_stride_on_a_dim_of_one_reaches_the_tensor_core_kernels() -> None:
    """A batch dim of one whose stride is no multiple of 8 elements: never stepped along,
    so the tensor-core solvers take the array as it is (they refused it as misaligned)."""
    rng = np.random.default_rng(8)

    def odd(s: int) -> np.ndarray:
        base = rng.standard_normal(2 * s * 8).astype(np.float16)
        return np.lib.stride_tricks.as_strided(base, (1, 2, s, 8), (6, s * 16, 16, 2))

    q, k, v, dout = odd(5), odd(7), odd(7), odd(5)
    o, lse = cl.scaled_dot_product_attention(q, k, v, return_lse=True,
                                             algo="sdpa_fwd_flash_tc")  # fmt: skip
    o_ref = cl.scaled_dot_product_attention(q.copy(), k.copy(), v.copy(),
                                            algo="sdpa_fwd_flash_tc")  # fmt: skip
    assert np.array_equal(o, o_ref)
    got = cl.scaled_dot_product_attention_backward(dout, q, k, v, o, lse,
                                                   algo="sdpa_bwd_flash_tc")  # fmt: skip
    want = cl.scaled_dot_product_attention_backward(
        dout.copy(), q.copy(), k.copy(), v.copy(), o, lse, algo="sdpa_bwd_flash_tc"
    )
    for g, w in zip(got, want, strict=True):
        assert np.array_equal(g, w)


def test_tensor_core_backward_refuses_misaligned_pointers() -> None:
    """Called directly (not through the op, which copies), the tensor-core backward's
    runner checks the 16-byte alignment its vector loads need."""
    from cudnnlite.solvers.attention.common import AttentionBwdTensors, Scalars

    p = AP(1, 1, 1, 4, 4, 8, 8, dtype="fp16", direction="bwd")
    solver = registry.get("sdpa_bwd_flash_tc")
    backend = backend_by_name("cpu")
    cfg = solver.default_config(p, capabilities(backend))
    runner = solver.prepare(backend, p, cfg)
    buf = np.zeros(48, np.float16)
    start = next(i for i in range(1, 9) if (buf.ctypes.data + 2 * i) % 16)
    odd = buf[start : start + 32].reshape(1, 1, 4, 8)  # contiguous, not 16-byte aligned
    ok = [np.zeros((1, 1, 4, 8), np.float16) for _ in range(7)]
    t = AttentionBwdTensors(odd, *ok[:3], ok[3], np.zeros((1, 1, 4), np.float32), *ok[4:])
    ws = np.zeros(solver.workspace_size(p, cfg), np.uint8)
    with pytest.raises(NotSupportedError, match="q needs 16-byte aligned rows"):
        runner(t, Scalars(scale=0.5), ws)


def test_bad_backward_input() -> None:
    q, k, v = _qkv()
    o, lse = cl.scaled_dot_product_attention(q, k, v, return_lse=True)
    with pytest.raises(BadParamError, match="lse: expected float32"):
        cl.scaled_dot_product_attention_backward(o, q, k, v, o, lse[..., :2])
    with pytest.raises(BadParamError, match="seed: the backward of dropout"):
        cl.scaled_dot_product_attention_backward(o, q, k, v, o, lse, dropout_p=0.1)
    with pytest.raises(BadParamError, match="mask_grad"):
        cl.scaled_dot_product_attention_backward(o, q, k, v, o, lse, mask_grad=True)


def test_forced_solver_that_cannot_run_says_why() -> None:
    q, k, v = _qkv()
    with pytest.raises(BadParamError, match="algo: conv_fwd_direct solves conv_fwd"):
        cl.scaled_dot_product_attention(q, k, v, algo="conv_fwd_direct")
    with pytest.raises(NotSupportedError, match="sdpa_fwd_flash_tc cannot run .* fp32"):
        cl.scaled_dot_product_attention(q, k, v, algo="sdpa_fwd_flash_tc")
    q5, k5, v5 = _qkv(d=5, dk=5, dtype=np.float16)  # head dims the tensor cores cannot copy
    with pytest.raises(NotSupportedError, match="multiples of 8"):
        cl.scaled_dot_product_attention(q5, k5, v5, algo="sdpa_fwd_flash_tc")
    rng = np.random.default_rng(0)
    q40 = rng.standard_normal((1, 1, 40, 8)).astype(np.float32)  # 40 query rows: not decoding
    with pytest.raises(NotSupportedError, match="sdpa_fwd_flash_decode cannot run"):
        cl.scaled_dot_product_attention(q40, q40, q40, algo="sdpa_fwd_flash_decode")


FWD_SOLVERS = ["sdpa_fwd_unfused", "sdpa_fwd_flash_fp32", "sdpa_fwd_flash_decode",
               "sdpa_fwd_flash_dmma", "sdpa_fwd_flash_tc"]  # fmt: skip


@pytest.mark.parametrize("dtype", ["float32", "float64", "bfloat16"])
def test_rows_masked_by_the_lowest_finite_value(dtype: str) -> None:
    """A row whose every key carries finfo.min (PyTorch's usual mask value): finite, so the
    row is PyTorch's softmax of its rounded scores (the mean of v for equal ones), not 0.
    Its log2 used to overflow to -inf, which masked the row like -inf."""
    torch = pytest.importorskip("torch")
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from cudnnlite import dtypes

    dt = dtypes.bfloat16 if dtype == "bfloat16" else np.dtype(dtype)
    rng = np.random.default_rng(7)
    shapes = ((1, 2, 4, 16), (1, 2, 6, 16), (1, 2, 6, 16), (1, 2, 4, 16))
    q, k, v, do = (rng.standard_normal(s).astype(dt) for s in shapes)
    lowest = float(dtypes.finfo(dt).min)
    mask = np.zeros((4, 6), dt)
    mask[1] = lowest  # every key of row 1
    mask[2, :4] = lowest  # some keys of row 2
    mask_t = torch.tensor(mask.astype(np.float64))
    math_t = torch.float64 if dtype == "float64" else torch.float32
    qt, kt, vt = (torch.tensor(a.astype(np.float64), dtype=math_t, requires_grad=True)
                  for a in (q, k, v))  # fmt: skip
    with sdpa_kernel(SDPBackend.MATH):
        want = torch.nn.functional.scaled_dot_product_attention(qt, kt, vt,
                                                                attn_mask=mask_t.to(math_t))
    # row 1's output: the mean of v (its scores all round to finfo.min)
    np.testing.assert_allclose(want[0, :, 1].detach().numpy(),
                               v.astype(np.float64).mean(axis=2)[0], rtol=1e-5, atol=1e-5)
    tol = {"float32": 1e-5, "float64": 1e-12, "bfloat16": 2e-2}[dtype]  # (storage rounding)
    ran = 0
    for algo in FWD_SOLVERS:
        try:
            o, lse = cl.scaled_dot_product_attention(q, k, v, attn_mask=mask, return_lse=True,
                                                     algo=algo)  # fmt: skip
        except NotSupportedError:
            continue
        ran += 1
        np.testing.assert_allclose(o.astype(np.float64), want.detach().numpy(), atol=tol,
                                   rtol=tol, err_msg=algo)  # fmt: skip
        assert np.isfinite(lse).all()
    assert ran >= 3
    # Backward: the unfused solver recomputes the softmax densely (exact); the fused ones
    # recompute P from an lse that lost row 1's sum (README), exact for a row whose dout is
    # 0 (a padded row's, usually)
    do[0, :, 1] = 0
    want.backward(torch.tensor(do.astype(np.float64), dtype=math_t))
    o, lse = cl.scaled_dot_product_attention(q, k, v, attn_mask=mask, return_lse=True)
    for algo in ("sdpa_bwd_unfused", "sdpa_bwd_flash_fp32", "sdpa_bwd_flash_tc",
                 "sdpa_bwd_flash_dmma"):  # fmt: skip
        try:
            grads = cl.scaled_dot_product_attention_backward(do, q, k, v, o, lse, mask,
                                                             algo=algo)  # fmt: skip
        except NotSupportedError:
            continue
        for g, t in zip(grads, (qt, kt, vt), strict=True):
            np.testing.assert_allclose(g.astype(np.float64), t.grad.numpy(), atol=4 * tol,
                                       rtol=4 * tol, err_msg=algo)  # fmt: skip
