"""The convolution problem: everything that decides which algorithm fits and how fast
it runs, and nothing else (not the data, not the epilogue).

Key format (N-d ready; 2-D shown)::

    conv2d_fwd n32-c64-h56-w56 k64-r3-s3 p1x1-u1x1-d1x1 g1 NCHW fp32

``p`` is the padding per spatial dim; an asymmetric pad is written ``before_after``
(``p0_1x0_1``). ``u`` the strides, ``d`` the dilations, ``g`` the groups. A math mode
other than the default is appended (``tf32``). Spatial dims are named h, w (input)
and r, s (filter) in 2-D; d, h, w and t, r, s in 3-D; w and s in 1-D.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..errors import BadParamError

DIRECTIONS = ("fwd", "bwd_data", "bwd_filter")
LAYOUTS = {1: ("NCW", "NWC"), 2: ("NCHW", "NHWC"), 3: ("NCDHW", "NDHWC")}
DTYPES = ("fp32", "fp16", "bf16", "fp64")
MATHS = ("default", "tf32")
_IN_NAMES = {1: "w", 2: "hw", 3: "dhw"}
_FILTER_NAMES = {1: "s", 2: "rs", 3: "trs"}


@dataclass(frozen=True)
class ConvProblem:
    """A convolution of x (n, c, *spatial) with w (k, c // groups, *filter)."""

    n: int
    c: int
    spatial: tuple[int, ...]
    k: int
    filter: tuple[int, ...]
    pads: tuple[tuple[int, int], ...]
    strides: tuple[int, ...]
    dilations: tuple[int, ...]
    groups: int = 1
    layout: str = "NCHW"
    dtype: str = "fp32"
    direction: str = "fwd"
    math: str = "default"

    def __post_init__(self) -> None:
        nd = len(self.spatial)
        if nd not in LAYOUTS:
            raise BadParamError(f"spatial: 1 to 3 dims expected, got {self.spatial}")
        for name in ("filter", "pads", "strides", "dilations"):
            if len(getattr(self, name)) != nd:
                raise BadParamError(f"{name}: expected {nd} entries, got {getattr(self, name)}")
        if self.layout not in LAYOUTS[nd]:
            raise BadParamError(f"layout: expected one of {LAYOUTS[nd]}, got {self.layout!r}")
        if self.dtype not in DTYPES:
            raise BadParamError(f"dtype: expected one of {DTYPES}, got {self.dtype!r}")
        if self.direction not in DIRECTIONS:
            raise BadParamError(f"direction: expected one of {DIRECTIONS}, got {self.direction!r}")
        if self.math not in MATHS:
            raise BadParamError(f"math: expected one of {MATHS}, got {self.math!r}")
        if self.math == "tf32" and self.dtype != "fp32":
            raise BadParamError(f"math: 'tf32' applies to fp32 problems only, got {self.dtype}")
        if min(self.n, self.c, self.k, self.groups, *self.spatial, *self.filter) < 1:
            raise BadParamError(f"sizes must be >= 1: {self}")
        if any(p < 0 for pair in self.pads for p in pair):
            raise BadParamError(f"pads must be >= 0, got {self.pads}")
        if min(*self.strides, *self.dilations) < 1:
            raise BadParamError("strides and dilations must be >= 1")
        values = (self.n, self.c, self.k, self.groups, *self.spatial, *self.filter,
                  *self.strides, *self.dilations, *(p for pair in self.pads for p in pair))
        if max(values) >= 2**31:  # fmt: skip
            raise BadParamError(f"sizes, strides, dilations and pads must be below 2^31 (the "
                                f"kernels' ints): {self}")  # fmt: skip
        if self.c % self.groups or self.k % self.groups:
            raise BadParamError(f"groups={self.groups} must divide c={self.c} and k={self.k}")
        for size, f, (before, after), dil in zip(self.spatial, self.filter, self.pads,
                                                 self.dilations, strict=True):  # fmt: skip
            if size + before + after < dil * (f - 1) + 1:
                # (every solver would size its grid, tiles or workspace from an output of
                # no pixels or fewer: the ops refuse these calls first, with the operand)
                raise BadParamError(
                    f"spatial: the padded input ({size} + {before} + {after}) is smaller than "
                    f"the dilated filter ({dil * (f - 1) + 1}): the output would be empty"
                )

    # ------------------------------------------------------------------ derived
    @property
    def family(self) -> str:
        """The solver family that runs this problem."""
        return f"conv_{self.direction}"

    @property
    def ndim(self) -> int:
        return len(self.spatial)

    @property
    def channels_last(self) -> bool:
        return self.layout[-1] == "C"

    @property
    def c_per_group(self) -> int:
        return self.c // self.groups

    @property
    def k_per_group(self) -> int:
        return self.k // self.groups

    @property
    def out_spatial(self) -> tuple[int, ...]:
        return tuple(
            (size + before + after - dil * (f - 1) - 1) // stride + 1
            for size, f, (before, after), stride, dil in zip(
                self.spatial, self.filter, self.pads, self.strides, self.dilations, strict=True
            )
        )

    @property
    def depthwise(self) -> bool:
        """groups == C: each input channel convolved with its own K/C filters."""
        return self.groups == self.c and self.groups > 1

    @property
    def pointwise(self) -> bool:
        """A 1x1 filter, stride 1, no padding: a plain GEMM."""
        return (
            all(f == 1 for f in self.filter)
            and all(s == 1 for s in self.strides)
            and all(p == (0, 0) for p in self.pads)
        )

    @property
    def filter_taps(self) -> int:
        taps = 1
        for f in self.filter:
            taps *= f
        return taps

    def x_shape(self) -> tuple[int, ...]:
        return self._shape(self.c, self.spatial)

    def w_shape(self) -> tuple[int, ...]:
        if self.channels_last:
            return (self.k, *self.filter, self.c_per_group)
        return (self.k, self.c_per_group, *self.filter)

    def y_shape(self) -> tuple[int, ...]:
        return self._shape(self.k, self.out_spatial)

    def _shape(self, channels: int, spatial: tuple[int, ...]) -> tuple[int, ...]:
        if self.channels_last:
            return (self.n, *spatial, channels)
        return (self.n, channels, *spatial)

    def flops(self) -> int:
        """Multiply-adds times two of the direct algorithm (the TFLOP/s convention)."""
        out = 1
        for v in self.out_spatial:
            out *= v
        return 2 * self.n * self.k * out * self.c_per_group * self.filter_taps

    # ------------------------------------------------------------------ keys
    def key(self) -> str:
        nd = self.ndim
        ins = "-".join(f"{n}{v}" for n, v in zip(_IN_NAMES[nd], self.spatial, strict=True))
        fil = "-".join(f"{n}{v}" for n, v in zip(_FILTER_NAMES[nd], self.filter, strict=True))
        pads = "x".join(str(b) if b == a else f"{b}_{a}" for b, a in self.pads)
        strides = "x".join(map(str, self.strides))
        dils = "x".join(map(str, self.dilations))
        key = (
            f"conv{nd}d_{self.direction} n{self.n}-c{self.c}-{ins} k{self.k}-{fil} "
            f"p{pads}-u{strides}-d{dils} g{self.groups} {self.layout} {self.dtype}"
        )
        return key if self.math == "default" else f"{key} {self.math}"

    _KEY = re.compile(
        r"^conv(?P<nd>[123])d_(?P<dir>fwd|bwd_data|bwd_filter) "
        r"n(?P<n>\d+)-c(?P<c>\d+)-(?P<ins>[a-z0-9-]+) "
        r"k(?P<k>\d+)-(?P<fil>[a-z0-9-]+) "
        r"p(?P<pads>[0-9_x]+)-u(?P<strides>[0-9x]+)-d(?P<dils>[0-9x]+) "
        r"g(?P<g>\d+) (?P<layout>[A-Z]+) (?P<dtype>fp32|fp16|bf16|fp64)(?: (?P<math>tf32))?$"
    )

    @classmethod
    def parse(cls, key: str) -> ConvProblem:
        """The problem a key describes; BadParamError when it is not a valid key."""
        m = cls._KEY.match(key.strip())
        if not m:
            raise BadParamError(f"not a convolution problem key: {key!r}")
        nd = int(m["nd"])
        spatial = _named_values(m["ins"], _IN_NAMES[nd], key)
        filt = _named_values(m["fil"], _FILTER_NAMES[nd], key)
        pads = []
        for part in m["pads"].split("x"):
            before, _, after = part.partition("_")
            pads.append((int(before), int(after or before)))
        return cls(
            n=int(m["n"]),
            c=int(m["c"]),
            spatial=spatial,
            k=int(m["k"]),
            filter=filt,
            pads=tuple(pads),
            strides=tuple(int(v) for v in m["strides"].split("x")),
            dilations=tuple(int(v) for v in m["dils"].split("x")),
            groups=int(m["g"]),
            layout=m["layout"],
            dtype=m["dtype"],
            direction=m["dir"],
            math=m["math"] or "default",
        )

    def __str__(self) -> str:
        return self.key()


def _named_values(text: str, names: str, key: str) -> tuple[int, ...]:
    parts = text.split("-")
    if len(parts) != len(names) or any(p[:1] != n for p, n in zip(parts, names, strict=True)):
        raise BadParamError(f"not a convolution problem key: {key!r} (expected dims {names})")
    return tuple(int(p[1:]) for p in parts)
