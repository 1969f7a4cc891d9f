//! `trace.json`: the run as a Chrome trace-event file (the JSON object format that
//! ui.perfetto.dev and chrome://tracing open), written beside `result.json` by every
//! `pocketperf run` (`docs/RESULTS.md`).
//!
//! Everything is on the run's clock (the scenario engine's, which the telemetry sampler also
//! stamps with), in microseconds since the earliest instant the trace holds:
//!
//! - process `queries`: a track per timed query: a complete slice (`X`) from issue to
//!   completion with two nested ones, `to first token` and `decode`, and `token` instants;
//!   process `warm-up`: the same for the warm-up queries (no token stamps are kept for them);
//! - process `telemetry`: one counter (`C`) per telemetry column (temperatures, frequencies,
//!   power, energy, RSS, the governor's gauges, the SUT's cumulative page faults) and
//!   `tokens_per_s`, the output tokens of the timed pass per bucket of time;
//! - process `governor`: an instant with the governor's state at the first timed token, then
//!   one per action (a change of level, threads, caps, idle pause or calibrated busy
//!   share), at the time of the token after which it was taken.
//!
//! Size stays bounded for long runs: at most [`MAX_TOKEN_INSTANTS`] token instants (every
//! k-th token of each query, k recorded as `token_stride`) and at most
//! [`MAX_COUNTER_POINTS`] points per counter (every r-th sample and the last, r recorded as
//! `counter_stride`). `otherData` carries the provenance (the output header of
//! `result.json`'s `meta`), the strides and the query count.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde_json::{Map, Value, json};

use pocketperf_scenarios::TestResult;

use crate::governor_hook::{GovernorHook, TokenGov};
use crate::sut::faults::FaultLog;
use crate::telemetry::faults::FaultCounts;
use crate::telemetry::sampler::SamplerOutput;

/// File name in a result directory.
pub const TRACE_FILE: &str = "trace.json";
/// Version of the `otherData` layout.
pub const TRACE_SCHEMA_VERSION: u32 = 1;
/// Token instants kept at most (every k-th token of each query beyond it).
pub const MAX_TOKEN_INSTANTS: usize = 20_000;
/// Points kept at most per counter track.
pub const MAX_COUNTER_POINTS: usize = 2_000;
/// Telemetry columns left out of the counters: raw battery attributes (the converted
/// `battery.*` and `power.*` columns carry them) and the pid the fault columns count.
const SKIPPED_COLUMNS: &[&str] = &["raw.", "faults.pid"];

const PID_QUERIES: u64 = 1;
const PID_WARMUP: u64 = 2;
const PID_TELEMETRY: u64 = 3;
const PID_GOVERNOR: u64 = 4;

/// One query of the trace.
#[derive(Debug, Clone)]
pub struct TraceQuery<'a> {
    pub id: u64,
    pub issue_ns: u64,
    pub first_token_ns: Option<u64>,
    /// `None` when it never completed (failed, or cut by a timeout).
    pub complete_ns: Option<u64>,
    pub tokens: u64,
    /// Each token's time, when the SUT streamed them.
    pub token_ns: &'a [u64],
    /// Extra fields shown with the query's slice (sample index, page faults, …).
    pub args: Map<String, Value>,
}

/// An instant on the governor's track.
#[derive(Debug, Clone, PartialEq)]
pub struct TraceAction {
    pub t_ns: u64,
    pub name: String,
    pub args: Value,
}

/// What a trace is made of.
#[derive(Debug, Default)]
pub struct TraceInput<'a> {
    /// Provenance: `result.json`'s `meta` (the output header).
    pub provenance: Value,
    /// What the query tracks are called (`query`, `turn`).
    pub query_label: &'static str,
    pub queries: Vec<TraceQuery<'a>>,
    pub warmup: Vec<TraceQuery<'a>>,
    pub telemetry: Option<&'a SamplerOutput>,
    pub actions: Vec<TraceAction>,
}

/// Governor actions from its per-token record: an instant with the state at the first timed
/// token, then one wherever the level, thread count, caps or idle pause differ from the token
/// before. `skip` entries of the record come first and have no time (warm-up tokens, which
/// are not stamped); `time_of(query, token)` is the time of a timed token.
pub fn governor_actions(
    record: &[TokenGov],
    skip: usize,
    time_of: impl Fn(u64, usize) -> Option<u64>,
) -> Vec<TraceAction> {
    let mut out = Vec::new();
    let mut prev: Option<&TokenGov> = None;
    for g in record.iter().skip(skip) {
        let changed = prev.is_none_or(|p| {
            p.level != g.level
                || p.threads != g.threads
                || p.caps != g.caps
                || (p.pause_ms > 0.0) != (g.pause_ms > 0.0)
                || p.busy_share != g.busy_share
        });
        let calibrated = prev.is_some_and(|p| p.busy_share != g.busy_share);
        if changed && let Some(t) = time_of(g.query, g.token) {
            out.push(TraceAction {
                t_ns: t,
                name: match (calibrated, g.busy_share) {
                    (true, Some(s)) => format!("governor calibrated to busy share {s:.3}"),
                    _ => format!("governor level {}", g.level),
                },
                args: json!({
                    "query": g.query,
                    "token": g.token,
                    "level": g.level,
                    "threads": g.threads,
                    "caps_khz": g.caps,
                    "pause_ms": g.pause_ms,
                    "output": g.output,
                    "temp_c": g.temp_c,
                    "status": g.status,
                    "busy_share": g.busy_share,
                }),
            });
        }
        prev = Some(g);
    }
    out
}

/// `ceil(n / cap)`, at least 1: keep every k-th of `n` items to stay within `cap`.
fn stride(n: usize, cap: usize) -> usize {
    n.div_ceil(cap.max(1)).max(1)
}

fn us(t_ns: u64, t0: u64) -> f64 {
    t_ns.saturating_sub(t0) as f64 / 1000.0
}

fn meta_event(pid: u64, tid: Option<u64>, name: &str, args: Value) -> Value {
    let mut e = json!({ "ph": "M", "pid": pid, "name": name, "args": args });
    if let Some(t) = tid {
        e["tid"] = json!(t);
    }
    e
}

/// The slices and instants of one query on its own track, in time order.
fn query_events(
    q: &TraceQuery<'_>,
    pid: u64,
    label: &str,
    t0: u64,
    end_ns: u64,
    token_stride: usize,
    out: &mut Vec<Value>,
) {
    let tid = q.id + 1;
    out.push(meta_event(
        pid,
        Some(tid),
        "thread_name",
        json!({ "name": format!("{label} {}", q.id) }),
    ));
    out.push(meta_event(
        pid,
        Some(tid),
        "thread_sort_index",
        json!({ "sort_index": q.id }),
    ));
    let end = q.complete_ns.unwrap_or(end_ns).max(q.issue_ns);
    let mut args = q.args.clone();
    args.insert("tokens".into(), json!(q.tokens));
    args.insert("completed".into(), json!(q.complete_ns.is_some()));
    out.push(json!({
        "ph": "X", "pid": pid, "tid": tid, "cat": "query",
        "name": format!("{label} {}", q.id),
        "ts": us(q.issue_ns, t0), "dur": us(end, q.issue_ns),
        "args": args,
    }));
    if let Some(ft) = q.first_token_ns {
        let ft = ft.clamp(q.issue_ns, end);
        out.push(json!({
            "ph": "X", "pid": pid, "tid": tid, "cat": "query", "name": "to first token",
            "ts": us(q.issue_ns, t0), "dur": us(ft, q.issue_ns),
        }));
        out.push(json!({
            "ph": "X", "pid": pid, "tid": tid, "cat": "query", "name": "decode",
            "ts": us(ft, t0), "dur": us(end, ft),
        }));
    }
    let mut last = q.issue_ns;
    for (j, &t) in q.token_ns.iter().enumerate().step_by(token_stride) {
        // Stamps are in order; one out of order (another thread's clock) is held at the
        // previous one so the track stays monotone.
        last = last.max(t);
        out.push(json!({
            "ph": "i", "s": "t", "pid": pid, "tid": tid, "cat": "token", "name": "token",
            "ts": us(last, t0), "args": { "index": j },
        }));
    }
}

/// `tokens_per_s` points: output tokens of the timed queries per bucket (a second, or longer
/// so the run fits in [`MAX_COUNTER_POINTS`] buckets), each at its bucket's start. Streamed
/// tokens count at their stamps, tokens reported only at completion at the completion.
fn token_rate(queries: &[TraceQuery<'_>]) -> Vec<(u64, f64)> {
    let mut stamps: Vec<(u64, u64)> = Vec::new();
    for q in queries {
        stamps.extend(q.token_ns.iter().map(|&t| (t, 1)));
        let rest = q.tokens.saturating_sub(q.token_ns.len() as u64);
        if let (true, Some(c)) = (rest > 0, q.complete_ns) {
            stamps.push((c, rest));
        }
    }
    let (Some(lo), Some(hi)) = (
        queries.iter().map(|q| q.issue_ns).min(),
        stamps.iter().map(|s| s.0).max(),
    ) else {
        return Vec::new();
    };
    let span = hi.saturating_sub(lo) + 1;
    let width = (span.div_ceil(MAX_COUNTER_POINTS as u64)).max(1_000_000_000);
    let n = span.div_ceil(width) as usize;
    let mut counts = vec![0u64; n];
    for (t, c) in stamps {
        let i = (t.saturating_sub(lo) / width) as usize;
        if let Some(b) = counts.get_mut(i) {
            *b += c;
        }
    }
    let secs = width as f64 / 1e9;
    counts
        .into_iter()
        .enumerate()
        .map(|(i, c)| (lo + i as u64 * width, c as f64 / secs))
        .collect()
}

/// The trace document.
pub fn build(input: &TraceInput<'_>) -> Value {
    let all = input.queries.iter().chain(&input.warmup);
    let tel_rows = input.telemetry.map_or(&[][..], |t| t.rows.as_slice());
    let t0 = all
        .clone()
        .map(|q| q.issue_ns)
        .chain(tel_rows.first().map(|r| r.t_ns))
        .chain(input.actions.iter().map(|a| a.t_ns))
        .min()
        .unwrap_or(0);
    let end_ns = all
        .clone()
        .flat_map(|q| [Some(q.issue_ns), q.complete_ns, q.token_ns.last().copied()])
        .flatten()
        .chain(tel_rows.last().map(|r| r.t_ns))
        .max()
        .unwrap_or(t0);
    let stamped: usize = input.queries.iter().map(|q| q.token_ns.len()).sum();
    let token_stride = stride(stamped, MAX_TOKEN_INSTANTS);
    let counter_stride = stride(tel_rows.len(), MAX_COUNTER_POINTS);
    let label = if input.query_label.is_empty() {
        "query"
    } else {
        input.query_label
    };

    let mut ev: Vec<Value> = Vec::new();
    for (pid, name) in [
        (PID_QUERIES, "queries"),
        (PID_WARMUP, "warm-up"),
        (PID_TELEMETRY, "telemetry"),
        (PID_GOVERNOR, "governor"),
    ] {
        ev.push(meta_event(
            pid,
            None,
            "process_name",
            json!({ "name": name }),
        ));
        ev.push(meta_event(
            pid,
            None,
            "process_sort_index",
            json!({ "sort_index": pid }),
        ));
    }
    for q in &input.queries {
        query_events(q, PID_QUERIES, label, t0, end_ns, token_stride, &mut ev);
    }
    for q in &input.warmup {
        query_events(q, PID_WARMUP, "warm-up", t0, end_ns, 1, &mut ev);
    }
    let mut counters: Vec<String> = Vec::new();
    if let Some(t) = input.telemetry {
        for (c, name) in t.columns.iter().enumerate() {
            if SKIPPED_COLUMNS.iter().any(|s| name.starts_with(s)) {
                continue;
            }
            let n = t.rows.len();
            let points: Vec<(u64, f64)> = t
                .rows
                .iter()
                .enumerate()
                .filter(|(i, _)| i % counter_stride == 0 || i + 1 == n)
                .filter_map(|(_, r)| r.values.get(c).copied().flatten().map(|v| (r.t_ns, v)))
                .collect();
            if points.is_empty() {
                continue;
            }
            counters.push(name.clone());
            for (t_ns, v) in points {
                ev.push(json!({
                    "ph": "C", "pid": PID_TELEMETRY, "tid": 0, "name": name,
                    "ts": us(t_ns, t0), "args": { "value": v },
                }));
            }
        }
    }
    let rate = token_rate(&input.queries);
    if !rate.is_empty() {
        counters.push("tokens_per_s".into());
    }
    for (t_ns, v) in rate {
        ev.push(json!({
            "ph": "C", "pid": PID_TELEMETRY, "tid": 0, "name": "tokens_per_s",
            "ts": us(t_ns, t0), "args": { "value": v },
        }));
    }
    let mut actions: Vec<&TraceAction> = input.actions.iter().collect();
    actions.sort_by_key(|a| a.t_ns);
    if !actions.is_empty() {
        ev.push(meta_event(
            PID_GOVERNOR,
            Some(1),
            "thread_name",
            json!({ "name": "actions" }),
        ));
    }
    for a in actions {
        ev.push(json!({
            "ph": "i", "s": "t", "pid": PID_GOVERNOR, "tid": 1, "cat": "governor",
            "name": a.name, "ts": us(a.t_ns, t0), "args": a.args,
        }));
    }
    json!({
        "traceEvents": ev,
        "displayTimeUnit": "ms",
        "otherData": {
            "schema": format!("pocketperf-trace/{TRACE_SCHEMA_VERSION}"),
            "schema_version": TRACE_SCHEMA_VERSION,
            "clock": "the run clock (the scenario engine's and the telemetry sampler's); ts in µs since t0_ns",
            "t0_ns": t0,
            "queries": input.queries.len(),
            "warmup_queries": input.warmup.len(),
            "token_stride": token_stride,
            "counter_stride": counter_stride,
            "counters": counters,
            "governor_actions": input.actions.len(),
            "provenance": input.provenance,
        },
    })
}

/// Writes `dir/trace.json` (temporary file, then rename) and returns its path and size.
pub fn write(dir: &Path, input: &TraceInput<'_>) -> Result<(PathBuf, u64)> {
    let path = dir.join(TRACE_FILE);
    let bytes = serde_json::to_vec(&build(input)).context("trace.json: encoding")?;
    pocketperf_reports::files::replace_file(&path, &bytes)
        .map_err(|(p, e)| anyhow::anyhow!("{}: cannot write: {e}", p.display()))?;
    Ok((path, bytes.len() as u64))
}

/// The `(query, token) → time` index of the timed queries, for [`governor_actions`].
pub fn token_times(queries: &[TraceQuery<'_>]) -> HashMap<(u64, usize), u64> {
    queries
        .iter()
        .flat_map(|q| q.token_ns.iter().enumerate().map(|(k, &t)| ((q.id, k), t)))
        .collect()
}

fn fault_args(f: Option<&Option<FaultCounts>>) -> Map<String, Value> {
    let mut m = Map::new();
    if let Some(Some(f)) = f {
        m.insert("minor_faults".into(), json!(f.minor));
        m.insert("major_faults".into(), json!(f.major));
    }
    m
}

/// The trace of a scenario-engine run (SingleStream, Offline, Server): its timed and
/// warm-up queries with their page faults (`faults`, warm-up queries first), the telemetry
/// recording and the governor's actions. The governor's record starts with the warm-up's
/// tokens, which have no stamps: as many entries as the warm-up generated are skipped.
pub fn scenario_input<'a>(
    result: &'a TestResult,
    faults: &FaultLog,
    telemetry: Option<&'a SamplerOutput>,
    governor: Option<&GovernorHook>,
    provenance: Value,
) -> TraceInput<'a> {
    let warm = result.warmup.len();
    let queries: Vec<TraceQuery<'a>> = result
        .query_records()
        .map(|q| {
            let mut args = fault_args(faults.per_query.get(warm + q.id as usize));
            args.insert("sample_index".into(), json!(q.sample_index));
            TraceQuery {
                id: q.id,
                issue_ns: q.issue_ns,
                first_token_ns: q.first_token_ns,
                complete_ns: q.complete_ns,
                tokens: q.tokens,
                token_ns: q.token_ns,
                args,
            }
        })
        .collect();
    let warmup = result
        .warmup
        .iter()
        .map(|w| {
            let mut args = fault_args(faults.per_query.get(w.id as usize));
            args.insert("sample_index".into(), json!(w.sample_index));
            TraceQuery {
                id: w.id,
                issue_ns: w.issue_ns,
                first_token_ns: w.first_token_ns,
                complete_ns: w.complete_ns,
                tokens: w.tokens,
                token_ns: &[],
                args,
            }
        })
        .collect();
    let actions = governor.map_or_else(Vec::new, |g| {
        let skip: u64 = result.warmup.iter().map(|w| w.tokens).sum();
        let times = token_times(&queries);
        governor_actions(g.tokens(), skip as usize, |q, k| {
            times.get(&(q, k)).copied()
        })
    });
    TraceInput {
        provenance,
        query_label: "query",
        queries,
        warmup,
        telemetry,
        actions,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::telemetry::sampler::{Row, SamplerCost};

    fn q(id: u64, issue: u64, tokens: &[u64]) -> TraceQuery<'_> {
        TraceQuery {
            id,
            issue_ns: issue,
            first_token_ns: tokens.first().copied(),
            complete_ns: tokens.last().map(|t| t + 1_000),
            tokens: tokens.len() as u64,
            token_ns: tokens,
            args: Map::new(),
        }
    }

    fn output(rows: usize) -> SamplerOutput {
        SamplerOutput {
            columns: vec![
                "temp.soc.c".into(),
                "faults.pid".into(),
                "raw.battery.x".into(),
            ],
            rows: (0..rows)
                .map(|i| Row {
                    t_ns: 1_000_000 + i as u64 * 100_000_000,
                    values: vec![Some(40.0 + i as f64), Some(7.0), Some(1.0)],
                })
                .collect(),
            events: Vec::new(),
            missing_cells: 0,
            cost: SamplerCost::default(),
            csv_path: None,
            col_soc: Some(0),
            col_skin: None,
            col_energy: 0,
            col_power: 0,
        }
    }

    #[test]
    fn long_runs_are_strided_within_the_caps() {
        let many: Vec<u64> = (0..30_000u64).map(|i| 5_000_000 + i * 1_000).collect();
        let tel = output(5_001);
        let input = TraceInput {
            queries: vec![q(0, 4_000_000, &many)],
            telemetry: Some(&tel),
            ..TraceInput::default()
        };
        let doc = build(&input);
        let ev = doc["traceEvents"].as_array().unwrap();
        let tokens = ev.iter().filter(|e| e["name"] == "token").count();
        assert_eq!(doc["otherData"]["token_stride"], 2);
        assert_eq!(tokens, 15_000);
        let temps: Vec<f64> = ev
            .iter()
            .filter(|e| e["name"] == "temp.soc.c")
            .map(|e| e["args"]["value"].as_f64().unwrap())
            .collect();
        // Every third of 5001 samples (0, 3, …, 4998) and the last (5000).
        assert_eq!(doc["otherData"]["counter_stride"], 3);
        assert_eq!(temps.len(), 1_667 + 1);
        assert_eq!(temps.last(), Some(&(40.0 + 5_000.0)));
        // The pid column and raw attributes are no counters.
        assert_eq!(
            doc["otherData"]["counters"],
            json!(["temp.soc.c", "tokens_per_s"])
        );
    }

    #[test]
    fn the_token_rate_counts_streamed_and_completion_tokens_per_second() {
        let a: Vec<u64> = vec![100, 200, 1_500_000_000];
        let mut b = q(1, 0, &[]);
        b.tokens = 4;
        b.complete_ns = Some(2_100_000_000);
        let rate = token_rate(&[q(0, 0, &a), b]);
        assert_eq!(
            rate,
            vec![(0, 2.0), (1_000_000_000, 1.0), (2_000_000_000, 4.0)]
        );
    }

    #[test]
    fn governor_actions_are_changes_placed_at_their_tokens() {
        use pocketperf_runtime::governor::StepStatus;
        let g = |query: u64, token: usize, level: usize| TokenGov {
            query,
            token,
            temp_c: None,
            level,
            output: 0.0,
            status: StepStatus::Off,
            busy: None,
            threads: Some(2),
            caps: Vec::new(),
            pause_ms: 0.0,
            busy_share: None,
        };
        // Two warm-up tokens of query 0, then the timed pass's query 0 and 1; the table is
        // calibrated at the timed query 1's first token.
        let mut rec = vec![
            g(0, 0, 0),
            g(0, 1, 1),
            g(0, 0, 1),
            g(0, 1, 2),
            g(1, 0, 2),
            g(1, 1, 0),
        ];
        rec[4].busy_share = Some(0.25);
        rec[5].busy_share = Some(0.25);
        let times: HashMap<(u64, usize), u64> =
            [((0, 0), 10), ((0, 1), 20), ((1, 0), 30), ((1, 1), 40)].into();
        let a = governor_actions(&rec, 2, |q, k| times.get(&(q, k)).copied());
        let at: Vec<(u64, &str)> = a.iter().map(|a| (a.t_ns, a.name.as_str())).collect();
        // The state at the first timed token, then each change.
        assert_eq!(
            at,
            [
                (10, "governor level 1"),
                (20, "governor level 2"),
                (30, "governor calibrated to busy share 0.250"),
                (40, "governor level 0")
            ]
        );
    }
}
