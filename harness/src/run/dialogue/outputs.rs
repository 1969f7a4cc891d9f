//! The dialogue run's outputs: the `performance` section (every turn a query), the labeled
//! intervals telemetry attributes energy to, `tokens.csv`, and the terminal line.

use std::path::Path;

use anyhow::{Context, Result};
use pocketperf_reports::schema::{Performance, QuerySample, ResultFile};

use super::{DialogueRecord, TurnRecord};
use crate::governor_hook::GovernorHook;
use crate::outputs::{file_header, finish_csv, ms, percentiles_of_ns, tokens_csv};

/// The `performance` section of a dialogue run: every turn is a query (its `sample_index` is
/// the dialogue's position), latency from turn start to last token.
pub fn performance_section(records: &[DialogueRecord], errors: &[String]) -> Option<Performance> {
    let start = records.first()?.start_ns;
    let end = records.iter().map(|r| r.end_ns).max().unwrap_or(start);
    let turns: Vec<(&DialogueRecord, &TurnRecord)> = records
        .iter()
        .flat_map(|d| d.turns.iter().map(move |t| (d, t)))
        .collect();
    let mut per_query = Vec::with_capacity(turns.len());
    let (mut lat, mut ttft, mut tpot, mut itl) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for (id, (d, t)) in turns.iter().enumerate() {
        let l = t.end_ns.saturating_sub(t.start_ns);
        let f = t.first_token_ns.map(|f| f.saturating_sub(t.start_ns));
        let tp = f.and_then(|f| pocketperf_scenarios::tpot_ns(l, f, t.generated as u64));
        lat.push(l);
        ttft.extend(f);
        tpot.extend(tp);
        itl.extend(t.token_ns.windows(2).map(|w| w[1].saturating_sub(w[0])));
        per_query.push(QuerySample {
            id: id as u64,
            sample_index: d.index as u64,
            start_s: t.start_ns.saturating_sub(start) as f64 / 1e9,
            latency_ms: ms(l),
            ttft_ms: f.map(ms),
            tokens: t.generated as u32,
            tpot_ms: tp.map(ms),
            minor_faults: None,
            major_faults: None,
        });
    }
    let duration_s = end.saturating_sub(start) as f64 / 1e9;
    let tokens: u64 = records.iter().map(|r| r.tokens).sum();
    Some(Performance {
        scenario: "Dialogue".into(),
        mode: "PerformanceOnly".into(),
        valid: errors.is_empty() && records.iter().all(|r| r.complete),
        invalid_reasons: errors.iter().take(20).cloned().collect(),
        queries: turns.len() as u64,
        duration_s,
        qps: if duration_s > 0.0 {
            turns.len() as f64 / duration_s
        } else {
            0.0
        },
        tokens_per_s: if duration_s > 0.0 {
            tokens as f64 / duration_s
        } else {
            0.0
        },
        latency_ms: percentiles_of_ns(lat)?,
        ttft_ms: percentiles_of_ns(ttft),
        tpot_ms: percentiles_of_ns(tpot),
        itl_ms: percentiles_of_ns(itl),
        early_stopping: None,
        per_query,
        backend_counters: None,
        warmup: None,
    })
}

/// Labeled turn and dialogue intervals for `telemetry.json`.
pub fn intervals(records: &[DialogueRecord]) -> Vec<(String, u64, u64, u64)> {
    let mut v = Vec::new();
    for d in records {
        for t in &d.turns {
            v.push((
                format!("{}#{}/turn{}", d.id, d.index, t.turn),
                t.start_ns,
                t.end_ns,
                t.generated as u64,
            ));
        }
        v.push((
            format!("{}#{}", d.id, d.index),
            d.start_ns,
            d.end_ns,
            d.tokens,
        ));
    }
    v
}

/// Writes `tokens.csv` (one row per generated token, ms from the first dialogue's start;
/// `query` numbers the turns as in `performance.per_query`).
/// With a governor, its per-token columns follow (`gov_temp_c` … `gov_busy_share`, as in the
/// other scenarios' `tokens.csv`).
pub fn write_tokens_csv(
    dir: &Path,
    records: &[DialogueRecord],
    file: &ResultFile,
    governor: Option<&GovernorHook>,
) -> Result<()> {
    let (path, mut w) = tokens_csv(dir, &file_header(file))?;
    let cant = || format!("{}: cannot write", path.display());
    let mut columns = vec!["query", "token", "t_ms"];
    if let Some(g) = governor {
        columns.extend(g.csv_columns());
    }
    w.write_record(&columns).with_context(cant)?;
    let index = governor.map(GovernorHook::token_index).unwrap_or_default();
    let start = records.first().map_or(0, |r| r.start_ns);
    let turns = records.iter().flat_map(|d| d.turns.iter());
    for (q, t) in turns.enumerate() {
        for (k, ns) in t.token_ns.iter().enumerate() {
            let t_ms = format!("{:.3}", ms(ns.saturating_sub(start)));
            let mut cells = vec![q.to_string(), k.to_string(), t_ms];
            if let Some(g) = governor {
                cells.extend(g.csv_cells(&index, q as u64, k));
            }
            w.write_record(&cells).with_context(cant)?;
        }
    }
    finish_csv(&path, w)
}

/// One line for the terminal.
pub fn summary_line(f: &ResultFile) -> String {
    let perf = f
        .performance
        .as_ref()
        .map_or("no turns completed".into(), |p| {
            format!(
                "dialogue: {} turns, {:.2} tokens/s, TTFT p90 {}",
                p.queries,
                p.tokens_per_s,
                p.ttft_ms
                    .as_ref()
                    .map_or("-".into(), |t| format!("{:.1} ms", t.p90))
            )
        });
    let energy = f.energy.as_ref().map_or("no energy meter".into(), |e| {
        format!(
            "{} dialogues: {:.3} mWh/dialogue net [{:.3}, {:.3}], gross {:.3}, {:.4} J/token, \
             {:.2} tokens/J ({}{})",
            e.dialogues,
            e.mwh_per_dialogue_net.mean,
            e.mwh_per_dialogue_net.lo,
            e.mwh_per_dialogue_net.hi,
            e.mwh_per_dialogue_gross.mean,
            e.j_per_token,
            e.tokens_per_j,
            e.meter,
            if e.reliable { "" } else { ", UNRELIABLE" }
        )
    });
    format!("{perf}; {energy}")
}
