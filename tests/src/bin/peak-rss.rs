//! `peak-rss REPORT KILL_SECS KILL_KIB -- PROGRAM ARGS…`: run PROGRAM to its end (or kill it
//! past KILL_SECS seconds or KILL_KIB KiB resident) and write `EXIT PEAK_KIB KILLED` to REPORT.
//!
//! Why a process of its own: the peak RSS `wait4` reports for a child includes the high-water
//! mark of the memory it was spawned from (Linux carries it over at `exec`, and Rust's
//! `Command` spawns with `CLONE_VM`). Spawned from a test process of hundreds of MB, every
//! child would "peak" at the test's size. This launcher is small, so the peak it reports is
//! the program's own to within a few MB.

use std::process::{Command, ExitCode};
use std::time::{Duration, Instant};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (report, kill_secs, kill_kib, program, rest) = match args.as_slice() {
        [report, secs, kib, dash, program, rest @ ..] if dash == "--" => {
            match (secs.parse::<u64>(), kib.parse::<u64>()) {
                (Ok(s), Ok(k)) => (report, s, k, program, rest),
                _ => return usage(),
            }
        }
        _ => return usage(),
    };
    let t = Instant::now();
    let child = match Command::new(program).args(rest).spawn() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("peak-rss: cannot run {program}: {e}");
            return ExitCode::from(2);
        }
    };
    let pid = child.id() as libc::pid_t;
    let mut killed = "-";
    let (status, usage) = loop {
        let mut status = 0;
        // SAFETY: a zeroed rusage is a valid value for wait4 to fill.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: pid is our child, not yet reaped; both pointers are valid for the call.
        let r = unsafe { libc::wait4(pid, &mut status, libc::WNOHANG, &mut usage) };
        if r == pid {
            break (status, usage);
        }
        if r < 0 {
            eprintln!("peak-rss: wait4: {}", std::io::Error::last_os_error());
            return ExitCode::from(2);
        }
        let rss_kib = std::fs::read_to_string(format!("/proc/{pid}/status"))
            .ok()
            .and_then(|s| {
                s.lines()
                    .find(|l| l.starts_with("VmRSS:"))
                    .and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
            })
            .unwrap_or(0);
        if killed == "-" && (t.elapsed() > Duration::from_secs(kill_secs) || rss_kib > kill_kib) {
            killed = if rss_kib > kill_kib { "rss" } else { "time" };
            // SAFETY: signalling our own child.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    // The child was reaped by wait4 above; `Child` is only dropped.
    drop(child);
    let code = if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else {
        128 + libc::WTERMSIG(status)
    };
    let line = format!("{code} {} {killed}\n", usage.ru_maxrss);
    match std::fs::write(report, line) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("peak-rss: cannot write {report}: {e}");
            ExitCode::from(2)
        }
    }
}

fn usage() -> ExitCode {
    eprintln!("usage: peak-rss REPORT KILL_SECS KILL_KIB -- PROGRAM ARGS…");
    ExitCode::from(2)
}
