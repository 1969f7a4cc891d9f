//! Runs that fill a result directory, one module per kind of run; `main` picks one from
//! `pocketperf run --scenario`.
//!
//! - [`perf`] — SingleStream, Offline and Server through the scenario engine;
//! - [`dialogue`] — scripted multi-turn chats with energy per dialogue.
//!
//! [`run`] is the one entry: it repeats the chosen run `--repeat` times (replicates for the
//! gate's run-level statistics, `reports::gate::replicates`).

pub mod dialogue;
pub mod perf;

use anyhow::Result;

use crate::cmd::run::{RunArgs, ScenarioArg};

/// `pocketperf run`: one run into `--out`, or with `--repeat N` (N ≥ 2) N runs into
/// `--out`/run-1 … run-N, one after the other (`--out` refused when it holds anything, unless
/// `--force`). The exit code is the worst of the runs (0 ok,
/// 1 INVALID); an error stops the series, keeping the runs already written.
pub fn run(a: &mut RunArgs) -> Result<i32> {
    let once = |a: &RunArgs| match a.scenario {
        ScenarioArg::Dialogue => dialogue::run(a),
        _ => perf::run(a),
    };
    if a.repeat <= 1 {
        return once(a);
    }
    let root = a.out.clone();
    // The series' directory is claimed as a whole (refused when it holds anything, cleared
    // with --force), so no run-N of an earlier, longer series stays beside the new ones.
    let _lock = crate::dir_lock::DirLock::claim(&root, a.force)?;
    let mut worst = 0;
    for i in 1..=a.repeat {
        a.out = root.join(format!("run-{i}"));
        eprintln!("run {i}/{} → {}", a.repeat, a.out.display());
        worst = worst.max(once(a)?);
    }
    Ok(worst)
}
