//! `histograms.hlog`: every per-second histogram of the run in the HdrHistogram interval log
//! format (V2, compressed), one tagged line per metric per second.
//!
//! The summary keeps percentiles; the log keeps the histograms themselves, so runs from
//! several load machines merge exactly (histogram addition), and standard HdrHistogram tools
//! (HistogramLogAnalyzer, the Java `HistogramLogProcessor`) read it. Values are microseconds
//! (`docs/reference/hlog.md` gives the commands).
//!
//! The header is the one the Java `HistogramLogWriter` writes: comments, the
//! `#[Histogram log format version 1.3]` line, `#[StartTime: ...]`, `#[BaseTime: ...]` and
//! the column legend.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::Path;
use std::time::SystemTime;

use hdrhistogram::serialization::interval_log::IntervalLogWriterBuilder;
use hdrhistogram::serialization::V2DeflateSerializer;
use hdrhistogram::Histogram;

use base64::Engine as _;
use flate2::write::ZlibEncoder;
use flate2::Compression;

use super::hlog_read::{Layout, Project, Sparse};
use crate::metrics::{Recorder, HIST_MAX_US, HIST_SIGFIG};

/// The interval log format version written in the header (HdrHistogram's current one).
pub const FORMAT_VERSION: &str = "1.3";

/// Writes to `W`: a plain file, or a run folder's staged file
/// ([`crate::report::run_dir::Staged`]), renamed into place when the run ends.
pub struct HlogWriter<W: Write = File> {
    out: BufWriter<W>,
    line: Vec<u8>,
    project: Project,
    v2: Vec<u8>,
    compressed: Vec<u8>,
    /// A histogram's non-zero counters `(index, count)` for the line being written (reused).
    counters: Vec<(u64, u64)>,
}

/// HdrHistogram's V2 cookies (the crate keeps them private).
const V2_COOKIE: u32 = 0x1c84_9303 | 0x10;
const V2_COMPRESSED_COOKIE: u32 = 0x1c84_9304 | 0x10;

fn push_varint(out: &mut Vec<u8>, mut x: u64) {
    for _ in 0..8 {
        if x < 0x80 {
            out.push(x as u8);
            return;
        }
        out.push((x as u8 & 0x7f) | 0x80);
        x >>= 7;
    }
    // The 9th byte carries the last 8 bits whole.
    out.push(x as u8);
}

fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

/// The compressed V2 bytes of a histogram of the project's bounds given as its non-zero
/// counters `(index, count)`, ascending: what the crate's `V2DeflateSerializer` writes for it
/// (counts up to the highest non-zero one, a run of more than one zero as its negated length).
fn encode_sparse(counters: &[(u64, u64)], v2: &mut Vec<u8>, out: &mut Vec<u8>) -> io::Result<()> {
    v2.clear();
    v2.extend_from_slice(&V2_COOKIE.to_be_bytes());
    v2.extend_from_slice(&0u32.to_be_bytes());
    v2.extend_from_slice(&0u32.to_be_bytes());
    v2.extend_from_slice(&u32::from(HIST_SIGFIG).to_be_bytes());
    v2.extend_from_slice(&1u64.to_be_bytes());
    v2.extend_from_slice(&HIST_MAX_US.to_be_bytes());
    v2.extend_from_slice(&1.0f64.to_bits().to_be_bytes());
    let mut next = 0u64;
    for &(index, count) in counters {
        match index - next {
            0 => {}
            1 => push_varint(v2, 0),
            zeros => push_varint(v2, zigzag(-(zeros as i64))),
        }
        let count = i64::try_from(count)
            .map_err(|_| io::Error::other("a count beyond i64 cannot be written"))?;
        push_varint(v2, zigzag(count));
        next = index + 1;
    }
    let payload_len = (v2.len() - 40) as u32;
    v2[4..8].copy_from_slice(&payload_len.to_be_bytes());
    let mut z = ZlibEncoder::new(Vec::new(), Compression::default());
    z.write_all(v2)?;
    let body = z.finish()?;
    out.clear();
    out.extend_from_slice(&V2_COMPRESSED_COOKIE.to_be_bytes());
    out.extend_from_slice(&(body.len() as u32).to_be_bytes());
    out.extend_from_slice(&body);
    Ok(())
}

/// `h`'s non-zero counters as `(index in `layout`, count)`, ascending, into `out`.
fn counters_of(h: &Histogram<u64>, layout: &Layout, out: &mut Vec<(u64, u64)>) {
    out.clear();
    out.extend(
        h.iter_recorded()
            .map(|v| (layout.index_of(v.value_iterated_to()), v.count_at_value())),
    );
}

/// The compressed V2 bytes of a histogram of the project's layout, the project's bounds in
/// the header whatever counters it has grown: what a line of the hlog carries.
pub fn encode_compressed(h: &Histogram<u64>) -> io::Result<Vec<u8>> {
    let mut counters = Vec::new();
    counters_of(h, &Layout::project(), &mut counters);
    let (mut v2, mut out) = (Vec::new(), Vec::new());
    encode_sparse(&counters, &mut v2, &mut out)?;
    Ok(out)
}

impl HlogWriter<File> {
    /// Create the log with its header at `path` (written in place: tests and tools; a run
    /// writes through [`HlogWriter::new`] on a staged file).
    pub fn create(path: &Path, start: SystemTime, what: &str) -> io::Result<Self> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        Self::new(File::create(path)?, start, what)
    }
}

impl<W: Write> HlogWriter<W> {
    /// Start the log on `out` with its header; `start` is the run's start (the timestamps'
    /// base).
    pub fn new(out: W, start: SystemTime, what: &str) -> io::Result<Self> {
        let mut out = BufWriter::new(out);
        let mut ser = V2DeflateSerializer::new();
        {
            let mut b = IntervalLogWriterBuilder::new();
            b.add_comment(&format!("tickswarm {}: {what}", env!("CARGO_PKG_VERSION")))
                .add_comment(
                    "values in microseconds (*_us tags) or bytes (*_bytes, *_bytes_per_s tags); \
                     one interval per second per tag",
                )
                // The Java writer's format-version line (a comment to the Rust reader).
                .add_comment(&format!("[Histogram log format version {FORMAT_VERSION}]"))
                .with_start_time(start)
                .with_base_time(start);
            b.begin_log_with(&mut out, &mut ser)?;
        }
        out.write_all(b"\"StartTimestamp\",\"Interval_Length\",\"Interval_Max\",\"Interval_Compressed_Histogram\"\n")?;
        Ok(Self {
            out,
            line: Vec::with_capacity(4096),
            project: Project::default(),
            v2: Vec::new(),
            compressed: Vec::new(),
            counters: Vec::new(),
        })
    }

    /// Everything written, flushed: the writer underneath (a staged file, to commit).
    pub fn finish(self) -> io::Result<W> {
        self.out.into_inner().map_err(|e| e.into_error())
    }

    /// One histogram of second `index` as a line, through the sparse encoder: every line
    /// carries the project's bounds in its header, whatever counters the histogram has grown
    /// (see [`crate::metrics::new_histogram`]). Nothing when it is empty.
    fn write(&mut self, tag: &str, h: &Histogram<u64>, index: u64) -> io::Result<()> {
        if h.is_empty() {
            return Ok(());
        }
        counters_of(h, &self.project.layout, &mut self.counters);
        encode_sparse(&self.counters, &mut self.v2, &mut self.compressed)?;
        self.write_line(tag, index, h.max())
    }

    /// One line of the histogram just encoded into `compressed`: `tag` (none when empty),
    /// second `index` and its max, as the crate's interval log writer formats a line.
    fn write_line(&mut self, tag: &str, index: u64, max: u64) -> io::Result<()> {
        self.line.clear();
        if !tag.is_empty() {
            self.line.extend_from_slice(b"Tag=");
            self.line.extend_from_slice(tag.as_bytes());
            self.line.push(b',');
        }
        self.line
            .extend_from_slice(format!("{index}.000,1.000,{:.3},", max as f64).as_bytes());
        let mut b64 = String::new();
        base64::engine::general_purpose::STANDARD.encode_string(&self.compressed, &mut b64);
        self.line.extend_from_slice(b64.as_bytes());
        self.line.push(b'\n');
        self.out.write_all(&self.line)
    }

    /// Append second `index` from sparse histograms by tag (merged results), encoded here
    /// from their non-zero counters: the same V2 bytes the crate writes for the same
    /// histogram, without building its 17,408-counter array per tag and second.
    pub fn interval_tags(
        &mut self,
        index: u64,
        tags: &std::collections::BTreeMap<String, Sparse>,
    ) -> io::Result<()> {
        for (tag, h) in tags {
            if h.is_empty() {
                continue;
            }
            encode_sparse(h.counters(), &mut self.v2, &mut self.compressed)?;
            self.write_line(tag, index, h.max(&self.project))?;
        }
        self.out.flush()
    }

    /// Append one histogram of second `index` under `tag` (a group's RTT:
    /// [`crate::metrics::groups::rtt_tag`]); nothing when it is empty.
    pub fn histogram(&mut self, index: u64, tag: &str, h: &Histogram<u64>) -> io::Result<()> {
        self.write(tag, h, index)?;
        self.out.flush()
    }

    /// Append second `index` (starting at `index` seconds after the run start).
    pub fn interval(&mut self, index: u64, rec: &Recorder) -> io::Result<()> {
        self.write("rtt_us", &rec.rtt_us, index)?;
        self.write("handshake_us", &rec.handshake_us, index)?;
        self.write(
            "snapshot_interarrival_us",
            &rec.snapshot_interarrival_us,
            index,
        )?;
        self.write("send_lateness_us", &rec.send_lateness_us, index)?;
        self.write("bot_up_bytes_per_s", &rec.bot_up_bytes_per_s, index)?;
        self.write("bot_down_bytes_per_s", &rec.bot_down_bytes_per_s, index)?;
        self.write("packet_size_up_bytes", &rec.packet_size_up, index)?;
        self.write("packet_size_down_bytes", &rec.packet_size_down, index)?;
        for (name, h) in &rec.extra {
            self.write(name, h, index)?;
        }
        self.out.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hdrhistogram::serialization::interval_log::{IntervalLogIterator, LogEntry};
    use hdrhistogram::serialization::Deserializer;

    /// The header lines, in the Java writer's order, before any interval.
    #[test]
    fn header_names_the_format_version() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("h.hlog");
        drop(HlogWriter::create(&path, SystemTime::UNIX_EPOCH, "test").unwrap());
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        let at = |prefix: &str| {
            lines
                .iter()
                .position(|l| l.starts_with(prefix))
                .unwrap_or_else(|| panic!("no `{prefix}` line in\n{text}"))
        };
        let version = at("#[Histogram log format version 1.3]");
        assert_eq!(lines[version], "#[Histogram log format version 1.3]");
        assert!(version < at("#[StartTime: 0.000 "));
        assert!(at("#[StartTime: ") < at("#[BaseTime: 0.000 "));
        assert!(at("#[BaseTime: ") < at("\"StartTimestamp\""));
    }

    /// What is written reads back as the same histograms, tagged and timed.
    #[test]
    fn round_trips_through_the_standard_reader() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("h.hlog");
        let mut w = HlogWriter::create(&path, SystemTime::UNIX_EPOCH, "test").unwrap();
        let mut rec = Recorder::new();
        for v in [100, 200, 300] {
            rec.record_rtt(v);
        }
        rec.record_extra("entities", 32);
        w.interval(0, &rec).unwrap();
        rec.reset();
        rec.record_rtt(5000);
        w.interval(1, &rec).unwrap();
        drop(w);
        let bytes = std::fs::read(&path).unwrap();
        let mut de = Deserializer::new();
        let mut seen = Vec::new();
        for e in IntervalLogIterator::new(&bytes) {
            if let Ok(LogEntry::Interval(i)) = e {
                let raw = base64_decode(i.encoded_histogram());
                let h: Histogram<u64> = de.deserialize(&mut raw.as_slice()).unwrap();
                seen.push((
                    i.tag().map(|t| t.as_str().to_string()),
                    i.start_timestamp().as_secs(),
                    h.len(),
                    h.max(),
                ));
            }
        }
        assert_eq!(
            seen,
            vec![
                (Some("rtt_us".into()), 0, 3, 300),
                (Some("entities".into()), 0, 1, 32),
                (Some("rtt_us".into()), 1, 1, 5003),
            ]
        );
    }

    /// A sparse second is written as the very bytes the crate's V2 serializer writes for the
    /// same histogram, and reads back as it.
    #[test]
    fn sparse_seconds_encode_as_the_crate_does() {
        use crate::report::hlog_read::{Decoder, Project, Sparse};
        use hdrhistogram::serialization::{Serializer, V2Serializer};
        let p = Project::default();
        for values in [
            vec![1u64],
            vec![1, 2, 3, 5, 900, 901, 70_000, 70_000, 59_999_999],
            (1..3000).map(|v| v * 7).collect(),
        ] {
            // The project's layout over its whole range: what the lines' headers state.
            let mut h = crate::metrics::whole_range_histogram();
            for v in &values {
                h.record(*v).unwrap();
            }
            let mut theirs = Vec::new();
            V2Serializer::new().serialize(&h, &mut theirs).unwrap();
            let mut deflated = Vec::new();
            V2DeflateSerializer::new()
                .serialize(&h, &mut deflated)
                .unwrap();
            let mut d = Decoder::default();
            let e = d.decode(&deflated).unwrap();
            let mut sparse = Sparse::default();
            sparse.add(&p, e.counts, e.samples).unwrap();
            let (mut v2, mut ours) = (Vec::new(), Vec::new());
            encode_sparse(sparse.counters(), &mut v2, &mut ours).unwrap();
            assert_eq!(v2, theirs, "{} values", values.len());
            let back: Histogram<u64> = Deserializer::new()
                .deserialize(&mut ours.as_slice())
                .unwrap();
            assert_eq!(back, h);
        }
    }

    /// Minimal base64 (standard alphabet) for the test: the crate does not re-export one.
    fn base64_decode(s: &str) -> Vec<u8> {
        let val = |c: u8| match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            _ => 63,
        };
        let bytes: Vec<u8> = s.bytes().filter(|&c| c != b'=').collect();
        let mut out = Vec::new();
        for chunk in bytes.chunks(4) {
            let v: Vec<u32> = chunk.iter().map(|&c| u32::from(val(c))).collect();
            let n = v.iter().fold(0u32, |a, &x| (a << 6) | x) << (6 * (4 - v.len()));
            let b = n.to_be_bytes();
            out.extend_from_slice(&b[1..v.len()]);
        }
        out
    }
}
