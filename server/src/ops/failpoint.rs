//! Crash points for the crash-safety tests: with `PM_CRASH_AT=<name>` in the environment the
//! process aborts when it reaches the point of that name — like `kill -9` there: no
//! destructors, no flushing, no cleanup. Unset (always, outside those tests) a point costs one
//! environment lookup, at steps that take seconds.

/// Abort the process if `PM_CRASH_AT` names this point.
pub fn hit(name: &str) {
    if std::env::var("PM_CRASH_AT").is_ok_and(|v| v == name) {
        eprintln!("PM_CRASH_AT={name}: aborting here (crash-safety test)");
        std::process::abort();
    }
}
