"""Property tests of ``scaled_dot_product_attention`` and its backward through the public API
(hypothesis), against the float64 reference (``cudnnlite.reference.attention``): random small
problems in every dtype and both layouts, GQA/MQA, causal in both alignments, windows, bool
and additive masks (with -inf entries) broadcast over batch and heads, per-batch lengths,
negative and non-default scales, no keys at all, the solver drawn among those that apply
(or left to the dispatcher), and dropout. The fp64 tensor-core solvers against the CUDA-core
kernels are test_attention_dmma_properties.py's.

Tolerance, per element, from float64 magnitudes of the same problem (BHSD, GQA heads
expanded). U is the storage type's unit roundoff (2^-11 fp16, 2^-8 bf16, 2^-24 fp32, 2^-53
fp64), A the accumulation type's (fp32 for every type but float64: 2^-24; 2^-53), R = U for
fp16/bf16 (the tensor-core kernels round P and dS to 16 bits before their MMAs), else 0, and
T the absolute error of that rounding below the type's normal range (half the subnormal
spacing: 2^-25 fp16, 2^-134 bf16): a probability of e^-20 is an fp16 subnormal:
  - a score s_ij = scale q_i.k_j (+ an additive mask) sums d exact products in A: off by
    (d + 2) A |scale| (|q||k|^T)_ij (+ A |m_ij|); the softmax multiplies by log2(e), takes
    exp2 of s - max (a few roundings of |s|, 8 A for exp2 and the running max and sum),
    sums over skv keys ((skv + 2) A) and stores lse (A |lse|): each probability's relative
    error is within eps_p_ij = A ((d + 4) |scale| (|q||k|^T)_ij + 2 |lse_i| + skv + 8);
  - out_i = sum_j P_ij v_j / l_i: U |ref| (its own rounding) + (2 max_j eps_p_ij + R +
    (skv + 2) A) (Pd |v|)_i, Pd the dropped-out probabilities (the magnitude of the sum),
    + T f (K |v|)_i, K the kept keys (P > 0) and f the dropout factor;
  - lse: max_j eps_p_ij over the row's kept keys;
  - backward, from the forward's stored o and lse: P recomputed from lse (eps_p + the lse
    bound); dP = dO V^T: (dv + 2) A (|dO||V|^T) times the dropout factor; delta = rowsum(dO o)
    carries the forward's bound on o through |dO|, plus (dv + 2) A rowsum(|dO||o|); so
    err(dS) = P (err(dP) + err(delta)) + (eps_p + 4 A) |dS|; dq = scale dS K: (err(dS) +
    (R + (skv + 2) A) |dS| + T f K) |K|; dk = scale dS^T Q the same over the g * sq rows of
    a kv head's group; dv = Pd^T dO: ((eps_p + R + (g sq + 2) A) Pd + T f K)^T |dO|; dmask =
    dS (written in A, summed over the axes the mask broadcasts along: (n + 2) A more); every
    gradient stored: U |ref|.
Every term but the final rounding is doubled (SAFETY): for float64 the reference rounds as
often as the kernels do. ATOL covers fp16's subnormal spacing and the tensor-core kernels'
flush of probabilities below 2^-126. A semantic error (a wrong key kept, a wrong dropout
element, a missing scale) is O(1) relative, orders of magnitude above these bounds.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, example, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import cudnnlite as cl  # noqa: E402
from cudnnlite.dispatch import registry  # noqa: E402
from cudnnlite.dispatch.plans import get_plan  # noqa: E402
from cudnnlite.problems.attention import AttentionProblem  # noqa: E402
from cudnnlite.reference.attention import sdpa_backward, sdpa_forward  # noqa: E402
from cudnnlite.runtime.caps import capabilities  # noqa: E402
from cudnnlite.runtime.select import backend_by_name  # noqa: E402
from cudnnlite.testing import to_backend, to_numpy  # noqa: E402

HYPO = settings(suppress_health_check=[HealthCheck.function_scoped_fixture])

DTYPES = {"fp32": np.float32, "fp64": np.float64, "fp16": np.float16}
if cl.bfloat16 is not None:  # bf16 needs ml_dtypes (the GPU check machine may lack it)
    DTYPES["bf16"] = cl.bfloat16
UNIT = {"fp16": 2.0**-11, "bf16": 2.0**-8, "fp32": 2.0**-24, "fp64": 2.0**-53}
ATOL = {"fp16": 2.0**-24, "bf16": 1e-30, "fp32": 1e-30, "fp64": 1e-300}
TINY = {"fp16": 2.0**-25, "bf16": 2.0**-134}  # T: a 16-bit P or dS in the subnormal range
SAFETY = 2.0
HEAD_DIMS = (1, 3, 8, 16, 24, 64)
# mask shapes, broadcast to (batch, heads, L, S) whatever the layout
MASK_SHAPES = ("LS", "HLS", "B1LS", "B11S", "BHLS")
GRADS = ("dq", "dk", "dv", "dmask")


# ------------------------------------------------------------------ cases
def case_of(**fields: Any) -> dict:
    """A case with defaults (for @example): a small fp32 problem without options."""
    case = dict(dtype="fp32", b=1, hq=1, hkv=1, sq=4, skv=5, d=8, dv=8, layout="BHSD",
                gqa=False, causal=False, align="top_left", window=None, scale=None, mask=None,
                mask_shape="LS", neg_inf=False, lengths_q=None, lengths_kv=None, dropout_p=0.0,
                seed=0, offset=0, fwd_algo="auto", bwd_algo="auto", data=0)  # fmt: skip
    case.update(fields)
    return case


@st.composite
def cases(draw: st.DrawFn, min_skv: int = 0, dropout: bool = False) -> dict:
    dtype = draw(st.sampled_from(tuple(DTYPES)))
    b, hq = draw(st.integers(1, 2)), draw(st.integers(1, 4))
    hkv = draw(st.sampled_from([h for h in range(1, hq + 1) if hq % h == 0]))
    sq, skv = draw(st.integers(1, 20)), draw(st.integers(min_skv, 24))
    d = draw(st.sampled_from(HEAD_DIMS))
    dv = draw(st.one_of(st.just(d), st.sampled_from(HEAD_DIMS)))
    causal = draw(st.booleans())
    window = draw(st.one_of(st.none(), st.tuples(st.integers(-1, 6), st.integers(-1, 4))))
    mask = draw(st.sampled_from((None, "bool", "additive")))
    lengths = st.lists(st.integers(0, sq), min_size=b, max_size=b)
    case = case_of(
        dtype=dtype, b=b, hq=hq, hkv=hkv, sq=sq, skv=skv, d=d, dv=dv,
        layout=draw(st.sampled_from(("BHSD", "BSHD"))),
        gqa=hkv not in (1, hq) or draw(st.booleans()),
        causal=causal, window=window,
        align=draw(st.sampled_from(("top_left", "bottom_right"))),
        scale=draw(st.sampled_from((None, 0.3, 1.0, -0.7))),
        mask=mask, mask_shape=draw(st.sampled_from(MASK_SHAPES)),
        neg_inf=mask == "additive" and draw(st.booleans()),
        lengths_q=draw(st.one_of(st.none(), lengths)),
        lengths_kv=draw(st.one_of(st.none(), st.lists(st.integers(0, skv), min_size=b,
                                                       max_size=b))),
        # an index into ("auto", the solvers that apply), resolved on the backend
        fwd_algo=draw(st.integers(0, 8)), bwd_algo=draw(st.integers(0, 8)),
        data=draw(st.integers(0, 2**16)),
    )  # fmt: skip
    if dropout:
        case["dropout_p"] = draw(st.sampled_from((0.1, 0.5, 0.85)))
        case["seed"] = draw(st.integers(0, 2**63 - 1))
        case["offset"] = draw(st.integers(0, 2**40))
    return case


def _problem(case: dict, direction: str) -> AttentionProblem:
    return AttentionProblem(
        case["b"], case["hq"], case["hkv"], case["sq"], case["skv"], case["d"], case["dv"],
        case["layout"], case["dtype"], direction, causal=case["causal"], align=case["align"],
        window=case["window"], mask=case["mask"] or "none", dropout=case["dropout_p"] > 0,
        varlen=case["lengths_q"] is not None or case["lengths_kv"] is not None,
    )  # fmt: skip


def applicable(backend: str, case: dict, direction: str) -> list[str]:
    """The solvers of the case's problem that apply on ``backend``, in registry order."""
    if case["sq"] * case["skv"] == 0:  # the op answers without a solver
        return []
    problem = _problem(case, direction)
    caps = capabilities(backend_by_name(backend))
    return [s.name for s in registry.solvers(f"sdpa_{direction}") if s.is_applicable(problem, caps)]


def _algo(backend: str, case: dict, direction: str) -> str:
    pick = case[f"{direction}_algo"]
    if isinstance(pick, str):
        return pick
    algos = ["auto", *applicable(backend, case, direction)]
    return algos[pick % len(algos)]


# ------------------------------------------------------------------ operands
class Call:
    """A case's operands (NumPy, in its dtype and layout) and the keyword arguments that the
    forward and the backward share."""

    def __init__(self, case: dict) -> None:
        rng = np.random.default_rng(case["data"])
        self.case = case
        self.dtype = case["dtype"]
        dt = DTYPES[self.dtype]
        b, hq, hkv, sq, skv = (case[n] for n in ("b", "hq", "hkv", "sq", "skv"))

        def rand(shape: tuple[int, ...]) -> np.ndarray:
            x = rng.standard_normal(shape)
            return x if dt == np.float64 else x.astype(np.float32).astype(dt)

        def shaped(h: int, s: int, e: int) -> tuple[int, ...]:
            return (b, h, s, e) if case["layout"] == "BHSD" else (b, s, h, e)

        self.q = rand(shaped(hq, sq, case["d"]))
        self.k = rand(shaped(hkv, skv, case["d"]))
        self.v = rand(shaped(hkv, skv, case["dv"]))
        self.dout = rand(shaped(hq, sq, case["dv"]))
        self.mask = None
        if case["mask"] is not None:
            dims = {"B": b, "H": hq, "L": sq, "S": skv, "1": 1}
            shape = tuple(dims[c] for c in case["mask_shape"])
            if case["mask"] == "bool":
                self.mask = rng.random(shape) < 0.75
            else:
                m = rng.standard_normal(shape)
                if case["neg_inf"]:  # the exact way to drop keys additively
                    m[rng.random(shape) < 0.3] = -np.inf
                self.mask = m if dt == np.float64 else m.astype(np.float32).astype(dt)
        self.scale = case["scale"]
        self.kw = dict(
            is_causal=case["causal"], scale=case["scale"], enable_gqa=case["gqa"],
            layout=case["layout"], causal_align=case["align"], window=case["window"],
            lengths_q=case["lengths_q"], lengths_kv=case["lengths_kv"],
            dropout_p=case["dropout_p"], seed=case["seed"], offset=case["offset"],
        )  # fmt: skip

    @property
    def additive(self) -> bool:
        return self.case["mask"] == "additive"

    def arrays(self) -> dict[str, Any]:
        return {"q": self.q, "k": self.k, "v": self.v, "dout": self.dout, "mask": self.mask}

    def forward(self, backend: str, algo: str = "auto", return_lse: bool = True) -> Any:
        q, k, v = (to_backend(a, backend) for a in (self.q, self.k, self.v))
        mask = None if self.mask is None else to_backend(self.mask, backend)
        res = cl.scaled_dot_product_attention(q, k, v, mask, return_lse=return_lse, algo=algo,
                                              **self.kw)  # fmt: skip
        return tuple(to_numpy(a) for a in res) if return_lse else to_numpy(res)

    def backward(self, backend: str, o: np.ndarray, lse: np.ndarray,
                 algo: str = "auto") -> dict[str, np.ndarray]:  # fmt: skip
        arrays = (self.dout, self.q, self.k, self.v, o, lse)
        dout, q, k, v, o_, lse_ = (to_backend(a, backend) for a in arrays)
        mask = None if self.mask is None else to_backend(self.mask, backend)
        grads = cl.scaled_dot_product_attention_backward(
            dout, q, k, v, o_, lse_, mask, mask_grad=self.additive, algo=algo, **self.kw
        )
        return {n: to_numpy(g) for n, g in zip(GRADS, grads, strict=False)}


# ------------------------------------------------------------------ reference and bounds
def _bhsd(a: Any, layout: str) -> np.ndarray:
    a = np.asarray(a, dtype=np.float64)
    return a.swapaxes(1, 2) if layout == "BSHD" else a


def _broadcast_axes(mask_shape: tuple[int, ...], full: tuple[int, ...]) -> tuple[int, ...]:
    shape = (1,) * (len(full) - len(mask_shape)) + mask_shape
    return tuple(i for i, (n, f) in enumerate(zip(shape, full, strict=True)) if n == 1 != f)


class Expected:
    """The reference's o, lse and gradients of a Call, and the module docstring's bounds."""

    def __init__(self, c: Call) -> None:
        case, lay = c.case, c.case["layout"]
        b, hq, hkv, sq, skv = (case[n] for n in ("b", "hq", "hkv", "sq", "skv"))
        self.c = c
        self.full = (b, hq, sq, skv)
        self.o_shape = c.dout.shape
        if skv == 0:  # no keys: zeros (a sum over no keys), lse -inf, zero gradients
            self.o, self.lse = np.zeros(self.o_shape), np.full((b, hq, sq), -np.inf)
            self.grads = {"dq": np.zeros(c.q.shape), "dk": np.zeros(c.k.shape),
                          "dv": np.zeros(c.v.shape)}  # fmt: skip
            if c.additive:
                self.grads["dmask"] = np.zeros(c.mask.shape)
            self.p = np.zeros(self.full)
            return
        kw = dict(c.kw, exact_dropout_scale=c.dtype == "fp64")
        del kw["enable_gqa"]
        self.o, self.lse = sdpa_forward(c.q, c.k, c.v, c.mask, **kw)
        dq, dk, dv, dmask = sdpa_backward(c.dout, c.q, c.k, c.v, c.mask, **kw)
        self.grads = {"dq": dq, "dk": dk, "dv": dv}
        if c.additive:
            axes = _broadcast_axes(c.mask.shape, self.full)
            self.grads["dmask"] = dmask.sum(axis=axes, keepdims=True).reshape(c.mask.shape)
        # P and the dropped-out Pd: the reference with v = the identity (BHSD)
        eye = np.broadcast_to(np.eye(skv), (b, hkv, skv, skv))
        bq, bk = _bhsd(c.q, lay), _bhsd(c.k, lay)
        bkw = dict(kw, layout="BHSD")
        self.pd = sdpa_forward(bq, bk, eye, c.mask, **bkw)[0]
        self.p = sdpa_forward(bq, bk, eye, c.mask, **dict(bkw, dropout_p=0.0))[0]
        self._bounds()

    def _bounds(self) -> None:
        c, case = self.c, self.c.case
        lay, g = case["layout"], case["hq"] // case["hkv"]
        d, dv, sq, skv = case["d"], case["dv"], case["sq"], case["skv"]
        u = UNIT[c.dtype]
        a = UNIT["fp64"] if c.dtype == "fp64" else UNIT["fp32"]
        r, tiny = (u, TINY[c.dtype]) if c.dtype in ("fp16", "bf16") else (0.0, 0.0)
        atol = ATOL[c.dtype]
        q, do = np.abs(_bhsd(c.q, lay)), np.abs(_bhsd(c.dout, lay))
        k = np.repeat(np.abs(_bhsd(c.k, lay)), g, axis=1)
        v = np.repeat(_bhsd(c.v, lay), g, axis=1)
        sc = abs(1.0 / np.sqrt(d) if c.scale is None else c.scale)
        p, pd = self.p, self.pd
        kept = p > 0
        factor = 1.0 / (1.0 - case["dropout_p"])
        tk = tiny * factor * kept  # a 16-bit P's absolute rounding, where P is not 0
        # forward
        dot = sc * q @ k.swapaxes(2, 3)
        if c.additive:
            m = np.broadcast_to(np.asarray(c.mask, np.float64), self.full)
            dot = dot + np.where(np.isfinite(m), np.abs(m), 0.0)
        lse_mag = np.where(np.isfinite(self.lse), np.abs(self.lse), 0.0)[..., None]
        eps_p = a * ((d + 4) * dot + 2 * lse_mag + skv + 8)
        row_eps = np.where(kept, eps_p, 0.0).max(axis=-1, keepdims=True)
        o_err = SAFETY * ((2 * row_eps + r + (skv + 2) * a) * (pd @ np.abs(v)) + tk @ np.abs(v))
        self.o_bound = np.abs(self.o) * u + _layout(o_err, lay) + atol
        self.lse_bound = SAFETY * row_eps[..., 0] + atol
        # backward
        ks = np.where(kept, pd / np.where(kept, p, 1.0), 0.0)  # the dropout factor, or 1
        dp = (_bhsd(c.dout, lay) @ v.swapaxes(2, 3)) * ks
        ds = p * (dp - np.sum(dp * p, axis=-1, keepdims=True))
        o_abs = np.abs(_bhsd(self.o, lay))
        delta_err = (np.sum(do * _bhsd(self.o_bound, lay), axis=-1, keepdims=True)
                     + (dv + 2) * a * np.sum(do * o_abs, axis=-1, keepdims=True))  # fmt: skip
        eps_pb = eps_p + self.lse_bound[..., None]
        dp_err = (dv + 2) * a * (do @ np.abs(v).swapaxes(2, 3)) * ks
        ds_err = p * (dp_err + delta_err) + (eps_pb + 4 * a) * np.abs(ds)
        ads = np.abs(ds)

        def fold(x: np.ndarray) -> np.ndarray:  # the query heads that share a kv head
            return x.reshape(case["b"], case["hkv"], g, *x.shape[2:]).sum(axis=2)

        errs = {
            "dq": sc * ((ds_err + (r + (skv + 2) * a) * ads + tk) @ k),
            "dk": fold(sc * (ds_err + (r + (g * sq + 2) * a) * ads + tk).swapaxes(2, 3) @ q),
            "dv": fold(((eps_pb + r + (g * sq + 2) * a) * pd + tk).swapaxes(2, 3) @ do),
        }  # fmt: skip
        self.bounds = {n: np.abs(self.grads[n]) * u + SAFETY * _layout(e, lay) + atol
                       for n, e in errs.items()}  # fmt: skip
        if c.additive:
            axes = _broadcast_axes(c.mask.shape, self.full)
            n = np.prod([self.full[i] for i in axes], dtype=np.int64)
            err = (ds_err + (n + 2) * a * ads).sum(axis=axes, keepdims=True)
            self.bounds["dmask"] = (np.abs(self.grads["dmask"]) * u
                                    + SAFETY * err.reshape(c.mask.shape) + atol)  # fmt: skip

    # rows with no kept key, and keys no query row keeps (per kv head), in the operands' layout
    def dead_rows(self) -> np.ndarray:
        return _layout(np.isneginf(self.lse)[..., None], self.c.case["layout"])

    def dead_keys(self) -> np.ndarray:
        case = self.c.case
        g = case["hq"] // case["hkv"]
        seen = (self.p > 0).reshape(case["b"], case["hkv"], g, case["sq"], -1).any(axis=(2, 3))
        return _layout(~seen[..., None], case["layout"])


def _layout(a: np.ndarray, layout: str) -> np.ndarray:
    return a.swapaxes(1, 2) if layout == "BSHD" else a


def assert_within(got: np.ndarray, want: np.ndarray, bound: np.ndarray, what: str) -> None:
    with np.errstate(invalid="ignore"):  # inf - inf where both are -inf (lse)
        err = np.abs(got.astype(np.float64) - want)
    both_inf = np.isinf(want) & (got.astype(np.float64) == want)
    bad = ~((err <= bound) | both_inf)  # NaN is bad
    if bad.any():
        i = tuple(np.argwhere(bad)[0])
        ratio = np.nanmax(np.where(np.isfinite(err), err / bound, np.inf))
        raise AssertionError(f"{what}: {bad.sum()} of {bad.size} off; first at {i}: got "
                             f"{got[i]}, want {want[i]}, bound {bound[i]:.3g} (worst "
                             f"err/bound {ratio:.3g})")  # fmt: skip


def check_forward(o: np.ndarray, lse: np.ndarray, ex: Expected, what: str) -> None:
    c = ex.c
    assert o.shape == ex.o_shape and o.dtype == np.dtype(DTYPES[c.dtype]), what
    lse_dtype = np.float64 if c.dtype == "fp64" else np.float32
    assert lse.shape == ex.lse.shape and lse.dtype == lse_dtype, what
    np.testing.assert_array_equal(np.isneginf(lse), np.isneginf(ex.lse), err_msg=f"{what} lse")
    if ex.c.case["skv"] == 0:
        assert not o.any(), what
        return
    assert_within(o, ex.o, ex.o_bound, f"{what} out")
    assert_within(lse, ex.lse, ex.lse_bound, f"{what} lse")


def check_backward(grads: dict[str, np.ndarray], ex: Expected, what: str) -> None:
    c = ex.c
    assert set(grads) == set(ex.grads), what
    for name, like in (("dq", c.q), ("dk", c.k), ("dv", c.v), ("dmask", c.mask)):
        if name in grads:
            assert grads[name].shape == like.shape and grads[name].dtype == like.dtype, name
    if ex.c.case["skv"] == 0:
        assert not any(g.any() for g in grads.values()), what
        return
    for name, g in grads.items():
        assert_within(g, ex.grads[name], ex.bounds[name], f"{what} {name}")


def check_dead_rows_are_exact_zeros(o: np.ndarray, grads: dict, ex: Expected) -> None:
    """Rows that keep no key give exactly 0, and so do their dq rows; keys that no row of
    their kv head's group keeps get exactly 0 in dk and dv (README: 0, gradients 0)."""
    rows = np.broadcast_to(ex.dead_rows(), o.shape)
    assert not o[rows].any(), "a row without keys is not 0"
    assert not grads["dq"][np.broadcast_to(ex.dead_rows(), grads["dq"].shape)].any()
    keys = ex.dead_keys()
    for name in ("dk", "dv"):
        assert not grads[name][np.broadcast_to(keys, grads[name].shape)].any(), name


def _snapshot(arrays: dict[str, Any]) -> dict[str, bytes]:
    return {n: np.asarray(a).tobytes() for n, a in arrays.items() if a is not None}


# ------------------------------------------------------------------ properties
@HYPO
@given(case=cases())
# decoding: one query against a long KV cache (the dispatcher's flash-decoding), GQA, fp16
@example(case=case_of(dtype="fp16", hq=4, hkv=1, gqa=True, sq=1, skv=300, d=64, dv=64,
                      causal=True, align="bottom_right", fwd_algo="auto"))  # fmt: skip
# flash-decoding forced on few queries, odd primes, an additive mask with -inf, BSHD
@example(case=case_of(hq=3, hkv=1, sq=3, skv=23, d=3, dv=3, layout="BSHD", mask="additive",
                      mask_shape="B11S", neg_inf=True, fwd_algo="sdpa_fwd_flash_decode",
                      data=5))  # fmt: skip
# head dim 1, primes, lengths (a batch entry without keys), a window
@example(case=case_of(b=2, sq=7, skv=13, d=1, dv=1, window=(2, 1), lengths_q=[7, 3],
                      lengths_kv=[13, 0], fwd_algo="sdpa_fwd_flash_fp32",
                      bwd_algo="sdpa_bwd_flash_fp32"))  # fmt: skip
# one key, a bool mask; fp16 on the tensor cores
@example(case=case_of(dtype="fp16", hq=2, hkv=2, sq=5, skv=1, d=16, dv=16, mask="bool",
                      mask_shape="BHLS", fwd_algo="sdpa_fwd_flash_tc",
                      bwd_algo="sdpa_bwd_flash_tc"))  # fmt: skip
# no keys at all, bottom-right causal with more queries than keys; float64
@example(case=case_of(dtype="fp64", sq=11, skv=0, causal=True, align="bottom_right"))
@example(case=case_of(dtype="fp64", sq=17, skv=5, d=24, dv=8, causal=True,
                      align="bottom_right", scale=-0.7, fwd_algo="sdpa_fwd_flash_dmma",
                      bwd_algo="sdpa_bwd_flash_dmma"))  # fmt: skip
def test_forward_and_backward_match_reference(backend: str, case: dict) -> None:
    """o, lse, dq, dk, dv (and an additive mask's gradient) within the module docstring's
    bounds of the reference, through the solver drawn for each direction; the same o
    without return_lse; rows without keys exactly 0; the inputs, and the o and lse the
    backward takes, left as they were."""
    c = Call(case)
    ex = Expected(c)
    before = _snapshot(c.arrays())
    fwd, bwd = _algo(backend, case, "fwd"), _algo(backend, case, "bwd")
    o, lse = c.forward(backend, fwd)
    check_forward(o, lse, ex, f"forward {fwd}")
    assert c.forward(backend, fwd, return_lse=False).tobytes() == o.tobytes()
    o_lse = _snapshot({"o": o, "lse": lse})
    grads = c.backward(backend, o, lse, bwd)
    check_backward(grads, ex, f"backward {bwd}")
    check_dead_rows_are_exact_zeros(o, grads, ex)
    assert _snapshot(c.arrays()) == before, "an input was modified"
    assert _snapshot({"o": o, "lse": lse}) == o_lse, "the backward modified o or lse"


@HYPO
@given(case=cases(min_skv=1))
@example(case=case_of(dtype="fp16", hq=2, hkv=1, gqa=True, sq=2, skv=19, d=8, dv=24,
                      window=(3, -1), mask="bool", mask_shape="HLS"))  # fmt: skip
def test_every_applicable_solver_agrees(backend: str, case: dict) -> None:
    """Every forward solver that applies agrees with the unfused one (the cross-check)
    within the sum of their bounds; then every backward solver, from the same o and lse."""
    c = Call(case)
    ex = Expected(c)
    fwd, bwd = applicable(backend, case, "fwd"), applicable(backend, case, "bwd")
    assert "sdpa_fwd_unfused" in fwd and "sdpa_bwd_unfused" in bwd
    o0, lse0 = c.forward(backend, "sdpa_fwd_unfused")
    for algo in (a for a in fwd if a != "sdpa_fwd_unfused"):
        o, lse = c.forward(backend, algo)
        np.testing.assert_array_equal(np.isneginf(lse), np.isneginf(lse0), err_msg=algo)
        assert_within(o, o0.astype(np.float64), 2 * ex.o_bound, f"{algo} vs unfused out")
        assert_within(lse, lse0.astype(np.float64), 2 * ex.lse_bound, f"{algo} vs unfused lse")
    g0 = c.backward(backend, o0, lse0, "sdpa_bwd_unfused")
    for algo in (a for a in bwd if a != "sdpa_bwd_unfused"):
        grads = c.backward(backend, o0, lse0, algo)
        for name, g in grads.items():
            assert_within(g, g0[name].astype(np.float64), 2 * ex.bounds[name],
                          f"{algo} vs unfused {name}")  # fmt: skip


@HYPO
@given(case=cases(min_skv=1))
@example(case=case_of(dtype="fp16", b=2, hq=4, hkv=2, gqa=True, sq=20, skv=24, d=64, dv=64))
def test_deterministic_mode_is_bitwise_reproducible(backend: str, case: dict) -> None:
    """With set_deterministic, the dispatcher picks deterministic solvers and repeated calls
    give the same bits (dq is the atomically accumulated gradient of sdpa_bwd_flash_tc)."""
    c = Call(case)
    with cl.settings(deterministic=True):
        for direction in ("fwd", "bwd"):
            plan = get_plan(backend_by_name(backend), _problem(case, direction), "auto")
            assert plan.solver.deterministic, plan.solver.name
        o, lse = c.forward(backend)
        o2, lse2 = c.forward(backend)
        assert _snapshot({"o": o, "lse": lse}) == _snapshot({"o": o2, "lse": lse2})
        first = c.backward(backend, o, lse)
        again = c.backward(backend, o, lse)
    assert _snapshot(first) == _snapshot(again)
    check_backward(first, Expected(c), "deterministic backward")


@HYPO
@given(case=cases(min_skv=1, dropout=True))
@example(case=case_of(dtype="fp16", hq=2, hkv=1, gqa=True, sq=9, skv=16, d=16, dv=16,
                      dropout_p=0.5, seed=7, offset=3, fwd_algo="sdpa_fwd_flash_tc",
                      bwd_algo="sdpa_bwd_flash_tc"))  # fmt: skip
@example(case=case_of(dtype="fp64", sq=1, skv=300, d=3, dv=3, dropout_p=0.1, seed=2**63 - 1,
                      fwd_algo="sdpa_fwd_flash_decode"))  # fmt: skip
def test_dropout_is_seeded_and_the_backward_is_its_gradient(backend: str, case: dict) -> None:
    """The same seed and offset give the same bits twice; the output is the reference's with
    the Philox mask of that seed, and the backward with the same seed is the gradient of
    that same dropped-out forward (the reference's gradient with the mask)."""
    c = Call(case)
    ex = Expected(c)
    fwd, bwd = _algo(backend, case, "fwd"), _algo(backend, case, "bwd")
    o, lse = c.forward(backend, fwd)
    o2, lse2 = c.forward(backend, fwd)
    assert _snapshot({"o": o, "lse": lse}) == _snapshot({"o": o2, "lse": lse2})
    check_forward(o, lse, ex, f"forward {fwd}")
    grads = c.backward(backend, o, lse, bwd)
    check_backward(grads, ex, f"backward {bwd}")
    # the same mask again in the backward (sdpa_bwd_flash_tc's atomic dq may round otherwise)
    if get_plan(backend_by_name(backend), _problem(case, "bwd"), bwd).solver.deterministic:
        assert _snapshot(c.backward(backend, o, lse, bwd)) == _snapshot(grads)


DEAD = ("bool_row", "neg_inf_row", "lengths", "bottom_right", "window")


@HYPO
@given(case=cases(min_skv=1), how=st.sampled_from(DEAD), row=st.integers(0, 19))
@example(case=case_of(dtype="fp16", sq=6, skv=4, d=8, dv=8), how="bottom_right", row=0)
def test_rows_without_keys_give_zeros(backend: str, case: dict, how: str, row: int) -> None:
    """Rows that keep no key (a bool mask's row all False, an additive row all -inf, rows
    past lengths_q or with lengths_kv 0, bottom-right causal with more queries than keys, a
    window that misses every key) give 0, lse -inf and zero gradients, as documented; the
    rest of the problem still matches the reference."""
    sq, skv, b = case["sq"], case["skv"], case["b"]
    row %= sq
    if how in ("bool_row", "neg_inf_row"):
        case.update(mask="bool" if how == "bool_row" else "additive", mask_shape="BHLS",
                    neg_inf=True)  # fmt: skip
    elif how == "lengths":
        case.update(lengths_q=[row] + [sq] * (b - 1), lengths_kv=[skv] * (b - 1) + [0])
    elif how == "bottom_right":
        case.update(causal=True, align="bottom_right", window=None, lengths_q=None,
                    lengths_kv=None, sq=skv + 1 + row)  # fmt: skip
    else:  # a window of one key, the query's own position: rows past the last key see none
        case.update(window=(0, 0), causal=False, align="top_left", lengths_q=None,
                    lengths_kv=None, sq=skv + 1 + row)  # fmt: skip
    c = Call(case)
    if how == "bool_row":
        c.mask[:, :, row] = False
    elif how == "neg_inf_row":
        c.mask[:, :, row] = -np.inf
    ex = Expected(c)
    assert np.isneginf(ex.lse).any()  # the case has a row without keys
    before = _snapshot(c.arrays())
    fwd, bwd = _algo(backend, case, "fwd"), _algo(backend, case, "bwd")
    o, lse = c.forward(backend, fwd)
    check_forward(o, lse, ex, f"forward {fwd}")
    grads = c.backward(backend, o, lse, bwd)
    check_dead_rows_are_exact_zeros(o, grads, ex)
    check_backward(grads, ex, f"backward {bwd}")
    assert _snapshot(c.arrays()) == before, "an input was modified"
