//! `gate --interleave`: the baseline and the candidate binary run the same `pocketperf run`
//! arguments alternately on this machine — A B A B …, `--repeat` times each — into
//! `WORK/baseline/run-i` and `WORK/candidate/run-i`, so both sides see the same drift of the
//! host (other load, temperature, clocks). The gate then reads the two directories as
//! replicates; their start times alternate, so it pairs run i with run i
//! (`pocketperf_reports::gate::replicates`). The same idea as `bench/side-by-side.sh`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{Context, Result, bail};

/// What to run: the two binaries, the shared `run` arguments and the replicate count.
pub struct Interleave<'a> {
    pub baseline_bin: &'a Path,
    pub candidate_bin: &'a Path,
    pub run_args: &'a [String],
    pub repeat: u32,
    pub work: &'a Path,
}

impl Interleave<'_> {
    /// Runs every pair; returns the baseline and candidate directories. A run that ends in an
    /// error (exit 2, or killed) stops the series with that run's command and status; an
    /// INVALID run (exit 1) is kept for the gate to judge.
    pub fn run(&self) -> Result<(PathBuf, PathBuf)> {
        if let Some(bad) = self.run_args.iter().find(|a| {
            *a == "--out"
                || a.starts_with("--out=")
                || *a == "--repeat"
                || a.starts_with("--repeat=")
        }) {
            bail!(
                "gate --interleave: `{bad}` is set by the gate (WORK/baseline|candidate/run-i); leave it out of the run arguments"
            );
        }
        let dirs = (self.work.join("baseline"), self.work.join("candidate"));
        for d in [&dirs.0, &dirs.1] {
            if d.exists() {
                bail!(
                    "{}: already exists; give --work a new directory so no earlier run is mixed in",
                    d.display()
                );
            }
        }
        let total = 2 * self.repeat;
        let started = Instant::now();
        let mut done = 0u32;
        for i in 1..=self.repeat {
            for (side, bin, root) in [
                ("baseline", self.baseline_bin, &dirs.0),
                ("candidate", self.candidate_bin, &dirs.1),
            ] {
                let out = root.join(format!("run-{i}"));
                let eta = if done == 0 {
                    String::new()
                } else {
                    let per = started.elapsed().as_secs_f64() / f64::from(done);
                    format!(", about {:.0} s left", per * f64::from(total - done))
                };
                eprintln!(
                    "interleave: run {}/{total} ({side} {i}/{}){eta}",
                    done + 1,
                    self.repeat
                );
                let status = Command::new(bin)
                    .arg("run")
                    .args(self.run_args)
                    .arg("--out")
                    .arg(&out)
                    .status()
                    .with_context(|| format!("{}: cannot start", bin.display()))?;
                match status.code() {
                    Some(0 | 1) => {}
                    _ => bail!(
                        "{side} run {i}: `{} run {} --out {}` ended with {status}; the runs so far are in {}",
                        bin.display(),
                        self.run_args.join(" "),
                        out.display(),
                        self.work.display()
                    ),
                }
                done += 1;
            }
        }
        Ok(dirs)
    }
}
