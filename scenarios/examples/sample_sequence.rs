//! Prints, as one JSON object, what the scenario engine issues for given settings: the
//! loaded set, each performance query's sample index and issue time (offset from the start
//! of the pass, ns; Server: the scheduled arrival), and the accuracy pass's sample order.
//! The run goes through `run_test` on a virtual clock with a SUT that answers at once, so
//! the figures are the engine's own; `scripts/loadgen-compare.py` compares them with what
//! MLPerf LoadGen issues for the same settings.
//!
//! Usage: `cargo run -p pocketperf-scenarios --example sample_sequence -- KEY=VALUE...` with
//! keys `scenario` (SingleStream|Server|Offline), `mode` (performance|accuracy), `total`,
//! `performance`, `qsl_seed`, `sample_seed`, `schedule_seed`, `min_queries`, `max_queries`,
//! `min_duration_ms`, `qps` (Server target / Offline expected), `latency_ns` (SingleStream
//! expected latency) and `equal_issue` (0|1).

use pocketperf_scenarios::{
    NullQsl, Query, Responder, Scenario, SystemUnderTest, TestMode, TestSettings, VirtualClock,
    run_test,
};

/// Completes each query at once and remembers what it was asked for, in issue order.
#[derive(Default)]
struct Recorder {
    issued: Vec<(u64, u64)>,
}

impl SystemUnderTest for Recorder {
    fn name(&self) -> &str {
        "Recorder"
    }
    fn issue_queries(&mut self, queries: &[Query], responder: &mut Responder<'_>) {
        for q in queries {
            self.issued.push((q.sample_index, responder.now_ns()));
            responder.complete(q.id, 0, None);
        }
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut s = TestSettings::new(Scenario::SingleStream);
    let mut qsl = NullQsl {
        total: 100,
        performance: 10,
    };
    s.min_duration_ms = 0;
    for arg in std::env::args().skip(1) {
        let (k, v) = arg
            .split_once('=')
            .ok_or_else(|| format!("expected KEY=VALUE, got {arg}"))?;
        let num = || v.parse::<u64>().map_err(|e| format!("{k}={v}: {e}"));
        match k {
            "scenario" => {
                s.scenario = match v {
                    "SingleStream" => Scenario::SingleStream,
                    "Server" => Scenario::Server,
                    "Offline" => Scenario::Offline,
                    _ => return Err(format!("unknown scenario {v}").into()),
                }
            }
            "mode" => {
                s.mode = match v {
                    "performance" => TestMode::PerformanceOnly,
                    "accuracy" => TestMode::AccuracyOnly,
                    _ => return Err(format!("unknown mode {v}").into()),
                }
            }
            "total" => qsl.total = num()?,
            "performance" => qsl.performance = num()?,
            "qsl_seed" => s.qsl_rng_seed = num()?,
            "sample_seed" => s.sample_index_rng_seed = num()?,
            "schedule_seed" => s.schedule_rng_seed = num()?,
            "min_queries" => s.min_query_count = num()?,
            "max_queries" => s.max_query_count = num()?,
            "min_duration_ms" => s.min_duration_ms = num()?,
            "latency_ns" => s.single_stream_expected_latency_ns = num()?,
            "equal_issue" => s.sample_concatenate_permutation = num()? != 0,
            "qps" => {
                let q: f64 = v.parse().map_err(|e| format!("{k}={v}: {e}"))?;
                s.server_target_qps = q;
                s.offline_expected_qps = q;
            }
            _ => return Err(format!("unknown key {k}").into()),
        }
    }
    let clock = VirtualClock::new();
    let mut sut = Recorder::default();
    let r = run_test(&mut sut, &mut qsl, &s, &clock)?;
    let start = r.performance.as_ref().map(|p| p.start_ns).unwrap_or(0);
    let queries: Vec<(u64, u64)> = r
        .query_records()
        .map(|q| (q.sample_index, q.issue_ns - start))
        .collect();
    let accuracy: Vec<u64> = r.accuracy.iter().flatten().map(|e| e.qsl_idx).collect();
    // What the SUT saw must be what the results regenerate.
    if s.mode == TestMode::PerformanceOnly {
        let seen: Vec<u64> = sut.issued.iter().map(|&(i, _)| i).collect();
        let regenerated: Vec<u64> = queries.iter().map(|&(i, _)| i).collect();
        if seen != regenerated {
            return Err("results regenerated other sample indices than the SUT saw".into());
        }
    }
    let out = serde_json::json!({
        "loaded": r.loaded_set,
        "samples": queries.iter().map(|q| q.0).collect::<Vec<_>>(),
        "issue_ns": queries.iter().map(|q| q.1).collect::<Vec<_>>(),
        "accuracy": accuracy,
    });
    println!("{out}");
    Ok(())
}
