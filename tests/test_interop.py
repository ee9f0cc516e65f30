"""DLPack and array-interface inputs, the ``stream=`` keyword, and bad interop inputs,
for every primitive family. Needs no PyTorch: the producers here are small fakes that
record what the library asked of them (tests/test_interop_torch.py uses real tensors)."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import cudnnlite as cl
from cudnnlite.errors import BadParamError, NotSupportedError
from cudnnlite.runtime import streams
from cudnnlite.testing import to_backend, to_numpy


class Producer:
    """A DLPack producer around a NumPy or CuPy array, like a framework tensor: it records
    each ``__dlpack__`` call's ``stream`` argument."""

    def __init__(self, array: Any, device: tuple[int, int] | None = None) -> None:
        self.array = array
        self.device = device
        self.streams: list[Any] = []

    def __dlpack__(self, stream: Any = None, **kwargs: Any) -> Any:
        self.streams.append(stream)
        if isinstance(self.array, np.ndarray):
            return self.array.__dlpack__(**kwargs)
        return self.array.__dlpack__(stream=stream, **kwargs)

    def __dlpack_device__(self) -> tuple[int, int]:
        return self.device or self.array.__dlpack_device__()


class InterfaceOnly:
    """Exposes only ``__array_interface__`` (no DLPack)."""

    def __init__(self, array: np.ndarray) -> None:
        self.__array_interface__ = array.__array_interface__
        self._keep = array


def _rand(shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _other(shape: tuple[int, ...]) -> np.ndarray:
    """The second operand: positive, so that it also serves as a variance."""
    return np.abs(_rand(shape, 1)) + 0.5


# One call per family, on (x, second operand) with the family's usual shapes:
# (name, call(x, other, **kw), x shape, other shape or None, takes out=)
X4 = (2, 3, 6, 5)
FAMILIES: list[tuple[str, Callable[..., Any], tuple[int, ...], tuple[int, ...] | None]] = [
    ("activation", lambda x, o, **kw: cl.relu(x, **kw), X4, None),
    ("conv", lambda x, w, **kw: cl.conv2d(x, w, padding=1, **kw), X4, (4, 3, 3, 3)),
    ("softmax", lambda x, o, **kw: cl.softmax(x, axis=1, **kw), X4, None),
    ("dropout", lambda x, o, **kw: cl.dropout(x, 0.25, seed=7, **kw), X4, None),
    ("pooling", lambda x, o, **kw: cl.max_pool2d(x, 2, **kw), X4, None),
    (
        "norm",
        lambda x, m, **kw: cl.batch_norm_forward_inference(x, m, m, **kw),
        X4,
        (3,),
    ),
    (
        "tensor",
        lambda a, b, **kw: cl.op_tensor("mul", a, b, **kw),
        X4,
        X4,
    ),
]
FAMILY_IDS = [f[0] for f in FAMILIES]


def _wrap_other(other: Any, wrap: Callable[[Any], Any]) -> Any:
    return None if other is None else wrap(other)


@pytest.mark.parametrize("family", FAMILIES, ids=FAMILY_IDS)
def test_dlpack_producer_gives_same_result_without_copy(backend: str, family: Any) -> None:
    _, call, x_shape, o_shape = family
    x = to_backend(_rand(x_shape), backend)
    other = None if o_shape is None else to_backend(_other(o_shape), backend)
    expected = to_numpy(call(x, other))
    px, po = Producer(x), _wrap_other(other, Producer)
    got = call(px, po)
    assert type(got) is type(x)  # NumPy in, NumPy out; CuPy in, CuPy out
    np.testing.assert_array_equal(to_numpy(got), expected)
    assert len(px.streams) == 1  # imported once, through DLPack
    if backend == "cpu":
        assert px.streams == [None]  # host memory: no stream in the handshake


def test_dlpack_import_shares_memory(backend: str) -> None:
    y = to_backend(np.zeros((3, 4), np.float32), backend)
    cl.set_tensor(Producer(y), 2.5)  # in place through the imported view
    np.testing.assert_array_equal(to_numpy(y), np.full((3, 4), 2.5, np.float32))


def test_dlpack_out_is_written_in_place(backend: str) -> None:
    x = to_backend(_rand((5, 7)), backend)
    out = to_backend(np.zeros((5, 7), np.float32), backend)
    cl.relu(x, out=Producer(out))
    np.testing.assert_array_equal(to_numpy(out), np.maximum(to_numpy(x), 0))


def test_array_interface_only_object_is_accepted(emulator_only: None) -> None:
    x = _rand((4, 6))
    got = cl.sigmoid(InterfaceOnly(x))
    np.testing.assert_allclose(got, 1 / (1 + np.exp(-x.astype(np.float64))), rtol=1e-5)


def test_bfloat16_from_dlpack_capsule(emulator_only: None) -> None:
    if cl.bfloat16 is None:
        pytest.skip("ml_dtypes missing")
    from cudnnlite.ops import _arrays
    from cudnnlite.ops._arrays import bfloat16_from_dlpack

    storage = np.arange(6, dtype=np.uint16).reshape(2, 3) + np.uint16(0x3F80)

    class Patched:
        """A bfloat16 DLPack producer (NumPy cannot read one): uint16 storage whose
        capsule's dtype code is set to kDLBfloat."""

        def __dlpack_device__(self) -> tuple[int, int]:
            return (1, 0)

        def __dlpack__(self, **kwargs: Any) -> Any:
            capsule = storage.__dlpack__()
            address = _arrays._capsule_get(capsule, b"dltensor")
            dt = _arrays._DLManagedTensor.from_address(address).dl_tensor.dtype
            dt.code = 4  # kDLBfloat
            return capsule

    got = bfloat16_from_dlpack(Patched())
    assert got is not None and got.dtype == cl.bfloat16
    np.testing.assert_array_equal(got.view(np.uint16), storage)
    got[0, 0] = 3.0  # a view of the producer's memory, not a copy
    assert storage[0, 0] == np.array(3.0, cl.bfloat16).view(np.uint16)
    y = cl.relu(Patched())
    assert y.dtype == cl.bfloat16
    np.testing.assert_array_equal(y.astype(np.float32), np.maximum(got.astype(np.float32), 0))


# ------------------------------------------------------------------ bad inputs


@pytest.mark.parametrize("family", FAMILIES, ids=FAMILY_IDS)
def test_object_without_any_interface_is_rejected(family: Any) -> None:
    _, call, _, o_shape = family
    other = None if o_shape is None else _other(o_shape)
    with pytest.raises(BadParamError, match=r"expected a NumPy or CuPy array"):
        call(object(), other)


@pytest.mark.parametrize("family", FAMILIES, ids=FAMILY_IDS)
def test_dlpack_on_unsupported_device_is_rejected(family: Any) -> None:
    _, call, x_shape, o_shape = family
    x = _rand(x_shape)
    before = x.copy()
    other = None if o_shape is None else _other(o_shape)
    with pytest.raises(BadParamError, match=r"kDLOneAPI \(type 14, index 0\).*host memory"):
        call(Producer(x, device=(14, 0)), other)
    np.testing.assert_array_equal(x, before)


@pytest.mark.parametrize("family", FAMILIES, ids=FAMILY_IDS)
def test_read_only_out_is_rejected(family: Any) -> None:
    name, call, x_shape, o_shape = family
    x = _rand(x_shape)
    other = None if o_shape is None else _other(o_shape)
    like = call(x, other)
    out = np.full_like(like, 9.0)
    out.flags.writeable = False
    x_before = x.copy()
    with pytest.raises(BadParamError, match=r"out: .*read-only"):
        call(x, other, out=out)
    np.testing.assert_array_equal(out, np.full_like(like, 9.0))
    np.testing.assert_array_equal(x, x_before)


def test_read_only_in_place_operand_is_rejected() -> None:
    y = np.ones((3, 3), np.float32)
    y.flags.writeable = False
    with pytest.raises(BadParamError, match=r"y: .*read-only"):
        cl.set_tensor(y, 0.0)
    with pytest.raises(BadParamError, match=r"y: .*read-only"):
        cl.scale_tensor(Producer(y), 2.0)
    np.testing.assert_array_equal(y, 1.0)


def test_failing_dlpack_device_is_reported() -> None:
    class Broken(Producer):
        def __dlpack_device__(self) -> tuple[int, int]:
            raise RuntimeError("device lost")

    with pytest.raises(BadParamError, match=r"x: .*device lost"):
        cl.relu(Broken(np.ones(3, np.float32)))


def test_the_package_namespace_is_its_api() -> None:
    """Every public name of ``cudnnlite`` is in ``__all__`` (or is a subpackage), and every
    name of ``__all__`` exists: no helper imports (``Any``) leak into ``dir(cl)``."""
    extra = [n for n in dir(cl) if not n.startswith("_") and n not in cl.__all__
             and not inspect.ismodule(getattr(cl, n))]  # fmt: skip
    assert extra == []
    assert [n for n in cl.__all__ if not hasattr(cl, n)] == []


# ------------------------------------------------------------------ streams

PUBLIC_OPS = [
    name
    for name in cl.__all__
    if callable(getattr(cl, name))
    and getattr(getattr(cl, name), "__module__", "").startswith("cudnnlite.ops.")
    and not inspect.isclass(getattr(cl, name))
    and not name.endswith("_plan")  # plans only; the plan's __call__ takes stream=
    and not getattr(cl, name).__module__.endswith("conv_backward")
]


def test_every_public_op_takes_stream() -> None:
    assert len(PUBLIC_OPS) > 60
    missing = [
        n for n in PUBLIC_OPS if "stream" not in inspect.signature(getattr(cl, n)).parameters
    ]
    assert missing == []
    for plan in (cl.ConvPlan, cl.RnnPlan):
        assert "stream" in inspect.signature(plan.__call__).parameters
    assert "stream" in (cl.relu.__doc__ or "")


def test_stream_none_is_the_default_on_every_backend(backend: str) -> None:
    x = to_backend(_rand((4, 4)), backend)
    np.testing.assert_array_equal(to_numpy(cl.relu(x, stream=None)), to_numpy(cl.relu(x)))


@pytest.mark.parametrize("stream", [1, object(), "default"])
def test_emulator_rejects_a_stream(emulator_only: None, stream: Any) -> None:
    x = _rand((4, 4))
    out = np.full((4, 4), 5.0, np.float32)
    with pytest.raises(NotSupportedError, match=r"stream: the emulator .* pass stream=None"):
        cl.relu(x, out=out, stream=stream)
    np.testing.assert_array_equal(out, 5.0)


@pytest.mark.parametrize("bad", ["abc", 1.5, True, -3, object()])
def test_bad_stream_objects_are_rejected(bad: Any) -> None:
    with pytest.raises(BadParamError, match=r"stream: expected None"):
        streams.as_cupy_stream(bad)


def test_stream_handles_are_read_from_each_protocol() -> None:
    class Protocol:
        def __cuda_stream__(self) -> tuple[int, int]:
            return (0, 1234)

    class TorchLike:
        cuda_stream = 5678

    assert streams._stream_pointer(Protocol()) == 1234
    assert streams._stream_pointer(TorchLike()) == 5678
    assert streams._stream_pointer(np.int64(42)) == 42
    assert streams._stream_pointer(True) is None


def test_stream_without_cupy_needs_cupy() -> None:
    try:
        import cupy  # noqa: F401
    except ImportError:
        with pytest.raises(NotSupportedError, match=r"needs CuPy"):
            streams.as_cupy_stream(1234)
        with pytest.raises(NotSupportedError, match=r"needs CuPy"):
            with streams.use_stream(1234):
                pass
    else:
        pytest.skip("CuPy is installed")
    with streams.use_stream(None) as s:  # None: leave the current stream alone
        assert s is None


def test_stream_runs_the_call_and_the_import_on_it(backend: str) -> None:
    """The DLPack handshake: the consumer stream handed to the producer is the call's."""
    if backend != "cuda":
        pytest.skip("streams exist on the GPU only")
    import cupy

    x = cupy.asarray(_rand((64, 33)))
    s = cupy.cuda.Stream(non_blocking=True)
    px = Producer(x)
    y = cl.gelu(px, stream=s)
    s.synchronize()
    assert px.streams == [s.ptr]
    np.testing.assert_array_equal(cupy.asnumpy(y), cupy.asnumpy(cl.gelu(x)))
    seen: list[int] = []

    class Recording(Producer):
        def __dlpack__(self, stream: Any = None, **kwargs: Any) -> Any:
            seen.append(cupy.cuda.get_current_stream().ptr)
            return super().__dlpack__(stream=stream, **kwargs)

    with cl.use_stream(s):
        cl.relu(Recording(x))
        assert cl.current_stream().ptr == s.ptr
    assert seen == [s.ptr]
    ext = cupy.cuda.ExternalStream(s.ptr)
    np.testing.assert_array_equal(cupy.asnumpy(cl.relu(x, stream=ext)), cupy.asnumpy(cl.relu(x)))
