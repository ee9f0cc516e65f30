"""ml_dtypes is imported on first need (cudnnlite.dtypes' docstring): importing cudnnlite and
calls on float32 / float16 / float64 arrays never import it; a bfloat16 array (whose
existence means ml_dtypes is imported) works on its first call, keyed as a tensor."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from cudnnlite import dtypes

pytestmark = pytest.mark.skipif(not dtypes.HAVE_BFLOAT16, reason="needs ml_dtypes")


def _run(code: str) -> str:
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=False)  # fmt: skip
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_import_and_other_dtypes_never_import_ml_dtypes() -> None:
    code = (
        "import sys\n"
        "import numpy as np, cudnnlite as cl\n"
        "from cudnnlite import dtypes\n"
        "assert 'ml_dtypes' not in sys.modules, 'imported with cudnnlite'\n"
        "x = np.linspace(-2, 2, 2 * 3 * 4 * 4).reshape(2, 3, 4, 4)\n"
        "w = np.linspace(-1, 1, 2 * 3 * 3 * 3).reshape(2, 3, 3, 3)\n"
        "for dt in (np.float32, np.float16, np.float64):\n"
        "    xx, ww = x.astype(dt), w.astype(dt)\n"
        "    cl.relu(xx); cl.conv2d(xx, ww, padding=1); cl.softmax(xx, axis=1)\n"
        "    cl.conv2d_plan(xx.shape, ww.shape, padding=1, dtype=dt)(xx, ww)\n"
        "    cl.layer_norm(xx, (4, 4)); dtypes.finfo(dt); dtypes.lookup(dt)\n"
        "assert dtypes.lookup(np.int32) is None and dtypes.lookup('no such type') is None\n"
        "assert [d.short for d in dtypes.FLOAT_TYPES] == ['fp32', 'fp16', 'bf16', 'fp64']\n"
        "assert 'ml_dtypes' not in sys.modules, 'imported by a call'\n"
        "print('ok')\n"
    )
    assert _run(code) == "ok"


def test_a_bfloat16_array_works_on_first_sight() -> None:
    # A fresh process: the user imports ml_dtypes, cudnnlite has not made bf16's dtype yet.
    code = (
        "import numpy as np, ml_dtypes, cudnnlite as cl\n"
        "from cudnnlite import dtypes\n"
        "from cudnnlite.runtime import template_keys\n"
        "x = np.linspace(-2, 2, 24).reshape(2, 3, 4).astype(ml_dtypes.bfloat16)\n"
        "key = template_keys._value_key(x, [], [])\n"
        "assert len(key) == 5, key  # a tensor: its shape and layout, not its contents\n"
        "assert dtypes.lookup(x.dtype) is dtypes.BFLOAT16\n"
        "assert x.dtype in dtypes.TENSOR_DTYPES\n"
        "y = cl.relu(x)\n"
        "assert y.dtype == x.dtype and (y.astype(float) == np.maximum(x.astype(float), 0)).all()\n"
        "assert cl.bfloat16 == np.dtype(ml_dtypes.bfloat16) == dtypes.bfloat16\n"
        "from cudnnlite import bfloat16\n"
        "assert bfloat16 == cl.bfloat16\n"
        "assert float(dtypes.finfo(bfloat16).eps) == 2.0 ** -7\n"
        "print('ok')\n"
    )
    assert _run(code) == "ok"


def test_cudnnlite_bfloat16_imports_ml_dtypes() -> None:
    code = (
        "import sys, cudnnlite as cl\n"
        "assert 'ml_dtypes' not in sys.modules\n"
        "bf = cl.bfloat16\n"
        "import ml_dtypes, numpy as np\n"
        "assert bf == np.dtype(ml_dtypes.bfloat16)\n"
        "try:\n"
        "    cl.no_such_name\n"
        "except AttributeError as exc:\n"
        "    assert 'no_such_name' in str(exc)\n"
        "else:\n"
        "    raise AssertionError('no AttributeError')\n"
        "print('ok')\n"
    )
    assert _run(code) == "ok"


def test_the_name_bfloat16_works_before_ml_dtypes_is_imported() -> None:
    # NumPy knows the name only once ml_dtypes is imported; plans and casts take it first
    code = (
        "import sys, numpy as np, cudnnlite as cl\n"
        "p = cl.conv2d_plan((1, 3, 8, 8), (4, 3, 3, 3), dtype='bfloat16', backend='cpu')\n"
        "assert p.problem.dtype == 'bf16' and 'ml_dtypes' in sys.modules\n"
        "y = cl.transform_tensor(np.ones((2, 2), np.float32), dtype='bfloat16')\n"
        "assert y.dtype == cl.bfloat16 and (y.astype(np.float32) == 1).all()\n"
        "print('ok')\n"
    )
    assert _run(code) == "ok"


def test_dtype_objects() -> None:
    assert dtypes.by_short("bf16") is dtypes.BFLOAT16
    assert dtypes.BFLOAT16.itemsize == 2 and dtypes.FLOAT64.itemsize == 8
    assert repr(dtypes.FLOAT32) == "DType(fp32)"
    assert dtypes.lookup(np.float32) is dtypes.FLOAT32
