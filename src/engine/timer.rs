//! A microsecond-precise timer for the workers.
//!
//! tokio's timer wheel has millisecond resolution and rounds sleeps up, so a 60 Hz input
//! grid driven by it leaves up to 1 ms late by construction, and the lateness histogram would
//! measure the timer instead of the generator. On Linux a `timerfd` registered with the
//! reactor wakes the worker within microseconds of the deadline. Elsewhere this falls back to
//! tokio's sleep.

use std::io;
use std::time::Instant;

#[cfg(target_os = "linux")]
mod imp {
    use std::io;
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    use std::time::Instant;

    use tokio::io::unix::AsyncFd;

    pub struct PreciseTimer {
        fd: AsyncFd<OwnedFd>,
        /// The deadline armed and not yet fired: re-arming it would only cost a syscall.
        armed: std::cell::Cell<Option<Instant>>,
    }

    impl PreciseTimer {
        pub fn new() -> io::Result<Self> {
            // SAFETY: plain syscall; the result is checked before use.
            let raw = unsafe {
                libc::timerfd_create(
                    libc::CLOCK_MONOTONIC,
                    libc::TFD_NONBLOCK | libc::TFD_CLOEXEC,
                )
            };
            if raw < 0 {
                return Err(io::Error::last_os_error());
            }
            // SAFETY: `raw` is a fresh descriptor that nothing else owns.
            let fd = unsafe { OwnedFd::from_raw_fd(raw) };
            // SAFETY: the OwnedFd moves into the AsyncFd, which keeps it open for as long as
            // it is registered and deregisters before closing it.
            let fd = unsafe { AsyncFd::register(fd) }.map_err(|e| e.into_parts().1)?;
            Ok(Self {
                fd,
                armed: std::cell::Cell::new(None),
            })
        }

        /// Arm for `deadline` (relative to now; a past deadline fires at once).
        pub fn arm(&self, deadline: Instant) -> io::Result<()> {
            if self.armed.get() == Some(deadline) {
                return Ok(());
            }
            self.armed.set(Some(deadline));
            let d = deadline.saturating_duration_since(Instant::now());
            // A zero it_value would disarm the timer; one nanosecond fires immediately.
            let nanos = d.as_nanos().max(1);
            let spec = libc::itimerspec {
                it_interval: libc::timespec {
                    tv_sec: 0,
                    tv_nsec: 0,
                },
                it_value: libc::timespec {
                    tv_sec: (nanos / 1_000_000_000) as libc::time_t,
                    tv_nsec: (nanos % 1_000_000_000) as libc::c_long,
                },
            };
            // SAFETY: the fd is a live timerfd; spec is a valid itimerspec.
            let r = unsafe {
                libc::timerfd_settime(self.fd.as_raw_fd(), 0, &spec, std::ptr::null_mut())
            };
            if r < 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        }

        /// Wait until the armed deadline passes.
        pub async fn fired(&self) -> io::Result<()> {
            loop {
                let mut guard = self.fd.readable().await?;
                let res = guard.try_io(|inner| {
                    let mut buf = [0u8; 8];
                    // SAFETY: reading 8 bytes into an 8-byte buffer from a live timerfd.
                    let n = unsafe {
                        libc::read(inner.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len())
                    };
                    if n < 0 {
                        Err(io::Error::last_os_error())
                    } else {
                        Ok(())
                    }
                });
                match res {
                    Ok(r) => {
                        self.armed.set(None);
                        // A one-shot timerfd is not readable again until re-armed: clearing
                        // the readiness now spares the next wait a `read` that could only
                        // say EAGAIN (one system call per wake-up, measured with strace).
                        if r.is_ok() {
                            guard.clear_ready();
                        }
                        return r;
                    }
                    Err(_would_block) => continue,
                }
            }
        }
    }
}

#[cfg(not(target_os = "linux"))]
mod imp {
    use std::cell::Cell;
    use std::io;
    use std::time::Instant;

    pub struct PreciseTimer {
        deadline: Cell<Instant>,
    }

    impl PreciseTimer {
        pub fn new() -> io::Result<Self> {
            Ok(Self {
                deadline: Cell::new(Instant::now()),
            })
        }
        pub fn arm(&self, deadline: Instant) -> io::Result<()> {
            self.deadline.set(deadline);
            Ok(())
        }
        pub async fn fired(&self) -> io::Result<()> {
            tokio::time::sleep_until(self.deadline.get().into()).await;
            Ok(())
        }
    }
}

pub use imp::PreciseTimer;

/// Sleep until `deadline` on `timer`.
pub async fn sleep_until(timer: &PreciseTimer, deadline: Instant) -> io::Result<()> {
    timer.arm(deadline)?;
    timer.fired().await
}
