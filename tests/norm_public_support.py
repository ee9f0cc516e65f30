"""Cases, operands, error bounds and PyTorch helpers of the public normalization property
tests (tests/test_norm_public_properties.py, whose docstring derives the bounds)."""

from __future__ import annotations

import dataclasses
import math
import os
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from property_support import (  # noqa: E402
    OUT_KINDS,
    assert_within,
    xp_of,
)

from cudnnlite import dtypes  # noqa: E402
from cudnnlite.testing import to_backend, to_numpy  # noqa: E402

F = torch.nn.functional
# Each draw may compile kernels of its own (a dtype, a layout, a vector variant): 12 draws
# by default, as tests/test_conv_tc_properties.py (CUDNNLITE_HYPOTHESIS_EXAMPLES deepens).
EXAMPLES = int(os.environ.get("CUDNNLITE_HYPOTHESIS_EXAMPLES", "12"))
HYPO = settings(max_examples=EXAMPLES, deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture])  # fmt: skip

SHORTS = ("fp32", "fp16", "bf16", "fp64") if dtypes.HAVE_BFLOAT16 else ("fp32", "fp16", "fp64")
LAYOUTS = ("NCHW", "NHWC")
AFFINE = ("wb", "wb", "w", "b", "none")
ACC_U = {"fp32": 2.0**-24, "fp16": 2.0**-24, "bf16": 2.0**-24, "fp64": 2 * 2.0**-53}
STORE_U = {"float32": 2.0**-24, "float16": 2.0**-11, "bfloat16": 2.0**-8, "float64": 2.0**-53}
FLOOR = {"float16": 2.0**-24}
K = 4
K_ELEM = 8
# sizes: 1s, primes, and multiples of a 16-byte pack (4 fp32, 8 fp16 / bf16, 2 fp64)
SIZES = (1, 2, 3, 4, 5, 7, 8, 11, 16)


# ------------------------------------------------------------------ cases


@dataclasses.dataclass(frozen=True)
class Case:
    """One call as a user writes it. op: batch, instance, group, layer or rms. training:
    batch norm's mode, instance norm's use_input_stats. ns: layer / RMS norm's
    normalized_shape as passed (an int, a tuple or a list, kept hashable as a tuple tagged
    by ``ns_form``)."""

    op: str
    short: str
    shape: tuple[int, ...]
    layout: str = "NCHW"
    groups: int = 1
    ns: tuple[int, ...] = ()
    ns_form: str = "tuple"
    affine: str = "wb"
    eps: float | None = 1e-5
    loc: float = 0.0
    seed: int = 0
    nan_at: float | None = None
    view: bool = False
    out: str = "none"
    training: bool = True
    mode: str = "spatial"
    running: str = "none"
    momentum: float = 0.1

    @property
    def dtype(self) -> np.dtype:
        return dtypes.by_short(self.short).numpy

    @property
    def acc(self) -> Any:
        return np.float64 if self.short == "fp64" else np.float32

    @property
    def param_dtype(self) -> Any:
        """Batch-norm parameters (and instance norm's from running statistics) are of the
        accumulation type; the row norms' share x's dtype."""
        bn_like = self.op == "batch" or (self.op == "instance" and not self.training)
        return self.acc if bn_like else self.dtype

    @property
    def channel_axis(self) -> int:
        return len(self.shape) - 1 if self.layout == "NHWC" else 1

    @property
    def channels(self) -> int:
        return self.shape[self.channel_axis]

    @property
    def pshape(self) -> tuple[int, ...]:
        if self.op in ("layer", "rms"):
            return self.ns
        if self.op == "batch" and self.mode == "per_activation":
            return self.shape[1:]
        return (self.channels,)

    @property
    def ns_arg(self) -> Any:
        return {"int": lambda: self.ns[0], "list": lambda: list(self.ns)}.get(
            self.ns_form, lambda: self.ns)()  # fmt: skip

    def with_(self, **kw: Any) -> Case:
        return dataclasses.replace(self, **kw)


def _common(draw: st.DrawFn) -> dict[str, Any]:
    return dict(
        short=draw(st.sampled_from(SHORTS)),
        affine=draw(st.sampled_from(AFFINE)),
        eps=draw(st.sampled_from((1e-5, 1e-3, 0.25))),
        loc=draw(st.sampled_from((0.0, 0.0, 3.0, 100.0))),
        seed=draw(st.integers(0, 2**16)),
        nan_at=draw(st.one_of(st.none(), st.none(), st.floats(0, 1, exclude_max=True))),
        view=draw(st.booleans()),
        out=draw(st.sampled_from(OUT_KINDS)),
    )


def _channel_shape(draw: st.DrawFn, n: int, c: int, layout: str, min_spatial: int = 1) -> tuple:
    nd = draw(st.sampled_from((0, 1, 2, 2, 3)) if min_spatial <= 1 else st.sampled_from((1, 2, 3)))
    hi = 5 if nd == 3 else len(SIZES)
    spatial = [draw(st.sampled_from(SIZES[:hi])) for _ in range(nd)]
    if math.prod(spatial) < min_spatial:
        spatial[-1] = min_spatial
    return (n, *spatial, c) if layout == "NHWC" else (n, c, *spatial)


@st.composite
def bn_cases(draw: st.DrawFn) -> Case:
    training = draw(st.booleans())
    mode = draw(st.sampled_from(("spatial", "spatial", "spatial", "per_activation")))
    layout = draw(st.sampled_from(LAYOUTS))
    n = draw(st.sampled_from((0, 1, 2, 3, 4)))
    shape = _channel_shape(draw, n, draw(st.sampled_from(SIZES[:8])), layout)
    count = n if mode == "per_activation" else math.prod(shape) // shape[-1 if layout == "NHWC"
                                                                          else 1]  # fmt: skip
    if training and count == 1:  # (PyTorch refuses: test_training_on_one_value_refused)
        shape = (2, *shape[1:])
    running = draw(st.sampled_from(("both", "both", "mean", "var", "none"))) if training else "both"
    return Case("batch", shape=shape, layout=layout, training=training, mode=mode,
                running=running, momentum=draw(st.sampled_from((0.0, 0.1, 0.5, 1.0))),
                **_common(draw))  # fmt: skip


@st.composite
def instance_cases(draw: st.DrawFn) -> Case:
    # PyTorch's instance norm wants more than one spatial element (use_input_stats)
    layout = draw(st.sampled_from(LAYOUTS))
    shape = _channel_shape(draw, draw(st.sampled_from((0, 1, 2, 3))),
                           draw(st.sampled_from(SIZES[:8])), layout, min_spatial=2)  # fmt: skip
    training = draw(st.sampled_from((True, True, False)))
    running = draw(st.sampled_from(("both", "mean", "none"))) if training else "both"
    return Case("instance", shape=shape, layout=layout, training=training, running=running,
                momentum=draw(st.sampled_from((0.0, 0.1, 1.0))), **_common(draw))  # fmt: skip


@st.composite
def group_cases(draw: st.DrawFn) -> Case:
    layout = draw(st.sampled_from(LAYOUTS))
    groups, per = draw(st.sampled_from((1, 2, 3, 4, 5))), draw(st.sampled_from((1, 2, 3, 4)))
    shape = _channel_shape(draw, draw(st.sampled_from((0, 1, 2, 3))), groups * per, layout)
    return Case("group", shape=shape, layout=layout, groups=groups, **_common(draw))


@st.composite
def row_cases(draw: st.DrawFn, op: str) -> Case:
    k = draw(st.sampled_from((1, 1, 2, 3)))
    ns = tuple(draw(st.sampled_from((*SIZES, 17, 32, 40))) for _ in range(k))
    if math.prod(ns) > 160:
        ns = ns[-1:]
    lead = tuple(draw(st.lists(st.sampled_from((0, 1, 2, 3, 5)), max_size=3)))
    if 0 in lead and draw(st.booleans()):
        lead = tuple(d or 1 for d in lead)  # (empty rows now and then, not half the time)
    if math.prod(lead) * math.prod(ns) > 1500:  # (the emulator's time)
        lead = lead[-1:]
    form = draw(st.sampled_from(("tuple", "list", "int") if k == 1 else ("tuple", "list")))
    common = _common(draw)
    if op == "rms":
        common["eps"] = draw(st.sampled_from((None, 1e-6, 0.25)))
        common["affine"] = draw(st.sampled_from(("w", "none")))
    return Case(op, shape=(*lead, *ns), ns=ns, ns_form=form, **common)


# ------------------------------------------------------------------ operands


def operands(case: Case) -> dict[str, np.ndarray | None]:
    """x (with its NaN), dy, weight, bias, running_mean, running_var (None where not
    given), exactly representable in their dtypes."""
    rng = np.random.default_rng(case.seed)
    x = rng.standard_normal(case.shape) + case.loc
    if case.nan_at is not None and x.size:
        x.reshape(-1)[int(case.nan_at * x.size)] = np.nan
    dy = rng.standard_normal(case.shape)
    w = rng.uniform(-1.5, 1.5, case.pshape)
    b = rng.standard_normal(case.pshape)
    rm = rng.standard_normal(case.pshape) * 0.5
    rv = rng.uniform(0.5, 2.0, case.pshape)
    if case.short == "fp64":  # bits a float32 path would drop
        x, dy = x + rng.standard_normal(x.shape) * 2.0**-30, dy + 2.0**-31
    x, dy = x.astype(case.dtype), dy.astype(case.dtype)
    w, b = w.astype(case.param_dtype), b.astype(case.param_dtype)
    rm, rv = rm.astype(case.acc), rv.astype(case.acc)
    return {
        "x": x,
        "dy": dy,
        "w": w if "w" in case.affine else None,
        "b": b if "b" in case.affine else None,
        "rm": rm if case.running in ("both", "mean") else None,
        "rv": rv if case.running in ("both", "var") else None,
    }


def on(backend: str, a: np.ndarray | None, view: bool = False) -> Any:
    """a on the backend; ``view``: as a Fortran-ordered array (not C-contiguous)."""
    if a is None:
        return None
    ab = to_backend(a, backend)
    return xp_of(backend).asfortranarray(ab) if view else ab


def f64(a: Any) -> np.ndarray | None:
    return None if a is None else to_numpy(a).astype(np.float64)


# ------------------------------------------------------------------ geometry and bounds


class Geo:
    """How an op sees x: its statistic rows (R, M) and the axes its parameters run
    along; maps x-shaped arrays to rows and back, parameters to x's shape and sums
    over x's shape to parameters."""

    def __init__(self, case: Case) -> None:
        shape, nd, ch = case.shape, len(case.shape), case.channel_axis
        rest = [i for i in range(nd) if i != ch]
        if case.op == "batch" and case.mode == "per_activation":  # rows: the features
            perm, self.param_axes = (*range(1, nd), 0), tuple(range(1, nd))
            self.r, self.m = math.prod(shape[1:]), shape[0]
        elif case.op == "batch":  # rows: the channels
            perm, self.param_axes = (ch, *rest), (ch,)
            self.r, self.m = shape[ch], math.prod(shape[i] for i in rest)
        elif case.op in ("group", "instance"):  # rows: (sample, group)
            g = case.groups if case.op == "group" else case.channels
            perm, self.param_axes = (0, ch, *rest[1:]), (ch,)
            self.r = shape[0] * g
            self.m = case.channels // g * math.prod(shape[i] for i in rest[1:])
        else:  # rows: the leading elements
            k = len(case.ns)
            perm, self.param_axes = tuple(range(nd)), tuple(range(nd - k, nd))
            self.r, self.m = math.prod(shape[: nd - k]), math.prod(case.ns)
        self.shape, self.perm, self.inv = shape, perm, tuple(np.argsort(perm))
        self.pshape = case.pshape
        self.others = tuple(i for i in range(nd) if i not in self.param_axes)
        self.count = math.prod(shape[i] for i in self.others)  # elements per parameter

    def rows(self, a: np.ndarray) -> np.ndarray:
        return np.transpose(a, self.perm).reshape(self.r, self.m)

    def unrows(self, r: np.ndarray) -> np.ndarray:
        return np.reshape(r, [self.shape[p] for p in self.perm]).transpose(self.inv)

    def per_row(self, v: np.ndarray) -> np.ndarray:
        """(R,) row values as an x-shaped array."""
        return self.unrows(np.broadcast_to(np.reshape(v, (-1, 1)), (self.r, self.m)))

    def param(self, p: np.ndarray | None, default: float) -> np.ndarray:
        """The parameter (or ``default`` for None) at each element of x."""
        if p is None:
            return np.full(self.shape, default)
        bs = [self.shape[i] if i in self.param_axes else 1 for i in range(len(self.shape))]
        return np.broadcast_to(np.reshape(p, bs), self.shape)

    def psum(self, a: np.ndarray) -> np.ndarray:
        return a.sum(axis=self.others).reshape(self.pshape)


@dataclasses.dataclass
class Mags:
    """The bounds' per-element magnitudes (module docstring), x-shaped, float64."""

    xhat: np.ndarray
    cond: np.ndarray
    rstd: np.ndarray
    gw: np.ndarray  # max |dy w| over the row
    xmax: np.ndarray  # max |xhat| over the row
    mean_tol: np.ndarray  # (R,): the mean's bound
    rstd_tol: np.ndarray  # (R,): the rstd's bound
    cond_r: np.ndarray  # (R,)

    def single_pass(self, geo: Geo) -> Mags:
        """The bounds of a variance taken as E[x^2] - mean^2: cond^2 for cond."""
        return dataclasses.replace(self, cond=self.cond * geo.per_row(self.cond_r),
                                   rstd_tol=self.rstd_tol * self.cond_r,
                                   cond_r=self.cond_r**2)  # fmt: skip


def row_max(r: np.ndarray) -> np.ndarray:
    return np.abs(r).max(axis=1, initial=0.0)


def mags(geo: Geo, case: Case, ops: dict, rms: bool = False) -> Mags:
    """From float64 statistics of x's rows (the op's own eps; RMS: no mean)."""
    x64, g64 = f64(ops["x"]), f64(ops["dy"])
    w = geo.param(f64(ops["w"]), 1.0)
    eps = case.eps if case.eps is not None else float(dtypes.finfo(case.dtype).eps)
    r = geo.rows(x64)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.zeros(geo.r) if rms or not geo.m else r.mean(axis=1)
        sq = (r - mean[:, None]) ** 2
        rstd = 1.0 / np.sqrt((sq.mean(axis=1) if geo.m else np.zeros(geo.r)) + eps)
        xh = (r - mean[:, None]) * rstd[:, None]
        cond = np.ones(geo.r) if rms else 1.0 + row_max(r) * rstd
    m1 = K * (geo.m + 1) * ACC_U[case.short]
    return Mags(xhat=geo.unrows(xh), cond=geo.per_row(cond), rstd=geo.per_row(rstd),
                gw=geo.per_row(row_max(geo.rows(g64 * w))), xmax=geo.per_row(row_max(xh)),
                mean_tol=m1 * row_max(r), rstd_tol=m1 * cond * rstd, cond_r=cond)  # fmt: skip


def tol(err: np.ndarray, want: np.ndarray, dtype: Any, ua: float) -> np.ndarray:
    """err plus one rounding to ``dtype`` of want (module docstring)."""
    name = np.dtype(dtype).name
    return err + (2 * STORE_U[name] + ua) * np.abs(want) + FLOOR.get(name, 0.0)


def both(got: Any, wants: dict[str, Any], bound: np.ndarray, what: str) -> None:
    """got within bound of PyTorch's and the reference's result (where given)."""
    for name, want in wants.items():
        if want is not None:
            assert_within(got, want, bound, f"{what} vs {name}")


def y_bound(case: Case, geo: Geo, mg: Mags, ops: dict, want: np.ndarray) -> np.ndarray:
    ua = ACC_U[case.short]
    w, b = np.abs(geo.param(f64(ops["w"]), 1.0)), np.abs(geo.param(f64(ops["b"]), 0.0))
    err = K * (geo.m + 1) * ua * (w * (1 + np.abs(mg.xhat)) * mg.cond + b)
    return tol(err, want, case.dtype, ua)


def dx_bound(case: Case, geo: Geo, mg: Mags, want: np.ndarray) -> np.ndarray:
    ua = ACC_U[case.short]
    err = K * (geo.m + 1) * ua * mg.rstd * mg.cond * mg.gw * (1 + mg.xmax) ** 2
    return tol(err, want, case.dtype, ua)


def dparam_bounds(case: Case, geo: Geo, mg: Mags, ops: dict, dws: tuple, dtype: Any
                  ) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """Bounds of (dweight, dbias): the errors of dy xhat (xhat's from the statistics)
    summed, plus the sums' own count * ua."""
    ua = ACC_U[case.short]
    g = np.abs(f64(ops["dy"]))
    with np.errstate(invalid="ignore"):
        xh_err = K * (geo.m + 1) * ua * mg.cond * (1 + np.abs(mg.xhat))
        dw = geo.psum(g * xh_err) + K * geo.count * ua * geo.psum(g * (1 + np.abs(mg.xhat)))
    db = K * geo.count * ua * geo.psum(g)
    return tol(dw, dws[0], dtype, ua), tol(db, 0.0 if dws[1] is None else dws[1], dtype, ua)


def check_rows(case: Case, geo: Geo, ops: dict, got: dict, wants: dict, rms: bool = False
               ) -> None:  # fmt: skip
    """Layer, RMS, group and instance norm: mean, rstd, y, dx, dw, db (those in ``got``
    not None) against each side of ``wants`` (name -> {side: array}). PyTorch's CPU layer
    and group norm take the variance in double as E[x^2] - mean^2 (measured: up to 3400
    ulps off at M = 2 shifted by 100, against 2 for the reference and batch norm): its
    side's bounds take cond^2 for cond (float64 only: 2^-53 cond^2 stays far below the
    float32 bounds' 2^-24 cond)."""
    mg = mags(geo, case, ops, rms)
    ua = ACC_U[case.short]
    ref = {k: v.get("reference") for k, v in wants.items()}
    lead = np.shape(ref["rstd"])
    for side, m in (("reference", mg), ("PyTorch", mg.single_pass(geo))):
        dw_tol, db_tol = dparam_bounds(case, geo, m, ops, (ref["dw"], ref["db"]), case.dtype)
        bound = {
            "mean": lambda: tol(m.mean_tol.reshape(lead), ref["mean"], case.acc, ua),  # noqa: B023
            "rstd": lambda: tol(m.rstd_tol.reshape(lead), ref["rstd"], case.acc, ua),  # noqa: B023
            "y": lambda: y_bound(case, geo, m, ops, ref["y"]),  # noqa: B023
            "dx": lambda: dx_bound(case, geo, m, ref["dx"]),  # noqa: B023
            "dw": lambda: dw_tol,  # noqa: B023
            "db": lambda: db_tol,  # noqa: B023
        }
        for k, a in got.items():
            if a is not None and wants[k].get(side) is not None:
                assert_within(a, wants[k][side], bound[k](), f"{k} vs {side}")


# ------------------------------------------------------------------ PyTorch


def leaf(a: np.ndarray | None, grad: bool = True) -> Any:
    if a is None:
        return None
    t = torch.from_numpy(np.ascontiguousarray(np.asarray(a, np.float64)))
    return t.requires_grad_() if grad else t


def to_nc(case: Case, a: np.ndarray) -> np.ndarray:
    """x-shaped data as PyTorch takes it: channels-first; batch norm per_activation as
    (N, features)."""
    a = np.asarray(a, np.float64)
    if case.op == "batch" and case.mode == "per_activation":
        return a.reshape(a.shape[0], math.prod(a.shape[1:]))
    return np.moveaxis(a, -1, 1) if case.layout == "NHWC" else a


def from_nc(case: Case, t: Any) -> np.ndarray:
    a = t.detach().numpy() if hasattr(t, "detach") else t
    if case.op == "batch" and case.mode == "per_activation":
        return a.reshape(case.shape)
    return np.moveaxis(a, 1, -1) if case.layout == "NHWC" else a


def torch_affine(ops: dict) -> tuple[Any, Any]:
    """weight and bias for PyTorch: a bias without a weight gets a constant weight of ones
    (the same function; PyTorch's CPU backward of group norm with a bias alone fails:
    "tensor does not have a device")."""
    w, b = ops["w"], ops["b"]
    if w is None and b is not None:
        return leaf(np.ones(np.shape(b)), grad=False), leaf(b)
    return leaf(w), leaf(b)


def grad_of(t: Any, like: Any) -> np.ndarray | None:
    """t's gradient (zeros if autograd left it None: an empty batch), None without t."""
    if t is None:
        return None
    return (t.grad if t.grad is not None else torch.zeros_like(t)).numpy().reshape(like)
