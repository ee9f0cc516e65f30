"""The scaled dot-product attention problem: what decides the algorithm and its speed
(sizes, layout, dtype, the kinds of masking, dropout on or off), never the data or the
values that only scale it (the softmax scale, the dropout probability, the seed).

Key format::

    sdpa_fwd b2-hq8-hkv2 sq128-skv256 d64-dv64 BHSD fp16 causal win128_0 align_br mask_bool drop

``b`` batch, ``hq``/``hkv`` query and key/value heads (GQA when they differ), ``sq``/``skv``
the query and key/value lengths, ``d`` the query/key head dim and ``dv`` the value head dim.
The optional tail: ``causal``, ``win{left}_{right}`` (a sliding window; ``inf`` for
unbounded), ``align_br`` (causal and window aligned bottom-right; top-left otherwise),
``mask_bool``/``mask_add`` (an explicit mask), ``drop`` (dropout on the probabilities),
``varlen`` (per-batch lengths). ``sdpa_bwd`` keys describe the backward pass of the same
forward problem.

Masking semantics, shared by every solver: query row ``i`` sits at key position
``i + shift`` with ``shift = 0`` (top-left, PyTorch's ``is_causal``) or ``skv - sq``
(bottom-right, FlashAttention's); causal keeps keys ``j <= i + shift``; a window keeps
``i + shift - left <= j <= i + shift + right``. Both hold at once when both are given.
With lengths, ``sq``/``skv`` are each batch entry's own lengths.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from ..errors import BadParamError

DIRECTIONS = ("fwd", "bwd")
LAYOUTS = ("BHSD", "BSHD")
DTYPES = ("fp32", "fp16", "bf16", "fp64")
ALIGNS = ("top_left", "bottom_right")
MASKS = ("none", "bool", "additive")
_MASK_TAG = {"bool": "bool", "additive": "add"}


@dataclass(frozen=True)
class AttentionProblem:
    """softmax(scale * q k^T + mask) v for q (b, hq, sq, d), k (b, hkv, skv, d),
    v (b, hkv, skv, dv) (BHSD; BSHD swaps the head and sequence axes)."""

    b: int
    hq: int
    hkv: int
    sq: int
    skv: int
    d: int
    dv: int
    layout: str = "BHSD"
    dtype: str = "fp32"
    direction: str = "fwd"
    causal: bool = False
    align: str = "top_left"  # where causal and the window put query 0 (module docstring)
    window: tuple[int, int] | None = None  # (left, right); -1 = unbounded
    mask: str = "none"
    dropout: bool = False
    varlen: bool = False

    def __post_init__(self) -> None:
        if min(self.hq, self.hkv) < 1:
            raise BadParamError(f"hq and hkv must be >= 1: {self}")
        if min(self.b, self.sq, self.skv, self.d, self.dv) < 0:
            raise BadParamError(f"b, sq, skv, d and dv must be >= 0: {self}")
        if self.hq % self.hkv:
            raise BadParamError(f"hq={self.hq} must be a multiple of hkv={self.hkv}")
        for name, allowed in (("layout", LAYOUTS), ("dtype", DTYPES), ("direction", DIRECTIONS),
                              ("align", ALIGNS), ("mask", MASKS)):  # fmt: skip
            value = getattr(self, name)
            if value not in allowed:
                raise BadParamError(f"{name}: expected one of {allowed}, got {value!r}")
        if self.window is not None:
            if len(self.window) != 2 or any(w < -1 for w in self.window):
                raise BadParamError(f"window: expected (left, right) >= -1, got {self.window}")
            object.__setattr__(self, "window", tuple(int(w) for w in self.window))
        if not self.causal and self.window is None:
            object.__setattr__(self, "align", "top_left")  # irrelevant: one key per problem

    # ------------------------------------------------------------------ derived
    @property
    def family(self) -> str:
        return f"sdpa_{self.direction}"

    @property
    def empty(self) -> bool:
        """Nothing to compute: no outputs, or no keys or head dims (the output is 0)."""
        return self.b * self.sq * self.dv == 0 or self.skv == 0 or self.d == 0

    @property
    def group(self) -> int:
        """Query heads per key/value head (1 without GQA)."""
        return self.hq // self.hkv

    @property
    def bounds(self) -> tuple[int, int]:
        """(left, right) of the keys each query may see relative to its own position,
        -1 for unbounded: causal and the window combined."""
        left, right = self.window if self.window is not None else (-1, -1)
        if self.causal:
            right = 0 if right == -1 else min(right, 0)
        return left, right

    @property
    def shift(self) -> int:
        """The key position of query row 0 (per batch entry's lengths with varlen)."""
        return self.skv - self.sq if self.align == "bottom_right" else 0

    @property
    def max_head_dim(self) -> int:
        return max(self.d, self.dv)

    def q_shape(self) -> tuple[int, ...]:
        return self._shape(self.hq, self.sq, self.d)

    def k_shape(self) -> tuple[int, ...]:
        return self._shape(self.hkv, self.skv, self.d)

    def v_shape(self) -> tuple[int, ...]:
        return self._shape(self.hkv, self.skv, self.dv)

    def o_shape(self) -> tuple[int, ...]:
        return self._shape(self.hq, self.sq, self.dv)

    def lse_shape(self) -> tuple[int, ...]:
        return (self.b, self.hq, self.sq)

    def _shape(self, h: int, s: int, d: int) -> tuple[int, ...]:
        return (self.b, h, s, d) if self.layout == "BHSD" else (self.b, s, h, d)

    def flops(self) -> int:
        """2 * b * hq * sq * skv * (d + dv) for the forward, 2.5x that for the backward
        (the convention of FlashAttention's benchmarks), halved when causal (upper bound
        when a window or mask removes more)."""
        f = 2 * self.b * self.hq * self.sq * self.skv * (self.d + self.dv)
        if self.causal:
            f //= 2
        return f if self.direction == "fwd" else int(f * 2.5)

    def forward(self) -> AttentionProblem:
        """The forward problem this one is the backward of (or itself)."""
        return replace(self, direction="fwd")

    def backward(self) -> AttentionProblem:
        return replace(self, direction="bwd")

    # ------------------------------------------------------------------ keys
    def key(self) -> str:
        parts = [
            f"sdpa_{self.direction}",
            f"b{self.b}-hq{self.hq}-hkv{self.hkv}",
            f"sq{self.sq}-skv{self.skv}",
            f"d{self.d}-dv{self.dv}",
            self.layout,
            self.dtype,
        ]
        if self.causal:
            parts.append("causal")
        if self.window is not None:
            parts.append("win" + "_".join("inf" if w == -1 else str(w) for w in self.window))
        if self.align == "bottom_right":
            parts.append("align_br")
        if self.mask != "none":
            parts.append(f"mask_{_MASK_TAG[self.mask]}")
        if self.dropout:
            parts.append("drop")
        if self.varlen:
            parts.append("varlen")
        return " ".join(parts)

    _KEY = re.compile(
        r"^sdpa_(?P<dir>fwd|bwd) b(?P<b>\d+)-hq(?P<hq>\d+)-hkv(?P<hkv>\d+) "
        r"sq(?P<sq>\d+)-skv(?P<skv>\d+) d(?P<d>\d+)-dv(?P<dv>\d+) "
        r"(?P<layout>BHSD|BSHD) (?P<dtype>fp32|fp16|bf16|fp64)"
        r"(?P<causal> causal)?(?: win(?P<wl>inf|\d+)_(?P<wr>inf|\d+))?(?P<br> align_br)?"
        r"(?: mask_(?P<mask>bool|add))?(?P<drop> drop)?(?P<varlen> varlen)?$"
    )

    @classmethod
    def parse(cls, key: str) -> AttentionProblem:
        """The problem a key describes; BadParamError when it is not a valid key."""
        m = cls._KEY.match(key.strip())
        if not m:
            raise BadParamError(f"not an attention problem key: {key!r}")
        window = None
        if m["wl"] is not None:
            window = tuple(-1 if w == "inf" else int(w) for w in (m["wl"], m["wr"]))
        mask = {"bool": "bool", "add": "additive", None: "none"}[m["mask"]]
        return cls(
            b=int(m["b"]),
            hq=int(m["hq"]),
            hkv=int(m["hkv"]),
            sq=int(m["sq"]),
            skv=int(m["skv"]),
            d=int(m["d"]),
            dv=int(m["dv"]),
            layout=m["layout"],
            dtype=m["dtype"],
            direction=m["dir"],
            causal=m["causal"] is not None,
            align="bottom_right" if m["br"] else "top_left",
            window=window,
            mask=mask,
            dropout=m["drop"] is not None,
            varlen=m["varlen"] is not None,
        )

    def __str__(self) -> str:
        return self.key()
