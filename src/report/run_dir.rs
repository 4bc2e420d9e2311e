//! The run folder: opened once, written by renaming into place.
//!
//! Every file a command leaves in its output folder (summary.json, report.html, junit.xml,
//! histograms.hlog, compare.html and compare.json) goes through a [`RunDir`], for two reasons
//! a hostile review showed:
//!
//! - **A folder swapped for a symlink mid-run.** Writing to `dir.join(name)` resolves `dir`
//!   again at each write, so a folder renamed away and replaced by a symlink during a run got
//!   the report in the link's target, replacing a summary.json there without `--force`.
//!   A `RunDir` resolves the path once, at the start (a symlink the user gave is followed then,
//!   once), opens the folder, checks it (empty unless `--force`) and from then on names files
//!   only relative to that open folder (`openat`, `renameat`, `unlinkat`): a path swapped
//!   later is never consulted, and the files land in the folder that was checked, wherever it
//!   was moved. The alternative, checking the path's device and inode before each write, still
//!   leaves a window between the check and the write; a descriptor has none. Holding one is
//!   POSIX (`libc`, already a dependency), so no new crate is needed.
//! - **A full disk.** Writing in place left a 0-byte summary.json or a truncated report.html
//!   when the disk filled. Each file is written to a temporary name in the same folder
//!   (`.NAME.tickswarm-PID-N.tmp`, created exclusively, never following a link), synced, and
//!   renamed over `NAME`; the folder is synced after. A write that fails removes its temporary
//!   file, so `NAME` is the previous file or none, never a partial one. A command stages all its
//!   files before it renames any ([`Staged`]), so a failure leaves the previous set whole.
//!
//! A folder the `RunDir` created is removed again when nothing was renamed into it (a run
//! refused before it starts leaves no folder behind).

use std::fs::File;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use thiserror::Error;

/// Why the folder could not be used or a file not written; each names the path.
#[derive(Debug, Error)]
pub enum RunDirError {
    #[error(
        "output folder {0} is not empty; choose another --out, or add --force to write into it \
         (files of the same name are replaced)"
    )]
    NotEmpty(PathBuf),
    #[error("output folder {0} is a file, not a folder")]
    NotAFolder(PathBuf),
    #[error("output folder {path} changed while it was being opened; nothing was written")]
    Changed { path: PathBuf },
    #[error("output folder {path}: {source}")]
    Open { path: PathBuf, source: io::Error },
    #[error("writing {path}: {source} (the previous file, if any, is left as it was)")]
    Write { path: PathBuf, source: io::Error },
}

/// Temporary names are unique within a process by this counter (and across processes by
/// the pid in them).
static NEXT_TMP: AtomicU64 = AtomicU64::new(0);

/// An output folder, opened once. See the module docs.
#[derive(Debug)]
pub struct RunDir {
    /// As given, for messages (and for removing a folder this created).
    path: PathBuf,
    dir: File,
    /// This created the folder (it did not exist before).
    created: bool,
    /// Something was renamed into it: keep it.
    used: AtomicBool,
}

impl RunDir {
    /// Resolve `path` (creating it and its parents if missing), open it, and refuse it when
    /// it holds anything, unless `force`.
    pub fn open(path: &Path, force: bool) -> Result<Self, RunDirError> {
        let open_err = |source| RunDirError::Open {
            path: path.to_path_buf(),
            source,
        };
        if path.exists() && !path.is_dir() {
            return Err(RunDirError::NotAFolder(path.to_path_buf()));
        }
        let created = !path.exists();
        std::fs::create_dir_all(path).map_err(open_err)?;
        let dir = sys::open_dir(path).map_err(open_err)?;
        let this = RunDir {
            path: path.to_path_buf(),
            dir,
            created,
            used: AtomicBool::new(false),
        };
        // The listing is read by path: it must be the folder just opened.
        let mut entries = std::fs::read_dir(path).map_err(open_err)?;
        if !this.still_at_path() {
            return Err(RunDirError::Changed {
                path: path.to_path_buf(),
            });
        }
        if !force && entries.next().is_some() {
            return Err(RunDirError::NotEmpty(path.to_path_buf()));
        }
        Ok(this)
    }

    /// The path it was opened as.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Where the folder is now: its path as given, or, when that no longer names it (moved,
    /// or replaced by a symlink), where the kernel says the open folder is.
    pub fn location(&self) -> PathBuf {
        if self.still_at_path() {
            return self.path.clone();
        }
        sys::current_path(&self.dir).unwrap_or_else(|| self.path.clone())
    }

    /// `name` in the folder where it is now (for messages).
    pub fn file_path(&self, name: &str) -> PathBuf {
        self.location().join(name)
    }

    /// The path as given still names the folder opened (same device and inode).
    pub fn still_at_path(&self) -> bool {
        match (std::fs::metadata(&self.path), self.dir.metadata()) {
            (Ok(now), Ok(opened)) => sys::same_file(&now, &opened),
            _ => false,
        }
    }

    /// Open `name` in the folder for reading (a link in its place is not followed).
    pub fn open_read(&self, name: &str) -> io::Result<File> {
        sys::open_in(&self.dir, name, sys::Mode::Read)
    }

    /// Start writing `name`: a temporary file in the folder, renamed over `name` by
    /// [`Staged::commit`] and removed if dropped uncommitted.
    pub fn stage(&self, name: &str) -> Result<Staged<'_>, RunDirError> {
        if name.is_empty() || name.contains('/') || name.starts_with('.') {
            return Err(RunDirError::Write {
                path: self.path.join(name),
                source: io::Error::new(io::ErrorKind::InvalidInput, "not a plain file name"),
            });
        }
        let tmp = format!(
            ".{name}.tickswarm-{}-{}.tmp",
            std::process::id(),
            NEXT_TMP.fetch_add(1, Ordering::Relaxed)
        );
        let file = sys::open_in(&self.dir, &tmp, sys::Mode::CreateNew).map_err(|source| {
            RunDirError::Write {
                path: self.file_path(name),
                source,
            }
        })?;
        Ok(Staged {
            dir: self,
            name: name.to_string(),
            tmp,
            file: Some(file),
        })
    }

    /// Write `bytes` as `name`, renamed into place.
    pub fn write(&self, name: &str, bytes: &[u8]) -> Result<PathBuf, RunDirError> {
        let mut s = self.stage(name)?;
        s.write_all(bytes).map_err(|e| s.error(e))?;
        s.commit()
    }
}

impl Drop for RunDir {
    fn drop(&mut self) {
        // A folder this created and nothing was written to goes again; only if the path still
        // names it, and only if it is empty (remove_dir refuses otherwise).
        if self.created && !self.used.load(Ordering::Relaxed) && self.still_at_path() {
            let _ = std::fs::remove_dir(&self.path);
        }
    }
}

/// A file being written under a temporary name; see [`RunDir::stage`].
#[derive(Debug)]
pub struct Staged<'d> {
    dir: &'d RunDir,
    name: String,
    tmp: String,
    file: Option<File>,
}

impl Staged<'_> {
    /// The final name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The error for a failed write of this file, naming it.
    pub fn error(&self, source: io::Error) -> RunDirError {
        RunDirError::Write {
            path: self.dir.file_path(&self.name),
            source,
        }
    }

    /// The content written so far, opened again for reading (the report reads the run's
    /// staged histograms.hlog before it is renamed into place).
    pub fn reopen(&self) -> io::Result<File> {
        sys::open_in(&self.dir.dir, &self.tmp, sys::Mode::Read)
    }

    /// Sync the file, rename it over its final name and sync the folder; its path.
    pub fn commit(mut self) -> Result<PathBuf, RunDirError> {
        let file = self.file.take();
        let synced = match &file {
            Some(f) => f.sync_all(),
            None => Err(io::Error::other("already closed")),
        };
        drop(file);
        synced.map_err(|e| self.error(e))?;
        sys::rename_in(&self.dir.dir, &self.tmp, &self.name).map_err(|e| self.error(e))?;
        self.dir.used.store(true, Ordering::Relaxed);
        // The rename is durable once the folder is; a failure here loses nothing written.
        let _ = self.dir.dir.sync_all();
        self.tmp.clear();
        Ok(self.dir.file_path(&self.name))
    }
}

impl Write for Staged<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match &mut self.file {
            Some(f) => f.write(buf),
            None => Err(io::Error::other("already closed")),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match &mut self.file {
            Some(f) => f.flush(),
            None => Ok(()),
        }
    }
}

impl Drop for Staged<'_> {
    fn drop(&mut self) {
        if !self.tmp.is_empty() {
            drop(self.file.take());
            let _ = sys::remove_in(&self.dir.dir, &self.tmp);
        }
    }
}

mod sys {
    //! Names relative to the open folder: `openat`, `renameat`, `unlinkat` (the crate is
    //! Unix-only already: its sockets are raw descriptors).

    use std::ffi::CString;
    use std::fs::{File, Metadata};
    use std::io;
    use std::os::fd::{AsRawFd, FromRawFd};
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::fs::MetadataExt;
    use std::path::{Path, PathBuf};

    pub enum Mode {
        Read,
        CreateNew,
    }

    fn c(name: &str) -> io::Result<CString> {
        // Only plain names of this folder: never a path out of it.
        if name.is_empty() || name.contains('/') || name == "." || name == ".." {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("`{name}` is not a file name"),
            ));
        }
        CString::new(name).map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))
    }

    fn fd_result(fd: libc::c_int) -> io::Result<File> {
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` was just returned by the kernel, is open and owned by nothing else.
        Ok(unsafe { File::from_raw_fd(fd) })
    }

    /// Open the folder at `path` (a symlink given now is followed now, once).
    pub fn open_dir(path: &Path) -> io::Result<File> {
        let p = CString::new(path.as_os_str().as_bytes())
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        // SAFETY: `p` is a valid C string; the flags ask for a descriptor only.
        fd_result(unsafe {
            libc::open(
                p.as_ptr(),
                libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
            )
        })
    }

    pub fn open_in(dir: &File, name: &str, mode: Mode) -> io::Result<File> {
        let n = c(name)?;
        let flags = match mode {
            Mode::Read => libc::O_RDONLY,
            Mode::CreateNew => libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL,
        } | libc::O_NOFOLLOW
            | libc::O_CLOEXEC;
        // SAFETY: a valid descriptor and C string; the mode is read only with O_CREAT.
        fd_result(unsafe {
            libc::openat(dir.as_raw_fd(), n.as_ptr(), flags, 0o644 as libc::c_uint)
        })
    }

    pub fn rename_in(dir: &File, from: &str, to: &str) -> io::Result<()> {
        let (f, t) = (c(from)?, c(to)?);
        // SAFETY: valid descriptors and C strings.
        let r = unsafe { libc::renameat(dir.as_raw_fd(), f.as_ptr(), dir.as_raw_fd(), t.as_ptr()) };
        if r == 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    }

    pub fn remove_in(dir: &File, name: &str) -> io::Result<()> {
        let n = c(name)?;
        // SAFETY: a valid descriptor and C string.
        let r = unsafe { libc::unlinkat(dir.as_raw_fd(), n.as_ptr(), 0) };
        if r == 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    }

    pub fn same_file(a: &Metadata, b: &Metadata) -> bool {
        a.dev() == b.dev() && a.ino() == b.ino()
    }

    /// Where the kernel says an open folder is now (Linux: its /proc link).
    pub fn current_path(dir: &File) -> Option<PathBuf> {
        std::fs::read_link(format!("/proc/self/fd/{}", dir.as_raw_fd())).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A writer that fails after `room` bytes, as a full disk does.
    struct FullAfter<'d> {
        inner: Staged<'d>,
        room: usize,
    }

    impl Write for FullAfter<'_> {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            if self.room == 0 {
                return Err(io::Error::from_raw_os_error(28)); // ENOSPC
            }
            let n = buf.len().min(self.room);
            self.room -= n;
            self.inner.write(&buf[..n])
        }
        fn flush(&mut self) -> io::Result<()> {
            self.inner.flush()
        }
    }

    fn names(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(dir)
            .expect("listing")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    /// A write that fails half-way leaves the previous file whole and no temporary file.
    #[test]
    fn a_failed_write_leaves_the_previous_file() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let d = RunDir::open(tmp.path(), true).expect("open");
        d.write("summary.json", b"previous\n").expect("first write");
        let mut w = FullAfter {
            inner: d.stage("summary.json").expect("stage"),
            room: 1000,
        };
        let e = w.write_all(&[b'x'; 5000]).expect_err("a full disk");
        drop(w);
        assert_eq!(e.raw_os_error(), Some(28));
        assert_eq!(
            std::fs::read(tmp.path().join("summary.json")).expect("read"),
            b"previous\n"
        );
        assert_eq!(names(tmp.path()), ["summary.json"]);
    }

    /// The folder renamed away and a symlink put in its place: files go to the folder that
    /// was opened, not through the link.
    #[test]
    fn a_symlink_swapped_in_later_is_not_followed() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let (out, moved, victim) = (
            tmp.path().join("out"),
            tmp.path().join("moved"),
            tmp.path().join("victim"),
        );
        std::fs::create_dir(&victim).expect("victim");
        std::fs::write(victim.join("summary.json"), "theirs").expect("theirs");
        let d = RunDir::open(&out, false).expect("open");
        std::fs::rename(&out, &moved).expect("move");
        std::os::unix::fs::symlink(&victim, &out).expect("symlink");
        assert!(!d.still_at_path());
        let written = d.write("summary.json", b"ours").expect("write");
        assert_eq!(
            std::fs::read_to_string(victim.join("summary.json")).expect("read"),
            "theirs"
        );
        assert_eq!(
            std::fs::read_to_string(moved.join("summary.json")).expect("read"),
            "ours"
        );
        assert_eq!(written, moved.join("summary.json"));
    }

    /// A folder refused or left unused is not left behind; a used one stays.
    #[test]
    fn an_unused_new_folder_is_removed() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let out = tmp.path().join("a/b");
        drop(RunDir::open(&out, false).expect("open"));
        assert!(!out.exists());
        let d = RunDir::open(&out, false).expect("open");
        d.write("x", b"1").expect("write");
        drop(d);
        assert!(out.join("x").exists());
        let e = RunDir::open(&out, false).expect_err("not empty");
        assert!(matches!(e, RunDirError::NotEmpty(_)), "{e}");
        assert!(d_stage_refuses_paths(&out));
    }

    fn d_stage_refuses_paths(out: &Path) -> bool {
        let d = RunDir::open(out, true).expect("open");
        d.stage("../escape").is_err() && d.stage("..").is_err()
    }
}
