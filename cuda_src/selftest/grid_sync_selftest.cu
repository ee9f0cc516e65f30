// Self-test kernels for the grid-wide barrier (common/grid_sync.cuh) and cooperative
// launches; the same test body checks the emulator and, on a GPU, CUDA.
//
// Kernels
//   grid_exchange   `rounds` rounds: every thread writes its slot, grid_sync, then
//                   sums the same thread's slot of every block (wrong without the
//                   barrier); slots are double-buffered so one barrier per round
//                   suffices
//   grid_sync_once  one grid_sync(counter, target), with planted faults on request:
//                   block `quitter` returns first, or (mixed != 0) thread 0 of each
//                   block meets __syncthreads while the others meet grid_sync
#include "common/cudnnlite.cuh"
#include "common/grid_sync.cuh"

__device__ __forceinline__ unsigned linear_block() {
    return blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
}

// slots: 2 x num_blocks x threads (written), out: num_blocks x threads,
// counter: zeroed by the host; after the launch it holds rounds * num_blocks.
extern "C" __global__ void grid_exchange(int* __restrict__ slots, long long* __restrict__ out,
                                         unsigned int* counter, int rounds) {
    const unsigned num_blocks = gridDim.x * gridDim.y * gridDim.z;
    const unsigned threads = blockDim.x;
    const unsigned b = linear_block();
    const unsigned t = threadIdx.x;
    long long acc = 0;
    for (int r = 0; r < rounds; ++r) {
        int* buf = slots + (size_t)(r & 1) * num_blocks * threads;
        buf[b * threads + t] = (r * (int)num_blocks + (int)b) * (int)threads + (int)t + 1;
        cl::grid_sync(counter, (unsigned)(r + 1) * num_blocks);
        for (unsigned c = 0; c < num_blocks; ++c) acc += buf[c * threads + t];
    }
    out[b * threads + t] = acc;
}

extern "C" __global__ void grid_sync_once(unsigned int* counter, unsigned int target, int quitter,
                                          int mixed) {
    if ((int)linear_block() == quitter) return;  // planted: this block never arrives
    if (mixed && threadIdx.x == 0) {
        __syncthreads();  // planted: a block barrier where its siblings meet grid_sync
    } else {
        cl::grid_sync(counter, target);
    }
}
