//! What every reference server keeps about its clients, once: a slab of sessions indexed by
//! [`ConnId`], the last-seen timeout sweep, the queue of sessions the transport should forget
//! ([`Server::poll_close`](crate::protocol::Server::poll_close)), and the fixed-tick clock.
//!
//! Slots matter to the servers beyond storage: a client's slot decides its room (cafe, R-Type)
//! and its player id (cafe: slot + 1), and a freed slot is given to the next client. So the
//! table hands out the *lowest* free slot, exactly as the servers did before it existed.
//!
//! Every session that leaves the table ([`SessionTable::remove`]) and every connection turned
//! away without one ([`SessionTable::close`]) is queued for `poll_close`: without that, the
//! transport under the server (one id per UDP source, one per ENet peer) would keep a mapping
//! for a client the server has forgotten, for the life of the process.

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

use super::{admission, ConnId};

/// One client as the table holds it: the transport's id, when it was last heard, and the
/// server's own per-client state.
#[derive(Debug, Clone)]
pub struct Session<T> {
    /// Who the session is with.
    pub conn: ConnId,
    /// When it was last heard from (expiry).
    pub last_seen: Instant,
    /// The protocol's own per-session state.
    pub state: T,
    /// The client has shown it receives what the server sends (see [`crate::protocol::admission`]):
    /// until then the server sends it only the handshake reply.
    pub proven: bool,
    /// When the session was created (unproven sessions expire from here, not from
    /// `last_seen`, so a repeated spoofed handshake cannot keep one alive).
    pub admitted: Instant,
    /// Handshake replies sent while unproven.
    pub unproven_replies: u32,
    /// Bytes received from, and sent to, the session while unproven (admission rule 2's
    /// byte budget: sent never exceeds received).
    pub unproven_in: u64,
    /// Bytes sent to sessions that have not yet proven their address (amplification bound).
    pub unproven_out: u64,
}

/// Sessions by slot, with a [`ConnId`] index and a queue of closed connections.
#[derive(Debug, Clone)]
pub struct SessionTable<T> {
    slots: Vec<Option<Session<T>>>,
    by_conn: HashMap<ConnId, usize>,
    closed: VecDeque<ConnId>,
    /// Sessions created per second, for rule 4's protection window
    /// ([`admission::protection_window`]).
    admissions: AdmissionRate,
}

/// Sessions created in the current one-second window and the one before it.
#[derive(Debug, Clone, Default)]
struct AdmissionRate {
    window_start: Option<Instant>,
    this_window: u64,
    last_window: u64,
}

impl AdmissionRate {
    fn roll(&mut self, now: Instant) {
        let start = *self.window_start.get_or_insert(now);
        let elapsed = now.saturating_duration_since(start);
        if elapsed >= Duration::from_secs(2) {
            // A whole window or more with no admission in it.
            self.last_window = 0;
            self.this_window = 0;
            self.window_start = Some(now);
        } else if elapsed >= Duration::from_secs(1) {
            self.last_window = self.this_window;
            self.this_window = 0;
            self.window_start = Some(start + Duration::from_secs(1));
        }
    }

    fn count(&mut self, now: Instant) {
        self.roll(now);
        self.this_window += 1;
    }

    /// Admissions a second: the last whole window's, or the current one's when it already
    /// holds more (a flood that started this second), as [`Self::roll`] would leave them.
    fn per_second(&self, now: Instant) -> u64 {
        let Some(start) = self.window_start else {
            return 0;
        };
        match now.saturating_duration_since(start).as_secs() {
            0 => self.last_window.max(self.this_window),
            // The current window became the last one.
            1 => self.this_window,
            _ => 0,
        }
    }
}

impl<T> Default for SessionTable<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> SessionTable<T> {
    /// An empty table.
    pub fn new() -> Self {
        Self {
            slots: Vec::new(),
            by_conn: HashMap::new(),
            closed: VecDeque::new(),
            admissions: AdmissionRate::default(),
        }
    }

    /// Live sessions.
    pub fn len(&self) -> usize {
        self.by_conn.len()
    }

    /// Whether no session is open.
    pub fn is_empty(&self) -> bool {
        self.by_conn.is_empty()
    }

    /// Slots in use or freed (one past the highest slot ever used): rooms are cut from this.
    pub fn slot_count(&self) -> usize {
        self.slots.len()
    }

    /// The slot of `conn`'s session.
    pub fn slot_of(&self, conn: ConnId) -> Option<usize> {
        self.by_conn.get(&conn).copied()
    }

    /// Whether `conn` has a session.
    pub fn contains(&self, conn: ConnId) -> bool {
        self.by_conn.contains_key(&conn)
    }

    /// A new session for `conn` in the lowest free slot; returns the slot. A `conn` that
    /// already has a session keeps it (its state is not replaced).
    pub fn insert(&mut self, conn: ConnId, now: Instant, state: T) -> usize {
        if let Some(slot) = self.slot_of(conn) {
            return slot;
        }
        let slot = self.free_slot();
        self.admissions.count(now);
        self.slots[slot] = Some(Session {
            conn,
            last_seen: now,
            state,
            proven: false,
            admitted: now,
            unproven_replies: 0,
            unproven_in: 0,
            unproven_out: 0,
        });
        self.by_conn.insert(conn, slot);
        slot
    }

    /// The slot the next [`SessionTable::insert`] will use (a server derives a player's id or
    /// spawn point from it before building the state).
    pub fn next_slot(&self) -> usize {
        self.slots
            .iter()
            .position(Option::is_none)
            .unwrap_or(self.slots.len())
    }

    fn free_slot(&mut self) -> usize {
        let slot = self.next_slot();
        if slot == self.slots.len() {
            self.slots.push(None);
        }
        slot
    }

    /// The session in `slot`, if one is there.
    pub fn get(&self, slot: usize) -> Option<&Session<T>> {
        self.slots.get(slot)?.as_ref()
    }

    /// The session in `slot`, to change it.
    pub fn get_mut(&mut self, slot: usize) -> Option<&mut Session<T>> {
        self.slots.get_mut(slot)?.as_mut()
    }

    /// The server's own state of the session in `slot`.
    pub fn state(&self, slot: usize) -> Option<&T> {
        self.get(slot).map(|s| &s.state)
    }

    /// The protocol state of the session in `slot`.
    pub fn state_mut(&mut self, slot: usize) -> Option<&mut T> {
        self.get_mut(slot).map(|s| &mut s.state)
    }

    /// Every live session's state, in slot order.
    pub fn states_mut(&mut self) -> impl Iterator<Item = &mut T> + '_ {
        self.slots.iter_mut().flatten().map(|s| &mut s.state)
    }

    /// The session of `conn`.
    pub fn by_conn(&self, conn: ConnId) -> Option<&Session<T>> {
        self.get(self.slot_of(conn)?)
    }

    /// Any datagram from a client proves it alive (cafe.md: every packet refreshes it).
    pub fn touch(&mut self, slot: usize, now: Instant) {
        if let Some(s) = self.get_mut(slot) {
            s.last_seen = now;
        }
    }

    /// The client of `slot` has shown that it receives (its first datagram after the
    /// handshake reply). Returns `true` the first time, so the server can send then what it
    /// held back (R-Type's ENTITY_CREATEs, cafe's first full snapshot).
    pub fn prove(&mut self, slot: usize) -> bool {
        match self.get_mut(slot) {
            Some(s) if !s.proven => {
                s.proven = true;
                true
            }
            _ => false,
        }
    }

    /// Whether `conn` has a session that has proven its address.
    pub fn is_proven(&self, conn: ConnId) -> bool {
        self.by_conn(conn).is_some_and(|s| s.proven)
    }

    /// May the server answer one more handshake from the session in `slot`? Always for a
    /// proven session (a retry after a lost reply); at most
    /// [`admission::MAX_UNPROVEN_REPLIES`] times for an unproven one, counted here.
    pub fn may_reply(&mut self, slot: usize) -> bool {
        let Some(s) = self.get_mut(slot) else {
            return false;
        };
        if s.proven {
            return true;
        }
        if s.unproven_replies >= admission::MAX_UNPROVEN_REPLIES {
            return false;
        }
        s.unproven_replies += 1;
        true
    }

    /// `len` bytes arrived from the session in `slot`: while it is unproven they are what it
    /// may be sent (see [`SessionTable::spend`]).
    pub fn credit(&mut self, slot: usize, len: usize) {
        if let Some(s) = self.get_mut(slot) {
            if !s.proven {
                s.unproven_in = s.unproven_in.saturating_add(len as u64);
            }
        }
    }

    /// May `len` bytes go to the session in `slot`? Always when proven; while unproven only
    /// when the bytes sent to it stay within the bytes received from it (counted here), so
    /// an address that never proves itself gets back at most what was sent in its name.
    pub fn spend(&mut self, slot: usize, len: usize) -> bool {
        let Some(s) = self.get_mut(slot) else {
            return false;
        };
        if s.proven {
            return true;
        }
        let out = s.unproven_out.saturating_add(len as u64);
        if out > s.unproven_in {
            return false;
        }
        s.unproven_out = out;
        true
    }

    /// Bytes the unproven session in `slot` may still be sent (`u64::MAX` once proven; 0 for
    /// an empty slot): what [`SessionTable::spend`] would allow.
    pub fn budget(&self, slot: usize) -> u64 {
        match self.get(slot) {
            Some(s) if s.proven => u64::MAX,
            Some(s) => s.unproven_in.saturating_sub(s.unproven_out),
            None => 0,
        }
    }

    /// Sessions not proven yet.
    pub fn unproven(&self) -> usize {
        self.iter().filter(|(_, s)| !s.proven).count()
    }

    /// The slot of the oldest unproven session older than its protection window
    /// ([`SessionTable::protection_window`]): the one a full server gives up for a new
    /// client, so forged handshakes cannot hold every slot (a client still within a round
    /// trip of its reply keeps its slot).
    pub fn oldest_unproven(&self, now: Instant) -> Option<usize> {
        let window = self.protection_window(now);
        self.iter()
            .filter(|(_, s)| !s.proven && now.saturating_duration_since(s.admitted) >= window)
            .min_by_key(|(_, s)| s.admitted)
            .map(|(slot, _)| slot)
    }

    /// How old an unproven session must be before [`SessionTable::oldest_unproven`] offers
    /// it: [`admission::protection_window`] for the sessions held and admitted a second now.
    pub fn protection_window(&self, now: Instant) -> Duration {
        admission::protection_window(self.len(), self.admissions.per_second(now))
    }

    /// Take the session out of `slot` and queue its connection for `poll_close`.
    pub fn remove(&mut self, slot: usize) -> Option<Session<T>> {
        let s = self.slots.get_mut(slot)?.take()?;
        self.by_conn.remove(&s.conn);
        self.closed.push_back(s.conn);
        Some(s)
    }

    /// Queue a connection that never got a session (a refused client) for `poll_close`.
    pub fn close(&mut self, conn: ConnId) {
        self.closed.push_back(conn);
    }

    /// Withdraw the queued closes of `conn`: the transport reused the id for a new session
    /// (a reconnect announced before the old session's close was polled), which must live.
    pub fn retract_close(&mut self, conn: ConnId) {
        self.closed.retain(|&c| c != conn);
    }

    /// The next connection the server is done with (see the module docs).
    pub fn poll_close(&mut self) -> Option<ConnId> {
        self.closed.pop_front()
    }

    /// Slots of sessions silent for `timeout` or longer at `now`, ascending, into `out`
    /// (cleared first; the caller keeps the buffer so a sweep allocates nothing).
    pub fn expired_into(&self, now: Instant, timeout: Duration, out: &mut Vec<usize>) {
        out.clear();
        out.extend(
            self.iter()
                .filter_map(|(slot, s)| is_expired(s, now, timeout).then_some(slot)),
        );
    }

    /// Live sessions in slot order.
    pub fn iter(&self) -> impl Iterator<Item = (usize, &Session<T>)> + '_ {
        self.slots
            .iter()
            .enumerate()
            .filter_map(|(i, s)| s.as_ref().map(|s| (i, s)))
    }

    /// Live sessions in slot order, mutable (the table's index is not: a session cannot
    /// change its connection or slot here).
    pub fn iter_mut(&mut self) -> impl Iterator<Item = (usize, &mut Session<T>)> + '_ {
        self.slots
            .iter_mut()
            .enumerate()
            .filter_map(|(i, s)| s.as_mut().map(|s| (i, s)))
    }

    /// Live sessions whose slot is in `slots` (a room), in slot order.
    pub fn range(
        &self,
        slots: std::ops::Range<usize>,
    ) -> impl Iterator<Item = (usize, &Session<T>)> + '_ {
        let end = slots.end.min(self.slots.len());
        let start = slots.start.min(end);
        self.slots[start..end]
            .iter()
            .enumerate()
            .filter_map(move |(i, s)| s.as_ref().map(|s| (start + i, s)))
    }
}

/// A session is over when silent for `timeout`, or when still unproven
/// [`admission::UNPROVEN_TIMEOUT`] after it was created (whichever comes first).
pub fn is_expired<T>(s: &Session<T>, now: Instant, timeout: Duration) -> bool {
    now.saturating_duration_since(s.last_seen) >= timeout
        || (!s.proven && now.saturating_duration_since(s.admitted) >= admission::UNPROVEN_TIMEOUT)
}

/// A fixed-rate simulation clock with catch-up: the cafe and R-Type servers run at most one
/// tick per wake-up and count the ones they were too late for, rather than running a burst
/// of ticks that would flood every client with snapshots at once.
///
/// Deadlines advance by whole intervals from the first (`start + interval`), so a late wake
/// does not shift the grid.
#[derive(Debug, Clone)]
pub struct TickClock {
    next: Instant,
    interval: Duration,
    skipped: u64,
}

impl TickClock {
    /// The first tick is due one `interval` after `start`. A zero interval is taken as 1 ns
    /// (the servers clamp their rates, so this only guards the arithmetic).
    pub fn new(start: Instant, interval: Duration) -> Self {
        let interval = interval.max(Duration::from_nanos(1));
        Self {
            next: start + interval,
            interval,
            skipped: 0,
        }
    }

    /// When the next tick is due.
    pub fn next_deadline(&self) -> Instant {
        self.next
    }

    /// The time between two ticks.
    pub fn interval(&self) -> Duration {
        self.interval
    }

    /// How many ticks are due at `now` (0 when none), and move the deadline past `now`. The
    /// caller runs one of them; the rest are added to [`TickClock::skipped`].
    pub fn due(&mut self, now: Instant) -> u64 {
        if self.next > now {
            return 0;
        }
        let behind = now.duration_since(self.next).as_nanos();
        let n = behind / self.interval.as_nanos() + 1;
        let n = u64::try_from(n).unwrap_or(u64::MAX);
        // Whole intervals, exactly as adding `interval` n times would.
        let step = self.interval.as_nanos().saturating_mul(u128::from(n));
        self.next += Duration::from_nanos(u64::try_from(step).unwrap_or(u64::MAX));
        self.skipped += n - 1;
        n
    }

    /// Ticks that came due and were not run, since the start.
    pub fn skipped(&self) -> u64 {
        self.skipped
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lowest_free_slot_is_reused_and_every_removal_is_closed() {
        let t = Instant::now();
        let mut tab = SessionTable::new();
        assert_eq!(tab.insert(ConnId(10), t, 'a'), 0);
        assert_eq!(tab.insert(ConnId(11), t, 'b'), 1);
        assert_eq!(tab.insert(ConnId(12), t, 'c'), 2);
        assert_eq!(
            tab.insert(ConnId(11), t, 'x'),
            1,
            "known conn keeps its slot"
        );
        assert_eq!(tab.get(1).map(|s| s.state), Some('b'));
        assert_eq!(tab.remove(1).map(|s| s.state), Some('b'));
        assert_eq!(tab.next_slot(), 1);
        assert_eq!(tab.insert(ConnId(13), t, 'd'), 1);
        assert_eq!(tab.slot_of(ConnId(11)), None);
        assert_eq!(tab.len(), 3);
        assert_eq!(tab.slot_count(), 3);
        tab.close(ConnId(99));
        assert_eq!(tab.poll_close(), Some(ConnId(11)));
        assert_eq!(tab.poll_close(), Some(ConnId(99)));
        assert_eq!(tab.poll_close(), None);
        let room: Vec<char> = tab.range(1..5).map(|(_, s)| s.state).collect();
        assert_eq!(room, vec!['d', 'c']);
    }

    #[test]
    fn sweep_finds_the_silent() {
        let t = Instant::now();
        let mut tab = SessionTable::new();
        tab.insert(ConnId(1), t, ());
        tab.insert(ConnId(2), t, ());
        tab.prove(0);
        tab.prove(1);
        tab.touch(1, t + Duration::from_secs(3));
        let mut out = Vec::new();
        tab.expired_into(t + Duration::from_secs(5), Duration::from_secs(5), &mut out);
        assert_eq!(out, vec![0]);
    }

    #[test]
    fn the_protection_window_is_half_the_turnover_within_its_bounds() {
        let ms = Duration::from_millis;
        // Calm: nothing admitted, or a table that turns over slowly.
        assert_eq!(admission::protection_window(1_000, 0), ms(500));
        assert_eq!(admission::protection_window(1_000, 100), ms(500));
        // 3,000 forged handshakes a second against 1,000 places: 333 ms to turn over.
        let w = admission::protection_window(1_000, 3_000);
        assert!(w > ms(166) && w < ms(167), "{w:?}");
        // A flood that turns the table over in 40 ms: the floor.
        assert_eq!(admission::protection_window(1_000, 25_000), ms(100));
    }

    /// The lock-out of issue 35: with a fixed 500 ms window, 3 new sources a millisecond
    /// against 1,000 places left no session evictable when a newcomer came (each became so
    /// just as a forged handshake took its place). Now half the table is.
    #[test]
    fn a_flood_faster_than_the_fixed_window_leaves_the_oldest_half_evictable() {
        let t0 = Instant::now();
        let mut table = SessionTable::new();
        let mut next_conn = 0u64;
        let mut refused_while_full = 0;
        for ms in 0..3_000u64 {
            let now = t0 + Duration::from_millis(ms);
            for _ in 0..3 {
                if table.len() >= 1_000 {
                    match table.oldest_unproven(now) {
                        Some(slot) => {
                            table.remove(slot);
                        }
                        None => {
                            refused_while_full += 1;
                            continue;
                        }
                    }
                }
                table.insert(ConnId(next_conn), now, ());
                next_conn += 1;
            }
        }
        let now = t0 + Duration::from_millis(3_000);
        // The flood ran at 3,000 a second; the window is half of 1,000 / 3,000 s.
        let window = table.protection_window(now);
        assert!(
            window > Duration::from_millis(150) && window < Duration::from_millis(180),
            "{window:?}"
        );
        let evictable = table
            .iter()
            .filter(|(_, s)| now.saturating_duration_since(s.admitted) >= window)
            .count();
        assert!(
            (400..=600).contains(&evictable),
            "{evictable} of 1,000 evictable"
        );
        assert!(table.oldest_unproven(now).is_some());
        // Only while the window still stood at 500 ms (the first second) were sources
        // refused.
        assert!(
            refused_while_full > 0 && refused_while_full < 1_000,
            "{refused_while_full}"
        );
    }

    #[test]
    fn unproven_sessions_expire_early_and_replies_are_capped() {
        let t = Instant::now();
        let mut tab = SessionTable::new();
        tab.insert(ConnId(1), t, ());
        tab.insert(ConnId(2), t, ());
        assert!(tab.prove(1));
        assert!(!tab.prove(1), "proven once");
        // A repeated handshake refreshes last_seen but not the unproven deadline.
        tab.touch(0, t + Duration::from_millis(1900));
        tab.touch(1, t + Duration::from_millis(1900));
        let mut out = Vec::new();
        let at = t + admission::UNPROVEN_TIMEOUT;
        tab.expired_into(at, Duration::from_secs(5), &mut out);
        assert_eq!(out, vec![0], "only the unproven one");
        assert_eq!(tab.oldest_unproven(t), None, "too young to evict");
        assert_eq!(tab.oldest_unproven(at), Some(0));
        let replies = (0..10).filter(|_| tab.may_reply(0)).count();
        assert_eq!(replies as u32, admission::MAX_UNPROVEN_REPLIES);
        assert!((0..10).all(|_| tab.may_reply(1)), "proven: no cap");
    }

    #[test]
    fn unproven_sessions_get_no_more_bytes_than_they_sent() {
        let t = Instant::now();
        let mut tab = SessionTable::new();
        tab.insert(ConnId(1), t, ());
        assert!(!tab.spend(0, 1), "nothing received yet");
        tab.credit(0, 24);
        assert!(tab.spend(0, 12));
        assert!(tab.spend(0, 12));
        assert!(!tab.spend(0, 1), "24 in, 24 out");
        tab.credit(0, 16);
        assert!(!tab.spend(0, 17));
        assert!(tab.spend(0, 16));
        tab.prove(0);
        assert!(tab.spend(0, 10_000), "proven: no budget");
    }

    #[test]
    fn clock_runs_one_and_counts_the_rest() {
        let t = Instant::now();
        let ms = Duration::from_millis;
        let mut c = TickClock::new(t, ms(10));
        assert_eq!(c.next_deadline(), t + ms(10));
        assert_eq!(c.due(t + ms(9)), 0);
        assert_eq!(c.due(t + ms(10)), 1);
        assert_eq!(c.next_deadline(), t + ms(20));
        assert_eq!(c.due(t + ms(45)), 3, "20, 30 and 40 were due");
        assert_eq!(c.next_deadline(), t + ms(50));
        assert_eq!(c.skipped(), 2);
    }

    #[test]
    fn clock_matches_adding_the_interval() {
        let t = Instant::now();
        let interval = Duration::from_secs(1) / 60;
        let mut c = TickClock::new(t, interval);
        let mut next = t + interval;
        for wake in [1u64, 17, 18, 100, 1_000, 1_001, 5_000] {
            let now = t + Duration::from_millis(wake);
            let mut n = 0;
            while next <= now {
                n += 1;
                next += interval;
            }
            assert_eq!(c.due(now), n, "at {wake} ms");
            assert_eq!(c.next_deadline(), next);
        }
    }
}
