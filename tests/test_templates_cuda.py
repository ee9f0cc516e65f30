"""The CUDA replay of launch templates, with stand-in device arrays and CuPy (no GPU
needed): argument patching, offset pointers, kept temporaries, and a GPU plan's memo
checking device and stream."""

from __future__ import annotations

import types
from typing import Any

import numpy as np
import pytest
from fake_device import FakeDeviceArray
from templates_support import fresh_templates  # noqa: F401 (autouse: a clean store)

from cudnnlite.runtime import template_keys, template_record, templates

# ------------------------------------------------------------------ the CUDA replay


class FakeKernel:
    """Stands in for a CudaKernel: what a replay calls, with the arguments it got."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def launch_prepared(self, g: Any, b: Any, args: tuple, shared_mem: int, coop: bool) -> None:
        self.calls.append((g, b, args, shared_mem, coop))


def cuda_recording(x: Any, w: Any, y: Any, kernel: FakeKernel, **launch: Any) -> Any:
    rec = template_record.Recording()
    view = FakeDeviceArray((4,), np.float32, ptr=w.data.ptr + 64)  # w[16:20], say
    args = (x, view, y, np.int32(7), None)
    rec.record_cuda(kernel, args, grid=3, block=128,
                    shared_mem=256, cooperative=False, **launch)  # fmt: skip
    return rec


def test_cuda_replays_patch_arrays_and_offset_pointers(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_cupy = types.SimpleNamespace(empty=lambda shape, dtype: FakeDeviceArray(shape, dtype))
    monkeypatch.setattr(template_keys, "_cupy_of", lambda t: fake_cupy)
    x, w = FakeDeviceArray((2, 8), np.float32), FakeDeviceArray((64,), np.float32)
    y = FakeDeviceArray((2, 8), np.float32)
    kernel = FakeKernel()
    tmpl = template_record._template(cuda_recording(x, w, y, kernel, copies=False), y, [x, w])
    assert type(tmpl) is template_record.Template and tmpl.kind == "cuda" and len(tmpl) == 1
    x2, w2 = FakeDeviceArray((2, 8), np.float32), FakeDeviceArray((64,), np.float32)
    y2 = tmpl.replay([x2, w2])
    assert isinstance(y2, FakeDeviceArray) and y2.shape == (2, 8) and y2 not in (x2, y)
    grid, block, args, shared_mem, coop = kernel.calls[-1]
    assert (grid, block, shared_mem, coop) == ((3, 1, 1), (128, 1, 1), 256, False)
    assert args[0] is x2 and args[2] is y2 and args[4] is None
    assert args[1] == np.uint64(w2.data.ptr + 64) and args[3] == np.int32(7)

    assert tmpl.scratch == ()
    # the view points into none of the call's arrays: a temporary, of which the template
    # keeps a copy
    stranger = FakeDeviceArray((64,), np.float32)
    kept = template_record._template(
        cuda_recording(x, stranger, y, kernel, copies=False), y, [x, w]
    )
    assert type(kept) is template_record.Template and len(kept.scratch) == 1
    kept.replay([x2, w2])
    args = kernel.calls[-1][2]
    # (the template's own copy of that temporary, not the call's: nothing else shares it)
    copy = kept.scratch[0]
    assert copy.shape == (4,) and copy.data.ptr != stranger.data.ptr + 64
    assert args[1] == np.uint64(copy.data.ptr)
    # a host copy is refused
    copied = template_record._template(cuda_recording(x, w, y, kernel, copies=True), y, [x, w])
    assert type(copied) is template_record.Refused and "copied" in copied.reason


def test_a_plans_memo_on_the_gpu_checks_device_and_stream(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The memo of a GPU plan call replays on new device arrays of the recorded layout, on
    the recorded device and stream only (stand-in arrays and CuPy: no GPU needed)."""
    monkeypatch.delenv("CUDNNLITE_TEMPLATE_CHECK", raising=False)
    current = {"device": 0, "stream": 77}
    fake_cupy = types.SimpleNamespace(
        empty=lambda shape, dtype: FakeDeviceArray(shape, dtype),
        cuda=types.SimpleNamespace(
            runtime=types.SimpleNamespace(getDevice=lambda: current["device"]),
            get_current_stream=lambda: types.SimpleNamespace(ptr=current["stream"]),
        ),
    )
    monkeypatch.setattr(template_keys, "_cupy_of", lambda t: fake_cupy)

    class Plan:
        def __call__(self, x: Any, w: Any) -> Any:
            raise AssertionError("only the memo runs here")

    op, plan = Plan.__dict__["__call__"], Plan()
    x, w = FakeDeviceArray((2, 8), np.float32), FakeDeviceArray((64,), np.float32)
    y, kernel = FakeDeviceArray((2, 8), np.float32), FakeKernel()
    tmpl = template_record._template(cuda_recording(x, w, y, kernel, copies=False), y, [x, w])
    key = (op, "(the arrays' parts)", 77, template_keys._context_key(),
           template_keys._SWITCHES())  # fmt: skip
    templates.keep_memo(key, tmpl, op, None, (plan, x, w), [x.data.ptr, w.data.ptr])
    memo = plan._template_memo
    x2, w2 = FakeDeviceArray((2, 8), np.float32), FakeDeviceArray((64,), np.float32)
    y2 = memo(op, (plan, x2, w2))
    assert isinstance(y2, FakeDeviceArray) and y2.shape == (2, 8)
    args = kernel.calls[-1][2]
    assert args[0] is x2 and args[2] is y2 and args[1] == np.uint64(w2.data.ptr + 64)
    launched = len(kernel.calls)
    for what, value in (("stream", 78), ("device", 1)):
        current[what] = value
        assert memo(op, (plan, x2, w2)) is None, what
        current[what] = {"stream": 77, "device": 0}[what]
    elsewhere = FakeDeviceArray((2, 8), np.float32)
    elsewhere.device = types.SimpleNamespace(id=1)
    elsewhere.data.device_id = 1
    others = [FakeDeviceArray((2, 8), np.float64), FakeDeviceArray((4, 4), np.float32),
              FakeDeviceArray((2, 8), np.float32, ptr=x.data.ptr + 4), elsewhere,
              np.zeros((2, 8), np.float32)]  # fmt: skip
    for other in others:
        assert memo(op, (plan, other, w2)) is None
    assert memo(Plan.__init__, (plan, x2, w2)) is None
    assert memo(op, (plan, x2)) is None
    assert len(kernel.calls) == launched
    assert memo(op, (plan, x2, w2)) is not None
