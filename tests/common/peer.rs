//! An independent test peer (`tests/peers/*/`) run as a child process: started, waited for
//! until it prints its ready line (its port), read line by line, and killed when dropped, so
//! a failing test leaves no server behind.
//!
//! The peer's stdout is read on a thread of its own, so a test can wait for a line with a
//! timeout instead of hanging on a silent peer; the lines taken are kept in [`Peer::log`].
//! The C peers print `LISTENING <port>` first and then `STATS key=value ...` lines; the
//! Python peers print their port(s) as a JSON line first and their totals as another when
//! their stdin closes. Its stderr is copied through to the test's
//! (shown when a test fails) and kept, so a peer that never becomes ready is reported with
//! what it said about why.

use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long a peer may take to print its ready line (a Python peer on two busy cores
/// takes a second or two).
pub const READY_TIMEOUT: Duration = Duration::from_secs(20);
/// How long a peer may take to print its totals once its stdin is closed.
pub const TOTALS_TIMEOUT: Duration = Duration::from_secs(60);

/// A running peer. Dropping it kills and reaps the process.
pub struct Peer {
    name: String,
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
    stderr: Arc<Mutex<String>>,
    stderr_reader: Option<JoinHandle<()>>,
    /// The stdout lines taken so far, the ready line first.
    pub log: Vec<String>,
}

impl Peer {
    /// Start `cmd` (its stdin, stdout and stderr piped) and wait up to [`READY_TIMEOUT`] for
    /// its first stdout line. `name` names the peer in panic messages.
    ///
    /// Panics when the peer cannot be started, or exits or stays silent before that line,
    /// with its stderr in the message.
    pub fn start(name: &str, mut cmd: Command) -> Peer {
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start the {name} ({cmd:?}): {e}"));
        let stdout = child.stdout.take().expect("stdout is piped");
        let (tx, lines) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut err = child.stderr.take().expect("stderr is piped");
        let stderr = Arc::new(Mutex::new(String::new()));
        let kept = Arc::clone(&stderr);
        let stderr_reader = std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = err.read(&mut buf) {
                if n == 0 {
                    break;
                }
                let text = String::from_utf8_lossy(&buf[..n]);
                eprint!("{text}");
                kept.lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push_str(&text);
            }
        });
        let mut peer = Peer {
            name: name.to_string(),
            stdin: child.stdin.take(),
            child,
            lines,
            stderr,
            stderr_reader: Some(stderr_reader),
            log: Vec::new(),
        };
        let ready = match peer.lines.recv_timeout(READY_TIMEOUT) {
            Ok(line) => line,
            Err(RecvTimeoutError::Timeout) => {
                peer.fail(&format!("printed nothing within {READY_TIMEOUT:?}"))
            }
            Err(RecvTimeoutError::Disconnected) => peer.fail("closed its stdout"),
        };
        peer.log.push(ready);
        peer
    }

    /// A Python peer: `python3 <script> --port 0 --max-seconds 60 <extra...>`, `script`
    /// relative to the repository root (the peer picks a free port and prints it first;
    /// `--max-seconds` ends one a crashed test run leaves behind).
    pub fn python(name: &str, script: &str, extra: &[&str]) -> Peer {
        let mut cmd = Command::new("python3");
        cmd.arg(Path::new(env!("CARGO_MANIFEST_DIR")).join(script))
            .args(["--port", "0", "--max-seconds", "60"])
            .args(extra);
        Peer::start(name, cmd)
    }

    /// A C peer built by [`super::c_peer`]: `<bin> 0 <args...>` (port 0: it picks a free
    /// one and prints `LISTENING <port>` first).
    pub fn c(name: &str, bin: &Path, args: &[&str]) -> Peer {
        let mut cmd = Command::new(bin);
        cmd.arg("0").args(args);
        Peer::start(name, cmd)
    }

    /// The ready line (the peer's first line on stdout).
    pub fn ready_line(&self) -> &str {
        &self.log[0]
    }

    /// The ready line parsed as JSON (the Python peers print `{"port": ...}`).
    pub fn ready_json(&self) -> serde_json::Value {
        serde_json::from_str(self.ready_line()).unwrap_or_else(|e| {
            panic!(
                "the {}'s ready line {:?} is not JSON: {e}",
                self.name,
                self.ready_line()
            )
        })
    }

    /// The port in a `LISTENING <port>` ready line (the C peers').
    pub fn listening_port(&self) -> u16 {
        self.ready_line()
            .strip_prefix("LISTENING ")
            .and_then(|p| p.trim().parse().ok())
            .unwrap_or_else(|| {
                panic!(
                    "the {} printed {:?}, not LISTENING <port>",
                    self.name,
                    self.ready_line()
                )
            })
    }

    /// Take the stdout lines waiting into [`Peer::log`].
    pub fn drain(&mut self) {
        while let Ok(l) = self.lines.try_recv() {
            self.log.push(l);
        }
    }

    /// Take stdout lines into [`Peer::log`] until one `until` accepts (true) or `timeout`
    /// passes or the peer closes its stdout (false).
    pub fn wait_for(&mut self, timeout: Duration, until: impl Fn(&str) -> bool) -> bool {
        let deadline = Instant::now() + timeout;
        while let Some(left) = deadline.checked_duration_since(Instant::now()) {
            match self.lines.recv_timeout(left) {
                Ok(l) => {
                    let done = until(&l);
                    self.log.push(l);
                    if done {
                        return true;
                    }
                }
                Err(_) => return false,
            }
        }
        false
    }

    /// `key` of the newest `STATS key=value ...` line taken; panics when there is none, so a
    /// renamed or missing count fails the test instead of reading as 0.
    pub fn stat(&self, key: &str) -> u64 {
        let prefix = format!("{key}=");
        self.log
            .iter()
            .rev()
            .find(|l| l.starts_with("STATS "))
            .and_then(|l| {
                l.split_whitespace()
                    .find_map(|kv| kv.strip_prefix(&prefix))
                    .and_then(|v| v.parse().ok())
            })
            .unwrap_or_else(|| {
                panic!(
                    "the {} printed no STATS line with {key}: {:?}",
                    self.name,
                    self.log.last()
                )
            })
    }

    /// Close the peer's stdin (most Python peers print their totals and exit on it; the
    /// impaired servers of `tests/peers/lib/impaired_core.py` do on SIGTERM, which follows
    /// when no line came within 2 s), wait for it to exit, and return its next stdout line
    /// parsed as JSON. Panics, with the peer's stderr, when no such line comes within
    /// [`TOTALS_TIMEOUT`].
    pub fn stop_for_totals(&mut self) -> serde_json::Value {
        drop(self.stdin.take());
        let grace = Duration::from_secs(2);
        let line = match self.lines.recv_timeout(grace) {
            Ok(line) => Ok(line),
            Err(_) => {
                // SAFETY: kill(2) on our own child's pid.
                unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM) };
                self.lines.recv_timeout(TOTALS_TIMEOUT - grace)
            }
        };
        let line = match line {
            Ok(line) => line,
            Err(_) => self.fail(&format!(
                "printed no totals within {TOTALS_TIMEOUT:?} after its stdin closed (and a \
                 SIGTERM)"
            )),
        };
        let _ = self.child.wait();
        self.log.push(line);
        let line = &self.log[self.log.len() - 1];
        serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("the {}'s totals {line:?} are not JSON: {e}", self.name))
    }

    /// Whether the process is still running.
    pub fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// What the peer has written to stderr so far.
    pub fn stderr(&self) -> String {
        self.stderr
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Kill the peer, then panic with `what` it did and all it wrote to stderr.
    fn fail(&mut self, what: &str) -> ! {
        let _ = self.child.kill();
        let status = self.child.wait();
        if let Some(r) = self.stderr_reader.take() {
            let _ = r.join();
        }
        panic!(
            "the {} {what} ({}); its stderr:\n{}",
            self.name,
            match status {
                Ok(s) => format!("then {s}"),
                Err(e) => format!("not reaped: {e}"),
            },
            self.stderr()
        );
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
