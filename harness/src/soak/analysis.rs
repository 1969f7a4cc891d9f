//! The checks of a soak, computed from its journal alone (so a live checkpoint, a resumed run
//! and the final report agree): evidence (the server started, a turn succeeded, the run was
//! not cut short), crashes, timeouts, RSS growth (grouped Theil–Sen), output
//! drift, latency drift (P99 TPOT), stability (worst/best window throughput) and thermal
//! limits. Rules and defaults: `docs/SOAK.md`.
//!
//! Size: over 800 lines, a quarter of them tests: the eight checks read the same journal
//! windows and share their thresholds; each check is a function of its own here.

use std::collections::BTreeMap;

use pocketperf_scenarios::stats::percentile;
use serde::Serialize;

use super::config::{ResolvedWindows, SoakConfig, Thresholds, format_duration};
use super::fit::{TheilSen, theil_sen_grouped};
use super::journal::{EndReason, Entry, FailureRecord, ItemKey, ProbeKind, Record};

/// Least dialogue turns a latency window needs.
pub const MIN_WINDOW_QUERIES: usize = 5;
/// Least share of a stability window spent decoding for the window to count.
pub const MIN_WINDOW_COVERAGE: f64 = 0.25;
/// Least RSS samples for a fit.
pub const MIN_RSS_SAMPLES: usize = 3;

/// Outcome of one check.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    Pass,
    Fail,
    /// Not enough data to judge (said why in the detail); does not fail the run.
    Skipped,
}

impl Verdict {
    /// Pass when `ok`, else fail.
    fn pass_if(ok: bool) -> Verdict {
        if ok { Verdict::Pass } else { Verdict::Fail }
    }
}

/// One check with its figure, threshold and interval.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Check {
    pub name: &'static str,
    pub verdict: Verdict,
    pub value: Option<f64>,
    pub threshold: Option<f64>,
    pub unit: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub interval: Option<[f64; 2]>,
    pub detail: String,
}

/// State of the run the journal describes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    /// No end record (live checkpoint, or a harness that was killed).
    Running,
    Completed,
    Interrupted,
    Aborted,
}

/// Counters over the run.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Counts {
    pub queries: u64,
    pub tokens: u64,
    pub probes: u64,
    pub probe_rounds: u64,
    pub crashes: u64,
    pub timeouts: u64,
    pub refused: u64,
    pub skipped: u64,
    pub output_drift: u64,
    pub sut_starts: u64,
    pub segments: u64,
    /// Memory samples (`stats` requests) that gave no figure: refused, timed out or crashed.
    pub stats_failed: u64,
    /// Of those, refused because the server does not report its memory (`unknown_op`: a
    /// server over HTTP other than `pocketperf serve --http`).
    pub stats_unsupported: u64,
    /// Most temperature sensors the device offered at a segment's start (`None`: a journal
    /// from before sensors were journaled).
    pub thermal_zones: Option<usize>,
}

/// RSS figures.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct RssAnalysis {
    pub samples: usize,
    pub samples_in_fit: usize,
    /// Slope in MiB/hour.
    pub fit: Option<TheilSen>,
    pub first_mib: Option<f64>,
    pub last_mib: Option<f64>,
    pub peak_mib: Option<f64>,
    /// (t_s, incarnation, RSS MiB, in fit).
    #[serde(skip)]
    pub series: Vec<(f64, u32, f64, bool)>,
}

/// P99 TPOT of the first steady and the last window.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct LatencyAnalysis {
    pub first_window_s: [f64; 2],
    pub last_window_s: [f64; 2],
    pub first_n: usize,
    pub last_n: usize,
    pub first_p99_tpot_ms: Option<f64>,
    pub last_p99_tpot_ms: Option<f64>,
    pub drift: Option<f64>,
    pub all_p50_tpot_ms: Option<f64>,
    pub all_p99_tpot_ms: Option<f64>,
    pub all_p99_ttft_ms: Option<f64>,
    /// (t_end_s, TPOT ms).
    #[serde(skip)]
    pub tpot_series: Vec<(f64, f64)>,
}

/// Decode throughput of one stability window.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct WindowRate {
    pub start_s: f64,
    pub end_s: f64,
    /// Tokens per second while decoding.
    pub tokens_per_s: f64,
    /// Share of the window spent decoding.
    pub coverage: f64,
}

/// Stability windows.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct StabilityAnalysis {
    pub windows: Vec<WindowRate>,
    pub windows_skipped: usize,
    pub worst: Option<f64>,
    pub best: Option<f64>,
    pub ratio: Option<f64>,
}

/// Temperatures.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct ThermalAnalysis {
    pub samples: usize,
    pub soc_max_c: Option<f64>,
    pub skin_max_c: Option<f64>,
    pub max_c: Option<f64>,
    pub max_zone: Option<String>,
    pub soc_above_limit_s: f64,
    pub skin_above_limit_s: f64,
    #[serde(skip)]
    pub series: Vec<ThermalPoint>,
}

/// One telemetry sample on the soak clock.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ThermalPoint {
    pub t_s: f64,
    pub soc_c: Option<f64>,
    pub skin_c: Option<f64>,
    pub max_c: Option<f64>,
}

/// A probe result that differs from its first round.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct DriftEvent {
    pub round: u32,
    pub reference_round: u32,
    pub probe_id: String,
    pub t_s: f64,
    pub expected: String,
    pub got: String,
}

/// MMLU probe accuracy of one round.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct RoundAccuracy {
    pub round: u32,
    pub correct: u64,
    pub total: u64,
}

/// A failure with its time.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct FailureAt {
    pub t_s: f64,
    #[serde(flatten)]
    pub failure: FailureRecord,
}

/// Everything the report shows.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Analysis {
    pub status: RunStatus,
    pub planned_s: f64,
    pub soak_time_s: f64,
    pub windows: ResolvedWindows,
    pub counts: Counts,
    pub checks: Vec<Check>,
    pub passed: bool,
    pub rss: RssAnalysis,
    pub latency: LatencyAnalysis,
    pub stability: StabilityAnalysis,
    pub thermal: ThermalAnalysis,
    pub mmlu: Vec<RoundAccuracy>,
    pub crashes: Vec<FailureAt>,
    pub timeouts: Vec<FailureAt>,
    pub drift: Vec<DriftEvent>,
}

fn check(
    name: &'static str,
    verdict: Verdict,
    value: Option<f64>,
    threshold: f64,
    unit: &'static str,
    detail: String,
) -> Check {
    Check {
        name,
        verdict,
        value,
        threshold: Some(threshold),
        unit,
        interval: None,
        detail,
    }
}

fn p99_ms(ns: &mut [u64]) -> Option<f64> {
    ns.sort_unstable();
    percentile(ns, 0.99).map(|v| v as f64 / 1e6)
}

fn ms_to_ns(ms: f64) -> u64 {
    (ms * 1e6).round().max(0.0) as u64
}

/// What the soak, by its planned length and settings, can judge: `Ok` for a check it plans,
/// `Err(why not)` for one it cannot give data (`docs/SOAK.md`, "Verdicts").
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    /// `rss_growth` and `major_faults`: memory samples of a warmed-up server.
    pub memory: Result<(), String>,
    pub output_drift: Result<(), String>,
    pub latency_drift: Result<(), String>,
    pub stability: Result<(), String>,
    pub thermal: Result<(), String>,
}

impl Plan {
    /// The plan of a soak of `cfg` with windows `w` on a device that offered `thermal_zones`
    /// temperature sensors (`None`: not journaled).
    pub fn new(cfg: &SoakConfig, w: ResolvedWindows, thermal_zones: Option<usize>) -> Plan {
        let d = cfg.duration_s;
        let after = d - w.warmup_s;
        let memory = if after <= 0.0 {
            Err(format!(
                "the soak ({}) is no longer than its warm-up ({})",
                format_duration(d),
                format_duration(w.warmup_s)
            ))
        } else if cfg.rss_every_s > 0.0 && after / cfg.rss_every_s < MIN_RSS_SAMPLES as f64 {
            Err(format!(
                "{} after the warm-up holds fewer than {MIN_RSS_SAMPLES} samples at --rss-every {}",
                format_duration(after),
                format_duration(cfg.rss_every_s)
            ))
        } else {
            Ok(())
        };
        let output_drift = if cfg.probe_prompts + cfg.probe_mmlu == 0 {
            Err("no probes (--probe-prompts 0 --probe-mmlu 0)".to_string())
        } else if cfg.probe_every_s >= d {
            Err(format!(
                "one probe round fits: --probe-every {} is not shorter than the soak ({})",
                format_duration(cfg.probe_every_s),
                format_duration(d)
            ))
        } else {
            Ok(())
        };
        let first_end = w.warmup_s + w.latency_s;
        let latency_drift = if d - w.latency_s < first_end {
            Err(format!(
                "the first steady window ends at {} and the last begins at {}: they overlap",
                format_duration(first_end),
                format_duration((d - w.latency_s).max(0.0))
            ))
        } else {
            Ok(())
        };
        let stability = if w.stability_s <= 0.0 {
            Err("stability windows are off".to_string())
        } else if (after / w.stability_s + 1e-9).floor() < 2.0 {
            Err(format!(
                "{} after the warm-up holds fewer than two windows of {}",
                format_duration(after.max(0.0)),
                format_duration(w.stability_s)
            ))
        } else {
            Ok(())
        };
        let thermal = match thermal_zones {
            Some(n) if n > 0 => Ok(()),
            Some(_) => Err(
                "the device has no temperature sensor (`--device sim:PROFILE` simulates a handset)"
                    .to_string(),
            ),
            None => Err("the journal does not say which sensors the device had".to_string()),
        };
        Plan {
            memory,
            output_drift,
            latency_drift,
            stability,
            thermal,
        }
    }
}

/// A check that got no figure. It **fails** a completed soak whose plan gave it data (a
/// verdict needs evidence: nothing measured is not a pass); it is skipped when the plan could
/// not give it data, or while the soak has not run its planned time.
fn without_data(
    name: &'static str,
    unit: &'static str,
    threshold: f64,
    planned: &Result<(), String>,
    status: RunStatus,
    detail: String,
) -> Check {
    let (verdict, detail) = match (planned, status) {
        (Ok(()), RunStatus::Completed) => (
            Verdict::Fail,
            format!("planned by this soak, but no figure: {detail}"),
        ),
        (Ok(()), _) => (
            Verdict::Skipped,
            format!("{detail} (the soak did not run its planned time)"),
        ),
        (Err(why), _) => (
            Verdict::Skipped,
            format!("not planned by this soak: {why}; {detail}"),
        ),
    };
    Check {
        name,
        verdict,
        value: None,
        threshold: Some(threshold),
        unit,
        interval: None,
        detail,
    }
}

/// Analyses a journal. `warm_served`: requests a server process must have completed before
/// its memory samples enter the RSS fit (one cycle of dialogues and one probe round, so the
/// KV pages and allocator pools have reached their working size).
pub fn analyze(entries: &[Entry], cfg: &SoakConfig, warm_served: u64) -> Analysis {
    let th = &cfg.thresholds;
    let windows = cfg.windows();
    let soak_time_s = entries.last().map_or(0.0, |e| e.t_s);
    let mut counts = Counts::default();
    let mut status = RunStatus::Running;
    let mut queries = Vec::new();
    let mut probes = Vec::new();
    let mut rss_points = Vec::new();
    let mut thermal = Vec::new();
    let mut crashes = Vec::new();
    let mut timeouts = Vec::new();
    for e in entries {
        match &e.record {
            Record::Query(q) => {
                counts.queries += 1;
                counts.tokens += q.generated as u64;
                queries.push(q);
            }
            Record::Probe(p) => {
                counts.probes += 1;
                probes.push((e.t_s, p));
            }
            Record::ProbeRound { .. } => counts.probe_rounds += 1,
            Record::Rss(r) => rss_points.push((e.t_s, r)),
            Record::Thermal(t) => thermal.push((e.t_s, t)),
            Record::Crash(f) => crashes.push(FailureAt {
                t_s: e.t_s,
                failure: f.clone(),
            }),
            Record::Timeout(f) => timeouts.push(FailureAt {
                t_s: e.t_s,
                failure: f.clone(),
            }),
            Record::Refused {
                item: ItemKey::Stats,
                code,
                ..
            } => {
                counts.stats_failed += 1;
                counts.stats_unsupported += u64::from(code == "unknown_op");
            }
            Record::Refused { .. } => counts.refused += 1,
            Record::Sensors { thermal_zones, .. } => {
                counts.thermal_zones = Some(counts.thermal_zones.unwrap_or(0).max(*thermal_zones));
            }
            Record::Skipped { .. } => counts.skipped += 1,
            Record::SutStart { .. } => counts.sut_starts += 1,
            Record::Segment { .. } => counts.segments += 1,
            Record::End { reason, .. } => {
                status = match reason {
                    EndReason::Completed => RunStatus::Completed,
                    EndReason::Interrupted => RunStatus::Interrupted,
                    EndReason::Aborted => RunStatus::Aborted,
                }
            }
            Record::Header { .. } | Record::SutStartFailed { .. } | Record::Checkpoint { .. } => {}
        }
    }
    counts.crashes = crashes.len() as u64;
    counts.timeouts = timeouts.len() as u64;
    counts.stats_failed += crashes
        .iter()
        .chain(&timeouts)
        .filter(|f| f.failure.item == ItemKey::Stats)
        .count() as u64;
    let mut plan = Plan::new(cfg, windows, counts.thermal_zones);
    if rss_points.is_empty() && counts.stats_unsupported > 0 {
        plan.memory = Err("the server does not report its memory".to_string());
    }
    let mut checks = vec![
        evidence_check(&counts, status, soak_time_s, cfg.duration_s),
        check(
            "crashes",
            Verdict::pass_if(counts.crashes <= th.max_crashes),
            Some(counts.crashes as f64),
            th.max_crashes as f64,
            "count",
            match crashes.first() {
                None => format!("no SUT crash in {} SUT start(s)", counts.sut_starts),
                Some(c) => format!(
                    "{} crash(es); first at {:.1} s during {} ({})",
                    counts.crashes,
                    c.t_s,
                    c.failure.last_query,
                    c.failure
                        .exit
                        .as_ref()
                        .map_or("no exit status", |x| x.description.as_str())
                ),
            },
        ),
        check(
            "timeouts",
            Verdict::pass_if(counts.timeouts <= th.max_timeouts),
            Some(counts.timeouts as f64),
            th.max_timeouts as f64,
            "count",
            match timeouts.first() {
                None => format!(
                    "no request went {} without an answer",
                    format_duration(cfg.query_timeout_s)
                ),
                Some(t) => format!(
                    "{} stalled request(s); first at {:.1} s during {}",
                    counts.timeouts, t.t_s, t.failure.last_query
                ),
            },
        ),
    ];

    let rss = rss_analysis(&rss_points, windows.warmup_s, warm_served);
    checks.push(rss_check(
        &rss,
        th,
        windows.warmup_s,
        &plan,
        status,
        &counts,
    ));
    checks.push(major_faults_check(
        &rss_points,
        windows.warmup_s,
        warm_served,
        th.max_major_faults_per_h,
        (&plan, status, &counts),
    ));

    let (drift, mmlu, rounds) = drift_analysis(&probes);
    counts.output_drift = drift.len() as u64;
    checks.push(if rounds < 2 {
        without_data(
            "output_drift",
            "count",
            th.max_output_drift as f64,
            &plan.output_drift,
            status,
            format!("{rounds} probe round(s): drift needs two"),
        )
    } else {
        check(
            "output_drift",
            Verdict::pass_if(counts.output_drift <= th.max_output_drift),
            Some(counts.output_drift as f64),
            th.max_output_drift as f64,
            "count",
            match drift.first() {
                None => format!(
                    "{} probe results over {rounds} rounds, all bit-identical to their first round",
                    counts.probes
                ),
                Some(d) => format!(
                    "{} probe result(s) differ; first: {} in round {} at {:.1} s",
                    counts.output_drift, d.probe_id, d.round, d.t_s
                ),
            },
        )
    });

    let latency = latency_analysis(&queries, windows, soak_time_s);
    checks.push(latency_check(&latency, th, &plan, status));

    let stability = stability_analysis(&queries, windows, soak_time_s);
    checks.push(match stability.ratio {
        None => without_data(
            "stability",
            "ratio",
            th.min_stability,
            &plan.stability,
            status,
            format!(
                "{} usable window(s) of {} after the warm-up: stability needs two",
                stability.windows.len(),
                format_duration(windows.stability_s)
            ),
        ),
        Some(r) => check(
            "stability",
            Verdict::pass_if(r >= th.min_stability),
            Some(r),
            th.min_stability,
            "ratio",
            format!(
                "worst {:.2} / best {:.2} tokens/s (while decoding) over {} windows of {}",
                stability.worst.unwrap_or(0.0),
                stability.best.unwrap_or(0.0),
                stability.windows.len(),
                format_duration(windows.stability_s)
            ),
        ),
    });

    let thermal = thermal_analysis(&thermal, th);
    checks.push(thermal_check(&thermal, th, &plan, status));

    let passed = !checks.iter().any(|c| c.verdict == Verdict::Fail);
    Analysis {
        status,
        planned_s: cfg.duration_s,
        soak_time_s,
        windows,
        counts,
        checks,
        passed,
        rss,
        latency,
        stability,
        thermal,
        mmlu,
        crashes,
        timeouts,
        drift,
    }
}

/// A verdict needs evidence: the server started, at least one dialogue turn succeeded, and
/// the run was neither aborted nor interrupted. Without this a soak in which nothing ran
/// (a server that never starts, every request refused) would pass every other check.
fn evidence_check(counts: &Counts, status: RunStatus, soak_time_s: f64, planned_s: f64) -> Check {
    let fail = match status {
        _ if counts.sut_starts == 0 => Some("the server never started".to_string()),
        _ if counts.queries == 0 => Some(format!(
            "no dialogue turn succeeded ({} refused, {} skipped)",
            counts.refused, counts.skipped
        )),
        RunStatus::Aborted => Some(format!(
            "incomplete: aborted at {} of {}",
            format_duration(soak_time_s),
            format_duration(planned_s)
        )),
        RunStatus::Interrupted => Some(format!(
            "incomplete: interrupted at {} of {}",
            format_duration(soak_time_s),
            format_duration(planned_s)
        )),
        RunStatus::Running | RunStatus::Completed => None,
    };
    Check {
        name: "evidence",
        verdict: if fail.is_some() {
            Verdict::Fail
        } else {
            Verdict::Pass
        },
        value: Some(counts.queries as f64),
        threshold: Some(1.0),
        unit: "turns",
        interval: None,
        detail: fail.unwrap_or_else(|| {
            format!(
                "{} successful dialogue turn(s) in {} server start(s)",
                counts.queries, counts.sut_starts
            )
        }),
    }
}

fn rss_analysis(
    points: &[(f64, &super::journal::RssRecord)],
    warmup_s: f64,
    warm_served: u64,
) -> RssAnalysis {
    let mib = |kib: u64| kib as f64 / 1024.0;
    let series: Vec<(f64, u32, f64, bool)> = points
        .iter()
        .map(|(t, r)| {
            (
                *t,
                r.incarnation,
                mib(r.rss_kib),
                *t >= warmup_s && r.served >= warm_served,
            )
        })
        .collect();
    let fit_pts: Vec<(u32, f64, f64)> = series
        .iter()
        .filter(|p| p.3)
        .map(|&(t, g, y, _)| (g, t / 3600.0, y))
        .collect();
    RssAnalysis {
        samples: series.len(),
        samples_in_fit: fit_pts.len(),
        fit: if fit_pts.len() >= MIN_RSS_SAMPLES {
            theil_sen_grouped(&fit_pts)
        } else {
            None
        },
        first_mib: series.first().map(|p| p.2),
        last_mib: series.last().map(|p| p.2),
        peak_mib: series.iter().map(|p| p.2).reduce(f64::max),
        series,
    }
}

/// Major faults per hour of the server after the warm-up: the increase of its cumulative
/// counter between consecutive memory samples of one server process, summed, over the time
/// those pairs span (a restarted server starts its counter again, so pairs across a restart
/// are left out).
pub fn major_faults_per_h(
    points: &[(f64, &super::journal::RssRecord)],
    warmup_s: f64,
    warm_served: u64,
) -> Option<(f64, u64, f64)> {
    let mut faults = 0u64;
    let mut span_s = 0.0;
    let steady = points
        .iter()
        .filter(|(t, r)| *t >= warmup_s && r.served >= warm_served);
    let mut prev: Option<(f64, u32, u32, u64)> = None;
    for (t, r) in steady {
        let Some(m) = r.major_faults else {
            prev = None;
            continue;
        };
        if let Some((t0, inc, pid, m0)) = prev
            && inc == r.incarnation
            && pid == r.pid
            && *t > t0
        {
            faults += m.saturating_sub(m0);
            span_s += t - t0;
        }
        prev = Some((*t, r.incarnation, r.pid, m));
    }
    (span_s > 0.0).then(|| (faults as f64 / (span_s / 3600.0), faults, span_s))
}

fn major_faults_check(
    points: &[(f64, &super::journal::RssRecord)],
    warmup_s: f64,
    warm_served: u64,
    limit: f64,
    (plan, status, counts): (&Plan, RunStatus, &Counts),
) -> Check {
    match major_faults_per_h(points, warmup_s, warm_served) {
        None => without_data(
            "major_faults",
            "1/h",
            limit,
            &plan.memory,
            status,
            format!(
                "fewer than two memory samples of one server after the warm-up ({} sample(s) failed)",
                counts.stats_failed
            ),
        ),
        Some((rate, n, span_s)) => check(
            "major_faults",
            Verdict::pass_if(rate <= limit),
            Some(rate),
            limit,
            "1/h",
            format!(
                "{n} major page fault(s) of the server in {} after the warm-up",
                format_duration(span_s)
            ),
        ),
    }
}

fn rss_check(
    rss: &RssAnalysis,
    th: &Thresholds,
    warmup_s: f64,
    plan: &Plan,
    status: RunStatus,
    counts: &Counts,
) -> Check {
    match &rss.fit {
        None => without_data(
            "rss_growth",
            "MiB/h",
            th.max_rss_growth_mib_per_h,
            &plan.memory,
            status,
            format!(
                "{} of {} memory samples after the warm-up ({} and one cycle per server), {} failed: a fit needs {MIN_RSS_SAMPLES} at distinct times",
                rss.samples_in_fit,
                rss.samples,
                format_duration(warmup_s),
                counts.stats_failed
            ),
        ),
        Some(f) => Check {
            name: "rss_growth",
            verdict: Verdict::pass_if(f.slope <= th.max_rss_growth_mib_per_h),
            value: Some(f.slope),
            threshold: Some(th.max_rss_growth_mib_per_h),
            unit: "MiB/h",
            interval: Some([f.lo, f.hi]),
            detail: format!(
                "Theil–Sen slope {:.3} MiB/h (95% interval {:.3} to {:.3}) over {} samples, {} pairs; RSS {:.1} → {:.1} MiB",
                f.slope,
                f.lo,
                f.hi,
                f.points,
                f.pairs,
                rss.first_mib.unwrap_or(0.0),
                rss.last_mib.unwrap_or(0.0)
            ),
        },
    }
}

fn drift_analysis(
    probes: &[(f64, &super::journal::ProbeRecord)],
) -> (Vec<DriftEvent>, Vec<RoundAccuracy>, usize) {
    let mut reference: BTreeMap<&str, (u32, String)> = BTreeMap::new();
    let mut drift = Vec::new();
    let mut rounds: BTreeMap<u32, (u64, u64)> = BTreeMap::new();
    let mut sorted: Vec<_> = probes.to_vec();
    sorted.sort_by_key(|(_, p)| (p.round, p.index));
    for (t, p) in &sorted {
        let fp = p.fingerprint();
        match reference.get(p.probe_id.as_str()) {
            None => {
                reference.insert(&p.probe_id, (p.round, fp));
            }
            Some((r0, expected)) if *expected != fp => drift.push(DriftEvent {
                round: p.round,
                reference_round: *r0,
                probe_id: p.probe_id.clone(),
                t_s: *t,
                expected: clip(expected),
                got: clip(&fp),
            }),
            Some(_) => {}
        }
        let slot = rounds.entry(p.round).or_default();
        if p.kind == ProbeKind::Mmlu {
            slot.1 += 1;
            if p.choice.is_some() && p.choice == p.answer {
                slot.0 += 1;
            }
        }
    }
    let n_rounds = rounds.len();
    let mmlu = rounds
        .into_iter()
        .filter(|(_, (_, n))| *n > 0)
        .map(|(round, (correct, total))| RoundAccuracy {
            round,
            correct,
            total,
        })
        .collect();
    (drift, mmlu, n_rounds)
}

fn clip(s: &str) -> String {
    let c: String = s.chars().take(160).collect();
    if c.len() < s.len() { c + "…" } else { c }
}

fn latency_analysis(
    queries: &[&super::journal::QueryRecord],
    w: ResolvedWindows,
    end_s: f64,
) -> LatencyAnalysis {
    let first = [w.warmup_s, w.warmup_s + w.latency_s];
    let last = [(end_s - w.latency_s).max(0.0), end_s];
    let mut in_first = Vec::new();
    let mut in_last = Vec::new();
    let mut all_tpot = Vec::new();
    let mut all_ttft = Vec::new();
    let mut tpot_series = Vec::new();
    for q in queries {
        if let Some(ttft) = q.ttft_ms {
            all_ttft.push(ms_to_ns(ttft));
        }
        let Some(tpot) = q.tpot_ms else { continue };
        let ns = ms_to_ns(tpot);
        all_tpot.push(ns);
        tpot_series.push((q.t_end_s, tpot));
        if q.t_end_s >= first[0] && q.t_end_s < first[1] {
            in_first.push(ns);
        }
        if q.t_end_s >= last[0] && q.t_end_s <= last[1] {
            in_last.push(ns);
        }
    }
    let (first_n, last_n) = (in_first.len(), in_last.len());
    let first_p99 = p99_ms(&mut in_first);
    let last_p99 = p99_ms(&mut in_last);
    let disjoint = last[0] >= first[1];
    let drift = match (first_p99, last_p99) {
        (Some(a), Some(b))
            if disjoint
                && a > 0.0
                && first_n >= MIN_WINDOW_QUERIES
                && last_n >= MIN_WINDOW_QUERIES =>
        {
            Some(b / a - 1.0)
        }
        _ => None,
    };
    let mut sorted = all_tpot.clone();
    sorted.sort_unstable();
    LatencyAnalysis {
        first_window_s: first,
        last_window_s: last,
        first_n,
        last_n,
        first_p99_tpot_ms: first_p99,
        last_p99_tpot_ms: last_p99,
        drift,
        all_p50_tpot_ms: percentile(&sorted, 0.5).map(|v| v as f64 / 1e6),
        all_p99_tpot_ms: percentile(&sorted, 0.99).map(|v| v as f64 / 1e6),
        all_p99_ttft_ms: p99_ms(&mut all_ttft),
        tpot_series,
    }
}

fn latency_check(l: &LatencyAnalysis, th: &Thresholds, plan: &Plan, status: RunStatus) -> Check {
    match l.drift {
        None => without_data(
            "latency_drift",
            "fraction",
            th.max_tpot_drift,
            &plan.latency_drift,
            status,
            format!(
                "first steady window {:.0}–{:.0} s has {} turns, last window {:.0}–{:.0} s has {}: the windows must be disjoint with {MIN_WINDOW_QUERIES} turns each",
                l.first_window_s[0],
                l.first_window_s[1],
                l.first_n,
                l.last_window_s[0],
                l.last_window_s[1],
                l.last_n
            ),
        ),
        Some(d) => check(
            "latency_drift",
            Verdict::pass_if(d <= th.max_tpot_drift),
            Some(d),
            th.max_tpot_drift,
            "fraction",
            format!(
                "P99 TPOT {:.2} ms in {:.0}–{:.0} s ({} turns) vs {:.2} ms in {:.0}–{:.0} s ({} turns): {:+.1}%",
                l.last_p99_tpot_ms.unwrap_or(0.0),
                l.last_window_s[0],
                l.last_window_s[1],
                l.last_n,
                l.first_p99_tpot_ms.unwrap_or(0.0),
                l.first_window_s[0],
                l.first_window_s[1],
                l.first_n,
                d * 100.0
            ),
        ),
    }
}

fn stability_analysis(
    queries: &[&super::journal::QueryRecord],
    w: ResolvedWindows,
    end_s: f64,
) -> StabilityAnalysis {
    let mut out = StabilityAnalysis::default();
    if w.stability_s <= 0.0 {
        return out;
    }
    // Decode segments: first → last token, generated − 1 tokens.
    let segs: Vec<(f64, f64, f64)> = queries
        .iter()
        .filter_map(|q| {
            let a = q.t_first_s?;
            (q.generated >= 2 && q.t_end_s > a).then_some((a, q.t_end_s, (q.generated - 1) as f64))
        })
        .collect();
    let mut start = w.warmup_s;
    while start + w.stability_s <= end_s + 1e-9 {
        let end = start + w.stability_s;
        let (mut tokens, mut busy) = (0.0, 0.0);
        for &(a, b, n) in &segs {
            let overlap = b.min(end) - a.max(start);
            if overlap > 0.0 {
                tokens += n * overlap / (b - a);
                busy += overlap;
            }
        }
        let coverage = busy / w.stability_s;
        if coverage >= MIN_WINDOW_COVERAGE && busy > 0.0 {
            out.windows.push(WindowRate {
                start_s: start,
                end_s: end,
                tokens_per_s: tokens / busy,
                coverage,
            });
        } else {
            out.windows_skipped += 1;
        }
        start = end;
    }
    if out.windows.len() >= 2 {
        let rates = out.windows.iter().map(|r| r.tokens_per_s);
        let worst = rates.clone().fold(f64::INFINITY, f64::min);
        let best = rates.fold(f64::NEG_INFINITY, f64::max);
        out.worst = Some(worst);
        out.best = Some(best);
        out.ratio = (best > 0.0).then(|| worst / best);
    }
    out
}

fn time_above(points: &[(f64, Option<f64>)], limit: f64) -> f64 {
    let mut total = 0.0;
    for w in points.windows(2) {
        if let (t0, Some(v)) = w[0]
            && v > limit
        {
            total += (w[1].0 - t0).max(0.0);
        }
    }
    total
}

fn thermal_analysis(
    samples: &[(f64, &super::journal::ThermalRecord)],
    th: &Thresholds,
) -> ThermalAnalysis {
    let mut a = ThermalAnalysis {
        series: samples
            .iter()
            .map(|(t, r)| ThermalPoint {
                t_s: *t,
                soc_c: r.soc_c,
                skin_c: r.skin_c,
                max_c: r.max_c,
            })
            .collect(),
        ..Default::default()
    };
    a.samples = samples
        .iter()
        .filter(|(_, r)| r.max_c.is_some() || r.soc_c.is_some() || r.skin_c.is_some())
        .count();
    let fold = |f: &dyn Fn(&super::journal::ThermalRecord) -> Option<f64>| {
        samples.iter().filter_map(|(_, r)| f(r)).reduce(f64::max)
    };
    a.soc_max_c = fold(&|r| r.soc_c);
    a.skin_max_c = fold(&|r| r.skin_c);
    a.max_c = fold(&|r| r.max_c);
    a.max_zone = samples
        .iter()
        .filter(|(_, r)| r.max_c.is_some() && r.max_c == a.max_c)
        .find_map(|(_, r)| r.max_zone.clone());
    let soc: Vec<(f64, Option<f64>)> = samples.iter().map(|(t, r)| (*t, r.soc_c)).collect();
    let skin: Vec<(f64, Option<f64>)> = samples.iter().map(|(t, r)| (*t, r.skin_c)).collect();
    a.soc_above_limit_s = time_above(&soc, th.soc_limit_c);
    a.skin_above_limit_s = time_above(&skin, th.skin_limit_c);
    a
}

fn thermal_check(t: &ThermalAnalysis, th: &Thresholds, plan: &Plan, status: RunStatus) -> Check {
    if t.samples == 0 {
        return without_data(
            "thermal",
            "s",
            th.max_time_above_limit_s,
            &plan.thermal,
            status,
            "no temperature was read".into(),
        );
    }
    let above = t.soc_above_limit_s + t.skin_above_limit_s;
    let f = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.1} °C"));
    check(
        "thermal",
        Verdict::pass_if(above <= th.max_time_above_limit_s),
        Some(above),
        th.max_time_above_limit_s,
        "s",
        format!(
            "max SoC {} (limit {} °C, {:.0} s above), max skin {} (limit {} °C, {:.0} s above), hottest zone {} {} over {} samples",
            f(t.soc_max_c),
            th.soc_limit_c,
            t.soc_above_limit_s,
            f(t.skin_max_c),
            th.skin_limit_c,
            t.skin_above_limit_s,
            t.max_zone.as_deref().unwrap_or("-"),
            f(t.max_c),
            t.samples
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::super::config::Windows;
    use super::super::journal::{ProbeRecord, QueryRecord, RssRecord, ThermalRecord};
    use super::*;
    use std::path::PathBuf;

    fn cfg(duration_s: f64) -> SoakConfig {
        SoakConfig {
            duration_s,
            checkpoint_every_s: 600.0,
            probe_every_s: 600.0,
            rss_every_s: 60.0,
            telemetry_every_s: 10.0,
            query_timeout_s: 120.0,
            model: PathBuf::from("m.gguf"),
            threads: 1,
            mlock: false,
            prefault: false,
            kv_policy: None,
            isa: None,
            ctx: 2048,
            dialogues: 8,
            max_turn_tokens: None,
            probe_prompts: 1,
            probe_tokens: 4,
            probe_mmlu: 0,
            mmlu_dir: None,
            device: "local".into(),
            sysfs_root: PathBuf::from("/"),
            serve_cmd: None,
            fault: None,
            thresholds: Thresholds::default(),
            windows: Windows {
                latency_s: Some(100.0),
                warmup_s: Some(100.0),
                stability_s: Some(100.0),
            },
        }
    }

    fn e(seq: u64, t_s: f64, record: Record) -> Entry {
        Entry { seq, t_s, record }
    }

    /// A turn with `n` tokens decoded from `t_first` to `t_end` (TTFT 0.1 s).
    fn turn(t_first: f64, t_end: f64, n: usize) -> Record {
        let tpot_ms = (t_end - t_first) * 1e3 / (n - 1) as f64;
        Record::Query(QueryRecord {
            cycle: 0,
            dialogue: 0,
            dialogue_id: "d".into(),
            turn: 0,
            incarnation: 1,
            prompt_tokens: 10,
            reused_tokens: 0,
            generated: n,
            text: String::new(),
            ttft_ms: Some(100.0),
            tpot_ms: Some(tpot_ms),
            latency_ms: 100.0 + (t_end - t_first) * 1e3,
            t_start_s: t_first - 0.1,
            t_first_s: Some(t_first),
            t_end_s: t_end,
        })
    }

    fn find<'a>(a: &'a Analysis, name: &str) -> &'a Check {
        a.checks.iter().find(|c| c.name == name).unwrap()
    }

    #[test]
    fn latency_drift_compares_loadgen_p99s_of_the_two_windows() {
        // 500 s soak, windows of 100 s: first steady 100–200 s, last 400–500 s.
        // First window: 10 turns with TPOT 10..=19 ms → P99 = sorted[floor(10·0.99)] = 19 ms.
        // Last window: 10 turns with TPOT 20..=29 ms → P99 = 29 ms; drift = 29/19 − 1.
        let mut entries = Vec::new();
        for i in 0..10 {
            let t = 110.0 + 5.0 * i as f64;
            let tpot = 0.010 + 0.001 * i as f64;
            entries.push(e(0, t, turn(t - 10.0 * tpot, t, 11)));
        }
        for i in 0..10 {
            let t = 410.0 + 5.0 * i as f64;
            let tpot = 0.020 + 0.001 * i as f64;
            entries.push(e(0, t, turn(t - 10.0 * tpot, t, 11)));
        }
        entries.push(e(
            0,
            500.0,
            Record::Checkpoint {
                queries: 0,
                probes: 0,
                crashes: 0,
                timeouts: 0,
            },
        ));
        let a = analyze(&entries, &cfg(500.0), 0);
        assert_eq!((a.latency.first_n, a.latency.last_n), (10, 10));
        let first = a.latency.first_p99_tpot_ms.unwrap();
        let last = a.latency.last_p99_tpot_ms.unwrap();
        assert!(
            (first - 19.0).abs() < 1e-3 && (last - 29.0).abs() < 1e-3,
            "{first} {last}"
        );
        let c = find(&a, "latency_drift");
        assert_eq!(c.verdict, Verdict::Fail);
        assert!((c.value.unwrap() - (29.0 / 19.0 - 1.0)).abs() < 1e-4);
    }

    #[test]
    fn stability_is_worst_over_best_decode_rate_per_window() {
        // Windows 100–200, 200–300, 300–400 s. Each holds 40 s of decoding: at 10, 10 and
        // 8 tokens/s. A turn straddling 195–205 s splits its tokens by overlap.
        let mut entries = vec![
            e(0, 140.0, turn(100.0, 140.0, 401)),
            e(0, 240.0, turn(200.0, 240.0, 401)),
            e(0, 340.0, turn(300.0, 340.0, 321)),
        ];
        entries.push(e(
            0,
            400.0,
            Record::Checkpoint {
                queries: 0,
                probes: 0,
                crashes: 0,
                timeouts: 0,
            },
        ));
        let a = analyze(&entries, &cfg(400.0), 0);
        let w = &a.stability.windows;
        assert_eq!(w.len(), 3);
        assert!((w[0].tokens_per_s - 10.0).abs() < 1e-9 && (w[2].tokens_per_s - 8.0).abs() < 1e-9);
        assert!((w[0].coverage - 0.4).abs() < 1e-9);
        let c = find(&a, "stability");
        assert_eq!(c.verdict, Verdict::Fail);
        assert!((c.value.unwrap() - 0.8).abs() < 1e-9);
        // A window that barely decodes (10% < 25%) is left out rather than called slow.
        let entries = vec![
            e(0, 140.0, turn(100.0, 140.0, 401)),
            e(0, 210.0, turn(200.0, 210.0, 11)),
            e(0, 340.0, turn(300.0, 340.0, 401)),
            e(
                0,
                400.0,
                Record::Checkpoint {
                    queries: 0,
                    probes: 0,
                    crashes: 0,
                    timeouts: 0,
                },
            ),
        ];
        let a = analyze(&entries, &cfg(400.0), 0);
        assert_eq!(
            (a.stability.windows.len(), a.stability.windows_skipped),
            (2, 1)
        );
        assert_eq!(find(&a, "stability").verdict, Verdict::Pass);
    }

    fn probe(round: u32, id: &str, tokens: Vec<u32>) -> Record {
        Record::Probe(ProbeRecord {
            round,
            index: 0,
            probe_id: id.into(),
            kind: ProbeKind::Greedy,
            incarnation: 1,
            tokens: Some(tokens),
            text: None,
            logprobs: None,
            logprob_bits: None,
            answer: None,
            choice: None,
            latency_ms: 1.0,
        })
    }

    #[test]
    fn drift_counts_results_that_differ_from_the_first_round() {
        let entries = vec![
            e(0, 1.0, probe(0, "greedy/0", vec![1, 2, 3])),
            e(0, 2.0, probe(1, "greedy/0", vec![1, 2, 3])),
            e(0, 3.0, probe(2, "greedy/0", vec![1, 2, 4])),
            e(0, 4.0, probe(3, "greedy/0", vec![1, 2, 4])),
        ];
        let a = analyze(&entries, &cfg(10.0), 0);
        assert_eq!(a.counts.output_drift, 2);
        assert_eq!(
            (
                a.drift[0].round,
                a.drift[0].expected.as_str(),
                a.drift[0].got.as_str()
            ),
            (2, "1,2,3", "1,2,4")
        );
        assert_eq!(find(&a, "output_drift").verdict, Verdict::Fail);
        let one = analyze(&entries[..1], &cfg(10.0), 0);
        assert_eq!(find(&one, "output_drift").verdict, Verdict::Skipped);
    }

    fn rss(t: f64, inc: u32, served: u64, kib: u64) -> Entry {
        e(
            0,
            t,
            Record::Rss(RssRecord {
                incarnation: inc,
                pid: 1,
                served,
                rss_kib: kib,
                rss_anon_kib: 0,
                rss_file_kib: 0,
                vm_hwm_kib: kib,
                major_faults: None,
            }),
        )
    }

    #[test]
    fn major_faults_per_hour_sum_increases_within_one_server_after_the_warm_up() {
        let rec = |inc: u32, served: u64, major: Option<u64>| RssRecord {
            incarnation: inc,
            pid: 10 + inc,
            served,
            rss_kib: 1,
            rss_anon_kib: 0,
            rss_file_kib: 0,
            vm_hwm_kib: 1,
            major_faults: major,
        };
        let pts = [
            (50.0, rec(1, 0, Some(900))), // before the warm-up ends: not counted
            (100.0, rec(1, 5, Some(1000))),
            (200.0, rec(1, 9, Some(1010))),
            // A restarted server counts from its own start: the pair across is skipped.
            (300.0, rec(2, 1, Some(5))),
            (400.0, rec(2, 4, Some(7))),
        ];
        let refs: Vec<(f64, &RssRecord)> = pts.iter().map(|(t, r)| (*t, r)).collect();
        let (rate, n, span) = major_faults_per_h(&refs, 100.0, 0).unwrap();
        assert_eq!(n, 12);
        assert_eq!(span, 200.0);
        assert!((rate - 12.0 * 3600.0 / 200.0).abs() < 1e-9);
        let c = cfg(1000.0);
        let plan = Plan::new(&c, c.windows(), None);
        let ctx = (&plan, RunStatus::Completed, &Counts::default());
        assert_eq!(
            major_faults_check(&refs, 100.0, 0, 100.0, ctx).verdict,
            Verdict::Fail
        );
        assert_eq!(
            major_faults_check(&refs, 100.0, 0, 300.0, ctx).verdict,
            Verdict::Pass
        );
        // Samples without the counter (older journals) give no figure.
        let old: Vec<(f64, &RssRecord)> = vec![(1.0, &pts[1].1), (2.0, &pts[1].1)];
        let none = rec(1, 1, None);
        assert!(major_faults_per_h(&[(1.0, &none), (2.0, &none)], 0.0, 0).is_none());
        assert!(major_faults_per_h(&old, 0.0, 0).is_some());
    }

    #[test]
    fn rss_fit_skips_warm_up_and_restarts() {
        // 2 MiB/h after warm-up: 1024 KiB per half hour. Warm-up samples (t < 100 s or a server
        // with fewer than 5 requests done) rise steeply and must not count; the second server
        // starts lower.
        let mut entries = vec![
            rss(10.0, 1, 10, 50_000),
            rss(50.0, 1, 10, 90_000),
            rss(200.0, 1, 2, 99_000),
        ];
        for k in 0..6 {
            entries.push(rss(200.0 + 1800.0 * k as f64, 1, 10, 100_000 + 1024 * k));
        }
        for k in 0..6 {
            entries.push(rss(12_000.0 + 1800.0 * k as f64, 2, 10, 80_000 + 1024 * k));
        }
        let a = analyze(&entries, &cfg(30_000.0), 5);
        assert_eq!(a.rss.samples_in_fit, 12);
        let f = a.rss.fit.unwrap();
        assert!((f.slope - 2.0).abs() < 1e-9, "{f:?}");
        assert_eq!(find(&a, "rss_growth").verdict, Verdict::Fail);
    }

    fn end(t: f64) -> Entry {
        e(
            0,
            t,
            Record::End {
                reason: EndReason::Completed,
                detail: String::new(),
            },
        )
    }

    fn refused_stats(t: f64) -> Entry {
        e(
            0,
            t,
            Record::Refused {
                item: ItemKey::Stats,
                code: "runtime".into(),
                message: "refused".into(),
            },
        )
    }

    #[test]
    fn a_completed_soak_whose_memory_samples_all_failed_fails_the_memory_checks() {
        // A 1000 s soak sampling every 60 s plans 15 samples after its 100 s warm-up; every
        // one was refused.
        let c = cfg(1000.0);
        let mut entries: Vec<Entry> = (2..17).map(|k| refused_stats(60.0 * k as f64)).collect();
        entries.push(end(1000.0));
        let a = analyze(&entries, &c, 0);
        assert_eq!(a.counts.stats_failed, 15);
        for name in ["rss_growth", "major_faults"] {
            let ch = find(&a, name);
            assert_eq!(ch.verdict, Verdict::Fail, "{ch:?}");
            assert!(ch.detail.contains("15 failed") || ch.detail.contains("15 sample(s) failed"));
        }
        assert!(!a.passed);
        // The same journal before its end (a live checkpoint) has not yet failed.
        let live = analyze(&entries[..entries.len() - 1], &c, 0);
        assert_eq!(find(&live, "rss_growth").verdict, Verdict::Skipped);
        // A soak whose settings plan fewer than three samples after the warm-up skips them.
        let sparse = SoakConfig {
            rss_every_s: 400.0,
            ..cfg(1000.0)
        };
        let a = analyze(&entries, &sparse, 0);
        let ch = find(&a, "rss_growth");
        assert_eq!(ch.verdict, Verdict::Skipped);
        assert!(ch.detail.starts_with("not planned by this soak"), "{ch:?}");
        // A server that does not know `stats` (a foreign server over HTTP) cannot give memory
        // figures: the checks are not planned.
        let mut foreign: Vec<Entry> = (2..17)
            .map(|k| {
                e(
                    0,
                    60.0 * k as f64,
                    Record::Refused {
                        item: ItemKey::Stats,
                        code: "unknown_op".into(),
                        message: "the server's /health reports no memory".into(),
                    },
                )
            })
            .collect();
        foreign.push(end(1000.0));
        let a = analyze(&foreign, &c, 0);
        let ch = find(&a, "rss_growth");
        assert_eq!(ch.verdict, Verdict::Skipped, "{ch:?}");
        assert!(ch.detail.contains("does not report its memory"), "{ch:?}");
    }

    #[test]
    fn a_device_with_sensors_that_gave_no_temperature_fails_the_thermal_check() {
        let c = cfg(1000.0);
        let sensors = |n: usize| {
            e(
                0,
                0.0,
                Record::Sensors {
                    thermal_zones: n,
                    energy_meter: false,
                },
            )
        };
        let with = analyze(&[sensors(3), end(1000.0)], &c, 0);
        assert_eq!(find(&with, "thermal").verdict, Verdict::Fail);
        assert_eq!(with.counts.thermal_zones, Some(3));
        let without = analyze(&[sensors(0), end(1000.0)], &c, 0);
        let ch = find(&without, "thermal");
        assert_eq!(ch.verdict, Verdict::Skipped);
        assert!(ch.detail.contains("no temperature sensor"), "{ch:?}");
    }

    #[test]
    fn planned_windows_without_turns_fail_a_completed_soak() {
        // Windows of 100 s after a 100 s warm-up in a 1000 s soak: the latency windows are
        // disjoint and nine stability windows fit, yet no turn came after 150 s.
        let c = cfg(1000.0);
        let mut entries: Vec<Entry> = (0..6)
            .map(|k| {
                e(
                    0,
                    101.0 + 5.0 * k as f64,
                    turn(100.0 + 5.0 * k as f64, 101.0 + 5.0 * k as f64, 8),
                )
            })
            .collect();
        entries.push(end(1000.0));
        let a = analyze(&entries, &c, 0);
        assert_eq!(find(&a, "latency_drift").verdict, Verdict::Fail);
        assert_eq!(find(&a, "stability").verdict, Verdict::Fail);
        // A soak too short for disjoint windows skips them instead.
        let short = SoakConfig {
            windows: Windows {
                latency_s: Some(500.0),
                warmup_s: Some(100.0),
                stability_s: Some(600.0),
            },
            ..cfg(1000.0)
        };
        let a = analyze(&entries, &short, 0);
        assert_eq!(find(&a, "latency_drift").verdict, Verdict::Skipped);
        assert_eq!(find(&a, "stability").verdict, Verdict::Skipped);
    }

    #[test]
    fn time_above_limit_sums_intervals_that_start_above() {
        let th = |t: f64, skin: f64| {
            e(
                0,
                t,
                Record::Thermal(ThermalRecord {
                    soc_c: Some(50.0),
                    skin_c: Some(skin),
                    max_c: Some(50.0),
                    max_zone: Some("cpu".into()),
                    power_mw: None,
                }),
            )
        };
        // Skin limit 43 °C: above during [10, 20) and [20, 30): 20 s.
        let entries = vec![
            th(0.0, 40.0),
            th(10.0, 44.0),
            th(20.0, 45.0),
            th(30.0, 42.0),
            th(40.0, 41.0),
        ];
        let a = analyze(&entries, &cfg(40.0), 0);
        assert_eq!(a.thermal.skin_above_limit_s, 20.0);
        assert_eq!(a.thermal.skin_max_c, Some(45.0));
        let c = find(&a, "thermal");
        assert_eq!((c.verdict, c.value), (Verdict::Fail, Some(20.0)));
        let none = analyze(&[], &cfg(40.0), 0);
        assert_eq!(find(&none, "thermal").verdict, Verdict::Skipped);
    }
}
