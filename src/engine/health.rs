//! The generator's own health, read once a second: a worker thread's CPU time (by each worker,
//! one `clock_gettime` per second), and the process's resident memory and open descriptors
//! (by the collector, from `/proc`, off the workers). What tells "the server is slow" from
//! "this machine cannot drive the swarm".

/// CPU time the calling thread has used, in µs (`CLOCK_THREAD_CPUTIME_ID`); `None` where the
/// clock cannot be read.
pub fn thread_cpu_us() -> Option<u64> {
    thread_cpu_ns().map(|ns| ns / 1_000)
}

/// CPU time the calling thread has used, in ns (user and system, `CLOCK_THREAD_CPUTIME_ID`);
/// `None` where the clock cannot be read. In nanoseconds so that a run's total, summed from
/// one reading a second per worker, loses nothing to rounding.
pub fn thread_cpu_ns() -> Option<u64> {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec for the call's duration.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    (rc == 0).then(|| {
        u64::try_from(ts.tv_sec).unwrap_or(0) * 1_000_000_000
            + u64::try_from(ts.tv_nsec).unwrap_or(0)
    })
}

/// The process's resident set in bytes (`/proc/self/statm`); `None` off Linux.
pub fn rss_bytes() -> Option<u64> {
    rss_at("/proc/self")
}

/// Open file descriptors of the process (sockets, mostly: one per bot); `None` off Linux.
pub fn open_fds() -> Option<u64> {
    fds_at("/proc/self")
}

/// [`rss_bytes`] of another process (`/proc/<pid>`): the same reading, for a process whose
/// load is known (the tests').
pub fn rss_bytes_of(pid: u32) -> Option<u64> {
    rss_at(&format!("/proc/{pid}"))
}

/// [`open_fds`] of another process.
pub fn open_fds_of(pid: u32) -> Option<u64> {
    fds_at(&format!("/proc/{pid}"))
}

fn rss_at(proc_dir: &str) -> Option<u64> {
    let statm = std::fs::read_to_string(format!("{proc_dir}/statm")).ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    Some(pages * u64::try_from(page).ok()?)
}

fn fds_at(proc_dir: &str) -> Option<u64> {
    Some(std::fs::read_dir(format!("{proc_dir}/fd")).ok()?.count() as u64)
}

#[cfg(test)]
mod tests;
