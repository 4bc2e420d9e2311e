//! Reading `histograms.hlog` back, within bounds: the one reader behind `tickswarm merge`,
//! `tickswarm compare` and the report's charts.
//!
//! Run folders come from other machines (shards to merge, base runs to compare), so a log is
//! untrusted input. HdrHistogram's own deserializer trusts the header it reads: a 140-byte
//! line claiming a 4 GB payload resizes its buffer to 4 GB, and the bounds and significant
//! digits in the header size the counts array it allocates. So every entry is checked here
//! BEFORE anything is allocated from its header:
//!
//! - the file: at most [`MAX_FILE_BYTES`], read through a limit (its metadata is not trusted),
//!   one line at a time, a line at most [`MAX_LINE_BYTES`];
//! - the outer (compressed V2) header: its cookie, and a compressed length no longer than the
//!   entry holds;
//! - the inner (V2) header, the first 40 inflated bytes: lowest ≥ 1, highest ≤ [`MAX_HIGHEST`]
//!   and ≥ 2 × lowest, significant digits ≤ [`MAX_DIGITS`] (so an accepted histogram has at
//!   most [`MAX_COUNTERS`] counters), and a payload length no longer than those counters can
//!   need (a counter or a run of zeros is one varint of at most 9 bytes);
//! - the zlib stream is inflated only up to that payload length (never more than
//!   [`MAX_INFLATED`] bytes), and a stream shorter than that, or longer (a zlib bomb: it is not
//!   inflated further than one byte past the claim), is an error;
//! - the varints themselves: every counter inside the bounds, no run of zeros the crate cannot
//!   negate, and a sample count that fits in u64.
//!
//! The checked varints are then decoded here (see [`Decoder`]). A log has at most
//! [`MAX_TAGS`] distinct tags. Any refusal names the file, the line and the entry.

use std::collections::BTreeSet;
use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};

use base64::Engine as _;
use flate2::read::ZlibDecoder;
use hdrhistogram::serialization::interval_log::{IntervalLogIterator, LogEntry};
use hdrhistogram::Histogram;
use thiserror::Error;

use crate::metrics::{new_histogram, HIST_MAX_US, HIST_SIGFIG};

/// The largest log read (1 GiB): a run writes about 300 bytes per metric per second (100
/// cafe bots: 10 metrics, about 10 MB an hour).
pub const MAX_FILE_BYTES: u64 = 1 << 30;
/// The longest line: a whole compressed histogram at its largest, in base64, fits in it.
pub const MAX_LINE_BYTES: usize = 1 << 20;
/// The highest trackable value accepted (2^40: 12.7 days in µs, a terabyte in bytes).
pub const MAX_HIGHEST: u64 = 1 << 40;
/// The most significant digits accepted (the project writes 3).
pub const MAX_DIGITS: u32 = 3;
/// The most counters an accepted histogram can have (lowest 1, highest 2^40, 3 digits).
pub const MAX_COUNTERS: u64 = 32_768;
/// The inner V2 header: cookie, payload length, normalizing offset, digits, lowest, highest,
/// integer-to-double ratio.
const V2_HEADER_LEN: usize = 40;
/// The most bytes an accepted entry inflates to: its header and one 9-byte varint per counter.
pub const MAX_INFLATED: usize = V2_HEADER_LEN + 9 * MAX_COUNTERS as usize;
/// The latest start second accepted (2^32 s): a merged log writes it back as text.
pub const MAX_SECOND: u64 = 1 << 32;
/// The most distinct tags (metrics) in one log.
pub const MAX_TAGS: usize = 256;

/// HdrHistogram's V2 cookies (serialization/mod.rs of the crate, which keeps them private).
const V2_COOKIE: u32 = 0x1c84_9303 | 0x10;
const V2_COMPRESSED_COOKIE: u32 = 0x1c84_9304 | 0x10;

/// A log that cannot be read, or an entry that is refused.
#[derive(Debug, Error)]
#[error("{}: {}{message}", path.display(), at.map(|(line, entry)| format!("line {line} (histogram entry {entry}): ")).unwrap_or_default())]
pub struct HlogError {
    pub path: PathBuf,
    /// Line number and histogram entry number (both from 1), when one entry is at fault.
    pub at: Option<(usize, usize)>,
    pub message: String,
}

/// One histogram entry of a log, checked and decoded.
pub struct Entry<'a> {
    /// 1-based among the log's histogram entries.
    pub number: usize,
    pub tag: &'a str,
    /// The start second (the interval's start timestamp, whole seconds).
    pub second: u64,
    /// The entry's bytes as in the file (base64-decoded: compressed V2), to keep instead of
    /// the histogram; [`Decoder::decode`] turns them back into it.
    pub encoded: &'a [u8],
    /// Its non-zero counters: (the lowest value of the counter, its count), ascending.
    pub counts: &'a [(u64, u64)],
    /// Its sample count (the counts' sum, checked to fit in u64).
    pub samples: u64,
}

impl Entry<'_> {
    /// Add this entry into `into` (see [`add_counts`]).
    pub fn add_to(&self, into: &mut Histogram<u64>) -> Result<(), String> {
        add_counts(into, self.counts, self.samples)
    }
}

/// Turns an entry's compressed bytes into its counters, checking them first. Keeps its
/// buffers between entries.
///
/// It decodes the V2 varints itself (as the crate's deserializer does, and tested against it)
/// instead of having the crate build a histogram: that allocates and zeroes a whole counts
/// array per entry (17,408 counters for the project's bounds) and every later addition walks
/// it all, which made 100,000 one-sample seconds cost minutes. Here an entry costs what its
/// bytes hold.
#[derive(Default)]
pub struct Decoder {
    inflated: Vec<u8>,
    counts: Vec<(u64, u64)>,
}

/// The layout of a histogram's counts array (HdrHistogram's indexing), from its bounds.
#[derive(Debug, Clone, Copy)]
pub struct Layout {
    unit_magnitude: u32,
    half_magnitude: u32,
    half_count: u64,
    mask: u64,
    lzc_base: u32,
    /// Counters in the array.
    pub counters: u64,
}

impl Layout {
    /// The caller has checked lowest ≥ 1, highest ≥ 2 × lowest, digits ≤ 5.
    pub fn new(lowest: u64, highest: u64, digits: u32) -> Layout {
        let m = SUB_BUCKET_MAGNITUDE[digits.min(5) as usize];
        let unit_magnitude = 63 - lowest.leading_zeros();
        Layout {
            unit_magnitude,
            half_magnitude: m - 1,
            half_count: 1 << (m - 1),
            mask: ((1u64 << m) - 1) << unit_magnitude,
            lzc_base: 64 - unit_magnitude - m,
            counters: counters_for(lowest, highest, digits),
        }
    }

    /// The project's layout: bounds 1..[`HIST_MAX_US`], [`HIST_SIGFIG`] digits (the counters
    /// of the whole range; a [`new_histogram`] holds a prefix of them).
    pub fn project() -> Layout {
        Layout::new(1, HIST_MAX_US, u32::from(HIST_SIGFIG))
    }

    /// The lowest value counted at `index` (the crate's `value_for`).
    pub fn value_of(&self, index: u64) -> u64 {
        let mut bucket = (index >> self.half_magnitude) as i64 - 1;
        let mut sub = (index & (self.half_count - 1)) + self.half_count;
        if bucket < 0 {
            sub -= self.half_count;
            bucket = 0;
        }
        sub << (bucket as u32 + self.unit_magnitude)
    }

    /// The index `value` is counted at (the crate's `index_for`).
    pub fn index_of(&self, value: u64) -> u64 {
        let bucket = self.lzc_base - (value | self.mask).leading_zeros();
        let sub = value >> (bucket + self.unit_magnitude);
        (u64::from(bucket + 1) << self.half_magnitude) + sub - self.half_count
    }
}

/// ceil(log2(2 × 10^digits)) for digits 0..=5: the sub-bucket count's magnitude.
const SUB_BUCKET_MAGNITUDE: [u32; 6] = [1, 5, 8, 11, 15, 18];

fn be_u32(b: &[u8], at: usize) -> u32 {
    let mut x = [0u8; 4];
    x.copy_from_slice(&b[at..at + 4]);
    u32::from_be_bytes(x)
}

fn be_u64(b: &[u8], at: usize) -> u64 {
    let mut x = [0u8; 8];
    x.copy_from_slice(&b[at..at + 8]);
    u64::from_be_bytes(x)
}

/// The counters HdrHistogram allocates for these bounds (its `new_with_bounds` and `resize`),
/// computed without allocating them. The caller has checked lowest ≥ 1, highest ≥ 2 × lowest,
/// digits ≤ 5.
pub fn counters_for(lowest: u64, highest: u64, digits: u32) -> u64 {
    let sub_bucket_count = 1u64 << SUB_BUCKET_MAGNITUDE[digits.min(5) as usize];
    let unit_magnitude = 63 - lowest.leading_zeros();
    let mut smallest_untrackable = sub_bucket_count << unit_magnitude;
    let mut buckets = 1u64;
    while smallest_untrackable <= highest {
        if smallest_untrackable > u64::MAX / 2 {
            buckets += 1;
            break;
        }
        smallest_untrackable <<= 1;
        buckets += 1;
    }
    (buckets + 1) * (sub_bucket_count / 2)
}

/// One varint as the crate writes it (LEB128, the 9th byte whole): the value and its length.
fn varint(b: &[u8]) -> Option<(u64, usize)> {
    let mut v = 0u64;
    for i in 0..9 {
        let byte = *b.get(i)?;
        if i == 8 {
            return Some((v | (u64::from(byte) << 56), 9));
        }
        v |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            return Some((v, i + 1));
        }
    }
    None
}

/// Decode the varint payload as the crate does, refusing what would make the crate fail or
/// panic: a counter past the bounds, a run of zeros that cannot be negated, a sample count
/// that overflows u64. Returns the sample count; `out` gets the non-zero counters.
fn decode_payload(
    payload: &[u8],
    layout: &Layout,
    out: &mut Vec<(u64, u64)>,
) -> Result<u64, String> {
    out.clear();
    let mut at = 0;
    let mut index = 0u64;
    let mut samples = 0u64;
    while at < payload.len() {
        let (v, n) = varint(&payload[at..]).ok_or("the histogram payload ends inside a number")?;
        at += n;
        let zz = ((v >> 1) as i64) ^ -((v & 1) as i64);
        if zz < 0 {
            let zeros = zz
                .checked_neg()
                .ok_or("the histogram payload holds an impossible run of zeros")?;
            index = index.saturating_add(zeros as u64);
        } else {
            if index >= layout.counters {
                index = u64::MAX;
            } else if zz > 0 {
                samples = samples
                    .checked_add(zz as u64)
                    .ok_or("the histogram's sample count overflows u64")?;
                out.push((layout.value_of(index), zz as u64));
            }
            index = index.saturating_add(1);
        }
        if index > layout.counters {
            return Err(format!(
                "the histogram payload has more counters than its bounds hold ({})",
                layout.counters
            ));
        }
    }
    Ok(samples)
}

/// One checked, decoded entry (borrowed from its [`Decoder`]).
pub struct Decoded<'a> {
    /// Non-zero counters: (lowest value of the counter, count), ascending.
    pub counts: &'a [(u64, u64)],
    pub samples: u64,
}

impl Decoder {
    /// Check `encoded` (a compressed V2 histogram) and decode it.
    pub fn decode(&mut self, encoded: &[u8]) -> Result<Decoded<'_>, String> {
        if encoded.len() < 8 {
            return Err(format!(
                "{} bytes: too short for a compressed histogram",
                encoded.len()
            ));
        }
        let cookie = be_u32(encoded, 0);
        if cookie != V2_COMPRESSED_COOKIE {
            return Err(format!(
                "not a compressed V2 histogram (cookie {cookie:#010x})"
            ));
        }
        let len = be_u32(encoded, 4) as usize;
        let held = encoded.len() - 8;
        if len > held {
            return Err(format!(
                "claims {len} compressed bytes, the entry holds {held}"
            ));
        }
        let mut z = ZlibDecoder::new(&encoded[8..8 + len]);
        let mut h = [0u8; V2_HEADER_LEN];
        z.read_exact(&mut h)
            .map_err(|e| format!("its compressed header does not inflate: {e}"))?;
        let inner = be_u32(&h, 0);
        if inner != V2_COOKIE {
            return Err(format!("not a V2 histogram inside (cookie {inner:#010x})"));
        }
        let payload_len = u64::from(be_u32(&h, 4));
        let offset = be_u32(&h, 8);
        let digits = be_u32(&h, 12);
        let lowest = be_u64(&h, 16);
        let highest = be_u64(&h, 24);
        let ratio = f64::from_bits(be_u64(&h, 32));
        if offset != 0 || ratio != 1.0 {
            return Err("a normalizing offset or a double ratio is not supported".into());
        }
        if digits > MAX_DIGITS {
            return Err(format!(
                "{digits} significant digits (at most {MAX_DIGITS} are read)"
            ));
        }
        if lowest < 1 || highest > MAX_HIGHEST || highest / 2 < lowest {
            return Err(format!(
                "bounds {lowest}..{highest} (lowest at least 1, highest at most 2^40 and at \
                 least twice the lowest)"
            ));
        }
        let layout = Layout::new(lowest, highest, digits);
        let counters = layout.counters;
        let most = 9 * counters;
        if payload_len > most {
            return Err(format!(
                "claims a payload of {payload_len} bytes, more than its {counters} counters \
                 can need ({most})"
            ));
        }
        self.inflated.clear();
        self.inflated.extend_from_slice(&h);
        // Never more than the checked payload length: a stream that inflates further is not read.
        (&mut z)
            .take(payload_len)
            .read_to_end(&mut self.inflated)
            .map_err(|e| format!("its payload does not inflate: {e}"))?;
        let got = self.inflated.len() - V2_HEADER_LEN;
        if (got as u64) < payload_len {
            return Err(format!(
                "claims a payload of {payload_len} bytes, inflates to {got}"
            ));
        }
        // Nothing after it: what the run and the Java writer compress is exactly the header
        // and the payload, so more is a stream built to inflate (a zlib bomb), not read on.
        let mut one = [0u8; 1];
        if z.read(&mut one)
            .map_err(|e| format!("its payload does not inflate: {e}"))?
            > 0
        {
            return Err(format!(
                "inflates to more than the {payload_len} payload bytes its header claims"
            ));
        }
        let samples = decode_payload(&self.inflated[V2_HEADER_LEN..], &layout, &mut self.counts)?;
        Ok(Decoded {
            counts: &self.counts,
            samples,
        })
    }
}

fn file_err(path: &Path, message: impl Into<String>) -> HlogError {
    HlogError {
        path: path.to_path_buf(),
        at: None,
        message: message.into(),
    }
}

/// Read the log at `path` entry by entry, in file order, calling `visit` with each checked
/// histogram; `visit` may refuse an entry (its message is given the file and entry).
pub fn read(
    path: &Path,
    visit: impl FnMut(Entry<'_>) -> Result<(), String>,
) -> Result<(), HlogError> {
    let file = File::open(path).map_err(|e| file_err(path, e.to_string()))?;
    read_file(file, path, visit)
}

/// [`read`] from a file already open (a run folder's staged log, opened through the folder
/// the run holds: `report::run_dir`); `path` names it in messages.
pub fn read_file(
    file: File,
    path: &Path,
    mut visit: impl FnMut(Entry<'_>) -> Result<(), String>,
) -> Result<(), HlogError> {
    let too_big = || {
        file_err(
            path,
            format!("larger than {} MiB: not read", MAX_FILE_BYTES >> 20),
        )
    };
    // The size it claims refuses early; the limit on the read is what holds.
    if file.metadata().is_ok_and(|m| m.len() > MAX_FILE_BYTES) {
        return Err(too_big());
    }
    // Through a limit: the size the file has when read, not what its metadata says.
    let mut r = BufReader::new(file.take(MAX_FILE_BYTES + 1));
    let mut line = Vec::new();
    let mut tags: BTreeSet<String> = BTreeSet::new();
    let mut decoder = Decoder::default();
    let mut read_bytes = 0u64;
    let mut line_no = 0;
    let mut number = 0;
    loop {
        line.clear();
        let n = (&mut r)
            .take(MAX_LINE_BYTES as u64 + 1)
            .read_until(b'\n', &mut line)
            .map_err(|e| file_err(path, e.to_string()))?;
        if n == 0 {
            break;
        }
        read_bytes += n as u64;
        if read_bytes > MAX_FILE_BYTES {
            return Err(too_big());
        }
        line_no += 1;
        if line.len() > MAX_LINE_BYTES {
            return Err(file_err(
                path,
                format!(
                    "line {line_no} is longer than {} KiB: not a histogram log line",
                    MAX_LINE_BYTES >> 10
                ),
            ));
        }
        if line.first() == Some(&b'#') || line.first() == Some(&b'"') {
            // Comments, the start and base times, the column legend: nothing this reads.
            continue;
        }
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        if line.last() != Some(&b'\n') {
            // The last line without its newline: the line parser wants one.
            line.push(b'\n');
        }
        number += 1;
        let at = Some((line_no, number));
        let entry_err = |message: String| HlogError {
            path: path.to_path_buf(),
            at,
            message,
        };
        let iv = match IntervalLogIterator::new(&line).next() {
            Some(Ok(LogEntry::Interval(iv))) => iv,
            _ => return Err(entry_err("not an interval histogram line".into())),
        };
        let tag = iv.tag().map(|t| t.as_str()).unwrap_or_default();
        if !tags.contains(tag) {
            if tags.len() >= MAX_TAGS {
                return Err(entry_err(format!(
                    "more than {MAX_TAGS} distinct tags (metrics): not a tickswarm log"
                )));
            }
            tags.insert(tag.to_string());
        }
        let encoded = base64::engine::general_purpose::STANDARD
            .decode(iv.encoded_histogram())
            .map_err(|e| entry_err(format!("not base64: {e}")))?;
        let second = iv.start_timestamp().as_secs();
        if second > MAX_SECOND {
            return Err(entry_err(format!(
                "starts at second {second}, past 2^32 (136 years)"
            )));
        }
        let d = decoder.decode(&encoded).map_err(entry_err)?;
        visit(Entry {
            number,
            tag,
            second,
            encoded: &encoded,
            counts: d.counts,
            samples: d.samples,
        })
        .map_err(entry_err)?;
    }
    Ok(())
}

/// Add an entry's `counts` (`samples` in all) into `into`, refusing a sample count that would
/// overflow u64 (every counter is at most the count, so none can). Each counter's value is
/// recorded in `into`'s counter for it (as the crate adds histograms of other bounds); values
/// beyond `into`'s bounds (a foreign log's) saturate to its highest.
pub fn add_counts(
    into: &mut Histogram<u64>,
    counts: &[(u64, u64)],
    samples: u64,
) -> Result<(), String> {
    if into.len().checked_add(samples).is_none() {
        return Err("sample counts added up overflow u64".into());
    }
    for &(v, c) in counts {
        crate::metrics::record_n(into, v, c);
    }
    Ok(())
}

/// The project's histogram layout (bounds 1..[`HIST_MAX_US`], [`HIST_SIGFIG`] digits): what
/// every log is merged into.
pub struct Project {
    pub layout: Layout,
    /// An empty histogram of the layout, for the crate's value arithmetic.
    template: Histogram<u64>,
    last: u64,
}

impl Default for Project {
    fn default() -> Self {
        let layout = Layout::project();
        Project {
            last: layout.index_of(HIST_MAX_US),
            layout,
            template: new_histogram(),
        }
    }
}

impl Project {
    /// An empty histogram of the project's bounds.
    pub fn histogram(&self) -> Histogram<u64> {
        new_histogram()
    }

    /// The value reported for counter `index` (the highest value it counts, as the crate's
    /// percentiles and max report).
    fn reported(&self, index: u64) -> u64 {
        self.template
            .highest_equivalent(self.layout.value_of(index))
    }
}

/// A histogram of the project's layout held as its non-zero counters only: a second of a long
/// run costs what was recorded in it, not a 139 KB counts array. Its percentiles and max are
/// those of the same samples in a [`new_histogram`].
#[derive(Debug, Clone, Default)]
pub struct Sparse {
    /// (index, count), ascending by index, no index twice.
    counts: Vec<(u64, u64)>,
    samples: u64,
    /// The incoming entry's counters mapped to indices, and the merge's output (reused).
    incoming: Vec<(u64, u64)>,
    merged: Vec<(u64, u64)>,
}

/// Append `(i, c)` to sorted `out`, adding to its last counter when it has the same index.
fn push_counter(out: &mut Vec<(u64, u64)>, (i, c): (u64, u64)) {
    match out.last_mut() {
        // At most the checked sample count: no overflow.
        Some(last) if last.0 == i => last.1 = last.1.saturating_add(c),
        _ => out.push((i, c)),
    }
}

impl Sparse {
    /// Add an entry's counters (see [`Entry::counts`]: ascending), refusing a total that
    /// overflows u64. A linear merge of two sorted lists: no sort per entry.
    pub fn add(&mut self, p: &Project, counts: &[(u64, u64)], samples: u64) -> Result<(), String> {
        self.samples = self
            .samples
            .checked_add(samples)
            .ok_or("sample counts added up overflow u64")?;
        // Ascending values map to non-decreasing indices (several foreign counters may fall
        // in one of ours). Foreign values past our counts array go, as the crate's saturating
        // record puts them, to the highest value's counter: they are the list's tail, added
        // up and put in its place (no sort).
        self.incoming.clear();
        let mut beyond = 0u64;
        for &(v, c) in counts {
            let i = p.layout.index_of(v);
            if i >= p.layout.counters {
                beyond = beyond.saturating_add(c);
            } else {
                push_counter(&mut self.incoming, (i, c));
            }
        }
        if beyond > 0 {
            match self.incoming.binary_search_by_key(&p.last, |c| c.0) {
                Ok(k) => self.incoming[k].1 = self.incoming[k].1.saturating_add(beyond),
                Err(k) => self.incoming.insert(k, (p.last, beyond)),
            }
        }
        if self.counts.is_empty() {
            std::mem::swap(&mut self.counts, &mut self.incoming);
            return Ok(());
        }
        self.merged.clear();
        let (mut a, mut b) = (
            self.counts.iter().copied().peekable(),
            self.incoming.iter().copied().peekable(),
        );
        loop {
            let next = match (a.peek(), b.peek()) {
                (Some(x), Some(y)) if x.0 <= y.0 => a.next(),
                (Some(_), Some(_)) | (None, Some(_)) => b.next(),
                (Some(_), None) => a.next(),
                (None, None) => break,
            };
            if let Some(n) = next {
                push_counter(&mut self.merged, n);
            }
        }
        std::mem::swap(&mut self.counts, &mut self.merged);
        Ok(())
    }

    pub fn len(&self) -> u64 {
        self.samples
    }

    pub fn is_empty(&self) -> bool {
        self.samples == 0
    }

    pub fn clear(&mut self) {
        self.counts.clear();
        self.samples = 0;
    }

    /// The non-zero counters, (index, count) ascending by index.
    pub fn counters(&self) -> &[(u64, u64)] {
        &self.counts
    }

    /// The crate's `value_at_quantile` (for a quantile above 0) of these samples.
    pub fn quantile(&self, p: &Project, q: f64) -> u64 {
        let target = ((q.min(1.0) * self.samples as f64).ceil() as u64).max(1);
        let mut seen = 0u64;
        let mut at = None;
        for &(i, c) in &self.counts {
            seen = seen.saturating_add(c);
            at = Some(i);
            if seen >= target {
                break;
            }
        }
        at.map_or(0, |i| p.reported(i))
    }

    /// The crate's `max`: the highest value of the highest non-zero counter.
    pub fn max(&self, p: &Project) -> u64 {
        self.counts.last().map_or(0, |&(i, _)| p.reported(i))
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use flate2::write::ZlibEncoder;
    use hdrhistogram::serialization::{Deserializer, Serializer, V2DeflateSerializer};
    use proptest::prelude::*;
    use std::io::Write;

    /// An inner V2 histogram by hand: header fields and payload bytes as given.
    pub(crate) fn v2(
        payload_len: u32,
        digits: u32,
        low: u64,
        high: u64,
        payload: &[u8],
    ) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend_from_slice(&V2_COOKIE.to_be_bytes());
        b.extend_from_slice(&payload_len.to_be_bytes());
        b.extend_from_slice(&0u32.to_be_bytes());
        b.extend_from_slice(&digits.to_be_bytes());
        b.extend_from_slice(&low.to_be_bytes());
        b.extend_from_slice(&high.to_be_bytes());
        b.extend_from_slice(&1.0f64.to_bits().to_be_bytes());
        b.extend_from_slice(payload);
        b
    }

    /// The compressed V2 wrapper around `inner`, zlib-compressed; `claimed` overrides the
    /// compressed length written in its header.
    pub(crate) fn compressed(inner: &[u8], claimed: Option<u32>) -> Vec<u8> {
        let mut z = ZlibEncoder::new(Vec::new(), flate2::Compression::best());
        z.write_all(inner).unwrap();
        let body = z.finish().unwrap();
        let mut b = Vec::new();
        b.extend_from_slice(&V2_COMPRESSED_COOKIE.to_be_bytes());
        b.extend_from_slice(&claimed.unwrap_or(body.len() as u32).to_be_bytes());
        b.extend_from_slice(&body);
        b
    }

    fn zz(v: i64) -> u64 {
        ((v << 1) ^ (v >> 63)) as u64
    }

    fn varints(values: &[i64]) -> Vec<u8> {
        let mut out = Vec::new();
        for &v in values {
            let mut x = zz(v);
            for i in 0..9 {
                if i == 8 {
                    out.push(x as u8);
                    break;
                }
                if x < 0x80 {
                    out.push(x as u8);
                    break;
                }
                out.push((x as u8 & 0x7f) | 0x80);
                x >>= 7;
            }
        }
        out
    }

    /// Decode into a histogram of the project's bounds.
    fn decode(b: &[u8]) -> Result<Histogram<u64>, String> {
        let mut d = Decoder::default();
        let e = d.decode(b)?;
        let mut h = new_histogram();
        add_counts(&mut h, e.counts, e.samples)?;
        Ok(h)
    }

    /// The counter count matches what the crate allocates, for the project's bounds and the
    /// widest accepted ones (so `MAX_COUNTERS` is the true worst case).
    #[test]
    fn counters_match_the_crate() {
        for (lo, hi, d) in [
            (1, 60_000_000, 3),
            (1, MAX_HIGHEST, 3),
            (1000, MAX_HIGHEST, 2),
            (7, 100, 0),
            (1, 2, 1),
        ] {
            let h = Histogram::<u64>::new_with_bounds(lo, hi, d as u8).unwrap();
            assert_eq!(
                counters_for(lo, hi, d),
                h.distinct_values() as u64,
                "{lo}..{hi} {d}"
            );
        }
        assert_eq!(counters_for(1, MAX_HIGHEST, MAX_DIGITS), MAX_COUNTERS);
    }

    /// What the crate's serializer writes decodes to the same histogram.
    #[test]
    fn a_serialized_histogram_decodes() {
        let mut h = crate::metrics::new_histogram();
        for v in [1, 5, 300, 300, 59_000_000] {
            h.record(v).unwrap();
        }
        let mut bytes = Vec::new();
        V2DeflateSerializer::new()
            .serialize(&h, &mut bytes)
            .unwrap();
        assert_eq!(decode(&bytes).unwrap(), h);
    }

    /// A hand-built entry with counts 3 and 2 at values 1 and 3 decodes to them.
    #[test]
    fn a_hand_built_entry_decodes() {
        let payload = varints(&[0, 3, -1, 2]);
        let h = decode(&compressed(
            &v2(payload.len() as u32, 3, 1, 60_000_000, &payload),
            None,
        ))
        .unwrap();
        assert_eq!((h.len(), h.count_at(1), h.count_at(3)), (5, 3, 2));
    }

    fn refused(b: &[u8], why: &str) {
        match decode(b) {
            Ok(_) => panic!("accepted; expected a refusal about {why}"),
            Err(e) => assert!(e.contains(why), "{e:?} does not say {why:?}"),
        }
    }

    /// A header claiming a 4 GB payload is refused before anything is read or allocated.
    #[test]
    fn a_huge_payload_claim_is_refused() {
        refused(
            &compressed(&v2(u32::MAX, 3, 1, 60_000_000, &[0, 2]), None),
            "claims a payload of 4294967295 bytes",
        );
    }

    /// A compressed length beyond the entry is refused.
    #[test]
    fn a_compressed_length_beyond_the_entry_is_refused() {
        refused(
            &compressed(&v2(2, 3, 1, 60_000_000, &[0, 2]), Some(1 << 30)),
            "the entry holds",
        );
    }

    /// Wide bounds and too many digits (what makes the crate allocate huge counts arrays).
    #[test]
    fn wide_bounds_and_many_digits_are_refused() {
        refused(
            &compressed(&v2(2, 5, 1, 1 << 40, &[0, 2]), None),
            "significant digits",
        );
        refused(&compressed(&v2(2, 3, 1, u64::MAX, &[0, 2]), None), "bounds");
        refused(&compressed(&v2(2, 3, 0, 1000, &[0, 2]), None), "bounds");
        refused(&compressed(&v2(2, 3, 600, 1000, &[0, 2]), None), "bounds");
    }

    /// A zlib bomb (a valid header, then far more zeros than it claims) is refused after
    /// inflating one byte past its claim; a stream shorter than the claim is refused.
    #[test]
    fn a_zlib_bomb_inflates_no_further_than_its_claim() {
        let mut inner = v2(3, 3, 1, 60_000_000, &varints(&[0, 4, 1]));
        inner.resize(inner.len() + (64 << 20), 0);
        refused(
            &compressed(&inner, None),
            "inflates to more than the 3 payload bytes",
        );
        refused(
            &compressed(&v2(1000, 3, 1, 60_000_000, &[0, 2]), None),
            "inflates to 2",
        );
    }

    /// Payloads the crate would fail or panic on: a counter past the bounds, the zero run
    /// that cannot be negated, counts whose sum overflows u64, a number cut short.
    #[test]
    fn bad_payloads_are_refused() {
        let check = |values: &[i64], why: &str| {
            let p = varints(values);
            refused(&compressed(&v2(p.len() as u32, 0, 1, 2, &p), None), why);
        };
        check(&[1, 1, 1, 1, 1], "more counters");
        check(&[-1000, 1], "more counters");
        check(&[i64::MIN], "impossible run of zeros");
        check(&[i64::MAX, i64::MAX, i64::MAX], "overflows u64");
        let mut p = varints(&[300]);
        p.pop();
        refused(
            &compressed(&v2(p.len() as u32, 0, 1, 2, &p), None),
            "ends inside a number",
        );
    }

    /// Not a compressed V2 entry at all.
    #[test]
    fn other_cookies_are_refused() {
        refused(&v2(2, 3, 1, 1000, &[0, 2]), "not a compressed V2");
        refused(&[1, 2, 3], "too short");
    }

    fn serialize(h: &Histogram<u64>) -> Vec<u8> {
        let mut bytes = Vec::new();
        V2DeflateSerializer::new().serialize(h, &mut bytes).unwrap();
        bytes
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// Any histogram the crate writes, of any accepted bounds, decodes to the counters the
        /// crate's own deserializer reads; added into a project histogram it gives what the
        /// crate's `add` gives; and held sparse, the same percentiles and max.
        #[test]
        fn decoding_matches_the_crate(
            low_pow in 0u32..10,
            high_pow in 12u32..=40,
            digits in 0u32..=3,
            values in proptest::collection::vec((0u32..40, 1u64..1000, 1u64..50), 1..40),
            more in proptest::collection::vec((0u32..26, 1u64..1000, 1u64..50), 1..40),
        ) {
            let low = 1u64 << low_pow;
            let high = 1u64 << high_pow;
            let mut h = Histogram::<u64>::new_with_bounds(low, high, digits as u8).unwrap();
            for (shift, frac, count) in values {
                let v = ((frac << shift) / 1000).clamp(low, high);
                h.record_n(v, count).unwrap();
            }
            // Another second, in the project's own layout, merged with it.
            let mut other = new_histogram();
            for (shift, frac, count) in more {
                other.record_n(((frac << shift) / 1000).max(1), count).unwrap();
            }
            let bytes = serialize(&h);
            let theirs: Histogram<u64> = Deserializer::new().deserialize(&mut bytes.as_slice()).unwrap();
            let mut d = Decoder::default();
            let ours = d.decode(&bytes).unwrap();
            let expected: Vec<(u64, u64)> = theirs
                .iter_recorded()
                .map(|v| (theirs.lowest_equivalent(v.value_iterated_to()), v.count_at_value()))
                .collect();
            prop_assert_eq!(ours.counts, &expected[..]);
            prop_assert_eq!(ours.samples, theirs.len());

            let p = Project::default();
            let mut dense = p.histogram();
            add_counts(&mut dense, ours.counts, ours.samples).unwrap();
            // The crate's add into the project's whole range (a grown histogram would take
            // values past it); `dense` on the left: equality walks its counters.
            let mut by_crate = crate::metrics::whole_range_histogram();
            if by_crate.add(&theirs).is_ok() {
                prop_assert_eq!(&dense, &by_crate);
            }
            let (counts, samples) = (ours.counts.to_vec(), ours.samples);
            let mut sparse = Sparse::default();
            sparse.add(&p, &counts, samples).unwrap();
            let mut d2 = Decoder::default();
            let o = d2.decode(&serialize(&other)).unwrap();
            sparse.add(&p, o.counts, o.samples).unwrap();
            add_counts(&mut dense, o.counts, o.samples).unwrap();
            sparse.add(&p, &counts, samples).unwrap();
            add_counts(&mut dense, &counts, samples).unwrap();
            let c = sparse.counters();
            prop_assert!(c.windows(2).all(|w| w[0].0 < w[1].0), "ascending, no index twice");
            for q in [0.5, 0.9, 0.99, 0.999, 1.0] {
                prop_assert_eq!(sparse.quantile(&p, q), dense.value_at_quantile(q), "q {}", q);
            }
            prop_assert_eq!(sparse.max(&p), dense.max());
            prop_assert_eq!(sparse.len(), dense.len());
        }
    }
}
