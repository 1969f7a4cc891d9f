//! The contracts between the scenario engine and what it measures: the system under test
//! (LoadGen's `SystemUnderTest` + `QuerySamplesComplete`, with token stamps as in LoadGen's
//! token-latency mode), the query sample library (LoadGen's `QuerySampleLibrary`), and the
//! [`Responder`] through which an SUT reports first token, each token and completion.

use crate::clock::Clock;
use crate::progress::Progress;

/// One query: a run-unique id and the QSL sample it asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Query {
    /// Id to report back through the [`Responder`].
    pub id: u64,
    /// Sample index in the QSL.
    pub sample_index: u64,
}

/// Error type QSL implementations return (any error, boxed).
pub type QslError = Box<dyn std::error::Error + Send + Sync>;

/// The data set side: which samples exist and loading them into memory.
pub trait QuerySampleLibrary {
    /// Name for logs.
    fn name(&self) -> &str;
    /// Number of samples in the library.
    fn total_sample_count(&self) -> u64;
    /// Number of samples that fit in memory for the performance run.
    fn performance_sample_count(&self) -> u64;
    /// Loads `indices` before queries that use them are issued.
    fn load_samples(&mut self, indices: &[u64]) -> Result<(), QslError>;
    /// Releases `indices` after the run.
    fn unload_samples(&mut self, indices: &[u64]) -> Result<(), QslError>;
}

/// The measured side. Queries may be completed inside `issue_queries` (a synchronous SUT:
/// an in-process model that decodes on the calling thread) or later, from `poll`
/// (an SUT whose work runs elsewhere: a child process, an HTTP endpoint).
pub trait SystemUnderTest {
    /// Name for logs.
    fn name(&self) -> &str;
    /// Issues `queries`. SingleStream and Server pass one query per call; Offline passes
    /// the whole batch in consecutive slices (at most [`crate::OFFLINE_ISSUE_CHUNK`] each)
    /// followed by [`SystemUnderTest::flush_queries`].
    fn issue_queries(&mut self, queries: &[Query], responder: &mut Responder<'_>);
    /// Called once no more queries will be issued in this batch or run.
    fn flush_queries(&mut self, _responder: &mut Responder<'_>) {}
    /// Called while the engine waits; an asynchronous SUT reports finished work here.
    fn poll(&mut self, _responder: &mut Responder<'_>) {}
}

const PENDING: u64 = u64::MAX;
/// Completion slot of a query the SUT reported as failed: no longer pending, no latency.
const FAILED: u64 = u64::MAX - 1;

/// Per-query storage for one pass, column-wise so a 10M-sample Offline run stays small:
/// only completion times are always kept; issue times are one value for Offline; token
/// columns exist only once an SUT reports tokens.
#[derive(Debug, Default)]
pub(crate) struct Records {
    pub(crate) single_issue: Option<u64>,
    pub(crate) issue: Vec<u64>,
    pub(crate) complete: Vec<u64>,
    pub(crate) first_token: Vec<u64>,
    pub(crate) tokens: Vec<u32>,
    pub(crate) token_times: Vec<Vec<u64>>,
    pub(crate) keep_outputs: bool,
    pub(crate) outputs: Vec<(u64, Vec<u8>)>,
    pub(crate) completed: u64,
    pub(crate) errors: Vec<String>,
    pub(crate) num_errors: u64,
    pub(crate) failures: Vec<String>,
    pub(crate) num_failed: u64,
}

impl Records {
    pub(crate) fn issued(&self) -> u64 {
        self.complete.len() as u64
    }
    pub(crate) fn push(&mut self, issue_ns: u64) {
        if self.single_issue.is_none() {
            self.issue.push(issue_ns);
        }
        self.complete.push(PENDING);
        if !self.first_token.is_empty() {
            self.first_token.push(PENDING);
        }
        if !self.tokens.is_empty() {
            self.tokens.push(0);
        }
        if !self.token_times.is_empty() {
            self.token_times.push(Vec::new());
        }
    }
    pub(crate) fn issue_of(&self, id: usize) -> u64 {
        match self.single_issue {
            Some(t) => t,
            None => self.issue[id],
        }
    }
    pub(crate) fn is_complete(&self, id: usize) -> bool {
        self.complete.get(id).is_some_and(|&c| c != PENDING)
    }
    pub(crate) fn completion(&self, id: usize) -> Option<u64> {
        self.complete.get(id).copied().filter(|&c| c < FAILED)
    }
    pub(crate) fn first_token_of(&self, id: usize) -> Option<u64> {
        self.first_token.get(id).copied().filter(|&c| c != PENDING)
    }
    pub(crate) fn tokens_of(&self, id: usize) -> u64 {
        self.tokens.get(id).copied().unwrap_or(0) as u64
    }
    pub(crate) fn token_times_of(&self, id: usize) -> &[u64] {
        self.token_times
            .get(id)
            .map(|v| v.as_slice())
            .unwrap_or(&[])
    }
    fn error(&mut self, msg: String) {
        self.num_errors += 1;
        if self.errors.len() < 100 {
            self.errors.push(msg);
        }
    }
    fn check_open(&mut self, id: u64, what: &str) -> Option<usize> {
        let i = id as usize;
        if id >= self.issued() {
            self.error(format!("{what} for query {id}, which was never issued"));
            return None;
        }
        if self.complete[i] != PENDING {
            self.error(format!(
                "{what} for query {id}, which had already completed"
            ));
            return None;
        }
        Some(i)
    }
    fn set_first_token(&mut self, i: usize, t: u64) {
        if self.first_token.is_empty() {
            self.first_token = vec![PENDING; self.complete.len()];
        }
        if self.first_token[i] == PENDING {
            self.first_token[i] = t;
        }
    }
}

/// How an SUT reports progress. Times come from the run's clock ([`Responder::now_ns`]) or
/// are given explicitly (`*_at`, for SUTs that stamp on another thread or simulate time).
pub struct Responder<'a> {
    pub(crate) clock: &'a dyn Clock,
    pub(crate) rec: &'a mut Records,
    /// Told of each token and each ended query (the timed pass's observer, else a no-op).
    pub(crate) progress: &'a dyn Progress,
}

impl Responder<'_> {
    /// The run clock's current time, ns.
    pub fn now_ns(&self) -> u64 {
        self.clock.now_ns()
    }

    /// The clock itself (a simulated SUT may advance a virtual clock through its own handle).
    pub fn clock(&self) -> &dyn Clock {
        self.clock
    }

    /// First token of query `id` now. Non-streaming SUTs call this once; streaming SUTs
    /// may call [`Responder::token`] for every token instead.
    pub fn first_token(&mut self, id: u64) {
        let t = self.clock.now_ns();
        self.first_token_at(id, t);
    }

    /// First token of query `id` at `t_ns`.
    pub fn first_token_at(&mut self, id: u64, t_ns: u64) {
        if let Some(i) = self.rec.check_open(id, "first token") {
            self.rec.set_first_token(i, t_ns);
        }
    }

    /// One output token of query `id` now (including the first).
    pub fn token(&mut self, id: u64) {
        let t = self.clock.now_ns();
        self.token_at(id, t);
    }

    /// One output token of query `id` at `t_ns` (including the first); the first stamp also
    /// sets the time to first token when [`Responder::first_token`] was not called.
    pub fn token_at(&mut self, id: u64, t_ns: u64) {
        if let Some(i) = self.rec.check_open(id, "token") {
            self.rec.set_first_token(i, t_ns);
            if self.rec.token_times.is_empty() {
                self.rec.token_times = vec![Vec::new(); self.rec.complete.len()];
            }
            self.rec.token_times[i].push(t_ns);
            self.progress.token();
        }
    }

    /// Query `id` completed now with `tokens` output tokens (0 when the SUT does not count
    /// tokens; then the number of [`Responder::token`] stamps is used) and, in accuracy
    /// mode, its output bytes.
    pub fn complete(&mut self, id: u64, tokens: u64, output: Option<&[u8]>) {
        let t = self.clock.now_ns();
        self.complete_at(id, t, tokens, output);
    }

    /// Query `id` completed at `t_ns`.
    pub fn complete_at(&mut self, id: u64, t_ns: u64, tokens: u64, output: Option<&[u8]>) {
        let Some(i) = self.rec.check_open(id, "completion") else {
            return;
        };
        let stamped = self.rec.token_times_of(i).len() as u64;
        let n = if tokens == 0 { stamped } else { tokens };
        if n > 0 {
            if self.rec.tokens.is_empty() {
                self.rec.tokens = vec![0; self.rec.complete.len()];
            }
            self.rec.tokens[i] = n.min(u32::MAX as u64) as u32;
        }
        if self.rec.keep_outputs {
            self.rec
                .outputs
                .push((id, output.map(|o| o.to_vec()).unwrap_or_default()));
        }
        self.rec.complete[i] = t_ns.min(FAILED - 1);
        self.rec.completed += 1;
        self.progress.query_done(n, stamped);
    }

    /// Query `id` failed (the SUT could not produce it: a runtime error, a crashed worker).
    /// It stops being outstanding, contributes no latency, and the run is INVALID with
    /// `reason` among its causes.
    pub fn fail(&mut self, id: u64, reason: &str) {
        let Some(i) = self.rec.check_open(id, "failure") else {
            return;
        };
        self.rec.num_failed += 1;
        if self.rec.failures.len() < 100 {
            self.rec.failures.push(format!("query {id}: {reason}"));
        }
        self.rec.complete[i] = FAILED;
        self.rec.completed += 1;
        let stamped = self.rec.token_times_of(i).len() as u64;
        self.progress.query_done(stamped, stamped);
    }
}
