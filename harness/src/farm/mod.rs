//! The device farm: `pocketperf farm run --devices devices.toml --suite ci/nightly.toml
//! --out results/`.
//!
//! Every device of the inventory ([`inventory`]) runs on its own thread: the binary, the
//! model and the suite's files are pushed, each step of the suite ([`suite`]) runs, its
//! result directory and log are pulled. A device that fails or disconnects is retried as the
//! inventory says (completed steps are kept) and then reported; it never blocks the others,
//! since every external command runs under a timeout. Results land in a dated UTC directory
//! `OUT/<YYYY-MM-DDTHHMMSSZ>/<device>/<step>/`, each with its `report.html`; then every step
//! is compared across devices (`compare/<step>.{html,csv,md}`) and each device's step is
//! gated against the same device and step of a baseline night chosen by rule, and checked for
//! drift against a rolling window of passing nights ([`nights`]; `gate/<device>/<step>.
//! {junit.xml,md}`). `farm.json` and `farm.md` summarise it all.
//! The layout is documented in `docs/RESULTS.md`.
//!
//! Size: over 800 lines: the per-device thread (push, run, pull, retries) and the dated
//! result tree with its compare/gate step. The result-tree step is the seam for a split.

pub mod cooldown;
pub mod history;
pub mod inventory;
pub mod names;
pub mod nights;
pub mod shell;
mod slots;
pub mod suite;
pub mod transport;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Instant;

use pocketperf_reports::compare::{ComparedRun, compare_results};
use pocketperf_reports::gate::{GateRules, GateStatus, gate};
use pocketperf_reports::render::{RenderContext, escape_md};
use serde::Serialize;

use inventory::{DEFAULT_ADB_DIR, DeviceSpec, Inventory, TransportSpec};
use suite::Suite;
use transport::{AdbTransport, LocalTransport, Transport, remote_join, tail};

/// Version of the `farm.json` layout.
pub const FARM_SCHEMA_VERSION: u32 = 1;
/// Summary file of a farm run, in its dated directory.
pub const FARM_FILE: &str = "farm.json";

/// Errors of the farm. Device failures during a run are reported in [`FarmReport`], not
/// returned; these name the file, device, step or command concerned.
#[derive(Debug, thiserror::Error)]
pub enum FarmError {
    /// The inventory file is invalid.
    #[error("{}: {problem}", path.display())]
    Inventory {
        /// File.
        path: PathBuf,
        /// What is wrong.
        problem: String,
    },
    /// The suite file is invalid.
    #[error("{}: {problem}", path.display())]
    Suite {
        /// File.
        path: PathBuf,
        /// What is wrong.
        problem: String,
    },
    /// A host file could not be read or written.
    #[error("{action} {}: {source}", path.display())]
    Io {
        /// What was attempted.
        action: &'static str,
        /// File.
        path: PathBuf,
        /// Cause.
        source: std::io::Error,
    },
    /// Talking to the device failed (unplugged, offline, `adb` missing, transfer error).
    #[error("{device}: {action}: {detail}")]
    Transport {
        /// Transport name.
        device: String,
        /// What was attempted.
        action: String,
        /// What the tool said.
        detail: String,
    },
    /// A command did not finish in time and was killed.
    #[error("{device}: {action}: no answer within {secs:.0} s (killed)")]
    Timeout {
        /// Transport name.
        device: String,
        /// What was attempted.
        action: String,
        /// The limit.
        secs: f64,
    },
    /// A suite step exited with an error status.
    #[error(
        "{device}: step `{step}` exited with status {code}; last lines of its log:\n{log_tail}"
    )]
    Step {
        /// Transport name.
        device: String,
        /// Step.
        step: String,
        /// Exit status.
        code: i32,
        /// End of the step's log.
        log_tail: String,
    },
    /// A pulled result directory is unusable.
    #[error("{device}: step `{step}`: {problem}")]
    Result {
        /// Transport name.
        device: String,
        /// Step.
        step: String,
        /// What is wrong.
        problem: String,
    },
    /// A word that no shell can carry.
    #[error("cannot quote `{value}` for the device shell: it contains a NUL byte")]
    Quote {
        /// The word, NUL shown as `\0`.
        value: String,
    },
}

/// Everything a farm run needs, resolved by the command line.
#[derive(Debug, Clone)]
pub struct FarmOptions {
    /// The devices.
    pub inventory: Inventory,
    /// The suite.
    pub suite: Suite,
    /// Results root; the run creates a dated directory inside.
    pub out: PathBuf,
    /// Binary pushed to devices without their own `binary`.
    pub binary: PathBuf,
    /// Model file pushed to every device.
    pub model: PathBuf,
    /// Rules of the gate against the baseline night.
    pub rules: GateRules,
    /// Device whose column is the baseline of the comparisons (default: the first).
    pub baseline_device: Option<String>,
}

/// Outcome of one step on one device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StepStatus {
    /// Exit 0, results pulled.
    Ok,
    /// Exit 1 (an INVALID run), results pulled.
    Invalid,
    /// The step failed on its last attempt.
    Failed,
    /// Never started (an earlier failure used up the attempts).
    NotRun,
}

/// One step on one device.
#[derive(Debug, Clone, Serialize)]
pub struct StepReport {
    /// Step name.
    pub name: String,
    /// Outcome.
    pub status: StepStatus,
    /// Exit status of the last attempt, when it ran to the end.
    pub exit_code: Option<i32>,
    /// Times it was started.
    pub attempts: u32,
    /// Result directory, relative to the dated directory.
    pub dir: Option<String>,
    /// Log file, relative to the dated directory.
    pub log: Option<String>,
    /// Problems that did not fail the step (e.g. the HTML report could not be written).
    pub notes: Vec<String>,
    /// The device before the step's last attempt: cool-down, temperatures, battery,
    /// chargers ([`cooldown`]).
    pub start: Option<cooldown::StepStart>,
}

/// A failed attempt of a device.
#[derive(Debug, Clone, Serialize)]
pub struct AttemptError {
    /// Attempt number, from 1.
    pub attempt: u32,
    /// Step it failed in; `None` while connecting or pushing.
    pub step: Option<String>,
    /// The error.
    pub error: String,
}

/// Overall outcome of a device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DeviceStatus {
    /// Every step completed.
    Ok,
    /// Some step did not complete after every attempt.
    Failed,
}

/// One device of the run.
#[derive(Debug, Clone, Serialize)]
pub struct DeviceReport {
    /// Inventory name.
    pub name: String,
    /// Transport, e.g. `adb:R5CW…`.
    pub transport: String,
    /// Outcome.
    pub status: DeviceStatus,
    /// Attempts used.
    pub attempts: u32,
    /// Wall time of the device's thread, seconds (queueing included).
    pub wall_s: f64,
    /// Seconds a host-side device waited for a host slot (`max_parallel_host`) first.
    pub queued_s: f64,
    /// Seconds from the farm's start to when its work began, and to when it ended.
    pub began_s: f64,
    pub ended_s: f64,
    /// Steps in suite order.
    pub steps: Vec<StepReport>,
    /// Every failed attempt.
    pub errors: Vec<AttemptError>,
}

/// One comparison across devices.
#[derive(Debug, Clone, Serialize)]
pub struct CompareReport {
    /// Step compared.
    pub step: String,
    /// Devices in column order (the first is the baseline unless `baseline_device` says).
    pub devices: Vec<String>,
    /// Baseline device.
    pub baseline: Option<String>,
    /// Files written, relative to the dated directory.
    pub files: Vec<String>,
    /// Why it could not be made, when it could not.
    pub error: Option<String>,
}

/// One gate verdict against the baseline night (and the rolling window).
#[derive(Debug, Clone, Serialize)]
pub struct GateReport {
    /// Device.
    pub device: String,
    /// Step.
    pub step: String,
    /// `pass`, `regression`, `error` or `skipped`.
    pub status: String,
    /// Baseline result directory (of the night the rule chose), when there was one.
    pub baseline: Option<String>,
    /// Files written, relative to the dated directory.
    pub files: Vec<String>,
    /// One-line explanation.
    pub detail: String,
    /// Each timing metric against the rolling window of passing nights.
    pub drift: Vec<nights::DriftCheck>,
}

/// The summary of a farm run (`farm.json`).
#[derive(Debug, Clone, Serialize)]
pub struct FarmReport {
    /// [`FARM_SCHEMA_VERSION`].
    pub schema_version: u32,
    /// `pocketperf-farm`.
    pub kind: &'static str,
    /// Producing tool.
    pub tool: &'static str,
    /// Its version.
    pub tool_version: &'static str,
    /// Its commit.
    pub git_commit: &'static str,
    /// Start (UTC).
    pub started_utc: String,
    /// End (UTC).
    pub finished_utc: String,
    /// The dated directory's name.
    pub run: String,
    /// The latest earlier run that finished (each device and step picks its own baseline night, see `gates`).
    pub previous: Option<String>,
    /// Inventory file.
    pub inventory: String,
    /// Suite name and file.
    pub suite: BTreeMap<&'static str, String>,
    /// Model pushed: path and SHA-256.
    pub model: BTreeMap<&'static str, String>,
    /// Gate rules used.
    pub rules: GateRules,
    /// Devices in inventory order.
    pub devices: Vec<DeviceReport>,
    /// Comparisons, one per step.
    pub comparisons: Vec<CompareReport>,
    /// Gate verdicts, one per device and step.
    pub gates: Vec<GateReport>,
    /// The process exit code this run maps to.
    pub exit_code: i32,
}

impl FarmReport {
    /// 2 if a device failed or a gate could not be evaluated; else 1 if a gate found a
    /// regression or a run was INVALID; else 0.
    pub fn compute_exit_code(&self) -> i32 {
        if self
            .devices
            .iter()
            .any(|d| d.status == DeviceStatus::Failed)
            || self.gates.iter().any(|g| g.status == "error")
        {
            2
        } else if self.gates.iter().any(|g| g.status == "regression")
            || self
                .devices
                .iter()
                .flat_map(|d| &d.steps)
                .any(|s| s.status == StepStatus::Invalid)
        {
            1
        } else {
            0
        }
    }
}

fn io<'a>(action: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> FarmError + 'a {
    move |source| FarmError::Io {
        action,
        path: path.into(),
        source,
    }
}

/// Writes one of the farm's own files through a temporary and a rename
/// ([`pocketperf_reports::files::replace_file`]).
fn write_file(path: &Path, bytes: &[u8]) -> Result<(), FarmError> {
    pocketperf_reports::files::replace_file(path, bytes).map_err(|(f, e)| io("writing", &f)(e))
}

/// Creates `out/<UTC stamp>` (suffixed `-01`, `-02`, … if it exists) and returns its name.
pub fn create_run_dir(
    out: &Path,
    now: chrono::DateTime<chrono::Utc>,
) -> Result<(String, PathBuf), FarmError> {
    std::fs::create_dir_all(out).map_err(io("creating", out))?;
    let base = now.format("%Y-%m-%dT%H%M%SZ").to_string();
    for n in 0..100 {
        let name = if n == 0 {
            base.clone()
        } else {
            format!("{base}-{n:02}")
        };
        let dir = out.join(&name);
        match std::fs::create_dir(&dir) {
            Ok(()) => return Ok((name, dir)),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(io("creating", &dir)(e)),
        }
    }
    Err(FarmError::Io {
        action: "creating",
        path: out.join(&base),
        source: std::io::Error::new(std::io::ErrorKind::AlreadyExists, "100 runs in one second"),
    })
}

/// The latest run in `out` before `current` (by name) that finished and wrote `farm.json`.
pub fn previous_run(out: &Path, current: &str) -> Option<String> {
    std::fs::read_dir(out)
        .ok()?
        .filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| n.as_str() < current && out.join(n).join(FARM_FILE).is_file())
        .max()
}

/// Placeholder values for one device.
fn vars_for(
    dev: &DeviceSpec,
    remote_dir: &str,
    model: &str,
    step: &str,
) -> BTreeMap<String, String> {
    let mut v = dev.vars.clone();
    v.insert("dir".into(), remote_dir.to_string());
    v.insert("model".into(), model.to_string());
    v.insert("device".into(), dev.transport.device_arg());
    v.insert("suite".into(), remote_join(remote_dir, "suite"));
    v.insert(
        "out".into(),
        remote_join(&remote_join(remote_dir, "out"), step),
    );
    v
}

/// Checks before anything runs that every step's placeholders resolve on every device and
/// that every file to push exists.
pub fn validate(opts: &FarmOptions) -> Result<(), FarmError> {
    for dev in &opts.inventory.devices {
        for step in &opts.suite.steps {
            let vars = vars_for(dev, "/d", "/m", &step.name);
            for a in &step.args {
                suite::substitute(a, &vars).map_err(|e| FarmError::Suite {
                    path: opts.suite.path.clone(),
                    problem: format!("step `{}` on device `{}`: {e}", step.name, dev.name),
                })?;
            }
        }
        let bin = dev.binary.as_ref().unwrap_or(&opts.binary);
        if !bin.is_file() {
            return Err(FarmError::Inventory {
                path: opts.inventory.path.clone(),
                problem: format!("device `{}`: binary {} not found", dev.name, bin.display()),
            });
        }
    }
    for f in std::iter::once(&opts.model).chain(&opts.suite.files) {
        if !f.is_file() {
            return Err(FarmError::Suite {
                path: opts.suite.path.clone(),
                problem: format!("{} not found", f.display()),
            });
        }
    }
    Ok(())
}

fn file_name(p: &Path) -> String {
    p.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "file".into())
}

/// One attempt at a device: connect, push, run the steps not yet done, pull.
#[allow(clippy::too_many_arguments)]
fn attempt_device(
    t: &dyn Transport,
    dev: &DeviceSpec,
    opts: &FarmOptions,
    binary: &Path,
    remote_dir: &str,
    local_dir: &Path,
    steps: &mut [StepReport],
    sensors: &mut (dyn cooldown::Sensors + '_),
    idle: &mut Option<cooldown::Idle>,
    progress: &(dyn Fn(&str) + Sync),
) -> Result<(), (Option<String>, FarmError)> {
    let bare = |e: FarmError| (None, e);
    t.check().map_err(bare)?;
    let (r_model_dir, r_suite, r_out) = (
        remote_join(remote_dir, "model"),
        remote_join(remote_dir, "suite"),
        remote_join(remote_dir, "out"),
    );
    t.mkdirs(&[
        remote_dir.to_string(),
        r_model_dir.clone(),
        r_suite.clone(),
        r_out.clone(),
    ])
    .map_err(bare)?;
    let r_bin = remote_join(remote_dir, "pocketperf");
    t.push(binary, &r_bin, true).map_err(bare)?;
    let r_model = remote_join(&r_model_dir, &file_name(&opts.model));
    t.push(&opts.model, &r_model, false).map_err(bare)?;
    for f in std::iter::once(&opts.suite.path).chain(&opts.suite.files) {
        t.push(f, &remote_join(&r_suite, &file_name(f)), false)
            .map_err(bare)?;
    }
    for (i, step) in opts.suite.steps.iter().enumerate() {
        if matches!(steps[i].status, StepStatus::Ok | StepStatus::Invalid) {
            continue;
        }
        let at = |e: FarmError| (Some(step.name.clone()), e);
        steps[i].attempts += 1;
        progress(&format!(
            "{}: {} (attempt {})",
            dev.name, step.name, steps[i].attempts
        ));
        let r_step = remote_join(&r_out, &step.name);
        let r_log = remote_join(&r_out, &format!("{}.log", step.name));
        t.remove(&r_step).map_err(at)?;
        let vars = vars_for(dev, remote_dir, &r_model, &step.name);
        let args: Vec<String> = step
            .args
            .iter()
            .map(|a| suite::substitute(a, &vars))
            .collect::<Result<_, _>>()
            .map_err(|problem| {
                at(FarmError::Suite {
                    path: opts.suite.path.clone(),
                    problem,
                })
            })?;
        let start = cooldown::cool_down(&dev.cooldown, sensors, idle, &|m| {
            progress(&format!("{}: {}: {m}", dev.name, step.name))
        });
        steps[i].start = Some(start);
        let ran = t.run(remote_dir, &r_bin, &args, &r_log, dev.step_timeout);
        sensors.step_ran();
        let code = ran.map_err(at)?;
        steps[i].exit_code = Some(code);
        let log_name = format!("{}.log", step.name);
        let local_log = local_dir.join(&log_name);
        // Pulled beside the destination and renamed into place, like the step's directory:
        // a symlink at `local_log` is replaced, never written through.
        let log_staging = local_dir.join(format!(".{log_name}.partial"));
        let _ = std::fs::remove_file(&log_staging);
        let pulled_log = t.pull(&r_log, &log_staging).and_then(|()| {
            std::fs::rename(&log_staging, &local_log).map_err(|e| io("renaming", &log_staging)(e))
        });
        if pulled_log.is_err() {
            let _ = std::fs::remove_file(&log_staging);
        } else {
            steps[i].log = Some(format!("{}/{log_name}", dev.name));
        }
        if code != 0 && code != 1 {
            steps[i].status = StepStatus::Failed;
            let log_tail = std::fs::read_to_string(&local_log)
                .map(|s| tail(&s, 15))
                .unwrap_or_else(|_| "(log not available)".into());
            return Err(at(FarmError::Step {
                device: t.name(),
                step: step.name.clone(),
                code,
                log_tail,
            }));
        }
        pulled_log.map_err(at)?;
        let staging = local_dir.join(format!(".{}.partial", step.name));
        let final_dir = local_dir.join(&step.name);
        for d in [&staging, &final_dir] {
            if d.exists() {
                std::fs::remove_dir_all(d).map_err(|e| at(io("removing", d)(e)))?;
            }
        }
        t.pull(&r_step, &staging).map_err(at)?;
        std::fs::rename(&staging, &final_dir).map_err(|e| at(io("renaming", &staging)(e)))?;
        if let Err(e) = pocketperf_reports::load_result(&final_dir) {
            steps[i].status = StepStatus::Failed;
            return Err(at(FarmError::Result {
                device: t.name(),
                step: step.name.clone(),
                problem: e.to_string(),
            }));
        }
        if let Err(e) = pocketperf_reports::write_report(&final_dir) {
            steps[i].notes.push(format!("report not written: {e}"));
        }
        steps[i].status = if code == 0 {
            StepStatus::Ok
        } else {
            StepStatus::Invalid
        };
        steps[i].dir = Some(format!("{}/{}", dev.name, step.name));
    }
    Ok(())
}

fn run_device(
    dev: &DeviceSpec,
    opts: &FarmOptions,
    run_dir: &Path,
    progress: &(dyn Fn(&str) + Sync),
) -> DeviceReport {
    let started = Instant::now();
    let mut report = DeviceReport {
        name: dev.name.clone(),
        transport: dev.transport.to_string(),
        status: DeviceStatus::Failed,
        attempts: 0,
        wall_s: 0.0,
        queued_s: 0.0,
        began_s: 0.0,
        ended_s: 0.0,
        steps: opts
            .suite
            .steps
            .iter()
            .map(|s| StepReport {
                name: s.name.clone(),
                status: StepStatus::NotRun,
                exit_code: None,
                attempts: 0,
                dir: None,
                log: None,
                notes: Vec::new(),
                start: None,
            })
            .collect(),
        errors: Vec::new(),
    };
    let local_dir = run_dir.join(&dev.name);
    let fail = |report: &mut DeviceReport, e: String| {
        report.errors.push(AttemptError {
            attempt: 0,
            step: None,
            error: e,
        });
    };
    if let Err(e) = std::fs::create_dir_all(&local_dir) {
        fail(
            &mut report,
            format!("creating {}: {e}", local_dir.display()),
        );
        return report;
    }
    let scratch;
    let remote_dir = match (&dev.transport, &dev.remote_dir) {
        (_, Some(d)) => d.clone(),
        (TransportSpec::Adb { .. }, None) => DEFAULT_ADB_DIR.to_string(),
        (_, None) => match tempfile::Builder::new()
            .prefix("pocketperf-farm-")
            .tempdir()
        {
            Ok(d) => {
                scratch = d;
                scratch.path().to_string_lossy().into_owned()
            }
            Err(e) => {
                fail(&mut report, format!("creating a scratch directory: {e}"));
                return report;
            }
        },
    };
    let transport: Box<dyn Transport> = match &dev.transport {
        TransportSpec::Adb { serial } => Box::new(AdbTransport::new(
            &dev.adb,
            serial.clone(),
            dev.transfer_timeout,
        )),
        t => Box::new(LocalTransport::new(t.to_string())),
    };
    let binary = dev.binary.clone().unwrap_or_else(|| opts.binary.clone());
    let mut sensors: Box<dyn cooldown::Sensors> = match &dev.transport {
        TransportSpec::Local => Box::new(cooldown::SysfsSensors(
            dev.sysfs_root
                .clone()
                .unwrap_or_else(|| PathBuf::from("/sys")),
        )),
        TransportSpec::Adb { serial } => Box::new(cooldown::AdbSensors {
            adb: AdbTransport::new(&dev.adb, serial.clone(), dev.transfer_timeout),
            binary: remote_join(&remote_dir, "pocketperf"),
            timeout: dev.transfer_timeout,
        }),
        TransportSpec::Sim { .. } => match cooldown::SimBench::new(&dev.transport.device_arg()) {
            Ok(b) => Box::new(b),
            Err(e) => Box::new(cooldown::Unreadable(format!("simulated handset: {e}"))),
        },
    };
    let mut idle = None;
    for attempt in 1..=dev.retries.saturating_add(1) {
        if attempt > 1 {
            progress(&format!(
                "{}: retrying in {:.0} s (attempt {attempt} of {})",
                dev.name,
                dev.retry_delay.as_secs_f64(),
                dev.retries + 1
            ));
            std::thread::sleep(dev.retry_delay);
        }
        report.attempts = attempt;
        match attempt_device(
            transport.as_ref(),
            dev,
            opts,
            &binary,
            &remote_dir,
            &local_dir,
            &mut report.steps,
            sensors.as_mut(),
            &mut idle,
            progress,
        ) {
            Ok(()) => {
                report.status = DeviceStatus::Ok;
                break;
            }
            Err((step, e)) => {
                progress(&format!("{}: {}", dev.name, first_line(&e.to_string())));
                report.errors.push(AttemptError {
                    attempt,
                    step,
                    error: e.to_string(),
                });
            }
        }
    }
    if report.status == DeviceStatus::Failed {
        for s in &mut report.steps {
            if s.attempts > 0 && !matches!(s.status, StepStatus::Ok | StepStatus::Invalid) {
                s.status = StepStatus::Failed;
            }
        }
    }
    report.wall_s = started.elapsed().as_secs_f64();
    report
}

fn first_line(s: &str) -> &str {
    s.lines().next().unwrap_or("")
}

fn compare_step(
    opts: &FarmOptions,
    run_dir: &Path,
    step: &str,
    devices: &[DeviceReport],
    ctx: &RenderContext,
) -> Option<CompareReport> {
    let mut runs = Vec::new();
    let mut errors = Vec::new();
    for d in devices {
        let Some(s) = d.steps.iter().find(|s| s.name == step) else {
            continue;
        };
        let Some(rel) = &s.dir else { continue };
        let dir = run_dir.join(rel);
        match pocketperf_reports::load_result(&dir) {
            Ok(result) => runs.push(ComparedRun {
                label: d.name.clone(),
                dir,
                result,
            }),
            Err(e) => errors.push(e.to_string()),
        }
    }
    if runs.is_empty() {
        return None;
    }
    let names: Vec<String> = runs.iter().map(|r| r.label.clone()).collect();
    let baseline_index = opts
        .baseline_device
        .as_ref()
        .and_then(|b| names.iter().position(|n| n == b))
        .unwrap_or(0);
    let mut report = CompareReport {
        step: step.to_string(),
        baseline: names.get(baseline_index).cloned(),
        devices: names,
        files: Vec::new(),
        error: (!errors.is_empty()).then(|| errors.join("; ")),
    };
    let cmp_dir = run_dir.join("compare");
    let result = (|| -> Result<Vec<String>, String> {
        let c = compare_results(runs, baseline_index).map_err(|e| e.to_string())?;
        std::fs::create_dir_all(&cmp_dir).map_err(|e| e.to_string())?;
        let mut files = Vec::new();
        for (ext, text) in [
            ("html", c.to_html(ctx).map_err(|e| e.to_string())?),
            ("csv", c.to_csv(ctx)),
            ("md", c.to_markdown(ctx)),
        ] {
            let name = format!("{step}.{ext}");
            let p = cmp_dir.join(&name);
            pocketperf_reports::files::replace_file(&p, text.as_bytes())
                .map_err(|(f, e)| format!("writing {}: {e}", f.display()))?;
            files.push(format!("compare/{name}"));
        }
        Ok(files)
    })();
    match result {
        Ok(files) => report.files = files,
        Err(e) => report.error = Some(e),
    }
    Some(report)
}

/// Gates one device's step of night `current` against its baseline night and the rolling
/// window ([`nights`]).
#[allow(clippy::too_many_arguments)]
fn gate_device_step(
    opts: &FarmOptions,
    out: &Path,
    run_dir: &Path,
    current: &str,
    device: &str,
    step: &str,
    current_rel: &str,
    ctx: &RenderContext,
) -> GateReport {
    let mut g = GateReport {
        device: device.to_string(),
        step: step.to_string(),
        status: "skipped".into(),
        baseline: None,
        files: Vec::new(),
        detail: String::new(),
        drift: Vec::new(),
    };
    let rules = &opts.suite.nights;
    let passing = nights::passing_nights(out, current, device, step);
    let cand_dir = run_dir.join(current_rel);
    if let Ok(cand) = pocketperf_reports::schema::load_result(&cand_dir) {
        g.drift = nights::drift(out, &passing, device, step, &cand, rules);
    }
    let drifted: Vec<String> = g
        .drift
        .iter()
        .filter(|d| d.status == "regression")
        .map(|d| format!("drift {}: {}", d.metric, d.detail))
        .collect();
    let prev = match nights::baseline_night(&rules.baseline, out, &passing, device, step) {
        Ok(p) => p,
        Err(why) => {
            g.detail = why;
            return g;
        }
    };
    let base = out.join(&prev).join(device).join(step);
    g.baseline = Some(format!("../{prev}/{device}/{step}"));
    let outcome = gate(&base, &cand_dir, &opts.rules);
    g.status = match outcome.status {
        GateStatus::Pass if !drifted.is_empty() => "regression",
        GateStatus::Pass => "pass",
        GateStatus::Regression => "regression",
        GateStatus::Error => "error",
    }
    .into();
    g.detail = match (&outcome.error, outcome.status) {
        (Some(e), _) => e.clone(),
        (None, GateStatus::Pass) if drifted.is_empty() => {
            format!("{} checks within the rules", outcome.checks.len())
        }
        (None, _) => outcome
            .checks
            .iter()
            .filter(|c| {
                matches!(
                    c.status,
                    pocketperf_reports::gate::CheckStatus::Regression
                        | pocketperf_reports::gate::CheckStatus::Error
                )
            })
            .map(|c| format!("{}: {}", c.name, c.detail))
            .chain(drifted)
            .collect::<Vec<_>>()
            .join("; "),
    };
    let gate_dir = run_dir.join("gate").join(device);
    if let Err(e) = std::fs::create_dir_all(&gate_dir) {
        g.detail
            .push_str(&format!(" (gate files not written: {e})"));
        return g;
    }
    for (ext, text) in [
        ("junit.xml", outcome.to_junit(ctx)),
        ("md", outcome.to_markdown(ctx)),
    ] {
        let name = format!("{step}.{ext}");
        match pocketperf_reports::files::replace_file(&gate_dir.join(&name), text.as_bytes()) {
            Ok(()) => g.files.push(format!("gate/{device}/{name}")),
            Err((_, e)) => g.detail.push_str(&format!(" ({name} not written: {e})")),
        }
    }
    g
}

/// Runs the farm. Device failures are reported in the result; an `Err` means nothing could
/// start (the results directory could not be created).
pub fn run_farm(
    opts: &FarmOptions,
    progress: &(dyn Fn(&str) + Sync),
) -> Result<FarmReport, FarmError> {
    let started = chrono::Utc::now();
    let (run, run_dir) = create_run_dir(&opts.out, started)?;
    let previous = previous_run(&opts.out, &run);
    let t0 = Instant::now();
    let host_slots = slots::HostSlots::new(opts.inventory.max_parallel_host);
    let devices: Vec<DeviceReport> = std::thread::scope(|s| {
        let handles: Vec<_> = opts
            .inventory
            .devices
            .iter()
            .map(|d| {
                let (run_dir, host_slots) = (&run_dir, &host_slots);
                s.spawn(move || {
                    let slot = d.transport.host_side().then(|| host_slots.acquire());
                    let began_s = t0.elapsed().as_secs_f64();
                    let mut r = run_device(d, opts, run_dir, progress);
                    r.ended_s = t0.elapsed().as_secs_f64();
                    drop(slot);
                    r.queued_s = began_s;
                    r.began_s = began_s;
                    r.wall_s += began_s;
                    r
                })
            })
            .collect();
        handles
            .into_iter()
            .zip(&opts.inventory.devices)
            .map(|(h, d)| {
                h.join().unwrap_or_else(|_| DeviceReport {
                    name: d.name.clone(),
                    transport: d.transport.to_string(),
                    status: DeviceStatus::Failed,
                    attempts: 0,
                    wall_s: 0.0,
                    queued_s: 0.0,
                    began_s: 0.0,
                    ended_s: 0.0,
                    steps: Vec::new(),
                    errors: vec![AttemptError {
                        attempt: 0,
                        step: None,
                        error: "the device's thread panicked (a bug)".into(),
                    }],
                })
            })
            .collect()
    });
    let ctx = RenderContext::now();
    let comparisons: Vec<CompareReport> = opts
        .suite
        .steps
        .iter()
        .filter_map(|s| compare_step(opts, &run_dir, &s.name, &devices, &ctx))
        .collect();
    let mut gates = Vec::new();
    for d in &devices {
        for s in &d.steps {
            if let Some(rel) = &s.dir {
                gates.push(gate_device_step(
                    opts, &opts.out, &run_dir, &run, &d.name, &s.name, rel, &ctx,
                ));
            }
        }
    }
    let mut report = FarmReport {
        schema_version: FARM_SCHEMA_VERSION,
        kind: "pocketperf-farm",
        tool: crate::meta::TOOL,
        tool_version: crate::meta::TOOL_VERSION,
        git_commit: crate::meta::GIT_COMMIT,
        started_utc: started.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        finished_utc: crate::meta::now_utc(),
        run: run.clone(),
        previous,
        inventory: opts.inventory.path.display().to_string(),
        suite: BTreeMap::from([
            ("name", opts.suite.name.clone()),
            ("path", opts.suite.path.display().to_string()),
        ]),
        model: BTreeMap::from([
            ("path", opts.model.display().to_string()),
            ("name", crate::meta::model_name(&opts.model)),
            ("sha256", crate::meta::model_sha256(&opts.model)),
        ]),
        rules: opts.rules.clone(),
        devices,
        comparisons,
        gates,
        exit_code: 0,
    };
    report.exit_code = report.compute_exit_code();
    let json = serde_json::to_string_pretty(&report).unwrap_or_default() + "\n";
    let p = run_dir.join(FARM_FILE);
    write_file(&p, json.as_bytes())?;
    let p = run_dir.join("farm.md");
    write_file(&p, report.to_markdown().as_bytes())?;
    Ok(report)
}

impl FarmReport {
    /// Markdown summary (CI step summary).
    pub fn to_markdown(&self) -> String {
        let word = match self.exit_code {
            0 => "PASS",
            1 => "REGRESSION OR INVALID RUN",
            _ => "DEVICE OR GATE ERROR",
        };
        let mut s = format!(
            "# PocketPerf farm run {}: {word}\n\nsuite `{}` · tool {} ({}) · started {} · finished {} · previous run: {}\n\n",
            escape_md(&self.run),
            escape_md(self.suite.get("name").map_or("", |s| s.as_str())),
            escape_md(self.tool_version),
            escape_md(self.git_commit),
            self.started_utc,
            self.finished_utc,
            escape_md(self.previous.as_deref().unwrap_or("none")),
        );
        s.push_str("| device | transport | status | attempts | steps | wall s |\n|---|---|---|---:|---|---:|\n");
        for d in &self.devices {
            let steps: Vec<String> = d
                .steps
                .iter()
                .map(|st| {
                    let word = match st.status {
                        StepStatus::Ok => "ok",
                        StepStatus::Invalid => "INVALID",
                        StepStatus::Failed => "FAILED",
                        StepStatus::NotRun => "not run",
                    };
                    format!("{} {word}", escape_md(&st.name))
                })
                .collect();
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} | {} | {:.1} |",
                escape_md(&d.name),
                escape_md(&d.transport),
                if d.status == DeviceStatus::Ok {
                    "ok"
                } else {
                    "**FAILED**"
                },
                d.attempts,
                steps.join(", "),
                d.wall_s
            );
        }
        let failures: Vec<&DeviceReport> = self
            .devices
            .iter()
            .filter(|d| !d.errors.is_empty())
            .collect();
        if !failures.is_empty() {
            s.push_str("\n## Failures\n\n");
            for d in failures {
                for e in &d.errors {
                    let _ = writeln!(
                        s,
                        "- **{}** attempt {}{}: {}",
                        escape_md(&d.name),
                        e.attempt,
                        e.step
                            .as_ref()
                            .map(|st| format!(" (step {})", escape_md(st)))
                            .unwrap_or_default(),
                        escape_md(&e.error)
                    );
                }
            }
        }
        let starts: Vec<(&DeviceReport, &StepReport, &cooldown::StepStart)> = self
            .devices
            .iter()
            .flat_map(|d| {
                d.steps
                    .iter()
                    .filter_map(move |st| st.start.as_ref().map(|x| (d, st, x)))
            })
            .collect();
        if !starts.is_empty() {
            s.push_str("\n## Device at the start of each step\n\n| device | step | cool-down | waited s | SoC °C before → start | skin °C before → start | battery | chargers online |\n|---|---|---|---:|---|---|---|---|\n");
            let t = |v: Option<f64>| v.map_or("-".to_string(), |t| format!("{t:.1}"));
            for (d, st, x) in starts {
                let (b, a) = (
                    x.before.clone().unwrap_or_default(),
                    x.start.clone().unwrap_or_default(),
                );
                let _ = writeln!(
                    s,
                    "| {} | {} | {}{} | {:.1} | {} → {} | {} → {} | {} | {} |",
                    escape_md(&d.name),
                    escape_md(&st.name),
                    x.cooldown,
                    x.detail
                        .as_ref()
                        .map(|e| format!(": {}", escape_md(e)))
                        .unwrap_or_default(),
                    x.waited_s,
                    t(b.soc_c),
                    t(a.soc_c),
                    t(b.skin_c),
                    t(a.skin_c),
                    match (a.battery_pct, &a.battery_status) {
                        (Some(p), Some(st)) => format!("{p}% {}", escape_md(st)),
                        (Some(p), None) => format!("{p}%"),
                        (None, Some(st)) => escape_md(st),
                        (None, None) => "-".into(),
                    },
                    if a.chargers_online.is_empty() {
                        "none".to_string()
                    } else {
                        escape_md(&a.chargers_online.join(", "))
                    }
                );
            }
        }
        if !self.gates.is_empty() {
            s.push_str("\n## Gate against the baseline night and the rolling window\n\n| device | step | verdict | baseline | detail |\n|---|---|---|---|---|\n");
            for g in &self.gates {
                let _ = writeln!(
                    s,
                    "| {} | {} | {} | {} | {} |",
                    escape_md(&g.device),
                    escape_md(&g.step),
                    g.status,
                    escape_md(g.baseline.as_deref().unwrap_or("none")),
                    escape_md(&g.detail)
                );
            }
        }
        if !self.comparisons.is_empty() {
            s.push_str("\n## Comparisons\n\n");
            for c in &self.comparisons {
                let _ = writeln!(
                    s,
                    "- {}: {} (baseline {}){}",
                    escape_md(&c.step),
                    c.files
                        .iter()
                        .map(|f| escape_md(f))
                        .collect::<Vec<_>>()
                        .join(", "),
                    escape_md(c.baseline.as_deref().unwrap_or("-")),
                    c.error
                        .as_ref()
                        .map(|e| format!(" — {}", escape_md(e)))
                        .unwrap_or_default()
                );
            }
        }
        s
    }
}
