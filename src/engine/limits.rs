//! File-descriptor limit: one socket per bot needs one descriptor per bot.

use thiserror::Error;

#[derive(Debug, Error)]
#[error(
    "{bots} bots need about {needed} open files (one UDP socket each), but the limit is {limit} \
     (hard limit {hard}). Raise it (e.g. `ulimit -n {needed}` as root, or LimitNOFILE= in a \
     systemd unit), or run fewer bots per process."
)]
pub struct FdLimitError {
    pub bots: u64,
    pub needed: u64,
    pub limit: u64,
    pub hard: u64,
}

/// Descriptors a run needs beyond its sockets (stdio, runtime, reports, the server, and the
/// `--metrics-listen` endpoint's at most 32 connections).
const SPARE_FDS: u64 = 64;

/// Raise the soft RLIMIT_NOFILE to the hard limit; fail plainly if `bots` still won't fit.
pub fn ensure_fd_limit(bots: u64) -> Result<u64, FdLimitError> {
    let needed = bots + SPARE_FDS;
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct we pass.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return Ok(needed); // cannot tell; let socket creation report EMFILE if it happens
    }
    if lim.rlim_cur < lim.rlim_max {
        let raised = libc::rlimit {
            rlim_cur: lim.rlim_max,
            rlim_max: lim.rlim_max,
        };
        // SAFETY: setrlimit reads the struct we pass.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
            lim.rlim_cur = lim.rlim_max;
        }
    }
    let limit = lim.rlim_cur;
    if needed > limit {
        return Err(FdLimitError {
            bots,
            needed,
            limit,
            hard: lim.rlim_max,
        });
    }
    Ok(limit)
}

/// Grow this process's descriptor table now to hold the run's descriptors (`bots` sockets
/// and the spare), before any bot's clock starts.
///
/// The kernel grows the table by doubling as descriptors are opened, and in a process with
/// more than one thread every growth waits for an RCU grace period inside the call that
/// crossed it: measured on a 2-core VM at 7-17 ms per doubling (at 256, 512, ..., 4,096
/// descriptors), in the `socket()` of whichever worker was spawning a bot. During a ramp that
/// held a worker past a 60 Hz tick, so bots already playing skipped input slots and the ramp's
/// second showed lateness p99 of 4-10 ms. A table never shrinks, so growing it once here
/// pays that wait once, before the run. Best effort: without an open descriptor 0, 1 or 2 to
/// copy, or past the limit, the table grows as before.
pub fn reserve_fd_table(bots: u64) {
    let Ok(top) = libc::c_int::try_from((bots + SPARE_FDS).saturating_sub(1)) else {
        return;
    };
    for fd in 0..=2 {
        // SAFETY: F_DUPFD_CLOEXEC on any descriptor returns a new one (or -1); the copy is
        // ours alone and closed at once. It only marks slot `top` (or the first free above).
        let copy = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, top) };
        if copy >= 0 {
            // SAFETY: `copy` was just returned to us and nothing else holds it.
            unsafe { libc::close(copy) };
            return;
        }
    }
}

/// What a run of `bots` needs and what this process may open, without changing anything:
/// `(needed, soft limit, hard limit)`, for `tickswarm validate` to show and to refuse a plan
/// that cannot fit even the hard limit. `None` when the limits cannot be read.
pub fn fd_budget(bots: u64) -> Option<(u64, u64, u64)> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct we pass.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return None;
    }
    Some((bots + SPARE_FDS, lim.rlim_cur, lim.rlim_max))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `FDSize` in /proc/self/status: the slots the descriptor table has now.
    #[cfg(target_os = "linux")]
    fn fd_table_size() -> u64 {
        let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
        let line = status
            .lines()
            .find_map(|l| l.strip_prefix("FDSize:"))
            .expect("FDSize in /proc/self/status");
        line.trim().parse().expect("FDSize is a number")
    }

    /// After the reservation the table holds every descriptor the run will open, so no
    /// bot's `socket()` has to grow it (and wait a grace period) mid-run.
    #[cfg(target_os = "linux")]
    #[test]
    fn the_descriptor_table_is_grown_to_the_run_before_it_starts() {
        // 600 bots and the spare fit the default soft limit of 1,024.
        reserve_fd_table(600);
        assert!(
            fd_table_size() >= 600 + SPARE_FDS,
            "FDSize {}",
            fd_table_size()
        );
    }
}
