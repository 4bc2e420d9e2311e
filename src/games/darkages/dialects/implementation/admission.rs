//! Address proof on a wire with no field for a cookie: why the implementation dialect's
//! reference server cannot be used to amplify traffic at a third party.
//!
//! The other reference servers prove a source's address with a value only a receiver of the
//! handshake reply knows (`crate::protocol::admission`). This wire has no field for one: the
//! public client (`NetworkManager.cs`) echoes nothing the server chose. CONNECT carries its
//! own version and player id, INPUT its own sequence, clock, keys and a target of 0, PING
//! its own clock; it sends CONNECT once and waits for the reply. So the proof here is
//! payment, in three rules per session:
//!
//! 1. **Budget.** A session is *unproven* until rule 2 says otherwise, and bytes sent to it
//!    never exceed bytes received from it. The server's replies are sized to fit: the
//!    CONNECT reply is the 6 bytes the client reads (the public server's 10 add a zone id no
//!    client reads, more than the 9-byte CONNECT), a PONG (5) answers a PING (5), and a
//!    snapshot is cut to the credit left (header, own entity, others nearest first) and
//!    withheld when not even its header fits.
//! 2. **Proof by continuing to send.** A session that sent at least [`PROOF_BYTES`] of
//!    client traffic (anything but CONNECT, which a forger repeats for free) in one
//!    [`PROOF_WINDOW`] is proven for the next window; one that did not is held to the
//!    budget again, its credit counted from zero. A real client (60 INPUTs a second, 1,140
//!    bytes) is proven one window after its reply and stays proven; until then it gets
//!    every snapshot's tick, with the entities its inputs pay for.
//! 3. **Expiry.** A session never proven and silent (no datagram but CONNECT) for
//!    [`UNPROVEN_TIMEOUT`] is dropped, and a full server gives the slot of the least
//!    recently heard unproven session admitted at least [`EVICTABLE_AFTER`] ago to a new
//!    CONNECT, so spoofed CONNECTs cannot keep real clients out.
//!
//! The bound: a source that never answers, or answers blind and stops before paying for a
//! whole window, is sent at most what it sent. A blind source that keeps paying
//! [`PROOF_BYTES`] a second is sent what a client is sent, at most 20 snapshots of 1,455
//! bytes a second for 380 bytes (77×; 6× alone on the server): that residue needs a
//! protocol change to close (a nonce in the CONNECT reply that INPUT echoes).

use std::time::{Duration, Instant};

pub use crate::protocol::prelude::admission::{EVICTABLE_AFTER, UNPROVEN_TIMEOUT};

/// The window over which a session pays for the next one.
pub const PROOF_WINDOW: Duration = Duration::from_secs(1);

/// Client bytes a window must carry to prove the session for the next: 20 INPUTs, a third
/// of what the public client sends, so a client on a late machine keeps its proof.
pub const PROOF_BYTES: u64 = 380;

/// One session's proof state: its budget while unproven and the window it is paying for.
#[derive(Debug, Clone)]
pub struct Admission {
    proven: bool,
    ever_proven: bool,
    /// Bytes received since the budget began (while unproven).
    received: u64,
    /// Bytes sent since the budget began (while unproven).
    sent: u64,
    window_start: Instant,
    /// Client bytes (not CONNECT) received in the current window.
    window_paid: u64,
    admitted: Instant,
    /// The last datagram other than CONNECT (or the admission).
    last_paid: Instant,
}

impl Admission {
    /// A session admitted at `now` by a CONNECT of `connect_len` bytes.
    pub fn new(now: Instant, connect_len: usize) -> Self {
        Self {
            proven: false,
            ever_proven: false,
            received: connect_len as u64,
            sent: 0,
            window_start: now,
            window_paid: 0,
            admitted: now,
            last_paid: now,
        }
    }

    /// A datagram of `len` bytes from the session; `connect` when it is a (repeated)
    /// CONNECT, which adds to the budget but neither pays for the proof nor keeps an
    /// unproven session alive.
    pub fn on_datagram(&mut self, now: Instant, len: usize, connect: bool) {
        self.roll(now);
        if !self.proven {
            self.received = self.received.saturating_add(len as u64);
        }
        if !connect {
            self.window_paid = self.window_paid.saturating_add(len as u64);
            self.last_paid = now;
        }
    }

    /// Close the windows that ended by `now`: each decides whether the next is proven.
    pub fn roll(&mut self, now: Instant) {
        let behind = now.saturating_duration_since(self.window_start);
        if behind < PROOF_WINDOW {
            return;
        }
        // The window just ended decides; any whole windows after it were empty.
        let windows = (behind.as_nanos() / PROOF_WINDOW.as_nanos()) as u32;
        let paid = windows == 1 && self.window_paid >= PROOF_BYTES;
        if self.proven && !paid {
            // Back on the budget, counted from here.
            self.received = 0;
            self.sent = 0;
        }
        self.proven = paid;
        self.ever_proven |= paid;
        self.window_start += PROOF_WINDOW * windows;
        self.window_paid = 0;
    }

    /// Whether the session is proven (streams without a budget).
    pub fn is_proven(&self) -> bool {
        self.proven
    }

    /// Bytes the session may still be sent (`usize::MAX` when proven).
    pub fn credit(&self) -> usize {
        if self.proven {
            return usize::MAX;
        }
        usize::try_from(self.received.saturating_sub(self.sent)).unwrap_or(usize::MAX)
    }

    /// May `len` bytes go to the session? Counted when they may.
    pub fn spend(&mut self, len: usize) -> bool {
        if self.proven {
            return true;
        }
        let sent = self.sent.saturating_add(len as u64);
        if sent > self.received {
            return false;
        }
        self.sent = sent;
        true
    }

    /// Rule 3: never proven and silent for [`UNPROVEN_TIMEOUT`].
    pub fn expired(&self, now: Instant) -> bool {
        !self.ever_proven && now.saturating_duration_since(self.last_paid) >= UNPROVEN_TIMEOUT
    }

    /// Rule 3: a full server may give this session's slot to a new CONNECT.
    pub fn evictable(&self, now: Instant) -> bool {
        !self.proven && now.saturating_duration_since(self.admitted) >= EVICTABLE_AFTER
    }

    /// The last datagram other than CONNECT: the least recently heard is evicted first.
    pub fn last_paid(&self) -> Instant {
        self.last_paid
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn an_unproven_session_is_sent_no_more_than_it_sent() {
        let t0 = Instant::now();
        let mut a = Admission::new(t0, 9);
        assert!(a.spend(6), "the 6-byte reply fits the 9-byte CONNECT");
        assert!(!a.spend(5), "3 bytes left");
        a.on_datagram(t0 + MS, 5, false);
        assert_eq!(a.credit(), 8);
        assert!(a.spend(5));
    }

    #[test]
    fn a_client_paying_each_window_is_proven_for_the_next_and_lapses_when_it_stops() {
        let t0 = Instant::now();
        let mut a = Admission::new(t0, 9);
        for k in 1..60 {
            a.on_datagram(t0 + 16 * MS * k, 19, false);
        }
        assert!(!a.is_proven(), "not before the window ends");
        a.roll(t0 + PROOF_WINDOW);
        assert!(a.is_proven(), "60 INPUTs paid for the next window");
        assert!(a.spend(100_000));
        a.roll(t0 + PROOF_WINDOW * 2);
        assert!(!a.is_proven(), "a window without traffic ends the proof");
        assert_eq!(a.credit(), 0, "the budget starts again from zero");
        assert!(
            !a.expired(t0 + PROOF_WINDOW * 10),
            "once proven, silence rules"
        );
    }

    #[test]
    fn repeated_connects_neither_prove_nor_keep_a_session_alive() {
        let t0 = Instant::now();
        let mut a = Admission::new(t0, 9);
        for k in 1..200 {
            a.on_datagram(t0 + 10 * MS * k, 9, true);
        }
        a.roll(t0 + PROOF_WINDOW * 2);
        assert!(!a.is_proven());
        assert!(a.expired(t0 + UNPROVEN_TIMEOUT));
        assert!(a.evictable(t0 + EVICTABLE_AFTER));
    }

    #[test]
    fn a_long_silence_leaves_the_session_unproven() {
        let t0 = Instant::now();
        let mut a = Admission::new(t0, 9);
        a.on_datagram(t0 + MS, 1_000, false);
        a.roll(t0 + PROOF_WINDOW * 3 + MS);
        assert!(!a.is_proven(), "the windows after the paid one were empty");
    }
}
