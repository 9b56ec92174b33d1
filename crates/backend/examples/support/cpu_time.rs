//! Process CPU time for the backend benches: the figure least disturbed by other load on
//! a shared machine.

/// Process CPU time in nanoseconds (`CLOCK_PROCESS_CPUTIME_ID`); 0 if the clock fails.
pub fn cpu_ns() -> u64 {
    #[repr(C)]
    struct Timespec {
        sec: i64,
        nsec: i64,
    }
    extern "C" {
        fn clock_gettime(clock: i32, tp: *mut Timespec) -> i32;
    }
    let mut t = Timespec { sec: 0, nsec: 0 };
    // SAFETY: `t` is a valid timespec; clock 2 is CLOCK_PROCESS_CPUTIME_ID on Linux.
    if unsafe { clock_gettime(2, &mut t) } != 0 {
        return 0;
    }
    t.sec as u64 * 1_000_000_000 + t.nsec as u64
}
