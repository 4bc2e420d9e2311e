//! The files a run leaves in its folder: written into the folder checked at the start, even
//! when its path is swapped for a symlink during the run, and renamed into place, so a disk
//! that fills leaves the previous file or none, never a truncated one
//! (`docs/security/run-folders.md`).

use crate::common::summary::{run_command, run_scenario, summary_in, u64_at};
use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::time::{Duration, Instant};

fn scenario(dir: &Path, secs: u64) -> PathBuf {
    let p = dir.join("s.yaml");
    std::fs::write(
        &p,
        format!(
            "name: files\nprotocol:\n  cafe: {{}}\npopulation:\n  stages:\n    - ramp_to: 3\n      over: 0s\nduration: {secs}s\n"
        ),
    )
    .expect("scenario");
    p
}

fn listing(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .expect("listing")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_else(|e| format!("<{}: {e}>", p.display()))
}

/// Break 13: the output folder renamed away and a symlink to another folder put in its place
/// while the run goes on. The report goes to the folder checked at the start (where it was
/// moved), the link's target keeps its summary.json, and the run says where the files are.
/// Before: the report went through the link, replacing the target's summary.json without
/// `--force`.
#[test]
fn a_folder_swapped_for_a_symlink_mid_run_is_not_followed() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let sc = scenario(tmp.path(), 4);
    let (out, moved, victim) = (
        tmp.path().join("out"),
        tmp.path().join("moved"),
        tmp.path().join("victim"),
    );
    std::fs::create_dir(&victim).expect("victim");
    std::fs::write(victim.join("summary.json"), "theirs\n").expect("theirs");
    let mut child = run_command(&sc, &[], &out)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run");
    let stderr = child.stderr.take().expect("stderr");
    let said = std::thread::spawn(move || {
        BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
            .collect::<Vec<_>>()
            .join("\n")
    });
    // Once the run has checked the folder and begun its log in it (the run lasts 4 s), swap.
    let t0 = Instant::now();
    while std::fs::read_dir(&out).map_or(true, |mut d| d.next().is_none()) {
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "the run began no log in its folder in 60 s"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    std::fs::rename(&out, &moved).expect("move the folder away");
    std::os::unix::fs::symlink(&victim, &out).expect("symlink in its place");
    let swapped_after = t0.elapsed();
    let status = child.wait().expect("wait");
    let said = said.join().expect("stderr");
    assert_eq!(status.code(), Some(0), "{said}");
    assert_eq!(
        read(&victim.join("summary.json")),
        "theirs\n",
        "the report went through the symlink into {} (swapped {swapped_after:?} after start)",
        victim.display()
    );
    assert_eq!(
        listing(&victim),
        ["summary.json"],
        "files in the link's target"
    );
    let s = summary_in(&moved);
    assert_eq!(
        u64_at(&s, "bots.planned"),
        3,
        "the run's summary is in the folder it opened, now {}: {}",
        moved.display(),
        listing(&moved).join(", ")
    );
    for f in ["histograms.hlog", "report.html", "summary.json"] {
        assert!(
            listing(&moved).contains(&f.to_string()),
            "{f} in {:?}",
            listing(&moved)
        );
    }
    assert!(
        said.contains("was moved or replaced during the run") && said.contains("moved"),
        "{said}"
    );
}

/// Runs the scenario into `out` (with `--force`) with every file the process writes limited
/// to `limit` bytes (RLIMIT_FSIZE, SIGXFSZ ignored: a write past it fails with EFBIG, as a
/// full disk fails with ENOSPC).
fn run_with_file_limit(sc: &Path, out: &Path, limit: u64) -> Output {
    let mut c = run_command(sc, &["--force"], out);
    // SAFETY: only async-signal-safe calls between fork and exec.
    unsafe {
        c.pre_exec(move || {
            let lim = libc::rlimit {
                rlim_cur: limit,
                rlim_max: limit,
            };
            if libc::setrlimit(libc::RLIMIT_FSIZE, &lim) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
            Ok(())
        });
    }
    c.output().expect("run")
}

/// Break 14: a write that fails part-way (a full disk; here a file size limit) leaves every
/// previous file of the folder whole, no temporary file, and exit 2 naming the file. First
/// summary.json fails (4 KiB allowed), then report.html (summary.json fits in 32 KiB, the
/// report does not). Before: a truncated summary.json (4,096 bytes) or report.html (32,768).
#[test]
fn a_write_that_fails_leaves_the_previous_files_whole() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let sc = scenario(tmp.path(), 2);
    // The sizes this relies on, from a run without a limit.
    let sizes = tmp.path().join("sizes");
    run_scenario(&sc, &["--quiet"], &sizes, &[0]);
    let size = |f: &str| {
        std::fs::metadata(sizes.join(f))
            .unwrap_or_else(|e| panic!("{f} of the sizing run: {e}"))
            .len()
    };
    let (summary, report) = (size("summary.json"), size("report.html"));
    assert!(
        summary > 4096 && summary < 32_768 && report > 32_768,
        "summary.json {summary} bytes, report.html {report}: the limits below no longer split them"
    );
    for (limit, failing) in [(4096, "summary.json"), (32_768, "report.html")] {
        let out = tmp.path().join(format!("out-{limit}"));
        std::fs::create_dir(&out).expect("out");
        let previous = ["histograms.hlog", "report.html", "summary.json"];
        for f in previous {
            std::fs::write(out.join(f), format!("previous {f}\n")).expect("previous");
        }
        let o = run_with_file_limit(&sc, &out, limit);
        let e = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "limit {limit}: {e}");
        assert!(
            e.contains(&format!("{failing}:")) && e.contains("error"),
            "limit {limit}: the error names {failing}: {e}"
        );
        for f in previous {
            let now = read(&out.join(f));
            assert_eq!(
                now,
                format!("previous {f}\n"),
                "limit {limit}: {f} is {} bytes, not the previous file",
                now.len()
            );
        }
        assert_eq!(
            listing(&out),
            previous,
            "limit {limit}: temporary files left"
        );
    }
}
