//! Results of a run: per-query records, latency and token metrics, early stopping and the
//! VALID/INVALID verdict with every cause, following LoadGen's results.cc rules:
//! percentiles `sorted[floor(n·p)]`; min duration measured to the last issued (SingleStream),
//! last scheduled (Server) or slowest sample (Offline); early stopping per scenario; Server
//! latency, TTFT and TPOT bounds at the target percentile. PocketPerf adds causes LoadGen
//! cannot see: a query timeout, SUT protocol errors and Server completed QPS falling below
//! the scheduled rate.

use serde::Serialize;

use crate::early_stopping::{self, EarlyStoppingOutcome};
use crate::sampling::{SamplePlan, SampleSeq, offline_sample_count};
use crate::settings::{Scenario, TestSettings};
use crate::stats::{LatencyStats, percentile, percentile_index, select_kth, tpot_ns};
use crate::sut::Records;
use crate::warmup::WarmupQuery;

/// Why issuing stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum EndReason {
    /// Minimum query count and duration met (Offline: the batch completed).
    Natural,
    /// `max_query_count` reached.
    MaxQueries,
    /// `max_duration` reached.
    MaxDuration,
    /// A query exceeded `query_timeout`.
    Timeout,
}

impl EndReason {
    /// LoadGen-style log message.
    pub fn message(self) -> &'static str {
        match self {
            EndReason::Natural => "Ending naturally: Minimum query count and test duration met.",
            EndReason::MaxQueries => "Ending early: Max query count reached.",
            EndReason::MaxDuration => "Ending early: Max test duration reached.",
            EndReason::Timeout => "Ending early: A query exceeded the query timeout.",
        }
    }
}

/// One reason a result is INVALID.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub enum InvalidCause {
    /// The run was shorter than `min_duration`.
    MinDurationNotMet {
        /// Required, ns.
        required_ns: u64,
        /// Measured per the scenario's rule, ns.
        actual_ns: u64,
    },
    /// Fewer queries completed than `min_query_count` (Offline: than the generated batch).
    MinQueriesNotMet {
        /// Required.
        required: u64,
        /// Completed.
        completed: u64,
    },
    /// Early stopping not satisfied for `series` (`latency`, `ttft` or `tpot`).
    EarlyStoppingNotMet {
        /// Which series.
        series: String,
    },
    /// Server: latency at the target percentile over the bound.
    LatencyOverBound {
        /// Percentile (fraction).
        percentile: f64,
        /// Measured, ns.
        value_ns: u64,
        /// Bound, ns.
        bound_ns: u64,
    },
    /// Server token mode: TTFT at the target percentile over `ttft_latency`.
    TtftOverBound {
        /// Percentile (fraction).
        percentile: f64,
        /// Measured, ns.
        value_ns: u64,
        /// Bound, ns.
        bound_ns: u64,
    },
    /// Server token mode: TPOT at the target percentile over `tpot_latency`.
    TpotOverBound {
        /// Percentile (fraction).
        percentile: f64,
        /// Measured, ns.
        value_ns: u64,
        /// Bound, ns.
        bound_ns: u64,
    },
    /// Server: completed rate below the scheduled rate by more than the tolerance.
    QpsBelowScheduled {
        /// Scheduled samples/s.
        scheduled_qps: f64,
        /// Completed samples/s.
        completed_qps: f64,
    },
    /// A query never completed within `query_timeout`.
    SutTimeout {
        /// Query id.
        query_id: u64,
        /// Its sample index.
        sample_index: u64,
        /// Timeout, ms.
        timeout_ms: u64,
    },
    /// The SUT reported queries as failed (no output, no latency).
    SutFailed {
        /// How many failed.
        count: u64,
        /// The first failure, as reported.
        first: String,
    },
    /// The SUT reported unknown or already-completed queries.
    SutProtocolErrors {
        /// How many reports were refused.
        count: u64,
    },
    /// Token mode, but completed queries carried no first-token report.
    FirstTokenMissing {
        /// Queries without one.
        queries: u64,
    },
    /// No query completed.
    NoQueriesCompleted,
}

impl std::fmt::Display for InvalidCause {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            InvalidCause::MinDurationNotMet {
                required_ns,
                actual_ns,
            } => write!(f, "min duration not met: {actual_ns} ns < {required_ns} ns"),
            InvalidCause::MinQueriesNotMet {
                required,
                completed,
            } => write!(f, "min queries not met: {completed} < {required}"),
            InvalidCause::EarlyStoppingNotMet { series } => {
                write!(f, "early stopping not satisfied ({series})")
            }
            InvalidCause::LatencyOverBound {
                percentile,
                value_ns,
                bound_ns,
            } => write!(
                f,
                "{:.1}th percentile latency {value_ns} ns over the bound {bound_ns} ns",
                percentile * 100.0
            ),
            InvalidCause::TtftOverBound {
                percentile,
                value_ns,
                bound_ns,
            } => write!(
                f,
                "{:.1}th percentile TTFT {value_ns} ns over ttft_latency {bound_ns} ns",
                percentile * 100.0
            ),
            InvalidCause::TpotOverBound {
                percentile,
                value_ns,
                bound_ns,
            } => write!(
                f,
                "{:.1}th percentile TPOT {value_ns} ns over tpot_latency {bound_ns} ns",
                percentile * 100.0
            ),
            InvalidCause::QpsBelowScheduled {
                scheduled_qps,
                completed_qps,
            } => write!(
                f,
                "completed {completed_qps:.3} samples/s below scheduled {scheduled_qps:.3}: \
                 the SUT did not keep up"
            ),
            InvalidCause::SutTimeout {
                query_id,
                sample_index,
                timeout_ms,
            } => write!(
                f,
                "query {query_id} (sample {sample_index}) did not complete within {timeout_ms} ms"
            ),
            InvalidCause::SutFailed { count, first } => {
                write!(f, "{count} queries failed in the SUT (first: {first})")
            }
            InvalidCause::SutProtocolErrors { count } => {
                write!(
                    f,
                    "{count} SUT reports referred to unknown or finished queries"
                )
            }
            InvalidCause::FirstTokenMissing { queries } => write!(
                f,
                "{queries} completed queries carried no first-token report in token mode"
            ),
            InvalidCause::NoQueriesCompleted => write!(f, "no query completed"),
        }
    }
}

/// One accuracy-log entry (LoadGen's `mlperf_log_accuracy.json` row).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AccuracyEntry {
    /// Sequence number in the log.
    pub seq_id: u64,
    /// QSL sample index.
    pub qsl_idx: u64,
    /// Output bytes (hex-encoded in the log).
    pub data: Vec<u8>,
    /// Token count, when the SUT reported one.
    pub token_count: Option<u64>,
}

/// Accuracy pass output: entries, plus (sample index, query id) of a timed-out query.
pub(crate) type AccuracyPass = (Vec<AccuracyEntry>, Option<(u64, u64)>);

/// Raw records of one performance pass (engine → results).
pub(crate) struct PassRecords {
    pub(crate) rec: Records,
    pub(crate) start_ns: u64,
    pub(crate) end: EndReason,
    pub(crate) timed_out: Option<u64>,
}

/// One query as measured (times on the run clock, ns).
#[derive(Debug, Clone, Serialize)]
pub struct QueryRecord<'a> {
    /// Query id (issue order).
    pub id: u64,
    /// QSL sample index.
    pub sample_index: u64,
    /// Issue time (Server: scheduled arrival).
    pub issue_ns: u64,
    /// First token time, when reported.
    pub first_token_ns: Option<u64>,
    /// Each token's time, when the SUT streamed them.
    pub token_ns: &'a [u64],
    /// Completion time; `None` if it never completed.
    pub complete_ns: Option<u64>,
    /// Output tokens reported.
    pub tokens: u64,
}

/// Metrics of the performance pass.
#[derive(Debug, Clone, Serialize)]
pub struct PerformanceResult {
    /// Queries issued.
    pub queries_issued: u64,
    /// Queries completed.
    pub queries_completed: u64,
    /// Run start on the run clock, ns.
    pub start_ns: u64,
    /// Why issuing stopped.
    pub end_reason: EndReason,
    /// Samples LoadGen would require (SingleStream/Server: min_query_count; Offline: the
    /// generated batch size before any max_query_count cap).
    pub min_sample_count: u64,
    /// Last issue time − start (SingleStream), ns.
    pub final_query_issued_ns: u64,
    /// Last scheduled arrival − start (Server), ns.
    pub final_query_scheduled_ns: u64,
    /// Last completion − start, ns.
    pub final_query_done_ns: u64,
    /// Query latency stats (completion − issue).
    pub latency: Option<LatencyStats>,
    /// Latency at the scenario's target percentile.
    pub target_percentile: f64,
    /// `sorted[floor(n·p)]` at the target percentile.
    pub target_latency_ns: Option<u64>,
    /// TTFT at the target percentile.
    pub target_ttft_ns: Option<u64>,
    /// TPOT at the target percentile.
    pub target_tpot_ns: Option<u64>,
    /// Server: latencies over `target_latency`.
    pub overlatency_query_count: u64,
    /// Time to first token stats.
    pub ttft: Option<LatencyStats>,
    /// Time per output token stats over queries with ≥ 2 tokens.
    pub tpot: Option<LatencyStats>,
    /// Inter-token latency stats over all streamed token gaps (falls back to nothing when
    /// the SUT did not stream tokens).
    pub inter_token: Option<LatencyStats>,
    /// Completed queries with fewer than two tokens (TPOT undefined).
    pub tpot_undefined_count: u64,
    /// Completed queries without a first-token report.
    pub first_token_missing: u64,
    /// Total output tokens.
    pub total_tokens: u64,
    /// Output tokens per second without the "with overhead" bias: SingleStream divides by
    /// the summed query latencies (time the SUT was working; LoadGen's "TPS w/o loadgen
    /// overhead"), Offline by the slowest sample, Server by first issue to last completion.
    pub tokens_per_second: f64,
    /// LoadGen's "TPS w/ loadgen overhead" (SingleStream: n queries' tokens over the first
    /// n − 1 issue intervals, inflated by n/(n − 1) and deflated by harness gaps); equal to
    /// `tokens_per_second` elsewhere.
    pub tokens_per_second_with_overhead: f64,
    /// Total tokens / (last completion − first issue) (LoadGen's
    /// `result_completed_tokens_per_second`).
    pub completed_tokens_per_second: f64,
    /// SingleStream: (n − 1) / last issue time (LoadGen's "QPS w/ loadgen overhead").
    pub qps_with_overhead: f64,
    /// SingleStream: 1 / mean latency (LoadGen's "QPS w/o loadgen overhead").
    pub qps_without_overhead: f64,
    /// Server: (n − 1) / last scheduled time.
    pub scheduled_qps: f64,
    /// Server: (n − 1) / last completion time.
    pub completed_qps: f64,
    /// Offline: samples / slowest latency.
    pub samples_per_second: f64,
    /// Early stopping on query latency (non-token mode).
    pub early_stopping: Option<EarlyStoppingOutcome>,
    /// Early stopping on TTFT (token mode).
    pub early_stopping_ttft: Option<EarlyStoppingOutcome>,
    /// Early stopping on TPOT (token mode).
    pub early_stopping_tpot: Option<EarlyStoppingOutcome>,
    /// Min duration met.
    pub min_duration_met: bool,
    /// Min queries met.
    pub min_queries_met: bool,
    /// Server bounds met (always true elsewhere).
    pub perf_constraints_met: bool,
    /// Early stopping met.
    pub early_stopping_met: bool,
    /// Query that timed out, if any.
    pub timed_out_query: Option<u64>,
    /// SUT protocol errors (refused reports).
    pub num_errors: u64,
    /// The first refused reports, verbatim.
    pub errors: Vec<String>,
    /// Queries the SUT reported as failed.
    pub num_failed: u64,
    /// The first failure reports.
    pub failures: Vec<String>,
}

/// Everything a run produced.
#[derive(Serialize)]
pub struct TestResult {
    /// Settings the run used.
    pub settings: TestSettings,
    /// SUT name.
    pub sut_name: String,
    /// QSL name.
    pub qsl_name: String,
    /// QSL total sample count.
    pub qsl_total_count: u64,
    /// Samples the accuracy pass covers (the QSL total unless overridden).
    pub accuracy_sample_count: u64,
    /// Performance sample count used.
    pub performance_sample_count: u64,
    /// The loaded performance sample set, in load order.
    pub loaded_set: Vec<u64>,
    /// Performance pass, when the mode runs one.
    pub performance: Option<PerformanceResult>,
    /// Accuracy log entries, when the mode runs an accuracy pass.
    pub accuracy: Option<Vec<AccuracyEntry>>,
    /// VALID when empty.
    pub invalid_causes: Vec<InvalidCause>,
    /// Warm-up queries run before the performance pass (never part of it).
    pub warmup: Vec<WarmupQuery>,
    #[serde(skip)]
    records: Option<Records>,
    #[serde(skip)]
    sample_plan: SamplePlan,
}

impl std::fmt::Debug for TestResult {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestResult")
            .field("sut_name", &self.sut_name)
            .field("performance", &self.performance)
            .field("invalid_causes", &self.invalid_causes)
            .finish_non_exhaustive()
    }
}

fn secs(ns: u64) -> f64 {
    ns as f64 / 1e9
}

fn sorted(mut v: Vec<u64>) -> Vec<u64> {
    v.sort_unstable();
    v
}

impl TestResult {
    /// Whether every validity rule held.
    pub fn is_valid(&self) -> bool {
        self.invalid_causes.is_empty()
    }

    /// Per-query records of the performance pass, in issue order (sample indices are
    /// regenerated from the seed, so this costs nothing to keep).
    pub fn query_records(&self) -> impl Iterator<Item = QueryRecord<'_>> + '_ {
        let rec = self.records.as_ref();
        let n = rec.map(|r| r.issued()).unwrap_or(0);
        let mut seq = (n > 0).then(|| SampleSeq::new(&self.loaded_set, &self.sample_plan));
        (0..n).filter_map(move |id| {
            let r = rec?;
            let i = id as usize;
            Some(QueryRecord {
                id,
                sample_index: seq.as_mut()?.next_sample(),
                issue_ns: r.issue_of(i),
                first_token_ns: r.first_token_of(i),
                token_ns: r.token_times_of(i),
                complete_ns: r.completion(i),
                tokens: r.tokens_of(i),
            })
        })
    }

    #[allow(clippy::too_many_arguments)]
    pub(crate) fn build(
        settings: TestSettings,
        sut_name: String,
        qsl_name: String,
        qsl_total_count: u64,
        accuracy_sample_count: u64,
        performance_sample_count: u64,
        loaded_set: Vec<u64>,
        sample_plan: SamplePlan,
        perf: Option<PassRecords>,
        accuracy: Option<AccuracyPass>,
    ) -> TestResult {
        let mut causes = Vec::new();
        let mut acc_entries = None;
        if let Some((entries, timeout)) = accuracy {
            if let Some((sample_index, query_id)) = timeout {
                causes.push(InvalidCause::SutTimeout {
                    query_id,
                    sample_index,
                    timeout_ms: settings.query_timeout_ms,
                });
            }
            acc_entries = Some(entries);
        }
        let mut records = None;
        let mut performance = None;
        if let Some(pass) = perf {
            let (p, mut c) = analyze(&settings, &loaded_set, &sample_plan, &pass);
            causes.append(&mut c);
            performance = Some(p);
            records = Some(pass.rec);
        }
        TestResult {
            settings,
            sut_name,
            qsl_name,
            qsl_total_count,
            accuracy_sample_count,
            performance_sample_count,
            loaded_set,
            performance,
            accuracy: acc_entries,
            invalid_causes: causes,
            warmup: Vec::new(),
            records,
            sample_plan,
        }
    }
}

fn analyze(
    s: &TestSettings,
    loaded: &[u64],
    plan: &SamplePlan,
    pass: &PassRecords,
) -> (PerformanceResult, Vec<InvalidCause>) {
    let r = &pass.rec;
    let start = pass.start_ns;
    let n_issued = r.issued();
    // Offline issues everything at one instant: its latencies are summarized in place from
    // the completion column instead of a second, sorted copy (10M samples stay in 80 MB).
    let in_place = r.single_issue;
    let mut lat = Vec::with_capacity(if in_place.is_some() {
        0
    } else {
        r.completed as usize
    });
    let mut ttft = Vec::new();
    let mut tpot = Vec::new();
    let mut itl = Vec::new();
    let (mut tpot_undef, mut ft_missing, mut total_tokens) = (0u64, 0u64, 0u64);
    let (mut final_issue, mut final_done) = (0u64, 0u64);
    let (mut completed, mut latency_sum) = (0u64, 0u128);
    let token_mode = s.use_token_latencies;
    for i in 0..n_issued as usize {
        let issue = r.issue_of(i);
        final_issue = final_issue.max(issue.saturating_sub(start));
        let Some(done) = r.completion(i) else {
            continue;
        };
        final_done = final_done.max(done.saturating_sub(start));
        let l = done.saturating_sub(issue);
        completed += 1;
        latency_sum += l as u128;
        if in_place.is_none() {
            lat.push(l);
        }
        let tokens = r.tokens_of(i);
        total_tokens += tokens;
        match r.first_token_of(i) {
            Some(ft) => {
                let tt = ft.saturating_sub(issue);
                ttft.push(tt);
                match tpot_ns(l, tt, tokens) {
                    Some(v) => tpot.push(v),
                    None => tpot_undef += 1,
                }
            }
            None => {
                ft_missing += 1;
                if token_mode {
                    tpot_undef += 1;
                }
            }
        }
        for w in r.token_times_of(i).windows(2) {
            itl.push(w[1].saturating_sub(w[0]));
        }
    }
    let lat = sorted(lat);
    let ttft = sorted(ttft);
    let tpot = sorted(tpot);
    let itl = sorted(itl);
    let pct = s.effective_percentile();
    let (latency, target_latency_ns) = match in_place {
        Some(t0) => {
            let values = || {
                (0..n_issued as usize)
                    .filter_map(|i| r.completion(i))
                    .map(move |c| c.saturating_sub(t0))
            };
            let target =
                (completed > 0).then(|| select_kth(values, percentile_index(completed, pct)));
            (LatencyStats::from_unsorted(values, completed), target)
        }
        None => (LatencyStats::from_sorted(&lat), percentile(&lat, pct)),
    };
    let max_latency = latency.as_ref().map(|l| l.max).unwrap_or(0);

    let mut causes = Vec::new();
    // Min duration, per scenario.
    let min_dur_ns = s.min_duration_ms.saturating_mul(1_000_000);
    let measured = match s.scenario {
        Scenario::SingleStream | Scenario::Server => final_issue,
        Scenario::Offline => max_latency,
    };
    let min_duration_met = measured >= min_dur_ns;
    if !min_duration_met {
        causes.push(InvalidCause::MinDurationNotMet {
            required_ns: min_dur_ns,
            actual_ns: measured,
        });
    }
    let min_sample_count = match s.scenario {
        Scenario::Offline => {
            let mut uncapped = s.clone();
            uncapped.max_query_count = 0;
            offline_sample_count(&uncapped, loaded.len() as u64)
        }
        _ => s.min_query_count,
    };
    let required = min_sample_count.max(s.min_query_count);
    let min_queries_met = completed >= required;
    if !min_queries_met {
        causes.push(InvalidCause::MinQueriesNotMet {
            required,
            completed,
        });
    }
    if completed == 0 {
        causes.push(InvalidCause::NoQueriesCompleted);
    }

    // Early stopping.
    let (mut es, mut es_ttft, mut es_tpot) = (None, None, None);
    let es_outcome = |v: &[u64], bound: u64| match s.scenario {
        Scenario::SingleStream => Some(early_stopping::single_stream_outcome(v, pct)),
        Scenario::Server => Some(early_stopping::server_outcome(v, bound, pct)),
        Scenario::Offline => None,
    };
    if token_mode {
        es_ttft = es_outcome(&ttft, s.server_ttft_latency_ns);
        es_tpot = es_outcome(&tpot, s.server_tpot_latency_ns);
    } else {
        es = es_outcome(&lat, s.server_target_latency_ns);
    }
    let mut early_stopping_met = true;
    for (name, o) in [("latency", &es), ("ttft", &es_ttft), ("tpot", &es_tpot)] {
        if let Some(o) = o
            && !o.met
        {
            early_stopping_met = false;
            causes.push(InvalidCause::EarlyStoppingNotMet {
                series: name.to_string(),
            });
        }
    }

    // Server bounds and rate.
    let mut perf_constraints_met = true;
    let mut overlatency = 0;
    let n_minus_1 = completed.saturating_sub(1) as f64;
    let scheduled_qps = if final_issue > 0 {
        n_minus_1 / secs(final_issue)
    } else {
        0.0
    };
    let completed_qps = if final_done > 0 {
        n_minus_1 / secs(final_done)
    } else {
        0.0
    };
    if s.scenario == Scenario::Server {
        overlatency = lat
            .iter()
            .filter(|&&l| l > s.server_target_latency_ns)
            .count() as u64;
        if token_mode {
            if let Some(v) = percentile(&ttft, pct)
                && v > s.server_ttft_latency_ns
            {
                perf_constraints_met = false;
                causes.push(InvalidCause::TtftOverBound {
                    percentile: pct,
                    value_ns: v,
                    bound_ns: s.server_ttft_latency_ns,
                });
            }
            if let Some(v) = percentile(&tpot, pct)
                && v > s.server_tpot_latency_ns
            {
                perf_constraints_met = false;
                causes.push(InvalidCause::TpotOverBound {
                    percentile: pct,
                    value_ns: v,
                    bound_ns: s.server_tpot_latency_ns,
                });
            }
        } else if let Some(v) = target_latency_ns
            && v > s.server_target_latency_ns
        {
            perf_constraints_met = false;
            causes.push(InvalidCause::LatencyOverBound {
                percentile: pct,
                value_ns: v,
                bound_ns: s.server_target_latency_ns,
            });
        }
        if completed >= 2 && completed_qps < scheduled_qps * (1.0 - s.server_qps_tolerance) {
            perf_constraints_met = false;
            causes.push(InvalidCause::QpsBelowScheduled {
                scheduled_qps,
                completed_qps,
            });
        }
    }
    if token_mode && ft_missing > 0 {
        causes.push(InvalidCause::FirstTokenMissing {
            queries: ft_missing,
        });
    }
    if let Some(id) = pass.timed_out {
        let mut seq = SampleSeq::new(loaded, plan);
        let mut sample = 0;
        for _ in 0..=id {
            sample = seq.next_sample();
        }
        causes.push(InvalidCause::SutTimeout {
            query_id: id,
            sample_index: sample,
            timeout_ms: s.query_timeout_ms,
        });
    }
    if r.num_failed > 0 {
        causes.push(InvalidCause::SutFailed {
            count: r.num_failed,
            first: r.failures.first().cloned().unwrap_or_default(),
        });
    }
    if r.num_errors > 0 {
        causes.push(InvalidCause::SutProtocolErrors {
            count: r.num_errors,
        });
    }

    let mean = latency.as_ref().map(|l| l.mean).unwrap_or(0);
    let per_s = |x: f64, ns: u128| if ns > 0 { x / (ns as f64 / 1e9) } else { 0.0 };
    let tokens = total_tokens as f64;
    // Token throughput without harness overhead: SingleStream over the time the SUT spent
    // on queries (the sum of latencies, LoadGen's "w/o loadgen overhead"); Offline over the
    // slowest sample; Server over first issue to last completion (the offered load).
    let tokens_per_second = match s.scenario {
        Scenario::SingleStream => per_s(tokens, latency_sum),
        Scenario::Offline => per_s(tokens, max_latency as u128),
        Scenario::Server => per_s(tokens, final_done as u128),
    };
    let perf = PerformanceResult {
        queries_issued: n_issued,
        queries_completed: completed,
        start_ns: start,
        end_reason: pass.end,
        min_sample_count,
        final_query_issued_ns: if s.scenario == Scenario::SingleStream {
            final_issue
        } else {
            0
        },
        final_query_scheduled_ns: if s.scenario == Scenario::Server {
            final_issue
        } else {
            0
        },
        final_query_done_ns: final_done,
        latency,
        target_percentile: pct,
        target_latency_ns,
        target_ttft_ns: percentile(&ttft, pct),
        target_tpot_ns: percentile(&tpot, pct),
        overlatency_query_count: overlatency,
        ttft: LatencyStats::from_sorted(&ttft),
        tpot: LatencyStats::from_sorted(&tpot),
        inter_token: LatencyStats::from_sorted(&itl),
        tpot_undefined_count: tpot_undef,
        first_token_missing: ft_missing,
        total_tokens,
        tokens_per_second,
        tokens_per_second_with_overhead: match s.scenario {
            Scenario::SingleStream => per_s(tokens, final_issue as u128),
            _ => tokens_per_second,
        },
        completed_tokens_per_second: per_s(tokens, final_done as u128),
        qps_with_overhead: if final_issue > 0 {
            n_minus_1 / secs(final_issue)
        } else {
            0.0
        },
        qps_without_overhead: if mean > 0 { 1.0 / secs(mean) } else { 0.0 },
        scheduled_qps,
        completed_qps,
        samples_per_second: if max_latency > 0 {
            completed as f64 / secs(max_latency)
        } else {
            0.0
        },
        early_stopping: es,
        early_stopping_ttft: es_ttft,
        early_stopping_tpot: es_tpot,
        min_duration_met,
        min_queries_met,
        perf_constraints_met,
        early_stopping_met,
        timed_out_query: pass.timed_out,
        num_errors: r.num_errors,
        errors: r.errors.clone(),
        num_failed: r.num_failed,
        failures: r.failures.clone(),
    };
    (perf, causes)
}
