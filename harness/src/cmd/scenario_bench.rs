//! `pocketperf scenario-bench`: the scenario engine's own cost, with a null SUT that
//! completes each query the moment it is issued. Reports what LoadGen's summary reports for
//! the same run (SingleStream "QPS w/ loadgen overhead", latency added per query; Offline
//! samples per second; Server scheduled and completed rate) plus wall time and the peak
//! resident memory of the run, so the figures sit beside LoadGen's own null SUT
//! (`bench/loadgen-compare.sh` runs both on one machine, one after the other).

use crate::meta;
use anyhow::{Context, Result};
use clap::Args;
use pocketperf_scenarios::{NullQsl, NullSut, RealClock, Scenario, TestSettings, run_test};
use std::path::PathBuf;
use std::time::Instant;

/// The LoadGen scenarios the null-SUT bench times.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
pub enum BenchScenario {
    SingleStream,
    Offline,
    Server,
}

#[derive(Args, Debug, serde::Serialize)]
pub struct ScenarioBenchArgs {
    #[arg(long, value_enum, default_value = "single-stream")]
    pub scenario: BenchScenario,
    /// Minimum query count (Offline: the number of samples in the one batch).
    #[arg(long, default_value_t = 100_000)]
    pub min_queries: u64,
    /// Minimum duration, ms (Offline ignores it: the batch size alone decides). SingleStream
    /// analysis time grows with the square of the query count (LoadGen's early-stopping
    /// rank search), so a null SUT is best timed over a second or two.
    #[arg(long, default_value_t = 1_000)]
    pub min_duration_ms: u64,
    /// Server: scheduled queries per second.
    #[arg(long, default_value_t = 100_000.0)]
    pub server_qps: f64,
    /// Server: latency bound, ns.
    #[arg(long, default_value_t = 1_000_000)]
    pub server_latency_ns: u64,
    /// Samples in the null library (all of them loaded).
    #[arg(long, default_value_t = 1024)]
    pub samples: u64,
    /// Write the MLPerf logs of the run here.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

/// Resident set size figures from /proc/self/status, bytes.
fn proc_status_kb(field: &str) -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = s.lines().find(|l| l.starts_with(field))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// Resets the kernel's peak-RSS mark (Linux ≥ 4.0); false when unsupported.
fn reset_peak_rss() -> bool {
    std::fs::write("/proc/self/clear_refs", "5").is_ok()
}

/// The settings of a null-SUT run (LoadGen defaults otherwise).
pub fn bench_settings(a: &ScenarioBenchArgs) -> TestSettings {
    let scenario = match a.scenario {
        BenchScenario::SingleStream => Scenario::SingleStream,
        BenchScenario::Offline => Scenario::Offline,
        BenchScenario::Server => Scenario::Server,
    };
    let mut s = TestSettings::new(scenario);
    s.min_query_count = a.min_queries;
    match scenario {
        Scenario::SingleStream => s.min_duration_ms = a.min_duration_ms,
        Scenario::Server => {
            s.min_duration_ms = a.min_duration_ms;
            s.server_target_qps = a.server_qps;
            s.server_target_latency_ns = a.server_latency_ns;
        }
        Scenario::Offline => {
            // Batch = max(min_query_count, 1.1 × qps × min_duration) = min_query_count.
            s.min_duration_ms = 0;
            s.offline_expected_qps = 1.0;
        }
    }
    s
}

pub fn run(a: &ScenarioBenchArgs) -> Result<i32> {
    let settings = bench_settings(a);
    settings.validate()?;
    let mut sut = NullSut::new();
    let mut qsl = NullQsl {
        total: a.samples,
        performance: a.samples,
    };
    let peak_reset = reset_peak_rss();
    let rss_before_kb = proc_status_kb("VmRSS:");
    let clock = RealClock::new();
    let started = chrono::Utc::now();
    let t0 = Instant::now();
    let result = run_test(&mut sut, &mut qsl, &settings, &clock)?;
    let wall_s = t0.elapsed().as_secs_f64();
    let peak_kb = proc_status_kb("VmHWM:");
    let finished = chrono::Utc::now();
    let p = result
        .performance
        .as_ref()
        .context("the null-SUT run produced no performance pass")?;
    if let Some(dir) = &a.out {
        result.write_logs(dir, &crate::outputs::log_meta(&started, &finished))?;
    }
    let lat = p.latency.clone();
    let n = p.queries_completed;
    let queries_per_s = match settings.scenario {
        Scenario::SingleStream => p.qps_with_overhead,
        Scenario::Offline => p.samples_per_second,
        Scenario::Server => p.completed_qps,
    };
    let growth_kb = match (rss_before_kb, peak_kb, peak_reset) {
        (Some(b), Some(pk), true) => Some(pk.saturating_sub(b)),
        _ => None,
    };
    let report = serde_json::json!({
        "tool": meta::TOOL,
        "tool_version": meta::TOOL_VERSION,
        "git_commit": meta::GIT_COMMIT,
        "device": meta::local_host(),
        "timestamp_utc": meta::now_utc(),
        "settings": &settings,
        "scenario": settings.scenario.as_str(),
        "valid": result.is_valid(),
        "invalid_causes": result.invalid_causes.iter().map(|c| c.to_string()).collect::<Vec<_>>(),
        "queries": n,
        "wall_s": wall_s,
        "queries_per_s": queries_per_s,
        "queries_per_s_wall": if wall_s > 0.0 { n as f64 / wall_s } else { 0.0 },
        "overhead_ns_per_query": if queries_per_s > 0.0 { 1e9 / queries_per_s } else { 0.0 },
        "latency_mean_ns": lat.as_ref().map(|l| l.mean),
        "latency_p99_ns": lat.as_ref().and_then(|l| l.at(0.99)),
        "latency_max_ns": lat.as_ref().map(|l| l.max),
        "scheduled_qps": p.scheduled_qps,
        "rss_before_bytes": rss_before_kb.map(|k| k * 1024),
        "peak_rss_bytes": if peak_reset { peak_kb.map(|k| k * 1024) } else { None },
        "peak_growth_bytes": growth_kb.map(|k| k * 1024),
        "peak_growth_bytes_per_query": growth_kb.map(|k| (k * 1024) as f64 / n.max(1) as f64),
    });
    if a.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        let mib = |k: Option<u64>| {
            k.map_or("n/a".to_string(), |k| {
                format!("{:.1} MiB", k as f64 / 1024.0)
            })
        };
        println!(
            "{} null SUT: {n} queries in {wall_s:.3} s — {queries_per_s:.0} queries/s \
             ({:.0} ns per query); added latency mean {} ns, p99 {} ns; peak RSS {} \
             (+{} over the {} before the run); {}",
            settings.scenario,
            if queries_per_s > 0.0 {
                1e9 / queries_per_s
            } else {
                0.0
            },
            lat.as_ref().map_or(0, |l| l.mean),
            lat.as_ref().and_then(|l| l.at(0.99)).unwrap_or(0),
            mib(if peak_reset { peak_kb } else { None }),
            mib(growth_kb),
            mib(rss_before_kb),
            if result.is_valid() {
                "VALID"
            } else {
                "INVALID"
            }
        );
    }
    Ok(0)
}
