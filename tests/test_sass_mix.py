"""benchmarks/sass_mix.py: the SASS parser and main-loop finder on a hand-written listing,
and end to end (NVRTC + nvdisasm) on the small WMMA self-test module when nvdisasm is here.
"""

from __future__ import annotations

import importlib
import sys
import types
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "benchmarks"


@pytest.fixture(scope="module")
def sass_mix() -> types.ModuleType:
    sys.path.insert(0, str(BENCH))
    try:
        return importlib.import_module("sass_mix")
    finally:
        sys.path.remove(str(BENCH))


# Two functions in nvdisasm -c's format. tc_kernel: an outer loop (.L_x_1 .. 0x01d0) over
# taps around an inner loop (.L_x_2 .. 0x0180) with the 4 HMMAs; the outer loop holds the
# same 4 HMMAs, so the inner, shorter one is the main loop. fp_kernel: an FFMA loop.
LISTING = """\
\t.target\tsm_90
//--------------------- .text.tc_kernel --------------------------
\t.section\t.text.tc_kernel,"ax",@progbits
tc_kernel:
.text.tc_kernel:
        /*0000*/                   LDC R1, c[0x0][0x28] ;
        /*0010*/                   S2R R0, SR_TID.X ;
.L_x_1:
        /*0020*/                   IMAD R2, R0, 0x4, RZ ;
        /*0030*/                   ISETP.GE.AND P0, PT, R2, 0x10, PT ;
.L_x_2:
        /*0040*/                   LDGSTS.E.BYPASS.128 [R3], desc[UR4][R4.64] ;
        /*0050*/                   LDSM.16.M88.4 R8, [R5] ;
        /*0060*/                   LDSM.16.MT88.4 R12, [R5+0x800] ;
        /*0070*/                   HMMA.16816.F32 R16, R8, R12, R16 ;
        /*0080*/                   HMMA.16816.F32 R20, R8, R14, R20 ;
        /*0090*/                   HMMA.16816.F32 R24, R10, R12, R24 ;
        /*00a0*/                   HMMA.16816.F32 R28, R10, R14, R28 ;
        /*00b0*/                   IADD3 R5, R5, 0x20, RZ ;
        /*00c0*/                   UIADD3 UR4, UR4, 0x1, URZ ;
        /*00e0*/                   BAR.SYNC.DEFER_BLOCKING 0x0 ;
        /*00f0*/                   NOP ;
        /*0100*/                   ISETP.NE.AND P1, PT, R5, R7, PT ;
        /*0180*/               @P1 BRA `(.L_x_2) ;
        /*0190*/                   IADD3 R0, R0, 0x1, RZ ;
        /*01a0*/                   ISETP.NE.AND P2, PT, R0, 0x9, PT ;
        /*01b0*/                   SHF.R.S32.HI R9, RZ, 0x1f, R0 ;
        /*01c0*/                   LOP3.LUT R9, R9, 0x3, RZ, 0xc0, !PT ;
        /*01d0*/              @!P2 BRA `(.L_x_1) ;
        /*01e0*/                   STG.E [R2.64], R16 ;
        /*01f0*/                   EXIT ;
.L_x_3:
        /*0200*/                   BRA `(.L_x_3);
//--------------------- .text.fp_kernel --------------------------
\t.section\t.text.fp_kernel,"ax",@progbits
fp_kernel:
        /*0000*/                   MOV R1, c[0x0][0x28] ;
        /*0010*/                   BRA `(.L_x_9) ;
.L_x_8:
        /*0020*/                   LDS.128 R4, [R2] ;
        /*0030*/                   FFMA R8, R4, R5, R8 ;
        /*0040*/                   FFMA R9, R4, R6, R9 ;
        /*0050*/                   FFMA R10, R4, R7, R10 ;
        /*0060*/                   LDG.E R11, desc[UR4][R12.64] ;
.L_x_9:
        /*0070*/                   ISETP.GT.AND P0, PT, R3, RZ, PT ;
        /*0080*/               @P0 BRA `(.L_x_8) ;
        /*0090*/                   EXIT ;
"""


def test_parse(sass_mix: types.ModuleType) -> None:
    fns = sass_mix.parse_sass(LISTING)
    assert set(fns) == {"tc_kernel", "fp_kernel"}
    tc = fns["tc_kernel"]
    assert tc.labels == {".L_x_1": 0x20, ".L_x_2": 0x40, ".L_x_3": 0x200}
    assert [i.opcode for i in tc.instrs[:2]] == ["LDC", "S2R"]
    bra = next(i for i in tc.instrs if i.addr == 0x180)
    assert (bra.base, bra.target) == ("BRA", ".L_x_2")  # the predicate is not the opcode
    assert sorted(sass_mix.loops(tc)) == [(0x20, 0x1D0), (0x40, 0x180), (0x200, 0x200)]


def test_main_loop_is_the_innermost_with_the_most_mma(sass_mix: types.ModuleType) -> None:
    fns = sass_mix.parse_sass(LISTING)
    tc = fns["tc_kernel"]
    assert sass_mix.main_loop(tc) == (0x40, 0x180)
    body = [i for i in tc.instrs if 0x40 <= i.addr <= 0x180]
    m = sass_mix.mix(body)
    assert m.instructions == 12  # the NOP does not count
    assert (m.mma, m.ffma, m.shared_loads, m.ldsm, m.global_loads) == (4, 0, 2, 2, 1)
    assert (m.integer, m.barriers) == (3, 1)  # IADD3, UIADD3, ISETP
    # A loop entered at its bottom (the compiler's rotated while loop) still counts.
    assert sass_mix.main_loop(fns["fp_kernel"]) == (0x20, 0x80)
    assert sass_mix.mix(i for i in fns["fp_kernel"].instrs if 0x20 <= i.addr <= 0x80).ffma == 3


class _Res:
    """Stands in for resources.KernelResources."""

    def __init__(self, registers: int, spills: int, blocks: int | None, warps: int) -> None:
        self.registers, self.spill_stores, self.spill_loads = registers, spills, 0
        self.threads = 128 if blocks is not None else None
        self.blocks_per_sm, self.warps_per_sm = blocks, warps


def test_targets(sass_mix: types.ModuleType) -> None:
    fns = sass_mix.parse_sass(LISTING)
    tc = sass_mix.analyze_function(fns["tc_kernel"], "m", "tc_conv<x>", _Res(96, 0, 2, 8))
    assert tc.kind == "tensor core" and tc.misses == []  # 4 / 12 MMA: 1/3
    assert tc.to_dict()["instructions_per_op"] == 3.0
    fp = sass_mix.analyze_function(fns["fp_kernel"], "m", "gemm<float>", _Res(255, 8, 1, 4))
    assert fp.kind == "fp32"
    assert fp.misses == [
        "FFMA 43% of the loop < 75%",  # 3 of 7
        "spills 8 B",
        "1 block(s), 4 warps per SM",
    ]
    text = sass_mix.table([tc, fp])
    assert "tc_conv<x>" in text and "spills 8 B" in text


def test_warpgroup_mma_work_per_instruction(sass_mix: types.ModuleType) -> None:
    """MMA shapes count their multiply-adds per warp (a warpgroup MMA a quarter of its
    warpgroup's), and a loop of HGMMA meets the tensor-core target by work per
    instruction: a third of a loop of HMMA.16816's 2048."""
    shapes = ("HMMA.16816.F32", "HMMA.1688.F32.TF32", "DMMA.884", "HGMMA.64x128x16.F32",
              "FFMA", "HMMA.F32")  # fmt: skip
    assert [sass_mix.mma_macs(o) for o in shapes] == [2048, 1024, 256, 32768, 0, 0]

    def loop(hgmma: int, others: int):
        body = [sass_mix.Instr(16 * i, "HGMMA.64x64x16.F32") for i in range(hgmma)]
        body += [sass_mix.Instr(16 * (hgmma + i), "IMAD") for i in range(others)]
        return sass_mix.mix(body)

    def misses(m) -> list[str]:
        row = sass_mix.Row("m", "k", "s", "tensor core", 96, 0, 256, 2, 16, (0, 1), m)
        return sass_mix.check_targets(row)

    # The parser keeps a warpgroup MMA's whole shape (lower-case x included).
    listing = (".section .text.k,\"ax\",@progbits\n"
               "  /*0790*/  HGMMA.64x128x16.F32 R24, gdesc[UR12], R24, gsb0 ;\n")  # fmt: skip
    (ins,) = sass_mix.parse_sass(listing)["k"].instrs
    assert ins.opcode == "HGMMA.64x128x16.F32" and sass_mix.mma_macs(ins.opcode) == 32768
    assert loop(4, 96).mma_macs == 4 * 16384
    assert misses(loop(4, 90)) == []  # 65536 / 94: 697 per instruction
    assert misses(loop(4, 96)) == ["655 MMA multiply-adds per instruction < 683"]


def test_kernel_selection(sass_mix: types.ModuleType) -> None:
    assert sass_mix.is_gemm_kernel("implicit_gemm<float, false, 128, 128, 8, 8, 8>")
    assert sass_mix.is_gemm_kernel("implicit_precomp_gemm<__half, true, 64, 64, 8, 4, 4>")
    assert sass_mix.is_gemm_kernel("tc_conv_fwd<__half, 128, 128, 32, 64, 64, 4, 8>")
    assert sass_mix.is_gemm_kernel("bwd_data_igemm<float, false, 64, 64, 4, 4>")
    assert sass_mix.is_gemm_kernel("wino_batched_gemm")
    assert not sass_mix.is_gemm_kernel("implicit_gemm_taps<true>")
    assert not sass_mix.is_gemm_kernel("tc_conv_fwd_splitk_epilogue<__half>")
    assert not sass_mix.is_gemm_kernel("bwd_filter_direct<float, false>")
    assert not sass_mix.is_gemm_kernel("act_fwd_contig<float, 4>")


def test_end_to_end_on_the_wmma_selftest(sass_mix: types.ModuleType) -> None:
    tool = sass_mix.find_nvdisasm()
    if tool is None:
        pytest.skip(sass_mix.MISSING)
    from cudnnlite.errors import NotSupportedError
    from cudnnlite.runtime import cuda_toolkit
    from cudnnlite.runtime.kernel import ModuleSpec

    try:
        cuda_toolkit.find_nvrtc()
    except NotSupportedError as exc:
        pytest.skip(f"NVRTC not available: {exc}")
    spec = ModuleSpec.make("selftest/wmma_selftest.cu", ["wmma_gemm_fp16"])
    rows = {r.kernel: r for r in sass_mix.analyze_module(spec, "sm_90", tool, None)}
    staged = rows["wmma_staged_fp16"]  # its K loop: loads, a barrier, HMMAs
    assert staged.kind == "tensor core" and staged.loop is not None
    assert staged.mix.mma > 0 and staged.mix.barriers >= 1 and staged.registers > 0
    assert staged.mix.instructions > staged.mix.mma
    assert "block size unknown" in staged.misses  # the self-test has no launch bounds


def test_double_cuda_core_kernels_count_dfma(sass_mix: types.ModuleType) -> None:
    """A kernel of DFMAs (a float64 CUDA-core GEMM) is an "fp64" row: its main loop holds the
    most DFMA, its figures are per DFMA, and it is held to the CUDA-core FMA target."""
    listing = LISTING.replace("fp_kernel", "dp_kernel").replace("FFMA", "DFMA")
    fn = sass_mix.parse_sass(listing)["dp_kernel"]
    assert sass_mix.kind_of(fn) == "fp64" and sass_mix.main_loop(fn) == (0x20, 0x80)
    row = sass_mix.analyze_function(fn, "m", "gemm<double>", _Res(128, 0, 2, 8))
    assert (row.mix.dfma, row.mix.ffma, row.ops) == (3, 0, 3)
    d = row.to_dict()
    assert d["per_op"] == "DFMA" and abs(d["dfma_fraction"] - 3 / 7) < 1e-12
    assert row.misses == ["DFMA 43% of the loop < 75%"]
    assert "fp64" in sass_mix.table([row])


# A loop whose stage refill (two LDGSTS) may be skipped (the pipeline's last tiles) and
# whose second copy has a fast and a slow address path: the hot path refills the stage on
# the fast path; the loop's mix counts every instruction.
BRANCHY = """\
\t.section\t.text.br_kernel,"ax",@progbits
br_kernel:
        /*0000*/                   S2R R0, SR_TID.X ;
.L_x_1:
        /*0010*/                   BAR.SYNC.DEFER_BLOCKING 0x0 ;
        /*0020*/              @!P0 BRA `(.L_x_4) ;
        /*0030*/                   LDGSTS.E.BYPASS.128 [R3], desc[UR4][R4.64] ;
        /*0040*/                   ISETP.GT.AND P1, PT, R6, R7, PT ;
        /*0050*/               @P1 BRA `(.L_x_2) ;
        /*0060*/                   IADD3 R8, R8, 0x10, RZ ;
        /*0070*/                   BRA `(.L_x_3) ;
.L_x_2:
        /*0080*/                   IMAD R8, R9, R10, R11 ;
        /*0090*/                   IMAD R8, R8, R12, R13 ;
        /*00a0*/                   IMAD R8, R8, R14, R15 ;
        /*00b0*/                   SEL R8, R8, RZ, P2 ;
.L_x_3:
        /*00c0*/                   LDGSTS.E.BYPASS.128 [R3+0x800], desc[UR4][R8.64] ;
.L_x_4:
        /*00d0*/                   LDSM.16.M88.4 R16, [R5] ;
        /*00e0*/                   HMMA.16816.F32 R20, R16, R18, R20 ;
        /*00f0*/                   NOP ;
        /*0100*/                   HMMA.16816.F32 R24, R16, R19, R24 ;
        /*0110*/                   ISETP.NE.AND P0, PT, R5, R7, PT ;
        /*0120*/               @P0 BRA `(.L_x_1) ;
        /*0130*/                   EXIT ;
"""


def test_hot_path_takes_the_refill_and_the_fast_branch(sass_mix: types.ModuleType) -> None:
    fn = sass_mix.parse_sass(BRANCHY)["br_kernel"]
    assert [i.predicated for i in fn.instrs if i.base == "BRA"] == [True, True, False, True]
    span = sass_mix.main_loop(fn)
    assert span == (0x10, 0x120)
    hot = [i.addr for i in sass_mix.hot_path(fn, span)]
    assert hot == [0x10, 0x20, 0x30, 0x40, 0x50, 0x60, 0x70, 0xC0, 0xD0, 0xE0, 0xF0, 0x100,
                   0x110, 0x120]  # fmt: skip
    row = sass_mix.analyze_function(fn, "m", "tc_conv<y>", _Res(96, 0, 2, 8))
    assert (row.mix.instructions, row.hot.instructions) == (17, 13)  # the NOP left out
    d = row.to_dict()
    assert d["hot_instructions"] == 13 and abs(d["hot_math_fraction"] - 2 / 13) < 1e-12
    # Without a branch the hot path is the whole loop.
    tc = sass_mix.parse_sass(LISTING)["tc_kernel"]
    assert sass_mix.hot_path(tc, (0x40, 0x180)) == [i for i in tc.instrs if 0x40 <= i.addr <= 0x180]
