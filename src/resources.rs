//! How much a build may take of the machine: rows per batch for a record
//! size, the memory limit by default, the free disk space. The planner and
//! the build driver both read it (it sits beside them, not in either).

use std::path::Path;

/// Rows per DataFusion batch inside a task; with the shard buffers this bounds
/// a build's memory, whatever the input size.
pub const BATCH_ROWS: usize = 8192;

/// Bytes of records one batch may take: wide records get smaller batches.
const BATCH_BYTES: u64 = 64 << 20;

/// Rows per batch for records of `stride` bytes.
pub(crate) fn batch_rows(stride: u64) -> usize {
    (BATCH_BYTES / stride.max(1)).clamp(1, BATCH_ROWS as u64) as usize
}

/// Bytes available to unprivileged writers on the file system of `path`
/// (`u64::MAX` when it cannot be told).
pub fn free_bytes(path: &Path) -> u64 {
    use std::os::unix::ffi::OsStrExt;
    let Ok(c) = std::ffi::CString::new(path.as_os_str().as_bytes()) else {
        return u64::MAX;
    };
    let mut st = std::mem::MaybeUninit::<libc::statvfs>::uninit();
    // SAFETY: `c` is a valid NUL-terminated path and `st` points to writable
    // memory of the right size; statvfs initializes it when it returns 0.
    let rc = unsafe { libc::statvfs(c.as_ptr(), st.as_mut_ptr()) };
    if rc != 0 {
        return u64::MAX;
    }
    // SAFETY: statvfs returned 0, so it initialized `st`.
    let st = unsafe { st.assume_init() };
    #[allow(clippy::unnecessary_cast)] // the field types differ across platforms
    let (avail, frsize) = (st.f_bavail as u64, st.f_frsize as u64);
    avail.saturating_mul(frsize)
}

/// The default memory limit: half of the machine's memory, or of the
/// process's address-space limit (`ulimit -v`) when that is smaller (4 GiB
/// when neither can be read).
pub fn default_memory_limit() -> u64 {
    let machine = machine_memory_limit();
    match address_space_limit() {
        Some(a) => machine.min(a / 2),
        None => machine,
    }
}

/// The process's address-space limit (`ulimit -v`), if it has one.
fn address_space_limit() -> Option<u64> {
    let mut rl = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `rl` is a valid, writable rlimit; getrlimit fills it on success.
    let rc = unsafe { libc::getrlimit(libc::RLIMIT_AS, &mut rl) };
    (rc == 0 && rl.rlim_cur != libc::RLIM_INFINITY).then_some(rl.rlim_cur)
}

/// Under an address-space limit, caps glibc's malloc arenas: each one
/// reserves 64 MiB of address space, and with one per thread a build on a
/// many-core machine would run out of address space (and abort) long before
/// it used its memory. Call once, before any thread starts.
pub fn fit_address_space() {
    let Some(limit) = address_space_limit() else {
        return;
    };
    // One arena per 512 MiB of address space, at least one, at most eight.
    let arenas = (limit / (512 << 20)).clamp(1, 8) as libc::c_int;
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only changes allocator tuning; called before other
    // threads exist, so nothing allocates concurrently.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, arenas);
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    let _ = arenas;
}

fn machine_memory_limit() -> u64 {
    let total = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("MemTotal:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<u64>().ok())
        })
        .map(|kb| kb * 1024);
    total.map_or(4 << 30, |t| t / 2)
}

/// What a build prints when the process aborts: Rust's reaction to a failed
/// allocation (it prints "memory allocation of N bytes failed" and aborts).
const ABORT_MESSAGE: &[u8] = b"error: out of memory: an allocation failed (the line above says \
how large) under this process's memory or address-space limit; the build stopped and published \
nothing. Give it more memory (ulimit -v, the container's limit), use fewer --threads, or make \
the query or expression need less (e.g. a smaller repeat() or list)\n";

extern "C" fn exit_on_abort(_signal: libc::c_int) {
    // SAFETY: write and _exit are async-signal-safe; the buffer is a static
    // byte string that lives for the whole program.
    unsafe {
        libc::write(
            2,
            ABORT_MESSAGE.as_ptr().cast::<libc::c_void>(),
            ABORT_MESSAGE.len(),
        );
        libc::_exit(1);
    }
}

/// Turns an abort (a failed allocation, under a memory limit) into a clear
/// error and exit status 1 rather than a SIGABRT and a backtrace. Nothing is
/// published by then: a build writes under a staging directory and renames
/// it into the cache last, and an unfinished staging directory is debris that
/// `tessera gc` removes. For the command-line program only; call once, first.
pub fn exit_cleanly_on_abort() {
    let handler: extern "C" fn(libc::c_int) = exit_on_abort;
    // SAFETY: installs a handler that only calls async-signal-safe functions;
    // nothing else in the program handles SIGABRT.
    unsafe {
        libc::signal(libc::SIGABRT, handler as libc::sighandler_t);
    }
}
