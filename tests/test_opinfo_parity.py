"""Differential test against PyTorch's own OpInfo sample inputs (issue 12).

Every op of ``torch.testing._internal.common_methods_invocations.op_db`` that maps to a
cudnnlite function runs its float32 and float64 samples through cudnnlite (NumPy arrays:
the emulator) and through PyTorch (CPU), forward, and backward where the sample needs a
gradient and cudnnlite has the backward; the results must agree at the dtype's tolerance.

A sample that differs on purpose matches one row of :data:`DIFFERENCES` (op, condition,
reason); such a sample is asserted to still differ, so the table stays true, and is
counted. ``test_opinfo_summary`` prints "N samples pass, M deliberate differences".
Ops with many samples (max pooling has hundreds of parameter combinations) are
subsampled deterministically: every k-th sample, at most :data:`MAX_SAMPLES` per op and
dtype. Skipped without PyTorch (the ``interop`` extra) or its test helper expecttest.

Run it as a script (``python tests/test_opinfo_parity.py``) to print every sample's
outcome.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

import cudnnlite as cl
from cudnnlite.errors import CudnnliteError

torch = pytest.importorskip("torch")
pytest.importorskip("expecttest")  # torch.testing._internal imports it
common = pytest.importorskip("torch.testing._internal.common_methods_invocations")
F = torch.nn.functional

#: at most this many samples per op and dtype (every k-th of op_db's list)
MAX_SAMPLES = 12
DTYPES = (torch.float32, torch.float64)
# PyTorch's own assert_close defaults are rtol 1.3e-6 / atol 1e-5 (fp32) and 1e-7 / 1e-7
# (fp64); both sides sum in different orders (conv: up to a few hundred products,
# norms: whole planes), so the bounds are a few units of those.
TOL = {torch.float32: (2e-5, 2e-5), torch.float64: (1e-10, 1e-10)}
# CTC's input gradient is exp(log_probs) - exp(log_alpha + log_beta - log_probs + nll):
# log-space sums over 50 steps of magnitude ~100 (an fp32 ulp there is ~1e-5) whose
# difference is exponentiated; both sides' fp32 answers are ~1e-4 from float64's.
# Attention: op_db's tensors reach +-9, so logits q.k * scale reach ~230 where an fp32
# ulp is ~1.5e-5; exp turns that into relative errors of the probabilities, and each
# side's fp32 gradients land up to ~2e-5 from float64's (measured: cudnnlite 2.0e-5,
# PyTorch 1.4e-5 on one sample with PyTorch 2.13), so the two may differ by twice that.
TOL_OVERRIDES = {
    ("nn.functional.ctc_loss", torch.float32): (3e-4, 3e-4),
    ("nn.functional.scaled_dot_product_attention", torch.float32): (5e-5, 5e-5),
}


class NotMapped(Exception):
    """The sample uses an argument cudnnlite has no counterpart for (not a failure)."""


# ------------------------------------------------------------------ conversions


def _np(v: Any) -> Any:
    if isinstance(v, torch.Tensor):
        return v.detach().cpu().numpy().copy()
    if isinstance(v, (list, tuple)):
        return type(v)(_np(a) for a in v)
    if isinstance(v, dict):
        return {k: _np(a) for k, a in v.items()}
    return v


def _grad_seed(t: torch.Tensor, salt: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(1234 + salt)
    return torch.randn(t.shape, generator=g, dtype=t.dtype)


def _drop_inplace(kw: dict) -> dict:
    if kw.pop("inplace", False):
        raise NotMapped("inplace=True")
    return kw


# ------------------------------------------------------------------ adapters
# Each adapter maps a sample's (input, args, kwargs), as NumPy, to cudnnlite's result;
# a backward adapter maps them and dy to {"input": dx, "weight": dw, ...} (PyTorch's
# names of the differentiable arguments).


def _conv(nd: int) -> tuple[Callable, Callable]:
    fwd = getattr(cl, f"conv{nd}d")

    def args(x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
        return x, weight, bias, stride, padding, dilation, groups

    def forward(x, *a, **kw):
        return fwd(*args(x, *a, **kw))

    def backward(dy, x, *a, **kw):
        x, w, bias, stride, padding, dilation, groups = args(x, *a, **kw)
        bd = getattr(cl, f"conv{nd}d_backward_data")
        bf = getattr(cl, f"conv{nd}d_backward_filter")
        grads = {
            "input": bd(dy, w, x.shape, stride, padding, dilation, groups),
            "weight": bf(x, dy, w.shape, stride, padding, dilation, groups),
        }
        if bias is not None:
            grads["bias"] = getattr(cl, f"conv{nd}d_backward_bias")(dy)
        return grads

    return forward, backward


def _conv_transpose(nd: int) -> tuple[Callable, Callable]:
    fwd = getattr(cl, f"conv_transpose{nd}d")

    def args(x, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1,
             dilation=1):  # fmt: skip
        return x, weight, bias, stride, padding, output_padding, groups, dilation

    def forward(x, *a, **kw):
        return fwd(*args(x, *a, **kw))

    def backward(dy, x, *a, **kw):
        # conv_transpose is the backward data of a convolution of dy's shape: its input
        # gradient is that convolution's forward, its weight gradient the convolution's
        # filter gradient with x as the output gradient.
        # With output_padding >= stride (allowed while < dilation) that convolution has
        # more outputs than x: x's gradient is its first ones, and the filter gradient
        # sees x zero-padded to its size.
        x, w, bias, stride, padding, _, groups, dilation = args(x, *a, **kw)
        full = getattr(cl, f"conv{nd}d")(dy, w, None, stride, padding, dilation, groups)
        region = tuple(slice(0, s) for s in x.shape)
        x_full = np.zeros(full.shape, x.dtype)
        x_full[region] = x
        grads = {
            "input": full[region],
            "weight": getattr(cl, f"conv{nd}d_backward_filter")(
                dy, x_full, w.shape, stride, padding, dilation, groups
            ),
        }
        if bias is not None:
            grads["bias"] = getattr(cl, f"conv{nd}d_backward_bias")(dy)
        return grads

    return forward, backward


def _max_pool(nd: int) -> tuple[Callable, Callable]:
    def args(x, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
             return_indices=False):  # fmt: skip
        return x, kernel_size, stride, padding, dilation, ceil_mode, return_indices

    def forward(x, *a, **kw):
        return getattr(cl, f"max_pool{nd}d")(*args(x, *a, **kw))

    def backward(dy, x, *a, **kw):
        x, k, s, p, d, c, _ = args(x, *a, **kw)
        _, ind = cl.max_pool(x, k, s, p, d, c, True, nd=nd)
        return {"input": cl.max_pool_backward(dy, ind, x.shape, k, s, p, d, c, nd=nd)}

    return forward, backward


def _avg_pool(nd: int) -> tuple[Callable, Callable]:
    def args(x, kernel_size, stride=None, padding=0, ceil_mode=False,
             count_include_pad=True, divisor_override=None):  # fmt: skip
        return x, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override

    def forward(x, *a, **kw):
        return getattr(cl, f"avg_pool{nd}d")(*args(x, *a, **kw))

    def backward(dy, x, *a, **kw):
        x, *rest = args(x, *a, **kw)
        return {"input": cl.avg_pool_backward(dy, x.shape, *rest, nd=nd)}

    return forward, backward


def _adaptive(kind: str, nd: int) -> tuple[Callable, Callable]:
    fwd = getattr(cl, f"adaptive_{kind}_pool{nd}d")

    def forward(x, output_size, *a, **kw):
        return fwd(x, output_size, *a, **kw)

    def backward(dy, x, output_size, *a, **kw):
        if kind == "avg":
            return {"input": cl.adaptive_avg_pool_backward(dy, x.shape, nd=nd)}
        _, ind = cl.adaptive_max_pool(x, output_size, True, nd=nd)
        return {"input": cl.adaptive_max_pool_backward(dy, ind, x.shape, nd=nd)}

    return forward, backward


def _activation(fn: Callable, mode: str | None, coef: Callable | None = None,
                params: tuple[str, ...] = ()) -> tuple[Callable, Callable | None]:  # fmt: skip
    """An activation whose PyTorch keyword arguments are ``params`` (in order)."""

    def forward(x, *a, **kw):
        kw = _drop_inplace(dict(kw))
        return fn(x, *a, **kw)

    def backward(dy, x, *a, **kw):
        kw = _drop_inplace(dict(kw))
        values = dict(zip(params, a, strict=False)) | kw
        extra = coef(values) if coef else {}
        return {"input": cl.activation_backward(dy, x, mode, **extra)}

    return forward, (backward if mode else None)


def _softplus_coef(v: dict) -> dict:
    return {"coef": v.get("beta", 1.0), "threshold": v.get("threshold", 20.0)}


def _gelu_fwd(x, approximate="none"):
    return cl.gelu(x, approximate)


def _gelu_bwd(dy, x, approximate="none"):
    mode = "gelu" if approximate == "none" else "gelu_tanh"
    return {"input": cl.activation_backward(dy, x, mode)}


def _softmax(log: bool) -> tuple[Callable, Callable]:
    def forward(x, dim, dtype=None):
        out_dtype = None if dtype is None else torch.empty((), dtype=dtype).numpy().dtype
        return cl.softmax(x, dim, log=log, dtype=out_dtype)

    def backward(dy, x, dim, dtype=None):
        if dtype is not None:
            raise NotMapped("backward through a dtype conversion")
        y = cl.softmax(x, dim, log=log)
        return {"input": cl.softmax_backward(dy, y, dim, log=log)}

    return forward, backward


def _param_grads(dx: Any, dw: Any, db: Any, weight: Any, bias: Any) -> dict[str, Any]:
    """A normalization's gradients under PyTorch's names, those of given parameters only."""
    grads = {"input": dx}
    if weight is not None:
        grads["weight"] = dw
    if bias is not None:
        grads["bias"] = db
    return grads


def _layer_norm_bwd(dy, x, normalized_shape, weight=None, bias=None, eps=1e-5):
    _, mean, rstd = cl.layer_norm_forward(x, normalized_shape, weight, bias, eps)
    dx, dw, db = cl.layer_norm_backward(dy, x, normalized_shape, mean, rstd, weight, bias)
    return _param_grads(dx, dw, db, weight, bias)


def _rms_norm_bwd(dy, x, normalized_shape, weight=None, eps=None):
    _, rstd = cl.rms_norm_forward(x, normalized_shape, weight, eps)
    dx, dw = cl.rms_norm_backward(dy, x, normalized_shape, rstd, weight)
    return _param_grads(dx, dw, None, weight, None)


def _group_norm_bwd(dy, x, num_groups, weight=None, bias=None, eps=1e-5):
    _, mean, rstd = cl.group_norm_forward(x, num_groups, weight, bias, eps)
    dx, dw, db = cl.group_norm_backward(dy, x, num_groups, mean, rstd, weight, bias)
    return _param_grads(dx, dw, db, weight, bias)


def _batch_norm(x, running_mean, running_var, weight=None, bias=None, training=False,
                momentum=0.1, eps=1e-5):  # fmt: skip
    if running_mean is None and not training:
        raise NotMapped("batch_norm without running statistics in evaluation mode")
    return cl.batch_norm(x, running_mean, running_var, weight, bias, training, momentum, eps)


def _batch_norm_bwd(dy, x, running_mean, running_var, weight=None, bias=None, training=False,
                    momentum=0.1, eps=1e-5):  # fmt: skip
    if training:
        # the batch statistics; the running ones (the forward adapter updated them) stay
        _, mean, invstd = cl.batch_norm_forward_training(x, weight, bias, eps=eps)
        dx, dw, db, _ = cl.batch_norm_backward(dy, x, mean, invstd, weight, bias=bias)
    else:  # the running statistics are constants
        dx, dw, db, _ = cl.batch_norm_backward(
            dy, x, None, None, weight, bias=bias, training=False,
            running_mean=running_mean, running_var=running_var, eps=eps,
        )  # fmt: skip
    return _param_grads(dx, dw, db, weight, bias)


def _instance_norm(x, running_mean=None, running_var=None, weight=None, bias=None,
                   use_input_stats=True, momentum=0.1, eps=1e-5):  # fmt: skip
    if not use_input_stats:
        raise NotMapped("instance_norm(use_input_stats=False)")
    if running_mean is None:
        return cl.instance_norm(x, weight, bias, eps)
    if "running_mean" not in inspect.signature(cl.instance_norm).parameters:
        raise NotMapped("instance_norm with running statistics is not in this checkout")
    return cl.instance_norm(x, weight, bias, eps, running_mean=running_mean,
                            running_var=running_var, momentum=momentum)  # fmt: skip


def _instance_norm_bwd(dy, x, running_mean=None, running_var=None, weight=None, bias=None,
                       use_input_stats=True, momentum=0.1, eps=1e-5):  # fmt: skip
    if not use_input_stats:
        raise NotMapped("instance_norm(use_input_stats=False)")
    # the per-instance statistics (the running ones, updated by the forward adapter, stay)
    _, mean, rstd = cl.instance_norm_forward(x, weight, bias, eps)
    dx, dw, db = cl.instance_norm_backward(dy, x, mean, rstd, weight, bias)
    return _param_grads(dx, dw, db, weight, bias)


def _lrn_bwd(dy, x, size, alpha=1e-4, beta=0.75, k=1.0):
    return {"input": cl.lrn_backward(dy, x, size, alpha, beta, k)}


def _dropout(x, p=0.5, training=True, inplace=False):
    if inplace:
        raise NotMapped("inplace=True")
    return cl.dropout(x, p, seed=0, training=training)


def _sdpa_fwd(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
              enable_gqa=False):  # fmt: skip
    return cl.scaled_dot_product_attention(q, k, v, attn_mask, dropout_p, is_causal, scale,
                                           enable_gqa)  # fmt: skip


def _sdpa_bwd(dout, q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
              enable_gqa=False):  # fmt: skip
    out, lse = cl.scaled_dot_product_attention(q, k, v, attn_mask, dropout_p, is_causal, scale,
                                               enable_gqa, return_lse=True)  # fmt: skip
    dq, dk, dv = cl.scaled_dot_product_attention_backward(
        dout, q, k, v, out, lse, attn_mask, dropout_p, is_causal, scale, enable_gqa
    )
    return {"input": dq, "args.0": dk, "args.1": dv}


def _grid_sample_bwd(dy, x, grid, mode="bilinear", padding_mode="zeros", align_corners=None):
    dx, dgrid = cl.grid_sample_backward(dy, x, grid, mode, padding_mode, bool(align_corners))
    return {"input": dx, "args.0": dgrid}


def _grid_sample_fwd(x, grid, mode="bilinear", padding_mode="zeros", align_corners=None):
    return cl.grid_sample(x, grid, mode, padding_mode, bool(align_corners))


def _ctc_fwd(log_probs, targets, input_lengths, target_lengths, blank=0, reduction="mean",
             zero_infinity=False):  # fmt: skip
    return cl.ctc_loss(log_probs, targets, input_lengths, target_lengths, blank, reduction,
                       zero_infinity)  # fmt: skip


def _ctc_bwd(dy, log_probs, targets, input_lengths, target_lengths, blank=0, reduction="mean",
             zero_infinity=False):  # fmt: skip
    return {
        "input": cl.ctc_loss_backward(
            dy, log_probs, targets, input_lengths, target_lengths, blank, reduction, zero_infinity
        )
    }


def _reduction(op: str) -> Callable:
    def forward(x, dim=None, keepdim=False, dtype=None):
        if dtype is not None:
            raise NotMapped("dtype=")
        if isinstance(dim, (list, tuple)) and len(dim) == 0:
            dim = None  # PyTorch: dim=() reduces every dim
        return cl.reduce_tensor(x, op, dim, keepdims=keepdim)

    return forward


def _binary(op: str, sign: float = 1.0) -> Callable:
    """PyTorch's add/sub/mul/maximum/minimum as cuDNN's op_tensor (NumPy broadcasting)."""

    def forward(x, other, alpha=1):
        if not isinstance(other, np.ndarray) or not isinstance(x, np.ndarray):
            raise NotMapped("a Python scalar operand")
        return cl.op_tensor(op, x, other, alpha2=sign * alpha)

    return forward


ADAPTERS: dict[str, tuple[Callable, Callable | None]] = {
    **{f"nn.functional.conv{n}d": _conv(n) for n in (1, 2, 3)},
    **{f"nn.functional.conv_transpose{n}d": _conv_transpose(n) for n in (1, 2, 3)},
    **{f"nn.functional.max_pool{n}d": _max_pool(n) for n in (1, 2, 3)},
    **{f"nn.functional.avg_pool{n}d": _avg_pool(n) for n in (1, 2, 3)},
    **{
        f"nn.functional.adaptive_{k}_pool{n}d": _adaptive(k, n)
        for k in ("avg", "max")
        for n in (1, 2, 3)
    },  # fmt: skip
    "nn.functional.relu": _activation(cl.relu, "relu"),
    "nn.functional.leaky_relu": _activation(
        cl.leaky_relu,
        "leaky_relu",
        lambda v: {"coef": v.get("negative_slope", 0.01)},
        ("negative_slope",),
    ),  # fmt: skip
    "nn.functional.elu": _activation(
        cl.elu, "elu", lambda v: {"coef": v.get("alpha", 1.0)}, ("alpha",)
    ),  # fmt: skip
    "nn.functional.gelu": (_gelu_fwd, _gelu_bwd),
    "nn.functional.silu": _activation(cl.silu, "swish"),
    "nn.functional.softplus": _activation(
        cl.softplus, "softplus", _softplus_coef, ("beta", "threshold")
    ),  # fmt: skip
    "nn.functional.relu6": _activation(cl.relu6, "clipped_relu", lambda v: {"coef": 6.0}),
    "nn.functional.hardtanh": _activation(cl.hardtanh, None),
    "nn.functional.hardswish": _activation(cl.hardswish, "hardswish"),
    "nn.functional.hardsigmoid": _activation(cl.hardsigmoid, "hardsigmoid"),
    "nn.functional.mish": _activation(cl.mish, "mish"),
    "sigmoid": _activation(cl.sigmoid, "sigmoid"),
    "tanh": _activation(cl.tanh, "tanh"),
    "softmax": _softmax(False),
    "log_softmax": _softmax(True),
    "nn.functional.layer_norm": (cl.layer_norm, _layer_norm_bwd),
    "nn.functional.rms_norm": (cl.rms_norm, _rms_norm_bwd),
    "nn.functional.group_norm": (cl.group_norm, _group_norm_bwd),
    "nn.functional.batch_norm": (_batch_norm, _batch_norm_bwd),
    "nn.functional.instance_norm": (_instance_norm, _instance_norm_bwd),
    "nn.functional.local_response_norm": (cl.lrn, _lrn_bwd),
    "nn.functional.dropout": (_dropout, None),
    "nn.functional.grid_sample": (_grid_sample_fwd, _grid_sample_bwd),
    "nn.functional.ctc_loss": (_ctc_fwd, _ctc_bwd),
    "nn.functional.scaled_dot_product_attention": (_sdpa_fwd, _sdpa_bwd),
    "sum": (_reduction("sum"), None),
    "mean": (_reduction("avg"), None),
    "amax": (_reduction("max"), None),
    "amin": (_reduction("min"), None),
    "prod": (_reduction("mul"), None),
    "add": (_binary("add"), None),
    "sub": (_binary("add", -1.0), None),
    "mul": (_binary("mul"), None),
    "maximum": (_binary("max"), None),
    "minimum": (_binary("min"), None),
    "sqrt": (lambda x: cl.op_tensor("sqrt", x), None),
}


# ------------------------------------------------------------------ deliberate differences


def _kw(s: Any, name: str, pos: int | None = None, default: Any = None) -> Any:
    if name in s.kwargs:
        return s.kwargs[name]
    if pos is not None and len(s.args) > pos:
        return s.args[pos]
    return default


@dataclass(frozen=True)
class Difference:
    op: str
    applies: Callable[[Any], bool]
    reason: str


#: Every sample that differs from PyTorch on purpose: (op, condition on the sample, why).
#: A sample matching a row must still differ (raise a cudnnlite error or disagree).
_NORMS_WITH_EPS = ("nn.functional.layer_norm", "nn.functional.rms_norm",
                   "nn.functional.group_norm", "nn.functional.batch_norm",
                   "nn.functional.instance_norm")  # fmt: skip
_NEGATIVE_EPS = (
    "a negative eps is refused (BadParamError naming eps): cuDNN's normalizations "
    "require eps >= 0, and x - mean over sqrt(var + eps) with eps < 0 is NaN or inf for a "
    "constant group; op_db samples eps=-0.5 only to exercise argument plumbing"
)

_MOMENTUM = (
    "a momentum outside [0, 1] is refused when running statistics are updated (cuDNN's "
    "exponentialAverageFactor); PyTorch accepts any number, e.g. op_db's momentum=-1.0"
)

DIFFERENCES: tuple[Difference, ...] = (
    *(
        Difference(op, lambda s: (_kw(s, "eps") or 0) < 0, _NEGATIVE_EPS) for op in _NORMS_WITH_EPS
    ),  # fmt: skip
    Difference(
        "nn.functional.batch_norm",
        lambda s: bool(_kw(s, "training", 5, False)) and not 0 <= _kw(s, "momentum", 6, 0.1) <= 1,
        _MOMENTUM,
    ),
    Difference(
        "nn.functional.instance_norm",
        lambda s: (
            _kw(s, "running_mean", 0) is not None
            and bool(_kw(s, "use_input_stats", 5, True))
            and not 0 <= _kw(s, "momentum", 6, 0.1) <= 1
        ),
        _MOMENTUM,
    ),
    Difference(
        "nn.functional.batch_norm",
        lambda s: s.input.dim() < 2,
        "batch_norm needs x of at least 2 dims (N, C, ...): op_db's empty 1-d input (0,) "
        "with zero-length statistics, which PyTorch accepts, is refused by name",
    ),
    Difference(
        "nn.functional.dropout",
        lambda s: bool(_kw(s, "training", 1, True)) and 0 < _kw(s, "p", 0, 0.5) < 1,
        "dropout's mask comes from cudnnlite's own Philox stream (seed, offset), not "
        "PyTorch's generator: the kept elements differ (tests/test_dropout*.py check the "
        "keep rate and scaling instead)",
    ),
)


DIFFERENCES += (
    Difference(
        "nn.functional.hardsigmoid",
        lambda s: s.input.dtype == torch.float64 and bool(((s.input > -3) & (s.input < 3)).any()),
        "float64 hardsigmoid backward: PyTorch's CPU kernel multiplies by 1.0f / 6.0f, "
        "float32's 1/6 (3e-8 relative off) even for double; cudnnlite's 1/6 is double's "
        "(its forward, and PyTorch's, are exact)",
    ),
    Difference(
        "nn.functional.scaled_dot_product_attention",
        lambda s: _kw(s, "dropout_p", 3, 0.0) > 0,
        "attention dropout draws its mask from cudnnlite's Philox stream (seed, offset), "
        "not PyTorch's generator (tests/test_attention*.py check it against the reference "
        "with the same mask)",
    ),
)


def _difference(op: str, sample: Any) -> Difference | None:
    for d in DIFFERENCES:
        if d.op == op and d.applies(sample):
            return d
    return None


# ------------------------------------------------------------------ running one sample


def _op_entries() -> dict[str, Any]:
    out = {}
    for op in common.op_db:
        full = op.name + (f".{op.variant_test_name}" if op.variant_test_name else "")
        if full in ADAPTERS:
            out[full] = op
    return out


OPS = _op_entries()


def samples(name: str, dtype: Any) -> tuple[list[Any], int]:
    """(the chosen samples, how many op_db has) of op ``name`` for ``dtype``."""
    op = OPS[name]
    torch.manual_seed(0)  # op_db draws its tensors from the global generator
    every = list(op.sample_inputs("cpu", dtype, requires_grad=op.supports_autograd))
    step = max(1, math.ceil(len(every) / MAX_SAMPLES))
    return every[::step], len(every)


def _tensors_out(r: Any) -> list[Any]:
    if isinstance(r, (tuple, list)):
        return [a for a in r if isinstance(a, torch.Tensor)]
    return [r]


def _compare(name: str, got: Any, want: torch.Tensor, tol: tuple[float, float]) -> None:
    got = np.asarray(got)
    if tuple(got.shape) != tuple(want.shape):
        raise AssertionError(f"{name}: shape {got.shape}, PyTorch {tuple(want.shape)}")
    w = want.detach().numpy()
    if w.dtype.kind in "iub":
        np.testing.assert_array_equal(got, w, err_msg=name)
        return
    rtol, atol = tol
    np.testing.assert_allclose(got, w, rtol=rtol, atol=atol, equal_nan=True, err_msg=name)


def _differentiable(sample: Any) -> dict[str, torch.Tensor]:
    named = {"input": sample.input}
    for i, a in enumerate(sample.args):
        named[f"args.{i}"] = a
    named.update({f"kwargs.{k}": v for k, v in sample.kwargs.items()})
    return {k: v for k, v in named.items()
            if isinstance(v, torch.Tensor) and v.requires_grad}  # fmt: skip


# PyTorch's names for an adapter's weight / bias gradients: the arguments' positions
# after the input (convolutions: weight, bias; the normalizations put theirs later)
_PARAM_POSITIONS = {
    "nn.functional.layer_norm": (1, 2),
    "nn.functional.rms_norm": (1, None),
    "nn.functional.group_norm": (1, 2),
    "nn.functional.batch_norm": (2, 3),
    "nn.functional.instance_norm": (2, 3),
}


def _aliases(op: str, key: str) -> tuple[str, ...]:
    if key not in ("weight", "bias"):
        return (key,)
    pos = _PARAM_POSITIONS.get(op, (0, 1))[key == "bias"]
    return (f"kwargs.{key}",) + (() if pos is None else (f"args.{pos}",))


def run_sample(name: str, sample: Any, dtype: Any) -> str:
    """Runs one sample: "pass", or raises (an assertion or cudnnlite's error)."""
    op = OPS[name]
    fwd, bwd = ADAPTERS[name]
    tol = TOL_OVERRIDES.get((name, dtype), TOL[dtype])
    x, args, kwargs = _np(sample.input), _np(sample.args), _np(sample.kwargs)
    with torch.no_grad():
        want = op(sample.input, *sample.args, **sample.kwargs)
    got = fwd(x, *args, **kwargs)
    wants, gots = _tensors_out(want), (list(got) if isinstance(got, tuple) else [got])
    if len(wants) != len(gots):
        raise AssertionError(f"forward: {len(gots)} outputs, PyTorch {len(wants)}")
    for i, (g, w) in enumerate(zip(gots, wants, strict=True)):
        _compare(f"forward output {i}", g, w, tol)
    if name == "nn.functional.batch_norm":  # the running statistics, updated in place
        for i, a in enumerate(args):
            if isinstance(a, np.ndarray) and a.ndim == 1:
                _compare(f"running statistic args.{i}", a, sample.args[i], tol)
    diff_in = _differentiable(sample)
    if bwd is None or not diff_in or not op.supports_autograd:
        return "pass"
    out = op(sample.input, *sample.args, **sample.kwargs)
    out0 = _tensors_out(out)[0]
    if not out0.requires_grad or not out0.dtype.is_floating_point:
        return "pass"
    dy = _grad_seed(out0, 0)
    grads = torch.autograd.grad(out0, list(diff_in.values()), dy, allow_unused=True)
    grads = dict(zip(diff_in, grads, strict=True))
    mine = bwd(_np(dy), x, *args, **kwargs)
    for key, g in mine.items():
        for alias in _aliases(name, key):
            if alias in grads and grads[alias] is not None:
                _compare(f"gradient of {alias}", g, grads[alias], tol)
    return "pass"


def outcome(name: str, sample: Any, dtype: Any) -> tuple[str, str]:
    """("pass" | "differs" | "not mapped" | "FAIL", detail)."""
    diff = _difference(name, sample)
    try:
        run_sample(name, sample, dtype)
    except NotMapped as exc:
        return "not mapped", str(exc)
    except (AssertionError, CudnnliteError) as exc:
        if diff is not None:
            return "differs", diff.reason
        return "FAIL", f"{type(exc).__name__}: {str(exc)[:400]}"
    if diff is not None:
        return "FAIL", f"listed as a deliberate difference but agrees: {diff.reason}"
    return "pass", ""


def _describe(sample: Any) -> str:
    def d(v: Any) -> Any:
        return tuple(v.shape) if isinstance(v, torch.Tensor) else v

    return f"input {d(sample.input)} args {[d(a) for a in sample.args]} " \
           f"kwargs { {k: d(v) for k, v in sample.kwargs.items()} }"  # fmt: skip


# ------------------------------------------------------------------ tests

_TALLY: dict[str, dict[str, int]] = {}
_DIFFERING: dict[tuple[str, str], int] = {}  # (op, reason) -> samples


@pytest.mark.parametrize("dtype", DTYPES, ids=["fp32", "fp64"])
@pytest.mark.parametrize("name", sorted(ADAPTERS))
def test_opinfo_samples(name: str, dtype: Any) -> None:
    if name not in OPS:
        pytest.skip(f"{name} is not in this PyTorch's op_db")
    chosen, total = samples(name, dtype)
    tally = _TALLY.setdefault(f"{name} {dtype}", {"of": total, "run": len(chosen)})
    failures = []
    for i, sample in enumerate(chosen):
        status, detail = outcome(name, sample, dtype)
        tally[status] = tally.get(status, 0) + 1
        if status == "differs":
            _DIFFERING[name, detail] = _DIFFERING.get((name, detail), 0) + 1
        if status == "FAIL":
            failures.append(f"sample {i} ({_describe(sample)}): {detail}")
    assert not failures, "\n".join(failures)


def test_opinfo_summary() -> None:
    """Prints the counts the README quotes (after the sample tests in this process)."""
    if not _TALLY:
        pytest.skip("no sample test ran in this process")
    total = {k: sum(t.get(k, 0) for t in _TALLY.values()) for k in
             ("pass", "differs", "not mapped", "FAIL", "run", "of")}  # fmt: skip
    print(
        f"\nOpInfo parity: {total['pass']} samples pass, {total['differs']} deliberate "
        f"differences, {total['not mapped']} not mapped, {total['FAIL']} failures "
        f"({total['run']} run of op_db's {total['of']}, {len(_TALLY)} op/dtype pairs)"
    )
    for (op, reason), count in sorted(_DIFFERING.items()):
        print(f"  differs: {op} ({count} samples): {reason}")
    assert total["pass"] > 0


def test_zero_channel_convolution_still_differs() -> None:
    """README's deliberate difference outside op_db: for C = 0 PyTorch returns (N, 0, P, Q),
    dropping w's K output channels and the bias (pytorch/pytorch#56998, open); cudnnlite
    returns the bias over (N, K, P, Q) (tests/test_parity_shapes.py)."""
    y = F.conv2d(torch.zeros(1, 0, 5, 5), torch.zeros(4, 0, 3, 3), torch.ones(4))
    assert tuple(y.shape) == (1, 0, 3, 3)
    mine = cl.conv2d(np.zeros((1, 0, 5, 5), np.float32), np.zeros((4, 0, 3, 3), np.float32),
                     np.ones(4, np.float32))  # fmt: skip
    assert mine.shape == (1, 4, 3, 3) and (mine == 1).all()


def test_small_input_avg_pool3d_still_differs() -> None:
    """README's deliberate difference: PyTorch's avg_pool3d refuses an input smaller than
    the kernel along a dimension even when the padding makes up the rest (its 1-D and 2-D
    average pools and max_pool3d accept it); cudnnlite averages as the 1-D/2-D pools do:
    here, with count_include_pad, the window of 3 over one value and a zero of padding on
    each side."""
    x = np.arange(16, dtype=np.float32).reshape(1, 1, 1, 4, 4) + 1
    with pytest.raises(RuntimeError, match="smaller than kernel size"):
        F.avg_pool3d(torch.from_numpy(x), (3, 1, 1), stride=1, padding=(1, 0, 0))
    mine = cl.avg_pool3d(x, (3, 1, 1), stride=1, padding=(1, 0, 0))
    np.testing.assert_allclose(mine, x / 3, rtol=1e-6)
    # the same windows in 2-D (depth as height, the 4 x 4 plane as width), which PyTorch
    # accepts, give the same
    flat = torch.from_numpy(x.reshape(1, 1, 1, 16))
    want = F.avg_pool2d(flat, (3, 1), stride=1, padding=(1, 0)).numpy()
    np.testing.assert_allclose(mine.reshape(want.shape), want, rtol=1e-6)


def test_one_value_group_norm_still_differs() -> None:
    """README's deliberate difference: PyTorch's group_norm refuses groups of one value
    ("Expected more than 1 value per channel when training"); cudnnlite normalizes them:
    x - mean is 0, so the output is the bias."""
    x = np.array([[3.0, -2.0, 7.5]], np.float32)
    w, b = np.array([2.0, 3.0, 4.0], np.float32), np.array([0.5, -1.0, 2.0], np.float32)
    with pytest.raises(ValueError, match="more than 1 value per channel"):
        F.group_norm(torch.from_numpy(x), 3, torch.from_numpy(w), torch.from_numpy(b))
    np.testing.assert_array_equal(cl.group_norm(x, 3, w, b), b[None, :])


def test_nan_meeting_only_padding_still_differs() -> None:
    """README's deliberate difference: a NaN in w (forward) or dy (backward filter) whose
    products all fall on zero padding. PyTorch multiplies the padding's zeros (0 * NaN =
    NaN); cudnnlite skips the padding, as cuDNN's implicit GEMM does."""
    x = np.array([[[1.0, 2.0]]])
    w = np.array([[[np.nan, 1.0, 1.0]]])
    assert torch.isnan(F.conv1d(torch.from_numpy(x), torch.from_numpy(w), padding=1)).all()
    np.testing.assert_array_equal(cl.conv1d(x, w, padding=1), [[[3.0, np.nan]]])
    dy = np.array([[[np.nan, 1.0, 1.0, 1.0]]])
    xt = torch.from_numpy(x)
    wt = torch.ones(1, 1, 1, dtype=torch.float64, requires_grad=True)
    F.conv1d(xt, wt, padding=1).backward(torch.from_numpy(dy))
    assert torch.isnan(wt.grad).all()
    np.testing.assert_array_equal(cl.conv1d_backward_filter(x, dy, (1, 1, 1), padding=1),
                                  [[[3.0]]])  # fmt: skip


def test_infinite_gradients_still_differ() -> None:
    """README's deliberate differences: an infinite dy through sigmoid / tanh where the
    derivative is positive but y rounds to 1 (PyTorch's inf * y (1 - y) is NaN; cudnnlite
    gives inf), and through layer norm (PyTorch: NaN across the row; cudnnlite: NaN only
    where two infinities meet, the signed limit elsewhere)."""
    for name in ("sigmoid", "tanh"):
        xt = torch.tensor([40.0], dtype=torch.float64, requires_grad=True)
        getattr(torch, name)(xt).backward(torch.tensor([np.inf], dtype=torch.float64))
        assert torch.isnan(xt.grad).all()
        got = cl.activation_backward(np.array([np.inf]), np.array([40.0]), name)
        assert got[0] == np.inf
    x, dy = np.array([[0.0, 1.0, 3.0]]), np.array([[np.inf, 0.0, 0.0]])
    xt = torch.from_numpy(x).requires_grad_(True)
    F.layer_norm(xt, (3,)).backward(torch.from_numpy(dy))
    assert torch.isnan(xt.grad).all()
    _, mean, rstd = cl.layer_norm_forward(x, (3,))
    dx = cl.layer_norm_backward(dy, x, (3,), mean, rstd)[0]
    assert np.isnan(dx[0, 0]) and dx[0, 1] == -np.inf


def test_attention_without_keys_and_a_nan_query_still_differs() -> None:
    """README's deliberate difference: with no keys (S = 0) the output is 0 whatever the
    query; PyTorch's math path carries a NaN query into it."""
    q, kv = np.array([[np.nan, 1.0]]), np.zeros((0, 2))
    want = F.scaled_dot_product_attention(*(torch.from_numpy(a) for a in (q, kv, kv)))
    assert torch.isnan(want).all()
    np.testing.assert_array_equal(cl.scaled_dot_product_attention(q, kv, kv), [[0.0, 0.0]])


def test_difference_table_is_used() -> None:
    """Every row of the table names a mapped op (a stale row is an error)."""
    for d in DIFFERENCES:
        assert d.op in ADAPTERS, d


if __name__ == "__main__":  # pragma: no cover - exploration aid
    import sys
    import time

    names = sys.argv[1:] or sorted(ADAPTERS)
    counts: dict[str, int] = {}
    for name in names:
        if name not in OPS:
            print(f"{name}: not in op_db")
            continue
        for dtype in DTYPES:
            t0 = time.perf_counter()
            chosen, total = samples(name, dtype)
            line = {}
            for i, sample in enumerate(chosen):
                status, detail = outcome(name, sample, dtype)
                line[status] = line.get(status, 0) + 1
                counts[status] = counts.get(status, 0) + 1
                if status in ("FAIL", "not mapped"):
                    print(f"  {name} {dtype} #{i} {status}: {_describe(sample)}\n      {detail}")
            print(f"{name} {dtype}: {len(chosen)}/{total} {line} {time.perf_counter() - t0:.2f}s")
    print(counts)
