//! The relay's guard against reflection: it sends no client more than it received for it
//! until the client has shown that it receives.
//!
//! Anyone can send the relay a datagram with a forged source address; the relay forwards it
//! and sends the server's answers to that address. A profile that duplicates datagrams would
//! make the relay an amplifier: `duplicate: 100%` both ways, behind an echo server, sends
//! the forged address 4× what was sent in its name. So each client's traffic, in each
//! direction, is held to a [`Budget`]: datagrams and payload bytes sent on at most those
//! that came in, until the client is [`Proof`]-proven. Originals always fit (each came in
//! with its own budget); a duplicate fits only where the link dropped something before it.
//!
//! What "proven" can mean for a relay: it is transparent, so it cannot put a token in the
//! stream for the client to echo (as QUIC's address validation does). What it can see is a
//! client sending after the relay has sent it something: a real client answers what the
//! server sent; an address that was only spoofed never sends anything itself. The limit: an
//! attacker who keeps sending in the victim's name after the relay has answered is taken for
//! the client, and then gets the profile's duplicates (at most 2× per direction); and the
//! server's own gain (a small request, a large answer) is the server's to bound, as the
//! reference servers do. What the guard removes is the relay's own gain towards an address
//! that never answers.

/// One direction of one client: what came in and what was sent on (or held to be).
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Budget {
    in_datagrams: u64,
    in_bytes: u64,
    out_datagrams: u64,
    out_bytes: u64,
}

impl Budget {
    /// A datagram of `len` bytes came in.
    pub(super) fn received(&mut self, len: usize) {
        self.in_datagrams += 1;
        self.in_bytes += len as u64;
    }

    /// Whether one more datagram of `len` bytes keeps what is sent on within what came in.
    pub(super) fn allows(&self, len: usize) -> bool {
        self.out_datagrams < self.in_datagrams && self.out_bytes + len as u64 <= self.in_bytes
    }

    /// A datagram of `len` bytes is held to be sent on.
    pub(super) fn spend(&mut self, len: usize) {
        self.out_datagrams += 1;
        self.out_bytes += len as u64;
    }
}

/// Whether a client has shown that it receives: it sent a datagram after the relay had sent
/// it one.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Proof {
    sent_to: bool,
    proven: bool,
}

impl Proof {
    /// The relay sent the client a datagram.
    pub(super) fn sent_to(&mut self) {
        self.sent_to = true;
    }

    /// A datagram came from the client.
    pub(super) fn heard_from(&mut self) {
        self.proven |= self.sent_to;
    }

    pub(super) fn proven(&self) -> bool {
        self.proven
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_budget_sends_on_no_more_datagrams_or_bytes_than_came_in() {
        let mut b = Budget::default();
        b.received(100);
        assert!(b.allows(100));
        b.spend(100);
        assert!(!b.allows(0), "a copy of the only datagram");
        // A datagram the link dropped leaves room for one copy of a later one.
        b.received(100);
        b.received(40);
        b.spend(40);
        assert!(b.allows(40) && b.allows(100) && !b.allows(101));
    }

    #[test]
    fn a_client_is_proven_by_a_datagram_after_one_was_sent_to_it() {
        let mut p = Proof::default();
        p.heard_from();
        assert!(!p.proven(), "sending alone proves nothing");
        p.sent_to();
        assert!(!p.proven());
        p.heard_from();
        assert!(p.proven());
    }
}
