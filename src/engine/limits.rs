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
