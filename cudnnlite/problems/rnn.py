"""The recurrent-network problem: what decides the algorithm and its speed (mode, sizes,
layers, directions, dtype, variable lengths, dropout between layers on or off), never the
data or the values that do not change the work (the dropout probability, the seed).

Key format::

    rnn_fwd lstm t100-b64 i256-h512-p128 l2 bi fp16 varlen drop

``t`` the sequence length, ``b`` the batch, ``i`` the input size, ``h`` the hidden size,
``p`` the projection size (LSTM only; 0 without), ``l`` the layers, ``bi`` when
bidirectional (``uni`` otherwise), the dtype, then the optional ``varlen`` (per-sequence
lengths) and ``drop`` (dropout between layers). ``rnn_bwd`` keys describe the backward
pass (data and weight gradients) of the same forward problem.

Semantics are PyTorch's ``torch.nn.RNN`` / ``LSTM`` / ``GRU`` (see
``cudnnlite.reference.rnn``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from ..errors import BadParamError

MODES = ("rnn_tanh", "rnn_relu", "lstm", "gru")
DIRECTIONS = ("fwd", "bwd")
DTYPES = ("fp32", "fp16", "bf16", "fp64")
GATES = {"rnn_tanh": 1, "rnn_relu": 1, "lstm": 4, "gru": 3}
MODE_ID = {"rnn_tanh": 0, "rnn_relu": 1, "lstm": 2, "gru": 3}  # rnn::kMode* in rnn_cell.cu


@dataclass(frozen=True)
class RnnProblem:
    """A stack of ``layers`` recurrent layers over a (t, b, i) time-major sequence."""

    mode: str
    t: int
    b: int
    i: int
    h: int
    p: int = 0
    layers: int = 1
    bidirectional: bool = False
    dtype: str = "fp32"
    direction: str = "fwd"
    varlen: bool = False
    dropout: bool = False

    def __post_init__(self) -> None:
        for name, allowed in (("mode", MODES), ("dtype", DTYPES), ("direction", DIRECTIONS)):
            value = getattr(self, name)
            if value not in allowed:
                raise BadParamError(f"{name}: expected one of {allowed}, got {value!r}")
        if min(self.h, self.layers) < 1:
            raise BadParamError(f"hidden size and layers must be >= 1: {self}")
        if min(self.t, self.b, self.i, self.p) < 0:
            raise BadParamError(f"t, b, i and p must be >= 0: {self}")
        if self.p and self.mode != "lstm":
            raise BadParamError(f"proj_size: projections need mode 'lstm', got {self.mode!r}")
        if self.p and self.p >= self.h:
            raise BadParamError(f"proj_size={self.p} must be smaller than hidden_size={self.h}")
        if self.layers == 1 and self.dropout:
            object.__setattr__(self, "dropout", False)  # no layer boundary to drop at

    # ------------------------------------------------------------------ derived
    @property
    def family(self) -> str:
        return f"rnn_{self.direction}"

    @property
    def gates(self) -> int:
        return GATES[self.mode]

    @property
    def dirs(self) -> int:
        return 2 if self.bidirectional else 1

    @property
    def hout(self) -> int:
        """The size of h (the projection's when there is one)."""
        return self.p or self.h

    @property
    def empty(self) -> bool:
        return self.t * self.b == 0

    def layer_input(self, layer: int) -> int:
        return self.i if layer == 0 else self.dirs * self.hout

    def flops(self) -> int:
        """2 * multiply-adds of the GEMMs (the pointwise work is not counted); the backward
        (data and weight gradients) counts twice the forward."""
        g = self.gates * self.h
        per_step = 0
        for layer in range(self.layers):
            per_step += g * (self.layer_input(layer) + self.hout) + self.p * self.h
        f = 2 * self.t * self.b * self.dirs * per_step
        return f if self.direction == "fwd" else 2 * f

    def forward(self) -> RnnProblem:
        return replace(self, direction="fwd")

    def backward(self) -> RnnProblem:
        return replace(self, direction="bwd")

    # ------------------------------------------------------------------ keys
    def key(self) -> str:
        parts = [
            f"rnn_{self.direction}",
            self.mode,
            f"t{self.t}-b{self.b}",
            f"i{self.i}-h{self.h}-p{self.p}",
            f"l{self.layers}",
            "bi" if self.bidirectional else "uni",
            self.dtype,
        ]
        if self.varlen:
            parts.append("varlen")
        if self.dropout:
            parts.append("drop")
        return " ".join(parts)

    _KEY = re.compile(
        r"^rnn_(?P<dir>fwd|bwd) (?P<mode>rnn_tanh|rnn_relu|lstm|gru) t(?P<t>\d+)-b(?P<b>\d+) "
        r"i(?P<i>\d+)-h(?P<h>\d+)-p(?P<p>\d+) l(?P<l>\d+) (?P<bi>bi|uni) "
        r"(?P<dtype>fp32|fp16|bf16|fp64)(?P<varlen> varlen)?(?P<drop> drop)?$"
    )

    @classmethod
    def parse(cls, key: str) -> RnnProblem:
        """The problem a key describes; BadParamError when it is not a valid key."""
        m = cls._KEY.match(key.strip())
        if not m:
            raise BadParamError(f"not an RNN problem key: {key!r}")
        return cls(
            mode=m["mode"],
            t=int(m["t"]),
            b=int(m["b"]),
            i=int(m["i"]),
            h=int(m["h"]),
            p=int(m["p"]),
            layers=int(m["l"]),
            bidirectional=m["bi"] == "bi",
            dtype=m["dtype"],
            direction=m["dir"],
            varlen=m["varlen"] is not None,
            dropout=m["drop"] is not None,
        )

    def __str__(self) -> str:
        return self.key()
