//! The checks of a soak, computed from its journal alone (so a live checkpoint, a resumed run
//! and the final report agree): crashes, timeouts, RSS growth (grouped Theil–Sen), output
//! drift, latency drift (P99 TPOT), stability (worst/best window throughput) and thermal
//! limits. Rules and defaults: `docs/SOAK.md`.

use std::collections::BTreeMap;

use pocketperf_scenarios::stats::percentile;
use serde::Serialize;

use super::config::{ResolvedWindows, SoakConfig, Thresholds, format_duration};
use super::fit::{TheilSen, theil_sen_grouped};
use super::journal::{EndReason, Entry, FailureRecord, ProbeKind, Record};

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
            Record::Refused { .. } => counts.refused += 1,
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
    let mut checks = vec![
        check(
            "crashes",
            if counts.crashes <= th.max_crashes {
                Verdict::Pass
            } else {
                Verdict::Fail
            },
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
            if counts.timeouts <= th.max_timeouts {
                Verdict::Pass
            } else {
                Verdict::Fail
            },
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
    checks.push(rss_check(&rss, th, windows.warmup_s));

    let (drift, mmlu, rounds) = drift_analysis(&probes);
    counts.output_drift = drift.len() as u64;
    checks.push(if rounds < 2 {
        Check {
            name: "output_drift",
            verdict: Verdict::Skipped,
            value: None,
            threshold: Some(th.max_output_drift as f64),
            unit: "count",
            interval: None,
            detail: format!("{rounds} probe round(s): drift needs two"),
        }
    } else {
        check(
            "output_drift",
            if counts.output_drift <= th.max_output_drift {
                Verdict::Pass
            } else {
                Verdict::Fail
            },
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
    checks.push(latency_check(&latency, th));

    let stability = stability_analysis(&queries, windows, soak_time_s);
    checks.push(match stability.ratio {
        None => Check {
            name: "stability",
            verdict: Verdict::Skipped,
            value: None,
            threshold: Some(th.min_stability),
            unit: "ratio",
            interval: None,
            detail: format!(
                "{} usable window(s) of {} after the warm-up: stability needs two",
                stability.windows.len(),
                format_duration(windows.stability_s)
            ),
        },
        Some(r) => check(
            "stability",
            if r >= th.min_stability {
                Verdict::Pass
            } else {
                Verdict::Fail
            },
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
    checks.push(thermal_check(&thermal, th));

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

fn rss_check(rss: &RssAnalysis, th: &Thresholds, warmup_s: f64) -> Check {
    match &rss.fit {
        None => Check {
            name: "rss_growth",
            verdict: Verdict::Skipped,
            value: None,
            threshold: Some(th.max_rss_growth_mib_per_h),
            unit: "MiB/h",
            interval: None,
            detail: format!(
                "{} of {} memory samples after the warm-up ({} and one cycle per server): a fit needs {MIN_RSS_SAMPLES} at distinct times",
                rss.samples_in_fit,
                rss.samples,
                format_duration(warmup_s)
            ),
        },
        Some(f) => Check {
            name: "rss_growth",
            verdict: if f.slope <= th.max_rss_growth_mib_per_h {
                Verdict::Pass
            } else {
                Verdict::Fail
            },
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

fn latency_check(l: &LatencyAnalysis, th: &Thresholds) -> Check {
    match l.drift {
        None => Check {
            name: "latency_drift",
            verdict: Verdict::Skipped,
            value: None,
            threshold: Some(th.max_tpot_drift),
            unit: "fraction",
            interval: None,
            detail: format!(
                "first steady window {:.0}–{:.0} s has {} turns, last window {:.0}–{:.0} s has {}: the windows must be disjoint with {MIN_WINDOW_QUERIES} turns each",
                l.first_window_s[0],
                l.first_window_s[1],
                l.first_n,
                l.last_window_s[0],
                l.last_window_s[1],
                l.last_n
            ),
        },
        Some(d) => check(
            "latency_drift",
            if d <= th.max_tpot_drift {
                Verdict::Pass
            } else {
                Verdict::Fail
            },
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

fn thermal_check(t: &ThermalAnalysis, th: &Thresholds) -> Check {
    if t.samples == 0 {
        return Check {
            name: "thermal",
            verdict: Verdict::Skipped,
            value: None,
            threshold: Some(th.max_time_above_limit_s),
            unit: "s",
            interval: None,
            detail: "no temperature sensor was read (none on this device; `--device sim:PROFILE` \
                     simulates a handset)"
                .into(),
        };
    }
    let above = t.soc_above_limit_s + t.skin_above_limit_s;
    let f = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.1} °C"));
    check(
        "thermal",
        if above <= th.max_time_above_limit_s {
            Verdict::Pass
        } else {
            Verdict::Fail
        },
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
