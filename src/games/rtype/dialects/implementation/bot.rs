//! The implementation dialect's bot: a TCP login, then play over UDP.
//!
//! Life: the transport connects TCP to the target and starts the bot. The bot sends HELLO on
//! the stream and waits for WELCOME (same request id) until `handshake_timeout`; then it sends
//! CONNECT over UDP, again every `handshake_retry` until ACCEPT (each CONNECT the server gets
//! adds a ship for the sender, so a resend is counted `connect_retry`), and gives up at
//! `handshake_timeout` after WELCOME. In play: INPUT (the pattern's key bits) on the input
//! grid, one PING in flight, snapshots applied whole (each is the full entity list), DISCONNECT
//! on stop. The login stream stays open; its end after login is counted
//! (`login_stream_closed`) and play goes on, since the server keys play by UDP address.
//!
//! # Failures, by reason (`connect_failures`)
//! - `tcp_login/refused`: nothing listens on the TCP port (the transport's, before start);
//!   `transport connect timed out`: no answer to the TCP connect within `handshake_timeout`.
//! - `login_closed`: the server closed the stream before WELCOME.
//! - `login_bad_reply`: ERROR_MESSAGE, a WELCOME for another request id, a malformed frame
//!   or WELCOME (the decode error is counted too).
//! - `login_timeout`: no WELCOME within `handshake_timeout`.
//! - `accept_timeout`: no ACCEPT within `handshake_timeout` after WELCOME; `rejected`: REJECT.
//!
//! # What it measures
//! - `handshake_us`: TCP up to ACCEPT (HELLO, WELCOME, CONNECT, ACCEPT); `login_us`: TCP up
//!   to WELCOME. The engine's `connect_total_us` adds the TCP connect.
//! - `rtt_us`: PING to PONG, one in flight ([`OneInFlight`]); the server answers from its game
//!   loop, so a sample includes up to one server frame.
//! - `snapshots_applied`, `snapshot_interarrival_us`, `entities`: every well-formed SNAPSHOT
//!   is applied (no tick to order them by). Loss is not measured: no datagram carries a
//!   sequence or tick (see the dialect's `cannot_measure`).
//! - Events: `score_updates`, `damage_events`, `gameover`, `accept_duplicate`,
//!   `login_message_ignored` (a room message the bot did not ask for, before WELCOME),
//!   `login_stream_discarded_bytes` (the stream after WELCOME: not parsed), `dialect_hint.spec`
//!   (a datagram this dialect drops that reads cleanly as the spec dialect's).

use std::collections::VecDeque;
use std::time::Instant;

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use super::codec::{self, Datagram, Frame, FrameReader, TcpMessage};
use crate::games::rtype::codec as spec_codec;
use crate::games::rtype::FloatOrder;
use crate::protocol::prelude::input_grid::KeyInputs;
use crate::protocol::prelude::ping::OneInFlight;
use crate::protocol::prelude::timers::{wake_in_phase, Handshake, Silence};
use crate::protocol::prelude::Recorder;
use crate::protocol::prelude::{Bot, BotParams, BotPhase, Transmit};

/// Bytes of the login stream read after WELCOME (or after the bot failed), not parsed.
const STREAM_DISCARDED: &str = "login_stream_discarded_bytes";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Out {
    Hello,
    Connect,
    Input(u8),
    Ping,
    Disconnect,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    /// HELLO sent, WELCOME awaited.
    Login,
    /// CONNECT sent, ACCEPT awaited.
    Accept,
}

pub struct ImplementationBot {
    params: BotParams,
    rng: ChaCha8Rng,
    phase: BotPhase,
    stage: Stage,
    out: VecDeque<Out>,
    request_id: u32,
    frames: FrameReader,
    session_id: Option<u32>,
    started_at: Option<Instant>,
    handshake: Handshake,
    connected_at: Option<Instant>,
    silence: Silence,
    keys: KeyInputs,
    ping: OneInFlight,
    last_snapshot: Option<Instant>,
    entities: usize,
}

impl ImplementationBot {
    pub fn new(params: BotParams) -> Self {
        let keys = KeyInputs::new(&params);
        let rng = ChaCha8Rng::seed_from_u64(params.seed);
        let silence = Silence::new(params.server_silence_timeout);
        let ping = OneInFlight::new(params.ping_interval);
        // Any id will do (the server echoes it); distinct per bot to read captures by.
        let request_id = params.index.wrapping_add(1);
        Self {
            params,
            rng,
            phase: BotPhase::Idle,
            stage: Stage::Login,
            out: VecDeque::with_capacity(16),
            request_id,
            frames: FrameReader::default(),
            session_id: None,
            started_at: None,
            handshake: Handshake::new(),
            connected_at: None,
            silence,
            keys,
            ping,
            last_snapshot: None,
            entities: 0,
        }
    }

    /// The session id WELCOME gave (the server's TCP session; play is keyed by UDP address).
    pub fn session_id(&self) -> Option<u32> {
        self.session_id
    }

    /// Entities in the last snapshot applied.
    pub fn entity_count(&self) -> usize {
        self.entities
    }

    /// HELLO sent, WELCOME not read yet: the only time the stream is parsed.
    fn logging_in(&self) -> bool {
        self.phase == BotPhase::Connecting && self.stage == Stage::Login
    }

    fn fail(&mut self, reason: &'static str, rec: &mut Recorder) {
        self.phase = BotPhase::Failed;
        rec.connect_failures.add(reason, 1);
        self.out.clear();
        self.handshake.end();
    }

    fn on_welcome(&mut self, now: Instant, request_id: u32, udp_port: u16, rec: &mut Recorder) {
        if self.phase != BotPhase::Connecting || self.stage != Stage::Login {
            rec.event("welcome_duplicate");
            return;
        }
        if request_id != self.request_id {
            rec.decode_error("WELCOME", "request_id");
            return self.fail("login_bad_reply", rec);
        }
        if udp_port != 0 {
            // The released server leaves it 0; a later one may name its UDP port. The bot
            // plays on the TCP port + udp_port_offset either way: say so when they differ.
            rec.event("welcome_udp_port_set");
        }
        if let Some(at) = self.started_at {
            rec.record_extra(
                "login_us",
                now.saturating_duration_since(at).as_micros() as u64,
            );
        }
        self.stage = Stage::Accept;
        self.out.push_back(Out::Connect);
        self.handshake.begin(
            now,
            Some(self.params.handshake_retry),
            self.params.handshake_timeout,
        );
    }

    fn on_accept(&mut self, now: Instant, rec: &mut Recorder) {
        if self.phase != BotPhase::Connecting || self.stage != Stage::Accept {
            // The server answers every CONNECT it gets, resends included.
            rec.event("accept_duplicate");
            return;
        }
        self.phase = BotPhase::Connected;
        self.connected_at = Some(now);
        self.handshake.end();
        self.silence.arm(now);
        if let Some(at) = self.started_at {
            rec.record_handshake(now.saturating_duration_since(at).as_micros() as u64);
        }
        self.keys.begin(now, &self.params);
        self.ping.start_at(now + self.params.phase_offset);
    }

    fn on_snapshot(&mut self, now: Instant, s: &codec::Snapshot<'_>, rec: &mut Recorder) {
        if let Some(prev) = self.last_snapshot {
            let gap = now.saturating_duration_since(prev).as_micros() as u64;
            rec.record_snapshot_interarrival(gap);
        }
        self.last_snapshot = Some(now);
        self.entities = s.entities().count();
        rec.snapshots_applied += 1;
        // No lost snapshot is counted here: the rate reads what arrived.
        rec.snapshots_sent += 1;
        rec.record_extra("entities", u64::from(s.count()));
    }

    /// A datagram this dialect drops: named when it reads cleanly as the spec dialect's.
    fn hint_spec(data: &[u8], rec: &mut Recorder) {
        let spec = spec_codec::decode(data, FloatOrder::Big)
            .is_ok_and(|p| !p.packet_type().is_client_to_server());
        if spec {
            rec.event("dialect_hint.spec");
        }
    }

    fn on_frame(
        &mut self,
        now: Instant,
        msg: Result<TcpMessage, codec::DecodeError>,
        rec: &mut Recorder,
    ) {
        let login = self.phase == BotPhase::Connecting && self.stage == Stage::Login;
        match msg {
            Ok(TcpMessage::Welcome {
                request_id,
                udp_port,
                ..
            }) => self.on_welcome(now, request_id, udp_port, rec),
            Ok(TcpMessage::Error { .. }) if login => {
                rec.event("login_error_message");
                self.fail("login_bad_reply", rec);
            }
            Ok(TcpMessage::Error { .. }) => rec.event("login_error_message"),
            Ok(TcpMessage::Other { .. }) => rec.event("login_message_ignored"),
            Err(e) => {
                rec.decode_error(e.message, e.reason);
                if login {
                    self.fail("login_bad_reply", rec);
                }
            }
        }
    }

    fn send_inputs_due(&mut self, now: Instant, rec: &mut Recorder) {
        let played = now.saturating_duration_since(self.connected_at.unwrap_or(now));
        let Some(keys) = self
            .keys
            .take(now, played, &self.params, &mut self.rng, rec)
        else {
            return;
        };
        // The pattern's key bits are the server's INPUT flags, bit for bit.
        self.out.push_back(Out::Input(keys.0));
        rec.inputs_sent += 1;
    }
}

impl Bot for ImplementationBot {
    fn start(&mut self, now: Instant, _rec: &mut Recorder) {
        self.phase = BotPhase::Connecting;
        self.stage = Stage::Login;
        self.started_at = Some(now);
        self.out.push_back(Out::Hello);
        // The stream delivers HELLO or fails: no resend, one deadline.
        self.handshake
            .begin(now, None, self.params.handshake_timeout);
    }

    fn handle_stream(&mut self, now: Instant, data: &[u8], rec: &mut Recorder) {
        if !self.logging_in() {
            // After WELCOME the stream carries nothing this bot asked for (room messages
            // answer room requests it never sends): it is not parsed, only counted, so a
            // server streaming frames costs a copy, not a decode per frame.
            rec.events.add(STREAM_DISCARDED, data.len() as u64);
            return;
        }
        self.frames.push(data);
        let mut used = 0;
        loop {
            let msg = match self.frames.next_frame(&mut used) {
                Frame::Partial => break,
                Frame::Payload(p) => codec::decode_tcp(p),
                Frame::BadLength(_) => {
                    rec.decode_error("tcp", "frame_length");
                    self.fail("login_bad_reply", rec);
                    // The stream cannot be followed past a bad length.
                    self.frames = FrameReader::default();
                    break;
                }
            };
            self.on_frame(now, msg, rec);
            if !self.logging_in() {
                // Logged in (or failed): what followed WELCOME in the same read is not read.
                let rest = self.frames.buffered().saturating_sub(used);
                if rest > 0 {
                    rec.events.add(STREAM_DISCARDED, rest as u64);
                }
                self.frames = FrameReader::default();
                break;
            }
        }
    }

    fn handle_datagram(&mut self, now: Instant, data: &[u8], rec: &mut Recorder) {
        if !self.phase.takes_datagram(rec) {
            return;
        }
        let d = match codec::decode(data) {
            Ok(Some(d)) => d,
            Ok(None) => {
                rec.event("unknown_message_type");
                Self::hint_spec(data, rec);
                return;
            }
            Err(e) => {
                rec.decode_error(e.message, e.reason);
                Self::hint_spec(data, rec);
                return;
            }
        };
        self.silence.heard(now);
        match d {
            Datagram::Accept => return self.on_accept(now, rec),
            Datagram::Reject if self.phase == BotPhase::Connecting => {
                rec.event("reject_received");
                return self.fail("rejected", rec);
            }
            _ => {}
        }
        if self.phase != BotPhase::Connected {
            rec.event("packet_before_accept");
            return;
        }
        match d {
            Datagram::Snapshot(s) => self.on_snapshot(now, &s, rec),
            Datagram::Pong => self.ping.on_pong(now, rec),
            Datagram::Score(_) => rec.event("score_updates"),
            Datagram::Damage { .. } => rec.event("damage_events"),
            Datagram::GameOver => rec.event("gameover"),
            Datagram::Reject => rec.event("reject_unexpected"),
            Datagram::Accept => {}
        }
    }

    fn handle_timeout(&mut self, now: Instant, rec: &mut Recorder) {
        match self.phase {
            BotPhase::Connecting => {
                if self.handshake.timed_out(now) {
                    let why = match self.stage {
                        Stage::Login => "login_timeout",
                        Stage::Accept => "accept_timeout",
                    };
                    return self.fail(why, rec);
                }
                if self.stage == Stage::Accept && self.handshake.retry_due(now) {
                    rec.event("connect_retry");
                    self.out.push_back(Out::Connect);
                }
            }
            BotPhase::Connected => {
                if self.silence.expired(now) {
                    self.phase = BotPhase::Closed;
                    rec.event("server_silence_timeout");
                    self.out.clear();
                    return;
                }
                self.send_inputs_due(now, rec);
                if self.ping.poll(now, rec) {
                    self.out.push_back(Out::Ping);
                }
            }
            BotPhase::Idle | BotPhase::Failed | BotPhase::Closed => {}
        }
    }

    fn handle_transport_closed(&mut self, _now: Instant, rec: &mut Recorder) {
        match self.phase {
            BotPhase::Connecting if self.stage == Stage::Login => self.fail("login_closed", rec),
            // Play is keyed by UDP address: the server does not end it with the stream.
            BotPhase::Connecting | BotPhase::Connected => rec.event("login_stream_closed"),
            BotPhase::Idle | BotPhase::Failed | BotPhase::Closed => {}
        }
    }

    fn stop(&mut self, _now: Instant, _rec: &mut Recorder) {
        if self.phase == BotPhase::Connected {
            self.out.push_back(Out::Disconnect);
        }
        self.phase = self.phase.after_stop();
    }

    fn poll_transmit(&mut self, buf: &mut [u8]) -> Option<Transmit> {
        let out = self.out.pop_front()?;
        let (len, stream) = match out {
            Out::Hello => (
                codec::encode_hello(buf, self.request_id, codec::HELLO_VERSION)?,
                true,
            ),
            Out::Connect => (codec::encode_bare(buf, codec::CONNECT)?, false),
            Out::Input(keys) => (codec::encode_input(buf, keys)?, false),
            Out::Ping => (codec::encode_bare(buf, codec::PING)?, false),
            Out::Disconnect => (codec::encode_bare(buf, codec::DISCONNECT)?, false),
        };
        Some(Transmit {
            len,
            channel: 0,
            reliable: stream,
        })
    }

    fn poll_timeout(&self) -> Option<Instant> {
        wake_in_phase(
            self.phase,
            self.handshake.next_deadline(),
            [
                self.keys.next_due(),
                self.ping.next(),
                self.silence.deadline(),
            ],
        )
    }

    fn phase(&self) -> BotPhase {
        self.phase
    }

    fn waiting_for(&self) -> Option<&'static str> {
        match (self.phase, self.stage) {
            (BotPhase::Connecting, Stage::Login) => Some("WELCOME"),
            (BotPhase::Connecting, Stage::Accept) => Some("ACCEPT"),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bot() -> ImplementationBot {
        ImplementationBot::new(BotParams::with_index(4, 7))
    }

    fn drain(b: &mut ImplementationBot) -> Vec<(Vec<u8>, bool)> {
        let mut buf = [0u8; 64];
        let mut v = Vec::new();
        while let Some(t) = b.poll_transmit(&mut buf) {
            v.push((buf[..t.len].to_vec(), t.reliable));
        }
        v
    }

    fn welcome(request_id: u32) -> Vec<u8> {
        let mut p = vec![codec::WELCOME];
        p.extend_from_slice(&request_id.to_be_bytes());
        p.extend_from_slice(&[0, 1, 0, 0, 0, 3, 0, 0]);
        let mut f = (p.len() as u32).to_be_bytes().to_vec();
        f.extend_from_slice(&p);
        f
    }

    /// HELLO on the stream; WELCOME (split across reads) makes CONNECT go out over UDP;
    /// ACCEPT puts the bot in play with the handshake timed from the start.
    #[test]
    fn login_then_connect_then_play() {
        let mut b = bot();
        let mut rec = Recorder::new();
        let t0 = Instant::now();
        b.start(t0, &mut rec);
        let out = drain(&mut b);
        assert_eq!(out, vec![(vec![0, 0, 0, 7, 1, 0, 0, 0, 5, 0, 1], true)]);
        let w = welcome(5);
        b.handle_stream(t0, &w[..6], &mut rec);
        assert!(drain(&mut b).is_empty());
        b.handle_stream(t0, &w[6..], &mut rec);
        assert_eq!(b.session_id(), None);
        assert_eq!(drain(&mut b), vec![(vec![1, 1, 0, 4], false)]);
        assert_eq!(b.waiting_for(), Some("ACCEPT"));
        b.handle_datagram(t0, &[codec::ACCEPT, 1, 0, 4], &mut rec);
        assert_eq!(b.phase(), BotPhase::Connected);
        assert_eq!(rec.connect_failures.total(), 0);
    }

    #[test]
    fn a_welcome_for_another_request_is_a_bad_reply() {
        let mut b = bot();
        let mut rec = Recorder::new();
        b.start(Instant::now(), &mut rec);
        b.handle_stream(Instant::now(), &welcome(99), &mut rec);
        assert_eq!(b.phase(), BotPhase::Failed);
        assert_eq!(rec.connect_failures.get("login_bad_reply"), 1);
    }

    #[test]
    fn a_stream_closed_before_welcome_fails_and_after_login_does_not() {
        let mut b = bot();
        let mut rec = Recorder::new();
        b.start(Instant::now(), &mut rec);
        b.handle_transport_closed(Instant::now(), &mut rec);
        assert_eq!(rec.connect_failures.get("login_closed"), 1);

        let mut b = bot();
        let now = Instant::now();
        b.start(now, &mut rec);
        b.handle_stream(now, &welcome(5), &mut rec);
        b.handle_datagram(now, &[codec::ACCEPT, 1, 0, 4], &mut rec);
        b.handle_transport_closed(now, &mut rec);
        assert_eq!(b.phase(), BotPhase::Connected);
        assert_eq!(rec.events.get("login_stream_closed"), 1);
    }

    #[test]
    fn no_welcome_is_a_login_timeout() {
        let mut b = bot();
        let mut rec = Recorder::new();
        let t0 = Instant::now();
        b.start(t0, &mut rec);
        let at = b.poll_timeout().expect("a deadline");
        b.handle_timeout(at, &mut rec);
        assert_eq!(rec.connect_failures.get("login_timeout"), 1);
    }

    /// The spec dialect's ACCEPT (type 10) is unknown here, and named.
    #[test]
    fn spec_bytes_give_a_dialect_hint() {
        let mut b = bot();
        let mut rec = Recorder::new();
        let now = Instant::now();
        b.start(now, &mut rec);
        b.handle_stream(now, &welcome(5), &mut rec);
        b.handle_datagram(now, &[10, 1, 0, 4], &mut rec);
        assert_eq!(rec.events.get("dialect_hint.spec"), 1);
        assert_eq!(b.phase(), BotPhase::Connecting);
    }

    /// After WELCOME the stream is not parsed: frames after it in the same read, and every
    /// byte after, are counted and thrown away (a malformed length among them fails nothing).
    #[test]
    fn the_stream_after_welcome_is_counted_not_parsed() {
        let mut b = bot();
        let mut rec = Recorder::new();
        let now = Instant::now();
        b.start(now, &mut rec);
        // WELCOME, then a ROOMS_LIST frame by hand: len 5, type 0x12, request id 0.
        let mut w = welcome(5);
        w.extend_from_slice(&[0, 0, 0, 5, 0x12, 0, 0, 0, 0]);
        b.handle_stream(now, &w, &mut rec);
        // A length of 0 would fail a login; after it, it is just 4 bytes.
        b.handle_stream(now, &[0, 0, 0, 0], &mut rec);
        assert_eq!(rec.events.get("login_stream_discarded_bytes"), 9 + 4);
        assert_eq!(rec.events.get("login_message_ignored"), 0);
        assert!(
            rec.decode_errors.total() == 0,
            "nothing decoded after WELCOME"
        );
        assert!(rec.connect_failures.total() == 0);
        assert_eq!(b.phase(), BotPhase::Connecting, "awaiting ACCEPT");
    }
}
