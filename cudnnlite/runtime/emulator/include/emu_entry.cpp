// emu_entry.cpp — the translation unit the emulator compiles for one kernel module.
//
// Defines set by the launcher (cudnnlite/runtime/emulator/build.py):
//   CUDNNLITE_EMU_SOURCE   "path/to/kernel.cu" (a string literal): the build's copy of the
//                          source with its launch-bound checks (build.py)
//   CUDNNLITE_EMU_KERNELS  EMU_KERNEL(name) EMU_KERNEL(template_name<float, 4>) ...
// plus the module's own compile-time defines.
//
// It exports a small C ABI that ctypes loads: the kernel table, each kernel's
// argument signature (checked by Python before every launch), and the launch.
#include "cuda_emu.h"

#include CUDNNLITE_EMU_SOURCE

#define EMU_KERNEL(...) ::emu::make_entry(#__VA_ARGS__, &__VA_ARGS__),

namespace {
const std::vector<emu::KernelEntry>& kernel_table() {
    static const std::vector<emu::KernelEntry> table = {CUDNNLITE_EMU_KERNELS};
    return table;
}
}  // namespace

#if defined(EMU_ASAN)
// The ASan runtime arrives with this library, after Python started: it must not
// insist on being first, and it reports (then continues) instead of aborting.
extern "C" __attribute__((visibility("default"))) const char* __asan_default_options() {
    return "verify_asan_link_order=0:halt_on_error=0:detect_leaks=0:report_globals=0";
}

namespace {
// Runs inside ASan's reporter: no allocation here.
void asan_report(const char* report) {
    int expected = 0;
    if (emu::g_error.set.compare_exchange_strong(expected, 1))
        snprintf(emu::g_error.message, sizeof emu::g_error.message, "AddressSanitizer: %s", report);
}
}  // namespace
#endif

extern "C" {

// The entries run on the caller's thread; in a race-check build their accesses (the
// kernel table built on first use, say) are the emulator's and go unchecked.
__attribute__((visibility("default"))) int emu_kernel_count() {
    emu::RaceIgnoreScope race_ignore;
    return (int)kernel_table().size();
}

__attribute__((visibility("default"))) const char* emu_kernel_name(int i) {
    emu::RaceIgnoreScope race_ignore;
    return kernel_table()[i].name;
}

__attribute__((visibility("default"))) const char* emu_kernel_signature(int i) {
    emu::RaceIgnoreScope race_ignore;
    return kernel_table()[i].signature.c_str();
}

__attribute__((visibility("default"))) int emu_launch(int i, const emu::LaunchConfig* cfg,
                                                      void* const* args) {
    const emu::KernelEntry& e = kernel_table()[i];
#if defined(EMU_ASAN)
    static bool installed = (__asan_set_error_report_callback(asan_report), true);
    (void)installed;
#endif
    return emu::launch(e.thunk, e.kfn, *cfg, args);
}

__attribute__((visibility("default"))) const char* emu_last_error() { return emu::g_error.message; }

// A recorded launch list (an emulator graph's replay, launcher.LaunchList): launch k is
// fns[k](indices[k], cfgs[k], values[k]), each fns[k] the emu_launch of the launch's own
// module (any module's list runs any module's launches). The launches run in order, in one
// call from Python; the first to fail stops the list: its code is returned and its
// position written to *failed (its module's emu_last_error has the message). 0 when all ran.
typedef int (*emu_launch_fn)(int, const emu::LaunchConfig*, void* const*);

__attribute__((visibility("default"))) int emu_run_list(int n, void* const* fns, const int* indices,
                                                        void* const* cfgs, void* const* values,
                                                        int* failed) {
    for (int k = 0; k < n; ++k) {
        int rc = reinterpret_cast<emu_launch_fn>(fns[k])(
            indices[k], static_cast<const emu::LaunchConfig*>(cfgs[k]),
            static_cast<void* const*>(values[k]));
        if (rc != 0) {
            *failed = k;
            return rc;
        }
    }
    return 0;
}

// Bytes of static __shared__ storage in this module (its whole TLS segment).
__attribute__((visibility("default"))) unsigned long long emu_static_shared_bytes() {
    emu::RaceIgnoreScope race_ignore;
    return emu::module_tls_size();
}

__attribute__((visibility("default"))) double emu_measure_switch_ns(long long iters) {
    return emu::measure_switch_ns(iters, 64 * 1024);
}

__attribute__((visibility("default"))) int emu_asan_enabled() {
#if defined(EMU_ASAN)
    return 1;
#else
    return 0;
#endif
}

// Redzones around the copies the launcher makes of each array in an ASan build.
__attribute__((visibility("default"))) void emu_asan_poison(void* p, unsigned long long n, int on) {
#if defined(EMU_ASAN)
    if (on) __asan_poison_memory_region(p, n);
    else __asan_unpoison_memory_region(p, n);
#else
    (void)p;
    (void)n;
    (void)on;
#endif
}

}  // extern "C"
