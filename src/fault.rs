//! Fault points: named places on the build's path where the test suite can
//! stop the process, to kill it there with SIGKILL and check what it left.
//!
//! Off unless the environment asks; a point costs one atomic load then.
//!
//! - `TESSERA_FAULT_PAUSE=<point>` or `<point>#<n>`: the n-th time (default
//!   the first) the process reaches `<point>`, the thread that reached it
//!   writes `tessera: paused at fault point <point>` on stderr and sleeps
//!   forever; the test then kills the process. Other threads go on until
//!   they need the paused one, as they would around a real crash.
//! - `TESSERA_FAULT_TRACE=<file>`: appends the name of every point reached
//!   to `<file>`, one per line, so a test can check that the points it kills
//!   at are still on the path (docs/RELIABILITY.md lists them).
//!
//! Hidden from `--help` on purpose: these variables are for the test suite
//! and for anyone reproducing a crash, not for normal use.

use std::io::Write;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

/// The variable that pauses the process at a point.
pub const PAUSE_ENV: &str = "TESSERA_FAULT_PAUSE";
/// The variable that records the points reached.
pub const TRACE_ENV: &str = "TESSERA_FAULT_TRACE";
/// What a paused process writes on stderr, followed by the point's name.
pub const PAUSED_MESSAGE: &str = "tessera: paused at fault point ";

struct Config {
    pause: Option<(String, u64)>,
    trace: Option<std::path::PathBuf>,
    hits: AtomicU64,
}

fn config() -> Option<&'static Config> {
    static CONFIG: OnceLock<Option<Config>> = OnceLock::new();
    CONFIG
        .get_or_init(|| {
            let pause = std::env::var(PAUSE_ENV)
                .ok()
                .filter(|v| !v.is_empty())
                .map(|v| match v.split_once('#') {
                    Some((name, n)) => (name.to_string(), n.parse().unwrap_or(1).max(1)),
                    None => (v, 1),
                });
            let trace = std::env::var_os(TRACE_ENV)
                .filter(|v| !v.is_empty())
                .map(std::path::PathBuf::from);
            (pause.is_some() || trace.is_some()).then(|| Config {
                pause,
                trace,
                hits: AtomicU64::new(0),
            })
        })
        .as_ref()
}

/// Whether any fault variable is set (to skip building point names).
pub fn enabled() -> bool {
    config().is_some()
}

/// The process reaches the point `name`.
pub fn point(name: &str) {
    let Some(c) = config() else {
        return;
    };
    if let Some(path) = &c.trace
        && let Ok(mut f) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
    {
        // One write per line: with O_APPEND a single small write lands
        // whole, while `writeln!` writes the name and the newline apart, and
        // two threads reaching points at once interleaved them.
        let _ = f.write_all(format!("{name}\n").as_bytes());
    }
    if let Some((target, nth)) = &c.pause
        && target == name
        && c.hits.fetch_add(1, Ordering::SeqCst) + 1 == *nth
    {
        let mut err = std::io::stderr().lock();
        let _ = writeln!(err, "{PAUSED_MESSAGE}{name}");
        let _ = err.flush();
        drop(err);
        loop {
            std::thread::sleep(std::time::Duration::from_secs(3600));
        }
    }
}

/// [`point`] with a name built only when faults are enabled.
pub fn point_with(name: impl FnOnce() -> String) {
    if enabled() {
        point(&name());
    }
}
