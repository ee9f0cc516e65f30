// Self-test kernels of the emulator's race check (CUDNNLITE_EMU_RACECHECK=1,
// cudnnlite/runtime/emulator/include/emu_racecheck.h). Kernels named `planted_*`
// carry a data race the check must report (with both source lines); the others are
// race-free and must pass. Every kernel is also valid CUDA (the same results on a GPU
// for the race-free ones).
//
// Kernels
//   planted_missing_syncthreads  each thread reads its neighbour's shared value with no
//                                barrier after the write (shared memory, read after write)
//   planted_warp_synchronous     warp-synchronous tree sum in shared memory without
//                                __syncwarp (the pre-Volta idiom; a race on Volta+)
//   planted_global_race          two threads of a block write one global word
//   planted_dynamic_shared       pairs of threads swap values through dynamic shared
//                                memory without a barrier
//   neighbour_with_syncthreads   planted_missing_syncthreads with the barrier
//   warp_sum_with_syncwarp       planted_warp_synchronous with __syncwarp between steps
//   warp_shuffle_exchange        lanes publish through shared memory, __syncwarp, read a
//                                neighbour's value; then a __shfl_xor_sync sum
//   atomic_histogram             every thread atomicAdds into shared bins, barrier, then
//                                one thread per bin stores the block's count (no race)
//   barrier_reuse                two rounds write/read one shared word per thread pair:
//                                the alternating barrier objects must not hide or invent
#include "common/cudnnlite.cuh"

extern "C" __global__ void planted_missing_syncthreads(const float* __restrict__ x,
                                                       float* __restrict__ out) {
    __shared__ float buf[256];
    int t = threadIdx.x;
    buf[t] = x[blockIdx.x * blockDim.x + t];
    // missing __syncthreads()
    out[blockIdx.x * blockDim.x + t] = buf[(t + 1) % blockDim.x];
}

extern "C" __global__ void neighbour_with_syncthreads(const float* __restrict__ x,
                                                      float* __restrict__ out) {
    __shared__ float buf[256];
    int t = threadIdx.x;
    buf[t] = x[blockIdx.x * blockDim.x + t];
    __syncthreads();
    out[blockIdx.x * blockDim.x + t] = buf[(t + 1) % blockDim.x];
}

// One warp per 32 values: out[warp] = their sum.
extern "C" __global__ void planted_warp_synchronous(const float* __restrict__ x,
                                                    float* __restrict__ out) {
    __shared__ float buf[256];
    int t = threadIdx.x;
    int lane = t & 31;
    buf[t] = x[blockIdx.x * blockDim.x + t];
    __syncthreads();
    volatile float* v = buf;
    // The pre-Volta idiom: lanes of a warp were assumed to run in lockstep.
    if (lane < 16) v[t] += v[t + 16];
    if (lane < 8) v[t] += v[t + 8];
    if (lane < 4) v[t] += v[t + 4];
    if (lane < 2) v[t] += v[t + 2];
    if (lane < 1) v[t] += v[t + 1];
    if (lane == 0) out[(blockIdx.x * blockDim.x + t) / 32] = v[t];
}

extern "C" __global__ void warp_sum_with_syncwarp(const float* __restrict__ x,
                                                  float* __restrict__ out) {
    __shared__ float buf[256];
    int t = threadIdx.x;
    int lane = t & 31;
    buf[t] = x[blockIdx.x * blockDim.x + t];
    __syncthreads();
    for (int offset = 16; offset > 0; offset /= 2) {
        float other = 0.0f;
        if (lane < offset) other = buf[t + offset];
        __syncwarp();
        if (lane < offset) buf[t] += other;
        __syncwarp();
    }
    if (lane == 0) out[(blockIdx.x * blockDim.x + t) / 32] = buf[t];
}

extern "C" __global__ void planted_global_race(int* out) {
    // Threads 0 and 1 of each block store to the same word.
    if (threadIdx.x < 2) out[blockIdx.x] = (int)threadIdx.x;
}

extern "C" __global__ void planted_dynamic_shared(const float* __restrict__ x,
                                                  float* __restrict__ out) {
    DYNAMIC_SHARED(float, buf);
    int t = threadIdx.x;
    buf[t] = x[blockIdx.x * blockDim.x + t];
    // missing __syncthreads() (or __syncwarp(): the pair is in one warp)
    out[blockIdx.x * blockDim.x + t] = buf[t ^ 1];
}

// out[t] = x[t ^ 1] through shared memory ordered by __syncwarp, plus the warp's sum
// of x by shuffles in sums[warp].
extern "C" __global__ void warp_shuffle_exchange(const float* __restrict__ x,
                                                 float* __restrict__ out,
                                                 float* __restrict__ sums) {
    __shared__ float buf[256];
    int t = threadIdx.x;
    int i = blockIdx.x * blockDim.x + t;
    float v = x[i];
    buf[t] = v;
    __syncwarp();
    out[i] = buf[t ^ 1];
    for (int m = 16; m > 0; m /= 2) v += __shfl_xor_sync(0xffffffffu, v, m);
    if ((t & 31) == 0) sums[i / 32] = v;
}

// bins[b * nbins + k] = how many of the block's values fall in bin k.
extern "C" __global__ void atomic_histogram(const int* __restrict__ x, int* __restrict__ bins,
                                            int nbins) {
    __shared__ int counts[64];
    int t = threadIdx.x;
    if (t < nbins) counts[t] = 0;
    __syncthreads();
    atomicAdd(&counts[x[blockIdx.x * blockDim.x + t] % nbins], 1);
    __syncthreads();
    if (t < nbins) bins[blockIdx.x * nbins + t] = counts[t];
}

// Round r: thread t writes word[t], barrier, reads word[t ^ 1], barrier. Race-free
// with both barriers; the second barrier separates a read from the next round's write.
extern "C" __global__ void barrier_reuse(float* __restrict__ out, int rounds) {
    __shared__ float word[256];
    int t = threadIdx.x;
    float acc = 0.0f;
    for (int r = 0; r < rounds; ++r) {
        word[t] = (float)(t + r);
        __syncthreads();
        acc += word[t ^ 1];
        __syncthreads();
    }
    out[blockIdx.x * blockDim.x + t] = acc;
}
