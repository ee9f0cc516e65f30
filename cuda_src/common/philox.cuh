// Philox4x32-10, the counter-based generator of Salmon et al., "Parallel random numbers:
// as easy as 1, 2, 3" (SC'11, the Random123 library). A pure function of a 128-bit
// counter and a 64-bit key: no state, so any element's random bits can be computed by
// any thread, on any device, in any order, and come out identical.
//
// One call gives four 32-bit words. cudnnlite's convention for per-element streams
// (cudnnlite/reference/dropout.py mirrors it exactly):
//   key     = (seed & 0xffffffff, seed >> 32)
//   counter = (g & 0xffffffff, g >> 32, offset & 0xffffffff, offset >> 32), g = element / 4
//   element e uses word e % 4 of the call for its group g.
#pragma once

namespace cl {

struct Philox4 {
    unsigned int v[4];
};

constexpr unsigned int kPhiloxM0 = 0xD2511F53u;
constexpr unsigned int kPhiloxM1 = 0xCD9E8D57u;
constexpr unsigned int kPhiloxW0 = 0x9E3779B9u;  // key bumps (golden ratio, sqrt(3) - 1)
constexpr unsigned int kPhiloxW1 = 0xBB67AE85u;

__device__ __forceinline__ Philox4 philox4x32_10(Philox4 c, unsigned int k0, unsigned int k1) {
#pragma unroll
    for (int round = 0; round < 10; ++round) {
        if (round > 0) {
            k0 += kPhiloxW0;
            k1 += kPhiloxW1;
        }
        const unsigned int hi0 = __umulhi(kPhiloxM0, c.v[0]), lo0 = kPhiloxM0 * c.v[0];
        const unsigned int hi1 = __umulhi(kPhiloxM1, c.v[2]), lo1 = kPhiloxM1 * c.v[2];
        Philox4 n;
        n.v[0] = hi1 ^ c.v[1] ^ k0;
        n.v[1] = lo1;
        n.v[2] = hi0 ^ c.v[3] ^ k1;
        n.v[3] = lo0;
        c = n;
    }
    return c;
}

// The four words for element group g (elements 4g .. 4g+3) of stream (seed, offset).
__device__ __forceinline__ Philox4 philox_group(unsigned long long seed, unsigned long long offset,
                                                unsigned long long g) {
    Philox4 c;
    c.v[0] = (unsigned int)g;
    c.v[1] = (unsigned int)(g >> 32);
    c.v[2] = (unsigned int)offset;
    c.v[3] = (unsigned int)(offset >> 32);
    return philox4x32_10(c, (unsigned int)seed, (unsigned int)(seed >> 32));
}

// Word i (0..3) of a draw, by selects: indexing v with a run-time i would put the draw in
// local memory (a stack store and load per draw in SASS).
__device__ __forceinline__ unsigned int philox_word(const Philox4& w, unsigned int i) {
    return i == 0 ? w.v[0] : i == 1 ? w.v[1] : i == 2 ? w.v[2] : w.v[3];
}

}  // namespace cl
