//! Packing messages into ENet packets per session: the open packet per channel, the queue of
//! packets ready to go, and a bounded pool of buffers reused across ticks.

use super::*;

/// Most spare packet buffers the outbox keeps (each up to 1400 bytes): above a storm's usual
/// burst (about 400 packets queued at once), so only a burst deeper than that (a server
/// falling behind) allocates, and it no longer pins a buffer per packet of the deepest
/// burst for the rest of the process (README's "Server memory under reconnect storms").
pub(super) const OUTBOX_POOL_KEEP: usize = 512;

/// Packets ready to leave, with recycled buffers.
#[derive(Debug, Default)]
pub(super) struct Outbox {
    pub(super) queue: VecDeque<(ConnId, bool, Vec<u8>)>,
    pub(super) pool: Vec<Vec<u8>>,
}

impl Outbox {
    pub(super) fn flush(&mut self, addr: ConnId, reliable: bool, open: &mut Vec<u8>) {
        if open.is_empty() {
            return;
        }
        let mut fresh = self.pool.pop().unwrap_or_default();
        fresh.clear();
        std::mem::swap(&mut fresh, open);
        self.queue.push_back((addr, reliable, fresh));
    }

    /// Take back a sent packet's buffer, up to [`OUTBOX_POOL_KEEP`] of them.
    pub(super) fn recycle(&mut self, bytes: Vec<u8>) {
        if self.pool.len() < OUTBOX_POOL_KEEP {
            self.pool.push(bytes);
        }
    }

    pub(super) fn flush_session(&mut self, s: &mut Session) {
        self.flush(s.addr, true, &mut s.rel);
        self.flush(s.addr, false, &mut s.unrel);
    }
}

/// Append one message to a session's open packet on its channel, starting a new packet when
/// it does not fit (1400 bytes reliable, 1200 unreliable). `false` when the message is larger
/// than a packet.
pub(super) fn push(
    s: &mut Session,
    ob: &mut Outbox,
    reliable: bool,
    f: impl FnOnce(&mut [u8], u16) -> Result<usize, BufferTooSmall>,
) -> bool {
    let mut tmp = [0u8; MAX_PACKET_SIZE];
    let Ok(n) = f(&mut tmp, s.seq) else {
        return false;
    };
    s.seq = s.seq.wrapping_add(1);
    let limit = if reliable {
        MAX_PACKET_SIZE
    } else {
        MAX_UNRELIABLE_PACKET
    };
    if !reliable && n > limit {
        return false;
    }
    let open = if reliable { &mut s.rel } else { &mut s.unrel };
    if open.len() + n > limit {
        ob.flush(s.addr, reliable, open);
    }
    let open = if reliable { &mut s.rel } else { &mut s.unrel };
    open.extend_from_slice(&tmp[..n]);
    true
}

pub(super) fn push_msg(s: &mut Session, ob: &mut Outbox, msg: &Message<'_>) -> bool {
    let (_, reliable) = msg.msg_type().channel();
    let dialect = s.dialect;
    push(s, ob, reliable, |b, seq| {
        codec::encode_in(b, seq, msg, dialect)
    })
}
