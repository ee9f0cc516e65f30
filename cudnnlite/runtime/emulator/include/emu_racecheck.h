// emu_racecheck.h — the race-check mode of the emulator (CUDNNLITE_EMU_RACECHECK=1):
// ThreadSanitizer sees every CUDA thread of a block as a thread of its own and the
// emulator's barriers and warp operations as the only synchronization between them.
//
// Built only when the module is compiled with -fsanitize=thread (build.py adds it,
// with --param=tsan-instrument-func-entry-exit=0: a CUDA thread's TSan identity
// changes in the middle of emulator frames, so TSan keeps no shadow call stack and
// a report names the accessing source line only, which is what the launcher prints).
// In every other build the hooks below are empty inline functions.
//
// Model
//  - Each CUDA thread of a block runs as a TSan fiber (__tsan_create_fiber, one per
//    linear thread index, kept by the OS thread between blocks). Every switch of the
//    emulator's own fibers switches TSan's identity with __tsan_switch_to_fiber_no_sync:
//    a context switch is not a synchronization on a GPU.
//  - The emulator's bookkeeping (scheduler, barrier and warp rendezvous, the plain loop)
//    runs with TSan's access checks off (__tsan_ignore_thread_begin): only the kernel's
//    own loads and stores, on shared and global memory, are checked.
//  - __syncthreads (and _count/_and/_or, grid_sync's block barrier): an arriving thread
//    releases into the barrier's sync object, a leaving one acquires it. Consecutive
//    barriers alternate between two objects: a fast thread already releasing for the
//    next barrier cannot leak its later writes to a slow one still leaving this one.
//  - Warp operations (__syncwarp, shuffles, votes, tensor-core operations): the lanes
//    of one rendezvous release into and acquire from an object of their own (one per
//    rendezvous of the block). __activemask synchronizes nothing. Warp-synchronous
//    code without one of these races, as on Volta and later GPUs.
//  - Blocks: the OS thread releases a block-start object before the block's threads
//    run, each thread acquires it first; each thread releases a block-end object when
//    it exits, which the OS thread acquires before the next block. Blocks of one launch
//    are ordered one after another: only races inside a block are reported (the
//    launcher runs a race-checked launch's blocks on one OS thread). A cooperative
//    launch runs its blocks at once on POSIX threads it creates and joins (not OpenMP's
//    pool, whose wake-ups TSan cannot see); grid_sync orders them through its mutex.
//  - A block runs in fiber mode from the end of its first thread on: the plain loop
//    reuses one stack for consecutive threads, whose locals TSan would see race.
//  - Atomics are TSan atomics already (emu_types.h uses the __atomic builtins).
// Limits: TSan keeps a bounded history per memory word (a race whose first access is
// long overwritten may go unseen) and at most 256 threads in its vector clocks at
// once; a block of more threads than that is checked with less precision.
//
// Included by cuda_emu.h inside namespace emu, once Worker and Fiber are defined.
#pragma once

#if defined(__SANITIZE_THREAD__)
#define EMU_RACECHECK 1
#include <sanitizer/tsan_interface.h>
extern "C" void __tsan_ignore_thread_begin();
extern "C" void __tsan_ignore_thread_end();
#endif

#if defined(EMU_RACECHECK)

// On an emulator function that kernel code calls and that keeps state of its own in the
// Worker (a lazily filled cache, say): not instrumented, its accesses are not the kernel's.
#define EMU_RACE_EXEMPT __attribute__((no_sanitize_thread, noinline))

// Sync objects of one OS thread: barrier pair, block start/end, and a ring of
// objects for warp rendezvous (unique within a block up to kWarpObjects rendezvous;
// reusing one in a later block is harmless, every earlier block happened before).
constexpr size_t kWarpObjects = size_t(1) << 20;
constexpr size_t kWarpBase = 5;  // objects before the warps' ring

// Launches: the launching thread releases before the blocks start and acquires once they
// all ended, each block acquires at its start and releases at its end. Blocks may run on
// OpenMP threads, whose wake-ups TSan does not see (a cooperative launch).
inline char g_race_launch_object;

struct RaceState {
    void* sched = nullptr;                 // the OS thread's own TSan identity
    std::vector<void*> fibers;             // by linear thread index
    std::vector<unsigned char> started;    // the thread's identity is current on its fiber
    std::vector<unsigned> barriers;        // barriers passed, by linear thread index
    std::vector<unsigned long long> group_instance;  // per warp group slot: its rendezvous
    unsigned long long next_instance = 0;
    unsigned char* objects = nullptr;      // start, end, barrier pair, grid; then warps
    bool dirty = false;                    // a block aborted: fibers may be mid-operation
    std::string name;
};

void convert_to_fiber_mode(Worker& w);

// Emulator bookkeeping that kernel code reaches outside a barrier or warp operation
// (the plain loop's conversion to fiber mode, from a tensor-core operation say).
struct RaceIgnoreScope {
    RaceIgnoreScope() { __tsan_ignore_thread_begin(); }
    ~RaceIgnoreScope() { __tsan_ignore_thread_end(); }
};

inline RaceState& race_state(Worker& w) {
    if (!w.race) {
        RaceState* s = new RaceState();
        s->objects = static_cast<unsigned char*>(calloc(kWarpBase + kWarpObjects, 1));
        w.race = s;
    }
    return *static_cast<RaceState*>(w.race);
}

inline void* race_identity(Worker& w, Fiber* g) {
    RaceState& s = *static_cast<RaceState*>(w.race);
    if (g && g->linear < (int)s.started.size() && s.started[g->linear]) return s.fibers[g->linear];
    return s.sched;
}

// Before every context switch of the emulator: TSan's identity follows.
inline void race_switch_to(Worker& w, Fiber* g) {
    if (!w.race || !w.cfg) return;
    __tsan_switch_to_fiber(race_identity(w, g), __tsan_switch_to_fiber_no_sync);
}

// On the OS thread, before a block's first thread runs.
inline void race_block_begin(Worker& w) {
    RaceState& s = race_state(w);
    if (!s.sched) s.sched = __tsan_get_current_fiber();
    __tsan_ignore_thread_begin();
    if (s.dirty) {
        for (void* f : s.fibers) __tsan_destroy_fiber(f);
        s.fibers.clear();
        s.dirty = false;
    }
    while ((int)s.fibers.size() < w.nthreads) s.fibers.push_back(__tsan_create_fiber(0));
    s.started.assign(w.nthreads, 0);
    s.barriers.assign(w.nthreads, 0);
    s.group_instance.assign(w.warps.size() * 32, 0);
    s.next_instance = 0;
    __tsan_acquire(&g_race_launch_object);
    __tsan_release(&s.objects[0]);
}

// On the OS thread once the block finished (or aborted).
inline void race_block_end(Worker& w) {
    RaceState& s = race_state(w);
    if (w.aborted || w.done < w.nthreads) s.dirty = true;
    __tsan_acquire(&s.objects[1]);
    __tsan_release(&g_race_launch_object);
    std::fill(s.started.begin(), s.started.end(), 0);
    __tsan_ignore_thread_end();
}

// A CUDA thread starts on fiber f (fiber mode, or the plain loop's next thread).
inline void race_thread_begin(Worker& w, Fiber* f) {
    if (!w.race) return;
    RaceState& s = *static_cast<RaceState*>(w.race);
    s.started[f->linear] = 1;
    void* me = s.fibers[f->linear];
    s.name = "block " + thread_name(w.block_idx) + " thread " + thread_name(f->tid);
    __tsan_set_fiber_name(me, s.name.c_str());
    void* start = &s.objects[0];
    __tsan_switch_to_fiber(me, __tsan_switch_to_fiber_no_sync);
    __tsan_acquire(start);
}

// The CUDA thread returned from the kernel (its cp.async copies landed).
inline void race_thread_end(Worker& w, Fiber* f) {
    if (!w.race) return;
    // The race state is the emulator's: read with checks off (this identity must end
    // with none pending, it runs the same thread index of the next block).
    __tsan_ignore_thread_begin();
    RaceState& s = *static_cast<RaceState*>(w.race);
    __tsan_release(&s.objects[1]);
    // An exited thread no longer takes part in barriers: what it wrote is visible after
    // the next barrier of the others. That barrier's object only: threads still leaving
    // the previous one acquire the other.
    __tsan_release(&s.objects[2 + (s.barriers[f->linear] & 1)]);
    void* sched = s.sched;
    __tsan_ignore_thread_end();
    __tsan_switch_to_fiber(sched, __tsan_switch_to_fiber_no_sync);
    s.started[f->linear] = 0;
    // The plain loop would run the next thread on this same stack: TSan would see its
    // locals at the addresses of this one's, written by another thread. The block goes
    // to fiber mode instead (a stack per thread); this thread then ends as a converted
    // one does.
    if (!w.fiber_mode) convert_to_fiber_mode(w);
}

// __syncthreads and friends, around the rendezvous (constructed first in barrier_arrive).
struct RaceBarrierScope {
    void* object = nullptr;
    RaceBarrierScope() {
        Worker& w = worker();
        if (!w.race || !w.current) return;
        __tsan_ignore_thread_begin();  // first: the count below is the emulator's
        RaceState& s = *static_cast<RaceState*>(w.race);
        unsigned k = s.barriers[w.current->linear]++;
        object = &s.objects[2 + (k & 1)];
        __tsan_release(object);
    }
    ~RaceBarrierScope() {
        if (!object) return;
        __tsan_ignore_thread_end();
        __tsan_acquire(object);
    }
};

// Warp operations: constructed first in warp_exchange; arrive() once the lane joined
// its rendezvous group (slot `group` of the warp's groups).
struct RaceWarpScope {
    void* object = nullptr;
    bool active = false;
    RaceWarpScope() {
        Worker& w = worker();
        if (!w.race || !w.current) return;
        __tsan_ignore_thread_begin();
        active = true;
    }
    void arrive(WarpOp op, int warp_index, int group, bool first) {
        if (!active || op == WarpOp::kActive) return;
        RaceState& s = *static_cast<RaceState*>(worker().race);
        unsigned long long& inst = s.group_instance[warp_index * 32 + group];
        if (first) inst = s.next_instance++;
        object = &s.objects[kWarpBase + inst % kWarpObjects];
        __tsan_release(object);
    }
    ~RaceWarpScope() {
        if (!active) return;
        __tsan_ignore_thread_end();
        if (object) __tsan_acquire(object);
    }
};

// grid_sync (constructed first in it): the emulator's count of grid barriers is not the
// kernel's memory. The block's first thread through the block barrier meets the other
// blocks at the grid barrier (a mutex: TSan sees that) and releases what it acquired
// there to the block's other threads, which acquire it after.
struct RaceGridScope {
    void* object = nullptr;
    RaceGridScope() {
        Worker& w = worker();
        if (!w.race || !w.current) return;
        __tsan_ignore_thread_begin();
        object = &static_cast<RaceState*>(w.race)->objects[4];
    }
    void met_other_blocks() {
        if (object) __tsan_release(object);
    }
    ~RaceGridScope() {
        if (!object) return;
        __tsan_ignore_thread_end();
        __tsan_acquire(object);
    }
};

// A cooperative launch in a race-check build: a POSIX thread per block, created and
// joined by the launching thread (TSan sees both; it does not see libgomp waking its pool,
// whose threads read the parallel region's shared variables before any annotation can
// run). fn(b) runs block b; done(b) afterwards, on the same thread, cleans up.
template <typename F, typename G>
inline void race_run_cooperative(long long n, F& fn, G& done) {
    struct Job {
        F* fn;
        G* done;
        long long b;
        static void* run(void* p) {
            Job* j = static_cast<Job*>(p);
            (*j->fn)(j->b);
            (*j->done)(j->b);
            return nullptr;
        }
    };
    std::vector<Job> jobs(n);
    std::vector<pthread_t> threads(n);
    std::vector<char> started(n, 0);
    for (long long b = 0; b < n; ++b) {
        jobs[b] = Job{&fn, &done, b};
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setstacksize(&attr, 8 << 20);
        started[b] = pthread_create(&threads[b], &attr, &Job::run, &jobs[b]) == 0;
        pthread_attr_destroy(&attr);
        if (!started[b]) record_error("cooperative launch: cannot start a thread for block " +
                                      std::to_string(b));
    }
    for (long long b = 0; b < n; ++b)
        if (started[b]) pthread_join(threads[b], nullptr);
}

// A thread of race_run_cooperative ends: its TSan fibers and race state go with it.
inline void race_worker_exit(Worker& w) {
    if (!w.race) return;
    RaceIgnoreScope race_ignore;
    RaceState* s = static_cast<RaceState*>(w.race);
    for (void* f : s->fibers) __tsan_destroy_fiber(f);
    free(s->objects);
    delete s;
    w.race = nullptr;
}

// An OS thread takes up a launch (get_worker, before it reads the launch's config):
// what the launching thread did before the launch happened before.
inline void race_worker_enter() { __tsan_acquire(&g_race_launch_object); }

// Around a launch, on the launching thread: its own accesses (the grid barrier's reset,
// say) are the emulator's, not the kernel's, and go unchecked like the blocks' scheduler.
struct RaceLaunchScope {
    RaceLaunchScope() {
        __tsan_ignore_thread_begin();
        __tsan_release(&g_race_launch_object);
    }
    ~RaceLaunchScope() {
        __tsan_acquire(&g_race_launch_object);
        __tsan_ignore_thread_end();
    }
};

// A block, on its OS thread (around the scheduler loop of run_block).
struct RaceBlockScope {
    Worker& w;
    explicit RaceBlockScope(Worker& worker_) : w(worker_) { race_block_begin(w); }
    ~RaceBlockScope() { race_block_end(w); }
};

#else  // not a race-check build: nothing

#define EMU_RACE_EXEMPT

inline void race_switch_to(Worker&, Fiber*) {}
inline void race_block_begin(Worker&) {}
inline void race_block_end(Worker&) {}
inline void race_worker_enter() {}
inline void race_thread_begin(Worker&, Fiber*) {}
inline void race_thread_end(Worker&, Fiber*) {}
struct RaceBlockScope {
    explicit RaceBlockScope(Worker&) {}
};
struct RaceBarrierScope {};
struct RaceIgnoreScope {};
struct RaceGridScope {
    void met_other_blocks() {}
};
struct RaceLaunchScope {};
struct RaceWarpScope {
    void arrive(WarpOp, int, int, bool) {}
};

#endif
