"""Property tests of the fp64 tensor-core flash attention (sdpa_fwd_flash_dmma,
sdpa_bwd_flash_dmma): on random small float64 problems (GQA, causal either alignment,
windows, bool / additive masks, dropout, head dims 1-128 that land in both head tiles,
sequence lengths that cross the key and query tiles, a NaN query row without masking),
both solvers apply and agree with the CUDA-core flash kernels, NaN where they have NaN.

Tolerance: both compute every product and sum in double, in different orders; each output
is a sum of at most skv + d products of values of magnitude <= ~10 (randn inputs, softmax
weights <= 1), so the two differ by a few hundred ulps of that at most: 1e-11 absolute
and relative (about 2^-36) leaves orders of magnitude of margin while any float32
rounding (2^-24) would fail it."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("hypothesis")

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import cudnnlite as cl  # noqa: E402

HYPO = settings(max_examples=12, deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture])  # fmt: skip
TOL = dict(rtol=1e-11, atol=1e-11, equal_nan=True)


@st.composite
def cases(draw: st.DrawFn) -> dict:
    hkv, group = draw(st.integers(1, 2)), draw(st.integers(1, 2))
    sq, skv = draw(st.integers(1, 40)), draw(st.integers(1, 40))
    d = draw(st.sampled_from((1, 5, 16, 64, 65, 100, 128)))
    dv = draw(st.sampled_from((1, 7, 32, 64, 127)))
    kw: dict = {"enable_gqa": group > 1}
    if draw(st.booleans()):
        kw["is_causal"] = True
        kw["causal_align"] = draw(st.sampled_from(("top_left", "bottom_right")))
    if draw(st.booleans()):
        kw["window"] = (draw(st.integers(0, 8)), draw(st.integers(-1, 4)))
    if draw(st.booleans()):
        kw["dropout_p"], kw["seed"] = 0.3, draw(st.integers(0, 2**32))
    mask = draw(st.sampled_from((None, "bool", "additive")))
    return dict(b=draw(st.integers(1, 2)), hkv=hkv, hq=hkv * group, sq=sq, skv=skv, d=d, dv=dv,
                mask=mask, nan=draw(st.booleans()), kw=kw)  # fmt: skip


@HYPO
@given(case=cases(), seed=st.integers(0, 2**16))
def test_fp64_tensor_core_attention_matches_cuda_cores(case: dict, seed: int) -> None:
    rng = np.random.default_rng(seed)
    b, hq, hkv, sq, skv = (case[n] for n in ("b", "hq", "hkv", "sq", "skv"))
    q = rng.standard_normal((b, hq, sq, case["d"]))
    k = rng.standard_normal((b, hkv, skv, case["d"]))
    v = rng.standard_normal((b, hkv, skv, case["dv"]))
    kw = case["kw"]
    if case["nan"] and not (case["mask"] or "is_causal" in kw or "window" in kw):
        # one query row's scores all NaN, the row keeping every key: NaN in its output
        # row, its dq row, and every dk and dv row (PyTorch's math backend). (With masking,
        # a NaN row or key that the masks exclude meets the kernels' zero probabilities in
        # whichever tiles they visit, 0 * NaN, so where it shows depends on the tiling.)
        q[0, 0, rng.integers(sq), 0] = np.nan
    mask = None
    if case["mask"] == "bool":
        mask = rng.random((sq, skv)) < 0.7
    elif case["mask"] == "additive":
        mask = rng.standard_normal((hq, sq, skv))
    sdpa, sdpa_bwd = cl.scaled_dot_product_attention, cl.scaled_dot_product_attention_backward
    got, lse_got = sdpa(q, k, v, mask, return_lse=True, algo="sdpa_fwd_flash_dmma", **kw)
    want, lse = sdpa(q, k, v, mask, return_lse=True, algo="sdpa_fwd_flash_fp32", **kw)
    np.testing.assert_allclose(got, want, **TOL)
    np.testing.assert_allclose(lse_got, lse, **TOL)
    dout = rng.standard_normal(want.shape)
    mask_grad = case["mask"] == "additive"
    grads = sdpa_bwd(dout, q, k, v, want, lse, mask, mask_grad=mask_grad,
                     algo="sdpa_bwd_flash_dmma", **kw)  # fmt: skip
    wants = sdpa_bwd(dout, q, k, v, want, lse, mask, mask_grad=mask_grad,
                     algo="sdpa_bwd_flash_fp32", **kw)  # fmt: skip
    assert len(grads) == len(wants) == 3 + mask_grad
    for name, a, e in zip(("dq", "dk", "dv", "dmask"), grads, wants, strict=False):
        np.testing.assert_allclose(a, e, err_msg=name, **TOL)
