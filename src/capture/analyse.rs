//! Flows and candidates: every flow of a capture read as every protocol and dialect.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;

use serde::Serialize;

use super::read::{self, CaptureError, Carrier, Packet, ReadCounts};
use crate::protocol::inspect::{Direction, Inspect, Mismatch, Role, Seen};
use crate::protocol::Keys;
use crate::protocol::{ProtocolName, ProtocolSection, TransportNeeds};
use crate::transport::enet::unframe::Unframer;

/// Flows followed at once; packets of further flows are counted, not read.
pub const MAX_FLOWS: usize = 1024;
/// Ping tokens waiting for their answer, per flow and candidate.
const MAX_PENDING_PINGS: usize = 1024;
/// RTT samples kept per flow and candidate.
const MAX_RTT_SAMPLES: usize = 65_536;
/// Bytes of a failing datagram shown around the failing offset.
const EXCERPT: usize = 16;
/// Key changes kept per flow and candidate for a replay (`--write-scenario`); past this the
/// stream is cut and the scenario says so.
pub const MAX_KEY_CHANGES: usize = 100_000;
/// The share of a flow's datagrams a candidate must read to be named.
pub const NAME_SHARE: f64 = 0.9;

/// The whole capture, inspected.
#[derive(Debug, Serialize)]
pub struct Inspection {
    /// What the reader saw.
    pub read: ReadCounts,
    /// Packets of flows past [`MAX_FLOWS`], not read.
    pub packets_not_followed: u64,
    /// One entry per flow, in order of first appearance.
    pub flows: Vec<FlowReport>,
}

/// One flow.
#[derive(Debug, Serialize)]
pub struct FlowReport {
    /// `udp` or `tcp`.
    pub carrier: &'static str,
    /// The side that sent first.
    pub client: SocketAddr,
    /// The other side.
    pub server: SocketAddr,
    /// Seconds from the flow's first packet to its last.
    pub duration_s: f64,
    /// Datagrams (segments with payload, for TCP) client → server.
    pub to_server: DirCounts,
    /// ... and server → client.
    pub to_client: DirCounts,
    /// The candidate that reads it (at least [`NAME_SHARE`] of its datagrams), if any.
    pub protocol: Option<String>,
    /// Its dialect.
    pub dialect: Option<String>,
    /// The protocol option that names the dialect in a scenario (`dialect`, `float_order`).
    #[serde(skip)]
    pub dialect_key: Option<String>,
    /// Every candidate, best first.
    pub candidates: Vec<CandidateReport>,
    /// The client's behaviour as the named candidate reads it.
    pub behaviour: Option<Behaviour>,
}

/// Datagrams of one direction.
#[derive(Debug, Default, Serialize, Clone)]
pub struct DirCounts {
    /// How many.
    pub datagrams: u64,
    /// Their payload bytes.
    pub bytes: u64,
    /// Datagrams a second over the flow's duration.
    pub rate_hz: f64,
}

/// One protocol and dialect tried on one flow.
#[derive(Debug, Serialize)]
pub struct CandidateReport {
    /// Protocol name.
    pub protocol: String,
    /// Dialect name.
    pub dialect: String,
    /// Datagrams it read.
    pub decoded: u64,
    /// Datagrams it was given.
    pub of: u64,
    /// `decoded / of`.
    pub share: f64,
    /// Why it could not try, when it could not (no inspector, an encrypted transport).
    pub cannot: Option<String>,
    /// The first datagram it failed on.
    pub first_failure: Option<Failure>,
    /// Message types read, with counts and sizes.
    pub messages: Vec<MessageCount>,
}

/// Where a candidate first failed.
#[derive(Debug, Serialize, Clone)]
pub struct Failure {
    /// Index of the datagram in the flow (from 0).
    pub datagram: u64,
    /// Its direction.
    pub direction: &'static str,
    /// Seconds from the flow's start.
    pub at_s: f64,
    /// Byte offset of the failure (in the ENet packet, when `layer` says so).
    pub offset: usize,
    /// What was expected there.
    pub expected: String,
    /// `datagram`, `enet` (the framing), or `enet packet on channel N`.
    pub layer: String,
    /// Hex bytes from up to 16 before the offset to 16 after; `[..]` marks the offset.
    pub hex: String,
}

/// One message type in one direction.
#[derive(Debug, Serialize, Clone)]
pub struct MessageCount {
    /// Direction.
    pub direction: &'static str,
    /// Message type.
    pub kind: &'static str,
    /// How many.
    pub count: u64,
    /// Smallest, mean and largest size in bytes.
    pub min_bytes: usize,
    /// Mean size.
    pub mean_bytes: f64,
    /// Largest size.
    pub max_bytes: usize,
}

/// The client's behaviour, measured on the flow.
#[derive(Debug, Serialize, Clone, Default)]
pub struct Behaviour {
    /// Inputs the client sent.
    pub inputs: u64,
    /// Inputs a second (between the first and the last).
    pub input_rate_hz: Option<f64>,
    /// Standard deviation of the time between inputs, ms.
    pub input_jitter_ms: Option<f64>,
    /// Pings the client sent.
    pub pings: u64,
    /// Mean time between them, ms.
    pub ping_interval_ms: Option<f64>,
    /// Snapshots the server sent.
    pub snapshots: u64,
    /// Snapshots a second.
    pub snapshot_rate_hz: Option<f64>,
    /// Smallest, mean and largest snapshot message, bytes.
    pub snapshot_bytes: Option<(usize, f64, usize)>,
    /// Round trips from ping/pong pairs, ms: count, min, median, max (seen at the capture
    /// point).
    pub rtt_ms: Option<(u64, f64, f64, f64)>,
    /// Share of messages missing from the server's sequence numbers (gaps), when it has them.
    pub downstream_loss: Option<f64>,
    /// The same for the client's.
    pub upstream_loss: Option<f64>,
    /// Times the keys of the client's inputs changed (the first input counts as one), when
    /// the protocol's inputs carry keys.
    pub key_changes: u64,
    /// The client's key stream: the keys of each run of equal inputs and how long it lasted
    /// (the last run until one input interval after the last input), what `pattern: replay`
    /// plays back.
    #[serde(skip)]
    pub key_steps: Vec<(Keys, std::time::Duration)>,
    /// Whether the stream was cut at [`MAX_KEY_CHANGES`].
    pub key_stream_cut: bool,
}

#[derive(Default)]
struct Series {
    count: u64,
    first: u64,
    last: u64,
    mean: f64,
    m2: f64,
}

impl Series {
    fn add(&mut self, at: u64) {
        if self.count > 0 {
            let dt = at.saturating_sub(self.last) as f64 / 1000.0;
            let n = self.count as f64; // intervals so far + 1
            let delta = dt - self.mean;
            self.mean += delta / n;
            self.m2 += delta * (dt - self.mean);
        } else {
            self.first = at;
        }
        self.last = at;
        self.count += 1;
    }
    fn rate(&self) -> Option<f64> {
        (self.count > 1 && self.last > self.first)
            .then(|| (self.count - 1) as f64 * 1e6 / (self.last - self.first) as f64)
    }
    fn interval_ms(&self) -> Option<f64> {
        (self.count > 1).then_some(self.mean)
    }
    fn jitter_ms(&self) -> Option<f64> {
        (self.count > 2).then(|| (self.m2 / (self.count - 1) as f64).sqrt())
    }
}

#[derive(Default)]
struct SeqGaps {
    count: u64,
    min: u64,
    max: u64,
}

impl SeqGaps {
    fn add(&mut self, s: u64) {
        if self.count == 0 {
            self.min = s;
            self.max = s;
        }
        self.min = self.min.min(s);
        self.max = self.max.max(s);
        self.count += 1;
    }
    fn loss(&self) -> Option<f64> {
        let span = self.max.checked_sub(self.min)?.checked_add(1)?;
        if self.count < 2 {
            return None;
        }
        let lost = span.saturating_sub(self.count) as f64 / span as f64;
        // A sequence shared by many clients (or a tick that steps by more than one) is no
        // per-flow sequence: no loss figure rather than a wrong one.
        (lost <= 0.5).then_some(lost)
    }
}

#[derive(Default)]
struct Acc {
    inputs: Series,
    pings: Series,
    snapshots: Series,
    snap_min: usize,
    snap_max: usize,
    snap_sum: u64,
    pending: HashMap<u64, u64>,
    rtt_us: Vec<u64>,
    up: SeqGaps,
    down: SeqGaps,
    /// Key changes: when (µs) and to what.
    keys: Vec<(u64, Keys)>,
    keys_cut: bool,
}

struct Candidate {
    protocol: ProtocolName,
    dialect: String,
    dialect_key: &'static str,
    inspector: Option<Box<dyn Inspect>>,
    cannot: Option<String>,
    enet: Option<[Unframer; 2]>,
    decoded: u64,
    of: u64,
    failure: Option<Failure>,
    messages: BTreeMap<(Direction, &'static str), (u64, usize, usize, u64)>,
    acc: Acc,
    /// The messages of the datagram being read (reused).
    scratch: Vec<(Seen, usize)>,
}

struct Flow {
    carrier: Carrier,
    client: SocketAddr,
    server: SocketAddr,
    first: u64,
    last: u64,
    dirs: [DirCounts; 2],
    datagrams: u64,
    candidates: Vec<Candidate>,
}

/// One protocol configuration a flow is tried against.
pub struct CandidateSection {
    /// The protocol.
    pub protocol: ProtocolName,
    /// The dialect's name.
    pub dialect: String,
    /// The option that selects it in a scenario's protocol section.
    pub dialect_key: &'static str,
    /// The options, as a scenario with `{dialect_key: dialect}` would set them.
    pub section: ProtocolSection,
}

/// Every protocol's listed dialects (or its default configuration when it lists none), as
/// sections.
pub fn candidates() -> Vec<CandidateSection> {
    let mut out = Vec::new();
    for p in ProtocolName::known() {
        let base = p.default_section();
        let listed: Vec<&str> = p.info().dialects.iter().map(|(d, _)| *d).collect();
        if listed.is_empty() {
            out.push(CandidateSection {
                protocol: p,
                dialect: base.dialect_name(),
                dialect_key: p.dialect_key(),
                section: base,
            });
            continue;
        }
        for d in listed {
            let found = [p.dialect_key(), "dialect"].into_iter().find_map(|key| {
                let mut map = serde_json::Map::new();
                map.insert(key.into(), serde_json::Value::String(d.into()));
                let value = serde_json::Value::Object(map);
                let mut de = <dyn erased_serde::Deserializer>::erase(value);
                p.deserialize_section(&mut de).ok().map(|s| (key, s))
            });
            if let Some((dialect_key, section)) = found {
                out.push(CandidateSection {
                    protocol: p,
                    dialect: d.to_string(),
                    dialect_key,
                    section,
                });
            }
        }
    }
    out
}

impl Flow {
    fn new(p: &Packet<'_>) -> Self {
        let candidates = candidates()
            .into_iter()
            .map(|c| {
                let CandidateSection {
                    protocol,
                    dialect,
                    dialect_key,
                    section,
                } = c;
                let transport = section.transport();
                let mut inspector = section.inspector();
                let cannot = match (transport, p.carrier) {
                    (TransportNeeds::Gns, _) => {
                        Some("GameNetworkingSockets encrypts its traffic".to_string())
                    }
                    _ if inspector.is_none() => {
                        Some("the protocol has no decode-only reader (Protocol::inspector)".into())
                    }
                    (TransportNeeds::UdpTcpLogin { .. }, _) => None,
                    (_, Carrier::Tcp) => Some("it plays over UDP only".to_string()),
                    _ => None,
                };
                if cannot.is_some() {
                    inspector = None;
                }
                let enet = match transport {
                    TransportNeeds::Enet(e) => {
                        let rc = e.compression == crate::protocol::EnetCompression::RangeCoder;
                        Some([Unframer::new(rc), Unframer::new(rc)])
                    }
                    _ => None,
                };
                Candidate {
                    protocol,
                    dialect,
                    dialect_key,
                    inspector,
                    cannot,
                    enet,
                    decoded: 0,
                    of: 0,
                    failure: None,
                    messages: BTreeMap::new(),
                    acc: Acc::default(),
                    scratch: Vec::new(),
                }
            })
            .collect();
        Self {
            carrier: p.carrier,
            client: p.src,
            server: p.dst,
            first: p.at_us,
            last: p.at_us,
            dirs: Default::default(),
            datagrams: 0,
            candidates,
        }
    }

    fn packet(&mut self, p: &Packet<'_>) {
        let dir = if p.src == self.client {
            Direction::ToServer
        } else {
            Direction::ToClient
        };
        self.last = self.last.max(p.at_us);
        if p.payload.is_empty() {
            return;
        }
        let d = &mut self.dirs[dir as usize];
        d.datagrams += 1;
        d.bytes += p.payload.len() as u64;
        let index = self.datagrams;
        self.datagrams += 1;
        let at_s = p.at_us.saturating_sub(self.first) as f64 / 1e6;
        for c in &mut self.candidates {
            c.datagram(dir, p, index, at_s);
        }
    }
}

impl Candidate {
    fn datagram(&mut self, dir: Direction, p: &Packet<'_>, index: u64, at_s: f64) {
        let Some(inspector) = self.inspector.as_mut() else {
            return;
        };
        self.of += 1;
        let at = p.at_us;
        // Only the first failure is described (its layer named, its bytes in hex): a wrong
        // candidate fails on most datagrams, and each later failure is only counted.
        let describe = self.failure.is_none();
        let failure = |m: Mismatch, layer: &dyn Fn() -> String, bytes: &[u8]| {
            describe.then(|| Failure {
                datagram: index,
                direction: dir.as_str(),
                at_s,
                offset: m.offset,
                hex: excerpt(bytes, m.offset),
                expected: m.expected,
                layer: layer(),
            })
        };
        // The messages read, kept until the whole datagram has read (a buffer reused across
        // datagrams).
        let mut seen = std::mem::take(&mut self.scratch);
        seen.clear();
        let result: Result<(), Option<Failure>> = if p.carrier == Carrier::Tcp {
            let len = p.payload.len();
            inspector
                .stream(dir, p.payload, &mut |s| seen.push((s, len)))
                .map_err(|m| failure(m, &|| "tcp stream".into(), p.payload))
        } else if let Some(enet) = self.enet.as_mut() {
            let mut inner: Option<Option<Failure>> = None;
            let r = enet[dir as usize].datagram(p.payload, &mut |pk| {
                if inner.is_some() {
                    return;
                }
                let len = pk.data.len();
                if let Err(m) = inspector.messages(dir, pk.data, &mut |s| seen.push((s, len))) {
                    let layer = || format!("enet packet on channel {}", pk.channel);
                    inner = Some(failure(m, &layer, pk.data));
                }
            });
            match (r, inner) {
                (Err(e), _) => Err(failure(
                    Mismatch::at(e.offset, e.expected),
                    &|| "enet".into(),
                    p.payload,
                )),
                (Ok(_), Some(f)) => Err(f),
                (Ok(_), None) => Ok(()),
            }
        } else {
            let len = p.payload.len();
            inspector
                .messages(dir, p.payload, &mut |s| seen.push((s, len)))
                .map_err(|m| failure(m, &|| "datagram".into(), p.payload))
        };
        match result {
            Ok(()) => {
                self.decoded += 1;
                for &(s, len) in &seen {
                    self.seen(dir, s, len, at);
                }
            }
            Err(described) => {
                if self.failure.is_none() {
                    self.failure = described;
                }
            }
        }
        self.scratch = seen;
    }

    fn seen(&mut self, dir: Direction, s: Seen, len: usize, at: u64) {
        let e = self
            .messages
            .entry((dir, s.kind))
            .or_insert((0, usize::MAX, 0, 0));
        e.0 += 1;
        e.1 = e.1.min(len);
        e.2 = e.2.max(len);
        e.3 += len as u64;
        let a = &mut self.acc;
        match (s.role, dir) {
            (Role::Input, Direction::ToServer) => {
                a.inputs.add(at);
                if let Some(k) = s.keys {
                    if a.keys.last().map(|l| l.1) != Some(k) {
                        if a.keys.len() < MAX_KEY_CHANGES {
                            a.keys.push((at, k));
                        } else {
                            a.keys_cut = true;
                        }
                    }
                }
            }
            (Role::Ping, Direction::ToServer) => {
                a.pings.add(at);
                if let Some(t) = s.ping {
                    if a.pending.len() < MAX_PENDING_PINGS {
                        a.pending.insert(t, at);
                    }
                }
            }
            (Role::Pong, Direction::ToClient) => {
                if let Some(sent) = s.ping.and_then(|t| a.pending.remove(&t)) {
                    if a.rtt_us.len() < MAX_RTT_SAMPLES {
                        a.rtt_us.push(at.saturating_sub(sent));
                    }
                }
            }
            (Role::Snapshot, Direction::ToClient) => {
                a.snapshots.add(at);
                if a.snapshots.count == 1 {
                    a.snap_min = len;
                }
                a.snap_min = a.snap_min.min(len);
                a.snap_max = a.snap_max.max(len);
                a.snap_sum += len as u64;
            }
            _ => {}
        }
        if let Some(q) = s.seq {
            match dir {
                Direction::ToServer => a.up.add(q),
                Direction::ToClient => a.down.add(q),
            }
        }
    }

    fn share(&self) -> f64 {
        if self.of == 0 {
            0.0
        } else {
            self.decoded as f64 / self.of as f64
        }
    }

    fn behaviour(&mut self) -> Behaviour {
        let a = &mut self.acc;
        a.rtt_us.sort_unstable();
        let rtt = (!a.rtt_us.is_empty()).then(|| {
            let ms = |v: u64| v as f64 / 1000.0;
            (
                a.rtt_us.len() as u64,
                ms(a.rtt_us[0]),
                ms(a.rtt_us[a.rtt_us.len() / 2]),
                ms(a.rtt_us[a.rtt_us.len() - 1]),
            )
        });
        Behaviour {
            inputs: a.inputs.count,
            input_rate_hz: a.inputs.rate(),
            input_jitter_ms: a.inputs.jitter_ms(),
            pings: a.pings.count,
            ping_interval_ms: a.pings.interval_ms(),
            snapshots: a.snapshots.count,
            snapshot_rate_hz: a.snapshots.rate(),
            snapshot_bytes: (a.snapshots.count > 0).then(|| {
                (
                    a.snap_min,
                    a.snap_sum as f64 / a.snapshots.count as f64,
                    a.snap_max,
                )
            }),
            rtt_ms: rtt,
            downstream_loss: a.down.loss(),
            upstream_loss: a.up.loss(),
            key_changes: a.keys.len() as u64,
            // The last input holds its keys for one input interval, as every other does.
            key_steps: key_steps(
                &a.keys,
                a.inputs.last + (a.inputs.interval_ms().unwrap_or(0.0) * 1000.0) as u64,
            ),
            key_stream_cut: a.keys_cut,
        }
    }

    fn report(&self) -> CandidateReport {
        CandidateReport {
            protocol: self.protocol.to_string(),
            dialect: self.dialect.clone(),
            decoded: self.decoded,
            of: self.of,
            share: self.share(),
            cannot: self.cannot.clone(),
            first_failure: self.failure.clone(),
            messages: self
                .messages
                .iter()
                .map(|(&(dir, kind), &(count, min, max, sum))| MessageCount {
                    direction: dir.as_str(),
                    kind,
                    count,
                    min_bytes: min,
                    mean_bytes: sum as f64 / count.max(1) as f64,
                    max_bytes: max,
                })
                .collect(),
        }
    }
}

/// Key changes as runs: each change held until the next, the last until `end` (µs: the last
/// input plus one input interval).
/// A run shorter than 1 ms is kept at 1 ms, so a replay holds every captured change.
fn key_steps(changes: &[(u64, Keys)], end: u64) -> Vec<(Keys, std::time::Duration)> {
    let ends = changes.iter().skip(1).map(|c| c.0).chain([end]);
    changes
        .iter()
        .zip(ends)
        .map(|(&(at, k), end)| {
            let us = end.saturating_sub(at).max(1000);
            (k, std::time::Duration::from_micros(us))
        })
        .collect()
}

/// Hex of `bytes` around `offset`, the offset marked with `[..]`.
fn excerpt(bytes: &[u8], offset: usize) -> String {
    let from = offset.saturating_sub(EXCERPT);
    let to = (offset + EXCERPT).min(bytes.len());
    let mut s = String::new();
    if from > 0 {
        s.push_str("… ");
    }
    for (i, b) in bytes.iter().enumerate().take(to).skip(from) {
        if i == offset {
            s.push_str(&format!("[{b:02X}] "));
        } else {
            s.push_str(&format!("{b:02X} "));
        }
    }
    if offset >= bytes.len() {
        s.push_str("[end]");
    } else if to < bytes.len() {
        s.push('…');
    }
    s.trim_end().to_string()
}

/// Read `input` and inspect every flow.
pub fn inspect<R: std::io::Read + Send>(input: R) -> Result<Inspection, CaptureError> {
    let mut flows: Vec<Flow> = Vec::new();
    let mut index: HashMap<(Carrier, SocketAddr, SocketAddr), usize> = HashMap::new();
    let mut not_followed = 0u64;
    let read = read::read(input, &mut |p| {
        let key = if p.src <= p.dst {
            (p.carrier, p.src, p.dst)
        } else {
            (p.carrier, p.dst, p.src)
        };
        let i = match index.get(&key) {
            Some(&i) => i,
            None => {
                // The client is the side that sent first (a TCP flow's SYN included).
                if flows.len() >= MAX_FLOWS {
                    not_followed += 1;
                    return;
                }
                flows.push(Flow::new(&p));
                index.insert(key, flows.len() - 1);
                flows.len() - 1
            }
        };
        flows[i].packet(&p);
    })?;
    let flows = flows.into_iter().map(finish).collect();
    Ok(Inspection {
        read,
        packets_not_followed: not_followed,
        flows,
    })
}

fn finish(mut f: Flow) -> FlowReport {
    let span = f.last.saturating_sub(f.first) as f64 / 1e6;
    for d in &mut f.dirs {
        d.rate_hz = if span > 0.0 {
            d.datagrams as f64 / span
        } else {
            0.0
        };
    }
    // Best first: the larger share, then more datagrams read, then the catalogue's order.
    f.candidates.sort_by(|a, b| {
        b.share()
            .partial_cmp(&a.share())
            .unwrap_or(std::cmp::Ordering::Equal)
            .then(b.decoded.cmp(&a.decoded))
    });
    let named = f
        .candidates
        .first()
        .filter(|c| c.of > 0 && c.share() >= NAME_SHARE)
        .map(|c| (c.protocol.to_string(), c.dialect.clone(), c.dialect_key));
    let behaviour = named
        .as_ref()
        .and_then(|_| f.candidates.first_mut())
        .map(Candidate::behaviour);
    let [to_server, to_client] = f.dirs;
    FlowReport {
        carrier: match f.carrier {
            Carrier::Udp => "udp",
            Carrier::Tcp => "tcp",
        },
        client: f.client,
        server: f.server,
        duration_s: span,
        to_server,
        to_client,
        protocol: named.as_ref().map(|n| n.0.clone()),
        dialect_key: named.as_ref().map(|n| n.2.to_string()),
        dialect: named.map(|n| n.1),
        candidates: f.candidates.iter().map(Candidate::report).collect(),
        behaviour,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_excerpt_marks_the_failing_byte_and_the_end() {
        assert_eq!(excerpt(&[0xFE, 0xCA, 1], 1), "FE [CA] 01");
        assert_eq!(excerpt(&[0xFE], 1), "FE [end]");
    }

    #[test]
    fn key_changes_become_runs_held_until_the_next_change_and_the_last_input() {
        let (up, left) = (Keys(Keys::UP), Keys(Keys::LEFT));
        let runs = key_steps(&[(1_000, up), (101_000, left), (101_200, up)], 400_000);
        let ms = std::time::Duration::from_millis;
        assert_eq!(
            runs,
            vec![
                (up, ms(100)),
                (left, ms(1)),
                (up, std::time::Duration::from_micros(298_800))
            ]
        );
        assert!(key_steps(&[], 5).is_empty());
    }
}
