//! Build progress: indicatif bars on a terminal, plain lines otherwise.

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::IsTerminal;
use std::sync::Mutex;
use std::time::Instant;

/// How progress is shown.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ProgressMode {
    /// Bars when stderr is a terminal, plain lines otherwise.
    #[default]
    Auto,
    /// Plain lines on stderr.
    Plain,
    /// Nothing.
    Quiet,
}

/// One stage's progress (chunks done out of a total, plus rows and bytes).
pub struct Stage {
    bar: Option<ProgressBar>,
    name: &'static str,
    total: u64,
    plain: bool,
    state: Mutex<(u64, u64, u64)>,
    started: Instant,
}

/// The set of stage displays of one build.
pub struct Progress {
    multi: Option<MultiProgress>,
    plain: bool,
}

impl Progress {
    /// Progress shown according to `mode`.
    pub fn new(mode: ProgressMode) -> Self {
        let tty = std::io::stderr().is_terminal();
        match mode {
            ProgressMode::Auto if tty => Progress {
                multi: Some(MultiProgress::with_draw_target(ProgressDrawTarget::stderr())),
                plain: false,
            },
            ProgressMode::Auto | ProgressMode::Plain => Progress {
                multi: None,
                plain: true,
            },
            ProgressMode::Quiet => Progress {
                multi: None,
                plain: false,
            },
        }
    }

    /// Prints a line (above the bars when there are any).
    pub fn line(&self, msg: &str) {
        if let Some(m) = &self.multi {
            let _ = m.println(msg);
        } else if self.plain {
            eprintln!("{msg}");
        }
    }

    /// Starts a stage of `total` chunks.
    pub fn stage(&self, name: &'static str, total: u64) -> Stage {
        let bar = self.multi.as_ref().map(|m| {
            let b = m.add(ProgressBar::new(total));
            let style = ProgressStyle::with_template(
                "{prefix:>8} [{bar:30}] {pos}/{len} chunks  {msg} ({elapsed})",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> ");
            b.set_style(style);
            b.set_prefix(name);
            b
        });
        if self.plain {
            eprintln!("{name}: {total} chunk(s)");
        }
        Stage {
            bar,
            name,
            total,
            plain: self.plain,
            state: Mutex::new((0, 0, 0)),
            started: Instant::now(),
        }
    }
}

impl Stage {
    /// Adds rows and bytes processed (called from worker threads).
    pub fn advance(&self, rows: u64, bytes: u64) {
        crate::fault::point_with(|| format!("stage.{}.batch", self.name));
        if let Ok(mut s) = self.state.lock() {
            s.1 += rows;
            s.2 += bytes;
            if let Some(b) = &self.bar {
                b.set_message(self.message(s.1, s.2));
            }
        }
    }

    fn message(&self, rows: u64, bytes: u64) -> String {
        let secs = self.started.elapsed().as_secs_f64().max(1e-3);
        if bytes > 0 {
            format!(
                "{rows} rows, {}, {}/s",
                crate::cache::format_bytes(bytes),
                crate::cache::format_bytes((bytes as f64 / secs) as u64)
            )
        } else {
            format!("{rows} rows")
        }
    }

    /// Marks one chunk done.
    pub fn chunk_done(&self) {
        crate::fault::point_with(|| format!("stage.{}.chunk", self.name));
        if let Ok(mut s) = self.state.lock() {
            s.0 += 1;
            if let Some(b) = &self.bar {
                b.set_position(s.0);
            }
            if self.plain {
                eprintln!(
                    "{}: chunk {}/{} done, {}",
                    self.name,
                    s.0,
                    self.total,
                    self.message(s.1, s.2)
                );
            }
        }
    }

    /// Ends the stage.
    pub fn finish(&self) {
        crate::fault::point_with(|| format!("stage.{}.done", self.name));
        if let Some(b) = &self.bar {
            b.finish();
        }
    }
}
