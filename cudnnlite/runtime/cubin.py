"""Reads what ptxas recorded about each kernel, from a CUBIN and from ptxas's verbose log.

Two independent sources, so each checks the other (``tests/test_resources.py``):

- the CUBIN (an ELF image): ``.nv.info`` holds per-function attributes (``EIATTR_REGCOUNT``,
  ``EIATTR_FRAME_SIZE``, ``EIATTR_MAX_STACK_SIZE``), ``.nv.info.<kernel>`` the kernel's own
  (``EIATTR_MAX_THREADS``: ``__launch_bounds__``), and ``.nv.shared.<kernel>`` is sized by its
  static shared memory (on sm_90 and newer it also covers the 1 KiB the system reserves,
  marked by a ``.nv.shared.reserved.*`` section);
- ptxas's log (``--ptxas-options=-v``, a reporting option: the code is identical, which the
  tests check): registers, stack frame, spill stores and loads, static shared memory. Only
  the log has the spill figures.

An attribute record is ``format: u8, attribute: u8`` then, for ``EIFMT_SVAL`` (4), a u16 size
and that many bytes; every other format carries a u16 value in place of the size.
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass

from ..errors import BadParamError

# Attribute codes (cuobjdump -elf prints their names).
EIATTR_MAX_THREADS = 0x05
EIATTR_FRAME_SIZE = 0x11
EIATTR_MIN_STACK_SIZE = 0x12
EIATTR_MAX_STACK_SIZE = 0x23
EIATTR_REGCOUNT = 0x2F
_EIFMT_SVAL = 4

_SHT_SYMTAB = 2
_SMEM_RESERVED_SM90 = 1024


@dataclass(frozen=True)
class CubinKernel:
    """One kernel as the CUBIN describes it."""

    name: str  # the symbol (mangled for templates)
    registers: int
    frame_bytes: int  # per-thread stack frame (local memory)
    static_shared: int  # bytes, without the system's reserve
    max_threads: int | None  # __launch_bounds__ (product of x, y, z); None without one
    code_bytes: int


@dataclass(frozen=True)
class _Section:
    name: str
    type: int
    offset: int
    size: int
    link: int
    info: int
    entsize: int


def _sections(image: bytes) -> list[_Section]:
    if image[:4] != b"\x7fELF" or image[4] != 2:  # 64-bit ELF
        raise BadParamError("not a CUBIN: expected a 64-bit ELF image")
    (shoff,) = struct.unpack_from("<Q", image, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", image, 0x3A)
    raw = [struct.unpack_from("<IIQQQQIIQQ", image, shoff + i * shentsize) for i in range(shnum)]
    names_at = raw[shstrndx][4]

    def name(offset: int) -> str:
        start = names_at + offset
        return image[start : image.index(b"\0", start)].decode()

    return [
        _Section(name(r[0]), r[1], r[4], r[5], r[6], r[7], r[9])
        for r in raw  # (name, type, flags, addr, offset, size, link, info, align, entsize)
    ]


def _symbol_names(image: bytes, sections: list[_Section]) -> list[str]:
    symtab = next((s for s in sections if s.type == _SHT_SYMTAB), None)
    if symtab is None:
        return []
    strings = sections[symtab.link].offset
    out = []
    for pos in range(symtab.offset, symtab.offset + symtab.size, symtab.entsize or 24):
        (st_name,) = struct.unpack_from("<I", image, pos)
        start = strings + st_name
        out.append(image[start : image.index(b"\0", start)].decode())
    return out


def _attributes(image: bytes, section: _Section) -> list[tuple[int, bytes | int]]:
    """(attribute, payload bytes for EIFMT_SVAL or the u16 value otherwise)."""
    out: list[tuple[int, bytes | int]] = []
    pos, end = section.offset, section.offset + section.size
    while pos + 4 <= end:
        fmt, attr, value = struct.unpack_from("<BBH", image, pos)
        pos += 4
        if fmt == _EIFMT_SVAL:
            out.append((attr, image[pos : pos + value]))
            pos += value
        else:
            out.append((attr, value))
    return out


def read_cubin(image: bytes) -> dict[str, CubinKernel]:
    """Every kernel (``.text.<name>`` with ``.nv.info.<name>``) in the image, by symbol."""
    sections = _sections(image)
    symbols = _symbol_names(image, sections)
    by_name = {s.name: s for s in sections}
    per_function: dict[str, dict[int, int]] = {}
    for s in sections:
        if s.name != ".nv.info":
            continue
        for attr, payload in _attributes(image, s):
            if isinstance(payload, bytes) and len(payload) == 8:
                index, value = struct.unpack("<II", payload)
                if index < len(symbols):
                    per_function.setdefault(symbols[index], {})[attr] = value
    reserved = _SMEM_RESERVED_SM90 if any(".nv.shared.reserved" in n for n in by_name) else 0

    kernels: dict[str, CubinKernel] = {}
    for s in sections:
        if not s.name.startswith(".nv.info."):
            continue
        name = s.name[len(".nv.info.") :]
        text = by_name.get(f".text.{name}")
        if text is None:
            continue
        max_threads = None
        for attr, payload in _attributes(image, s):
            if attr == EIATTR_MAX_THREADS and isinstance(payload, bytes) and len(payload) == 12:
                x, y, z = struct.unpack("<III", payload)
                max_threads = x * max(y, 1) * max(z, 1)
        shared = by_name.get(f".nv.shared.{name}")
        attrs = per_function.get(name, {})
        kernels[name] = CubinKernel(
            name=name,
            registers=attrs.get(EIATTR_REGCOUNT, 0),
            frame_bytes=attrs.get(EIATTR_FRAME_SIZE, 0),
            static_shared=max(0, shared.size - reserved) if shared is not None else 0,
            max_threads=max_threads,
            code_bytes=text.size,
        )
    return kernels


def text_sections(image: bytes) -> dict[str, bytes]:
    """The machine code of each function, by section name: equal texts, equal code."""
    return {
        s.name: image[s.offset : s.offset + s.size]
        for s in _sections(image)
        if s.name.startswith(".text.")
    }


# ------------------------------------------------------------------ ptxas -v


@dataclass(frozen=True)
class PtxasReport:
    """ptxas's verbose figures for one entry function."""

    name: str
    registers: int
    stack_frame: int  # bytes per thread
    spill_stores: int  # bytes
    spill_loads: int  # bytes
    shared: int  # static shared memory, bytes
    barriers: int


_ENTRY = re.compile(r"Compiling entry function '([^']+)'")
_PROPS = re.compile(r"Function properties for (\S+)")
_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED = re.compile(r"Used (\d+) registers")
_BARRIERS = re.compile(r"used (\d+) barriers")
_SMEM = re.compile(r"(\d+) bytes smem")


def parse_ptxas_log(log: str) -> dict[str, PtxasReport]:
    """Entry functions in a ``--ptxas-options=-v`` log, by symbol.

    A ``Function properties`` block also appears for device functions that were not
    inlined; only the entries (``Compiling entry function``) are kept.
    """
    entries: set[str] = set()
    fields: dict[str, dict[str, int]] = {}
    current: str | None = None
    for line in log.splitlines():
        if m := _ENTRY.search(line):
            current = m.group(1)
            entries.add(current)
            fields.setdefault(current, {})
        elif m := _PROPS.search(line):
            current = m.group(1)
            fields.setdefault(current, {})
        elif current is not None and (m := _FRAME.search(line)):
            frame, stores, loads = map(int, m.groups())
            fields[current].update(frame=frame, stores=stores, loads=loads)
        elif current is not None and (m := _USED.search(line)):
            f = fields[current]
            f["registers"] = int(m.group(1))
            f["barriers"] = int(b.group(1)) if (b := _BARRIERS.search(line)) else 0
            f["shared"] = int(s.group(1)) if (s := _SMEM.search(line)) else 0
    return {
        name: PtxasReport(
            name,
            f.get("registers", 0),
            f.get("frame", 0),
            f.get("stores", 0),
            f.get("loads", 0),
            f.get("shared", 0),
            f.get("barriers", 0),
        )
        for name, f in fields.items()
        if name in entries
    }
