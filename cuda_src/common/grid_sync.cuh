// grid_sync.cuh — a grid-wide barrier from global atomics, for persistent kernels
// (one launch that steps through time, all blocks meeting between steps).
//
//   grid_sync(counter, target)
//
//   counter  a global uint32 the host zeroed before the launch, used by nothing else
//   target   (k + 1) * num_blocks for the k-th barrier of the launch (k = 0, 1, ...)
//
// Contract (a GPU hangs or races when it is broken; the emulator reports it):
//  - the grid is co-resident: launch with `kernel(..., cooperative=True)` and at most
//    `backend.max_cooperative_blocks(kernel, block_threads, shared_mem)` blocks;
//  - every block calls grid_sync the same number of times, and every thread of each
//    block reaches each call (it contains __syncthreads);
//  - writes before the barrier are visible to every block after it (a fence on
//    each side of the arrival).
//
// No cooperative_groups header and no -rdc: NVRTC builds it like any kernel.
// Under the emulator (CUDNNLITE_EMULATOR) it is a native barrier of the emulator
// (emu::grid_sync in cuda_emu.h: spinning fibers on a few cores would crawl), with
// the same counter and target: *counter ends at the same value, and the emulator
// checks that target follows the (k + 1) * num_blocks rule.
#pragma once

#ifdef CUDNNLITE_EMULATOR

namespace cl {
// The default arguments name the caller's line in the emulator's error reports.
inline void grid_sync(unsigned int* counter, unsigned int target,
                      const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
    ::emu::grid_sync(counter, target, file, line);
}
}  // namespace cl

#else

namespace cl {
__device__ __forceinline__ void grid_sync(unsigned int* counter, unsigned int target) {
    __syncthreads();  // the whole block has arrived, and its writes are done
    if (threadIdx.x == 0 && threadIdx.y == 0 && threadIdx.z == 0) {
        __threadfence();  // this block's writes before its arrival is counted
        atomicAdd(counter, 1u);
        // volatile: re-read global memory each time, never a register copy.
        while (*static_cast<volatile unsigned int*>(counter) < target) {
#if __CUDA_ARCH__ >= 700
            __nanosleep(32);  // fewer polls competing with the blocks still working
#endif
        }
        __threadfence();  // other blocks' writes, ordered before this block's reads
    }
    __syncthreads();
}
}  // namespace cl

#endif
