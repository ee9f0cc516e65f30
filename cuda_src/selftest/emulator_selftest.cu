// Self-test kernels for the runtime: each exercises one construct of the CUDA
// language so that the same test body checks the emulator and, on a GPU, CUDA.
// Some kernels carry a planted bug (named `planted_*`): the emulator's checks
// must catch them.
//
// Kernels
//   block_reduce_sum     shared-memory tree reduction, barriers inside a loop
//   early_exit_barrier   threads >= active return before a barrier
//   barrier_predicates   __syncthreads_count / _and / _or
//   divergent_barrier    two barrier sites in one round (error on the emulator)
//   warp_op              one warp operation with a mask, chosen by `op`
//   warp_reduce          full-warp butterfly reduction with __shfl_xor_sync
//   atomics              atomics from every thread of every block
//   dynamic_reverse      reverses each block's slice through dynamic shared memory
//   planted_missing_barrier   reads a neighbour's shared value without a barrier
//   planted_read_before_write reads shared memory nobody wrote
//   barrier_loop_bench   `iters` barriers per thread (fiber switch benchmark)
//   tiled_matmul         16x16 shared-memory tiled C = A*B (barrier-heavy throughput)
//   half_bf16_ops        16-bit conversions and one op per 16-bit type
//   planted_deadlock     lane 0 at a barrier, the rest of its warp in __syncwarp
//   planted_out_of_bounds writes x[n] (AddressSanitizer build catches it)
//   planted_misaligned   y[i] = the float4 at x + 4 i + offset: offset % 4 != 0 is a
//                        misaligned address on a GPU (the AddressSanitizer build's
//                        alignment check catches it)
//   trap_if              __trap() on request (execution error)
//   partial_warp_reduce  butterfly sum per warp in a block whose last warp is partial:
//                        with the mask of the lanes present (correct), or with the full
//                        mask (planted: undefined on a GPU, an error on the emulator)
//   planted_warp_op_after_exit  lanes >= keep return, the rest shuffle with the full mask
#include "common/cudnnlite.cuh"

extern "C" __global__ void block_reduce_sum(const float* __restrict__ x, float* __restrict__ out, int n) {
    __shared__ float buf[256];
    int tid = threadIdx.x;
    int i = blockIdx.x * blockDim.x + tid;
    buf[tid] = i < n ? x[i] : 0.0f;
    __syncthreads();
    for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
        if (tid < stride) buf[tid] += buf[tid + stride];
        __syncthreads();
    }
    if (tid == 0) out[blockIdx.x] = buf[0];
}

extern "C" __global__ void early_exit_barrier(int* out, int active) {
    __shared__ int vals[1024];
    int tid = threadIdx.x;
    if (tid >= active) return;  // exited threads must not block the barrier below
    vals[tid] = tid * 3;
    __syncthreads();
    out[tid] = vals[active - 1 - tid];
}

extern "C" __global__ void barrier_predicates(int* out, int modulo) {
    int tid = threadIdx.x;
    int pred = (tid % modulo) == 0;
    int count = __syncthreads_count(pred);
    int all = __syncthreads_and(pred);
    int any = __syncthreads_or(pred);
    out[3 * tid + 0] = count;
    out[3 * tid + 1] = all;
    out[3 * tid + 2] = any;
}

extern "C" __global__ void divergent_barrier(int* out) {
    int tid = threadIdx.x;
    if (tid % 2 == 0) {
        __syncthreads();
        out[tid] = 1;
    } else {
        __syncthreads();
        out[tid] = 2;
    }
}

// op: 0 shfl, 1 shfl_up, 2 shfl_down, 3 shfl_xor, 4 ballot, 5 any, 6 all, 7 syncwarp,
// 8 activemask, 9 match_any, 10 match_all, 11 reduce_add, 12 reduce_min (int),
// 13 reduce_max (unsigned), 14 reduce_xor (__reduce_*: sm_80+, trap below). Lanes outside
// `mask` skip the operation; `pred_mod` drives the votes and the matched values.
extern "C" __global__ void warp_op(int* out, unsigned mask, int op, int param, int width, int pred_mod) {
    int tid = threadIdx.x;
    int lane = tid % 32;
    int value = 100 + tid;
    int result = -1;
    if ((mask >> lane) & 1u) {
        int pred = (lane % pred_mod) == 0;
        switch (op) {
            case 0: result = __shfl_sync(mask, value, param, width); break;
            case 1: result = __shfl_up_sync(mask, value, param, width); break;
            case 2: result = __shfl_down_sync(mask, value, param, width); break;
            case 3: result = __shfl_xor_sync(mask, value, param, width); break;
            case 4: result = (int)__ballot_sync(mask, pred); break;
            case 5: result = __any_sync(mask, pred); break;
            case 6: result = __all_sync(mask, pred); break;
            case 7: __syncwarp(mask); result = 7; break;
            case 8: result = (int)__activemask(); break;
            case 9: result = (int)__match_any_sync(mask, lane % pred_mod); break;
            case 10: {
                int same = 0;
                const unsigned m = __match_all_sync(mask, lane % pred_mod, &same);
                result = same ? (int)m : -2 - (int)m;
                break;
            }
#if defined(CUDNNLITE_EMULATOR) || __CUDA_ARCH__ >= 800
            case 11: result = __reduce_add_sync(mask, value); break;
            case 12: result = __reduce_min_sync(mask, lane % pred_mod - lane); break;
            case 13: result = (int)__reduce_max_sync(mask, (unsigned)value * 2654435761u); break;
            case 14: result = (int)__reduce_xor_sync(mask, (unsigned)value * 40503u); break;
#else
            case 11: case 12: case 13: case 14: __trap(); break;
#endif
        }
    }
    out[tid] = result;
}

extern "C" __global__ void warp_reduce(const float* __restrict__ x, float* __restrict__ out) {
    int tid = blockIdx.x * blockDim.x + threadIdx.x;
    float v = x[tid];
    for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
    out[tid] = v;
}

// counters: [0] int add, [1] unsigned add, [2] int max, [3] int min, [4] CAS-increment,
// [5] unsigned inc with wrap, [6] exch (last writer wins: any thread id);
// fsum/dsum: float and double adds of small integers (exact sums).
extern "C" __global__ void atomics(int* counters, float* fsum, double* dsum, unsigned wrap) {
    int gid = blockIdx.x * blockDim.x + threadIdx.x;
    atomicAdd(&counters[0], 1);
    atomicAdd(reinterpret_cast<unsigned*>(&counters[1]), 2u);
    atomicMax(&counters[2], gid);
    atomicMin(&counters[3], -gid);
    int old = counters[4];
    int assumed;
    do {
        assumed = old;
        old = atomicCAS(&counters[4], assumed, assumed + 1);
    } while (old != assumed);
    atomicInc(reinterpret_cast<unsigned*>(&counters[5]), wrap);
    atomicExch(&counters[6], gid);
    atomicAdd(fsum, (float)(gid % 4));
    atomicAdd(dsum, (double)(gid % 8));
}

extern "C" __global__ void dynamic_reverse(const float* __restrict__ x, float* __restrict__ y, int n) {
    DYNAMIC_SHARED(float, tile);
    int tid = threadIdx.x;
    int base = blockIdx.x * blockDim.x;
    if (base + tid < n) tile[tid] = x[base + tid];
    __syncthreads();
    int count = min((int)blockDim.x, n - base);
    if (tid < count) y[base + tid] = tile[count - 1 - tid];
}

// Bug: no __syncthreads between the write and the read of the neighbour's slot.
// Thread order 0, 1, 2, ... happens to work; any other order reads a stale value.
extern "C" __global__ void planted_missing_barrier(float* out) {
    __shared__ float vals[256];
    int tid = threadIdx.x;
    vals[tid] = (float)tid;
    out[tid] = tid > 0 ? vals[tid - 1] : -1.0f;
}

// Bug: thread t reads slot t+1, which no thread has written (only even slots are).
extern "C" __global__ void planted_read_before_write(float* out) {
    __shared__ float vals[256];
    int tid = threadIdx.x;
    if (tid % 2 == 0) vals[tid] = 1.0f;
    __syncthreads();
    out[tid] = vals[(tid + 1) % blockDim.x];
}

extern "C" __global__ void barrier_loop_bench(int* out, int iters) {
    __shared__ int counter[1];
    if (threadIdx.x == 0) counter[0] = 0;
    __syncthreads();
    for (int i = 0; i < iters; ++i) {
        if (threadIdx.x == (unsigned)(i % blockDim.x)) counter[0] += 1;
        __syncthreads();
    }
    if (threadIdx.x == 0) out[blockIdx.x] = counter[0];
}

// C[M,N] = A[M,K] * B[K,N], row-major, 16x16 tiles, one output per thread.
extern "C" __global__ void tiled_matmul(const float* __restrict__ A, const float* __restrict__ B,
                                        float* __restrict__ C, int M, int N, int K) {
    __shared__ float As[16][17];
    __shared__ float Bs[16][17];
    int row = blockIdx.y * 16 + threadIdx.y;
    int col = blockIdx.x * 16 + threadIdx.x;
    float acc = 0.0f;
    for (int k0 = 0; k0 < K; k0 += 16) {
        int ka = k0 + threadIdx.x, kb = k0 + threadIdx.y;
        As[threadIdx.y][threadIdx.x] = (row < M && ka < K) ? A[(long long)row * K + ka] : 0.0f;
        Bs[threadIdx.y][threadIdx.x] = (kb < K && col < N) ? B[(long long)kb * N + col] : 0.0f;
        __syncthreads();
#pragma unroll
        for (int k = 0; k < 16; ++k) acc += As[threadIdx.y][k] * Bs[k][threadIdx.x];
        __syncthreads();
    }
    if (row < M && col < N) C[(long long)row * N + col] = acc;
}

// Round-trips float through __half and __nv_bfloat16 storage and does one op in
// each 16-bit type, so the emulator's rounding is compared with the GPU's.
extern "C" __global__ void half_bf16_ops(const float* __restrict__ a, const float* __restrict__ b,
                                         float* __restrict__ out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    __half ha = __float2half_rn(a[i]), hb = __float2half_rn(b[i]);
    __nv_bfloat16 ba = __float2bfloat16_rn(a[i]), bb = __float2bfloat16_rn(b[i]);
    out[6 * i + 0] = __half2float(ha);
    out[6 * i + 1] = __half2float(__hadd(ha, hb));
    out[6 * i + 2] = __half2float(__hmul(ha, hb));
    out[6 * i + 3] = __bfloat162float(ba);
    out[6 * i + 4] = __bfloat162float(__hadd(ba, bb));
    out[6 * i + 5] = __bfloat162float(__hmul(ba, bb));
}

// Bug: lane 0 waits at a block barrier while the other lanes of its warp wait for
// it in __syncwarp: no thread can proceed (a deadlock error on the emulator).
extern "C" __global__ void planted_deadlock(int* out) {
    if (threadIdx.x == 0) {
        __syncthreads();
    } else {
        __syncwarp();
    }
    out[threadIdx.x] = 1;
}

// Bug: writes one element past the end (caught by the AddressSanitizer build).
extern "C" __global__ void planted_out_of_bounds(float* x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i <= n) x[i] = 1.0f;
}

// Bug unless offset % 4 == 0: a float4 load off its 16-byte boundary (x itself aligned).
extern "C" __global__ void planted_misaligned(const float* x, float4* y, int offset, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = *reinterpret_cast<const float4*>(x + 4 * i + offset);
}

// Stops the kernel with __trap() when flag != 0 (an execution error).
extern "C" __global__ void trap_if(int flag) {
    if (flag != 0 && threadIdx.x == 3) __trap();
}

// Sum of each warp's values in lane 0, for any block size. A warp's lanes are
// [0, lanes): the last warp of a block of 48 threads has 16. The mask of a warp
// operation may name only lanes that exist, so `full_mask` != 0 (0xffffffff in the
// partial warp) is undefined behaviour on a GPU; the correct form passes the lanes
// present, and adds a shuffled value only when its source lane exists (a source lane
// outside the mask returns undefined data).
extern "C" __global__ void partial_warp_reduce(const float* __restrict__ x, float* __restrict__ out,
                                               int full_mask) {
    const int tid = threadIdx.x, lane = tid % 32;
    const int lanes = min(32, (int)blockDim.x - (tid - lane));
    const unsigned present = lanes == 32 ? 0xffffffffu : (1u << lanes) - 1u;
    const unsigned mask = full_mask ? 0xffffffffu : present;
    float v = x[blockIdx.x * blockDim.x + tid];
    for (int off = 16; off > 0; off /= 2) {
        const float o = __shfl_down_sync(mask, v, off);
        if (lane + off < lanes) v += o;
    }
    const int warps = (blockDim.x + 31) / 32;
    if (lane == 0) out[blockIdx.x * warps + tid / 32] = v;
}

// Bug when keep < 32: lanes >= keep of every warp return, then the others shuffle with
// the full mask, which names the exited lanes (undefined behaviour on a GPU).
extern "C" __global__ void planted_warp_op_after_exit(int* out, int keep) {
    const int lane = threadIdx.x % 32;
    if (lane >= keep) return;
    out[threadIdx.x] = __shfl_sync(0xffffffffu, (int)threadIdx.x, 0);
}
