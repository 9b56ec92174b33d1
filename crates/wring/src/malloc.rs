//! Fixed thresholds for glibc's allocator, set before anything allocates much.
//!
//! glibc adapts two thresholds to what a process has freed so far: blocks above the
//! *mmap threshold* get their own mapping (fresh pages, faulted in on every use), and free
//! memory above the *trim threshold* at the top of the heap goes back to the system (to be
//! faulted in again by the next allocation that needs it). The engine allocates its
//! per-step buffers anew each step (a 32-sequence decode step's logits alone are 6 MiB),
//! so what those thresholds had drifted to decided how many page faults every step paid.
//! On the 2-core CPU that made the start-up probes of `--speculative suffix` (steps far
//! larger than serving's, freed before serving) cost ~1 % of throughput at concurrency 64
//! for the server's whole life: 0.983–0.991 of no speculation (three sets of 8 alternating
//! pairs), 0.997 ± 0.004 with these thresholds, while no speculation itself did not move
//! (1.000 ± 0.002; results/2026-12-05-cpu-spec-malloc-thresholds). Fixed, a step costs the same whatever ran before it.

/// Blocks from this size up are mapped on their own: glibc's own ceiling for the
/// adaptive value, so the buffers of serving's steps stay on the heap (only outsized
/// ones, such as the logits of every row of 32 sequences × 13 verify rows, are mapped
/// each time), while the large long-lived pools (a KV pool layer of the default model:
/// 2 GiB over 60 buffers) are still mapped and touched only where written.
const MMAP_THRESHOLD: usize = 32 << 20;
/// Free memory kept at the top of the heap before any is returned: a few steps' buffers.
const TRIM_THRESHOLD: usize = 128 << 20;

/// Sets the thresholds (glibc only; elsewhere the allocator is left as it is).
pub fn fix_thresholds() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only changes the allocator's parameters; it is called before the
    // process starts other threads.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD as libc::c_int);
        libc::mallopt(libc::M_TRIM_THRESHOLD, TRIM_THRESHOLD as libc::c_int);
    }
}
