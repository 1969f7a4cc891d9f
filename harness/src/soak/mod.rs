//! `pocketperf soak`: a robustness run of hours or days (`docs/SOAK.md`).
//!
//! The runtime runs as a `pocketperf serve` child process, so a crash is an event, not the
//! end of the run. Cycles of the scripted dialogues keep it busy; every probe period a fixed
//! probe set (greedy generations and an MMLU slice scored by log-probability) checks that its
//! outputs stay bit-identical; its memory and the device's temperatures are sampled. Every
//! completed request is appended to an fsynced journal, from which the position of a resumed
//! soak and every figure of the report are derived.
//!
//! - [`clock`] — soak time, continued across resumes;
//! - [`config`] — settings, durations, thresholds, windows;
//! - [`journal`] — the append-only journal;
//! - [`runner`] — the loop, crash and stall handling, resume position;
//! - [`probes`] — the probe set;
//! - [`fit`] — Theil–Sen slope with Sen's interval;
//! - [`analysis`] — the checks;
//! - [`report`] — `robustness.json` and `robustness.html`;
//! - [`telemetry`] — the sampler thread;
//! - [`signal`] — SIGINT/SIGTERM;
//! - [`sut`] — the server: a `pocketperf serve` child, or one over HTTP (`--sut http://…`).

pub mod analysis;
pub mod clock;
pub mod config;
pub mod fit;
pub mod journal;
pub mod probes;
pub mod report;
pub mod runner;
pub mod signal;
pub mod sut;
pub mod telemetry;

pub use analysis::{Analysis, Check, Verdict, analyze};
pub use config::{SoakConfig, Thresholds, Windows, parse_duration};
pub use journal::{JOURNAL_FILE, Record, read_journal};
pub use report::{ROBUSTNESS_HTML, ROBUSTNESS_JSON, write_reports};
pub use runner::{Runner, RunnerParts};

/// Whether `dir` is a soak directory (a journal, no `result.json`): `report` renders its soak
/// report, `gate` refuses it with a message saying so.
pub fn is_soak_dir(dir: &std::path::Path) -> bool {
    dir.join(journal::JOURNAL_FILE).is_file()
        && !dir.join(pocketperf_reports::schema::RESULT_FILE).exists()
}
