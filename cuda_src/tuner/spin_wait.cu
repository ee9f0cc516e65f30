// spin_wait: one thread that holds its stream for `cycles` SM clock cycles.
//
// The autotuner (cudnnlite/dispatch/tuner.py) queues a candidate's launches behind it:
// while the GPU spins, Python issues the launches, and once the spin ends they run back
// to back, so the CUDA events recorded after the spin and after the last launch time GPU
// work only, not the host time between launches.
//
// Defines: none.
#include "common/cudnnlite.cuh"

extern "C" __global__ void __launch_bounds__(32) spin_wait(long long cycles) {
    const long long start = clock64();
    while (clock64() - start < cycles) {
    }
}
