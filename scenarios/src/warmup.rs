//! Warm-up queries: `n` queries issued one at a time after the performance sample set is
//! loaded and before the timed pass starts, so caches, page tables and clocks settle first.
//! They are never part of the pass: they have records of their own, their sample choice
//! draws nothing from LoadGen's generators (the loaded set in load order, cycled), and the
//! timed pass's ids, samples, counts, percentiles and early stopping are exactly those of a
//! run without warm-up. LoadGen has no warm-up phase; this is PocketPerf's addition
//! (docs/SCENARIOS.md, "Warm-up"), logged in the detail log under `pocketperf_warmup_*`.
//!
//! Here: the record of one warm-up query; `engine` runs them (`run_test_with_warmup`) and
//! `logs` writes them.

/// One warm-up query as the SUT answered it (times on the run's clock, ns).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct WarmupQuery {
    /// Warm-up id (0-based; the timed pass numbers its queries from 0 again).
    pub id: u64,
    pub sample_index: u64,
    pub issue_ns: u64,
    pub first_token_ns: Option<u64>,
    /// `None` when the SUT reported the query as failed.
    pub complete_ns: Option<u64>,
    pub tokens: u64,
}

impl WarmupQuery {
    pub fn latency_ns(&self) -> Option<u64> {
        self.complete_ns.map(|c| c.saturating_sub(self.issue_ns))
    }

    pub fn ttft_ns(&self) -> Option<u64> {
        self.first_token_ns.map(|f| f.saturating_sub(self.issue_ns))
    }
}
