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
//!   [`MAX_INFLATED`] bytes: a zlib bomb inflates no further), and a shorter stream is an error;
//! - the varints themselves: every counter inside the bounds, no run of zeros the crate cannot
//!   negate, and a sample count that fits in u64.
//!
//! Only then does the crate deserialize the checked, inflated bytes. A log has at most
//! [`MAX_TAGS`] distinct tags. Any refusal names the file, the line and the entry.

use std::collections::BTreeSet;
use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};

use base64::Engine as _;
use flate2::read::ZlibDecoder;
use hdrhistogram::serialization::interval_log::{IntervalLogIterator, LogEntry};
use hdrhistogram::serialization::Deserializer;
use hdrhistogram::Histogram;
use thiserror::Error;

/// The largest log read (1 GiB): a run of an hour with ten tags writes about 40 MB.
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
    pub histogram: Histogram<u64>,
}

/// Turns an entry's compressed bytes into its histogram, checking them first. Keeps its
/// buffers between entries.
#[derive(Default)]
pub struct Decoder {
    de: Deserializer,
    inflated: Vec<u8>,
}

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
    // ceil(log2(2 × 10^digits)) for digits 0..=5.
    const SUB_BUCKET_MAGNITUDE: [u32; 6] = [1, 5, 8, 11, 15, 18];
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

/// Walk the varint payload as the crate will, refusing what would make it fail or panic.
fn check_payload(payload: &[u8], counters: u64) -> Result<(), String> {
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
            samples = samples
                .checked_add(zz as u64)
                .ok_or("the histogram's sample count overflows u64")?;
            index += 1;
        }
        if index > counters {
            return Err(format!(
                "the histogram payload has more counters than its bounds hold ({counters})"
            ));
        }
    }
    Ok(())
}

impl Decoder {
    /// Check `encoded` (a compressed V2 histogram) and decode it.
    pub fn decode(&mut self, encoded: &[u8]) -> Result<Histogram<u64>, String> {
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
            return Err(format!(
                "not a V2 histogram inside (cookie {inner:#010x})"
            ));
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
        let counters = counters_for(lowest, highest, digits);
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
        check_payload(&self.inflated[V2_HEADER_LEN..], counters)?;
        self.de
            .deserialize(&mut self.inflated.as_slice())
            .map_err(|e| format!("not a histogram: {e}"))
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
    mut visit: impl FnMut(Entry<'_>) -> Result<(), String>,
) -> Result<(), HlogError> {
    let file = File::open(path).map_err(|e| file_err(path, e.to_string()))?;
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
            return Err(file_err(
                path,
                format!("larger than {} MiB: not read", MAX_FILE_BYTES >> 20),
            ));
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
        let histogram = decoder.decode(&encoded).map_err(entry_err)?;
        visit(Entry {
            number,
            tag,
            second: iv.start_timestamp().as_secs(),
            encoded: &encoded,
            histogram,
        })
        .map_err(entry_err)?;
    }
    Ok(())
}

/// Add `h` into `into`, refusing a sample count that would overflow u64 (every counter is at
/// most the count, so none can). Values beyond `into`'s bounds (a foreign log's) saturate to
/// its highest; the accepted bounds keep that walk to at most [`MAX_COUNTERS`] counters.
pub fn add_checked(into: &mut Histogram<u64>, h: &Histogram<u64>) -> Result<(), String> {
    if into.len().checked_add(h.len()).is_none() {
        return Err("sample counts added up overflow u64".into());
    }
    if into.add(h).is_err() {
        for v in h.iter_recorded() {
            into.saturating_record_n(v.value_iterated_to(), v.count_at_value());
        }
    }
    Ok(())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use flate2::write::ZlibEncoder;
    use std::io::Write;

    /// An inner V2 histogram by hand: header fields and payload bytes as given.
    pub(crate) fn v2(payload_len: u32, digits: u32, low: u64, high: u64, payload: &[u8]) -> Vec<u8> {
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

    fn decode(b: &[u8]) -> Result<Histogram<u64>, String> {
        Decoder::default().decode(b)
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
        use hdrhistogram::serialization::{Serializer, V2DeflateSerializer};
        let mut h = crate::metrics::new_histogram();
        for v in [1, 5, 300, 300, 59_000_000] {
            h.record(v).unwrap();
        }
        let mut bytes = Vec::new();
        V2DeflateSerializer::new().serialize(&h, &mut bytes).unwrap();
        assert_eq!(decode(&bytes).unwrap(), h);
    }

    /// A hand-built entry with counts 3 and 2 at values 1 and 3 decodes to them.
    #[test]
    fn a_hand_built_entry_decodes() {
        let payload = varints(&[0, 3, -1, 2]);
        let h = decode(&compressed(&v2(payload.len() as u32, 3, 1, 60_000_000, &payload), None))
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
        refused(&compressed(&v2(2, 5, 1, 1 << 40, &[0, 2]), None), "significant digits");
        refused(&compressed(&v2(2, 3, 1, u64::MAX, &[0, 2]), None), "bounds");
        refused(&compressed(&v2(2, 3, 0, 1000, &[0, 2]), None), "bounds");
        refused(&compressed(&v2(2, 3, 600, 1000, &[0, 2]), None), "bounds");
    }

    /// A zlib bomb (a valid header, then far more zeros than it claims) is inflated only to
    /// the claimed length; a stream shorter than the claim is refused.
    #[test]
    fn a_zlib_bomb_inflates_no_further_than_its_claim() {
        let mut inner = v2(3, 3, 1, 60_000_000, &varints(&[0, 4, 1]));
        inner.resize(inner.len() + (64 << 20), 0);
        let h = decode(&compressed(&inner, None)).unwrap();
        assert_eq!(h.len(), 5);
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
}
