"""Adapters of the OpInfo parity test (tests/test_opinfo_parity.py): each maps a PyTorch
OpInfo sample's (input, args, kwargs), as NumPy, to cudnnlite's call, and where cudnnlite
has one, to its backward. Importing it skips without PyTorch or expecttest, as that test
does."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import cudnnlite as cl

torch = pytest.importorskip("torch")
pytest.importorskip("expecttest")  # torch.testing._internal imports it
common = pytest.importorskip("torch.testing._internal.common_methods_invocations")
F = torch.nn.functional


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
        if dtype is not None:  # PyTorch: x cast to dtype first (cuDNN: the caller's cast)
            x = x.astype(torch.empty((), dtype=dtype).numpy().dtype)
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
