// Test harness for cudnnlite/runtime/emulator/include/emu_types.h.
// Built by tests/emulator/conftest.py into a shared library and driven through ctypes:
// each extern "C" function runs one family of emu_types.h functions over arrays, and the
// Python side compares with NumPy / exact references.  Compile-time properties (vector type
// layout, triviality of the 16-bit types, min/max overload resolution) are static_asserts here.
#include "emu_types.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <thread>
#include <type_traits>
#include <vector>

// ---- Compile-time checks ------------------------------------------------------------------------
#define CHECK_LAYOUT(T, S, A) \
    static_assert(sizeof(T) == (S), #T " size"); static_assert(alignof(T) == (A), #T " align");
CHECK_LAYOUT(char1, 1, 1) CHECK_LAYOUT(char2, 2, 2) CHECK_LAYOUT(char3, 3, 1) CHECK_LAYOUT(char4, 4, 4)
CHECK_LAYOUT(uchar1, 1, 1) CHECK_LAYOUT(uchar2, 2, 2) CHECK_LAYOUT(uchar3, 3, 1) CHECK_LAYOUT(uchar4, 4, 4)
CHECK_LAYOUT(short1, 2, 2) CHECK_LAYOUT(short2, 4, 4) CHECK_LAYOUT(short3, 6, 2) CHECK_LAYOUT(short4, 8, 8)
CHECK_LAYOUT(ushort1, 2, 2) CHECK_LAYOUT(ushort2, 4, 4) CHECK_LAYOUT(ushort3, 6, 2) CHECK_LAYOUT(ushort4, 8, 8)
CHECK_LAYOUT(int1, 4, 4) CHECK_LAYOUT(int2, 8, 8) CHECK_LAYOUT(int3, 12, 4) CHECK_LAYOUT(int4, 16, 16)
CHECK_LAYOUT(uint1, 4, 4) CHECK_LAYOUT(uint2, 8, 8) CHECK_LAYOUT(uint3, 12, 4) CHECK_LAYOUT(uint4, 16, 16)
CHECK_LAYOUT(long1, 8, 8) CHECK_LAYOUT(long2, 16, 16) CHECK_LAYOUT(long3, 24, 8) CHECK_LAYOUT(long4, 32, 16)
CHECK_LAYOUT(ulong1, 8, 8) CHECK_LAYOUT(ulong2, 16, 16) CHECK_LAYOUT(ulong3, 24, 8) CHECK_LAYOUT(ulong4, 32, 16)
CHECK_LAYOUT(longlong1, 8, 8) CHECK_LAYOUT(longlong2, 16, 16) CHECK_LAYOUT(longlong3, 24, 8)
CHECK_LAYOUT(longlong4, 32, 16) CHECK_LAYOUT(ulonglong2, 16, 16) CHECK_LAYOUT(ulonglong4_32a, 32, 32)
CHECK_LAYOUT(float1, 4, 4) CHECK_LAYOUT(float2, 8, 8) CHECK_LAYOUT(float3, 12, 4) CHECK_LAYOUT(float4, 16, 16)
CHECK_LAYOUT(double1, 8, 8) CHECK_LAYOUT(double2, 16, 16) CHECK_LAYOUT(double3, 24, 8) CHECK_LAYOUT(double4, 32, 16)
CHECK_LAYOUT(double4_32a, 32, 32) CHECK_LAYOUT(dim3, 12, 4)
CHECK_LAYOUT(__half, 2, 2) CHECK_LAYOUT(__half2, 4, 4) CHECK_LAYOUT(__nv_bfloat16, 2, 2)
CHECK_LAYOUT(__nv_bfloat162, 4, 4) CHECK_LAYOUT(__half_raw, 2, 2) CHECK_LAYOUT(__half2_raw, 4, 4)

// Shared-memory arrays of the 16-bit types are declared without initialisers.
static_assert(std::is_trivially_default_constructible<__half>::value, "");
static_assert(std::is_trivially_default_constructible<__half2>::value, "");
static_assert(std::is_trivially_default_constructible<__nv_bfloat16>::value, "");
static_assert(std::is_trivially_default_constructible<__nv_bfloat162>::value, "");
static_assert(std::is_trivially_copyable<__half>::value && std::is_trivially_copyable<__half2>::value, "");
static_assert(std::is_trivially_copyable<__nv_bfloat16>::value && std::is_trivially_copyable<__nv_bfloat162>::value, "");
static_assert(std::is_same<half, __half>::value && std::is_same<nv_bfloat16, __nv_bfloat16>::value, "");
static_assert(std::is_same<nv_bfloat162, __nv_bfloat162>::value && std::is_same<half2, __half2>::value, "");

// CUDA's min/max overload set, including the mixed signed/unsigned pairs.
static_assert(std::is_same<decltype(min(1, 2)), int>::value, "");
static_assert(std::is_same<decltype(min(1, 2u)), unsigned>::value, "");
static_assert(std::is_same<decltype(max(1u, 2)), unsigned>::value, "");
static_assert(std::is_same<decltype(max(1L, 2L)), long>::value, "");
static_assert(std::is_same<decltype(max(1L, 2UL)), unsigned long>::value, "");
static_assert(std::is_same<decltype(min(1LL, 2LL)), long long>::value, "");
static_assert(std::is_same<decltype(min(1LL, 2ULL)), unsigned long long>::value, "");
static_assert(std::is_same<decltype(max(1ULL, 2ULL)), unsigned long long>::value, "");
static_assert(std::is_same<decltype(min(1.0f, 2.0f)), float>::value, "");
static_assert(std::is_same<decltype(min(1.0f, 2.0)), double>::value, "");
static_assert(std::is_same<decltype(max(1.0, 2.0f)), double>::value, "");
static_assert(std::is_same<decltype(max(1.0, 2.0)), double>::value, "");
static_assert(min(-1, 1u) == 1u, "mixed min compares as unsigned, as CUDA");
static_assert(max(3, 7) == 7 && umin(3u, 7u) == 3u && llmax(-3LL, 7LL) == 7 && ullmin(3ULL, 7ULL) == 3ULL, "");

// std::min/std::max keep working next to the global overloads, with and without using-directives.
static int std_minmax_ok() {
    int r = std::min(3, 4) + std::max(1, 2);                  // 5
    {
        using namespace std;
        r += min(10, 20);                                     // ::min(int, int) preferred: 10
        r += static_cast<int>(max(1.5f, 2.5f));               // ::max(float, float): 2
    }
    return r == 17;
}

// The 16-bit types behave like CUDA's in ordinary kernel code.
static int half_usage_ok() {
    __half smem[4];                                           // no initialiser, as in __shared__
    for (int i = 0; i < 4; ++i) smem[i] = __float2half(static_cast<float>(i));
    __half h = 1.5f;
    h = h * h + h;                                            // 1.5*1.5 + 1.5 = 3.75
    h += smem[2];                                             // 5.75
    float f = h;
    int i = h;                                                // truncates: 5
    __half k = 3;                                             // integral constructor
    __half2 v = __floats2half2_rn(1.0f, 2.0f);
    v = v * v + v;                                            // (2, 6)
    ++v;                                                      // (3, 7)
    __nv_bfloat16 b = 2.0f;
    b = b * b - b;                                            // 2
    __nv_bfloat162 bv = __floats2bfloat162_rn(1.0f, 3.0f);
    bv += bv;                                                 // (2, 6)
    // half2 comparison operators are "both lanes" (__hbeq2, __hbneu2, ...), as in CUDA
    const bool cmp = (h > k) && (k == __float2half(3.0f)) && !(h < k) && !(v != __half2(k, k)) &&
                     (v != __half2(h, h)) && (v < __half2(h, h + h)) && !(v < __half2(h, k));
    __half conv(b);                                           // explicit bf16 -> half
    __nv_bfloat16 conv2(k);                                   // explicit half -> bf16
    return f == 5.75f && i == 5 && __low2float(v) == 3.0f && __high2float(v) == 7.0f &&
           __bfloat162float(b) == 2.0f && __low2float(bv) == 2.0f && __high2float(bv) == 6.0f && cmp &&
           __half2float(conv) == 2.0f && __bfloat162float(conv2) == 3.0f && static_cast<bool>(h) &&
           !static_cast<bool>(__float2half(-0.0f));
}

static int dim3_ok() {
    dim3 a;
    dim3 b(4);
    dim3 c(2, 3);
    uint3 u = make_uint3(5, 6, 7);
    dim3 d(u);
    uint3 back = c;
    return a.x == 1 && a.y == 1 && a.z == 1 && b.x == 4 && b.y == 1 && c.y == 3 && c.z == 1 && d.z == 7 &&
           back.x == 2 && back.y == 3 && back.z == 1 && make_float4(1, 2, 3, 4).w == 4.0f &&
           make_double2(1, 2).y == 2.0 && make_char4(1, 2, 3, -4).w == -4 && make_longlong2(1, 2).y == 2;
}


extern "C" int compile_checks() { return std_minmax_ok() && half_usage_ok() && dim3_ok(); }

// ---- __half ----------------------------------------------------------------------------------
extern "C" void half_to_float(const uint16_t* in, float* out, int64_t n) {
    for (int64_t i = 0; i < n; ++i) out[i] = __half2float(__ushort_as_half(in[i]));
}
// mode 0..3 = rn, rz, rd, ru; 4 = __float2half; 5 = constructor; 6 = __float2half2_rn low lane
extern "C" void float_to_half(const float* in, uint16_t* out, int64_t n, int mode) {
    for (int64_t i = 0; i < n; ++i) {
        __half h;
        switch (mode) {
            case 0: h = __float2half_rn(in[i]); break;
            case 1: h = __float2half_rz(in[i]); break;
            case 2: h = __float2half_rd(in[i]); break;
            case 3: h = __float2half_ru(in[i]); break;
            case 4: h = __float2half(in[i]); break;
            case 5: h = __half(in[i]); break;
            default: h = __low2half(__float2half2_rn(in[i])); break;
        }
        out[i] = __half_as_ushort(h);
    }
}
extern "C" void double_to_half(const double* in, uint16_t* out, int64_t n) {
    for (int64_t i = 0; i < n; ++i) out[i] = __half_as_ushort(__double2half(in[i]));
}
// op: 0 add 1 sub 2 mul 3 div (intrinsics), 4..7 the same through operators, 8 max 9 min
// 10 max_nan 11 min_nan 12 add_sat 13 hadd2 (low lane) 14 hmul2 (high lane)
// comparisons (0/1 in out): 20 eq 21 ne 22 lt 23 le 24 gt 25 ge 26 equ 27 neu 28 ltu 29 leu
// 30 gtu 31 geu 32 operator!=
template <class H, class H2>
static void binop16(const uint16_t* a, const uint16_t* b, uint16_t* out, int64_t n, int op) {
    auto mk = [](uint16_t x) { H h; h.__x = x; return h; };
    for (int64_t i = 0; i < n; ++i) {
        const H x = mk(a[i]), y = mk(b[i]);
        H r = x;
        int c = -1;
        switch (op) {
            case 0: r = __hadd(x, y); break;
            case 1: r = __hsub(x, y); break;
            case 2: r = __hmul(x, y); break;
            case 3: r = __hdiv(x, y); break;
            case 4: r = x + y; break;
            case 5: r = x - y; break;
            case 6: r = x * y; break;
            case 7: r = x / y; break;
            case 8: r = __hmax(x, y); break;
            case 9: r = __hmin(x, y); break;
            case 10: r = __hmax_nan(x, y); break;
            case 11: r = __hmin_nan(x, y); break;
            case 12: r = __hadd_sat(x, y); break;
            case 13: r = __hadd2(H2(x, y), H2(y, x)).x; break;
            case 14: r = __hmul2(H2(y, x), H2(x, y)).y; break;
            case 20: c = __heq(x, y); break;
            case 21: c = __hne(x, y); break;
            case 22: c = __hlt(x, y); break;
            case 23: c = __hle(x, y); break;
            case 24: c = __hgt(x, y); break;
            case 25: c = __hge(x, y); break;
            case 26: c = __hequ(x, y); break;
            case 27: c = __hneu(x, y); break;
            case 28: c = __hltu(x, y); break;
            case 29: c = __hleu(x, y); break;
            case 30: c = __hgtu(x, y); break;
            case 31: c = __hgeu(x, y); break;
            case 32: c = (x != y); break;
        }
        out[i] = c >= 0 ? static_cast<uint16_t>(c) : r.__x;
    }
}
inline __half2 __halves2half2_any(__half a, __half b) { return __halves2half2(a, b); }
inline __nv_bfloat162 __halves2half2_any(__nv_bfloat16 a, __nv_bfloat16 b) { return __halves2bfloat162(a, b); }
template <class H>
static void fma16(const uint16_t* a, const uint16_t* b, const uint16_t* c, uint16_t* out, int64_t n, int op) {
    auto mk = [](uint16_t x) { H h; h.__x = x; return h; };
    for (int64_t i = 0; i < n; ++i) {
        const H x = mk(a[i]), y = mk(b[i]), z = mk(c[i]);
        H r;
        switch (op) {
            case 0: r = __hfma(x, y, z); break;
            case 1: r = __hfma_relu(x, y, z); break;
            case 2: r = __hfma_sat(x, y, z); break;
            default: r = __hfma2(__halves2half2_any(x, z), __halves2half2_any(y, y), __halves2half2_any(z, x)).x; break;
        }
        out[i] = r.__x;
    }
}


extern "C" void half_binop(const uint16_t* a, const uint16_t* b, uint16_t* out, int64_t n, int op) {
    binop16<__half, __half2>(a, b, out, n, op);
}
extern "C" void half_fma(const uint16_t* a, const uint16_t* b, const uint16_t* c, uint16_t* out, int64_t n, int op) {
    fma16<__half>(a, b, c, out, n, op);
}
// op: 0 hexp 1 hlog 2 hsqrt 3 hrsqrt 4 htanh 5 hrcp 6 hneg 7 habs 8 hisnan 9 hisinf 10 hfloor 11 hrint
// 12 h2exp2 (low lane)
template <class H, class H2>
static void unary16(const uint16_t* a, uint16_t* out, int64_t n, int op) {
    for (int64_t i = 0; i < n; ++i) {
        H x;
        x.__x = a[i];
        H r = x;
        int c = -1000;
        switch (op) {
            case 0: r = hexp(x); break;
            case 1: r = hlog(x); break;
            case 2: r = hsqrt(x); break;
            case 3: r = hrsqrt(x); break;
            case 4: r = htanh(x); break;
            case 5: r = hrcp(x); break;
            case 6: r = __hneg(x); break;
            case 7: r = __habs(x); break;
            case 8: c = __hisnan(x); break;
            case 9: c = __hisinf(x); break;
            case 10: r = hfloor(x); break;
            case 11: r = hrint(x); break;
            case 12: r = h2exp2(H2(x, x)).x; break;
        }
        out[i] = c != -1000 ? static_cast<uint16_t>(static_cast<int16_t>(c)) : r.__x;
    }
}
extern "C" void half_unary(const uint16_t* a, uint16_t* out, int64_t n, int op) { unary16<__half, __half2>(a, out, n, op); }

// ---- __nv_bfloat16 ---------------------------------------------------------------------------
extern "C" void bf16_to_float(const uint16_t* in, float* out, int64_t n) {
    for (int64_t i = 0; i < n; ++i) out[i] = __bfloat162float(__ushort_as_bfloat16(in[i]));
}
// mode 0..3 = rn, rz, rd, ru; 4 = __float2bfloat16; 5 = constructor; 6 = __floats2bfloat162_rn high lane
extern "C" void float_to_bf16(const float* in, uint16_t* out, int64_t n, int mode) {
    for (int64_t i = 0; i < n; ++i) {
        __nv_bfloat16 h;
        switch (mode) {
            case 0: h = __float2bfloat16_rn(in[i]); break;
            case 1: h = __float2bfloat16_rz(in[i]); break;
            case 2: h = __float2bfloat16_rd(in[i]); break;
            case 3: h = __float2bfloat16_ru(in[i]); break;
            case 4: h = __float2bfloat16(in[i]); break;
            case 5: h = __nv_bfloat16(in[i]); break;
            default: h = __high2bfloat16(__floats2bfloat162_rn(0.0f, in[i])); break;
        }
        out[i] = __bfloat16_as_ushort(h);
    }
}
extern "C" void double_to_bf16(const double* in, uint16_t* out, int64_t n) {
    for (int64_t i = 0; i < n; ++i) out[i] = __bfloat16_as_ushort(__double2bfloat16(in[i]));
}
extern "C" void bf16_binop(const uint16_t* a, const uint16_t* b, uint16_t* out, int64_t n, int op) {
    binop16<__nv_bfloat16, __nv_bfloat162>(a, b, out, n, op);
}
extern "C" void bf16_fma(const uint16_t* a, const uint16_t* b, const uint16_t* c, uint16_t* out, int64_t n, int op) {
    fma16<__nv_bfloat16>(a, b, c, out, n, op);
}
extern "C" void bf16_unary(const uint16_t* a, uint16_t* out, int64_t n, int op) {
    unary16<__nv_bfloat16, __nv_bfloat162>(a, out, n, op);
}

// ---- integer <-> 16-bit conversions --------------------------------------------------------------
// fmt 0 = half, 1 = bf16; src 0 int, 1 unsigned, 2 long long, 3 unsigned long long (value in
// int64 bits); mode 0..3 = rn, rz, rd, ru.
extern "C" void int_to_16(const int64_t* in, uint16_t* out, int64_t n, int fmt, int src, int mode) {
    for (int64_t i = 0; i < n; ++i) {
        const int64_t v = in[i];
        uint16_t r = 0;
#define CONV(PFX, SUF, T, H) r = H(PFX##SUF(static_cast<T>(v)))
#define MODES(PFX, T, H)                                                        \
    switch (mode) {                                                             \
        case 0: CONV(PFX, _rn, T, H); break;                                    \
        case 1: CONV(PFX, _rz, T, H); break;                                    \
        case 2: CONV(PFX, _rd, T, H); break;                                    \
        default: CONV(PFX, _ru, T, H); break;                                   \
    }
        if (fmt == 0) {
            if (src == 0) { MODES(__int2half, int, __half_as_ushort) }
            else if (src == 1) { MODES(__uint2half, unsigned, __half_as_ushort) }
            else if (src == 2) { MODES(__ll2half, long long, __half_as_ushort) }
            else { MODES(__ull2half, unsigned long long, __half_as_ushort) }
        } else {
            if (src == 0) { MODES(__int2bfloat16, int, __bfloat16_as_ushort) }
            else if (src == 1) { MODES(__uint2bfloat16, unsigned, __bfloat16_as_ushort) }
            else if (src == 2) { MODES(__ll2bfloat16, long long, __bfloat16_as_ushort) }
            else { MODES(__ull2bfloat16, unsigned long long, __bfloat16_as_ushort) }
        }
        out[i] = r;
    }
}
// 16-bit -> integer: dst 0 int, 1 unsigned, 2 short, 3 long long, 4 unsigned long long,
// 5 operator int(), 6 __half2char_rz / __bfloat162char_rz.
extern "C" void from16_to_int(const uint16_t* in, int64_t* out, int64_t n, int fmt, int dst, int mode) {
    for (int64_t i = 0; i < n; ++i) {
        int64_t r = 0;
        if (fmt == 0) {
            const __half h = __ushort_as_half(in[i]);
#define TOI(NAME, T) switch (mode) { case 0: r = (int64_t)NAME##_rn(h); break; case 1: r = (int64_t)NAME##_rz(h); break; \
                         case 2: r = (int64_t)NAME##_rd(h); break; default: r = (int64_t)NAME##_ru(h); break; }
            if (dst == 0) { TOI(__half2int, int) }
            else if (dst == 1) { TOI(__half2uint, unsigned) }
            else if (dst == 2) { TOI(__half2short, short) }
            else if (dst == 3) { TOI(__half2ll, long long) }
            else if (dst == 4) { TOI(__half2ull, unsigned long long) }
            else if (dst == 5) { r = static_cast<int>(h); }
            else { r = __half2char_rz(h); }
        } else {
            const __nv_bfloat16 h = __ushort_as_bfloat16(in[i]);
            if (dst == 0) { TOI(__bfloat162int, int) }
            else if (dst == 1) { TOI(__bfloat162uint, unsigned) }
            else if (dst == 2) { TOI(__bfloat162short, short) }
            else if (dst == 3) { TOI(__bfloat162ll, long long) }
            else if (dst == 4) { TOI(__bfloat162ull, unsigned long long) }
            else if (dst == 5) { r = static_cast<int>(h); }
            else { r = __bfloat162char_rz(h); }
        }
        out[i] = r;
    }
}

// ---- float / double -> integer ---------------------------------------------------------------------
// dst 0 int, 1 unsigned, 2 long long, 3 unsigned long long; mode 0..3.
extern "C" void float_to_int(const float* in, int64_t* out, int64_t n, int dst, int mode) {
    for (int64_t i = 0; i < n; ++i) {
        const float h = in[i];
        int64_t r = 0;
        if (dst == 0) { TOI(__float2int, int) }
        else if (dst == 1) { TOI(__float2uint, unsigned) }
        else if (dst == 2) { TOI(__float2ll, long long) }
        else { TOI(__float2ull, unsigned long long) }
        out[i] = r;
    }
}
extern "C" void double_to_int(const double* in, int64_t* out, int64_t n, int dst, int mode) {
    for (int64_t i = 0; i < n; ++i) {
        const double h = in[i];
        int64_t r = 0;
        if (dst == 0) { TOI(__double2int, int) }
        else if (dst == 1) { TOI(__double2uint, unsigned) }
        else if (dst == 2) { TOI(__double2ll, long long) }
        else { TOI(__double2ull, unsigned long long) }
        out[i] = r;
    }
}
// integer -> float/double with modes: src 0 int, 1 unsigned, 2 ll, 3 ull -> float; 4 ll, 5 ull -> double
extern "C" void int_to_fp(const int64_t* in, double* out, int64_t n, int src, int mode) {
    for (int64_t i = 0; i < n; ++i) {
        const int64_t v = in[i];
        double r = 0;
#define TOF(NAME, T) switch (mode) { case 0: r = NAME##_rn((T)v); break; case 1: r = NAME##_rz((T)v); break; \
                         case 2: r = NAME##_rd((T)v); break; default: r = NAME##_ru((T)v); break; }
        if (src == 0) { TOF(__int2float, int) }
        else if (src == 1) { TOF(__uint2float, unsigned) }
        else if (src == 2) { TOF(__ll2float, long long) }
        else if (src == 3) { TOF(__ull2float, unsigned long long) }
        else if (src == 4) { TOF(__ll2double, long long) }
        else { TOF(__ull2double, unsigned long long) }
        out[i] = r;
    }
}

// ---- directed-rounding float / double arithmetic ------------------------------------------------
// op: 0 add 1 sub 2 mul 3 div 4 sqrt(a) 5 fma 6 rcp(a); mode 0..3
extern "C" void f32_directed(const float* a, const float* b, const float* c, float* out, int64_t n, int op, int mode) {
    for (int64_t i = 0; i < n; ++i) {
        const float x = a[i], y = b[i], z = c[i];
        float r = 0;
#define DIR(NAME, ...) switch (mode) { case 0: r = NAME##_rn(__VA_ARGS__); break; case 1: r = NAME##_rz(__VA_ARGS__); break; \
                           case 2: r = NAME##_rd(__VA_ARGS__); break; default: r = NAME##_ru(__VA_ARGS__); break; }
        switch (op) {
            case 0: DIR(__fadd, x, y) break;
            case 1: DIR(__fsub, x, y) break;
            case 2: DIR(__fmul, x, y) break;
            case 3: DIR(__fdiv, x, y) break;
            case 4: DIR(__fsqrt, x) break;
            case 5: DIR(__fmaf, x, y, z) break;
            default: DIR(__frcp, x) break;
        }
        out[i] = r;
    }
}
extern "C" void f64_directed(const double* a, const double* b, const double* c, double* out, int64_t n, int op, int mode) {
    for (int64_t i = 0; i < n; ++i) {
        const double x = a[i], y = b[i], z = c[i];
        double r = 0;
        switch (op) {
            case 0: DIR(__dadd, x, y) break;
            case 1: DIR(__dsub, x, y) break;
            case 2: DIR(__dmul, x, y) break;
            case 3: DIR(__ddiv, x, y) break;
            case 4: DIR(__dsqrt, x) break;
            case 5: DIR(__fma, x, y, z) break;
            case 6: DIR(__drcp, x) break;
            default: { float f = 0; switch (mode) { case 0: f = __double2float_rn(x); break; case 1: f = __double2float_rz(x); break;
                       case 2: f = __double2float_rd(x); break; default: f = __double2float_ru(x); break; } r = f; } break;
        }
        out[i] = r;
    }
}
// The rounding mode is restored after every directed op.
extern "C" int rounding_mode_restored() {
    volatile float a = 1.0f, b = 3.0f;
    (void)__fdiv_ru(a, b);
    (void)__dmul_rz(1.1, 1.3);
    return fegetround() == FE_TONEAREST;
}

// ---- float / double math functions -----------------------------------------------------------
// op: 0 erfinvf 1 erfcinvf 2 normcdff 3 normcdfinvf 4 __saturatef 5 rsqrtf 6 sinpif 7 cospif
// 8 erfcxf 9 rcbrtf 10 __frsqrt_rn 11 __expf 12 __fdividef(a, 2^127) 13 __sinf 14 __powf(a, 2)
extern "C" void f32_math(const float* a, float* out, int64_t n, int op) {
    for (int64_t i = 0; i < n; ++i) {
        const float x = a[i];
        float r = 0;
        switch (op) {
            case 0: r = erfinvf(x); break;
            case 1: r = erfcinvf(x); break;
            case 2: r = normcdff(x); break;
            case 3: r = normcdfinvf(x); break;
            case 4: r = __saturatef(x); break;
            case 5: r = rsqrtf(x); break;
            case 6: r = sinpif(x); break;
            case 7: r = cospif(x); break;
            case 8: r = erfcxf(x); break;
            case 9: r = rcbrtf(x); break;
            case 10: r = __frsqrt_rn(x); break;
            case 11: r = __expf(x); break;
            case 12: r = __fdividef(x, 0x1p127f); break;
            case 13: r = __sinf(x); break;
            default: r = __powf(x, 2.0f); break;
        }
        out[i] = r;
    }
}
// op: 0 erfinv 1 erfcinv 2 normcdf 3 normcdfinv 4 sinpi 5 cospi 6 erfcx 7 rsqrt
extern "C" void f64_math(const double* a, double* out, int64_t n, int op) {
    for (int64_t i = 0; i < n; ++i) {
        const double x = a[i];
        double r = 0;
        switch (op) {
            case 0: r = erfinv(x); break;
            case 1: r = erfcinv(x); break;
            case 2: r = normcdf(x); break;
            case 3: r = normcdfinv(x); break;
            case 4: r = sinpi(x); break;
            case 5: r = cospi(x); break;
            case 6: r = erfcx(x); break;
            default: r = rsqrt(x); break;
        }
        out[i] = r;
    }
}
extern "C" void f32_norm3(const float* a, const float* b, const float* c, float* out, int64_t n) {
    for (int64_t i = 0; i < n; ++i) out[i] = norm3df(a[i], b[i], c[i]);
}

// ---- integer intrinsics ----------------------------------------------------------------------------
// op: 0 popc 1 clz 2 ffs 3 brev 4 byte_perm(a,b,c) 5 funnelshift_l 6 funnelshift_r 7 funnelshift_lc
// 8 funnelshift_rc 9 mulhi 10 umulhi 11 mul24 12 umul24 13 sad 14 usad 15 hadd 16 rhadd 17 uhadd
// 18 urhadd 19 dp4a(int) 20 dp4a(unsigned) 21 dp2a_lo(int) 22 dp2a_hi(unsigned)
extern "C" void u32_ops(const uint32_t* a, const uint32_t* b, const uint32_t* c, uint32_t* out, int64_t n, int op) {
    for (int64_t i = 0; i < n; ++i) {
        const uint32_t x = a[i], y = b[i], z = c[i];
        const int xi = static_cast<int>(x), yi = static_cast<int>(y), zi = static_cast<int>(z);
        uint32_t r = 0;
        switch (op) {
            case 0: r = __popc(x); break;
            case 1: r = __clz(xi); break;
            case 2: r = __ffs(xi); break;
            case 3: r = __brev(x); break;
            case 4: r = __byte_perm(x, y, z); break;
            case 5: r = __funnelshift_l(x, y, z); break;
            case 6: r = __funnelshift_r(x, y, z); break;
            case 7: r = __funnelshift_lc(x, y, z); break;
            case 8: r = __funnelshift_rc(x, y, z); break;
            case 9: r = __mulhi(xi, yi); break;
            case 10: r = __umulhi(x, y); break;
            case 11: r = __mul24(xi, yi); break;
            case 12: r = __umul24(x, y); break;
            case 13: r = __sad(xi, yi, z); break;
            case 14: r = __usad(x, y, z); break;
            case 15: r = __hadd(xi, yi); break;
            case 16: r = __rhadd(xi, yi); break;
            case 17: r = __uhadd(x, y); break;
            case 18: r = __urhadd(x, y); break;
            case 19: r = __dp4a(xi, yi, zi); break;
            case 20: r = __dp4a(x, y, z); break;
            case 21: r = __dp2a_lo(xi, yi, zi); break;
            default: r = __dp2a_hi(x, y, z); break;
        }
        out[i] = r;
    }
}
// op: 0 popcll 1 clzll 2 ffsll 3 brevll 4 mul64hi 5 umul64hi
extern "C" void u64_ops(const uint64_t* a, const uint64_t* b, uint64_t* out, int64_t n, int op) {
    for (int64_t i = 0; i < n; ++i) {
        const uint64_t x = a[i], y = b[i];
        uint64_t r = 0;
        switch (op) {
            case 0: r = __popcll(x); break;
            case 1: r = __clzll(static_cast<long long>(x)); break;
            case 2: r = __ffsll(static_cast<long long>(x)); break;
            case 3: r = __brevll(x); break;
            case 4: r = static_cast<uint64_t>(__mul64hi(static_cast<long long>(x), static_cast<long long>(y))); break;
            default: r = __umul64hi(x, y); break;
        }
        out[i] = r;
    }
}

// ---- atomics ----------------------------------------------------------------------------------------
// Runs nthreads OS threads hammering the atomics; writes the final values into out (see Python).
extern "C" void atomics_run(int nthreads, int iters, int64_t* out) {
    int i_add = 0, i_sub = 0, i_max = INT32_MIN, i_min = INT32_MAX, i_cas = 0, i_exch = 0;
    unsigned u_add = 0, u_inc = 0, u_dec = 0, u_or = 0, u_xor = 0, u_max = 0;
    unsigned long long ull_add = 0, ull_max = 0, ull_cas = 0;
    long long ll_min = 0;
    float f_add = 0.0f;
    double d_add = 0.0;
    __half h_add = __float2half(0.0f);
    __nv_bfloat16 b_add = __float2bfloat16(0.0f);
    __half2 h2_add = __floats2half2_rn(0.0f, 0.0f);
    unsigned short us_cas = 0;
    std::atomic<long long> exch_sum{0};
    const unsigned inc_limit = 999, dec_limit = 777;
    std::vector<std::thread> ts;
    for (int t = 0; t < nthreads; ++t) {
        ts.emplace_back([&, t] {
            long long local_exch = 0;
            for (int k = 0; k < iters; ++k) {
                atomicAdd(&i_add, 1);
                atomicSub(&i_sub, 2);
                atomicAdd_block(&u_add, 3u);
                atomicAdd_system(&ull_add, 5ull);
                atomicAdd(&f_add, 1.0f);                     // sums of small integers are exact
                atomicAdd(&d_add, 0.5);
                const int v = k * nthreads + t;
                atomicMax(&i_max, v);
                atomicMin(&i_min, -v);
                atomicMax(&u_max, static_cast<unsigned>(v));
                atomicMax(&ull_max, static_cast<unsigned long long>(v) << 33);
                atomicMin_block(&ll_min, -(static_cast<long long>(v) << 33));
                atomicInc(&u_inc, inc_limit);
                atomicDec(&u_dec, dec_limit);
                // CAS-based increments
                int old = i_cas, assumed;
                do { assumed = old; old = atomicCAS(&i_cas, assumed, assumed + 1); } while (old != assumed);
                unsigned long long o2 = ull_cas, a2;
                do { a2 = o2; o2 = atomicCAS_system(&ull_cas, a2, a2 + 7); } while (o2 != a2);
                unsigned short o3 = us_cas, a3;
                do { a3 = o3; o3 = atomicCAS(&us_cas, a3, static_cast<unsigned short>(a3 + 1)); } while (o3 != a3);
                // exchange: every value written is read back exactly once (by an exch or at the end)
                local_exch += atomicExch(&i_exch, v + 1);
                atomicXor(&u_xor, 0x5a5a5a5au);
                if (k < 100) {                               // 16-bit formats: stay in the exact-integer range
                    atomicAdd(&h_add, __float2half(1.0f));
                    atomicAdd(&h2_add, __floats2half2_rn(1.0f, 2.0f));
                }
                if (k < 8) atomicAdd(&b_add, __float2bfloat16(1.0f));
            }
            atomicOr(&u_or, 1u << (t % 32));
            exch_sum += local_exch;
        });
    }
    for (auto& th : ts) th.join();
    int64_t* o = out;
    *o++ = i_add; *o++ = i_sub; *o++ = u_add; *o++ = static_cast<int64_t>(ull_add);
    *o++ = static_cast<int64_t>(f_add); *o++ = static_cast<int64_t>(d_add * 2);
    *o++ = i_max; *o++ = i_min; *o++ = u_max; *o++ = static_cast<int64_t>(ull_max >> 33); *o++ = ll_min >> 33;
    *o++ = u_inc; *o++ = u_dec; *o++ = i_cas; *o++ = static_cast<int64_t>(ull_cas); *o++ = us_cas;
    *o++ = exch_sum.load() + i_exch; *o++ = u_or; *o++ = u_xor;
    *o++ = static_cast<int64_t>(__half2float(h_add)); *o++ = static_cast<int64_t>(__low2float(h2_add));
    *o++ = static_cast<int64_t>(__high2float(h2_add)); *o++ = static_cast<int64_t>(__bfloat162float(b_add));
}
// Single-threaded return-value and corner semantics; returns a bitmask of failed checks.
extern "C" int atomics_semantics() {
    int fail = 0, bit = 0;
    auto check = [&](bool ok) { if (!ok) fail |= 1 << bit; ++bit; };
    int i = 5;
    check(atomicAdd(&i, 3) == 5 && i == 8);
    check(atomicExch(&i, 1) == 8 && i == 1);
    check(atomicCAS(&i, 2, 9) == 1 && i == 1);             // mismatch: unchanged, returns old
    check(atomicCAS(&i, 1, 9) == 1 && i == 9);
    unsigned u = 0;
    check(atomicInc(&u, 2) == 0 && u == 1);
    atomicInc(&u, 2); check(u == 2);
    check(atomicInc(&u, 2) == 2 && u == 0);                  // wraps at val
    check(atomicDec(&u, 2) == 0 && u == 2);                  // 0 -> val
    u = 7; check(atomicDec(&u, 2) == 7 && u == 2);           // old > val -> val
    u = 0xf0; check(atomicAnd(&u, 0x3cu) == 0xf0 && u == 0x30);
    check(atomicOr(&u, 0x1u) == 0x30 && u == 0x31);
    float f = 1.5f;
    check(atomicAdd(&f, 2.25f) == 1.5f && f == 3.75f);
    check(atomicExch(&f, -2.0f) == 3.75f && f == -2.0f);
    f = 0.0f; atomicAdd(&f, 1e-40f); check(f == 0.0f);       // f32 atomic add flushes subnormals
    double d = 1e-310; atomicAdd(&d, 1e-310); check(d == 2e-310);   // f64 does not
    __half h = __float2half(1.0f);
    check(__half2float(atomicAdd(&h, __float2half(0.5f))) == 1.0f && __half2float(h) == 1.5f);
    long long ll = -5;
    check(atomicMax(&ll, -7LL) == -5 && ll == -5 && atomicMin(&ll, -7LL) == -5 && ll == -7);
    unsigned long long ux = 3;
    check(atomicXor(&ux, 1ull) == 3 && ux == 2 && atomicAnd(&ux, 0ull) == 2 && ux == 0);
    float4 v4 = make_float4(1, 2, 3, 4);
    const float4 old4 = atomicAdd(&v4, make_float4(1, 1, 1, 1));
    check(old4.x == 1 && old4.w == 4 && v4.x == 2 && v4.w == 5);
    __threadfence(); __threadfence_block(); __threadfence_system();
    return fail;
}
// __ldg & co. are plain loads/stores.
extern "C" int ldst_ok() {
    float a[2] = {1.0f, 2.0f};
    float4 v = make_float4(1, 2, 3, 4);
    __half h = __float2half(3.0f);
    float s = __ldg(&a[0]) + __ldcg(&a[1]) + __ldca(&a[0]) + __ldcs(&a[1]) + __ldlu(&a[0]) + __ldcv(&a[1]);
    __stcg(&a[0], 10.0);                                      // converts, as CUDA's typed overloads
    __stcs(&a[1], 20.0f);
    __stwb(&v, make_float4(5, 6, 7, 8));
    __stwt(&h, __float2half(4.0f));
    return s == 9.0f && a[0] == 10.0f && a[1] == 20.0f && __ldg(&v).w == 8.0f && __half2float(__ldg(&h)) == 4.0f;
}

