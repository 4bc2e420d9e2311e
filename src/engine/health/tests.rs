//! The health readings against loads whose size is known: CPU burnt by a thread, measured
//! against the kernel's own count for that thread over the same interval (`getrusage`
//! `RUSAGE_THREAD`, not wall time: the tests run on busy cores); memory and descriptors of a
//! forked child that maps and touches a known number of MiB and opens a known number of
//! descriptors, read before and after so the test process's other threads cannot move them.

use super::*;
use std::hint::black_box;
use std::time::{Duration, Instant};

/// The kernel's CPU count of the calling thread (user + system), µs: the reference.
fn rusage_thread_us() -> u64 {
    // SAFETY: an all-zero rusage is valid; getrusage writes it for the call's duration.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `ru` is a valid, writable rusage.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut ru) };
    assert_eq!(rc, 0, "getrusage(RUSAGE_THREAD)");
    let us = |t: libc::timeval| t.tv_sec as u64 * 1_000_000 + t.tv_usec as u64;
    us(ru.ru_utime) + us(ru.ru_stime)
}

/// Spin until the kernel counts `us` more CPU for this thread.
fn burn(us: u64) {
    let start = rusage_thread_us();
    let mut x = 0u64;
    while rusage_thread_us() - start < us {
        for i in 0..20_000u64 {
            x = black_box(x.wrapping_add(i * i));
        }
    }
    black_box(x);
}

/// The kernel's two counts of a thread differ only in when they were last brought up to
/// date: `getrusage` reads the count as of the thread's last scheduler tick (up to 10 ms at
/// 100 Hz), the thread clock up to now. So the readings agree within a tick at each end.
const TICKS_APART_US: u64 = 2 * 10_000;

/// 300 ms burnt, then 100 ms asleep: the thread clock counts the CPU the kernel counted for
/// the thread over the same interval (within a tick at each end), and none of the sleep.
#[test]
fn thread_cpu_time_is_the_kernels_count_for_the_thread_not_wall_time() {
    const BURN_US: u64 = 300_000;
    const SLEEP: Duration = Duration::from_millis(100);
    let (cpu, reference, wall) = std::thread::spawn(|| {
        let w0 = Instant::now();
        let (c0, r0) = (thread_cpu_us().expect("thread clock"), rusage_thread_us());
        burn(BURN_US);
        std::thread::sleep(SLEEP);
        let (c1, r1) = (thread_cpu_us().expect("thread clock"), rusage_thread_us());
        (c1 - c0, r1 - r0, w0.elapsed())
    })
    .join()
    .expect("the burning thread");
    eprintln!("thread clock {cpu} µs, kernel's count {reference} µs, wall {wall:?}");
    assert!(reference >= BURN_US, "burnt {reference} µs");
    assert!(
        cpu.abs_diff(reference) <= TICKS_APART_US,
        "thread clock {cpu} µs against the kernel's {reference} µs"
    );
    // A thread cannot run while asleep: the clock is CPU, never wall time.
    let awake = wall.saturating_sub(SLEEP).as_micros() as u64;
    assert!(cpu <= awake, "{cpu} µs of CPU in {awake} µs awake");
}

/// Another thread's CPU is not this thread's: a thread blocked while its sibling burns
/// 200 ms reads (next to) nothing.
#[test]
fn a_blocked_thread_reads_none_of_its_siblings_cpu() {
    const BURN_US: u64 = 200_000;
    let blocked = std::thread::spawn(|| {
        let c0 = thread_cpu_us().expect("thread clock");
        let sibling = std::thread::spawn(|| {
            let r0 = rusage_thread_us();
            burn(BURN_US);
            rusage_thread_us() - r0
        });
        let burnt = sibling.join().expect("the sibling");
        (thread_cpu_us().expect("thread clock") - c0, burnt)
    });
    let (cpu, burnt) = blocked.join().expect("the blocked thread");
    assert!(burnt >= BURN_US);
    // Spawning and joining take well under a millisecond of the blocked thread's own CPU.
    assert!(
        cpu < 5_000,
        "{cpu} µs counted while the sibling burnt {burnt} µs"
    );
}

/// A forked child's known load, held between two reports to the parent.
const LOAD_MIB: usize = 64;
const LOAD_FDS: u64 = 37;

/// Block until one byte arrives on `fd`; false at EOF or error.
fn await_byte(fd: libc::c_int) -> bool {
    let mut b = 0u8;
    // SAFETY: `b` is one writable byte.
    unsafe { libc::read(fd, (&mut b as *mut u8).cast(), 1) == 1 }
}

fn send_byte(fd: libc::c_int) -> bool {
    let b = 1u8;
    // SAFETY: `b` is one readable byte.
    unsafe { libc::write(fd, (&b as *const u8).cast(), 1) == 1 }
}

/// Map `len` bytes of private anonymous memory and write every page; null on failure.
///
/// # Safety
/// Only system calls: safe to run in a child forked from a threaded process.
unsafe fn map_and_touch(len: usize) -> *mut libc::c_void {
    let p = libc::mmap(
        std::ptr::null_mut(),
        len,
        libc::PROT_READ | libc::PROT_WRITE,
        libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
        -1,
        0,
    );
    if p == libc::MAP_FAILED {
        return std::ptr::null_mut();
    }
    let page = libc::sysconf(libc::_SC_PAGESIZE) as usize;
    for off in (0..len).step_by(page) {
        std::ptr::write_volatile(p.cast::<u8>().add(off), 1);
    }
    p
}

/// The child: runs its code once on a small load (so the pages of that code are resident
/// before the baseline), reports in, waits; maps [`LOAD_MIB`] MiB and writes every page,
/// opens [`LOAD_FDS`] descriptors; reports in, waits, exits. Only system calls after the
/// fork (the test process has other threads, whose locks the child must not need).
fn child(report: libc::c_int, go: libc::c_int, dev_null: &std::ffi::CStr) -> ! {
    // SAFETY: system calls on valid arguments; `_exit` does not return.
    unsafe {
        let warm = map_and_touch(1 << 16);
        let fd = libc::open(dev_null.as_ptr(), libc::O_RDONLY);
        if warm.is_null() || fd < 0 {
            libc::_exit(2);
        }
        libc::munmap(warm, 1 << 16);
        libc::close(fd);
        if !send_byte(report) || !await_byte(go) {
            libc::_exit(1);
        }
        if map_and_touch(LOAD_MIB << 20).is_null() {
            libc::_exit(2);
        }
        for _ in 0..LOAD_FDS {
            if libc::open(dev_null.as_ptr(), libc::O_RDONLY) < 0 {
                libc::_exit(3);
            }
        }
        if !send_byte(report) || !await_byte(go) {
            libc::_exit(4);
        }
        libc::_exit(0)
    }
}

/// A child maps and touches 64 MiB and opens 37 descriptors: the readings of its process
/// grow by exactly 37 descriptors and by the 64 MiB (within 1 MiB either way: the kernel
/// batches its RSS counts, and the child's stack and code may fault in a few more pages).
#[test]
fn rss_and_descriptors_grow_by_a_childs_known_load() {
    let dev_null = std::ffi::CString::new("/dev/null").expect("no NUL");
    let (mut to_child, mut from_child) = ([0; 2], [0; 2]);
    // SAFETY: each array has room for the two descriptors pipe2 writes.
    unsafe {
        assert_eq!(libc::pipe2(to_child.as_mut_ptr(), libc::O_CLOEXEC), 0);
        assert_eq!(libc::pipe2(from_child.as_mut_ptr(), libc::O_CLOEXEC), 0);
    }
    // SAFETY: the child runs only system calls (see `child`) and never returns.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork");
    if pid == 0 {
        child(from_child[1], to_child[0], &dev_null);
    }
    // SAFETY: the parent's copies of the child's ends, closed once.
    unsafe {
        libc::close(to_child[0]);
        libc::close(from_child[1]);
    }
    let (report, go) = (from_child[0], to_child[1]);
    let pid_u = pid as u32;

    assert!(await_byte(report), "the child reports in");
    let (rss0, fds0) = (rss_bytes_of(pid_u), open_fds_of(pid_u));
    assert!(send_byte(go));
    assert!(await_byte(report), "the child holds its load");
    let (rss1, fds1) = (rss_bytes_of(pid_u), open_fds_of(pid_u));
    assert!(send_byte(go));
    let mut status = 0;
    // SAFETY: `pid` is this test's child; `status` is writable.
    let waited = unsafe { libc::waitpid(pid, &mut status, 0) };
    // SAFETY: the parent's ends, closed once.
    unsafe {
        libc::close(report);
        libc::close(go);
    }
    assert_eq!(waited, pid);
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "the child failed: status {status:#x}"
    );

    let (rss0, rss1) = (rss0.expect("rss read"), rss1.expect("rss read"));
    let (fds0, fds1) = (fds0.expect("fds read"), fds1.expect("fds read"));
    eprintln!("child: rss {rss0} -> {rss1} bytes, fds {fds0} -> {fds1}");
    assert_eq!(fds1 - fds0, LOAD_FDS);
    let mib = 1u64 << 20;
    let load = LOAD_MIB as u64 * mib;
    let grown = rss1.saturating_sub(rss0);
    assert!(
        grown + mib >= load && grown <= load + mib,
        "rss grew {grown} bytes for a {load}-byte load"
    );
}

/// The process's own readings are there on Linux (the engine reads these each second).
#[test]
fn the_process_readings_are_there() {
    let _s = std::net::UdpSocket::bind("127.0.0.1:0").expect("bind");
    assert!(rss_bytes().expect("rss") > 0);
    assert!(open_fds().expect("fds") >= 1, "the socket at least");
}
