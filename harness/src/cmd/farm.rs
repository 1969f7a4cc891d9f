//! `pocketperf farm run --devices devices.toml --suite ci/nightly.toml --out results/`: the
//! nightly device farm (see [`crate::farm`]). Exit 0 when every device completed and every
//! gate passed; 1 when a gate found a regression or a run was INVALID; 2 when a device failed
//! after its retries or nothing could start.
//!
//! `pocketperf farm history RESULTS/ [--out DIR] [--metric M]…`: the nights of a results root
//! as `history.html` and `history.csv` (see [`crate::farm::history`]).

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::{Args, Subcommand};
use pocketperf_reports::gate::GateRules;

use crate::farm::history;
use crate::farm::inventory::Inventory;
use crate::farm::suite::{ModelChoice, Suite};
use crate::farm::{FarmOptions, run_farm, validate};
use crate::model_store;

#[derive(Subcommand, Debug)]
pub enum FarmCmd {
    /// Run the suite on every device in parallel, pull the results, compare and gate them.
    Run(FarmRunArgs),
    /// Write history.html and history.csv: per device, step and metric, every night's value
    /// with its interval, verdict and baseline night.
    History(FarmHistoryArgs),
}

#[derive(Args, Debug)]
pub struct FarmHistoryArgs {
    /// Results root of `farm run` (one dated directory per night).
    pub results: PathBuf,
    /// Directory for history.html and history.csv (default: the results root).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Metrics to show, as the run reports name them (repeatable or comma-separated;
    /// default: those of tpot_p50, ttft_p50, latency_p50, query_tokens_per_s_median and
    /// j_per_token that the nights have). A named metric no night has is an error.
    #[arg(long = "metric", value_delimiter = ',')]
    pub metrics: Vec<String>,
}

#[derive(Args, Debug)]
pub struct FarmRunArgs {
    /// Device inventory (see ci/devices.example.toml).
    #[arg(long)]
    pub devices: PathBuf,
    /// Suite to run on each device (see ci/nightly.toml).
    #[arg(long)]
    pub suite: PathBuf,
    /// Results root; each run creates a dated UTC directory inside.
    #[arg(long, default_value = "results")]
    pub out: PathBuf,
    /// Binary pushed to devices that name none (default: this executable).
    #[arg(long)]
    pub binary: Option<PathBuf>,
    /// Model pushed to every device (default: the suite's, else the reference model).
    #[arg(long)]
    pub model: Option<PathBuf>,
    /// Gate rules against the previous run (default: the suite's, else the built-in rules).
    #[arg(long)]
    pub rules: Option<PathBuf>,
    /// Device whose column is the baseline of the comparisons (default: the first).
    #[arg(long)]
    pub baseline_device: Option<String>,
}

pub fn farm_cmd(cmd: &FarmCmd) -> Result<i32> {
    match cmd {
        FarmCmd::Run(a) => farm_run(a),
        FarmCmd::History(a) => farm_history(a),
    }
}

fn farm_history(a: &FarmHistoryArgs) -> Result<i32> {
    let h = history::collect(
        &a.results,
        (!a.metrics.is_empty()).then_some(a.metrics.as_slice()),
    )?;
    let out = a.out.as_ref().unwrap_or(&a.results);
    let files = history::write(&h, &a.results, out)?;
    println!(
        "{} nights, {} figures, {} not read",
        h.nights.len(),
        h.rows.len(),
        h.unreadable.len()
    );
    for u in &h.unreadable {
        println!("not read: {}: {}", u.path.display(), u.reason);
    }
    for f in files {
        println!("wrote {}", f.display());
    }
    Ok(0)
}

fn farm_run(a: &FarmRunArgs) -> Result<i32> {
    let inventory = Inventory::from_file(&a.devices)?;
    let suite = Suite::from_file(&a.suite)?;
    let model = match (&a.model, &suite.model) {
        (Some(m), _) => model_store::resolve_model(Some(m))?,
        (None, ModelChoice::File(m)) => model_store::resolve_model(Some(m))?,
        (None, ModelChoice::Reference) => model_store::resolve_model(None)?,
    };
    let rules = match a.rules.as_ref().or(suite.gate_rules.as_ref()) {
        Some(p) => GateRules::from_toml_file(p)?,
        None => GateRules::default(),
    };
    let binary = match &a.binary {
        Some(b) => b.clone(),
        None => std::env::current_exe().context("locating this executable to push it")?,
    };
    if let Some(b) = &a.baseline_device
        && !inventory.devices.iter().any(|d| &d.name == b)
    {
        anyhow::bail!(
            "--baseline-device {b}: no such device in {}",
            a.devices.display()
        );
    }
    let opts = FarmOptions {
        inventory,
        suite,
        out: a.out.clone(),
        binary,
        model,
        rules,
        baseline_device: a.baseline_device.clone(),
    };
    validate(&opts)?;
    // One farm at a time per results directory (each run is a new subdirectory of it).
    let _lock = crate::dir_lock::DirLock::create_and_lock(&a.out)?;
    let pb = crate::progress::spinner(&format!(
        "farm: {} devices × {} steps",
        opts.inventory.devices.len(),
        opts.suite.steps.len()
    ));
    let report = run_farm(&opts, &|msg: &str| pb.println(msg))?;
    pb.finish_and_clear();
    print!("{}", report.to_markdown());
    println!("\nresults in {}", a.out.join(&report.run).display());
    Ok(report.exit_code)
}
