"""Round trips with PyTorch tensors through DLPack: CPU tensors through the emulator
(and CUDA tensors on a GPU). Skipped without torch (the ``interop`` extra)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import cudnnlite as cl

torch = pytest.importorskip("torch")
F = torch.nn.functional


def _device(backend: str) -> str:
    return "cuda" if backend == "cuda" else "cpu"


def _to_torch(y: Any) -> Any:
    """cudnnlite's result as a torch tensor without a copy (bfloat16 through uint16, since
    NumPy cannot export bfloat16 by DLPack)."""
    if isinstance(y, np.ndarray) and cl.bfloat16 is not None and y.dtype == cl.bfloat16:
        return torch.from_numpy(y.view(np.uint16)).view(torch.bfloat16)
    return torch.from_dlpack(y)


def _ptr(y: Any) -> int:
    return y.ctypes.data if isinstance(y, np.ndarray) else int(y.data.ptr)


# Tolerances: fp32 kernels accumulate in a different order than PyTorch's (conv: 27 MACs
# per output); half types are compared after both round to their 8/11-bit mantissas.
TOL = {torch.float32: (1e-5, 1e-5), torch.float16: (2e-3, 2e-3), torch.bfloat16: (1.6e-2, 1e-2)}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_elementwise_round_trip_shares_memory(backend: str, dtype: Any) -> None:
    x = torch.randn(2, 3, 5, 7, device=_device(backend)).to(dtype)
    y = cl.gelu(x)
    assert type(y).__module__.split(".")[0] in ("numpy", "cupy")
    t = _to_torch(y)
    assert t.data_ptr() == _ptr(y)  # torch.from_dlpack took it without a copy
    rtol, atol = TOL[dtype]
    torch.testing.assert_close(t, F.gelu(x.float()).to(dtype), rtol=rtol, atol=atol)


def test_input_is_not_copied(backend: str) -> None:
    y = torch.zeros(4, 6, device=_device(backend))
    cl.set_tensor(y, 1.5)
    assert torch.all(y == 1.5)
    out = torch.empty(4, 6, device=_device(backend))
    cl.relu(-y, out=out)
    assert torch.all(out == 0)


def test_noncontiguous_tensor(backend: str) -> None:
    x = torch.randn(6, 8, device=_device(backend)).t()[::2]
    torch.testing.assert_close(_to_torch(cl.sigmoid(x)), torch.sigmoid(x))


def test_layers_match_pytorch(backend: str) -> None:
    torch.manual_seed(0)
    dev = _device(backend)
    x = torch.randn(2, 3, 9, 9, device=dev)
    w = torch.randn(8, 3, 3, 3, device=dev)
    b = torch.randn(8, device=dev)
    torch.testing.assert_close(
        _to_torch(cl.conv2d(x, w, b, stride=2, padding=1)),
        F.conv2d(x, w, b, stride=2, padding=1),
        rtol=1e-4,
        atol=1e-4,
    )
    mean, var = torch.randn(3, device=dev), torch.rand(3, device=dev) + 0.5
    torch.testing.assert_close(
        _to_torch(cl.batch_norm_forward_inference(x, mean, var)),
        F.batch_norm(x, mean, var, training=False),
        rtol=1e-5,
        atol=1e-5,
    )
    torch.testing.assert_close(_to_torch(cl.max_pool2d(x, 3, 2)), F.max_pool2d(x, 3, 2))
    torch.testing.assert_close(
        _to_torch(cl.avg_pool2d(x, 2)), F.avg_pool2d(x, 2), rtol=1e-6, atol=1e-6
    )
    torch.testing.assert_close(
        _to_torch(cl.softmax(x, axis=1)), torch.softmax(x, 1), rtol=1e-5, atol=1e-6
    )


def test_torch_stream_is_honoured(backend: str) -> None:
    if backend != "cuda" or not torch.cuda.is_available():
        pytest.skip("needs a GPU and a CUDA build of torch")
    s = torch.cuda.Stream()
    x = torch.randn(1024, device="cuda")
    with torch.cuda.stream(s):
        x.mul_(2)  # pending on s when cudnnlite imports x
    y = cl.relu(x, stream=s)
    s.synchronize()
    torch.testing.assert_close(_to_torch(y), torch.relu(x))


def test_tensor_requiring_grad_is_rejected_clearly() -> None:
    with pytest.raises(cl.BadParamError, match=r"x: the DLPack import failed: .*detach"):
        cl.relu(torch.ones(3, requires_grad=True))
