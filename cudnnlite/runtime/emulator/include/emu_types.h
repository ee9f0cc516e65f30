// emu_types.h -- the CUDA device language's *types, math and atomics* for the CPU emulator.
//
// cudnnlite runs the same CUDA C sources on the CPU by compiling them with g++ (C++17, x86-64)
// after the emulator's core header (cuda_emu.h), which includes this file near its top.  This
// header is self-contained: it also compiles on its own (it defines __device__, __host__ and
// __forceinline__ when nobody has), and everything here lives in the global namespace under
// CUDA's exact names, with CUDA's overload sets and semantics (sm_80+ behaviour where the
// architectures differ).  Internals live in namespace cuda_emu_detail.
//
// PROVIDES
//   * Vector types with CUDA's sizes and alignments (vector_types.h): char1-4, uchar1-4,
//     short1-4, ushort1-4, int1-4, uint1-4, long1-4, ulong1-4, longlong1-4, ulonglong1-4,
//     float1-4, double1-4 (+ the CUDA 13 *_16a / *_32a 4-vectors), make_* for each; dim3.
//   * __half / __half2 and __nv_bfloat16 / __nv_bfloat162 (+ half, half2, nv_bfloat16, ...,
//     the *_raw structs): 16-bit storage, trivially default-constructible, CUDA's converting
//     constructors/conversion operators, operators, and the cuda_fp16.h / cuda_bf16.h
//     intrinsics (conversions in all rounding modes, arithmetic incl. _rn/_sat/_relu, fma,
//     comparisons incl. unordered/bool/mask forms, min/max incl. _nan, h* math functions,
//     half2 forms).  Every operation rounds once to the 16-bit format (round-to-nearest-even),
//     as sm_80+ hardware does.
//   * Math intrinsics missing from libm (__expf, __fdividef, __saturatef, rsqrtf, rcbrtf,
//     erfinvf/erfcinvf/normcdff/normcdfinvf/erfcxf (+double), sinpif/cospif, norm3df, ...),
//     correctly rounded arithmetic in every rounding mode (__fadd_rz, __fmaf_ru, __dmul_rd, ...),
//     conversions (__float2int_rn, __ll2float_rz, ...), bit casts, integer intrinsics
//     (__popc, __clz, __ffs, __brev, __byte_perm, __funnelshift_*, __mulhi, __dp4a, ...),
//     CUDA's global min/max overload set and umin/umax/llmin/llmax/ullmin/ullmax,
//     __ldg/__ldcg/... and __stcg/... (plain loads/stores).
//   * Atomics with CUDA's overload set (+ _block/_system variants), implemented with GCC
//     __atomic builtins on plain memory (blocks run concurrently on several OS threads), and
//     __threadfence*().
//
// DELIBERATELY NOT PROVIDED (belongs to the core, cuda_emu.h): threadIdx/blockIdx/blockDim/
//   gridDim/warpSize, __syncthreads*, __syncwarp, warp shuffles/votes/match (incl. the
//   __half overloads of __shfl*_sync), __activemask, shared memory, launch, clock()/clock64(),
//   __nanosleep, __trap/assert, __align__/__launch_bounds__/__restrict__ spelling, WMMA,
//   cooperative groups.  Also left out: the SIMD-in-word video intrinsics (__vadd2, ...),
//   cyl_bessel_i0f/i1f, __fns, __prof_trigger and the like (unused by DNN kernels).
//
// Rules this file keeps (the core relies on them): only inline functions, constexpr and types;
// no thread_local or other mutable globals (the core reuses the module's TLS block as shared
// memory); nothing depends on the execution model.

#ifndef CUDNNLITE_EMU_TYPES_H
#define CUDNNLITE_EMU_TYPES_H

#ifndef __device__
#define __device__
#endif
#ifndef __host__
#define __host__
#endif
#ifndef __forceinline__
#define __forceinline__ inline __attribute__((always_inline))
#endif

#include <cmath>
#include <math.h>
#include <cstdint>
#include <cstring>
#include <cfenv>
#include <climits>
#include <type_traits>
#if defined(__F16C__)
#include <immintrin.h>
#endif

// Small always-inline helper spelling for this file only (undefined at the end).
#define _EMU_FI inline __attribute__((always_inline))

// ============================================================================================
// Internal helpers
// ============================================================================================
namespace cuda_emu_detail {

// Rounding modes of the conversion helpers.
enum : int { RN = 0, RZ = 1, RD = 2, RU = 3 };

template <class To, class From>
constexpr _EMU_FI To bitcast(const From& f) noexcept {
    static_assert(sizeof(To) == sizeof(From), "bitcast size mismatch");
    return __builtin_bit_cast(To, f);
}

// Opaque value: stops g++ from fusing a*b+c into an fma (or folding) across the barrier.
// Used by the _rn intrinsics, which CUDA documents as "never merged into an fma".
template <class T>
_EMU_FI T opaque(T v) noexcept {
#if defined(__x86_64__) || defined(__i386__)
    if constexpr (std::is_floating_point<T>::value) __asm__("" : "+x"(v));
    else __asm__("" : "+r"(v));
#elif defined(__aarch64__)
    if constexpr (std::is_floating_point<T>::value) __asm__("" : "+w"(v));
    else __asm__("" : "+r"(v));
#else
    __asm__("" : "+m"(v));
#endif
    return v;
}

// Same, but volatile and ordered against calls (fesetround) by a memory clobber.
template <class T>
_EMU_FI T pinned(T v) noexcept {
    __asm__ volatile("" : "+m"(v) : : "memory");
    return v;
}

// Runs f() with the FPU rounding mode set to mode (RZ/RD/RU), for the directed-rounding
// float/double intrinsics.  SSE arithmetic, sqrt, cvt and glibc's fma honour MXCSR; the
// pinned() barriers keep the operation between the two fesetround calls.
template <class F>
inline auto with_rounding(int mode, F f) -> decltype(f()) {
    const int fe = mode == RZ ? FE_TOWARDZERO : mode == RD ? FE_DOWNWARD : mode == RU ? FE_UPWARD
                                                                                      : FE_TONEAREST;
    const int old = fegetround();
    fesetround(fe);
    auto r = pinned(f());
    fesetround(old);
    return r;
}

// ---- 16-bit float formats -------------------------------------------------------------------
// Round a magnitude `t` (already in the target's bit layout) with 32-bit fraction `r`
// (r / 2^32 of one unit in the last place was cut off) and re-attach the sign.  A carry out of
// the mantissa bumps the exponent, and max-finite + 1 is the infinity pattern: both formats
// are laid out so that this is exactly IEEE rounding.
constexpr _EMU_FI unsigned short round16(uint32_t sign, uint32_t t, uint32_t r, int mode) noexcept {
    bool inc = false;
    if (mode == RN) inc = r > 0x80000000u || (r == 0x80000000u && (t & 1u));
    else if (mode == RU) inc = r != 0 && sign == 0;
    else if (mode == RD) inc = r != 0 && sign != 0;
    return static_cast<unsigned short>(sign | (t + (inc ? 1u : 0u)));
}

// float -> IEEE binary16 bits, any rounding mode.  NaN -> canonical 0x7fff (as CUDA).
constexpr inline unsigned short f2h(float f, int mode) noexcept {
    const uint32_t x = bitcast<uint32_t>(f);
    const uint32_t sign = (x >> 16) & 0x8000u;
    const uint32_t u = x & 0x7fffffffu;
    if (u > 0x7f800000u) return 0x7fffu;
    if (u == 0x7f800000u) return static_cast<unsigned short>(sign | 0x7c00u);
    uint32_t t = 0, r = 0;
    if (u >= 0x47800000u) {            // >= 65536: beyond max finite for every mode
        t = 0x7bffu;                   // max finite, with "more than half" cut off
        r = 0xffffffffu;
    } else if (u >= 0x38800000u) {     // normal half (>= 2^-14)
        t = (u - 0x38000000u) >> 13;
        r = u << 19;
    } else {                           // half subnormal or zero: units of 2^-24
        uint32_t e = u >> 23;
        uint32_t m = u & 0x7fffffu;
        if (e) m |= 0x800000u; else e = 1;
        const uint32_t shift = 126u - e;   // >= 14
        if (shift >= 32) {
            t = 0;
            r = shift == 32 ? m : (m ? 1u : 0u);
        } else {
            t = m >> shift;
            r = m << (32 - shift);
        }
    }
    return round16(sign, t, r, mode);
}

// float -> bfloat16 bits, any rounding mode.  NaN -> canonical 0x7fff (as CUDA).
constexpr inline unsigned short f2bf(float f, int mode) noexcept {
    const uint32_t x = bitcast<uint32_t>(f);
    const uint32_t u = x & 0x7fffffffu;
    if (u > 0x7f800000u) return 0x7fffu;
    return round16((x >> 16) & 0x8000u, u >> 16, u << 16, mode);
}

// binary16 bits -> float (exact).
constexpr inline float h2f(unsigned short h) noexcept {
    const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
    const uint32_t e = (h >> 10) & 0x1fu;
    const uint32_t m = h & 0x3ffu;
    if (e == 0x1f) return bitcast<float>(sign | 0x7f800000u | (m << 13));
    if (e == 0) {
        const float v = static_cast<float>(m) * 0x1p-24f;
        return sign ? -v : v;
    }
    return bitcast<float>(sign | ((e + 112u) << 23) | (m << 13));
}

// bfloat16 bits -> float (exact).
constexpr _EMU_FI float bf2f(unsigned short b) noexcept {
    return bitcast<float>(static_cast<uint32_t>(b) << 16);
}

// double -> float rounded to odd: truncate, and set the last bit when inexact.  Rounding the
// result once more to any format with <= 22 bits of precision, in any mode, equals rounding
// the double directly (the sticky bit survives).  Keeps NaN and the sign of zero.
inline float d2f_odd(double d) noexcept {
    const float f = static_cast<float>(d);
    if (f != f || static_cast<double>(f) == d) return f;
    uint32_t b = bitcast<uint32_t>(f);
    if (std::fabs(static_cast<double>(f)) > std::fabs(d)) b -= 1;   // step back toward zero
    return bitcast<float>(b | 1u);
}

// Magnitude m (< 2^64) rounded to P significant bits in `mode` (sign given for the directed
// modes), or, with mode == -1, rounded to odd; returned as an exactly representable double.
template <int P>
inline double round_uint(unsigned long long m, bool neg, int mode) noexcept {
    if (m == 0) return 0.0;
    const int n = 64 - __builtin_clzll(m);
    if (n <= P) return static_cast<double>(m);
    const int s = n - P;
    unsigned long long keep = m >> s;
    const unsigned long long lost = m & ((1ull << s) - 1);
    const unsigned long long half = 1ull << (s - 1);
    if (mode == -1) keep |= (lost != 0);
    else if (mode == RN) keep += (lost > half || (lost == half && (keep & 1)));
    else if (mode == RU) keep += (lost != 0 && !neg);
    else if (mode == RD) keep += (lost != 0 && neg);
    return std::ldexp(static_cast<double>(keep), s);
}
template <class I>
_EMU_FI unsigned long long magnitude(I v) noexcept {
    return v < 0 ? 0ull - static_cast<unsigned long long>(v) : static_cast<unsigned long long>(v);
}
// Integer -> float rounded to odd (see d2f_odd), as the first step to a 16-bit format.
template <class I>
inline float int2f_odd(I v) noexcept {
    const float m = static_cast<float>(round_uint<24>(magnitude(v), v < 0, -1));
    return v < 0 ? -m : m;
}
// Integer -> float/double with rounding mode (exact integer arithmetic, no fenv).
template <class F, class I>
inline F int2fp(I v, int mode) noexcept {
    constexpr int P = std::is_same<F, float>::value ? 24 : 53;
    const F m = static_cast<F>(round_uint<P>(magnitude(v), v < 0, mode));
    return v < 0 ? -m : m;
}

// Round to nearest integer, ties to even (independent of the FPU rounding mode).
_EMU_FI float rne(float v) noexcept { return __builtin_roundevenf(v); }
_EMU_FI double rne(double v) noexcept { return __builtin_roundeven(v); }

// Floating value -> integer type I with CUDA's cvt semantics: round per mode, NaN -> 0,
// out-of-range saturates.
template <class I, class F>
inline I fp2int(F v, int mode) noexcept {
    if (v != v) return 0;
    F r = mode == RN ? rne(v) : mode == RZ ? std::trunc(v)
        : mode == RD ? std::floor(v) : std::ceil(v);
    constexpr int bits = sizeof(I) * 8;
    if (std::is_signed<I>::value) {
        const F lim = static_cast<F>(1ull << (bits - 1));          // 2^(bits-1), exact
        if (r >= lim) return static_cast<I>(~0ull >> (65 - bits));    // max
        if (r < -lim) return static_cast<I>(1ull << (bits - 1));      // min (two's complement)
        return static_cast<I>(static_cast<long long>(r));
    } else {
        const F lim = static_cast<F>(1ull << (bits - 1)) * F(2);   // 2^bits, exact
        if (r >= lim) return static_cast<I>(~0ull);
        if (r < F(0)) return 0;
        return static_cast<I>(static_cast<unsigned long long>(r));
    }
}

// Error-free a*b + c for operands that are exact in double with an exact product (16-bit
// formats), rounded to odd at 53 bits, so one more rounding to the 16-bit format is a single
// rounding of the exact fma (a plain double fma could round twice for bfloat16).
inline double fma_odd(double a, double b, double c) noexcept {
    const double p = a * b;                       // exact: <= 2*11 or 2*8 significant bits
    const double s = p + c;
    const double bb = s - p;
    const double e = (p - (s - bb)) + (c - bb);   // exact error of s (TwoSum)
    if (e == 0 || s != s || std::isinf(s)) return s;
    uint64_t bits = bitcast<uint64_t>(s);
    if ((e > 0) != (s > 0)) bits -= 1;            // s overshot in magnitude: truncate
    return bitcast<double>(bits | 1u);
}

// 1 / sqrt(2) split in two doubles, for normcdf.
constexpr double kSqrtHalfHi = 0x1.6a09e667f3bcdp-1;
constexpr double kSqrtHalfLo = -0x1.bdd3413b26456p-55;
constexpr double kSqrtPi = 1.7724538509055160273;

// erfcx(x) = exp(x^2) erfc(x) in double.
inline double erfcx(double x) noexcept {
    if (x != x) return x;
    if (x < 0) {
        if (x < -26.7) return HUGE_VAL;
        const double hi = x * x, lo = std::fma(x, x, -hi);
        const double ex = std::exp(hi) * (1.0 + lo);
        return 2.0 * ex - erfcx(-x);
    }
    if (x < 12.0) {
        const double hi = x * x, lo = std::fma(x, x, -hi);
        return std::erfc(x) * std::exp(hi) * (1.0 + lo);
    }
    if (std::isinf(x)) return 0.0;
    // Asymptotic series: 1/(x sqrt(pi)) * sum (-1)^k (2k-1)!! / (2x^2)^k; tiny terms for x >= 12.
    const double w = 1.0 / (2.0 * x * x);
    double term = 1.0, sum = 1.0;
    for (int k = 1; k <= 16; ++k) {
        term *= -(2.0 * k - 1.0) * w;
        sum += term;
    }
    return sum / (x * kSqrtPi);
}

// Positive root x of erf(x) = a (0 <= a < 1), where t = 1 - a is given accurately (exact when
// a >= 0.5).  Winitzki's closed-form guess, then Newton steps in double: on erf in the centre,
// on log(erfc) in the tail (uses erfcx, so it keeps working down to t ~ 1e-308).
inline double erfinv_core(double a, double t) noexcept {
    if (a == 0) return 0.0;
    const double L = a < 0.5 ? std::log1p(-a * a) : std::log(t * (2.0 - t));   // log(1 - a^2)
    constexpr double A = 0.147;
    const double k = 2.0 / (3.14159265358979323846 * A) + 0.5 * L;
    double x = std::sqrt(std::fmax(0.0, std::sqrt(k * k - L / A) - k));
    for (int it = 0; it < 12; ++it) {
        double dx;
        if (a < 0.5) {
            dx = -(std::erf(x) - a) * (0.5 * kSqrtPi) * std::exp(x * x);
        } else {
            const double ecx = erfcx(x);
            dx = (std::log(ecx / t) - x * x) * (0.5 * kSqrtPi) * ecx;
        }
        x += dx;
        if (std::fabs(dx) <= 1e-17 * x) break;
    }
    return x;
}

inline double erfinv(double y) noexcept {
    if (y != y) return y;
    const double a = std::fabs(y);
    if (a > 1.0) return __builtin_nan("");
    if (a == 1.0) return std::copysign(HUGE_VAL, y);
    if (a == 0.0) return y;                                      // keeps -0
    return std::copysign(erfinv_core(a, 1.0 - a), y);
}
inline double erfcinv(double y) noexcept {
    if (y != y) return y;
    if (y < 0.0 || y > 2.0) return __builtin_nan("");
    if (y == 0.0) return HUGE_VAL;
    if (y == 2.0) return -HUGE_VAL;
    if (y <= 1.0) return erfinv_core(1.0 - y, y);               // erfc(x) = y, x >= 0
    return -erfinv_core(y - 1.0, 2.0 - y);                       // erfc(-x) = y
}
inline double normcdf(double x) noexcept {
    if (x != x) return x;
    // z = -x / sqrt(2) with its rounding error dz; erfc(z + dz) ~ erfc(z) - dz * erfc'(z).
    const double z = -x * kSqrtHalfHi;
    const double dz = std::fma(-x, kSqrtHalfHi, -z) + (-x) * kSqrtHalfLo;
    double r = std::erfc(z);
    if (std::isfinite(z)) r -= dz * (2.0 / kSqrtPi) * std::exp(-z * z);
    return 0.5 * r;
}

// sin(pi x), cos(pi x) with exact argument reduction: x = n/2 + f, |f| <= 1/4.
template <class F>
inline void sincospi(F x, F* s, F* c) noexcept {
    if (!std::isfinite(x)) { *s = *c = x - x; return; }      // NaN
    const F n = rne(x * F(2));                // exact
    const F f = x - n * F(0.5);                               // exact
    const int q = static_cast<int>(std::fmod(static_cast<double>(n), 4.0) + 4.0) & 3;
    const double pf = 3.14159265358979323846 * static_cast<double>(f);
    F sf, cf;
    if (std::is_same<F, float>::value) {
        sf = static_cast<F>(std::sin(pf));
        cf = static_cast<F>(std::cos(pf));
    } else {
        // Split pi so that pi*f keeps ~full double accuracy.
        const double phi = 3.141592653589793116, plo = 1.2246467991473532e-16;
        const double t = static_cast<double>(f) * phi;
        const double tl = std::fma(static_cast<double>(f), phi, -t) + static_cast<double>(f) * plo;
        const double st = std::sin(t), ct = std::cos(t);
        sf = static_cast<F>(st + tl * ct);
        cf = static_cast<F>(ct - tl * st);
    }
    F rs, rc;
    switch (q) {
        case 0: rs = sf; rc = cf; break;
        case 1: rs = cf; rc = -sf; break;
        case 2: rs = -sf; rc = -cf; break;
        default: rs = -cf; rc = sf; break;
    }
    if (rs == 0) rs = std::copysign(F(0), x);                 // sinpi(+-n) = +-0
    if (rc == 0) rc = F(0);                                   // cospi(n + 1/2) = +0
    *s = rs;
    *c = rc;
}

}  // namespace cuda_emu_detail

// ============================================================================================
// Vector types (vector_types.h): sizes and alignments as CUDA on 64-bit Linux
// ============================================================================================
#define _EMU_VEC1(T, S, A) struct A S { T x; };
#define _EMU_VEC2(T, S, A) struct A S { T x, y; };
#define _EMU_VEC3(T, S, A) struct A S { T x, y, z; };
#define _EMU_VEC4(T, S, A) struct A S { T x, y, z, w; };
#define _EMU_AL(n) __attribute__((aligned(n)))

_EMU_VEC1(signed char, char1, )           _EMU_VEC1(unsigned char, uchar1, )
_EMU_VEC2(signed char, char2, _EMU_AL(2)) _EMU_VEC2(unsigned char, uchar2, _EMU_AL(2))
_EMU_VEC3(signed char, char3, )           _EMU_VEC3(unsigned char, uchar3, )
_EMU_VEC4(signed char, char4, _EMU_AL(4)) _EMU_VEC4(unsigned char, uchar4, _EMU_AL(4))
_EMU_VEC1(short, short1, )                _EMU_VEC1(unsigned short, ushort1, )
_EMU_VEC2(short, short2, _EMU_AL(4))      _EMU_VEC2(unsigned short, ushort2, _EMU_AL(4))
_EMU_VEC3(short, short3, )                _EMU_VEC3(unsigned short, ushort3, )
_EMU_VEC4(short, short4, _EMU_AL(8))      _EMU_VEC4(unsigned short, ushort4, _EMU_AL(8))
_EMU_VEC1(int, int1, )                    _EMU_VEC1(unsigned int, uint1, )
_EMU_VEC2(int, int2, _EMU_AL(8))          _EMU_VEC2(unsigned int, uint2, _EMU_AL(8))
_EMU_VEC3(int, int3, )                    _EMU_VEC3(unsigned int, uint3, )
_EMU_VEC4(int, int4, _EMU_AL(16))         _EMU_VEC4(unsigned int, uint4, _EMU_AL(16))
_EMU_VEC1(long, long1, )                  _EMU_VEC1(unsigned long, ulong1, )
_EMU_VEC2(long, long2, _EMU_AL(2 * sizeof(long)))
_EMU_VEC2(unsigned long, ulong2, _EMU_AL(2 * sizeof(long)))
_EMU_VEC3(long, long3, )                  _EMU_VEC3(unsigned long, ulong3, )
_EMU_VEC4(long, long4, _EMU_AL(16))       _EMU_VEC4(unsigned long, ulong4, _EMU_AL(16))
_EMU_VEC4(long, long4_16a, _EMU_AL(16))   _EMU_VEC4(unsigned long, ulong4_16a, _EMU_AL(16))
_EMU_VEC4(long, long4_32a, _EMU_AL(32))   _EMU_VEC4(unsigned long, ulong4_32a, _EMU_AL(32))
_EMU_VEC1(long long, longlong1, )         _EMU_VEC1(unsigned long long, ulonglong1, )
_EMU_VEC2(long long, longlong2, _EMU_AL(16))
_EMU_VEC2(unsigned long long, ulonglong2, _EMU_AL(16))
_EMU_VEC3(long long, longlong3, )         _EMU_VEC3(unsigned long long, ulonglong3, )
_EMU_VEC4(long long, longlong4, _EMU_AL(16))
_EMU_VEC4(unsigned long long, ulonglong4, _EMU_AL(16))
_EMU_VEC4(long long, longlong4_16a, _EMU_AL(16))
_EMU_VEC4(unsigned long long, ulonglong4_16a, _EMU_AL(16))
_EMU_VEC4(long long, longlong4_32a, _EMU_AL(32))
_EMU_VEC4(unsigned long long, ulonglong4_32a, _EMU_AL(32))
_EMU_VEC1(float, float1, )                _EMU_VEC2(float, float2, _EMU_AL(8))
_EMU_VEC3(float, float3, )                _EMU_VEC4(float, float4, _EMU_AL(16))
_EMU_VEC1(double, double1, )              _EMU_VEC2(double, double2, _EMU_AL(16))
_EMU_VEC3(double, double3, )              _EMU_VEC4(double, double4, _EMU_AL(16))
_EMU_VEC4(double, double4_16a, _EMU_AL(16))
_EMU_VEC4(double, double4_32a, _EMU_AL(32))

#define _EMU_MAKE1(T, S) constexpr _EMU_FI S make_##S(T x) { return S{x}; }
#define _EMU_MAKE2(T, S) constexpr _EMU_FI S make_##S(T x, T y) { return S{x, y}; }
#define _EMU_MAKE3(T, S) constexpr _EMU_FI S make_##S(T x, T y, T z) { return S{x, y, z}; }
#define _EMU_MAKE4(T, S) constexpr _EMU_FI S make_##S(T x, T y, T z, T w) { return S{x, y, z, w}; }
#define _EMU_MAKE_ALL(T, P) _EMU_MAKE1(T, P##1) _EMU_MAKE2(T, P##2) _EMU_MAKE3(T, P##3) _EMU_MAKE4(T, P##4)
_EMU_MAKE_ALL(signed char, char)
_EMU_MAKE_ALL(unsigned char, uchar)
_EMU_MAKE_ALL(short, short)
_EMU_MAKE_ALL(unsigned short, ushort)
_EMU_MAKE_ALL(int, int)
_EMU_MAKE_ALL(unsigned int, uint)
_EMU_MAKE_ALL(long, long)
_EMU_MAKE_ALL(unsigned long, ulong)
_EMU_MAKE_ALL(long long, longlong)
_EMU_MAKE_ALL(unsigned long long, ulonglong)
_EMU_MAKE_ALL(float, float)
_EMU_MAKE_ALL(double, double)
#undef _EMU_MAKE_ALL
#undef _EMU_MAKE1
#undef _EMU_MAKE2
#undef _EMU_MAKE3
#undef _EMU_MAKE4
#undef _EMU_VEC1
#undef _EMU_VEC2
#undef _EMU_VEC3
#undef _EMU_VEC4

struct dim3 {
    unsigned int x, y, z;
    constexpr dim3(unsigned int vx = 1, unsigned int vy = 1, unsigned int vz = 1) : x(vx), y(vy), z(vz) {}
    constexpr dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}
    constexpr operator uint3() const { return uint3{x, y, z}; }
};

// ============================================================================================
// __half, __half2, __nv_bfloat16, __nv_bfloat162
// ============================================================================================
struct _EMU_AL(2) __half_raw { unsigned short x; };
struct _EMU_AL(4) __half2_raw { unsigned short x, y; };
struct _EMU_AL(2) __nv_bfloat16_raw { unsigned short x; };
struct _EMU_AL(4) __nv_bfloat162_raw { unsigned short x, y; };

struct __nv_bfloat16;

// The two 16-bit types share one shape: the storage `__x` (public here; CUDA's is protected,
// which code that compiles with nvcc cannot notice), CUDA's converting constructors (floating
// and integral, round-to-nearest) and conversion operators (integral ones truncate, saturate,
// NaN -> 0), and the raw-struct conversions.  `= default` keeps them trivial, so shared
// arrays of them can be declared without initialisers.
#define _EMU_H16_BASE(T, RAW)                                                                     \
    unsigned short __x;                                                                          \
    T() = default;                                                                               \
    constexpr T(const RAW& r) : __x(r.x) {}                                                      \
    T& operator=(const RAW& r) { __x = r.x; return *this; }                                      \
    volatile T& operator=(const RAW& r) volatile { __x = r.x; return *this; }                    \
    volatile T& operator=(const volatile RAW& r) volatile { __x = r.x; return *this; }           \
    operator RAW() const { RAW r; r.x = __x; return r; }                                         \
    operator RAW() const volatile { RAW r; r.x = __x; return r; }

#define _EMU_H16_CONVERSIONS(T, FROM_F, FROM_D, FROM_I, TO_F, TO_I)                                \
    constexpr T(float f) : __x(FROM_F(f)) {}                                                     \
    T(double d) : __x(FROM_D(d)) {}                                                              \
    T(short v) : __x(FROM_I(v)) {}                                                               \
    T(unsigned short v) : __x(FROM_I(v)) {}                                                      \
    T(int v) : __x(FROM_I(v)) {}                                                                 \
    T(unsigned int v) : __x(FROM_I(v)) {}                                                        \
    T(long v) : __x(FROM_I(v)) {}                                                                \
    T(unsigned long v) : __x(FROM_I(v)) {}                                                       \
    T(long long v) : __x(FROM_I(v)) {}                                                           \
    T(unsigned long long v) : __x(FROM_I(v)) {}                                                  \
    constexpr operator float() const { return TO_F(__x); }                                       \
    operator signed char() const { return TO_I(signed char, __x); }                              \
    operator unsigned char() const { return TO_I(unsigned char, __x); }                          \
    operator char() const { return TO_I(char, __x); }                                            \
    operator short() const { return TO_I(short, __x); }                                          \
    operator unsigned short() const { return TO_I(unsigned short, __x); }                        \
    operator int() const { return TO_I(int, __x); }                                              \
    operator unsigned int() const { return TO_I(unsigned int, __x); }                            \
    operator long() const { return TO_I(long, __x); }                                            \
    operator unsigned long() const { return TO_I(unsigned long, __x); }                          \
    operator long long() const { return TO_I(long long, __x); }                                  \
    operator unsigned long long() const { return TO_I(unsigned long long, __x); }                \
    constexpr operator bool() const { return (__x & 0x7fffu) != 0; }

#define _EMU_HALF_FROM_F(f) ::cuda_emu_detail::f2h((f), ::cuda_emu_detail::RN)
#define _EMU_HALF_FROM_D(d) ::cuda_emu_detail::f2h(::cuda_emu_detail::d2f_odd(d), ::cuda_emu_detail::RN)
#define _EMU_HALF_FROM_I(v) ::cuda_emu_detail::f2h(::cuda_emu_detail::int2f_odd(v), ::cuda_emu_detail::RN)
#define _EMU_HALF_TO_F(b) ::cuda_emu_detail::h2f(b)
#define _EMU_HALF_TO_I(I, b) ::cuda_emu_detail::fp2int<I>(::cuda_emu_detail::h2f(b), ::cuda_emu_detail::RZ)
#define _EMU_BF16_FROM_F(f) ::cuda_emu_detail::f2bf((f), ::cuda_emu_detail::RN)
#define _EMU_BF16_FROM_D(d) ::cuda_emu_detail::f2bf(::cuda_emu_detail::d2f_odd(d), ::cuda_emu_detail::RN)
#define _EMU_BF16_FROM_I(v) ::cuda_emu_detail::f2bf(::cuda_emu_detail::int2f_odd(v), ::cuda_emu_detail::RN)
#define _EMU_BF16_TO_F(b) ::cuda_emu_detail::bf2f(b)
#define _EMU_BF16_TO_I(I, b) ::cuda_emu_detail::fp2int<I>(::cuda_emu_detail::bf2f(b), ::cuda_emu_detail::RZ)

struct _EMU_AL(2) __half {
    _EMU_H16_BASE(__half, __half_raw)
#if !defined(__CUDA_NO_HALF_CONVERSIONS__)
    _EMU_H16_CONVERSIONS(__half, _EMU_HALF_FROM_F, _EMU_HALF_FROM_D, _EMU_HALF_FROM_I,
                         _EMU_HALF_TO_F, _EMU_HALF_TO_I)
    explicit __half(const __nv_bfloat16 b);
#endif
};

struct _EMU_AL(2) __nv_bfloat16 {
    _EMU_H16_BASE(__nv_bfloat16, __nv_bfloat16_raw)
#if !defined(__CUDA_NO_BFLOAT16_CONVERSIONS__)
    _EMU_H16_CONVERSIONS(__nv_bfloat16, _EMU_BF16_FROM_F, _EMU_BF16_FROM_D, _EMU_BF16_FROM_I,
                         _EMU_BF16_TO_F, _EMU_BF16_TO_I)
    explicit __nv_bfloat16(const __half h) : __x(::cuda_emu_detail::f2bf(::cuda_emu_detail::h2f(h.__x), 0)) {}
#endif
};
#if !defined(__CUDA_NO_HALF_CONVERSIONS__)
inline __half::__half(const __nv_bfloat16 b) : __x(::cuda_emu_detail::f2h(::cuda_emu_detail::bf2f(b.__x), 0)) {}
#endif

struct _EMU_AL(4) __half2 {
    __half x, y;
    __half2() = default;
    constexpr __half2(const __half& a, const __half& b) : x(a), y(b) {}
    __half2(const __half2_raw& r) { x.__x = r.x; y.__x = r.y; }
    __half2& operator=(const __half2_raw& r) { x.__x = r.x; y.__x = r.y; return *this; }
    operator __half2_raw() const { __half2_raw r; r.x = x.__x; r.y = y.__x; return r; }
};
struct _EMU_AL(4) __nv_bfloat162 {
    __nv_bfloat16 x, y;
    __nv_bfloat162() = default;
    constexpr __nv_bfloat162(const __nv_bfloat16& a, const __nv_bfloat16& b) : x(a), y(b) {}
    __nv_bfloat162(const __nv_bfloat162_raw& r) { x.__x = r.x; y.__x = r.y; }
    __nv_bfloat162& operator=(const __nv_bfloat162_raw& r) { x.__x = r.x; y.__x = r.y; return *this; }
    operator __nv_bfloat162_raw() const { __nv_bfloat162_raw r; r.x = x.__x; r.y = y.__x; return r; }
};

// CUDA's spellings.
typedef __half half;
typedef __half2 half2;
typedef __half __nv_half;
typedef __half2 __nv_half2;
typedef __half_raw __nv_half_raw;
typedef __half2_raw __nv_half2_raw;
typedef __half nv_half;
typedef __half2 nv_half2;
typedef __nv_bfloat16 nv_bfloat16;
typedef __nv_bfloat162 nv_bfloat162;

namespace cuda_emu_detail {
// Traits that let one generic implementation serve both 16-bit formats.
template <class H> struct h16;
template <> struct h16<__half> {
    using V2 = __half2;
    static constexpr unsigned short one = 0x3c00u;
    // With F16C (the emulator builds with -march=native) the common cases are one
    // instruction; NaN and inf keep the bit-exact software path (CUDA's canonical NaN).
    static constexpr _EMU_FI float to_f(unsigned short b) {
#if defined(__F16C__)
        if (!__builtin_is_constant_evaluated() && (b & 0x7c00u) != 0x7c00u) return _cvtsh_ss(b);
#endif
        return h2f(b);
    }
    static constexpr _EMU_FI unsigned short from_f(float f, int mode) {
#if defined(__F16C__)
        if (!__builtin_is_constant_evaluated() && mode == RN && f == f)
            return static_cast<unsigned short>(_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT));
#endif
        return f2h(f, mode);
    }
};
template <> struct h16<__nv_bfloat16> {
    using V2 = __nv_bfloat162;
    static constexpr unsigned short one = 0x3f80u;
    static constexpr _EMU_FI float to_f(unsigned short b) { return bf2f(b); }
    static constexpr _EMU_FI unsigned short from_f(float f, int mode) { return f2bf(f, mode); }
};
constexpr unsigned short kNaN16 = 0x7fffu;   // CUDA's canonical NaN, both formats

template <class H> constexpr _EMU_FI H mk(unsigned short b) { H h{}; h.__x = b; return h; }
template <class H> constexpr _EMU_FI float tf(H h) { return h16<H>::to_f(h.__x); }
template <class H> constexpr _EMU_FI H ff(float f, int mode = RN) { return mk<H>(h16<H>::from_f(f, mode)); }
template <class H> inline H fd(double d, int mode = RN) { return ff<H>(d2f_odd(d), mode); }
template <class H, class I> inline H fi(I v, int mode) {
    // Directed modes: rounding the integer to 24 bits in the same direction first composes.
    return ff<H>(mode == RN ? int2f_odd(v) : int2fp<float>(v, mode), mode);
}
// NaN: all-ones exponent with a nonzero mantissa (0x7c00 is half's infinity, 0x7f80 bf16's).
template <class H> constexpr _EMU_FI bool isnan16(H h) {
    return (h.__x & 0x7fffu) > (std::is_same<H, __half>::value ? 0x7c00u : 0x7f80u);
}

// Arithmetic: computing in float and rounding once is the correctly rounded 16-bit result
// (float has >= 2p+2 bits for both formats).  Nothing here can be contracted into an fma: each
// float result goes straight into the rounding.
template <class H> inline H add(H a, H b) { return ff<H>(tf(a) + tf(b)); }
template <class H> inline H sub(H a, H b) { return ff<H>(tf(a) - tf(b)); }
template <class H> inline H mul(H a, H b) { return ff<H>(tf(a) * tf(b)); }
template <class H> inline H div(H a, H b) { return ff<H>(tf(a) / tf(b)); }
template <class H> inline H fma(H a, H b, H c) { return fd<H>(fma_odd(tf(a), tf(b), tf(c))); }
template <class H> inline H neg(H a) { return mk<H>(a.__x ^ 0x8000u); }
template <class H> inline H abs(H a) { return mk<H>(a.__x & 0x7fffu); }

// max/min: a NaN operand is ignored (two NaNs give the canonical NaN); +0 > -0.
template <class H> inline H max(H a, H b) {
    const bool na = isnan16(a), nb = isnan16(b);
    if (na && nb) return mk<H>(kNaN16);
    if (na) return b;
    if (nb) return a;
    const float fa = tf(a), fb = tf(b);
    if (fa > fb) return a;
    if (fb > fa) return b;
    return (a.__x & 0x8000u) ? b : a;
}
template <class H> inline H min(H a, H b) {
    const bool na = isnan16(a), nb = isnan16(b);
    if (na && nb) return mk<H>(kNaN16);
    if (na) return b;
    if (nb) return a;
    const float fa = tf(a), fb = tf(b);
    if (fa < fb) return a;
    if (fb < fa) return b;
    return (a.__x & 0x8000u) ? a : b;
}
template <class H> inline H max_nan(H a, H b) { return (isnan16(a) || isnan16(b)) ? mk<H>(kNaN16) : max(a, b); }
template <class H> inline H min_nan(H a, H b) { return (isnan16(a) || isnan16(b)) ? mk<H>(kNaN16) : min(a, b); }
// .sat: clamp to [0, 1], NaN -> +0 (CUDA: hmin(hmax(r, +0), 1)).
template <class H> inline H sat(H r) { return min(max(r, mk<H>(0)), mk<H>(h16<H>::one)); }
// .relu: negative -> +0, NaN -> canonical NaN.
template <class H> inline H relu(H r) {
    if (isnan16(r)) return mk<H>(kNaN16);
    return (r.__x & 0x8000u) ? mk<H>(0) : r;
}
template <class H> inline int isinf16(H a) {
    const float f = tf(a);
    return std::isinf(f) ? (f < 0 ? -1 : 1) : 0;
}

// Math in float, rounded once.
template <class H, class F> inline H fmath(H a, F f) { return ff<H>(f(tf(a))); }
}  // namespace cuda_emu_detail

// ---- Conversions specific to __half ----------------------------------------------------------
#define _EMU_D ::cuda_emu_detail
inline __half __float2half(const float a) { return _EMU_D::ff<__half>(a, _EMU_D::RN); }
inline __half __float2half_rn(const float a) { return _EMU_D::ff<__half>(a, _EMU_D::RN); }
inline __half __float2half_rz(const float a) { return _EMU_D::ff<__half>(a, _EMU_D::RZ); }
inline __half __float2half_rd(const float a) { return _EMU_D::ff<__half>(a, _EMU_D::RD); }
inline __half __float2half_ru(const float a) { return _EMU_D::ff<__half>(a, _EMU_D::RU); }
inline __half __double2half(const double a) { return _EMU_D::fd<__half>(a); }
inline float __half2float(const __half a) { return _EMU_D::tf(a); }
inline __half2 __float2half2_rn(const float a) { const __half h = __float2half(a); return __half2(h, h); }
inline __half2 __floats2half2_rn(const float a, const float b) { return __half2(__float2half(a), __float2half(b)); }
inline __half2 __float22half2_rn(const float2 a) { return __floats2half2_rn(a.x, a.y); }
inline float2 __half22float2(const __half2 a) { return make_float2(__half2float(a.x), __half2float(a.y)); }
inline __half2 __halves2half2(const __half a, const __half b) { return __half2(a, b); }
inline __half2 __half2half2(const __half a) { return __half2(a, a); }
inline __half2 make_half2(const __half x, const __half y) { return __half2(x, y); }
inline __half __low2half(const __half2 a) { return a.x; }
inline __half __high2half(const __half2 a) { return a.y; }
inline __half2 __low2half2(const __half2 a) { return __half2(a.x, a.x); }
inline __half2 __high2half2(const __half2 a) { return __half2(a.y, a.y); }
inline __half2 __lows2half2(const __half2 a, const __half2 b) { return __half2(a.x, b.x); }
inline __half2 __highs2half2(const __half2 a, const __half2 b) { return __half2(a.y, b.y); }
inline short __half_as_short(const __half h) { return static_cast<short>(h.__x); }
inline unsigned short __half_as_ushort(const __half h) { return h.__x; }
inline __half __short_as_half(const short i) { return _EMU_D::mk<__half>(static_cast<unsigned short>(i)); }
inline __half __ushort_as_half(const unsigned short i) { return _EMU_D::mk<__half>(i); }

// ---- Conversions specific to __nv_bfloat16 ---------------------------------------------------
inline __nv_bfloat16 __float2bfloat16(const float a) { return _EMU_D::ff<__nv_bfloat16>(a, _EMU_D::RN); }
inline __nv_bfloat16 __float2bfloat16_rn(const float a) { return _EMU_D::ff<__nv_bfloat16>(a, _EMU_D::RN); }
inline __nv_bfloat16 __float2bfloat16_rz(const float a) { return _EMU_D::ff<__nv_bfloat16>(a, _EMU_D::RZ); }
inline __nv_bfloat16 __float2bfloat16_rd(const float a) { return _EMU_D::ff<__nv_bfloat16>(a, _EMU_D::RD); }
inline __nv_bfloat16 __float2bfloat16_ru(const float a) { return _EMU_D::ff<__nv_bfloat16>(a, _EMU_D::RU); }
inline __nv_bfloat16 __double2bfloat16(const double a) { return _EMU_D::fd<__nv_bfloat16>(a); }
inline float __bfloat162float(const __nv_bfloat16 a) { return _EMU_D::tf(a); }
inline __nv_bfloat162 __float2bfloat162_rn(const float a) { const __nv_bfloat16 h = __float2bfloat16(a); return __nv_bfloat162(h, h); }
inline __nv_bfloat162 __floats2bfloat162_rn(const float a, const float b) { return __nv_bfloat162(__float2bfloat16(a), __float2bfloat16(b)); }
inline __nv_bfloat162 __float22bfloat162_rn(const float2 a) { return __floats2bfloat162_rn(a.x, a.y); }
inline float2 __bfloat1622float2(const __nv_bfloat162 a) { return make_float2(__bfloat162float(a.x), __bfloat162float(a.y)); }
inline __nv_bfloat162 __halves2bfloat162(const __nv_bfloat16 a, const __nv_bfloat16 b) { return __nv_bfloat162(a, b); }
inline __nv_bfloat162 __bfloat162bfloat162(const __nv_bfloat16 a) { return __nv_bfloat162(a, a); }
inline __nv_bfloat162 make_bfloat162(const __nv_bfloat16 x, const __nv_bfloat16 y) { return __nv_bfloat162(x, y); }
inline __nv_bfloat16 __low2bfloat16(const __nv_bfloat162 a) { return a.x; }
inline __nv_bfloat16 __high2bfloat16(const __nv_bfloat162 a) { return a.y; }
inline __nv_bfloat162 __low2bfloat162(const __nv_bfloat162 a) { return __nv_bfloat162(a.x, a.x); }
inline __nv_bfloat162 __high2bfloat162(const __nv_bfloat162 a) { return __nv_bfloat162(a.y, a.y); }
inline __nv_bfloat162 __lows2bfloat162(const __nv_bfloat162 a, const __nv_bfloat162 b) { return __nv_bfloat162(a.x, b.x); }
inline __nv_bfloat162 __highs2bfloat162(const __nv_bfloat162 a, const __nv_bfloat162 b) { return __nv_bfloat162(a.y, b.y); }
inline short __bfloat16_as_short(const __nv_bfloat16 h) { return static_cast<short>(h.__x); }
inline unsigned short __bfloat16_as_ushort(const __nv_bfloat16 h) { return h.__x; }
inline __nv_bfloat16 __short_as_bfloat16(const short i) { return _EMU_D::mk<__nv_bfloat16>(static_cast<unsigned short>(i)); }
inline __nv_bfloat16 __ushort_as_bfloat16(const unsigned short i) { return _EMU_D::mk<__nv_bfloat16>(i); }

// ---- 16-bit <-> integer conversions, every mode (saturating, NaN -> 0) ------------------------
#define _EMU_H16_TO_INT(H, NAME, I, SUF, MODE) \
    inline I NAME##SUF(const H h) { return _EMU_D::fp2int<I>(_EMU_D::tf(h), _EMU_D::MODE); }
#define _EMU_INT_TO_H16(H, NAME, I, SUF, MODE) \
    inline H NAME##SUF(const I i) { return _EMU_D::fi<H>(i, _EMU_D::MODE); }
#define _EMU_ALL_MODES(M, H, NAME, I)                                                           \
    M(H, NAME, I, _rn, RN) M(H, NAME, I, _rz, RZ) M(H, NAME, I, _rd, RD) M(H, NAME, I, _ru, RU)
_EMU_ALL_MODES(_EMU_H16_TO_INT, __half, __half2short, short)
_EMU_ALL_MODES(_EMU_H16_TO_INT, __half, __half2ushort, unsigned short)
_EMU_ALL_MODES(_EMU_H16_TO_INT, __half, __half2int, int)
_EMU_ALL_MODES(_EMU_H16_TO_INT, __half, __half2uint, unsigned int)
_EMU_ALL_MODES(_EMU_H16_TO_INT, __half, __half2ll, long long)
_EMU_ALL_MODES(_EMU_H16_TO_INT, __half, __half2ull, unsigned long long)
_EMU_H16_TO_INT(__half, __half2char, signed char, _rz, RZ)
_EMU_H16_TO_INT(__half, __half2uchar, unsigned char, _rz, RZ)
_EMU_ALL_MODES(_EMU_INT_TO_H16, __half, __short2half, short)
_EMU_ALL_MODES(_EMU_INT_TO_H16, __half, __ushort2half, unsigned short)
_EMU_ALL_MODES(_EMU_INT_TO_H16, __half, __int2half, int)
_EMU_ALL_MODES(_EMU_INT_TO_H16, __half, __uint2half, unsigned int)
_EMU_ALL_MODES(_EMU_INT_TO_H16, __half, __ll2half, long long)
_EMU_ALL_MODES(_EMU_INT_TO_H16, __half, __ull2half, unsigned long long)
_EMU_ALL_MODES(_EMU_H16_TO_INT, __nv_bfloat16, __bfloat162short, short)
_EMU_ALL_MODES(_EMU_H16_TO_INT, __nv_bfloat16, __bfloat162ushort, unsigned short)
_EMU_ALL_MODES(_EMU_H16_TO_INT, __nv_bfloat16, __bfloat162int, int)
_EMU_ALL_MODES(_EMU_H16_TO_INT, __nv_bfloat16, __bfloat162uint, unsigned int)
_EMU_ALL_MODES(_EMU_H16_TO_INT, __nv_bfloat16, __bfloat162ll, long long)
_EMU_ALL_MODES(_EMU_H16_TO_INT, __nv_bfloat16, __bfloat162ull, unsigned long long)
_EMU_H16_TO_INT(__nv_bfloat16, __bfloat162char, signed char, _rz, RZ)
_EMU_H16_TO_INT(__nv_bfloat16, __bfloat162uchar, unsigned char, _rz, RZ)
_EMU_ALL_MODES(_EMU_INT_TO_H16, __nv_bfloat16, __short2bfloat16, short)
_EMU_ALL_MODES(_EMU_INT_TO_H16, __nv_bfloat16, __ushort2bfloat16, unsigned short)
_EMU_ALL_MODES(_EMU_INT_TO_H16, __nv_bfloat16, __int2bfloat16, int)
_EMU_ALL_MODES(_EMU_INT_TO_H16, __nv_bfloat16, __uint2bfloat16, unsigned int)
_EMU_ALL_MODES(_EMU_INT_TO_H16, __nv_bfloat16, __ll2bfloat16, long long)
_EMU_ALL_MODES(_EMU_INT_TO_H16, __nv_bfloat16, __ull2bfloat16, unsigned long long)
#undef _EMU_H16_TO_INT
#undef _EMU_INT_TO_H16

// ---- Intrinsics shared by both formats (overloaded names) -----------------------------------
// _EMU_BOTH(X) stamps X(H, H2) for __half and __nv_bfloat16.
#define _EMU_BOTH(X) X(__half, __half2) X(__nv_bfloat16, __nv_bfloat162)

#define _EMU_H16_API(H, H2)                                                                      \
    inline float __low2float(const H2 a) { return _EMU_D::tf(a.x); }                             \
    inline float __high2float(const H2 a) { return _EMU_D::tf(a.y); }                            \
    inline H2 __lowhigh2highlow(const H2 a) { return H2(a.y, a.x); }                             \
    inline H __hadd(const H a, const H b) { return _EMU_D::add(a, b); }                          \
    inline H __hsub(const H a, const H b) { return _EMU_D::sub(a, b); }                          \
    inline H __hmul(const H a, const H b) { return _EMU_D::mul(a, b); }                          \
    inline H __hdiv(const H a, const H b) { return _EMU_D::div(a, b); }                          \
    inline H __hadd_rn(const H a, const H b) { return _EMU_D::add(a, b); }                       \
    inline H __hsub_rn(const H a, const H b) { return _EMU_D::sub(a, b); }                       \
    inline H __hmul_rn(const H a, const H b) { return _EMU_D::mul(a, b); }                       \
    inline H __hadd_sat(const H a, const H b) { return _EMU_D::sat(_EMU_D::add(a, b)); }         \
    inline H __hsub_sat(const H a, const H b) { return _EMU_D::sat(_EMU_D::sub(a, b)); }         \
    inline H __hmul_sat(const H a, const H b) { return _EMU_D::sat(_EMU_D::mul(a, b)); }         \
    inline H __hfma(const H a, const H b, const H c) { return _EMU_D::fma(a, b, c); }            \
    inline H __hfma_sat(const H a, const H b, const H c) { return _EMU_D::sat(_EMU_D::fma(a, b, c)); } \
    inline H __hfma_relu(const H a, const H b, const H c) { return _EMU_D::relu(_EMU_D::fma(a, b, c)); } \
    inline H __hneg(const H a) { return _EMU_D::neg(a); }                                        \
    inline H __habs(const H a) { return _EMU_D::abs(a); }                                        \
    inline H __hmax(const H a, const H b) { return _EMU_D::max(a, b); }                          \
    inline H __hmin(const H a, const H b) { return _EMU_D::min(a, b); }                          \
    inline H __hmax_nan(const H a, const H b) { return _EMU_D::max_nan(a, b); }                  \
    inline H __hmin_nan(const H a, const H b) { return _EMU_D::min_nan(a, b); }                  \
    inline bool __heq(const H a, const H b) { return _EMU_D::tf(a) == _EMU_D::tf(b); }           \
    inline bool __hne(const H a, const H b) { return _EMU_D::tf(a) < _EMU_D::tf(b) || _EMU_D::tf(a) > _EMU_D::tf(b); } \
    inline bool __hlt(const H a, const H b) { return _EMU_D::tf(a) < _EMU_D::tf(b); }            \
    inline bool __hle(const H a, const H b) { return _EMU_D::tf(a) <= _EMU_D::tf(b); }           \
    inline bool __hgt(const H a, const H b) { return _EMU_D::tf(a) > _EMU_D::tf(b); }            \
    inline bool __hge(const H a, const H b) { return _EMU_D::tf(a) >= _EMU_D::tf(b); }           \
    inline bool __hequ(const H a, const H b) { return !__hne(a, b); }                            \
    inline bool __hneu(const H a, const H b) { return !__heq(a, b); }                            \
    inline bool __hltu(const H a, const H b) { return !__hge(a, b); }                            \
    inline bool __hleu(const H a, const H b) { return !__hgt(a, b); }                            \
    inline bool __hgtu(const H a, const H b) { return !__hle(a, b); }                            \
    inline bool __hgeu(const H a, const H b) { return !__hlt(a, b); }                            \
    inline bool __hisnan(const H a) { return _EMU_D::isnan16(a); }                               \
    inline int __hisinf(const H a) { return _EMU_D::isinf16(a); }                                \
    inline H hexp(const H a) { return _EMU_D::fmath(a, [](float f) { return ::expf(f); }); }     \
    inline H hexp2(const H a) { return _EMU_D::fmath(a, [](float f) { return ::exp2f(f); }); }   \
    inline H hexp10(const H a) { return _EMU_D::fmath(a, [](float f) { return ::exp10f(f); }); } \
    inline H hlog(const H a) { return _EMU_D::fmath(a, [](float f) { return ::logf(f); }); }     \
    inline H hlog2(const H a) { return _EMU_D::fmath(a, [](float f) { return ::log2f(f); }); }   \
    inline H hlog10(const H a) { return _EMU_D::fmath(a, [](float f) { return ::log10f(f); }); } \
    inline H hsqrt(const H a) { return _EMU_D::fmath(a, [](float f) { return ::sqrtf(f); }); }   \
    inline H hrsqrt(const H a) { return _EMU_D::fmath(a, [](float f) { return 1.0f / ::sqrtf(f); }); } \
    inline H hrcp(const H a) { return _EMU_D::fmath(a, [](float f) { return 1.0f / f; }); }      \
    inline H hsin(const H a) { return _EMU_D::fmath(a, [](float f) { return ::sinf(f); }); }     \
    inline H hcos(const H a) { return _EMU_D::fmath(a, [](float f) { return ::cosf(f); }); }     \
    inline H htanh(const H a) { return _EMU_D::fmath(a, [](float f) { return ::tanhf(f); }); }   \
    inline H htanh_approx(const H a) { return htanh(a); }                                        \
    inline H hceil(const H a) { return _EMU_D::fmath(a, [](float f) { return ::ceilf(f); }); }   \
    inline H hfloor(const H a) { return _EMU_D::fmath(a, [](float f) { return ::floorf(f); }); } \
    inline H htrunc(const H a) { return _EMU_D::fmath(a, [](float f) { return ::truncf(f); }); } \
    inline H hrint(const H a) { return _EMU_D::fmath(a, [](float f) { return __builtin_roundevenf(f); }); } \
    /* 2-vectors: componentwise */                                                               \
    inline H2 __hadd2(const H2 a, const H2 b) { return H2(__hadd(a.x, b.x), __hadd(a.y, b.y)); } \
    inline H2 __hsub2(const H2 a, const H2 b) { return H2(__hsub(a.x, b.x), __hsub(a.y, b.y)); } \
    inline H2 __hmul2(const H2 a, const H2 b) { return H2(__hmul(a.x, b.x), __hmul(a.y, b.y)); } \
    inline H2 __h2div(const H2 a, const H2 b) { return H2(__hdiv(a.x, b.x), __hdiv(a.y, b.y)); } \
    inline H2 __hadd2_rn(const H2 a, const H2 b) { return __hadd2(a, b); }                       \
    inline H2 __hsub2_rn(const H2 a, const H2 b) { return __hsub2(a, b); }                       \
    inline H2 __hmul2_rn(const H2 a, const H2 b) { return __hmul2(a, b); }                       \
    inline H2 __hadd2_sat(const H2 a, const H2 b) { return H2(__hadd_sat(a.x, b.x), __hadd_sat(a.y, b.y)); } \
    inline H2 __hsub2_sat(const H2 a, const H2 b) { return H2(__hsub_sat(a.x, b.x), __hsub_sat(a.y, b.y)); } \
    inline H2 __hmul2_sat(const H2 a, const H2 b) { return H2(__hmul_sat(a.x, b.x), __hmul_sat(a.y, b.y)); } \
    inline H2 __hfma2(const H2 a, const H2 b, const H2 c) { return H2(__hfma(a.x, b.x, c.x), __hfma(a.y, b.y, c.y)); } \
    inline H2 __hfma2_sat(const H2 a, const H2 b, const H2 c) { return H2(__hfma_sat(a.x, b.x, c.x), __hfma_sat(a.y, b.y, c.y)); } \
    inline H2 __hfma2_relu(const H2 a, const H2 b, const H2 c) { return H2(__hfma_relu(a.x, b.x, c.x), __hfma_relu(a.y, b.y, c.y)); } \
    inline H2 __hcmadd(const H2 a, const H2 b, const H2 c) { /* complex a*b + c, x = real */      \
        return H2(__hfma(__hneg(a.y), b.y, __hfma(a.x, b.x, c.x)), __hfma(a.y, b.x, __hfma(a.x, b.y, c.y))); } \
    inline H2 __hneg2(const H2 a) { return H2(__hneg(a.x), __hneg(a.y)); }                       \
    inline H2 __habs2(const H2 a) { return H2(__habs(a.x), __habs(a.y)); }                       \
    inline H2 __hmax2(const H2 a, const H2 b) { return H2(__hmax(a.x, b.x), __hmax(a.y, b.y)); } \
    inline H2 __hmin2(const H2 a, const H2 b) { return H2(__hmin(a.x, b.x), __hmin(a.y, b.y)); } \
    inline H2 __hmax2_nan(const H2 a, const H2 b) { return H2(__hmax_nan(a.x, b.x), __hmax_nan(a.y, b.y)); } \
    inline H2 __hmin2_nan(const H2 a, const H2 b) { return H2(__hmin_nan(a.x, b.x), __hmin_nan(a.y, b.y)); } \
    inline H2 __hisnan2(const H2 a) { return H2(_EMU_D::mk<H>(__hisnan(a.x) ? _EMU_D::h16<H>::one : 0), \
                                                _EMU_D::mk<H>(__hisnan(a.y) ? _EMU_D::h16<H>::one : 0)); } \
    _EMU_H16_CMP2(H, H2, eq) _EMU_H16_CMP2(H, H2, ne) _EMU_H16_CMP2(H, H2, lt)                   \
    _EMU_H16_CMP2(H, H2, le) _EMU_H16_CMP2(H, H2, gt) _EMU_H16_CMP2(H, H2, ge)                   \
    _EMU_H16_CMP2(H, H2, equ) _EMU_H16_CMP2(H, H2, neu) _EMU_H16_CMP2(H, H2, ltu)                \
    _EMU_H16_CMP2(H, H2, leu) _EMU_H16_CMP2(H, H2, gtu) _EMU_H16_CMP2(H, H2, geu)                \
    _EMU_H16_MATH2(H2, exp) _EMU_H16_MATH2(H2, exp2) _EMU_H16_MATH2(H2, exp10)                   \
    _EMU_H16_MATH2(H2, log) _EMU_H16_MATH2(H2, log2) _EMU_H16_MATH2(H2, log10)                   \
    _EMU_H16_MATH2(H2, sqrt) _EMU_H16_MATH2(H2, rsqrt) _EMU_H16_MATH2(H2, rcp)                   \
    _EMU_H16_MATH2(H2, sin) _EMU_H16_MATH2(H2, cos) _EMU_H16_MATH2(H2, tanh)                     \
    _EMU_H16_MATH2(H2, tanh_approx) _EMU_H16_MATH2(H2, ceil) _EMU_H16_MATH2(H2, floor)           \
    _EMU_H16_MATH2(H2, trunc) _EMU_H16_MATH2(H2, rint)

// __heq2 etc. return 1.0/0.0 per lane, __hbeq2 etc. "both lanes", __heq2_mask 0xffff per lane.
#define _EMU_H16_CMP2(H, H2, OP)                                                                  \
    inline H2 __h##OP##2(const H2 a, const H2 b) {                                                \
        return H2(_EMU_D::mk<H>(__h##OP(a.x, b.x) ? _EMU_D::h16<H>::one : 0),                     \
                  _EMU_D::mk<H>(__h##OP(a.y, b.y) ? _EMU_D::h16<H>::one : 0)); }                  \
    inline bool __hb##OP##2(const H2 a, const H2 b) { return __h##OP(a.x, b.x) && __h##OP(a.y, b.y); } \
    inline unsigned __h##OP##2_mask(const H2 a, const H2 b) {                                     \
        return (__h##OP(a.x, b.x) ? 0xffffu : 0u) | (__h##OP(a.y, b.y) ? 0xffff0000u : 0u); }
#define _EMU_H16_MATH2(H2, F) \
    inline H2 h2##F(const H2 a) { return H2(h##F(a.x), h##F(a.y)); }

_EMU_BOTH(_EMU_H16_API)

// ---- Operators (cuda_fp16.hpp / cuda_bf16.hpp) -----------------------------------------------
#define _EMU_H16_OPERATORS(H)                                                                      \
    inline H operator+(const H& a, const H& b) { return __hadd(a, b); }                           \
    inline H operator-(const H& a, const H& b) { return __hsub(a, b); }                           \
    inline H operator*(const H& a, const H& b) { return __hmul(a, b); }                           \
    inline H operator/(const H& a, const H& b) { return __hdiv(a, b); }                           \
    inline H& operator+=(H& a, const H& b) { a = __hadd(a, b); return a; }                        \
    inline H& operator-=(H& a, const H& b) { a = __hsub(a, b); return a; }                        \
    inline H& operator*=(H& a, const H& b) { a = __hmul(a, b); return a; }                        \
    inline H& operator/=(H& a, const H& b) { a = __hdiv(a, b); return a; }                        \
    inline H& operator++(H& a) { a = __hadd(a, _EMU_D::mk<H>(_EMU_D::h16<H>::one)); return a; }   \
    inline H& operator--(H& a) { a = __hsub(a, _EMU_D::mk<H>(_EMU_D::h16<H>::one)); return a; }   \
    inline H operator++(H& a, int) { H r = a; ++a; return r; }                                    \
    inline H operator--(H& a, int) { H r = a; --a; return r; }                                    \
    inline H operator+(const H& a) { return a; }                                                  \
    inline H operator-(const H& a) { return __hneg(a); }                                          \
    inline bool operator==(const H& a, const H& b) { return __heq(a, b); }                        \
    inline bool operator!=(const H& a, const H& b) { return __hneu(a, b); }                       \
    inline bool operator<(const H& a, const H& b) { return __hlt(a, b); }                         \
    inline bool operator<=(const H& a, const H& b) { return __hle(a, b); }                        \
    inline bool operator>(const H& a, const H& b) { return __hgt(a, b); }                         \
    inline bool operator>=(const H& a, const H& b) { return __hge(a, b); }
#define _EMU_H16_OPERATORS2(H, H2)                                                                 \
    inline H2 operator+(const H2& a, const H2& b) { return __hadd2(a, b); }                       \
    inline H2 operator-(const H2& a, const H2& b) { return __hsub2(a, b); }                       \
    inline H2 operator*(const H2& a, const H2& b) { return __hmul2(a, b); }                       \
    inline H2 operator/(const H2& a, const H2& b) { return __h2div(a, b); }                       \
    inline H2& operator+=(H2& a, const H2& b) { a = __hadd2(a, b); return a; }                    \
    inline H2& operator-=(H2& a, const H2& b) { a = __hsub2(a, b); return a; }                    \
    inline H2& operator*=(H2& a, const H2& b) { a = __hmul2(a, b); return a; }                    \
    inline H2& operator/=(H2& a, const H2& b) { a = __h2div(a, b); return a; }                    \
    inline H2& operator++(H2& a) { const H o = _EMU_D::mk<H>(_EMU_D::h16<H>::one); a = __hadd2(a, H2(o, o)); return a; } \
    inline H2& operator--(H2& a) { const H o = _EMU_D::mk<H>(_EMU_D::h16<H>::one); a = __hsub2(a, H2(o, o)); return a; } \
    inline H2 operator++(H2& a, int) { H2 r = a; ++a; return r; }                                 \
    inline H2 operator--(H2& a, int) { H2 r = a; --a; return r; }                                 \
    inline H2 operator+(const H2& a) { return a; }                                                \
    inline H2 operator-(const H2& a) { return __hneg2(a); }                                       \
    inline bool operator==(const H2& a, const H2& b) { return __hbeq2(a, b); }                    \
    inline bool operator!=(const H2& a, const H2& b) { return __hbneu2(a, b); }                   \
    inline bool operator<(const H2& a, const H2& b) { return __hblt2(a, b); }                     \
    inline bool operator<=(const H2& a, const H2& b) { return __hble2(a, b); }                    \
    inline bool operator>(const H2& a, const H2& b) { return __hbgt2(a, b); }                     \
    inline bool operator>=(const H2& a, const H2& b) { return __hbge2(a, b); }

#if !defined(__CUDA_NO_HALF_OPERATORS__)
_EMU_H16_OPERATORS(__half)
#endif
#if !defined(__CUDA_NO_HALF2_OPERATORS__)
_EMU_H16_OPERATORS2(__half, __half2)
#endif
#if !defined(__CUDA_NO_BFLOAT16_OPERATORS__)
_EMU_H16_OPERATORS(__nv_bfloat16)
#endif
#if !defined(__CUDA_NO_BFLOAT162_OPERATORS__)
_EMU_H16_OPERATORS2(__nv_bfloat16, __nv_bfloat162)
#endif
#undef _EMU_H16_OPERATORS
#undef _EMU_H16_OPERATORS2
#undef _EMU_H16_API
#undef _EMU_H16_CMP2
#undef _EMU_H16_MATH2

// ============================================================================================
// Floating-point intrinsics
// ============================================================================================
// Fast-math intrinsics: CUDA only bounds their error, so the accurate libm value is a valid
// result.  glibc already declares several __xxxf names (without defining them); these inline
// definitions then simply define those declarations.
inline float __expf(float x) { return ::expf(x); }
inline float __exp10f(float x) { return ::exp10f(x); }
inline float __logf(float x) { return ::logf(x); }
inline float __log2f(float x) { return ::log2f(x); }
inline float __log10f(float x) { return ::log10f(x); }
inline float __powf(float x, float y) { return ::powf(x, y); }
inline float __sinf(float x) { return ::sinf(x); }
inline float __cosf(float x) { return ::cosf(x); }
inline float __tanf(float x) { return ::tanf(x); }
inline float __tanhf(float x) { return ::tanhf(x); }
inline void __sincosf(float x, float* s, float* c) { ::sincosf(x, s, c); }
// __fdividef: documented to return 0 for 2^126 < |y| < 2^128 (NaN if x is infinite).
inline float __fdividef(float x, float y) {
    const float ay = std::fabs(y);
    if (ay > 0x1p126f && ay < HUGE_VALF) return std::isinf(x) ? __builtin_nanf("") : (x / y) * 0.0f;
    return x / y;
}
inline float fdividef(float x, float y) { return x / y; }
inline double fdivide(double x, double y) { return x / y; }
// Clamp to [0, 1]; NaN -> 0.
inline float __saturatef(float x) { return x >= 1.0f ? 1.0f : (x > 0.0f ? x : 0.0f); }

inline float rsqrtf(float x) { return static_cast<float>(1.0 / std::sqrt(static_cast<double>(x))); }
inline double rsqrt(double x) { return 1.0 / std::sqrt(x); }
inline float rcbrtf(float x) { return static_cast<float>(1.0 / std::cbrt(static_cast<double>(x))); }
inline double rcbrt(double x) { return 1.0 / std::cbrt(x); }
inline float __frsqrt_rn(float x) { return static_cast<float>(1.0 / std::sqrt(static_cast<double>(x))); }
inline void sincospif(float x, float* s, float* c) { _EMU_D::sincospi(x, s, c); }
inline void sincospi(double x, double* s, double* c) { _EMU_D::sincospi(x, s, c); }
inline float sinpif(float x) { float s, c; _EMU_D::sincospi(x, &s, &c); return s; }
inline float cospif(float x) { float s, c; _EMU_D::sincospi(x, &s, &c); return c; }
inline double sinpi(double x) { double s, c; _EMU_D::sincospi(x, &s, &c); return s; }
inline double cospi(double x) { double s, c; _EMU_D::sincospi(x, &s, &c); return c; }
inline float erfinvf(float y) { return static_cast<float>(_EMU_D::erfinv(y)); }
inline double erfinv(double y) { return _EMU_D::erfinv(y); }
inline float erfcinvf(float y) { return static_cast<float>(_EMU_D::erfcinv(y)); }
inline double erfcinv(double y) { return _EMU_D::erfcinv(y); }
inline float erfcxf(float x) { return static_cast<float>(_EMU_D::erfcx(x)); }
inline double erfcx(double x) { return _EMU_D::erfcx(x); }
inline float normcdff(float x) { return static_cast<float>(_EMU_D::normcdf(x)); }
inline double normcdf(double x) { return _EMU_D::normcdf(x); }
inline float normcdfinvf(float p) { return static_cast<float>(-0x1.6a09e667f3bcdp+0 * _EMU_D::erfcinv(2.0 * p)); }
inline double normcdfinv(double p) { return -0x1.6a09e667f3bcdp+0 * _EMU_D::erfcinv(2.0 * p); }
inline float norm3df(float a, float b, float c) {
    const double x = a, y = b, z = c;
    return static_cast<float>(std::sqrt(x * x + y * y + z * z));
}
inline float norm4df(float a, float b, float c, float d) {
    const double x = a, y = b, z = c, w = d;
    return static_cast<float>(std::sqrt(x * x + y * y + z * z + w * w));
}
inline float rnorm3df(float a, float b, float c) {
    const double x = a, y = b, z = c;
    return static_cast<float>(1.0 / std::sqrt(x * x + y * y + z * z));
}
inline float rnorm4df(float a, float b, float c, float d) {
    const double x = a, y = b, z = c, w = d;
    return static_cast<float>(1.0 / std::sqrt(x * x + y * y + z * z + w * w));
}
inline double norm3d(double a, double b, double c) { return std::hypot(std::hypot(a, b), c); }
inline double norm4d(double a, double b, double c, double d) { return std::hypot(std::hypot(a, b), std::hypot(c, d)); }
inline double rnorm3d(double a, double b, double c) { return 1.0 / norm3d(a, b, c); }
inline double rnorm4d(double a, double b, double c, double d) { return 1.0 / norm4d(a, b, c, d); }
inline float rhypotf(float a, float b) { return static_cast<float>(1.0 / std::hypot(static_cast<double>(a), static_cast<double>(b))); }
inline double rhypot(double a, double b) { return 1.0 / std::hypot(a, b); }
inline float normf(int dim, const float* a) {
    double s = 0;
    for (int i = 0; i < dim; ++i) s += static_cast<double>(a[i]) * a[i];
    return static_cast<float>(std::sqrt(s));
}
inline float rnormf(int dim, const float* a) {
    double s = 0;
    for (int i = 0; i < dim; ++i) s += static_cast<double>(a[i]) * a[i];
    return static_cast<float>(1.0 / std::sqrt(s));
}
inline double norm(int dim, const double* a) {
    double s = 0;
    for (int i = 0; i < dim; ++i) s = std::hypot(s, a[i]);
    return s;
}
inline double rnorm(int dim, const double* a) { return 1.0 / norm(dim, a); }

// ---- Correctly rounded arithmetic in a given mode --------------------------------------------
// _rn: never contracted into an fma (opaque values); _rz/_rd/_ru: run under fesetround.
// Each EXPR reads its operands through OP(), which is opaque() for _rn and pinned() otherwise.
#define _EMU_DIRECTED_ALL(T, NAME, PARAMS, EXPR_OF)                                                 \
    inline T NAME##_rn PARAMS { auto OP = [](auto v) { return _EMU_D::opaque(v); }; return _EMU_D::opaque(EXPR_OF); } \
    inline T NAME##_rz PARAMS { auto OP = [](auto v) { return _EMU_D::pinned(v); };                \
        return _EMU_D::with_rounding(_EMU_D::RZ, [&] { return EXPR_OF; }); }                        \
    inline T NAME##_rd PARAMS { auto OP = [](auto v) { return _EMU_D::pinned(v); };                \
        return _EMU_D::with_rounding(_EMU_D::RD, [&] { return EXPR_OF; }); }                        \
    inline T NAME##_ru PARAMS { auto OP = [](auto v) { return _EMU_D::pinned(v); };                \
        return _EMU_D::with_rounding(_EMU_D::RU, [&] { return EXPR_OF; }); }
_EMU_DIRECTED_ALL(float, __fadd, (float a, float b), OP(a) + OP(b))
_EMU_DIRECTED_ALL(float, __fsub, (float a, float b), OP(a) - OP(b))
_EMU_DIRECTED_ALL(float, __fmul, (float a, float b), OP(a) * OP(b))
_EMU_DIRECTED_ALL(float, __fdiv, (float a, float b), OP(a) / OP(b))
_EMU_DIRECTED_ALL(float, __frcp, (float a), 1.0f / OP(a))
_EMU_DIRECTED_ALL(float, __fsqrt, (float a), ::sqrtf(OP(a)))
_EMU_DIRECTED_ALL(float, __fmaf, (float a, float b, float c), ::fmaf(OP(a), OP(b), OP(c)))
_EMU_DIRECTED_ALL(float, __fmaf_ieee, (float a, float b, float c), ::fmaf(OP(a), OP(b), OP(c)))
_EMU_DIRECTED_ALL(double, __dadd, (double a, double b), OP(a) + OP(b))
_EMU_DIRECTED_ALL(double, __dsub, (double a, double b), OP(a) - OP(b))
_EMU_DIRECTED_ALL(double, __dmul, (double a, double b), OP(a) * OP(b))
_EMU_DIRECTED_ALL(double, __ddiv, (double a, double b), OP(a) / OP(b))
_EMU_DIRECTED_ALL(double, __drcp, (double a), 1.0 / OP(a))
_EMU_DIRECTED_ALL(double, __dsqrt, (double a), ::sqrt(OP(a)))
_EMU_DIRECTED_ALL(double, __fma, (double a, double b, double c), ::fma(OP(a), OP(b), OP(c)))
_EMU_DIRECTED_ALL(float, __double2float, (double a), static_cast<float>(OP(a)))
#undef _EMU_DIRECTED_ALL

// ---- Conversions ------------------------------------------------------------------------------
#define _EMU_FP2INT(F, I, NAME)                                                                     \
    inline I NAME##_rn(F x) { return _EMU_D::fp2int<I>(x, _EMU_D::RN); }                            \
    inline I NAME##_rz(F x) { return _EMU_D::fp2int<I>(x, _EMU_D::RZ); }                            \
    inline I NAME##_rd(F x) { return _EMU_D::fp2int<I>(x, _EMU_D::RD); }                            \
    inline I NAME##_ru(F x) { return _EMU_D::fp2int<I>(x, _EMU_D::RU); }
_EMU_FP2INT(float, int, __float2int)
_EMU_FP2INT(float, unsigned int, __float2uint)
_EMU_FP2INT(float, long long, __float2ll)
_EMU_FP2INT(float, unsigned long long, __float2ull)
_EMU_FP2INT(double, int, __double2int)
_EMU_FP2INT(double, unsigned int, __double2uint)
_EMU_FP2INT(double, long long, __double2ll)
_EMU_FP2INT(double, unsigned long long, __double2ull)
#undef _EMU_FP2INT
#define _EMU_INT2FP(I, F, NAME)                                                                     \
    inline F NAME##_rn(I x) { return _EMU_D::int2fp<F>(x, _EMU_D::RN); }                            \
    inline F NAME##_rz(I x) { return _EMU_D::int2fp<F>(x, _EMU_D::RZ); }                            \
    inline F NAME##_rd(I x) { return _EMU_D::int2fp<F>(x, _EMU_D::RD); }                            \
    inline F NAME##_ru(I x) { return _EMU_D::int2fp<F>(x, _EMU_D::RU); }
_EMU_INT2FP(int, float, __int2float)
_EMU_INT2FP(unsigned int, float, __uint2float)
_EMU_INT2FP(long long, float, __ll2float)
_EMU_INT2FP(unsigned long long, float, __ull2float)
_EMU_INT2FP(long long, double, __ll2double)
_EMU_INT2FP(unsigned long long, double, __ull2double)
#undef _EMU_INT2FP
inline double __int2double_rn(int x) { return static_cast<double>(x); }
inline double __uint2double_rn(unsigned int x) { return static_cast<double>(x); }

// ---- Bit reinterpretation --------------------------------------------------------------------
constexpr _EMU_FI int __float_as_int(float x) { return _EMU_D::bitcast<int>(x); }
constexpr _EMU_FI unsigned int __float_as_uint(float x) { return _EMU_D::bitcast<unsigned int>(x); }
constexpr _EMU_FI float __int_as_float(int x) { return _EMU_D::bitcast<float>(x); }
constexpr _EMU_FI float __uint_as_float(unsigned int x) { return _EMU_D::bitcast<float>(x); }
constexpr _EMU_FI long long __double_as_longlong(double x) { return _EMU_D::bitcast<long long>(x); }
constexpr _EMU_FI double __longlong_as_double(long long x) { return _EMU_D::bitcast<double>(x); }
constexpr _EMU_FI double __hiloint2double(int hi, int lo) {
    return _EMU_D::bitcast<double>((static_cast<unsigned long long>(static_cast<unsigned>(hi)) << 32) | static_cast<unsigned>(lo));
}
constexpr _EMU_FI int __double2hiint(double x) { return static_cast<int>(_EMU_D::bitcast<unsigned long long>(x) >> 32); }
constexpr _EMU_FI int __double2loint(double x) { return static_cast<int>(_EMU_D::bitcast<unsigned long long>(x) & 0xffffffffu); }

// ============================================================================================
// Integer intrinsics
// ============================================================================================
constexpr _EMU_FI int __popc(unsigned int x) { return __builtin_popcount(x); }
constexpr _EMU_FI int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
constexpr _EMU_FI int __clz(int x) { return x == 0 ? 32 : __builtin_clz(static_cast<unsigned>(x)); }
constexpr _EMU_FI int __clzll(long long x) { return x == 0 ? 64 : __builtin_clzll(static_cast<unsigned long long>(x)); }
constexpr _EMU_FI int __ffs(int x) { return __builtin_ffs(x); }
constexpr _EMU_FI int __ffsll(long long x) { return __builtin_ffsll(x); }
constexpr inline unsigned int __brev(unsigned int x) {
    x = ((x >> 1) & 0x55555555u) | ((x & 0x55555555u) << 1);
    x = ((x >> 2) & 0x33333333u) | ((x & 0x33333333u) << 2);
    x = ((x >> 4) & 0x0f0f0f0fu) | ((x & 0x0f0f0f0fu) << 4);
    return __builtin_bswap32(x);
}
constexpr inline unsigned long long __brevll(unsigned long long x) {
    return (static_cast<unsigned long long>(__brev(static_cast<unsigned>(x))) << 32) | __brev(static_cast<unsigned>(x >> 32));
}
// 24-bit multiplies: the low 24 bits of each operand (sign-extended for __mul24), low 32 bits
// of the product.
constexpr _EMU_FI int __mul24(int x, int y) {
    const long long a = static_cast<int>(static_cast<unsigned>(x) << 8) >> 8;
    const long long b = static_cast<int>(static_cast<unsigned>(y) << 8) >> 8;
    return static_cast<int>(static_cast<unsigned>(a * b));
}
constexpr _EMU_FI unsigned int __umul24(unsigned int x, unsigned int y) { return (x & 0xffffffu) * (y & 0xffffffu); }
constexpr _EMU_FI int __mulhi(int x, int y) { return static_cast<int>((static_cast<long long>(x) * y) >> 32); }
constexpr _EMU_FI unsigned int __umulhi(unsigned int x, unsigned int y) {
    return static_cast<unsigned>((static_cast<unsigned long long>(x) * y) >> 32);
}
constexpr _EMU_FI long long __mul64hi(long long x, long long y) {
    return static_cast<long long>((static_cast<__int128>(x) * y) >> 64);
}
constexpr _EMU_FI unsigned long long __umul64hi(unsigned long long x, unsigned long long y) {
    return static_cast<unsigned long long>((static_cast<unsigned __int128>(x) * y) >> 64);
}
constexpr inline unsigned int __byte_perm(unsigned int x, unsigned int y, unsigned int s) {
    const unsigned long long src = (static_cast<unsigned long long>(y) << 32) | x;
    unsigned int r = 0;
    for (int i = 0; i < 4; ++i) {
        const unsigned sel = (s >> (4 * i)) & 7u;
        r |= static_cast<unsigned>((src >> (8 * sel)) & 0xffu) << (8 * i);
    }
    return r;
}
constexpr _EMU_FI unsigned int __funnelshift_l(unsigned int lo, unsigned int hi, unsigned int shift) {
    const unsigned long long v = (static_cast<unsigned long long>(hi) << 32) | lo;
    return static_cast<unsigned>((v << (shift & 31u)) >> 32);
}
constexpr _EMU_FI unsigned int __funnelshift_lc(unsigned int lo, unsigned int hi, unsigned int shift) {
    const unsigned long long v = (static_cast<unsigned long long>(hi) << 32) | lo;
    return static_cast<unsigned>((v << (shift < 32u ? shift : 32u)) >> 32);
}
constexpr _EMU_FI unsigned int __funnelshift_r(unsigned int lo, unsigned int hi, unsigned int shift) {
    const unsigned long long v = (static_cast<unsigned long long>(hi) << 32) | lo;
    return static_cast<unsigned>(v >> (shift & 31u));
}
constexpr _EMU_FI unsigned int __funnelshift_rc(unsigned int lo, unsigned int hi, unsigned int shift) {
    const unsigned long long v = (static_cast<unsigned long long>(hi) << 32) | lo;
    return static_cast<unsigned>(v >> (shift < 32u ? shift : 32u));
}
constexpr _EMU_FI unsigned int __sad(int x, int y, unsigned int z) {
    return static_cast<unsigned>(x > y ? static_cast<long long>(x) - y : static_cast<long long>(y) - x) + z;
}
constexpr _EMU_FI unsigned int __usad(unsigned int x, unsigned int y, unsigned int z) { return (x > y ? x - y : y - x) + z; }
// Halving adds without intermediate overflow: (x + y) >> 1 and (x + y + 1) >> 1.
constexpr _EMU_FI int __hadd(int x, int y) { return static_cast<int>((static_cast<long long>(x) + y) >> 1); }
constexpr _EMU_FI int __rhadd(int x, int y) { return static_cast<int>((static_cast<long long>(x) + y + 1) >> 1); }
constexpr _EMU_FI unsigned int __uhadd(unsigned int x, unsigned int y) {
    return static_cast<unsigned>((static_cast<unsigned long long>(x) + y) >> 1);
}
constexpr _EMU_FI unsigned int __urhadd(unsigned int x, unsigned int y) {
    return static_cast<unsigned>((static_cast<unsigned long long>(x) + y + 1) >> 1);
}
// dp4a / dp2a: byte (and halfword) dot products accumulated modulo 2^32.
namespace cuda_emu_detail {
template <bool S> constexpr long long byte_of(unsigned v, int i) {
    return S ? static_cast<long long>(static_cast<signed char>(v >> (8 * i))) : static_cast<long long>((v >> (8 * i)) & 0xffu);
}
template <bool S> constexpr long long half_of(unsigned v, int i) {
    return S ? static_cast<long long>(static_cast<short>(v >> (16 * i))) : static_cast<long long>((v >> (16 * i)) & 0xffffu);
}
template <bool S> constexpr unsigned dp4a(unsigned a, unsigned b, unsigned c) {
    long long s = 0;
    for (int i = 0; i < 4; ++i) s += byte_of<S>(a, i) * byte_of<S>(b, i);
    return static_cast<unsigned>(s) + c;
}
template <bool S> constexpr unsigned dp2a(unsigned a, unsigned b, unsigned c, int hi) {
    const long long s = half_of<S>(a, 0) * byte_of<S>(b, 2 * hi) + half_of<S>(a, 1) * byte_of<S>(b, 2 * hi + 1);
    return static_cast<unsigned>(s) + c;
}
}  // namespace cuda_emu_detail
inline int __dp4a(int a, int b, int c) { return static_cast<int>(_EMU_D::dp4a<true>(a, b, c)); }
inline unsigned int __dp4a(unsigned int a, unsigned int b, unsigned int c) { return _EMU_D::dp4a<false>(a, b, c); }
inline int __dp4a(char4 a, char4 b, int c) { return __dp4a(_EMU_D::bitcast<int>(a), _EMU_D::bitcast<int>(b), c); }
inline unsigned int __dp4a(uchar4 a, uchar4 b, unsigned int c) {
    return __dp4a(_EMU_D::bitcast<unsigned>(a), _EMU_D::bitcast<unsigned>(b), c);
}
inline int __dp2a_lo(int a, int b, int c) { return static_cast<int>(_EMU_D::dp2a<true>(a, b, c, 0)); }
inline unsigned int __dp2a_lo(unsigned int a, unsigned int b, unsigned int c) { return _EMU_D::dp2a<false>(a, b, c, 0); }
inline int __dp2a_lo(short2 a, char4 b, int c) { return __dp2a_lo(_EMU_D::bitcast<int>(a), _EMU_D::bitcast<int>(b), c); }
inline unsigned int __dp2a_lo(ushort2 a, uchar4 b, unsigned int c) {
    return __dp2a_lo(_EMU_D::bitcast<unsigned>(a), _EMU_D::bitcast<unsigned>(b), c);
}
inline int __dp2a_hi(int a, int b, int c) { return static_cast<int>(_EMU_D::dp2a<true>(a, b, c, 1)); }
inline unsigned int __dp2a_hi(unsigned int a, unsigned int b, unsigned int c) { return _EMU_D::dp2a<false>(a, b, c, 1); }
inline int __dp2a_hi(short2 a, char4 b, int c) { return __dp2a_hi(_EMU_D::bitcast<int>(a), _EMU_D::bitcast<int>(b), c); }
inline unsigned int __dp2a_hi(ushort2 a, uchar4 b, unsigned int c) {
    return __dp2a_hi(_EMU_D::bitcast<unsigned>(a), _EMU_D::bitcast<unsigned>(b), c);
}

// ============================================================================================
// min / max (CUDA's global overload set: crt/math_functions.h).  Non-templates, so they never
// collide with std::min/std::max; mixed signed/unsigned pairs compare as unsigned, as CUDA.
// min/max on float/double follow fminf/fmin (a NaN operand is ignored).
// ============================================================================================
constexpr _EMU_FI int min(const int a, const int b) { return a < b ? a : b; }
constexpr _EMU_FI unsigned int umin(const unsigned int a, const unsigned int b) { return a < b ? a : b; }
constexpr _EMU_FI long long llmin(const long long a, const long long b) { return a < b ? a : b; }
constexpr _EMU_FI unsigned long long ullmin(const unsigned long long a, const unsigned long long b) { return a < b ? a : b; }
constexpr _EMU_FI int max(const int a, const int b) { return a > b ? a : b; }
constexpr _EMU_FI unsigned int umax(const unsigned int a, const unsigned int b) { return a > b ? a : b; }
constexpr _EMU_FI long long llmax(const long long a, const long long b) { return a > b ? a : b; }
constexpr _EMU_FI unsigned long long ullmax(const unsigned long long a, const unsigned long long b) { return a > b ? a : b; }
#define _EMU_MINMAX(R, A, B)                                                                        \
    constexpr _EMU_FI R min(const A a, const B b) { return static_cast<R>(a) < static_cast<R>(b) ? static_cast<R>(a) : static_cast<R>(b); } \
    constexpr _EMU_FI R max(const A a, const B b) { return static_cast<R>(a) > static_cast<R>(b) ? static_cast<R>(a) : static_cast<R>(b); }
_EMU_MINMAX(unsigned int, unsigned int, unsigned int)
_EMU_MINMAX(unsigned int, int, unsigned int)
_EMU_MINMAX(unsigned int, unsigned int, int)
_EMU_MINMAX(long, long, long)
_EMU_MINMAX(unsigned long, unsigned long, unsigned long)
_EMU_MINMAX(unsigned long, long, unsigned long)
_EMU_MINMAX(unsigned long, unsigned long, long)
_EMU_MINMAX(long long, long long, long long)
_EMU_MINMAX(unsigned long long, unsigned long long, unsigned long long)
_EMU_MINMAX(unsigned long long, long long, unsigned long long)
_EMU_MINMAX(unsigned long long, unsigned long long, long long)
#undef _EMU_MINMAX
inline float min(const float a, const float b) { return ::fminf(a, b); }
inline double min(const double a, const double b) { return ::fmin(a, b); }
inline double min(const float a, const double b) { return ::fmin(static_cast<double>(a), b); }
inline double min(const double a, const float b) { return ::fmin(a, static_cast<double>(b)); }
inline float max(const float a, const float b) { return ::fmaxf(a, b); }
inline double max(const double a, const double b) { return ::fmax(a, b); }
inline double max(const float a, const double b) { return ::fmax(static_cast<double>(a), b); }
inline double max(const double a, const float b) { return ::fmax(a, static_cast<double>(b)); }

// ============================================================================================
// Cache-hinted loads and stores: plain memory accesses on the CPU.
// ============================================================================================
namespace cuda_emu_detail { template <class T> struct ident { using type = T; }; }
template <class T> _EMU_FI T __ldg(const T* p) { return *p; }
template <class T> _EMU_FI T __ldcg(const T* p) { return *p; }
template <class T> _EMU_FI T __ldca(const T* p) { return *p; }
template <class T> _EMU_FI T __ldcs(const T* p) { return *p; }
template <class T> _EMU_FI T __ldlu(const T* p) { return *p; }
template <class T> _EMU_FI T __ldcv(const T* p) { return *p; }
template <class T> _EMU_FI void __stcg(T* p, typename _EMU_D::ident<T>::type v) { *p = v; }
template <class T> _EMU_FI void __stcs(T* p, typename _EMU_D::ident<T>::type v) { *p = v; }
template <class T> _EMU_FI void __stwb(T* p, typename _EMU_D::ident<T>::type v) { *p = v; }
template <class T> _EMU_FI void __stwt(T* p, typename _EMU_D::ident<T>::type v) { *p = v; }

// ============================================================================================
// Atomics.  Blocks run concurrently on several OS threads, so these are real atomic RMWs on
// plain memory (GCC __atomic builtins, sequentially consistent: a strengthening of CUDA's
// relaxed atomics, never a weakening).  All return the old value, as CUDA.
//
// Overload set = CUDA 12/13's (device_atomic_functions.h, sm_20/32/60 atomic headers,
// crt/sm_70_rt.h, crt/sm_90_rt.h, cuda_fp16.h, cuda_bf16.h).
// atomicMax/atomicMin on float/double: CUDA does NOT provide them (checked against the CUDA
// 13.0 headers: only int, unsigned, long long, unsigned long long overloads, plus
// _block/_system; libcu++'s cuda::atomic_ref::fetch_max is a separate API), so neither do we:
// a kernel using them would not compile with NVRTC either.
// ============================================================================================
namespace cuda_emu_detail {
// may_alias views, so the bit-pattern atomics on float/double/16-bit objects stay correct under
// strict aliasing.
typedef unsigned short __attribute__((may_alias)) u16a;
typedef unsigned int __attribute__((may_alias)) u32a;
typedef unsigned long long __attribute__((may_alias)) u64a;

// Generic read-modify-write by compare-and-swap: *p = f(old), returns old.
template <class T, class F>
inline T cas_loop(T* p, F f) {
    T old = __atomic_load_n(p, __ATOMIC_RELAXED);
    while (!__atomic_compare_exchange_n(p, &old, f(old), true, __ATOMIC_SEQ_CST, __ATOMIC_RELAXED)) {
    }
    return old;
}
// The same on the bit pattern of a 2/4/8-byte object; f maps old bits to new bits.
template <class F>
inline unsigned short cas_bits16(void* p, F f) {
    u16a* q = static_cast<u16a*>(p);
    unsigned short old = __atomic_load_n(q, __ATOMIC_RELAXED);
    while (!__atomic_compare_exchange_n(q, &old, static_cast<unsigned short>(f(old)), true, __ATOMIC_SEQ_CST,
                                        __ATOMIC_RELAXED)) {
    }
    return old;
}
template <class F>
inline unsigned int cas_bits32(void* p, F f) {
    u32a* q = static_cast<u32a*>(p);
    unsigned int old = __atomic_load_n(q, __ATOMIC_RELAXED);
    while (!__atomic_compare_exchange_n(q, &old, static_cast<unsigned int>(f(old)), true, __ATOMIC_SEQ_CST,
                                        __ATOMIC_RELAXED)) {
    }
    return old;
}
template <class F>
inline unsigned long long cas_bits64(void* p, F f) {
    u64a* q = static_cast<u64a*>(p);
    unsigned long long old = __atomic_load_n(q, __ATOMIC_RELAXED);
    while (!__atomic_compare_exchange_n(q, &old, static_cast<unsigned long long>(f(old)), true, __ATOMIC_SEQ_CST,
                                        __ATOMIC_RELAXED)) {
    }
    return old;
}
// atom.add.f32 "flushes subnormal inputs and results to sign-preserving zero" (PTX ISA), so
// float atomicAdd does too; the f64/f16/bf16 atomic adds keep subnormals.
inline float ftz(float x) { return std::fabs(x) < 0x1p-126f ? std::copysign(0.0f, x) : x; }
inline float atomic_add_f32(float* addr, float val) {
    const float v = ftz(val);
    return bitcast<float>(cas_bits32(addr, [v](unsigned o) {
        return bitcast<unsigned>(ftz(ftz(bitcast<float>(o)) + v));
    }));
}
inline double atomic_add_f64(double* addr, double v) {
    return bitcast<double>(cas_bits64(addr, [v](unsigned long long o) {
        return bitcast<unsigned long long>(bitcast<double>(o) + v);
    }));
}
template <class H>
inline H atomic_add_h16(H* addr, H val) {
    return mk<H>(cas_bits16(addr, [val](unsigned short o) { return add(mk<H>(o), val).__x; }));
}
template <class H2>
inline H2 atomic_add_h16x2(H2* addr, H2 val) {
    return bitcast<H2>(cas_bits32(addr, [val](unsigned o) {
        const H2 a = bitcast<H2>(o);
        return bitcast<unsigned>(H2(add(a.x, val.x), add(a.y, val.y)));
    }));
}
}  // namespace cuda_emu_detail

#define _EMU_SC __ATOMIC_SEQ_CST
// Add / Sub
inline int atomicAdd(int* a, int v) { return __atomic_fetch_add(a, v, _EMU_SC); }
inline unsigned int atomicAdd(unsigned int* a, unsigned int v) { return __atomic_fetch_add(a, v, _EMU_SC); }
inline unsigned long long atomicAdd(unsigned long long* a, unsigned long long v) { return __atomic_fetch_add(a, v, _EMU_SC); }
inline float atomicAdd(float* a, float v) { return _EMU_D::atomic_add_f32(a, v); }
inline double atomicAdd(double* a, double v) { return _EMU_D::atomic_add_f64(a, v); }
inline __half atomicAdd(__half* a, const __half v) { return _EMU_D::atomic_add_h16(a, v); }
inline __nv_bfloat16 atomicAdd(__nv_bfloat16* a, const __nv_bfloat16 v) { return _EMU_D::atomic_add_h16(a, v); }
// CUDA guarantees atomicity per 16-bit half only; one 32-bit CAS is stronger.
inline __half2 atomicAdd(__half2* a, const __half2 v) { return _EMU_D::atomic_add_h16x2(a, v); }
inline __nv_bfloat162 atomicAdd(__nv_bfloat162* a, const __nv_bfloat162 v) { return _EMU_D::atomic_add_h16x2(a, v); }
// sm_90 vector adds: atomic per element, as CUDA.
inline float2 atomicAdd(float2* a, float2 v) { return make_float2(atomicAdd(&a->x, v.x), atomicAdd(&a->y, v.y)); }
inline float4 atomicAdd(float4* a, float4 v) {
    return make_float4(atomicAdd(&a->x, v.x), atomicAdd(&a->y, v.y), atomicAdd(&a->z, v.z), atomicAdd(&a->w, v.w));
}
inline int atomicSub(int* a, int v) { return __atomic_fetch_sub(a, v, _EMU_SC); }
inline unsigned int atomicSub(unsigned int* a, unsigned int v) { return __atomic_fetch_sub(a, v, _EMU_SC); }
// Exch
inline int atomicExch(int* a, int v) { return __atomic_exchange_n(a, v, _EMU_SC); }
inline unsigned int atomicExch(unsigned int* a, unsigned int v) { return __atomic_exchange_n(a, v, _EMU_SC); }
inline unsigned long long atomicExch(unsigned long long* a, unsigned long long v) { return __atomic_exchange_n(a, v, _EMU_SC); }
inline float atomicExch(float* a, float v) {
    return _EMU_D::bitcast<float>(
        __atomic_exchange_n(reinterpret_cast<_EMU_D::u32a*>(a), _EMU_D::bitcast<unsigned>(v), _EMU_SC));
}
// Min / Max (integers only, see above)
#define _EMU_ATOMIC_MINMAX(T)                                                                       \
    inline T atomicMin(T* a, T v) { return _EMU_D::cas_loop(a, [v](T o) { return v < o ? v : o; }); } \
    inline T atomicMax(T* a, T v) { return _EMU_D::cas_loop(a, [v](T o) { return v > o ? v : o; }); }
_EMU_ATOMIC_MINMAX(int)
_EMU_ATOMIC_MINMAX(unsigned int)
_EMU_ATOMIC_MINMAX(long long)
_EMU_ATOMIC_MINMAX(unsigned long long)
#undef _EMU_ATOMIC_MINMAX
// Inc / Dec with CUDA's wrap-around: inc: old >= val ? 0 : old + 1;
// dec: (old == 0 || old > val) ? val : old - 1.
inline unsigned int atomicInc(unsigned int* a, unsigned int val) {
    return _EMU_D::cas_loop(a, [val](unsigned o) { return o >= val ? 0u : o + 1u; });
}
inline unsigned int atomicDec(unsigned int* a, unsigned int val) {
    return _EMU_D::cas_loop(a, [val](unsigned o) { return (o == 0u || o > val) ? val : o - 1u; });
}
// CAS
#define _EMU_ATOMIC_CAS(T)                                                                          \
    inline T atomicCAS(T* a, T compare, T val) {                                                    \
        __atomic_compare_exchange_n(a, &compare, val, false, _EMU_SC, _EMU_SC);                     \
        return compare;                                                                             \
    }
_EMU_ATOMIC_CAS(int)
_EMU_ATOMIC_CAS(unsigned int)
_EMU_ATOMIC_CAS(unsigned long long)
_EMU_ATOMIC_CAS(unsigned short)
#undef _EMU_ATOMIC_CAS
// Bitwise
#define _EMU_ATOMIC_BITS(T)                                                                         \
    inline T atomicAnd(T* a, T v) { return __atomic_fetch_and(a, v, _EMU_SC); }                     \
    inline T atomicOr(T* a, T v) { return __atomic_fetch_or(a, v, _EMU_SC); }                       \
    inline T atomicXor(T* a, T v) { return __atomic_fetch_xor(a, v, _EMU_SC); }
_EMU_ATOMIC_BITS(int)
_EMU_ATOMIC_BITS(unsigned int)
_EMU_ATOMIC_BITS(long long)
_EMU_ATOMIC_BITS(unsigned long long)
#undef _EMU_ATOMIC_BITS
#undef _EMU_SC

// _block / _system scopes: every scope is the whole machine here.  The forwarders resolve
// against the same overload set with the same argument types, so they pick what CUDA picks.
#define _EMU_ATOMIC_SCOPES(NAME)                                                                    \
    template <class P, class... A> inline auto NAME##_block(P* p, A... a) -> decltype(NAME(p, a...)) { return NAME(p, a...); } \
    template <class P, class... A> inline auto NAME##_system(P* p, A... a) -> decltype(NAME(p, a...)) { return NAME(p, a...); }
_EMU_ATOMIC_SCOPES(atomicAdd)
_EMU_ATOMIC_SCOPES(atomicSub)
_EMU_ATOMIC_SCOPES(atomicExch)
_EMU_ATOMIC_SCOPES(atomicMin)
_EMU_ATOMIC_SCOPES(atomicMax)
_EMU_ATOMIC_SCOPES(atomicInc)
_EMU_ATOMIC_SCOPES(atomicDec)
_EMU_ATOMIC_SCOPES(atomicCAS)
_EMU_ATOMIC_SCOPES(atomicAnd)
_EMU_ATOMIC_SCOPES(atomicOr)
_EMU_ATOMIC_SCOPES(atomicXor)
#undef _EMU_ATOMIC_SCOPES

// Memory fences: a full fence for every scope.
inline void __threadfence() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
inline void __threadfence_block() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
inline void __threadfence_system() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }

#undef _EMU_BOTH
#undef _EMU_ALL_MODES
#undef _EMU_HALF_FROM_F
#undef _EMU_HALF_FROM_D
#undef _EMU_HALF_FROM_I
#undef _EMU_HALF_TO_F
#undef _EMU_HALF_TO_I
#undef _EMU_BF16_FROM_F
#undef _EMU_BF16_FROM_D
#undef _EMU_BF16_FROM_I
#undef _EMU_BF16_TO_F
#undef _EMU_BF16_TO_I
#undef _EMU_H16_BASE
#undef _EMU_H16_CONVERSIONS
#undef _EMU_AL
#undef _EMU_D
#undef _EMU_FI

#endif  // CUDNNLITE_EMU_TYPES_H
