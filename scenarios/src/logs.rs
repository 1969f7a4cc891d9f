//! MLPerf-layout logs (LoadGen logging.cc, results.cc, test_settings_internal.cc):
//! `mlperf_log_summary.txt` with LoadGen's section headers, key names, ordering and number
//! formatting; `mlperf_log_detail.txt` as `:::MLLOG {json}` lines with LoadGen's keys; and
//! `mlperf_log_accuracy.json` (`seq_id`, `qsl_idx`, upper-case hex `data`, optional
//! `token_count`). PocketPerf-only figures are added as extra lines and keys that MLPerf
//! tooling ignores.
//!
//! Size: over 800 lines: three LoadGen log formats whose key order and number formatting
//! follow `logging.cc`/`results.cc` line by line; kept in one file to be read against them.

use std::fmt::Write as _;
use std::path::Path;

use serde::Serialize;

use crate::early_stopping::EarlyStoppingOutcome;
use crate::error::{Error, Result};
use crate::results::{InvalidCause, PerformanceResult, TestResult};
use crate::settings::{Scenario, TestSettings};
use crate::stats::LatencyStats;
use crate::warmup::WarmupQuery;

/// Run metadata the caller supplies for the logs.
#[derive(Debug, Clone, Default, Serialize)]
pub struct LogMeta {
    /// Tool name and version (logged as `loadgen_version`), e.g. "pocketperf 0.1.0".
    pub tool_version: String,
    /// Source commit (logged as `loadgen_git_log_message`).
    pub commit: String,
    /// Commit date, UTC (logged as `loadgen_git_commit_date`).
    pub commit_date_utc: String,
    /// Build date, UTC (logged as `loadgen_build_date_utc` and `_local`).
    pub build_date_utc: String,
    /// Test start, UTC, ISO 8601 (`test_datetime`), e.g. "2026-11-29T09:38:07Z".
    pub test_datetime_utc: String,
    /// Test start and end for `power_begin` / `power_end` ("MM-DD-YYYY HH:MM:SS.mmm").
    pub power_begin: String,
    /// See `power_begin`.
    pub power_end: String,
}

/// C++ iostream default formatting of a double (`%g`, 6 significant digits).
pub fn fmt_g(x: f64) -> String {
    if x == 0.0 {
        return "0".into();
    }
    if !x.is_finite() {
        return if x.is_nan() {
            "nan".into()
        } else if x > 0.0 {
            "inf".into()
        } else {
            "-inf".into()
        };
    }
    let sci = format!("{:.5e}", x);
    let (mant, exp) = sci.split_once('e').unwrap_or((sci.as_str(), "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    if !(-4..6).contains(&exp) {
        let m = strip_zeros(mant);
        let sign = if exp < 0 { '-' } else { '+' };
        format!("{m}e{sign}{:02}", exp.abs())
    } else {
        let decimals = (5 - exp).max(0) as usize;
        strip_zeros(&format!("{:.*}", decimals, x)).to_string()
    }
}

fn strip_zeros(s: &str) -> &str {
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.')
    } else {
        s
    }
}

fn fmt2(x: f64) -> String {
    format!("{x:.2}")
}

fn pct_key(p: f64) -> String {
    format!("{:.2}", p * 100.0)
}

fn yes_no(b: bool) -> &'static str {
    if b { "Yes" } else { "NO" }
}

/// LoadGen's `target_qps` figure for the settings.
fn target_qps(s: &TestSettings) -> f64 {
    match s.scenario {
        Scenario::SingleStream => 1e9 / s.single_stream_expected_latency_ns.max(1) as f64,
        Scenario::Server => s.server_target_qps,
        Scenario::Offline => s.offline_expected_qps,
    }
}

fn target_latency_ns(s: &TestSettings) -> u64 {
    if s.scenario == Scenario::Server {
        s.server_target_latency_ns
    } else {
        0
    }
}

fn max_async(s: &TestSettings) -> u64 {
    if s.scenario == Scenario::Server { 0 } else { 1 }
}

fn samples_per_query(r: &TestResult) -> u64 {
    match (r.settings.scenario, &r.performance) {
        (Scenario::Offline, Some(p)) => p.queries_issued,
        _ => 1,
    }
}

fn stats_block(out: &mut String, st: &LatencyStats, min: &str, max: &str, mean: &str, pct: &str) {
    let _ = writeln!(out, "{min}{}", st.min);
    let _ = writeln!(out, "{max}{}", st.max);
    let _ = writeln!(out, "{mean}{}", st.mean);
    for &(p, v) in &st.percentiles {
        let _ = writeln!(out, "{} {pct}{v}", pct_key(p));
    }
}

fn recommendations(
    p: &PerformanceResult,
    causes: &[InvalidCause],
    s: &TestSettings,
) -> Vec<String> {
    let mut v = Vec::new();
    for c in causes {
        match c {
            InvalidCause::LatencyOverBound { .. } => {
                v.push("Reduce target QPS to improve latency.".to_string())
            }
            InvalidCause::TtftOverBound { .. } => {
                v.push("TTFT constrain not met: Reduce target QPS to improve latency.".to_string())
            }
            InvalidCause::TpotOverBound { .. } => {
                v.push("TPOT constrain not met: Reduce target QPS to improve latency.".to_string())
            }
            InvalidCause::QpsBelowScheduled { .. } => v.push(format!("{c}.")),
            _ => {}
        }
    }
    if !p.min_duration_met {
        v.push(
            match s.scenario {
                Scenario::SingleStream => {
                    "Decrease the expected latency so the loadgen pre-generates more queries."
                }
                Scenario::Server => {
                    "Increase the target QPS so the loadgen pre-generates more queries."
                }
                Scenario::Offline => {
                    "Increase expected QPS so the loadgen pre-generates a larger (coalesced) query."
                }
            }
            .to_string(),
        );
    }
    if !p.min_queries_met {
        v.push(
            "The test exited early, before enough queries were issued.\n   See the detailed log \
             for why this may have occurred."
                .to_string(),
        );
    }
    for c in causes {
        match c {
            InvalidCause::SutTimeout { .. }
            | InvalidCause::SutFailed { .. }
            | InvalidCause::SutProtocolErrors { .. }
            | InvalidCause::FirstTokenMissing { .. }
            | InvalidCause::NoQueriesCompleted => v.push(format!("{c}.")),
            _ => {}
        }
    }
    v
}

fn error_count(r: &TestResult) -> u64 {
    let mut n = r
        .performance
        .as_ref()
        .map(|p| p.num_errors + p.num_failed)
        .unwrap_or(0);
    n += r
        .invalid_causes
        .iter()
        .filter(|c| matches!(c, InvalidCause::SutTimeout { .. }))
        .count() as u64;
    n
}

fn footer(out: &mut String, r: &TestResult) {
    out.push_str("\nNo warnings encountered during test.\n");
    let n = error_count(r);
    if n == 0 {
        out.push_str("\nNo errors encountered during test.\n");
    } else {
        let _ = writeln!(
            out,
            "\n{n} ERROR{} encountered. See detailed log.",
            if n == 1 { "" } else { "S" }
        );
    }
}

impl TestResult {
    /// `mlperf_log_summary.txt`, in LoadGen's layout.
    pub fn summary_text(&self, _meta: &LogMeta) -> String {
        let s = &self.settings;
        let mut out = String::new();
        let Some(p) = &self.performance else {
            footer(&mut out, self);
            return out;
        };
        let tok = s.use_token_latencies;
        let bar = "================================================";
        let _ = writeln!(out, "{bar}\nMLPerf Results Summary\n{bar}");
        let _ = writeln!(out, "SUT name : {}", self.sut_name);
        let _ = writeln!(out, "Scenario : {}", s.scenario);
        let _ = writeln!(out, "Mode     : {}", s.mode.as_str());
        let label = format!("{:.1}", p.target_percentile * 100.0);
        match s.scenario {
            Scenario::SingleStream => {
                let _ = writeln!(
                    out,
                    "{label}th percentile latency (ns) : {}",
                    p.target_latency_ns.unwrap_or(0)
                );
                if tok {
                    let v = p.target_ttft_ns.unwrap_or(0);
                    let _ = writeln!(out, "{label}th first token percentile latency (ns) : {v}");
                }
            }
            Scenario::Server => {
                let _ = writeln!(
                    out,
                    "Completed samples per second    : {}",
                    fmt2(p.completed_qps)
                );
            }
            Scenario::Offline => {
                let _ = writeln!(out, "Samples per second: {}", fmt_g(p.samples_per_second));
                if tok {
                    let _ = writeln!(out, "Tokens per second: {}", fmt_g(p.tokens_per_second));
                }
            }
        }
        let _ = writeln!(
            out,
            "Result is : {}",
            if self.is_valid() { "VALID" } else { "INVALID" }
        );
        if s.scenario == Scenario::Server {
            let _ = writeln!(
                out,
                "  Performance constraints satisfied : {}",
                yes_no(p.perf_constraints_met)
            );
        }
        let _ = writeln!(
            out,
            "  Min duration satisfied : {}",
            yes_no(p.min_duration_met)
        );
        let _ = writeln!(
            out,
            "  Min queries satisfied : {}",
            yes_no(p.min_queries_met)
        );
        let _ = writeln!(
            out,
            "  Early stopping satisfied: {}",
            yes_no(p.early_stopping_met)
        );
        if !self.is_valid() {
            let recs = recommendations(p, &self.invalid_causes, s);
            if !recs.is_empty() {
                out.push_str("Recommendations:\n");
                for r in recs {
                    let _ = writeln!(out, " * {r}");
                }
            }
        }
        if s.scenario != Scenario::Offline {
            let es = |out: &mut String, title: &str, o: &Option<EarlyStoppingOutcome>| {
                if let Some(o) = o {
                    let _ = writeln!(out, "{title}\n{}", o.text);
                }
            };
            if tok {
                es(
                    &mut out,
                    "TTFT Early Stopping Result:",
                    &p.early_stopping_ttft,
                );
                es(
                    &mut out,
                    "TPOT Early Stopping Result:",
                    &p.early_stopping_tpot,
                );
            } else {
                es(&mut out, "Early Stopping Result:", &p.early_stopping);
            }
        }
        let _ = writeln!(out, "\n{bar}\nAdditional Stats\n{bar}");
        match s.scenario {
            Scenario::SingleStream => {
                let _ = writeln!(
                    out,
                    "QPS w/ loadgen overhead         : {}",
                    fmt2(p.qps_with_overhead)
                );
                let _ = writeln!(
                    out,
                    "QPS w/o loadgen overhead        : {}\n",
                    fmt2(p.qps_without_overhead)
                );
            }
            Scenario::Server => {
                let _ = writeln!(
                    out,
                    "Scheduled samples per second : {}\n",
                    fmt2(p.scheduled_qps)
                );
            }
            Scenario::Offline => {}
        }
        if let Some(l) = &p.latency {
            stats_block(
                &mut out,
                l,
                "Min latency (ns)                : ",
                "Max latency (ns)                : ",
                "Mean latency (ns)               : ",
                "percentile latency (ns)   : ",
            );
        }
        if tok {
            out.push('\n');
            match s.scenario {
                Scenario::SingleStream => {
                    let _ = writeln!(
                        out,
                        "TPS w/ loadgen overhead         : {}",
                        fmt2(p.tokens_per_second_with_overhead)
                    );
                    let _ = writeln!(
                        out,
                        "TPS w/o loadgen overhead        : {}",
                        fmt2(p.tokens_per_second)
                    );
                }
                Scenario::Server => {
                    let _ = writeln!(
                        out,
                        "Completed tokens per second                 : {}",
                        fmt2(p.tokens_per_second)
                    );
                }
                Scenario::Offline => {}
            }
            if s.scenario != Scenario::Offline {
                if let Some(t) = &p.ttft {
                    stats_block(
                        &mut out,
                        t,
                        "Min First Token latency (ns)                : ",
                        "Max First Token latency (ns)                : ",
                        "Mean First Token latency (ns)               : ",
                        "percentile first token latency (ns)   : ",
                    );
                }
                out.push('\n');
                if let Some(t) = &p.tpot {
                    stats_block(
                        &mut out,
                        t,
                        "Min Time per Output Token (ns)                : ",
                        "Max Time per Output Token (ns)                : ",
                        "Mean Time per Output Token (ns)               : ",
                        "percentile time to output token (ns)   : ",
                    );
                }
            }
            // PocketPerf additions (ignored by MLPerf tooling).
            out.push('\n');
            let _ = writeln!(
                out,
                "Tokens per second (without overhead) : {}",
                fmt2(p.tokens_per_second)
            );
            let _ = writeln!(out, "Total output tokens             : {}", p.total_tokens);
            let _ = writeln!(
                out,
                "Queries with TPOT undefined     : {}",
                p.tpot_undefined_count
            );
            if let Some(itl) = &p.inter_token {
                stats_block(
                    &mut out,
                    itl,
                    "Min inter-token latency (ns)                : ",
                    "Max inter-token latency (ns)                : ",
                    "Mean inter-token latency (ns)               : ",
                    "percentile inter-token latency (ns)   : ",
                );
            }
        }
        let _ = writeln!(out, "\n{bar}\nTest Parameters Used\n{bar}");
        let _ = writeln!(out, "samples_per_query : {}", samples_per_query(self));
        let _ = writeln!(out, "target_qps : {}", fmt_g(target_qps(s)));
        if tok {
            let _ = writeln!(out, "ttft_latency (ns): {}", s.server_ttft_latency_ns);
            let _ = writeln!(out, "tpot_latency (ns): {}", s.server_tpot_latency_ns);
        } else {
            let _ = writeln!(out, "target_latency (ns): {}", target_latency_ns(s));
        }
        let _ = writeln!(out, "max_async_queries : {}", max_async(s));
        let _ = writeln!(out, "min_duration (ms): {}", s.min_duration_ms);
        let _ = writeln!(out, "max_duration (ms): {}", s.max_duration_ms);
        let _ = writeln!(out, "min_query_count : {}", s.min_query_count);
        let _ = writeln!(out, "max_query_count : {}", s.max_query_count);
        let _ = writeln!(out, "qsl_rng_seed : {}", s.qsl_rng_seed);
        let _ = writeln!(out, "sample_index_rng_seed : {}", s.sample_index_rng_seed);
        let _ = writeln!(out, "schedule_rng_seed : {}", s.schedule_rng_seed);
        let _ = writeln!(out, "accuracy_log_rng_seed : {}", s.accuracy_log_rng_seed);
        let _ = writeln!(
            out,
            "accuracy_log_probability : {}",
            fmt_g(s.accuracy_log_probability)
        );
        let _ = writeln!(
            out,
            "accuracy_log_sampling_target : {}",
            s.accuracy_log_sampling_target
        );
        let _ = writeln!(out, "print_timestamps : 0");
        let _ = writeln!(out, "performance_issue_unique : 0");
        let _ = writeln!(out, "performance_issue_same : 0");
        let _ = writeln!(out, "performance_issue_same_index : 0");
        let _ = writeln!(
            out,
            "performance_sample_count : {}",
            self.performance_sample_count
        );
        let _ = writeln!(
            out,
            "accuracy_sample_count : {}",
            self.accuracy_sample_count
        );
        footer(&mut out, self);
        out
    }

    /// `mlperf_log_detail.txt`: one `:::MLLOG {json}` line per event, LoadGen's keys.
    pub fn detail_text(&self, meta: &LogMeta) -> String {
        let mut d = Detail::new();
        let s = &self.settings;
        let q = |v: &str| serde_json::Value::String(v.to_string()).to_string();
        d.log("loadgen_version", &q(&meta.tool_version), 0.0);
        d.log("loadgen_build_date_local", &q(&meta.build_date_utc), 0.0);
        d.log("loadgen_build_date_utc", &q(&meta.build_date_utc), 0.0);
        d.log("loadgen_git_commit_date", &q(&meta.commit_date_utc), 0.0);
        d.log("loadgen_git_log_message", &q(&meta.commit), 0.0);
        d.log("loadgen_git_status_message", &q(""), 0.0);
        d.log("loadgen_file_sha1", "{}", 0.0);
        d.log("test_datetime", &q(&meta.test_datetime_utc), 0.0);
        d.log("sut_name", &q(&self.sut_name), 0.0);
        d.log("get_sut_name_duration_ns", "0", 0.0);
        d.log("qsl_name", &q(&self.qsl_name), 0.0);
        d.log(
            "qsl_reported_total_count",
            &self.qsl_total_count.to_string(),
            0.0,
        );
        d.log(
            "qsl_reported_performance_count",
            &self.performance_sample_count.to_string(),
            0.0,
        );
        let b = |x: bool| if x { "true" } else { "false" };
        for prefix in ["requested", "effective"] {
            let mut kv: Vec<(String, String)> = Vec::new();
            let mut put = |k: &str, v: String| kv.push((format!("{prefix}_{k}"), v));
            put("scenario", q(s.scenario.as_str()));
            put("test_mode", q(s.mode.as_str()));
            if prefix == "requested" {
                match s.scenario {
                    Scenario::SingleStream => {
                        put(
                            "single_stream_expected_latency_ns",
                            fmt_g(s.single_stream_expected_latency_ns as f64),
                        );
                        put(
                            "single_stream_target_latency_percentile",
                            fmt_g(s.target_latency_percentile),
                        );
                    }
                    Scenario::Server => {
                        put("server_target_qps", fmt_g(s.server_target_qps));
                        put(
                            "server_target_latency_ns",
                            s.server_target_latency_ns.to_string(),
                        );
                        put(
                            "server_target_latency_percentile",
                            fmt_g(s.server_target_latency_percentile),
                        );
                        put("server_coalesce_queries", "false".into());
                        put("server_find_peak_qps_decimals_of_precision", "1".into());
                        put("server_find_peak_qps_boundary_step_size", "1".into());
                        put("server_max_async_queries", "0".into());
                        put("server_num_issue_query_threads", "0".into());
                    }
                    Scenario::Offline => {
                        put("offline_expected_qps", fmt_g(s.offline_expected_qps));
                    }
                }
            } else {
                put("samples_per_query", samples_per_query(self).to_string());
                put("target_qps", fmt_g(target_qps(s)));
                put("target_latency_ns", target_latency_ns(s).to_string());
                put("target_latency_percentile", fmt_g(s.effective_percentile()));
                put("max_async_queries", max_async(s).to_string());
                let target_dur = if s.scenario == Scenario::Offline {
                    0
                } else {
                    s.min_duration_ms
                };
                put("target_duration_ms", target_dur.to_string());
            }
            put("min_duration_ms", s.min_duration_ms.to_string());
            put("max_duration_ms", s.max_duration_ms.to_string());
            put("min_query_count", s.min_query_count.to_string());
            put("max_query_count", s.max_query_count.to_string());
            if prefix == "effective" {
                let msc = self
                    .performance
                    .as_ref()
                    .map(|p| p.min_sample_count)
                    .unwrap_or(s.min_query_count);
                put("min_sample_count", msc.to_string());
            }
            put("qsl_rng_seed", s.qsl_rng_seed.to_string());
            put("sample_index_rng_seed", s.sample_index_rng_seed.to_string());
            put("schedule_rng_seed", s.schedule_rng_seed.to_string());
            put("accuracy_log_rng_seed", s.accuracy_log_rng_seed.to_string());
            put(
                "accuracy_log_probability",
                fmt_g(s.accuracy_log_probability),
            );
            put(
                "accuracy_log_sampling_target",
                s.accuracy_log_sampling_target.to_string(),
            );
            put("print_timestamps", "false".into());
            put("performance_issue_unique", "false".into());
            put("performance_issue_same", "false".into());
            put("performance_issue_same_index", "0".into());
            if prefix == "requested" {
                put(
                    "performance_sample_count_override",
                    s.performance_sample_count_override.to_string(),
                );
                put(
                    "accuracy_sample_count_override",
                    s.accuracy_sample_count_override.to_string(),
                );
                put(
                    "sample_concatenate_permutation",
                    b(s.sample_concatenate_permutation).into(),
                );
                if s.use_token_latencies {
                    put("use_token_latencies", "true".into());
                    put("server_ttft_latency", s.server_ttft_latency_ns.to_string());
                    put("server_tpot_latency", s.server_tpot_latency_ns.to_string());
                }
            } else {
                put(
                    "performance_sample_count",
                    self.performance_sample_count.to_string(),
                );
                put(
                    "accuracy_sample_count",
                    self.accuracy_sample_count.to_string(),
                );
                put(
                    "sample_concatenate_permutation",
                    b(s.sample_concatenate_permutation).into(),
                );
            }
            put("query_timeout_ms", s.query_timeout_ms.to_string());
            for (k, v) in kv {
                d.log(&k, &v, 0.0);
            }
        }
        if let Some(p) = &self.performance {
            let end_ms = p.final_query_done_ns as f64 / 1e6;
            d.log("generic_message", &q("Starting performance mode"), 0.0);
            let set = serde_json::to_string(&self.loaded_set).unwrap_or_else(|_| "[]".into());
            d.log("loaded_qsl_set", &set, 0.0);
            d.log("generated_query_count", &p.queries_issued.to_string(), 0.0);
            d.log(
                "generated_samples_per_query",
                &samples_per_query(self).to_string(),
                0.0,
            );
            let dur = p.final_query_issued_ns.max(p.final_query_scheduled_ns);
            d.log("generated_query_duration", &dur.to_string(), 0.0);
            d.log("generic_message", &q(p.end_reason.message()), end_ms);
            for k in [
                "logger_swap_request_slots_retry_count",
                "logger_swap_request_slots_retry_retry_count",
                "logger_swap_request_slots_retry_reencounter_count",
                "logger_start_reading_entries_retry_count",
                "logger_tls_total_log_cas_fail_count",
                "logger_tls_total_swap_buffers_slot_retry_count",
            ] {
                d.log(k, "0", end_ms);
            }
            d.log("power_begin", &q(&meta.power_begin), end_ms);
            d.log("power_end", &q(&meta.power_end), end_ms);
            self.detail_results(&mut d, p, end_ms);
        }
        if !self.warmup.is_empty() {
            log_warmup(&mut d, &self.warmup);
        }
        for c in &self.invalid_causes {
            d.log_flag("pocketperf_invalid_cause", &q(&c.to_string()), 0.0, true);
        }
        if let Some(p) = &self.performance {
            for e in p.errors.iter().chain(&p.failures) {
                d.log_flag("error_runtime", &q(e), 0.0, true);
            }
        }
        d.log("num_errors", &error_count(self).to_string(), 0.0);
        d.out
    }

    fn detail_results(&self, d: &mut Detail, p: &PerformanceResult, t: f64) {
        let s = &self.settings;
        let q = |v: &str| serde_json::Value::String(v.to_string()).to_string();
        let b = |x: bool| if x { "true" } else { "false" };
        d.log(
            "result_validity",
            &q(if self.is_valid() { "VALID" } else { "INVALID" }),
            t,
        );
        if s.scenario == Scenario::Server {
            d.log("result_perf_constraints_met", b(p.perf_constraints_met), t);
        }
        d.log("result_min_duration_met", b(p.min_duration_met), t);
        d.log("result_min_queries_met", b(p.min_queries_met), t);
        d.log("early_stopping_met", b(p.early_stopping_met), t);
        if !self.is_valid() {
            let reason: String = recommendations(p, &self.invalid_causes, s)
                .into_iter()
                .map(|r| r.replace("\n   ", " ") + " ")
                .collect();
            d.log("result_invalid_reason", &q(&reason), t);
        }
        let flat = |o: &Option<EarlyStoppingOutcome>| {
            o.as_ref()
                .map(|o| o.text.replace('\n', " "))
                .unwrap_or_default()
        };
        if s.use_token_latencies {
            d.log(
                "early_stopping_ttft_result",
                &q(&flat(&p.early_stopping_ttft)),
                t,
            );
            d.log(
                "early_stopping_tpot_result",
                &q(&flat(&p.early_stopping_tpot)),
                t,
            );
        } else {
            d.log("early_stopping_result", &q(&flat(&p.early_stopping)), t);
        }
        d.log("result_query_count", &p.queries_issued.to_string(), t);
        match s.scenario {
            Scenario::SingleStream => {
                d.log(
                    "result_qps_with_loadgen_overhead",
                    &fmt_g(p.qps_with_overhead),
                    t,
                );
                d.log(
                    "result_qps_without_loadgen_overhead",
                    &fmt_g(p.qps_without_overhead),
                    t,
                );
                let es = if s.use_token_latencies {
                    &p.early_stopping_ttft
                } else {
                    &p.early_stopping
                };
                let (ss, ms) = es
                    .as_ref()
                    .map(|o| (o.estimate_ns.unwrap_or(0), o.estimate_p99_ns.unwrap_or(0)))
                    .unwrap_or((0, 0));
                d.log("early_stopping_latency_ss", &ss.to_string(), t);
                d.log("early_stopping_latency_ms", &ms.to_string(), t);
            }
            Scenario::Server => {
                d.log(
                    "result_overlatency_query_count",
                    &p.overlatency_query_count.to_string(),
                    t,
                );
                d.log(
                    "result_scheduled_samples_per_sec",
                    &fmt_g(p.scheduled_qps),
                    t,
                );
                d.log(
                    "result_completed_samples_per_sec",
                    &fmt_g(p.completed_qps),
                    t,
                );
            }
            Scenario::Offline => {
                d.log("result_samples_per_second", &fmt_g(p.samples_per_second), t);
            }
        }
        let stats = |d: &mut Detail,
                     st: &Option<LatencyStats>,
                     min: &str,
                     max: &str,
                     mean: &str,
                     pre: &str,
                     post: &str| {
            if let Some(st) = st {
                d.log(min, &st.min.to_string(), t);
                d.log(max, &st.max.to_string(), t);
                d.log(mean, &st.mean.to_string(), t);
                for &(pp, v) in &st.percentiles {
                    d.log(&format!("{pre}{}{post}", pct_key(pp)), &v.to_string(), t);
                }
            }
        };
        stats(
            d,
            &p.latency,
            "result_min_latency_ns",
            "result_max_latency_ns",
            "result_mean_latency_ns",
            "result_",
            "_percentile_latency_ns",
        );
        if s.use_token_latencies {
            if s.scenario != Scenario::Offline {
                stats(
                    d,
                    &p.ttft,
                    "result_first_token_min_latency_ns",
                    "result_first_token_max_latency_ns",
                    "result_first_token_mean_latency_ns",
                    "result_first_token_",
                    "_percentile_latency_ns",
                );
                d.log(
                    "result_token_throughput_with_loadgen_overhead",
                    &fmt_g(p.tokens_per_second_with_overhead),
                    t,
                );
                d.log("result_token_throughput", &fmt_g(p.tokens_per_second), t);
                if let Some(tp) = &p.tpot {
                    for &(pp, v) in &tp.percentiles {
                        d.log(
                            &format!("result_time_per_output_token_{}_percentile_ns", pct_key(pp)),
                            &v.to_string(),
                            t,
                        );
                    }
                    d.log("result_time_to_output_token_min", &tp.min.to_string(), t);
                    d.log("result_time_to_output_token_max", &tp.max.to_string(), t);
                    d.log("result_time_to_output_token_mean", &tp.mean.to_string(), t);
                }
            }
            d.log(
                "result_completed_tokens_per_second",
                &fmt_g(p.completed_tokens_per_second),
                t,
            );
            d.log("result_total_output_tokens", &p.total_tokens.to_string(), t);
            d.log(
                "result_tpot_undefined_count",
                &p.tpot_undefined_count.to_string(),
                t,
            );
            stats(
                d,
                &p.inter_token,
                "result_inter_token_min_latency_ns",
                "result_inter_token_max_latency_ns",
                "result_inter_token_mean_latency_ns",
                "result_inter_token_",
                "_percentile_latency_ns",
            );
        }
    }

    /// `mlperf_log_accuracy.json` (an empty list outside accuracy mode).
    pub fn accuracy_json(&self) -> String {
        let mut out = String::from("[\n");
        let entries = self.accuracy.as_deref().unwrap_or(&[]);
        for (i, e) in entries.iter().enumerate() {
            if i > 0 {
                out.push_str(",\n");
            }
            let mut hex = String::with_capacity(e.data.len() * 2);
            for byte in &e.data {
                let _ = write!(hex, "{byte:02X}");
            }
            let _ = write!(
                out,
                "{{ \"seq_id\" : {}, \"qsl_idx\" : {}, \"data\" : \"{hex}\"",
                e.seq_id, e.qsl_idx
            );
            if let Some(n) = e.token_count {
                let _ = write!(out, ", \"token_count\" : {n}");
            }
            out.push_str(" }");
        }
        out.push_str("\n]\n");
        out
    }

    /// Writes the summary, the detail log and, in accuracy mode, the accuracy log to `dir`
    /// (created if missing).
    pub fn write_logs(&self, dir: &Path, meta: &LogMeta) -> Result<()> {
        let io = |path: &Path| {
            let path = path.to_path_buf();
            move |source| Error::Io { path, source }
        };
        std::fs::create_dir_all(dir).map_err(io(dir))?;
        // Each log through a temporary beside it, renamed into place (as
        // `pocketperf_reports::files::replace_file` does; this crate depends on no other).
        let write = |name: &str, text: String| {
            let p = dir.join(name);
            let tmp = dir.join(format!(".{name}.{}.tmp", std::process::id()));
            let done = std::fs::write(&tmp, text)
                .map_err(io(&tmp))
                .and_then(|()| std::fs::rename(&tmp, &p).map_err(io(&p)));
            if done.is_err() {
                let _ = std::fs::remove_file(&tmp);
            }
            done
        };
        write("mlperf_log_summary.txt", self.summary_text(meta))?;
        write("mlperf_log_detail.txt", self.detail_text(meta))?;
        if self.settings.mode.runs_accuracy() {
            write("mlperf_log_accuracy.json", self.accuracy_json())?;
        }
        Ok(())
    }
}

/// The detail log's warm-up lines: the count, then one line per query with its latencies.
fn log_warmup(d: &mut Detail, warmup: &[WarmupQuery]) {
    d.log(
        "pocketperf_warmup_query_count",
        &warmup.len().to_string(),
        0.0,
    );
    for w in warmup {
        let v = serde_json::json!({
            "id": w.id,
            "sample_index": w.sample_index,
            "latency_ns": w.latency_ns(),
            "ttft_ns": w.ttft_ns(),
            "tokens": w.tokens,
        });
        d.log("pocketperf_warmup_query", &v.to_string(), 0.0);
    }
}

struct Detail {
    out: String,
    pid: u32,
}

impl Detail {
    fn new() -> Self {
        Detail {
            out: String::new(),
            pid: std::process::id(),
        }
    }
    fn log(&mut self, key: &str, value: &str, time_ms: f64) {
        self.log_flag(key, value, time_ms, false);
    }
    fn log_flag(&mut self, key: &str, value: &str, time_ms: f64, is_error: bool) {
        let _ = writeln!(
            self.out,
            ":::MLLOG {{\"key\": {}, \"value\": {value}, \"time_ms\": {time_ms:.6}, \"namespace\": \
             \"mlperf::logging\", \"event_type\": \"POINT_IN_TIME\", \"metadata\": {{\"is_error\": \
             {is_error}, \"is_warning\": false, \"file\": \"pocketperf-scenarios\", \"line_no\": 0, \
             \"pid\": {}, \"tid\": {}}}}}",
            serde_json::Value::String(key.to_string()),
            self.pid,
            self.pid
        );
    }
}

/// Parses `key : value` lines of an MLPerf summary (ours or LoadGen's) into ordered pairs,
/// keys trimmed; section bars, headers and early-stopping bullet lines are skipped.
pub fn parse_summary(text: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for line in text.lines() {
        let t = line.trim_start();
        if t.starts_with('*') || t.starts_with('=') {
            continue;
        }
        if let Some((k, v)) = line.split_once(':') {
            let k = k.trim();
            if k.is_empty() {
                continue;
            }
            out.push((k.to_string(), v.trim().to_string()));
        }
    }
    out
}
