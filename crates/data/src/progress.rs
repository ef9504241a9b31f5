//! Progress for the long steps a person waits for (start-up features and embedding, training,
//! the evaluation): an indicatif bar when stderr is a terminal, otherwise a `tracing` line
//! every few seconds (and at the end), so CI and service logs show progress too.
//!
//! `PM_PROGRESS=log` forces log lines on a terminal, `PM_PROGRESS=off` silences both. Progress
//! goes to stderr (bars) or the log (lines) only, never into result files. Log output written
//! through [`LogWriter`] hides the bars for the moment of the write, so the two do not garble
//! each other on one terminal.

use std::io::{IsTerminal, Write};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use indicatif::{MultiProgress, ProgressBar, ProgressStyle};

/// Every bar of the process, so log lines can be written around them.
fn bars() -> &'static MultiProgress {
    static BARS: OnceLock<MultiProgress> = OnceLock::new();
    BARS.get_or_init(MultiProgress::new)
}

/// A `tracing_subscriber` writer (`fmt().with_writer(LogWriter::Stderr)`) that suspends the
/// progress bars while a log line is written.
#[derive(Debug, Clone, Copy)]
pub enum LogWriter {
    Stdout,
    Stderr,
}

impl Write for LogWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        bars().suspend(|| match self {
            LogWriter::Stdout => std::io::stdout().write_all(buf),
            LogWriter::Stderr => std::io::stderr().write_all(buf),
        })?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            LogWriter::Stdout => std::io::stdout().flush(),
            LogWriter::Stderr => std::io::stderr().flush(),
        }
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for LogWriter {
    type Writer = LogWriter;

    fn make_writer(&'a self) -> Self::Writer {
        *self
    }
}

/// How often a log line is written when stderr is not a terminal.
pub const LOG_EVERY: Duration = Duration::from_secs(5);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Bar,
    Log,
    Off,
}

fn mode() -> Mode {
    match std::env::var("PM_PROGRESS").as_deref() {
        Ok("off") => Mode::Off,
        Ok("log") => Mode::Log,
        Ok("bar") => Mode::Bar,
        _ if std::io::stderr().is_terminal() => Mode::Bar,
        _ => Mode::Log,
    }
}

/// One long step with a known number of units. Cheap to update from many threads.
pub struct Progress {
    task: String,
    unit: &'static str,
    total: u64,
    done: AtomicU64,
    start: Instant,
    bar: Option<ProgressBar>,
    log: bool,
    /// Last log line time and the current message.
    state: Mutex<(Instant, String)>,
}

impl Progress {
    /// A step of `total` units (`unit` names them in the log: "images", "batches", …).
    pub fn new(task: impl Into<String>, total: u64, unit: &'static str) -> Self {
        let task = task.into();
        let mode = mode();
        let bar = (mode == Mode::Bar).then(|| {
            let b = bars().add(ProgressBar::new(total));
            b.set_style(
                ProgressStyle::with_template(
                    "{prefix:.bold} [{bar:30}] {pos}/{len} {msg} ({elapsed}, eta {eta})",
                )
                .unwrap_or_else(|_| ProgressStyle::default_bar())
                .progress_chars("=> "),
            );
            b.set_prefix(task.clone());
            b
        });
        let now = Instant::now();
        if mode == Mode::Log {
            tracing::info!(task = %task, total, unit, "started");
        }
        Progress {
            task,
            unit,
            total,
            done: AtomicU64::new(0),
            start: now,
            bar,
            log: mode == Mode::Log,
            state: Mutex::new((now, String::new())),
        }
    }

    /// `n` more units done.
    pub fn inc(&self, n: u64) {
        let done = self.done.fetch_add(n, Ordering::Relaxed) + n;
        if let Some(b) = &self.bar {
            b.inc(n);
        }
        if self.log {
            let mut st = self.state.lock().unwrap();
            if st.0.elapsed() >= LOG_EVERY {
                st.0 = Instant::now();
                self.line(done, &st.1);
            }
        }
    }

    /// Replace the message shown with the count (e.g. the current loss).
    pub fn set_message(&self, msg: impl Into<String>) {
        let msg = msg.into();
        if let Some(b) = &self.bar {
            b.set_message(msg.clone());
        }
        self.state.lock().unwrap().1 = msg;
    }

    /// Print a line above the bar (or log it), e.g. a finished epoch's summary.
    pub fn println(&self, line: impl AsRef<str>) {
        match &self.bar {
            Some(b) => b.println(line.as_ref()),
            None if self.log => tracing::info!(task = %self.task, "{}", line.as_ref()),
            None => {}
        }
    }

    fn line(&self, done: u64, msg: &str) {
        let secs = self.start.elapsed().as_secs_f64();
        let pct = if self.total == 0 {
            100.0
        } else {
            100.0 * done as f64 / self.total as f64
        };
        let eta = if done > 0 && done < self.total {
            secs * (self.total - done) as f64 / done as f64
        } else {
            0.0
        };
        tracing::info!(
            task = %self.task,
            done,
            total = self.total,
            unit = self.unit,
            pct = format_args!("{pct:.1}"),
            secs = format_args!("{secs:.1}"),
            eta_secs = format_args!("{eta:.0}"),
            "{}",
            if msg.is_empty() { "progress" } else { msg }
        );
    }

    /// Done: clear the bar, log the final count and time. Returns the elapsed seconds.
    pub fn finish(&self) -> f64 {
        let secs = self.start.elapsed().as_secs_f64();
        if let Some(b) = &self.bar {
            b.finish_and_clear();
        }
        if self.log {
            let msg = self.state.lock().unwrap().1.clone();
            self.line(self.done.load(Ordering::Relaxed), &msg);
        }
        secs
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        if let Some(b) = &self.bar {
            if !b.is_finished() {
                b.finish_and_clear();
            }
        }
    }
}

/// A message-only step of unknown length (a spinner on a terminal, one log line otherwise),
/// for single long calls such as the embedding.
pub struct Spinner {
    start: Instant,
    bar: Option<ProgressBar>,
}

impl Spinner {
    pub fn new(task: impl Into<String>) -> Self {
        let task = task.into();
        let mode = mode();
        let bar = (mode == Mode::Bar).then(|| {
            let b = bars().add(ProgressBar::new_spinner());
            b.set_style(
                ProgressStyle::with_template("{spinner} {prefix:.bold} ({elapsed})")
                    .unwrap_or_else(|_| ProgressStyle::default_spinner()),
            );
            b.set_prefix(task.clone());
            b.enable_steady_tick(Duration::from_millis(120));
            b
        });
        if mode == Mode::Log {
            tracing::info!(task = %task, "started");
        }
        Spinner {
            start: Instant::now(),
            bar,
        }
    }

    /// Done; returns the elapsed seconds (the caller logs its own summary).
    pub fn finish(&self) -> f64 {
        if let Some(b) = &self.bar {
            b.finish_and_clear();
        }
        self.start.elapsed().as_secs_f64()
    }
}

impl Drop for Spinner {
    fn drop(&mut self) {
        if let Some(b) = &self.bar {
            if !b.is_finished() {
                b.finish_and_clear();
            }
        }
    }
}

/// Give the heap pages freed by a finished start-up phase back to the operating system. glibc
/// keeps freed memory in its per-thread arenas; after the embedding of a 1,000,000-item gallery
/// (a 0.8 GB factor and its temporaries, freed) that would stay counted in the server's RSS
/// for the rest of its life.
pub fn release_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only returns free pages of glibc's heap to the kernel; it touches no
    // live allocation and is safe to call from any thread at any time.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Log lines (and progress bars) of a command-line tool to stderr, its results going to
/// stdout: colours only on a terminal, `RUST_LOG` or `info`.
pub fn log_to_stderr() {
    tracing_subscriber::fmt()
        .with_writer(LogWriter::Stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .init();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_from_many_threads_and_finishes() {
        let p = Progress::new("test", 1000, "units");
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for _ in 0..250 {
                        p.inc(1);
                    }
                });
            }
        });
        p.set_message("done");
        assert_eq!(p.done.load(Ordering::Relaxed), 1000);
        assert!(p.finish() >= 0.0);
        assert!(Spinner::new("spin").finish() >= 0.0);
    }
}
